"""The consumer's fetch path: column-wise record building in ``AsyncSimpleConsumer._decode``,
``SimpleConsumer``'s fetch ahead, the blocking connection's pipelining (the response framing is
tested in tests/transport/test_frames.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.client import AsyncSimpleConsumer, ConsumerRecord, SimpleConsumer
from odradek.records import BatchBuilder, TimestampType
from odradek.testing import BrokerProcess

T0 = 1_700_000_000_000


# -- decoding into ConsumerRecord ---------------------------------------------------------------------
def _decode(data: bytes, offset: int, **config: Any) -> Any:
    c = AsyncSimpleConsumer(bootstrap_servers="127.0.0.1:1", **config)
    pd = SimpleNamespace(
        records=memoryview(bytearray(data)),
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
    )
    return c._decode("t", 2, offset, pd)


def _batch(base: int, n: int, *, lat: int | None = None, key: bytes | None = None) -> bytes:
    b = BatchBuilder(base_offset=base, log_append_time=lat)
    for i in range(n):
        b.append(T0 + i // 100, key, b"%08d" % (base + i) + b"v" * 92)
    return b.build()


def test_runs_of_records_decode_to_consumer_records() -> None:
    data = _batch(0, 9000) + _batch(9000, 500, lat=T0 + 5, key=b"k") + _batch(9500, 300)
    got = _decode(data, 0)
    assert len(got) == 9800 and got.next_offset == 9800
    assert all(type(r) is ConsumerRecord for r in got)
    assert [r.offset for r in got] == list(range(9800))
    assert [r.value[:8] for r in got] == [b"%08d" % i for i in range(9800)]
    first, lat = got[8999], got[9000]
    assert first == ConsumerRecord("t", 2, 8999, T0 + 89, TimestampType.CREATE_TIME, None, first.value, [])
    assert lat == ConsumerRecord("t", 2, 9000, T0 + 5, TimestampType.LOG_APPEND_TIME, b"k", lat.value, [])
    assert got[0].headers is not got[1].headers
    # starting inside a batch: the records before the offset are left out
    assert [r.offset for r in _decode(data, 8990)][:12] == list(range(8990, 9002))


def test_deserializers_apply_to_every_record() -> None:
    got = _decode(_batch(0, 300, key=b"k"), 0, key_deserializer=lambda b: b.decode(), value_deserializer=len)
    assert {(r.key, r.value) for r in got} == {("k", 100)} and len(got) == 300


# -- fetching ahead ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("odradek-fetch-path") / "data"
    with BrokerProcess(data_dir, overrides={"num.partitions": 1, "auto.create.topics.enable": "true"}) as proc:
        yield proc


def _produce(broker: BrokerProcess, topic: str, start: int, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 20000})
    for i in range(start, start + n):
        p.produce(topic, b"%d" % i, partition=0, timestamp=T0 + i)
    assert p.flush(30) == 0


def _read(c: SimpleConsumer, topic: str, start: int, end: int, max_bytes: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    offset = start
    while offset < end:
        part = c.fetch(topic, 0, offset, max_bytes)
        assert part.next_offset > offset
        out.extend(part)
        offset = part.next_offset
    return out


def test_fetch_ahead_gives_what_plain_fetches_give(broker: BrokerProcess) -> None:
    topic = "fetch-ahead"
    _produce(broker, topic, 0, 3000)
    with SimpleConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=50) as ahead, SimpleConsumer(
        bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=50
    ) as plain:
        plain.fetch_ahead = False
        want = _read(plain, topic, 0, 3000, 4000)
        assert plain._ahead is None
        assert _read(ahead, topic, 0, 3000, 4000) == want
        assert [r.value for r in want] == [b"%d" % i for i in range(3000)]

        # the next fetch is under way after a fetch that left records in the log
        part = ahead.fetch(topic, 0, 100, 4000)
        assert ahead._ahead is not None and ahead._ahead[0] == (topic, 0, part.next_offset, 4000)
        # any other call drops it, and reads what it asked for
        other = ahead.fetch(topic, 0, 7, 4000)
        assert other[0].offset == 7 and list(other) == want[7 : 7 + len(other)]
        # records produced after a fetch ahead are read by the fetches after it
        _produce(broker, topic, 3000, 500)
        got = list(other) + _read(ahead, topic, other.next_offset, 3500, 4000)
        assert [r.offset for r in got] == list(range(7, 3500))
        assert [r.timestamp for r in got] == [T0 + i for i in range(7, 3500)]
        # at the end of the log nothing is fetched ahead
        assert list(ahead.fetch(topic, 0, 3500, 4000)) == [] and ahead._ahead is None
        ahead.fetch(topic, 0, 0, 4000)
        assert ahead._ahead is not None  # closed with a fetch under way: fine


def test_async_clients_run_on_uvloop(broker: BrokerProcess) -> None:
    """Applications running uvloop (whose transports are not ``asyncio.Transport`` subclasses)
    produce and fetch with the asyncio clients as on the default loop."""
    uvloop = pytest.importorskip("uvloop")
    from odradek.client import AsyncProducer

    topic = "uvloop-clients"

    async def main() -> list[tuple[int, bytes | None]]:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
        try:
            for i in range(50):
                await producer.send(topic, b"v%d" % i, partition=0)
            await producer.flush(30)
        finally:
            await producer.close(30)
        consumer = AsyncSimpleConsumer({"bootstrap.servers": broker.bootstrap})
        try:
            got: list[tuple[int, bytes | None]] = []
            while len(got) < 50:
                records = await consumer.fetch(topic, 0, len(got), 1 << 20)
                assert records, "no progress"
                got += [(r.offset, r.value) for r in records]
            return got
        finally:
            await consumer.close()

    assert uvloop.run(main()) == [(i, b"v%d" % i) for i in range(50)]


def test_blocking_connection_answers_pipelined_requests_in_order(broker: BrokerProcess) -> None:
    """``BrokerConnection.send`` several requests, then ``receive`` their answers in order; the
    records of a large response (read into a reused buffer) stay intact while it is kept."""
    from confluent_kafka import Producer

    from odradek.client import Cluster
    from odradek.protocol.messages.fetch import FetchRequest
    from odradek.records import read_batches

    topic = "blocking-pipeline"
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 100_000})
    for i in range(30_000):
        p.produce(topic, b"%d" % i + b"." * 100, partition=0)
    assert p.flush(30) == 0

    def fetch(offset: int) -> FetchRequest:
        part = FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=200_000)
        topics = [FetchRequest.FetchTopic(topic=topic, partitions=[part])]
        return FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=200_000, topics=topics)

    cluster = Cluster(broker.bootstrap, timeout=10)
    try:
        conn = cluster.leader_of(topic, 0)
        starts = [0, 9000, 18000, 27000]
        for s in starts:
            conn.send(fetch(s), 12)
        responses = [conn.receive() for _ in starts]  # all kept: their buffers are not reused
        for s, resp in zip(starts, responses, strict=True):
            records = resp.responses[0].partitions[0].records
            assert isinstance(records, memoryview) and len(records) > 65536  # a large frame's view
            values = [r.value for b in read_batches(bytes(records)) for r in b.records if r.offset >= s]
            assert values[:500] == [b"%d" % i + b"." * 100 for i in range(s, s + 500)]
        assert len({id(r.responses[0].partitions[0].records.obj) for r in responses}) == len(starts)
    finally:
        cluster.close()
