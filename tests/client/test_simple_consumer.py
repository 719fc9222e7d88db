"""SimpleConsumer / AsyncSimpleConsumer against a real broker, with confluent-kafka as the
producer that writes the data (so the bytes on the wire are librdkafka's, every codec)."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client import (
    AsyncSimpleConsumer,
    ConsumerRecord,
    FetchedRecords,
    RawFetched,
    SimpleConsumer,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.fetch import FetchRequest, FetchResponse
from odradek.protocol.messages.list_offsets import ListOffsetsRequest
from odradek.records import BatchBuilder, TimestampType, end_txn_marker, read_batches
from odradek.testing import BrokerProcess

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("odradek-simple-consumer") / "data"
    with BrokerProcess(data_dir, overrides={"num.partitions": 1, "auto.create.topics.enable": "true"}) as proc:
        yield proc


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:100]
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def consumer(broker: BrokerProcess) -> Iterator[SimpleConsumer]:
    with SimpleConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=100) as c:
        yield c


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result(15)


def produce(broker: BrokerProcess, topic: str, records: list[dict[str, Any]], **config: Any) -> list[tuple[int, int]]:
    """Produce with confluent-kafka; returns each record's (partition, offset) in send order."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **config})
    acks: dict[int, tuple[int, int]] = {}

    def on_delivery(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            assert err is None, err
            acks[i] = (msg.partition(), msg.offset())

        return cb

    for i, r in enumerate(records):
        p.produce(topic, on_delivery=on_delivery(i), **r)
        p.poll(0)
    assert p.flush(30) == 0
    return [acks[i] for i in range(len(records))]


def read_all(c: SimpleConsumer, topic: str, partition: int, start: int, end: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    offset = start
    deadline = time.monotonic() + 30
    while offset < end:
        assert time.monotonic() < deadline, f"stuck at offset {offset}"
        got = c.fetch(topic, partition, offset)
        out.extend(got)
        assert got.next_offset >= offset
        offset = got.next_offset
    return out


def sample_records(n: int) -> list[dict[str, Any]]:
    """Keys, null keys, null values, headers (incl. a null header value), varied sizes."""
    recs: list[dict[str, Any]] = []
    for i in range(n):
        r: dict[str, Any] = {"partition": 0, "timestamp": T0 + i * 7}
        r["key"] = None if i % 5 == 0 else f"key-{i}".encode()
        r["value"] = None if i % 11 == 3 else (bytes([i % 256]) * (i % 300) + f"value-{i}".encode())
        if i % 3 == 0:
            r["headers"] = [("h1", f"x{i}".encode()), ("empty", b""), ("null", None)]
        recs.append(r)
    return recs


def expected(topic: str, recs: list[dict[str, Any]], acks: list[tuple[int, int]]) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(
            topic, p, o, r["timestamp"], TimestampType.CREATE_TIME, r["key"], r["value"], list(r.get("headers", []))
        )
        for r, (p, o) in zip(recs, acks)
    ]


# -- data -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_reads_what_confluent_produced(broker: BrokerProcess, consumer: SimpleConsumer, topic: str, codec: str) -> None:
    recs = sample_records(400)
    acks = produce(broker, topic, recs, **{"compression.type": codec, "batch.size": 8000})
    assert [o for _p, o in acks] == list(range(400))
    want = expected(topic, recs, acks)

    got = read_all(consumer, topic, 0, 0, 400)
    assert got == want
    assert all(isinstance(r, ConsumerRecord) and r.timestamp_type == TimestampType.CREATE_TIME for r in got)

    # starting inside a (compressed) batch skips the records before the offset
    for start in (1, 137, 399):
        part = consumer.fetch(topic, 0, start)
        assert isinstance(part, FetchedRecords)
        assert part and part[0].offset == start
        assert list(part) == want[start : start + len(part)]
        assert part.high_watermark == 400


def test_multi_fetch_across_partitions_and_topics(broker: BrokerProcess, consumer: SimpleConsumer, topic: str) -> None:
    other = topic + "-b"
    create_topic(broker, topic, 3)
    create_topic(broker, other, 1)
    counts = {0: 5, 1: 12, 2: 0}
    recs = [
        {"partition": p, "key": f"{p}".encode(), "value": f"{p}-{i}".encode(), "timestamp": T0 + i}
        for p, n in counts.items()
        for i in range(n)
    ]
    produce(broker, topic, recs)
    produce(broker, other, [{"partition": 0, "value": b"other", "timestamp": T0}])

    got = consumer.multi_fetch({(topic, 0): 0, (topic, 1): 4, (topic, 2): 0, (other, 0): 0})
    assert set(got) == {(topic, 0), (topic, 1), (topic, 2), (other, 0)}
    assert [r.value for r in got[(topic, 0)]] == [f"0-{i}".encode() for i in range(5)]
    assert [r.offset for r in got[(topic, 1)]] == list(range(4, 12))
    assert [r.value for r in got[(topic, 1)]] == [f"1-{i}".encode() for i in range(4, 12)]
    assert list(got[(topic, 2)]) == [] and got[(topic, 2)].next_offset == 0
    assert [(r.topic, r.partition, r.value) for r in got[(other, 0)]] == [(other, 0, b"other")]
    for (t, p), fr in got.items():
        n = counts[p] if t == topic else 1
        assert fr.high_watermark == n and fr.next_offset == n and fr.log_start_offset == 0
        assert fr.topic == t and fr.partition == p


def test_fetch_max_bytes_and_old_fetch_versions(broker: BrokerProcess, consumer: SimpleConsumer, topic: str) -> None:
    recs = [{"partition": 0, "key": b"k%d" % i, "value": bytes([65 + i % 26]) * 500, "timestamp": T0 + i} for i in range(60)]
    produce(broker, topic, recs, **{"batch.size": 4000, "compression.type": "none"})
    want = [(i, T0 + i, b"k%d" % i, bytes([65 + i % 26]) * 500) for i in range(60)]

    # a first batch larger than max_bytes still comes back whole (KIP-74, Fetch v3+)
    small = consumer.fetch(topic, 0, 0, max_bytes=64)
    assert small and [(r.offset, r.timestamp, r.key, r.value) for r in small] == want[: len(small)]
    assert small.next_offset == len(small) < 60

    # Fetch v2 has hard limits: the broker returns part of a batch, the consumer retries with a
    # larger buffer; the data arrives down-converted to magic 1 and reads the same
    async def force_v2() -> None:
        conn = await consumer._async._cluster.connection(consumer._async._cluster.leader(topic, 0))
        conn.versions[FetchRequest.API_KEY] = (0, 2)

    consumer._call(force_v2())
    got: list[ConsumerRecord] = []
    offset = 0
    while offset < 60:
        part = consumer.fetch(topic, 0, offset, max_bytes=100)
        assert part, f"no progress at {offset}"
        got.extend(part)
        offset = part.next_offset
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == want
    mid = consumer.fetch(topic, 0, 7, max_bytes=100)
    assert mid[0].offset == 7


@pytest.mark.parametrize("max_version", [16, 12, 4, 2, 0])
def test_fetch_versions(broker: BrokerProcess, topic: str, max_version: int) -> None:
    """By topic id (13+), by name (<= 12), and the down-converted formats of v2-3 (magic 1: no
    headers) and v0-1 (magic 0: no timestamps)."""
    recs = [
        {"partition": 0, "key": None if i % 4 == 0 else b"k%d" % i, "value": b"v%d" % i, "timestamp": T0 + i, "headers": [("h", b"%d" % i)]}
        for i in range(30)
    ]
    produce(broker, topic, recs, **{"compression.type": "gzip", "batch.size": 300})
    with SimpleConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=50) as c:

        async def cap() -> None:
            cluster = c._async._cluster
            await cluster.topic(topic)
            conn = await cluster.connection(cluster.leader(topic, 0))
            conn.versions[FetchRequest.API_KEY] = (0, max_version)

        c._call(cap())
        got = read_all(c, topic, 0, 5, 30)
    assert [(r.offset, r.key, r.value) for r in got] == [(i, recs[i]["key"], recs[i]["value"]) for i in range(5, 30)]
    if max_version >= 4:
        assert [(r.timestamp, r.timestamp_type, r.headers) for r in got] == [
            (T0 + i, TimestampType.CREATE_TIME, [("h", b"%d" % i)]) for i in range(5, 30)
        ]
    elif max_version >= 2:
        assert [(r.timestamp, r.timestamp_type, r.headers) for r in got] == [
            (T0 + i, TimestampType.CREATE_TIME, []) for i in range(5, 30)
        ]
    else:
        assert {(r.timestamp, r.timestamp_type) for r in got} == {(-1, TimestampType.NO_TIMESTAMP_TYPE)}


def test_deserializers_and_async_face(broker: BrokerProcess, topic: str) -> None:
    produce(broker, topic, [{"partition": 0, "key": b"a", "value": b"1"}, {"partition": 0, "key": None, "value": None}])

    async def main() -> list[ConsumerRecord]:
        async with AsyncSimpleConsumer(
            {"bootstrap.servers": broker.bootstrap, "fetch.max.wait.ms": 50},
            key_deserializer=bytes.decode,
            value_deserializer=lambda b: int(b),
        ) as c:
            assert await c.partitions_for(topic) == [0]
            assert await c.latest_offset(topic, 0) == 2
            return list(await c.fetch(topic, 0, 0))

    got = asyncio.run(main())
    assert [(r.key, r.value) for r in got] == [("a", 1), (None, None)]


def test_raw_fetches_hand_over_the_batches_undecoded(broker: BrokerProcess, topic: str) -> None:
    produce(broker, topic, [{"partition": 0, "key": b"k%d" % i, "value": b"v%d" % i} for i in range(20)])

    async def main() -> tuple[FetchedRecords, FetchedRecords]:
        config = {"bootstrap.servers": broker.bootstrap, "fetch.max.wait.ms": 50}
        async with AsyncSimpleConsumer(config, raw=True) as raw, AsyncSimpleConsumer(config) as decoded:
            return await raw.fetch(topic, 0, 5), await decoded.fetch(topic, 0, 5)

    raw, decoded = asyncio.run(main())
    assert isinstance(raw, RawFetched) and len(raw) == 0 and raw.aborted is None
    assert (raw.topic, raw.partition, raw.next_offset) == (topic, 0, 5)  # where it was fetched: the caller decodes
    assert raw.high_watermark == decoded.high_watermark == 20 and raw.log_start_offset == 0
    records = [(r.offset, r.key, r.value) for b in read_batches(bytes(raw.raw)) for r in b.records if r.offset >= 5]
    assert records == [(r.offset, r.key, r.value) for r in decoded] and len(records) == 15


def test_raw_partition_data_under_read_committed_lists_aborted_transactions() -> None:
    pd = FetchResponse.PartitionData(
        partition_index=3, high_watermark=12, last_stable_offset=10, log_start_offset=2,
        aborted_transactions=[FetchResponse.AbortedTransaction(producer_id=7, first_offset=4)], records=b"abc",
    )
    committed = RawFetched.from_partition("t", 3, 4, pd, isolation_level=1)
    assert (committed.raw, committed.aborted, committed.last_stable_offset) == (b"abc", [(7, 4)], 10)
    assert RawFetched.from_partition("t", 3, 4, pd, isolation_level=0).aborted is None


# -- offsets --------------------------------------------------------------------------------------
def _segment_bases(broker: BrokerProcess, topic: str) -> list[int]:
    part_dir = broker.data_dir / f"{topic}-0"
    return sorted(int(p.stem) for p in part_dir.glob("*.log"))


def test_offsets_before_matches_log_segments(broker: BrokerProcess, consumer: SimpleConsumer, topic: str) -> None:
    create_topic(broker, topic, 1, {"segment.bytes": "2048"})
    # one request per batch of 4 records (~600 bytes): several segments roll
    for b in range(12):
        produce(
            broker,
            topic,
            [{"partition": 0, "value": bytes(120), "timestamp": T0 + 1000 * b + i} for i in range(4)],
            **{"linger.ms": 0, "compression.type": "none"},
        )
    end = 48
    bases = _segment_bases(broker, topic)
    assert len(bases) >= 4, bases
    ts_of = {b * 4 + i: T0 + 1000 * b + i for b in range(12) for i in range(4)}
    bounds = [*bases[1:], end]
    largest = [max(ts_of[o] for o in range(lo, hi)) for lo, hi in zip(bases, bounds)]

    assert consumer.offsets_before(topic, 0, -2, 10) == [0]
    assert consumer.offsets_before(topic, 0, -1) == [end]
    assert consumer.offsets_before(topic, 0, -1, 100) == [end, *reversed(bases)]
    assert consumer.offsets_before(topic, 0, -1, 3) == [end, bases[-1], bases[-2]]
    for k in range(len(bases) - 1):
        # the segments last written at or before a time: newest first
        when = largest[k]
        assert consumer.offsets_before(topic, 0, when, 100) == list(reversed(bases[: k + 1])), k
        assert consumer.offsets_before(topic, 0, when, 1) == [bases[k]]
    assert consumer.offsets_before(topic, 0, T0 - 1, 5) == []

    assert consumer.earliest_offset(topic, 0) == 0
    assert consumer.latest_offset(topic, 0) == end
    assert consumer.offset_for_time(topic, 0, T0 + 5000) == 20
    assert consumer.offset_for_time(topic, 0, T0 + 5001) == 21
    assert consumer.offset_for_time(topic, 0, T0 + 99_999) is None

    # a broker without ListOffsets v0: the single offset of v1+
    async def no_v0() -> None:
        conn = await consumer._async._cluster.connection(consumer._async._cluster.leader(topic, 0))
        hi = conn.versions[ListOffsetsRequest.API_KEY][1]
        conn.versions[ListOffsetsRequest.API_KEY] = (1, hi)

    consumer._call(no_v0())
    assert consumer.offsets_before(topic, 0, -1, 5) == [end]
    assert consumer.offsets_before(topic, 0, -2, 5) == [0]
    assert consumer.offsets_before(topic, 0, T0 + 3000, 5) == [12]


# -- unreachable brokers --------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_broker_fails_fast() -> None:
    port = _free_port()  # nobody listens there
    with SimpleConsumer(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=500) as c:
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
            c.fetch("t", 0, 0)
        assert time.monotonic() - t0 < 3
        with pytest.raises(ConnectionError):
            c.earliest_offset("t", 0)


# -- decoding details (no broker: crafted fetch responses) ------------------------------------------
def _batch(base: int, n: int, *, pid: int = -1, txn: bool = False, control: bool = False, commit: bool = True) -> bytes:
    b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                     base_sequence=0 if pid >= 0 else -1, is_transactional=txn, is_control=control)
    if control:
        key, value = end_txn_marker(commit, 0)
        b.append(T0, key, value)
    else:
        for i in range(n):
            b.append(T0 + base + i, None, b"%d" % (base + i))
    return b.build()


def _decode(data: bytes, offset: int, aborted: list[tuple[int, int]] | None = None, **config: Any) -> FetchedRecords:
    c = AsyncSimpleConsumer(bootstrap_servers="127.0.0.1:1", **config)
    pd = FetchResponse.PartitionData(
        partition_index=0,
        high_watermark=100,
        records=data,
        aborted_transactions=[FetchResponse.AbortedTransaction(producer_id=p, first_offset=o) for p, o in aborted or []],
    )
    return c._decode("t", 0, offset, pd)


def test_decode_truncated_tail_control_batches_and_offsets() -> None:
    data = _batch(0, 5) + _batch(5, 1, pid=7, txn=True, control=True) + _batch(6, 4)
    got = _decode(data + _batch(10, 5)[:-7], 2)  # the last batch is cut short: ignored
    assert [r.offset for r in got] == [2, 3, 4, 6, 7, 8, 9] and got.next_offset == 10
    assert [r.value for r in got] == [b"2", b"3", b"4", b"6", b"7", b"8", b"9"]
    # nothing but a control batch: no records, but the next offset moves past it
    only_control = _decode(_batch(5, 1, pid=7, txn=True, control=True), 5)
    assert list(only_control) == [] and only_control.next_offset == 6
    # empty data: nothing yet
    assert _decode(b"", 3).next_offset == 3


def test_decode_read_committed_skips_aborted_transactions() -> None:
    data = (
        _batch(0, 3, pid=1, txn=True)  # aborted below
        + _batch(3, 2, pid=2, txn=True)  # committed
        + _batch(5, 1, pid=1, txn=True, control=True, commit=False)
        + _batch(6, 1, pid=2, txn=True, control=True, commit=True)
        + _batch(7, 2, pid=1, txn=True)  # a later transaction of producer 1: committed
        + _batch(9, 1, pid=1, txn=True, control=True, commit=True)
        + _batch(10, 2)
    )
    committed = _decode(data, 0, aborted=[(1, 0)], isolation_level="read_committed")
    assert [r.offset for r in committed] == [3, 4, 7, 8, 10, 11] and committed.next_offset == 12
    uncommitted = _decode(data, 0, aborted=[(1, 0)])
    assert [r.offset for r in uncommitted] == [0, 1, 2, 3, 4, 7, 8, 10, 11]


def test_decode_corrupt_data() -> None:
    def corrupt(base: int) -> bytes:
        bad = bytearray(_batch(base, 3))
        bad[-2] ^= 0x01  # the last value byte ("2" -> "3"): the CRC no longer matches
        return bytes(bad)

    with pytest.raises(KafkaError) as info:
        _decode(corrupt(0), 0)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    # records before a corrupt batch are returned; the next fetch starts at it (and raises)
    good_then_bad = _decode(_batch(0, 2) + corrupt(2), 0)
    assert [r.offset for r in good_then_bad] == [0, 1] and good_then_bad.next_offset == 2
    # check.crcs=false: no checking
    assert [r.value for r in _decode(corrupt(0), 0, check_crcs=False)] == [b"0", b"1", b"3"]


