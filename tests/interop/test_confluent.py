"""confluent-kafka (librdkafka) against a real ``odradek serve``: producer, consumer, admin client.

Consumers use ``assign()`` only (no group membership, no commits).  Every produced record is read
back and compared field by field: partition, offset, key, value, headers and timestamp.
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from odradek.testing import BrokerProcess

from .interop_helpers import (
    DEFAULT_TIMEOUT,
    ErrorLog,
    admin,
    consume,
    consumer,
    create_topic,
    expect_tuples,
    produce_all,
    producer,
    record_tuple,
    stored_batches,
    wait_until,
)

pytestmark = pytest.mark.interop

BASE_TS = 1_700_000_000_000


def sample_records(n: int, seed: int, base_ts: int = BASE_TS) -> list[dict[str, Any]]:
    """Keys (some null), values (some null, some empty, binary, up to a few kB), headers in many shapes."""
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []
    header_shapes: list[list[tuple[str, bytes | None]] | None] = [
        None,
        [("trace", b"abc")],
        [("dup", b"1"), ("dup", b"2"), ("empty", b"")],
        [("null-value", None)],
        [("bin", bytes(range(256)))],
        [("ключ-🔑", "значение".encode())],
    ]
    for i in range(n):
        key: bytes | None = None if i % 4 == 1 else b"key-%d" % i
        if i % 5 == 2:
            value: bytes | None = None
        elif i % 7 == 3:
            value = b""
        else:
            # binary but compressible, so that librdkafka really compresses the batch
            size = rnd.choice([1, 17, 300, 4000])
            value = (rnd.randbytes(8) * (size // 8 + 1))[:size]
        rec: dict[str, Any] = {"key": key, "value": value, "timestamp": base_ts + 13 * i}
        headers = header_shapes[i % len(header_shapes)]
        if headers is not None:
            rec["headers"] = headers
        out.append(rec)
    return out


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_roundtrip_every_codec(broker: BrokerProcess, topic: str, compression: str) -> None:
    records = sample_records(60, seed=len(compression))
    errors = ErrorLog()
    # batch.num.messages keeps several multi-record batches per request.
    p = producer(
        broker.bootstrap,
        **{"compression.type": compression, "linger.ms": 5, "batch.num.messages": 16, "error_cb": errors},
    )
    reports = produce_all(p, topic, records)
    assert [r.offset for r in reports] == list(range(len(records)))
    assert all(r.partition == 0 for r in reports)
    got = consume(broker.bootstrap, topic, len(records))
    assert [record_tuple(m) for m in got] == expect_tuples(records)
    assert not errors.fatal()
    # the broker kept the producer's codec ("producer" compression.type) and the batching
    batches = stored_batches(broker.data_dir, topic)
    codes = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    assert all(b.magic == 2 for b in batches)
    assert len(batches) > 1
    # (librdkafka enables its LZ4 feature only when the broker advertises FindCoordinator v0,
    # and sends a batch uncompressed when compressing would not make it smaller)
    used = {b.compression for b in batches}
    assert codes[compression] in used and used <= {0, codes[compression]}


def test_keys_headers_and_nulls_on_several_partitions(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    per_partition: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 2: []}
    p = producer(broker.bootstrap, **{"linger.ms": 2})
    all_records = []
    for i, rec in enumerate(sample_records(45, seed=7)):
        rec = dict(rec, partition=i % 3)
        per_partition[i % 3].append(rec)
        all_records.append(rec)
    reports = produce_all(p, topic, all_records)
    for part, recs in per_partition.items():
        assert [r.offset for r in reports if r.partition == part] == list(range(len(recs)))
        got = consume(broker.bootstrap, topic, len(recs), partition=part)
        assert [record_tuple(m) for m in got] == expect_tuples(recs, partition=part)


def test_null_key_and_null_value_only(broker: BrokerProcess, topic: str) -> None:
    records: list[dict[str, Any]] = [
        {"key": None, "value": None, "timestamp": BASE_TS},
        {"key": b"", "value": b"", "timestamp": BASE_TS + 1},
        {"key": None, "value": b"v", "timestamp": BASE_TS + 2},
        {"key": b"k", "value": None, "timestamp": BASE_TS + 3},
    ]
    produce_all(producer(broker.bootstrap), topic, records)
    got = consume(broker.bootstrap, topic, len(records))
    assert [(m.key(), m.value()) for m in got] == [(r["key"], r["value"]) for r in records]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker: BrokerProcess, topic: str, acks: str) -> None:
    create_topic(broker.bootstrap, topic)
    records = sample_records(25, seed=11)
    p = producer(broker.bootstrap, **{"acks": acks, "linger.ms": 2, "enable.idempotence": False})
    reports = produce_all(p, topic, records)
    if acks != "0":
        # acks=0 gets no response, so librdkafka cannot know the offsets
        assert [r.offset for r in reports] == list(range(len(records)))
    got = consume(broker.bootstrap, topic, len(records))
    assert [record_tuple(m) for m in got] == expect_tuples(records)


def test_idempotent_producer(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    errors = ErrorLog()
    p = producer(
        broker.bootstrap,
        **{
            "enable.idempotence": True,
            "linger.ms": 1,
            "batch.num.messages": 5,
            "max.in.flight.requests.per.connection": 5,
            "error_cb": errors,
        },
    )
    records = [
        {"key": b"k%d" % i, "value": b"value-%d" % i, "timestamp": BASE_TS + i, "partition": i % 2}
        for i in range(200)
    ]
    reports = produce_all(p, topic, records)
    assert not errors.errors, errors.errors
    for part in (0, 1):
        recs = [r for r in records if r["partition"] == part]
        assert [r.offset for r in reports if r.partition == part] == list(range(len(recs)))
        got = consume(broker.bootstrap, topic, len(recs), partition=part)
        assert [record_tuple(m) for m in got] == expect_tuples(recs, partition=part)
        batches = stored_batches(broker.data_dir, topic, part)
        assert len(batches) > 1
        pids = {b.header.producer_id for b in batches}
        assert len(pids) == 1 and next(iter(pids)) >= 0
        # sequences continue from batch to batch without gaps
        seq = 0
        for b in batches:
            assert b.header.base_sequence == seq
            seq += b.header.record_count
    # a second idempotent producer gets another producer id
    p2 = producer(broker.bootstrap, **{"enable.idempotence": True})
    produce_all(p2, topic, [{"value": b"second", "partition": 0}])
    pids = {b.header.producer_id for b in stored_batches(broker.data_dir, topic, 0)}
    assert len(pids) == 2


def test_offsets_for_times(broker: BrokerProcess, topic: str) -> None:
    records = [{"value": b"v%d" % i, "timestamp": BASE_TS + 1000 * i} for i in range(10)]
    produce_all(producer(broker.bootstrap, **{"batch.num.messages": 3, "linger.ms": 5}), topic, records)
    c = consumer(broker.bootstrap)
    try:
        # one query per call: librdkafka merges duplicate partitions within one request
        queries = [BASE_TS - 5, BASE_TS, BASE_TS + 1500, BASE_TS + 3000, BASE_TS + 9000, BASE_TS + 9001]
        found = []
        for ts in queries:
            [tp] = c.offsets_for_times([ck.TopicPartition(topic, 0, ts)], timeout=DEFAULT_TIMEOUT)
            assert tp.error is None
            found.append(tp.offset)
        # past the last timestamp: no offset (-1, which librdkafka reports as OFFSET_END)
        assert found == [0, 0, 2, 3, 9, ck.OFFSET_END]
        assert c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=DEFAULT_TIMEOUT) == (0, 10)
    finally:
        c.close()


def test_log_append_time(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    records = [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": BASE_TS + i} for i in range(20)]
    reports = produce_all(
        producer(broker.bootstrap, **{"compression.type": "lz4", "linger.ms": 5}), topic, records
    )
    after = int(time.time() * 1000)
    for r in reports:
        assert r.timestamp[0] == ck.TIMESTAMP_LOG_APPEND_TIME
        assert before <= r.timestamp[1] <= after
    got = consume(broker.bootstrap, topic, len(records))
    assert [(m.offset(), m.key(), m.value()) for m in got] == [
        (i, r["key"], r["value"]) for i, r in enumerate(records)
    ]
    for m, r in zip(got, reports):
        ts_type, ts = m.timestamp()
        assert ts_type == ck.TIMESTAMP_LOG_APPEND_TIME
        assert before <= ts <= after
        assert ts == r.timestamp[1]


# ------------------------------------------------------------------------------------------------
# AdminClient


def test_admin_create_list_describe_delete_topics(broker: BrokerProcess, topic: str) -> None:
    a = admin(broker.bootstrap)
    other = topic + "-b"
    fs = a.create_topics(
        [
            NewTopic(topic, num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"}),
            NewTopic(other, num_partitions=1, replication_factor=1),
        ],
        request_timeout=DEFAULT_TIMEOUT,
    )
    for f in fs.values():
        f.result(timeout=DEFAULT_TIMEOUT)

    # creating it again, or with a bad config, fails with Kafka's error codes
    dup = a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic]
    with pytest.raises(ck.KafkaException) as exc:
        dup.result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
    bad = a.create_topics([NewTopic(topic + "-bad", 1, 1, config={"no.such.config": "1"})])[topic + "-bad"]
    with pytest.raises(ck.KafkaException) as exc:
        bad.result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG

    md = wait_until(lambda: (m := a.list_topics(timeout=5)) and topic in m.topics and other in m.topics and m)
    assert list(md.brokers) == [0]
    b0 = md.brokers[0]
    assert (b0.host, b0.port) == ("127.0.0.1", broker.port)
    t = md.topics[topic]
    assert t.error is None
    assert sorted(t.partitions) == [0, 1, 2]
    for pid, pm in t.partitions.items():
        assert (pm.id, pm.leader, pm.replicas, pm.isrs, pm.error) == (pid, 0, [0], [0], None)

    desc = a.describe_topics(ck.TopicCollection([topic]), request_timeout=DEFAULT_TIMEOUT)[topic].result(
        timeout=DEFAULT_TIMEOUT
    )
    assert desc.name == topic
    assert not desc.is_internal
    assert desc.topic_id is not None and str(desc.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA"
    assert [
        (pt.id, pt.leader.id, [r.id for r in pt.replicas], [r.id for r in pt.isr]) for pt in desc.partitions
    ] == [
        (0, 0, [0], [0]),
        (1, 0, [0], [0]),
        (2, 0, [0], [0]),
    ]
    cluster = a.describe_cluster(request_timeout=DEFAULT_TIMEOUT).result(timeout=DEFAULT_TIMEOUT)
    assert [n.id for n in cluster.nodes] == [0]
    assert cluster.controller is not None and cluster.controller.id == 0
    assert cluster.cluster_id

    for f in a.delete_topics([other], request_timeout=DEFAULT_TIMEOUT).values():
        f.result(timeout=DEFAULT_TIMEOUT)
    wait_until(lambda: other not in a.list_topics(timeout=5).topics, what=f"{other} gone from metadata")
    assert topic in a.list_topics(timeout=5).topics
    missing = a.delete_topics([other])[other]
    with pytest.raises(ck.KafkaException) as exc:
        missing.result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(ck.KafkaException) as exc:
        a.describe_topics(ck.TopicCollection([other]))[other].result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_create_topic_errors_and_validate_only(broker: BrokerProcess, topic: str) -> None:
    a = admin(broker.bootstrap)
    a.create_topics([NewTopic(topic, 2, 1)], validate_only=True)[topic].result(timeout=DEFAULT_TIMEOUT)
    assert topic not in a.list_topics(timeout=5).topics
    with pytest.raises(ck.KafkaException) as exc:
        a.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_REPLICATION_FACTOR
    with pytest.raises(ck.KafkaException) as exc:
        a.create_topics([NewTopic(topic, 0, 1)])[topic].result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS
    # -1 for both: the broker's num.partitions and default.replication.factor
    a.create_topics([NewTopic(topic)])[topic].result(timeout=DEFAULT_TIMEOUT)
    t = a.list_topics(topic, timeout=5).topics[topic]
    assert [(p.id, p.replicas) for p in t.partitions.values()] == [(0, [0])]
    # a name Kafka does not allow
    p = producer(broker.bootstrap, **{"message.timeout.ms": 5000})
    errors: list[ck.KafkaError] = []
    p.produce("no spaces allowed", b"x", on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert p.flush(DEFAULT_TIMEOUT) == 0
    assert [e.code() for e in errors] == [ck.KafkaError.TOPIC_EXCEPTION]


def test_admin_list_offsets(broker: BrokerProcess, topic: str) -> None:
    # timestamps out of order, so that the largest is not the last
    records = [{"value": b"v%d" % i, "timestamp": BASE_TS + (i * 7919) % 100} for i in range(10)]
    produce_all(producer(broker.bootstrap, **{"batch.num.messages": 4, "linger.ms": 5}), topic, records)
    a = admin(broker.bootstrap)
    tp = ck.TopicPartition(topic, 0)

    def lookup(spec: Any) -> tuple[int, int]:
        r = a.list_offsets({tp: spec}, request_timeout=DEFAULT_TIMEOUT)[tp].result(timeout=DEFAULT_TIMEOUT)
        return r.offset, r.timestamp

    assert lookup(OffsetSpec.earliest()) == (0, -1)
    assert lookup(OffsetSpec.latest()) == (10, -1)
    assert lookup(OffsetSpec.max_timestamp()) == (5, BASE_TS + 95)  # ListOffsets v7, timestamp -3
    assert lookup(OffsetSpec.for_timestamp(BASE_TS + 50)) == (3, BASE_TS + 57)


def _describe(a: Any, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return a.describe_configs([res], request_timeout=DEFAULT_TIMEOUT)[res].result(timeout=DEFAULT_TIMEOUT)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_admin_describe_and_alter_configs(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={"retention.ms": "3600000", "cleanup.policy": "delete"})
    a = admin(broker.bootstrap)

    entries = _describe(a, topic)
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"
    assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["segment.bytes"].value == str(1024 * 1024 * 1024)
    assert entries["message.timestamp.type"].value == "CreateTime"

    broker_res = ConfigResource(ResourceType.BROKER, "0")
    bentries = a.describe_configs([broker_res])[broker_res].result(timeout=DEFAULT_TIMEOUT)
    assert bentries["num.partitions"].value == "1"
    assert bentries["log.retention.hours"].value == "168"

    # AlterConfigs replaces the topic's whole override set
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "7200000"})
    a.alter_configs([res], request_timeout=DEFAULT_TIMEOUT)[res].result(timeout=DEFAULT_TIMEOUT)
    entries = wait_until(lambda: (e := _describe(a, topic)) and e["retention.ms"].value == "7200000" and e)
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    # IncrementalAlterConfigs: SET, DELETE and APPEND to a list config
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    a.incremental_alter_configs([res], request_timeout=DEFAULT_TIMEOUT)[res].result(timeout=DEFAULT_TIMEOUT)
    entries = wait_until(
        lambda: (e := _describe(a, topic)) and e["max.message.bytes"].value == "2000000" and e
    )
    assert entries["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert entries["cleanup.policy"].value == "delete,compact"

    # an invalid value is refused and changes nothing
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "not-a-number", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(ck.KafkaException) as exc:
        a.incremental_alter_configs([res])[res].result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    assert _describe(a, topic)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_admin_create_partitions(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    a = admin(broker.bootstrap)
    a.create_partitions([NewPartitions(topic, 3)], request_timeout=DEFAULT_TIMEOUT)[topic].result(
        timeout=DEFAULT_TIMEOUT
    )
    wait_until(
        lambda: len(a.list_topics(topic, timeout=5).topics[topic].partitions) == 3, what="3 partitions"
    )
    # fewer partitions than now is an error
    with pytest.raises(ck.KafkaException) as exc:
        a.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS
    records = [{"value": b"p2-%d" % i, "partition": 2, "timestamp": BASE_TS + i} for i in range(5)]
    reports = produce_all(producer(broker.bootstrap), topic, records)
    assert [(r.partition, r.offset) for r in reports] == [(2, i) for i in range(5)]
    got = consume(broker.bootstrap, topic, 5, partition=2)
    assert [record_tuple(m) for m in got] == expect_tuples(records, partition=2)


def test_admin_delete_records(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    records = [{"value": b"v%d" % i, "timestamp": BASE_TS + i} for i in range(10)]
    produce_all(producer(broker.bootstrap, **{"batch.num.messages": 3, "linger.ms": 5}), topic, records)
    a = admin(broker.bootstrap)
    fs = a.delete_records([ck.TopicPartition(topic, 0, 4)], request_timeout=DEFAULT_TIMEOUT)
    deleted = next(iter(fs.values())).result(timeout=DEFAULT_TIMEOUT)
    assert deleted.low_watermark == 4
    c = consumer(broker.bootstrap)
    try:
        assert c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=DEFAULT_TIMEOUT) == (4, 10)
    finally:
        c.close()
    got = consume(broker.bootstrap, topic, 6, offset=ck.OFFSET_BEGINNING)
    assert [record_tuple(m) for m in got] == expect_tuples(records[4:], first_offset=4)
    # an offset below the new start is out of range: auto.offset.reset=earliest lands on 4
    got = consume(broker.bootstrap, topic, 1, offset=1, conf={"auto.offset.reset": "earliest"})
    assert got[0].offset() == 4
    # delete everything up to the high watermark (-1)
    fs = a.delete_records([ck.TopicPartition(topic, 0, ck.OFFSET_END)], request_timeout=DEFAULT_TIMEOUT)
    assert next(iter(fs.values())).result(timeout=DEFAULT_TIMEOUT).low_watermark == 10
    # beyond the high watermark: refused
    fs = a.delete_records([ck.TopicPartition(topic, 0, 11)], request_timeout=DEFAULT_TIMEOUT)
    with pytest.raises(ck.KafkaException) as exc:
        next(iter(fs.values())).result(timeout=DEFAULT_TIMEOUT)
    assert exc.value.args[0].code() == ck.KafkaError.OFFSET_OUT_OF_RANGE
    # new records continue at 10 and are the only ones readable
    produce_all(producer(broker.bootstrap), topic, [{"value": b"after", "timestamp": BASE_TS}])
    [m] = consume(broker.bootstrap, topic, 1, offset=ck.OFFSET_BEGINNING)
    assert (m.offset(), m.value()) == (10, b"after")


def test_idempotent_producer_across_broker_restart(tmp_path: Path, topic: str) -> None:
    """The broker restores producer state on restart, so the same idempotent producer goes on."""
    first = BrokerProcess(tmp_path / "data").start()
    try:
        p = producer(
            first.bootstrap, **{"enable.idempotence": True, "linger.ms": 1, "batch.num.messages": 10}
        )
        produce_all(p, topic, [{"value": b"a%d" % i, "timestamp": BASE_TS + i} for i in range(30)])
    finally:
        assert first.stop() == 0
    second = BrokerProcess(tmp_path / "data", port=first.port).start()
    try:
        reports = produce_all(p, topic, [{"value": b"b%d" % i, "timestamp": BASE_TS + i} for i in range(30)])
        assert [r.offset for r in reports] == list(range(30, 60))
        got = consume(second.bootstrap, topic, 60)
        assert [m.value() for m in got] == [b"a%d" % i for i in range(30)] + [b"b%d" % i for i in range(30)]
        batches = stored_batches(second.data_dir, topic)
        assert len({b.header.producer_id for b in batches}) == 1
        assert [b.header.base_sequence for b in batches] == list(
            itertools.accumulate([0] + [b.header.record_count for b in batches[:-1]])
        )
    finally:
        assert second.stop() == 0
