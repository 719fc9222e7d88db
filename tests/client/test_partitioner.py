"""The default partitioner: Kafka's murmur2 (checked on the Java client's own test vectors and
against an independent transliteration of ``Utils.murmur2``), the same key -> partition
placement as librdkafka's ``murmur2_random`` and kafka-python, and sticky null keys (one
partition per batch)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from itertools import groupby, pairwise

import confluent_kafka as ck
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from odradek.client import DefaultPartitioner, Producer, murmur2, murmur2_partition
from odradek.testing import BrokerProcess
from tests.interop.interop_helpers import create_topic, stored_batches

TIMEOUT = 30.0

# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java)
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


def _i32(x: int) -> int:
    """Java int arithmetic: wrap to a signed 32-bit value."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _ushr(x: int, n: int) -> int:
    """Java's ``>>>`` on an int."""
    return _i32((x & 0xFFFFFFFF) >> n)


def java_murmur2(data: bytes) -> int:
    """A line-by-line transliteration of ``org.apache.kafka.common.utils.Utils.murmur2`` with
    Java's signed ints (independent of the implementation under test)."""
    length = len(data)
    seed = _i32(0x9747B28C)
    m = 0x5BD1E995
    r = 24
    h = _i32(seed ^ length)
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = (
            (data[i4 + 0] & 0xFF)
            + ((data[i4 + 1] & 0xFF) << 8)
            + ((data[i4 + 2] & 0xFF) << 16)
            + ((data[i4 + 3] & 0xFF) << 24)
        )
        k = _i32(k)
        k = _i32(k * m)
        k ^= _ushr(k, r)
        k = _i32(k * m)
        h = _i32(h * m)
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= (data[(length & ~3) + 2] & 0xFF) << 16
    if rest >= 2:
        h ^= (data[(length & ~3) + 1] & 0xFF) << 8
    if rest >= 1:
        h ^= data[length & ~3] & 0xFF
        h = _i32(h * m)
    h ^= _ushr(h, 13)
    h = _i32(h * m)
    h ^= _ushr(h, 15)
    return _i32(h)


def java_to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert java_murmur2(data) == expected  # the oracle itself is right


@given(st.binary(max_size=200))
def test_murmur2_matches_java_transliteration(data: bytes) -> None:
    assert murmur2(data) == java_murmur2(data)
    assert -(1 << 31) <= murmur2(data) < 1 << 31


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_partition_is_to_positive_modulo(key: bytes, partitions: int) -> None:
    assert murmur2_partition(key, partitions) == java_to_positive(java_murmur2(key)) % partitions
    # kafka-python's DefaultPartitioner uses the same hash (its murmur2 returns it positive)
    assert murmur2_partition(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def test_negative_hashes_are_made_positive_like_java() -> None:
    # murmur2(b"21") = -973932308; toPositive keeps the low 31 bits (not abs(): 973932308)
    assert -973932308 & 0x7FFFFFFF == 1173551340
    assert murmur2_partition(b"21", (1 << 31) - 1) == 1173551340
    assert murmur2_partition(b"21", 7) == 1173551340 % 7 != 973932308 % 7


def test_default_partitioner_sticky_for_null_keys() -> None:
    part = DefaultPartitioner()
    assert part("t", b"foobar", 7, list(range(7))) == murmur2_partition(b"foobar", 7)
    first = part("t", None, 7, list(range(7)))
    assert all(part("t", None, 7, list(range(7))) == first for _ in range(50))
    # a new batch moves on to another partition, among the available ones only
    for _ in range(50):
        nxt = part.new_batch("t", 7, [1, 4], previous=first)
        assert nxt in (1, 4) and nxt != first
        assert part("t", None, 7, [1, 4]) == nxt
        first = nxt
    # one partition available: it is chosen even if it was the previous one
    assert part.new_batch("t", 7, [3], previous=3) == 3
    # topics are independent
    assert part("other", None, 1, [0]) == 0


# ------------------------------------------------------------------------------------------------
# against a broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("partitioner") / "data")
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, "".join(proc.stderr_lines[-40:])


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def keys() -> list[bytes]:
    out = [b"", b"a", b"ab", b"abc", b"abcd", b"21", b"foobar", "ключ".encode(), bytes(range(256))]
    out += [b"user-%d" % i for i in range(150)]
    out += [bytes([(i * 37 + j) % 256 for j in range(i % 41)]) for i in range(60)]
    return list(dict.fromkeys(out))


def test_same_key_same_partition_as_librdkafka_murmur2_random(broker: BrokerProcess, topic: str) -> None:
    """confluent-kafka (``partitioner: murmur2_random``) and Odradek's producer write the same
    keys to two 7-partition topics: every key lands on the same partition number."""
    ck_topic, od_topic = f"{topic}-ck", f"{topic}-od"
    create_topic(broker.bootstrap, ck_topic, partitions=7)
    create_topic(broker.bootstrap, od_topic, partitions=7)
    ks = keys()

    ck_partition: dict[bytes, int] = {}
    errors: list[object] = []

    def report(err: object, msg: ck.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            ck_partition[msg.key() or b""] = msg.partition()

    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    p.list_topics(ck_topic, timeout=10)
    for k in ks:
        p.produce(ck_topic, value=b"v", key=k, on_delivery=report)
    assert p.flush(TIMEOUT) == 0 and not errors

    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as op:
        futures = {k: op.send(od_topic, b"v", key=k) for k in ks}
        od_partition = {k: f.result(TIMEOUT).partition for k, f in futures.items()}

    assert od_partition == ck_partition
    assert od_partition == {k: murmur2_partition(k, 7) for k in ks}
    assert len(set(od_partition.values())) == 7  # the keys spread over every partition

    # and a consumer finds each key where the producer said
    c = ck.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "partitioner", "enable.auto.commit": False}
    )
    try:
        c.assign([ck.TopicPartition(od_topic, i, ck.OFFSET_BEGINNING) for i in range(7)])
        seen: dict[bytes, int] = {}
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < len(ks) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                assert m.error() is None
                seen[m.key() or b""] = m.partition()
        assert seen == od_partition
    finally:
        c.close()


def test_null_keys_fill_one_partition_per_batch(broker: BrokerProcess, topic: str) -> None:
    """Null-key records go to one partition until its batch is full, then to another: the
    partitions of consecutive records form runs of exactly one batch each."""
    create_topic(broker.bootstrap, topic, partitions=7)
    value = b"x" * 50  # accounted as 50 + 32 bytes: 12 records fill a 1000-byte batch
    n = 600
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=1000, linger_ms=60_000) as p:
        futures = [p.send(topic, value) for _ in range(n)]
        assert p.flush(TIMEOUT) == 0
        parts = [f.result(0).partition for f in futures]
    runs = [(part, len(list(group))) for part, group in groupby(parts)]
    assert len(runs) == n // 12
    assert all(length == 12 for _, length in runs)
    assert all(a[0] != b[0] for a, b in pairwise(runs))  # a new batch, another partition
    assert len(set(parts)) >= 3
    # on the broker, every batch holds exactly one run
    counts = [b.record_count for part in range(7) for b in stored_batches(broker.data_dir, topic, part)]
    assert sum(counts) == n
    assert set(counts) == {12}


def test_null_keys_stay_put_until_the_batch_is_full(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=7)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as p:
        futures = [p.send(topic, b"small") for _ in range(200)]  # far below batch.size
        assert p.flush(TIMEOUT) == 0
        assert len({f.result(0).partition for f in futures}) == 1
        # keyed records are not sticky
        keyed = [p.send(topic, b"v", key=b"k%d" % i) for i in range(50)]
        assert [f.result(TIMEOUT).partition for f in keyed] == [
            murmur2_partition(b"k%d" % i, 7) for i in range(50)
        ]


def test_partitioner_ignore_keys(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=7)
    with Producer(bootstrap_servers=broker.bootstrap, partitioner_ignore_keys=True) as p:
        futures = [p.send(topic, b"v", key=b"k%d" % i) for i in range(100)]
        assert p.flush(TIMEOUT) == 0
        assert len({f.result(0).partition for f in futures}) == 1  # sticky, keys ignored
