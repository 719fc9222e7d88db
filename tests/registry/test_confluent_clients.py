"""confluent-kafka's Schema Registry client and its Avro, JSON Schema and Protobuf serializers,
unchanged, against Odradek's registry and broker: records round-trip through a topic, and
schemas evolve as Confluent's rules say (a compatible change is a new version, an incompatible
one is refused with 409 under BACKWARD and registered under NONE)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from odradek.testing import BrokerProcess

V1 = {"type": "record", "name": "Order", "namespace": "acme",
      "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": "string", "default": "none"}]}
V3_INCOMPATIBLE = {**V1, "fields": [*V1["fields"], {"name": "price", "type": "double"}]}


def produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def consume(broker: BrokerProcess, topic: str, count: int, timeout: float = 30) -> list[bytes]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            value = m.value()
            assert value is not None
            out.append(value)
    finally:
        c.close()
    assert len(out) == count, f"{len(out)} of {count} records"
    return out


@pytest.fixture(scope="module")
def client(registry_broker: BrokerProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_broker.registry_url})


def test_avro_round_trip_and_evolution(registry_broker: BrokerProcess, client: SchemaRegistryClient) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser1 = AvroSerializer(client, json.dumps(V1))
    ser2 = AvroSerializer(client, json.dumps(V2))
    values = [ser1({"id": "a", "qty": 1}, ctx), ser2({"id": "b", "qty": 2, "note": "rush"}, ctx)]
    # the framing: magic byte 0 and the schema id, big-endian
    ids = [int.from_bytes(v[1:5], "big") for v in values]
    assert values[0][0] == 0 and ids[0] != ids[1]
    assert client.get_versions(f"{topic}-value") == [1, 2]
    produce(registry_broker, topic, values)
    read = consume(registry_broker, topic, 2)
    # with the writers' schemas
    plain = AvroDeserializer(client)
    assert [plain(v, ctx) for v in read] == [{"id": "a", "qty": 1}, {"id": "b", "qty": 2, "note": "rush"}]
    # with v2 as the reader schema: the old record gets the default
    reader = AvroDeserializer(client, json.dumps(V2))
    assert reader(read[0], ctx) == {"id": "a", "qty": 1, "note": "none"}
    # an incompatible change is refused (409) under BACKWARD...
    with pytest.raises(Exception) as refused:
        AvroSerializer(client, json.dumps(V3_INCOMPATIBLE))({"id": "c", "qty": 3, "price": 1.5}, ctx)
    cause = refused.value.__cause__ or refused.value
    assert isinstance(cause, SchemaRegistryError) and cause.http_status_code == 409
    # ... and registered under NONE
    client.set_compatibility(subject_name=f"{topic}-value", level="NONE")
    third = AvroSerializer(client, json.dumps(V3_INCOMPATIBLE))({"id": "c", "qty": 3, "price": 1.5}, ctx)
    assert third is not None and client.get_versions(f"{topic}-value") == [1, 2, 3]


def test_schema_registry_client_calls(registry_broker: BrokerProcess, client: SchemaRegistryClient) -> None:
    subject = f"calls-{uuid.uuid4().hex[:8]}-value"
    schema_id = client.register_schema(subject, Schema(json.dumps(V1), "AVRO"))
    assert client.register_schema(subject, Schema(json.dumps(V1), "AVRO")) == schema_id
    assert subject in client.get_subjects()
    assert client.get_versions(subject) == [1]
    assert json.loads(client.get_schema(schema_id).schema_str) == V1
    assert client.lookup_schema(subject, Schema(json.dumps(V1), "AVRO")).version == 1
    assert client.test_compatibility(subject, Schema(json.dumps(V2), "AVRO")) is True
    assert client.test_compatibility(subject, Schema(json.dumps(V3_INCOMPATIBLE), "AVRO")) is False
    assert client.get_compatibility(subject_name=None) in ("BACKWARD", "NONE", "FORWARD", "FULL")
    client.set_compatibility(subject_name=subject, level="FULL")
    assert client.get_compatibility(subject_name=subject) == "FULL"
    assert client.delete_version(subject, 1) == 1
    client.register_schema(subject, Schema(json.dumps(V2), "AVRO"))
    assert client.delete_subject(subject) == [2]
    assert client.delete_subject(subject, permanent=True)
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_versions(subject)
    assert missing.value.error_code == 40401


def test_json_schema_round_trip_and_evolution(registry_broker: BrokerProcess, client: SchemaRegistryClient) -> None:
    topic = f"events-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
                     "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
                     "required": ["id"], "additionalProperties": False})
    v2 = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
                     "properties": {"id": {"type": "string"}, "n": {"type": "number"}, "tag": {"type": "string"}},
                     "required": ["id"], "additionalProperties": False})
    ser1, ser2 = JSONSerializer(v1, client), JSONSerializer(v2, client)
    values = [ser1({"id": "a", "n": 1}, ctx), ser2({"id": "b", "n": 2.5, "tag": "x"}, ctx)]
    assert client.get_versions(f"{topic}-value") == [1, 2]
    produce(registry_broker, topic, values)
    read = consume(registry_broker, topic, 2)
    deser = JSONDeserializer(v2, schema_registry_client=client)
    assert [deser(v, ctx) for v in read] == [{"id": "a", "n": 1}, {"id": "b", "n": 2.5, "tag": "x"}]
    # making a property required is incompatible
    v3 = json.dumps({**json.loads(v2), "required": ["id", "tag"]})
    with pytest.raises(Exception) as refused:
        JSONSerializer(v3, client)({"id": "c", "n": 1, "tag": "y"}, ctx)
    cause = refused.value.__cause__ or refused.value
    assert isinstance(cause, SchemaRegistryError) and cause.http_status_code == 409


def message_class(fields: list[tuple[str, int, int]], name: str = "Order") -> Any:
    """A Protobuf message class built at run time (as protoc's generated code would give)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="acme/order.proto", package="acme", syntax="proto3")
    msg = fdp.message_type.add(name=name)
    for fname, number, ftype in fields:
        msg.field.add(name=fname, number=number, type=ftype, label=1, json_name=fname)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"acme.{name}"))


STRING, INT32, INT64 = 9, 5, 3


def test_protobuf_round_trip_and_evolution(registry_broker: BrokerProcess, client: SchemaRegistryClient) -> None:
    topic = f"proto-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = message_class([("id", 1, STRING), ("qty", 2, INT32)])
    v2 = message_class([("id", 1, STRING), ("qty", 2, INT64), ("note", 3, STRING)])
    conf = {"use.deprecated.format": False}
    values = [ProtobufSerializer(v1, client, conf)(v1(id="a", qty=1), ctx),
              ProtobufSerializer(v2, client, conf)(v2(id="b", qty=2, note="x"), ctx)]
    assert client.get_latest_version(f"{topic}-value").version == 2
    stored = client.get_latest_version(f"{topic}-value").schema
    assert stored.schema_type == "PROTOBUF" and "int64 qty = 2;" in (stored.schema_str or "")
    produce(registry_broker, topic, values)
    read = consume(registry_broker, topic, 2)
    deser = ProtobufDeserializer(v2, {"use.deprecated.format": False}, client)
    got = [deser(v, ctx) for v in read]
    assert [(m.id, m.qty, m.note) for m in got] == [("a", 1, ""), ("b", 2, "x")]
    # a renumbered field is compatible (Confluent's rules: one field removed, another added)...
    renumbered = message_class([("id", 1, STRING), ("qty", 4, INT64), ("note", 3, STRING)])
    ProtobufSerializer(renumbered, client, conf)(renumbered(id="c", qty=3), ctx)
    assert client.get_versions(f"{topic}-value") == [1, 2, 3]
    # ... a field whose scalar kind changes is not
    changed = message_class([("id", 1, INT32), ("qty", 4, INT64), ("note", 3, STRING)])
    with pytest.raises(Exception) as refused:
        ProtobufSerializer(changed, client, conf)(changed(id=1, qty=3), ctx)
    cause = refused.value.__cause__ or refused.value
    assert isinstance(cause, SchemaRegistryError) and cause.http_status_code == 409
