"""Producer / AsyncProducer against a real ``odradek serve`` process, read back with
confluent-kafka (librdkafka) as the oracle.

Every record is checked byte for byte at the (partition, offset) the producer's RecordMetadata
reported: key, value, headers and timestamp.  One broker per module for the ordinary tests;
the failure tests (restarted, unreachable brokers, producer-id expiry) start brokers of their
own.  Broker errors and stopped brokers are tested on scripted brokers (test_edge_cases.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.client import AsyncProducer, ClientConfigError, Producer, RecordMetadata
from odradek.client.producer import FutureRecordMetadata
from odradek.errors import ErrorCode, KafkaError
from odradek.records import Compression
from odradek.testing import BrokerProcess, FakeScheduler, running_broker
from tests.interop.interop_helpers import create_topic, stored_batches

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TIMEOUT = 30.0
# metadata refreshes and retries at test speed
FAST: dict[str, Any] = {"retry.backoff.ms": 20, "metadata.max.age.ms": 5000, "request.timeout.ms": 10000}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("producer") / "data", overrides={"num.partitions": 1})
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, "".join(proc.stderr_lines[-40:])


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_back(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = TIMEOUT
) -> dict[tuple[int, int], ck.Message]:
    """Every record of ``topic`` (``count`` in all) with confluent-kafka ``assign()`` from the
    beginning, keyed by (partition, offset)."""
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-producer-tests",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        got: dict[tuple[int, int], ck.Message] = {}
        deadline = time.monotonic() + timeout
        while len(got) < count:
            assert time.monotonic() < deadline, f"read {len(got)} of {count} records of {topic}"
            for m in c.consume(num_messages=10000, timeout=0.2):
                assert m.error() is None, m.error()
                key = (m.partition(), m.offset())
                assert key not in got, f"{key} read twice"
                got[key] = m
        # nothing more than expected arrives
        extra = c.consume(num_messages=10, timeout=0.3)
        assert not [m for m in extra if m.error() is None], "more records than produced"
        return got
    finally:
        c.close()


def make_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Keys, null keys, null values, empty values, headers (repeated names, null values) and
    explicit timestamps, in a fixed pattern."""
    base_ts = 1_700_000_000_000 + seed
    out: list[dict[str, Any]] = []
    for i in range(n):
        rec: dict[str, Any] = {
            "key": None if i % 5 == 0 else f"key-{i % 17}".encode(),
            "value": None
            if i % 7 == 3
            else (b"" if i % 11 == 4 else bytes([i % 256]) * (i % 300) + b"v%d" % i),
            "timestamp": base_ts + i * 3,
        }
        if i % 3 == 0:
            rec["headers"] = [
                ("trace", b"t%d" % i),
                ("trace", None),
                ("empty", b""),
                ("ü-name", bytes(range(8))),
            ]
        out.append(rec)
    return out


def check_record(m: ck.Message, rec: Mapping[str, Any], md: RecordMetadata, topic: str) -> None:
    assert (m.topic(), m.partition(), m.offset()) == (topic, md.partition, md.offset)
    assert m.key() == rec["key"]
    assert m.value() == rec["value"]
    assert (m.headers() or []) == list(rec.get("headers") or [])
    assert m.timestamp() == (ck.TIMESTAMP_CREATE_TIME, rec["timestamp"])
    assert md.timestamp == rec["timestamp"]
    assert md.serialized_key_size == (-1 if rec["key"] is None else len(rec["key"]))
    assert md.serialized_value_size == (-1 if rec["value"] is None else len(rec["value"]))


# ------------------------------------------------------------------------------------------------
# interop: every codec, futures and callbacks, sync and async


@pytest.mark.parametrize("codec", CODECS)
def test_every_record_reads_back_identically(broker: BrokerProcess, topic: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    records = make_records(400, seed=CODECS.index(codec))
    callbacks: dict[int, tuple[BaseException | None, RecordMetadata | None]] = {}

    def on_delivery(i: int) -> Any:
        def cb(err: BaseException | None, md: RecordMetadata | None) -> None:
            callbacks[i] = (err, md)

        return cb

    with Producer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20, **FAST) as p:
        futures = [p.send(topic, **rec, on_delivery=on_delivery(i)) for i, rec in enumerate(records)]
        assert p.flush(TIMEOUT) == 0
        metas = [f.result(TIMEOUT) for f in futures]
    assert all(f.done() and f.exception() is None for f in futures)
    # callbacks saw exactly what the futures resolved to
    assert sorted(callbacks) == list(range(len(records)))
    assert [callbacks[i] for i in range(len(records))] == [(None, md) for md in metas]
    # offsets are unique and dense per partition
    per_partition: dict[int, list[int]] = {}
    for md in metas:
        assert md.topic == topic
        per_partition.setdefault(md.partition, []).append(md.offset)
    for offsets in per_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))
    got = read_back(broker.bootstrap, topic, 3, len(records))
    for rec, md in zip(records, metas, strict=True):
        check_record(got[(md.partition, md.offset)], rec, md, topic)
    # the batches on disk carry the codec (the producer compressed, the broker kept it)
    for part in per_partition:
        batches = stored_batches(broker.data_dir, topic, part)
        assert batches
        assert {b.compression for b in batches} == {Compression[codec.upper()]}
        assert all(b.producer_id >= 0 for b in batches)  # idempotence is on by default


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_async_producer_reads_back_identically(broker: BrokerProcess, topic: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(300, seed=99)
    called: list[tuple[int, BaseException | None, RecordMetadata | None]] = []

    async def main() -> tuple[list[RecordMetadata], RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, **FAST) as p:
            futures = []
            for i, rec in enumerate(records):
                futures.append(
                    await p.send(topic, **rec, on_delivery=lambda e, md, i=i: called.append((i, e, md)))
                )
            metas = list(await asyncio.gather(*futures))
            last = await p.send_and_wait(topic, b"last", key=b"k", partition=1, timestamp=5)
            assert await p.flush(TIMEOUT) == 0
            assert await p.partitions_for(topic) == [0, 1]
            return metas, last

    metas, last = asyncio.run(main())
    assert sorted(i for i, _, _ in called) == list(range(len(records)))
    assert all(e is None and md == metas[i] for i, e, md in called)
    got = read_back(broker.bootstrap, topic, 2, len(records) + 1)
    for rec, md in zip(records, metas, strict=True):
        check_record(got[(md.partition, md.offset)], rec, md, topic)
    m = got[(1, last.offset)]
    assert (last.partition, m.key(), m.value(), m.timestamp()) == (
        1,
        b"k",
        b"last",
        (ck.TIMESTAMP_CREATE_TIME, 5),
    )


def test_futures_wait_and_report_without_flush(broker: BrokerProcess, topic: str) -> None:
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=1000, **FAST) as p:
        t0 = time.monotonic()
        fut = p.send(topic, b"one")
        assert isinstance(fut, FutureRecordMetadata)
        assert not fut.done()
        md = fut.result(TIMEOUT)  # linger.ms passes, then the batch goes
        assert time.monotonic() - t0 >= 0.9
        assert fut.done() and md.offset == 0 and md.partition == 0
        # a short timeout on a record still lingering raises TimeoutError
        fut2 = p.send(topic, b"two")
        with pytest.raises(TimeoutError):
            fut2.result(0.01)
        assert fut2.result(TIMEOUT).offset == 1


# ------------------------------------------------------------------------------------------------
# serializers, interceptors, partitioners


class PrefixSerializer:
    """An object serializer (Kafka's Serializer interface): ``serialize(topic, data)``."""

    def __init__(self) -> None:
        self.topics: list[str] = []

    def serialize(self, topic: str, data: Any) -> bytes:
        self.topics.append(topic)
        return f"{topic}/{data}".encode()


def test_serializers_callable_and_object(broker: BrokerProcess, topic: str) -> None:
    key_ser = PrefixSerializer()
    records = [{"id": i, "name": "ä" * i} for i in range(20)]
    with Producer(
        bootstrap_servers=broker.bootstrap,
        key_serializer=key_ser,
        value_serializer=lambda v: json.dumps(v, sort_keys=True).encode(),
        **FAST,
    ) as p:
        futures = [p.send(topic, rec, key=rec["id"]) for rec in records]
        futures.append(p.send(topic, None, key=None))  # nulls are not passed to serializers
        metas = [f.result(TIMEOUT) for f in futures]
    assert key_ser.topics == [topic] * len(records)
    got = read_back(broker.bootstrap, topic, 1, len(futures))
    for rec, md in zip(records, metas, strict=False):
        m = got[(md.partition, md.offset)]
        assert m.key() == f"{topic}/{rec['id']}".encode()
        assert json.loads(m.value()) == rec
        assert md.serialized_key_size == len(m.key())
    m = got[(metas[-1].partition, metas[-1].offset)]
    assert (m.key(), m.value()) == (None, None)


def test_str_is_utf8_and_other_types_need_a_serializer(broker: BrokerProcess, topic: str) -> None:
    with Producer(bootstrap_servers=broker.bootstrap, **FAST) as p:
        md = p.send(topic, "välue", key="kéy", headers={"h": "vä"}).result(TIMEOUT)
        with pytest.raises(TypeError, match="value must be bytes"):
            p.send(topic, 12345)
        with pytest.raises(TypeError, match="key must be bytes"):
            p.send(topic, b"v", key=1.5)
        # bytearray and memoryview are accepted as bytes
        md2 = p.send(topic, bytearray(b"ba"), key=memoryview(b"mv")).result(TIMEOUT)
    got = read_back(broker.bootstrap, topic, 1, 2)
    m = got[(0, md.offset)]
    assert (m.key(), m.value(), m.headers()) == ("kéy".encode(), "välue".encode(), [("h", "vä".encode())])
    m2 = got[(0, md2.offset)]
    assert (m2.key(), m2.value()) == (b"mv", b"ba")


class RecordingInterceptor:
    def __init__(self, suffix: bytes) -> None:
        self.suffix = suffix
        self.sent: list[tuple[str, Any, Any]] = []
        self.acks: list[tuple[RecordMetadata | None, BaseException | None]] = []
        self.lock = threading.Lock()

    def on_send(self, topic: str, value: Any, key: Any) -> tuple[str, Any, Any]:
        self.sent.append((topic, value, key))
        return topic, value + self.suffix, key

    def on_acknowledgement(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        with self.lock:
            self.acks.append((metadata, error))


class AckOnly:
    """An interceptor without on_send (both methods are optional)."""

    def __init__(self) -> None:
        self.count = 0

    def on_acknowledgement(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        self.count += 1


def test_interceptors_see_sends_and_acknowledgements(broker: BrokerProcess, topic: str) -> None:
    first, second, ack_only = RecordingInterceptor(b"+1"), RecordingInterceptor(b"+2"), AckOnly()
    with Producer(bootstrap_servers=broker.bootstrap, interceptors=[first, second, ack_only], **FAST) as p:
        metas = [p.send(topic, b"v%d" % i, key=b"k").result(TIMEOUT) for i in range(5)]
    # chained in order: the second sees what the first returned
    assert first.sent == [(topic, b"v%d" % i, b"k") for i in range(5)]
    assert second.sent == [(topic, b"v%d+1" % i, b"k") for i in range(5)]
    got = read_back(broker.bootstrap, topic, 1, 5)
    assert [got[(0, md.offset)].value() for md in metas] == [b"v%d+1+2" % i for i in range(5)]
    for icpt in (first, second):
        assert [(md.partition, md.offset) if md else None for md, _ in icpt.acks] == [
            (0, i) for i in range(5)
        ]
        assert all(err is None for _, err in icpt.acks)
    assert ack_only.count == 5


def test_custom_partitioner(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=4)
    calls: list[tuple[str, bytes | None, int, list[int]]] = []

    def by_last_digit(t: str, key: bytes | None, partitions: int, available: Sequence[int]) -> int:
        calls.append((t, key, partitions, list(available)))
        return 3 if key is None else int(key[-1:]) % partitions

    with Producer(bootstrap_servers=broker.bootstrap, partitioner=by_last_digit, **FAST) as p:
        metas = [p.send(topic, b"v", key=b"k%d" % i).result(TIMEOUT) for i in range(8)]
        null_md = p.send(topic, b"null key").result(TIMEOUT)
        explicit = p.send(topic, b"explicit", key=b"k1", partition=0).result(TIMEOUT)
    assert [md.partition for md in metas] == [i % 4 for i in range(8)]
    assert null_md.partition == 3
    assert explicit.partition == 0
    assert len(calls) == 9  # an explicit partition bypasses the partitioner
    assert all(c[0] == topic and c[2] == 4 and c[3] == [0, 1, 2, 3] for c in calls)
    got = read_back(broker.bootstrap, topic, 4, 10)
    for i, md in enumerate(metas):
        assert got[(md.partition, md.offset)].key() == b"k%d" % i


def test_explicit_partition(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    with Producer(bootstrap_servers=broker.bootstrap, **FAST) as p:
        metas = [p.send(topic, b"v%d" % i, key=b"same", partition=i % 3).result(TIMEOUT) for i in range(9)]
        assert p.partitions_for(topic) == [0, 1, 2]
        with pytest.raises(KafkaError) as info:
            p.send(topic, b"v", partition=3)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert [md.partition for md in metas] == [0, 1, 2] * 3
    assert [md.offset for md in metas] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    got = read_back(broker.bootstrap, topic, 3, 9)
    assert [got[(md.partition, md.offset)].value() for md in metas] == [b"v%d" % i for i in range(9)]


# ------------------------------------------------------------------------------------------------
# acks, batching, backpressure, configuration


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker: BrokerProcess, topic: str, acks: int | str) -> None:
    """Many small batches (more than max.in.flight per partition) with each acks setting."""
    n = 3000
    conf = {"acks": acks, "batch.size": 2048, "linger.ms": 2, "enable.idempotence": acks == "all"}
    with Producer(bootstrap_servers=broker.bootstrap, **conf, **FAST) as p:
        futures = [p.send(topic, b"r%05d" % i) for i in range(n)]
        assert p.flush(TIMEOUT) == 0
        metas = [f.result(0) for f in futures]
    if acks == 0:
        assert {md.offset for md in metas} == {-1}  # no response, no offsets (like the Java client)
    else:
        assert [md.offset for md in metas] == list(range(n))
    got = read_back(broker.bootstrap, topic, 1, n)
    assert [got[(0, i)].value() for i in range(n)] == [b"r%05d" % i for i in range(n)]
    assert len(stored_batches(broker.data_dir, topic)) > 20  # batch.size did split them


def test_batch_size_and_linger(broker: BrokerProcess, topic: str) -> None:
    """Records sent together form batches of at most batch.size bytes; flush() sends at once."""
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=10_000, linger_ms=60_000, **FAST) as p:
        futures = [p.send(topic, b"x" * 100) for _ in range(1000)]
        t0 = time.monotonic()
        assert p.flush(TIMEOUT) == 0
        assert time.monotonic() - t0 < 20  # flush does not wait for linger.ms
        assert all(f.done() for f in futures)
    batches = stored_batches(broker.data_dir, topic)
    assert sum(b.record_count for b in batches) == 1000
    assert 10 <= len(batches) <= 30
    assert all(b.size <= 10_000 + 200 for b in batches)


@pytest.mark.parametrize("batch_size", [2048, 1 << 20])
def test_buffer_memory_backpressure(broker: BrokerProcess, topic: str, batch_size: int) -> None:
    """A tiny buffer.memory: send() waits for room and then proceeds; the buffer never
    overflows, and nothing waits for linger.ms when the buffer is full (also when
    batch.size is larger than buffer.memory: the open batch goes at once)."""
    limit = 8192
    n = 2000
    with Producer(
        bootstrap_servers=broker.bootstrap,
        buffer_memory=limit,
        batch_size=batch_size,
        linger_ms=60_000,
        max_block_ms=20_000,
        **FAST,
    ) as p:
        warm = p.send(topic, b"warm-up")
        assert p.flush(TIMEOUT) == 0 and warm.result(0).offset == 0
        core = p._core
        highest = 0
        t0 = time.monotonic()
        futures = []
        for i in range(n):
            futures.append(p.send(topic, b"%04d" % i + b"." * 96))
            highest = max(highest, core.buffered)
        elapsed = time.monotonic() - t0
        assert p.flush(TIMEOUT) == 0
    # 2000 x 100 bytes went through an 8 KiB buffer: sends had to wait for acknowledgements
    assert highest <= limit + 200
    assert elapsed < 50  # not a linger.ms (60 s) per wait: a full buffer sends at once
    metas = [f.result(0) for f in futures]
    assert [md.offset for md in metas] == list(range(metas[0].offset, metas[0].offset + n))
    got = read_back(broker.bootstrap, topic, 1, n + 1)
    assert [got[(0, md.offset)].value()[:4] for md in metas] == [b"%04d" % i for i in range(n)]


def test_async_buffer_memory_backpressure(broker: BrokerProcess, topic: str) -> None:
    async def main() -> list[RecordMetadata]:
        async with AsyncProducer(
            bootstrap_servers=broker.bootstrap,
            buffer_memory=4096,
            linger_ms=60_000,
            max_block_ms=20_000,
            **FAST,
        ) as p:
            futures = []
            highest = 0
            for i in range(1000):
                futures.append(await p.send(topic, b"%04d" % i + b"." * 96))
                highest = max(highest, p._core.buffered)
            assert highest <= 4096 + 200
            assert await p.flush(TIMEOUT) == 0  # the last batch would linger for 60 s
            return list(await asyncio.gather(*futures))

    t0 = time.monotonic()
    metas = asyncio.run(main())
    assert time.monotonic() - t0 < 50
    assert [md.offset for md in metas] == list(range(1000))


def test_lone_records_go_after_linger_ms(broker: BrokerProcess, topic: str) -> None:
    """One record at a time: each goes when its linger.ms (5) has passed, not when the
    sender happens to wake up."""
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5, **FAST) as p:
        p.send(topic, b"first").result(TIMEOUT)  # metadata, connection, producer id
        t0 = time.monotonic()
        for i in range(20):
            assert p.send(topic, b"v%d" % i).result(TIMEOUT).offset == i + 1
        assert time.monotonic() - t0 < 4  # 20 round trips; a 1 s wake-up each would be 20 s


def test_unknown_and_invalid_configuration_raise() -> None:
    with pytest.raises(ClientConfigError, match=r"linger\.mss"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "linger.mss": 5})
    with pytest.raises(ClientConfigError, match=r"batch\.sizes"):
        Producer(bootstrap_servers="127.0.0.1:1", batch_sizes=5)
    with pytest.raises(ClientConfigError, match=r"fetch\.min\.bytes"):
        AsyncProducer({"fetch.min.bytes": 1})  # a consumer setting
    with pytest.raises(ClientConfigError, match="acks"):
        Producer(acks=2)
    with pytest.raises(ClientConfigError, match="compression"):
        Producer(compression_type="brotli")
    with pytest.raises(ClientConfigError, match="idempotence"):
        Producer(acks=1)  # idempotence (the default) needs acks=all
    with pytest.raises(ClientConfigError, match="transactional"):
        Producer(transactional_id="tx", enable_idempotence=False)  # transactions need idempotence
    # dict and keyword names are the same settings; kwargs win
    p = Producer({"linger.ms": 7, "client.id": "a"}, client_id="b", bootstrap_servers="127.0.0.1:1")
    try:
        assert p._core.config["linger.ms"] == 7 and p._core.config["client.id"] == "b"
    finally:
        p.close(0.1)


def test_record_too_large_for_max_request_size(broker: BrokerProcess, topic: str) -> None:
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=1000, **FAST) as p:
        with pytest.raises(KafkaError) as info:
            p.send(topic, b"x" * 2000)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert p.send(topic, b"x" * 100).result(TIMEOUT).offset == 0


def test_close_is_idempotent_and_send_after_close_fails(broker: BrokerProcess, topic: str) -> None:
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=10_000, **FAST)
    fut = p.send(topic, b"pending")
    p.close()  # flushes first
    assert fut.done() and fut.result(0).offset == 0
    p.close()
    with pytest.raises(KafkaError, match="closed"):
        p.send(topic, b"late")


def test_many_topics_and_partitions_concurrently(broker: BrokerProcess, topic: str) -> None:
    """Several threads share one producer; every record lands once."""
    topics = [f"{topic}-{i}" for i in range(3)]
    for t in topics:
        create_topic(broker.bootstrap, t, partitions=3)
    results: list[list[tuple[str, bytes, FutureRecordMetadata]]] = [[] for _ in range(4)]
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=4096, **FAST) as p:

        def work(w: int) -> None:
            for i in range(500):
                t = topics[i % 3]
                v = b"w%d-%d" % (w, i)
                results[w].append((t, v, p.send(t, v, key=None if i % 2 else v)))

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert p.flush(TIMEOUT) == 0
    for t in topics:
        expected = {}
        for rs in results:
            for tt, v, f in rs:
                if tt == t:
                    md = f.result(0)
                    expected[(md.partition, md.offset)] = v
        got = read_back(broker.bootstrap, t, 3, len(expected))
        assert {k: m.value() for k, m in got.items()} == expected


def test_keyless_sends_from_threads_race_the_sender_and_land_once(broker: BrokerProcess, topic: str) -> None:
    """Records without a key take the lock-free path (the compiled appender's try_append); with
    tiny batches and no linger the sender closes batches all the time while four threads append:
    every future's offset is distinct and the log holds every record once, where its future says."""
    create_topic(broker.bootstrap, topic, partitions=2)
    results: list[list[tuple[bytes, FutureRecordMetadata]]] = [[] for _ in range(4)]
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=1024, linger_ms=0, **FAST) as p:

        def work(w: int) -> None:
            for i in range(3000):
                v = b"w%d-%d" % (w, i)
                results[w].append((v, p.send(topic, v)))

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert p.flush(TIMEOUT) == 0
        assert p._core.buffered == 0
    expected = {}
    for rs in results:
        for v, f in rs:
            md = f.result(0)
            assert (md.partition, md.offset) not in expected
            expected[(md.partition, md.offset)] = v
    assert len(expected) == 12_000
    got = read_back(broker.bootstrap, topic, 2, len(expected))
    assert {k: m.value() for k, m in got.items()} == expected


_PURE_CHILD = """
import json, sys
from odradek.client import Producer
from odradek.records import speedups
bootstrap, topic = sys.argv[1], sys.argv[2]
with Producer(bootstrap_servers=bootstrap, batch_size=2048, linger_ms=1) as p:
    futures = []
    for i in range(3000):
        if i % 3 == 0:
            futures.append(p.send(topic, b"v%d" % i))
        elif i % 3 == 1:
            futures.append(p.send(topic, b"v%d" % i, key=b"k%d" % i, headers=[("h", b"%d" % i)]))
        else:
            futures.append(p.send(topic, None, key=b"k%d" % i))
    p.flush(30)
    print(json.dumps([speedups.implementation(), [[f.result(0).partition, f.result(0).offset] for f in futures]]))
"""


def test_the_pure_python_producer_writes_what_it_says(broker: BrokerProcess, topic: str) -> None:
    """With the compiled record code off (ODRADEK_PURE_PYTHON=1, in a child process: the choice
    is made at import) the producer appends through the pure-Python appender under its lock:
    keyless, keyed, with headers and null values, every record where its future says."""
    create_topic(broker.bootstrap, topic, partitions=2)
    env = {**os.environ, "ODRADEK_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _PURE_CHILD, broker.bootstrap, topic],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )
    implementation, places = json.loads(out.stdout.strip().splitlines()[-1])
    assert implementation == "pure-python"
    got = read_back(broker.bootstrap, topic, 2, 3000)
    for i, (partition, offset) in enumerate(places):
        m = got[(partition, offset)]
        if i % 3 == 0:
            assert (m.key(), m.value(), m.headers()) == (None, b"v%d" % i, None)
        elif i % 3 == 1:
            assert (m.key(), m.value(), m.headers()) == (b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)])
        else:
            assert (m.key(), m.value()) == (b"k%d" % i, None)


# ------------------------------------------------------------------------------------------------
# failures


def test_broker_restart_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """acks=all + idempotence through a SIGTERM and a restart on the same port mid-run: every
    acknowledged record is in the log exactly once and nothing else is."""
    port = free_port()
    b = BrokerProcess(tmp_path / "data", port=port).start()
    n = 20_000
    topic = "restart"
    create_topic(b.bootstrap, topic, partitions=2)
    restarted = threading.Event()
    retried_while_down = threading.Event()
    futures: list[tuple[bytes, FutureRecordMetadata]] = []

    def restart() -> None:
        b.stop()
        # The broker starts again in a fraction of a second: back at once, it could come back before the
        # producer tried it, and no batch would need a second attempt. It stays down until the producer
        # has sent a batch into the closed port (a send there fails, and the batch is retried: its
        # second attempt) -- bounded: if that never happens the check below fails.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(f._batch.attempts > 1 for _, f in list(futures)):
                retried_while_down.set()
                break
            time.sleep(0.02)
        b.start()
        restarted.set()

    try:
        with Producer(
            bootstrap_servers=b.bootstrap,
            acks="all",
            enable_idempotence=True,
            batch_size=8192,
            linger_ms=2,
            delivery_timeout_ms=60_000,
            reconnect_backoff_ms=20,
            **FAST,
        ) as p:
            th: threading.Thread | None = None
            for i in range(n):
                v = b"rec-%06d" % i
                futures.append((v, p.send(topic, v, key=b"k%d" % (i % 50))))
                if i == n // 4:
                    th = threading.Thread(target=restart)
                    th.start()
                if i % 500 == 0:
                    time.sleep(0.05)  # pacing: spread the run (~2 s) over the restart
            assert th is not None
            th.join(60)
            assert restarted.is_set()
            assert p.flush(90) == 0
        acked = {}
        failed = []
        for v, f in futures:
            err = f.exception(0)
            if err is None:
                md = f.result(0)
                acked[v] = (md.partition, md.offset)
            else:
                failed.append((v, err))
        assert not failed, f"{len(failed)} records failed, e.g. {failed[:3]}"
        # the restart really hit the run: some batches needed more than one attempt
        assert retried_while_down.is_set(), "no batch was retried while the broker was down"
        assert max(f._batch.attempts for _, f in futures) > 1
        got = read_back(b.bootstrap, topic, 2, n, timeout=60)
        values = [m.value() for m in got.values()]
        assert len(values) == len(set(values)), "duplicates in the log"
        assert {m.value(): k for k, m in got.items()} == acked
        # per key, the log keeps send order (idempotence keeps ordering through retries)
        for part in (0, 1):
            offsets = sorted(o for pp, o in got if pp == part)
            assert offsets == list(range(len(offsets)))
            by_key: dict[bytes | None, list[bytes]] = {}
            for o in offsets:
                by_key.setdefault(got[(part, o)].key(), []).append(got[(part, o)].value())
            for vs in by_key.values():
                assert vs == sorted(vs)
    finally:
        b.kill()


def test_broker_forgets_the_producer_id(tmp_path: Path) -> None:
    """The broker expires the producer's state (producer.id.expiration.ms): the next batch gets
    UNKNOWN_PRODUCER_ID, the producer takes a new producer id, renumbers the batch from 0 and
    resends it: every record is written once.  The broker runs in this process on fake time: the
    producer's idle time passes without being waited out (the producer, on threads of its own,
    talks to it over the loopback as to any broker)."""
    fake = FakeScheduler()
    overrides = {"producer.id.expiration.ms": 300, "producer.id.expiration.check.interval.ms": 50}

    async def main() -> None:
        async with running_broker(tmp_path / "data", overrides=overrides, timers=fake) as b:
            host, port = b.bound["PLAINTEXT"]
            bootstrap = f"{host}:{port}"
            p = await asyncio.to_thread(Producer, bootstrap_servers=bootstrap, linger_ms=0, **FAST)
            try:
                first = await asyncio.to_thread(lambda: [p.send("expiry", b"a%d" % i).result(TIMEOUT) for i in range(3)])
                old_id = p._core.producer_id
                # the scenario: a producer idle for longer than the broker's producer.id.expiration.ms
                await fake.advance(1000)
                expired = await asyncio.to_thread(
                    lambda: not b.logs.get("expiry", 0).producers.entries  # type: ignore[union-attr]
                )
                assert expired, "the broker kept the idle producer's state"
                later = [await asyncio.to_thread(p.send, "expiry", b"b%d" % i) for i in range(50)]
                assert await asyncio.to_thread(p.flush, TIMEOUT) == 0
                metas = first + [f.result(0) for f in later]
                assert p._core.producer_id != old_id
                assert later[0]._batch.attempts == 2  # refused once, then resent renumbered
            finally:
                await asyncio.to_thread(p.close)
            assert [md.offset for md in metas] == list(range(53))
            got = await asyncio.to_thread(read_back, bootstrap, "expiry", 1, 53)
            assert [got[(0, i)].value() for i in range(53)] == (
                [b"a%d" % i for i in range(3)] + [b"b%d" % i for i in range(50)]
            )
            batches = stored_batches(tmp_path / "data", "expiry")
            assert {bt.producer_id for bt in batches} == {old_id, p._core.producer_id}
            assert min(bt.base_sequence for bt in batches if bt.producer_id != old_id) == 0

    asyncio.run(asyncio.wait_for(main(), 120))


def test_unreachable_broker_gives_a_clear_timeout() -> None:
    port = free_port()  # nothing listens there
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=1000, delivery_timeout_ms=2000)
    try:
        t0 = time.monotonic()
        with pytest.raises(KafkaError) as info:
            p.send("t", b"x")
        waited = time.monotonic() - t0
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
        msg = str(info.value)
        assert "not present in metadata after 1000 ms" in msg and f"127.0.0.1:{port}" in msg
        assert 0.9 <= waited < 5
    finally:
        t0 = time.monotonic()
        p.close(2)
        assert time.monotonic() - t0 < 5

    async def main() -> None:
        ap = AsyncProducer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=1000)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="producer id"):
            await ap.send("t", b"x")
        assert time.monotonic() - t0 < 5
        await ap.close()
        ap2 = AsyncProducer(
            bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=1000, enable_idempotence=False
        )
        with pytest.raises(KafkaError, match="not present in metadata"):
            await ap2.send("t", b"x")
        await ap2.close()

    asyncio.run(main())


