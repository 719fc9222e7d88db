"""kafka-python against a real ``odradek serve``: negotiated versions and the old message formats.

* default: ApiVersions negotiation, record batches v2 (kafka-python's producer is idempotent by
  default, so this also covers InitProducerId + sequences from a second implementation);
* ``api_version=(0, 10, 1)``: Produce v2 / Fetch v3, message format v1 (magic 1, timestamps);
* ``api_version=(0, 9)``: Produce v1 / Fetch v1, message format v0 (magic 0, no timestamps);
  the broker writes both as v2 batches, as Kafka does, and down-converts them for old fetches;
* records written by confluent-kafka (v2 batches, any codec) read through the old fetch versions,
  which makes the broker down-convert them.
"""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka as ck
import pytest
from kafka import TopicPartition
from kafka.consumer.fetcher import RecordTooLargeError

from odradek.testing import BrokerProcess

from .interop_helpers import (
    DEFAULT_TIMEOUT,
    V0_9,
    V0_10_1,
    consume,
    create_topic,
    kp_consumer,
    kp_producer,
    kp_read,
    kp_send,
    produce_all,
    producer,
    stored_batches,
)

pytestmark = pytest.mark.interop

BASE_TS = 1_600_000_000_000
CODEC_IDS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def sample(n: int, *, headers: bool, nulls: bool = True, base_ts: int = BASE_TS) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        rec: dict[str, Any] = {
            "key": None if nulls and i % 4 == 1 else b"key-%d" % i,
            # kafka-python refuses a record whose key and value are both null
            "value": None if nulls and i % 5 == 2 and i % 4 != 1 else (b"value-%d-" % i) * (1 + i % 9),
            "timestamp_ms": base_ts + 37 * i,
        }
        if headers:
            rec["headers"] = [("idx", b"%d" % i), ("dup", b"a"), ("dup", b"")] if i % 3 else []
        out.append(rec)
    return out


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_negotiated_versions_roundtrip(broker: BrokerProcess, topic: str, codec: str | None) -> None:
    records = sample(40, headers=True)
    p = kp_producer(broker, compression_type=codec, batch_size=2048)
    try:
        # ApiVersions negotiation picked a modern broker version (record batches, zstd, idempotence)
        assert p.config["api_version"] >= (2, 1)
        assert p.config["enable_idempotence"]
        futures = [p.send(topic, **r) for r in records]
        p.flush(DEFAULT_TIMEOUT)
        meta = [f.get(timeout=DEFAULT_TIMEOUT) for f in futures]
    finally:
        p.close(timeout=DEFAULT_TIMEOUT)
    assert [(m.partition, m.offset, m.timestamp) for m in meta] == [
        (0, i, r["timestamp_ms"]) for i, r in enumerate(records)
    ]
    got = kp_read(broker, topic, len(records))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp, r.timestamp_type) for r in got] == [
        (i, r["key"], r["value"], r["headers"], r["timestamp_ms"], 0) for i, r in enumerate(records)
    ]
    batches = stored_batches(broker.data_dir, topic)
    assert {b.magic for b in batches} == {2}
    assert {b.compression for b in batches} == {CODEC_IDS[codec]}
    assert len(batches) > 1
    assert all(b.header.producer_id >= 0 for b in batches)  # idempotent producer
    # confluent-kafka reads the same records (lz4 included)
    cgot = consume(broker.bootstrap, topic, len(records))
    assert [(m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()) for m in cgot] == [
        (i, r["key"], r["value"], r["headers"], (ck.TIMESTAMP_CREATE_TIME, r["timestamp_ms"]))
        for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
def test_message_format_v1(broker: BrokerProcess, topic: str, codec: str | None) -> None:
    records = sample(30, headers=False)
    # batches close when full (flush() sends the last one), not after linger 0 on a loaded machine
    meta = kp_send(broker, topic, records, V0_10_1, compression_type=codec, batch_size=1024, linger_ms=1000)
    assert [(m.offset, m.timestamp) for m in meta] == [(i, r["timestamp_ms"]) for i, r in enumerate(records)]
    batches = stored_batches(broker.data_dir, topic)
    assert {b.magic for b in batches} == {2}  # written as v2, as Kafka writes them
    assert {b.compression for b in batches} == {CODEC_IDS[codec]}
    assert len(batches) < len(records)  # a message set of several records is one batch

    def expect(first: int, with_ts: bool) -> list[tuple[Any, ...]]:
        return [
            (i, r["key"], r["value"], r["timestamp_ms"] if with_ts else None, 0 if with_ts else None)
            for i, r in enumerate(records)
        ][first:]

    # read back as magic 1 (Fetch v3): timestamps are kept
    got = kp_read(broker, topic, len(records), V0_10_1)
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in got] == expect(0, True)
    assert all(r.checksum is not None for r in got)  # legacy messages carry a CRC
    # from the middle of a compressed wrapper
    got = kp_read(broker, topic, len(records) - 7, V0_10_1, offset=7)
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in got] == expect(7, True)
    # down-converted to magic 0 (Fetch v1): no timestamps
    got = kp_read(broker, topic, len(records), V0_9)
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in got] == expect(0, False)
    # the negotiated client and librdkafka read the v2 batches, the timestamps kept
    got = kp_read(broker, topic, len(records))
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in got] == expect(0, True)
    cgot = consume(broker.bootstrap, topic, len(records))
    assert [(m.offset(), m.key(), m.value(), m.timestamp()) for m in cgot] == [
        (i, r["key"], r["value"], (ck.TIMESTAMP_CREATE_TIME, r["timestamp_ms"]))
        for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
def test_message_format_v0(broker: BrokerProcess, topic: str, codec: str | None) -> None:
    records = sample(30, headers=False)
    for r in records:
        del r["timestamp_ms"]  # magic 0 has no timestamps
    meta = kp_send(broker, topic, records, V0_9, compression_type=codec, batch_size=1024)
    assert [m.offset for m in meta] == list(range(len(records)))
    batches = stored_batches(broker.data_dir, topic)
    assert {b.magic for b in batches} == {2}  # written as v2, as Kafka writes them
    assert {b.compression for b in batches} == {CODEC_IDS[codec]}

    expected = [(i, r["key"], r["value"]) for i, r in enumerate(records)]
    for version in (V0_9, V0_10_1, None):
        got = kp_read(broker, topic, len(records), version)
        assert [(r.offset, r.key, r.value) for r in got] == expected, version
        assert all(r.timestamp in (None, -1) for r in got)
    got = kp_read(broker, topic, len(records) - 11, V0_9, offset=11)
    assert [(r.offset, r.key, r.value) for r in got] == expected[11:]
    # cross-client: librdkafka reads them with no timestamp (-1), as from Kafka
    cgot = consume(broker.bootstrap, topic, len(records))
    assert [(m.offset(), m.key(), m.value()) for m in cgot] == expected
    assert {m.timestamp() for m in cgot} == {(ck.TIMESTAMP_CREATE_TIME, -1)}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "zstd"])
def test_down_conversion_of_confluent_batches(broker: BrokerProcess, topic: str, codec: str) -> None:
    """v2 batches (headers, null keys/values, any codec) read by magic-0 and magic-1 consumers."""
    records = [
        {
            "key": None if i % 4 == 1 else b"k%d" % i,
            "value": None if i % 5 == 2 else (b"payload-%d " % i) * 20,
            "timestamp": BASE_TS + 1000 * i,
            "headers": [("h", b"%d" % i)],
        }
        for i in range(50)
    ]
    produce_all(
        producer(broker.bootstrap, **{"compression.type": codec, "batch.num.messages": 12, "linger.ms": 5}),
        topic,
        records,
    )
    assert {b.magic for b in stored_batches(broker.data_dir, topic)} == {2}

    got = kp_read(broker, topic, len(records), V0_10_1)
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.headers) for r in got] == [
        (i, r["key"], r["value"], r["timestamp"], 0, []) for i, r in enumerate(records)
    ]
    got = kp_read(broker, topic, len(records), V0_9)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
        (i, r["key"], r["value"], None) for i, r in enumerate(records)
    ]
    # starting inside a batch: the converted batch begins before the fetch offset
    for version in (V0_9, V0_10_1):
        got = kp_read(broker, topic, 50 - 17, version, offset=17)
        assert [(r.offset, r.key, r.value) for r in got] == [
            (i, r["key"], r["value"]) for i, r in enumerate(records)
        ][17:]


def test_down_conversion_log_append_time(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    records = [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": BASE_TS + i} for i in range(10)]
    produce_all(producer(broker.bootstrap, **{"compression.type": "gzip", "linger.ms": 5}), topic, records)
    after = int(time.time() * 1000)
    broker_ts = [m.timestamp() for m in consume(broker.bootstrap, topic, len(records))]
    assert all(t == ck.TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after for t, ts in broker_ts)
    got = kp_read(broker, topic, len(records), V0_10_1)
    assert [(r.offset, r.key, r.value, r.timestamp_type, r.timestamp) for r in got] == [
        (i, r["key"], r["value"], 1, broker_ts[i][1]) for i, r in enumerate(records)
    ]
    # and records written as magic 1 get the broker's time too
    kp_send(broker, topic, [{"key": b"old", "value": b"format", "timestamp_ms": BASE_TS}], V0_10_1)
    [r] = kp_read(broker, topic, 1, V0_10_1, offset=len(records))
    assert r.timestamp_type == 1 and r.timestamp >= before


def test_list_offsets_versions(broker: BrokerProcess, topic: str) -> None:
    records = [{"value": b"v%d" % i, "timestamp_ms": BASE_TS + 1000 * i} for i in range(8)]
    kp_send(broker, topic, records, batch_size=200)
    tp = TopicPartition(topic, 0)
    for version in (None, V0_10_1):
        with kp_consumer(broker, version) as c:
            assert c.beginning_offsets([tp]) == {tp: 0}
            assert c.end_offsets([tp]) == {tp: 8}
            found = c.offsets_for_times({tp: BASE_TS + 2500})[tp]
            assert (found.offset, found.timestamp) == (3, BASE_TS + 3000)
            assert c.offsets_for_times({tp: BASE_TS + 99_000})[tp] is None
    # ListOffsets v0 (the seeds' getOffsetsBefore) behind seek_to_end / seek_to_beginning
    with kp_consumer(broker, V0_9) as c:
        c.assign([tp])
        c.seek_to_end(tp)
        assert c.position(tp) == 8
        c.seek_to_beginning(tp)
        assert c.position(tp) == 0


def _uniform_batches(
    broker: BrokerProcess, topic: str, n: int, per_batch: int, value_size: int
) -> list[dict[str, Any]]:
    records = [
        {"key": b"k%04d" % i, "value": b"%04d" % i * (value_size // 4), "timestamp": BASE_TS + i}
        for i in range(n)
    ]
    # a batch goes when it holds per_batch records, long before a 1 s linger (5 ms split a batch
    # of 20 into 15 + 5 on a loaded machine); n is a multiple of per_batch, so none waits for it
    assert n % per_batch == 0
    produce_all(
        producer(broker.bootstrap, **{"batch.num.messages": per_batch, "linger.ms": 1000}), topic, records
    )
    return records


@pytest.mark.parametrize("version", [V0_9, V0_10_1])
def test_old_fetch_with_small_partition_limit(
    broker: BrokerProcess, topic: str, version: tuple[int, ...]
) -> None:
    """Every old fetch ends inside a batch; the broker drops the fragment after down-converting."""
    records = _uniform_batches(broker, topic, 120, per_batch=10, value_size=100)
    sizes = {b.size for b in stored_batches(broker.data_dir, topic)}
    limit = 2 * max(sizes) + max(sizes) // 2  # two and a half batches per fetch
    with kp_consumer(broker, version, max_partition_fetch_bytes=limit) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: list[Any] = []
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while len(got) < len(records):
            assert time.monotonic() < deadline, f"read {len(got)} of {len(records)}"
            for recs in c.poll(timeout_ms=200).values():
                got.extend(recs)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, r["key"], r["value"]) for i, r in enumerate(records)
    ]


def test_old_fetch_batch_larger_than_limit(broker: BrokerProcess, topic: str) -> None:
    """Fetch v1 has a hard limit: a batch that cannot fit is reported as too large (pre-KIP-74)
    rather than never arriving; Fetch v3 returns it anyway (KIP-74)."""
    records = _uniform_batches(broker, topic, 20, per_batch=20, value_size=200)
    # one batch of 20 records, ~4.4 KB; a loaded machine's librdkafka may still send it as two
    # (CI saw 9 + 11): what the test needs is that no stored batch fits in the 1000-byte limit
    sizes = [b.size for b in stored_batches(broker.data_dir, topic)]
    assert sizes and min(sizes) > 1000, sizes
    with kp_consumer(broker, V0_9, max_partition_fetch_bytes=1000) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        with pytest.raises(RecordTooLargeError):
            while time.monotonic() < deadline:
                assert not any(c.poll(timeout_ms=200).values())
    got: list[Any] = []
    with kp_consumer(broker, V0_10_1, max_partition_fetch_bytes=1000) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while len(got) < len(records):
            assert time.monotonic() < deadline
            for recs in c.poll(timeout_ms=200).values():
                got.extend(recs)
    assert [(r.offset, r.value) for r in got] == [(i, r["value"]) for i, r in enumerate(records)]


@pytest.mark.parametrize("version", [V0_9, V0_10_1, None])
@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks_with_every_protocol_generation(
    broker: BrokerProcess, topic: str, version: tuple[int, ...] | None, acks: int | str
) -> None:
    extra: dict[str, Any] = {"acks": acks}
    if version is None and acks != "all":
        extra["enable_idempotence"] = False  # idempotence requires acks=all
    records = [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(10)]
    meta = kp_send(broker, topic, records, version, **extra)
    if acks != 0:
        assert [m.offset for m in meta] == list(range(10))
    got = kp_read(broker, topic, 10, version)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, r["key"], r["value"]) for i, r in enumerate(records)
    ]
