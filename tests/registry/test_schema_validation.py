"""Broker-side schema validation (Confluent Server's ``confluent.{key,value}.schema.validation``
topic configs): real clients' framed records pass, unframed or wrongly framed ones are refused
with INVALID_RECORD and KIP-467 record errors, nothing of a refused batch is stored, and the
other partitions of the same request are appended."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess, WireClient, produce_request

ORDER = {"type": "record", "name": "Order", "namespace": "acme",
         "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
KEY = {"type": "record", "name": "OrderKey", "namespace": "acme", "fields": [{"name": "id", "type": "string"}]}
VALIDATE_VALUES = {"confluent.value.schema.validation": "true"}
PRODUCE_V9 = 9


@pytest.fixture(scope="module")
def admin(registry_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": registry_broker.bootstrap})


@pytest.fixture(scope="module")
def client(registry_broker: BrokerProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_broker.registry_url})


@pytest.fixture
def wire(registry_broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient("127.0.0.1", int(registry_broker.bootstrap.rsplit(":", 1)[1]))
    try:
        yield c
    finally:
        c.close()


def create(admin: AdminClient, configs: dict[str, str], partitions: int = 1) -> str:
    topic = f"validated-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
    return topic


def register(client: SchemaRegistryClient, subject: str, schema: dict[str, Any]) -> int:
    return int(client.register_schema(subject, Schema(json.dumps(schema), "AVRO")))


def framed(schema_id: int, payload: bytes = b"\x02a\x02") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def batch(records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    b = BatchBuilder()
    for key, value in records:
        b.append(1_700_000_000_000, key, value)
    return b.build()


def watermarks(broker: BrokerProcess, topic: str, partition: int) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        return int(low), int(high)
    finally:
        c.close()


def produce_all(broker: BrokerProcess, topic: str, items: list[tuple[int, bytes | None, bytes]],
                **config: Any) -> list[tuple[int, KafkaError | None]]:
    """Produce (partition, key, value) items in one flush; each delivery's (partition, error)."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200, "retries": 0, **config})
    out: list[tuple[int, KafkaError | None]] = []

    def report(err: KafkaError | None, msg: Any) -> None:
        out.append((msg.partition(), err))

    for partition, key, value in items:
        p.produce(topic, value, key, partition=partition, on_delivery=report)
    assert p.flush(30) == 0
    return sorted(out, key=lambda r: r[0])


def test_avro_serializer_passes_unframed_and_unknown_ids_get_invalid_record(
    registry_broker: BrokerProcess, admin: AdminClient, client: SchemaRegistryClient
) -> None:
    topic = create(admin, VALIDATE_VALUES, partitions=3)
    ser = AvroSerializer(client, json.dumps(ORDER))
    good = ser({"id": "a", "qty": 1}, SerializationContext(topic, MessageField.VALUE))
    other = register(client, f"elsewhere-{uuid.uuid4().hex[:6]}-value", {**ORDER, "name": "Other"})
    results = produce_all(registry_broker, topic, [
        (0, None, good),                     # framed with the id of <topic>-value: lands
        (1, None, b"plain bytes"),           # not framed
        (2, None, framed(other)),            # an id registered, but under another subject
    ])
    assert results[0] == (0, None)
    for partition, err in results[1:]:
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, (partition, err)
    assert watermarks(registry_broker, topic, 0) == (0, 1)
    assert watermarks(registry_broker, topic, 1) == (0, 0)
    assert watermarks(registry_broker, topic, 2) == (0, 0)
    # an id that names no schema at all
    [(_p, err)] = produce_all(registry_broker, topic, [(0, None, framed(2_000_000_000))])
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    assert watermarks(registry_broker, topic, 0) == (0, 1)


def test_a_topic_without_validation_takes_anything(registry_broker: BrokerProcess, admin: AdminClient) -> None:
    topic = create(admin, {})
    assert produce_all(registry_broker, topic, [(0, b"k", b"plain")]) == [(0, None)]


def test_record_errors_name_the_refused_records(
    registry_broker: BrokerProcess, admin: AdminClient, client: SchemaRegistryClient, wire: WireClient
) -> None:
    topic = create(admin, {**VALIDATE_VALUES, "confluent.key.schema.validation": "true"}, partitions=2)
    key_id = register(client, f"{topic}-key", KEY)
    value_id = register(client, f"{topic}-value", ORDER)
    bad = batch([(framed(key_id), framed(value_id)), (b"unframed", framed(value_id)), (None, None),
                 (framed(key_id), framed(key_id)), (framed(key_id), b"\x00\x00")])
    good = batch([(framed(key_id), framed(value_id)), (None, framed(value_id))])
    resp = wire.request(produce_request(topic, {0: bad, 1: good}), PRODUCE_V9)
    p0, p1 = resp.responses[0].partition_responses
    assert p0.error_code == ErrorCode.INVALID_RECORD and p0.base_offset == -1
    assert [e.batch_index for e in p0.record_errors] == [1, 3, 4]
    messages = [e.batch_index_error_message for e in p0.record_errors]
    assert "key is not framed" in messages[0]
    assert f"schema id {key_id}" in messages[1] and f"{topic}-value" in messages[1]
    assert "value is not framed" in messages[2]
    assert p0.error_message and "schema validation" in p0.error_message
    assert p1.error_code == 0 and p1.base_offset == 0
    assert watermarks(registry_broker, topic, 0) == (0, 0)


def test_a_large_batch_is_checked_too(
    registry_broker: BrokerProcess, admin: AdminClient, client: SchemaRegistryClient, wire: WireClient
) -> None:
    """More records than the loop reads itself: the worker's answer is the same."""
    topic = create(admin, VALIDATE_VALUES)
    value_id = register(client, f"{topic}-value", ORDER)
    records: list[tuple[bytes | None, bytes | None]] = [(None, framed(value_id))] * 3000
    records[1777] = (None, b"\x01" + value_id.to_bytes(4, "big"))
    resp = wire.request(produce_request(topic, batch(records)), PRODUCE_V9)
    p0 = resp.responses[0].partition_responses[0]
    assert p0.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in p0.record_errors] == [1777]
    records[1777] = (None, framed(value_id))
    resp = wire.request(produce_request(topic, batch(records)), PRODUCE_V9)
    assert resp.responses[0].partition_responses[0].error_code == 0
    assert watermarks(registry_broker, topic, 0) == (0, 3000)


def test_record_name_strategies(
    registry_broker: BrokerProcess, admin: AdminClient, client: SchemaRegistryClient, wire: WireClient
) -> None:
    name = f"acme.R{uuid.uuid4().hex[:8]}"
    schema = {**ORDER, "name": name.split(".")[1]}
    by_record = create(admin, {**VALIDATE_VALUES, "confluent.value.subject.name.strategy":
                               "io.confluent.kafka.serializers.subject.RecordNameStrategy"})
    by_topic_record = create(admin, {**VALIDATE_VALUES,
                                     "confluent.value.subject.name.strategy": "TopicRecordNameStrategy"})
    record_id = register(client, name, schema)
    topic_value_id = register(client, f"{by_record}-value", {**schema, "doc": "under the topic's subject"})
    topic_record_id = register(client, f"{by_topic_record}-{name}", {**schema, "doc": "topic and record"})

    def code(topic: str, schema_id: int) -> int:
        resp = wire.request(produce_request(topic, batch([(None, framed(schema_id))])), PRODUCE_V9)
        return int(resp.responses[0].partition_responses[0].error_code)

    assert code(by_record, record_id) == 0
    assert code(by_record, topic_value_id) == ErrorCode.INVALID_RECORD  # <topic>-value is not its subject here
    assert code(by_record, topic_record_id) == ErrorCode.INVALID_RECORD
    assert code(by_topic_record, topic_record_id) == 0
    assert code(by_topic_record, record_id) == ErrorCode.INVALID_RECORD


def test_kafka_python_key_validation(
    registry_broker: BrokerProcess, admin: AdminClient, client: SchemaRegistryClient
) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    topic = create(admin, {"confluent.key.schema.validation": "true"})
    key_id = register(client, f"{topic}-key", KEY)
    p = KafkaProducer(bootstrap_servers=registry_broker.bootstrap, retries=0)
    try:
        assert p.send(topic, key=framed(key_id), value=b"anything").get(30).offset == 0
        with pytest.raises(InvalidRecordError):
            p.send(topic, key=b"not framed", value=b"anything").get(30)
        with pytest.raises(InvalidRecordError):
            p.send(topic, key=framed(key_id + 1000), value=b"anything").get(30)
    finally:
        p.close(5)
    assert watermarks(registry_broker, topic, 0) == (0, 1)


def test_validation_configs_describe_and_alter(registry_broker: BrokerProcess, admin: AdminClient) -> None:
    topic = create(admin, {})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def described() -> dict[str, Any]:
        return dict(admin.describe_configs([resource])[resource].result(30))

    before = described()
    assert before["confluent.value.schema.validation"].value == "false"
    assert before["confluent.value.schema.validation"].source == ConfigSource.DEFAULT_CONFIG.value
    assert before["confluent.key.subject.name.strategy"].value == (
        "io.confluent.kafka.serializers.subject.TopicNameStrategy")
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("confluent.value.schema.validation", "true", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("confluent.value.subject.name.strategy",
                    "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
                    incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([change])[change].result(30)
    after = described()
    assert after["confluent.value.schema.validation"].value == "true"
    assert after["confluent.value.schema.validation"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert after["confluent.value.subject.name.strategy"].value.endswith("TopicRecordNameStrategy")
    # the altered topic now validates
    [(_p, err)] = produce_all(registry_broker, topic, [(0, None, b"plain")])
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    for name, value in (("confluent.value.subject.name.strategy", "NoSuchStrategy"),
                        ("confluent.key.schema.validation", "maybe")):
        bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(Exception) as exc_info:
            admin.incremental_alter_configs([bad])[bad].result(30)
        assert exc_info.value.args[0].code() == KafkaError.INVALID_CONFIG
    # deleting the override turns validation off again
    reset = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("confluent.value.schema.validation", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([reset])[reset].result(30)
    assert described()["confluent.value.schema.validation"].value == "false"
    assert produce_all(registry_broker, topic, [(0, None, b"plain")]) == [(0, None)]


@pytest.fixture(scope="module")
def fuzz_topic(admin: AdminClient, client: SchemaRegistryClient) -> tuple[str, int, int, list[int]]:
    topic = create(admin, {**VALIDATE_VALUES, "confluent.key.schema.validation": "true"})
    key_id = register(client, f"{topic}-key", KEY)
    value_id = register(client, f"{topic}-value", ORDER)
    return topic, key_id, value_id, [0]


def _field(ids: list[int]) -> st.SearchStrategy[bytes | None]:
    return st.one_of(
        st.none(),
        st.binary(max_size=12),
        st.builds(lambda i, rest: b"\x00" + i.to_bytes(4, "big") + rest,
                  st.sampled_from(ids) | st.integers(0, 2**32 - 1), st.binary(max_size=6)),
        st.builds(lambda magic, i: bytes([magic]) + i.to_bytes(4, "big"), st.integers(1, 255), st.sampled_from(ids)),
    )


@given(data=st.data())
def test_arbitrary_keys_and_values(
    registry_broker: BrokerProcess, fuzz_topic: tuple[str, int, int, list[int]], data: st.DataObject
) -> None:
    topic, key_id, value_id, stored = fuzz_topic
    ids = [key_id, value_id]
    records = data.draw(st.lists(st.tuples(_field(ids), _field(ids)), min_size=1, max_size=6))

    def ok(field: bytes | None, wanted: int) -> bool:
        return field is None or (len(field) >= 5 and field[0] == 0 and int.from_bytes(field[1:5], "big") == wanted)

    refused = [i for i, (k, v) in enumerate(records) if not (ok(k, key_id) and ok(v, value_id))]
    port = int(registry_broker.bootstrap.rsplit(":", 1)[1])
    wire = WireClient("127.0.0.1", port)
    try:
        resp = wire.request(produce_request(topic, batch(records)), PRODUCE_V9).responses[0].partition_responses[0]
        if refused:
            assert resp.error_code == ErrorCode.INVALID_RECORD
            assert [e.batch_index for e in resp.record_errors] == refused
        else:
            # offsets follow on: nothing of a refused batch was stored
            assert (resp.error_code, resp.base_offset) == (0, stored[0])
            stored[0] += len(records)
        assert wire.request(ApiVersionsRequest(), 3).error_code == 0  # the broker keeps serving
    finally:
        wire.close()


def test_a_broker_without_a_registry_refuses_validating_topics(tmp_path_factory: pytest.TempPathFactory) -> None:
    """No view of _schemas to check against: the batch is refused, saying why (never let through)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("no-registry") / "data",
                           overrides={"schema.registry.listeners": ""})
    broker.start()
    try:
        assert broker.registry_url is None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = create(admin, VALIDATE_VALUES)
        plain = create(admin, {})
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        wire = WireClient("127.0.0.1", port)
        try:
            resp = wire.request(produce_request(topic, batch([(None, framed(1))])), PRODUCE_V9)
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.INVALID_RECORD
            assert part.error_message and "no view of the schema registry" in part.error_message
            ok = wire.request(produce_request(plain, batch([(None, b"x")])), PRODUCE_V9)
            assert ok.responses[0].partition_responses[0].error_code == 0
        finally:
            wire.close()
    finally:
        broker.stop()


def test_a_batch_that_inflates_far_is_checked_in_a_worker(
    registry_broker: BrokerProcess, admin: AdminClient, client: SchemaRegistryClient, wire: WireClient
) -> None:
    """One record of 20 MiB compresses to a few kilobytes: past ``LOOP_DECOMPRESSED_BYTES`` the
    loop's check gives up (DecompressionLimitExceeded) and the worker's answer is the same as for
    any batch: framed values land, an unframed one is INVALID_RECORD."""
    from odradek.broker.offload import LOOP_DECOMPRESSED_BYTES
    from odradek.records import Compression, DecompressionLimitExceeded
    from odradek.schemas.validation import check_framing

    topic = create(admin, {**VALIDATE_VALUES, "max.message.bytes": str(8 << 20)})
    value_id = register(client, f"{topic}-value", ORDER)

    def one(value: bytes) -> bytes:
        b = BatchBuilder(compression=Compression.ZSTD)
        b.append(1_700_000_000_000, None, value)
        return b.build()

    good, bad = one(framed(value_id, bytes(20 << 20))), one(b"\x01" + bytes(20 << 20))
    with pytest.raises(DecompressionLimitExceeded):
        check_framing(good, None, frozenset({value_id}), max_decompressed=LOOP_DECOMPRESSED_BYTES)
    resp = wire.request(produce_request(topic, bad), PRODUCE_V9)
    p0 = resp.responses[0].partition_responses[0]
    assert p0.error_code == ErrorCode.INVALID_RECORD and [e.batch_index for e in p0.record_errors] == [0]
    resp = wire.request(produce_request(topic, good), PRODUCE_V9)
    assert resp.responses[0].partition_responses[0].error_code == 0
    assert watermarks(registry_broker, topic, 0) == (0, 1)
