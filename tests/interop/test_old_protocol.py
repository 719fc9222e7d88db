"""librdkafka speaking the 0.8 / 0.9 protocol (``api.version.request=false``,
``broker.version.fallback``: Produce and Fetch v0-1, message format v0, no timestamps) and the old
fetch versions of kafka-python, against Odradek: what they write and read is what Kafka gives.

* librdkafka's own test 0052 produces magic 0 messages and reads them back with a client of today:
  Kafka writes them as v2 batches, so the timestamps read are -1 (no timestamp) on a CreateTime
  topic and the broker's append time on a LogAppendTime topic (Odradek kept the message set as it
  came, and the client saw timestamp 0).
* Data of a log-append-time topic read through Fetch v0-1 is down-converted to magic 0, which has no
  timestamps (Odradek failed the fetch and closed the connection).
* A large batch read through Fetch v3 (magic 1) is converted from the fetch offset, up to the
  fetch's byte limit, in the broker's worker processes; a client reads it whole, chunk by chunk.
"""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest

from odradek.protocol.messages.fetch import FetchRequest
from odradek.records import BatchBuilder, Compression, read_batches
from odradek.testing import BrokerProcess, WireClient, produce_request

from .interop_helpers import V0_9, V0_10_1, consume, create_topic, kp_read, produce_all, producer

pytestmark = pytest.mark.interop

N = 20


def _old(fallback: str) -> dict[str, object]:
    return {"api.version.request": False, "broker.version.fallback": fallback}


def _records() -> list[dict[str, object]]:
    return [{"key": b"key%d" % i, "value": b"value%d" % i, "timestamp": 1234} for i in range(N)]


@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_magic_0_round_trip_timestamps(broker: BrokerProcess, topic: str, timestamp_type: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": timestamp_type})
    before = int(time.time() * 1000)
    old_producer = producer(
        broker.bootstrap, **_old("0.9.0.1"), **{"enable.idempotence": False, "compression.codec": codec,
                                                "batch.num.messages": N // 5}
    )
    produce_all(old_producer, topic, _records())
    after = int(time.time() * 1000)
    expected = [(i, b"key%d" % i, b"value%d" % i) for i in range(N)]

    got = consume(broker.bootstrap, topic, N)  # a client of today
    assert [(m.offset(), m.key(), m.value()) for m in got] == expected
    if timestamp_type == "CreateTime":
        assert {m.timestamp() for m in got} == {(ck.TIMESTAMP_CREATE_TIME, -1)}
    else:
        assert {m.timestamp()[0] for m in got} == {ck.TIMESTAMP_LOG_APPEND_TIME}
        assert all(before <= m.timestamp()[1] <= after for m in got), [m.timestamp() for m in got]

    for fallback in ("0.9.0.1", "0.8.2.2"):  # and the old clients read them back, without timestamps
        got = consume(broker.bootstrap, topic, N, conf=_old(fallback))
        assert [(m.offset(), m.key(), m.value()) for m in got] == expected, fallback
        assert {m.timestamp()[0] for m in got} == {ck.TIMESTAMP_NOT_AVAILABLE}, fallback


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_log_append_time_batches_read_as_magic_0(broker: BrokerProcess, topic: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    produce_all(producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 50}), topic, _records())
    expected = [(i, b"key%d" % i, b"value%d" % i) for i in range(N)]
    for fallback in ("0.9.0.1", "0.8.2.2"):
        got = consume(broker.bootstrap, topic, N, conf=_old(fallback))
        assert [(m.offset(), m.key(), m.value()) for m in got] == expected, fallback
    got = kp_read(broker, topic, N, V0_9)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [(*e, None) for e in expected]


def test_a_large_batch_read_by_old_fetches(broker: BrokerProcess, topic: str) -> None:
    """30,000 records in one lz4 batch: converted in the broker's workers, a chunk per fetch."""
    n = 30_000
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": str(16 << 20)})
    b = BatchBuilder(compression=Compression.LZ4)
    for i in range(n):
        b.append(1_600_000_000_000 + i, b"k%d" % i, b"v%d" % i)
    w = WireClient(broker.host, broker.port, "old-fetch", timeout=60)
    try:
        assert w.request(produce_request(topic, b.build()), 3).responses[0].partition_responses[0].error_code == 0
        # Fetch v3 from the middle, 64 KiB for the partition: at most that, from the fetch offset
        fetch = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                FetchRequest.FetchPartition(partition=0, fetch_offset=10_000, partition_max_bytes=64 << 10)
            ])],
        )
        part = w.request(fetch, 3).responses[0].partitions[0]
    finally:
        w.close()
    data = bytes(part.records)
    assert 0 < len(data) <= 64 << 10
    batches = list(read_batches(data))
    assert {x.magic for x in batches} == {1} and {x.compression for x in batches} == {Compression.LZ4}
    records = [r for x in batches for r in x.records]
    assert [(r.offset, r.timestamp, r.key) for r in records] == [
        (i, 1_600_000_000_000 + i, b"k%d" % i) for i in range(10_000, 10_000 + len(records))
    ]
    # kafka-python's old protocols read all of it, fetch after fetch
    for version in (V0_10_1, V0_9):
        got = kp_read(broker, topic, n, version)
        assert [(r.offset, r.key, r.value) for r in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(n)], version
