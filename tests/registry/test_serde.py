"""odradek.client.serde against Odradek's registry and broker, with confluent-kafka's serializers as
the oracle: records each writes the other reads, the bytes are the same, schema evolution, the
asyncio faces, the schema cache, the subject strategies and malformed frames."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema as CSchema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry import record_subject_name_strategy, topic_record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer as CAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as CAvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as CJSONDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as CJSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer as CProtobufDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as CProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client import AsyncConsumer, AsyncProducer, Consumer, Producer
from odradek.client._config import ClientConfigError
from odradek.client.serde import (
    AsyncAvroDeserializer,
    AsyncAvroSerializer,
    AsyncJSONSerializer,
    AsyncProtobufDeserializer,
    AsyncSchemaRegistryClient,
    AvroDeserializer,
    AvroSerializer,
    JSONDeserializer,
    JSONSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
    SchemaRegistryClient,
    SerializationError,
)
from odradek.errors import OdradekError
from odradek.testing import BrokerProcess

from .conftest import call

V1 = {"type": "record", "name": "Order", "namespace": "acme",
      "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": "string", "default": "none"},
                       {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}
JSON_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
               "properties": {"id": {"type": "string"}, "qty": {"type": "integer"}},
               "required": ["id"]}


def topic_name(prefix: str = "serde") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ctx(topic: str, key: bool = False) -> SerializationContext:
    return SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)


@pytest.fixture(scope="module")
def confluent(url: str) -> ConfluentRegistry:
    return ConfluentRegistry({"url": url})


@pytest.fixture
def registry(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient(url)


def subjects(url: str) -> list[str]:
    return list(call("GET", f"{url}/subjects").json)


# -- Avro ---------------------------------------------------------------------------------------


def test_avro_same_bytes_and_read_both_ways(registry: SchemaRegistryClient, confluent: ConfluentRegistry) -> None:
    topic = topic_name()
    ours = AvroSerializer(registry, json.dumps(V1))
    theirs = CAvroSerializer(confluent, json.dumps(V1))
    record = {"id": "a-ü", "qty": -7}
    mine = ours.serialize(topic, record)
    assert mine is not None
    # the same framing and payload as confluent-kafka's, under the same subject and id
    assert mine == theirs(record, ctx(topic))
    assert mine[0] == 0 and int.from_bytes(mine[1:5], "big") == confluent.get_latest_version(f"{topic}-value").schema_id
    assert CAvroDeserializer(confluent)(mine, ctx(topic)) == record
    assert AvroDeserializer(registry).deserialize(topic, theirs({"id": "b", "qty": 2}, ctx(topic))) == {"id": "b", "qty": 2}


def test_avro_through_odradeks_producer_and_consumer(registry_broker: BrokerProcess, registry: SchemaRegistryClient,
                                                     confluent: ConfluentRegistry) -> None:
    """Odradek's producer takes the serializers as key.serializer / value.serializer; its
    consumer the deserializers; confluent-kafka's deserializer reads what the producer wrote."""
    topic = topic_name()
    key_schema = json.dumps("string")
    producer = Producer(bootstrap_servers=registry_broker.bootstrap,
                        key_serializer=AvroSerializer(registry, key_schema, is_key=True),
                        value_serializer=AvroSerializer(registry, json.dumps(V1)))
    try:
        for i in range(3):
            producer.send(topic, {"id": f"o{i}", "qty": i}, key=f"k{i}")
        producer.flush(30)
    finally:
        producer.close()
    assert {f"{topic}-key", f"{topic}-value"} <= set(subjects(registry_broker.registry_url or ""))
    consumer = Consumer(bootstrap_servers=registry_broker.bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                        auto_offset_reset="earliest",
                        key_deserializer=AvroDeserializer(registry, is_key=True),
                        value_deserializer=AvroDeserializer(registry))
    got: list[Any] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(consumer.poll(0.5))
    finally:
        consumer.close()
    assert [(r.key, r.value) for r in got] == [(f"k{i}", {"id": f"o{i}", "qty": i}) for i in range(3)]


def test_avro_evolution_older_writer_read_with_newer_reader(registry: SchemaRegistryClient,
                                                            confluent: ConfluentRegistry) -> None:
    topic = topic_name()
    old = CAvroSerializer(confluent, json.dumps(V1))({"id": "a", "qty": 1}, ctx(topic))
    new = AvroSerializer(registry, json.dumps(V2)).serialize(topic, {"id": "b", "qty": 2, "note": "rush", "tags": ["x"]})
    assert new is not None and old[1:5] != new[1:5]
    # an explicit reader schema: the v1 record gets v2's defaults
    reader = AvroDeserializer(registry, json.dumps(V2))
    assert reader.deserialize(topic, old) == {"id": "a", "qty": 1, "note": "none", "tags": []}
    assert reader.deserialize(topic, new) == {"id": "b", "qty": 2, "note": "rush", "tags": ["x"]}
    # use.latest.version: the subject's latest schema is the reader
    latest = AvroDeserializer(registry, conf={"use.latest.version": True})
    assert latest.deserialize(topic, old) == {"id": "a", "qty": 1, "note": "none", "tags": []}
    # the newer writer read with the older reader (forward): the new fields are dropped
    assert AvroDeserializer(registry, json.dumps(V1)).deserialize(topic, new) == {"id": "b", "qty": 2}
    # and confluent-kafka reads Odradek's v2 record with v1 as its reader the same way
    assert CAvroDeserializer(confluent, json.dumps(V1))(new, ctx(topic)) == {"id": "b", "qty": 2}
    # a reader the writer cannot resolve to is a SerializationError, not a wrong value
    unresolvable = {**V1, "fields": [*V1["fields"], {"name": "price", "type": "double"}]}
    with pytest.raises(SerializationError):
        AvroDeserializer(registry, json.dumps(unresolvable)).deserialize(topic, old)


def test_avro_register_lookup_and_latest(registry: SchemaRegistryClient, confluent: ConfluentRegistry) -> None:
    topic = topic_name()
    # auto.register.schemas=false: a schema not registered is refused, with the registry's reason
    with pytest.raises(SerializationError) as refused:
        AvroSerializer(registry, json.dumps(V1), {"auto.register.schemas": False}).serialize(topic, {"id": "a", "qty": 1})
    assert isinstance(refused.value, OdradekError) and "40401" in str(refused.value)
    first = CAvroSerializer(confluent, json.dumps(V1))({"id": "a", "qty": 1}, ctx(topic))
    looked_up = AvroSerializer(registry, json.dumps(V1), {"auto.register.schemas": False})
    assert looked_up.serialize(topic, {"id": "a", "qty": 1}) == first
    CAvroSerializer(confluent, json.dumps(V2))({"id": "b", "qty": 2}, ctx(topic))
    # use.latest.version writes with the latest schema (v2), filling v2's defaults
    latest = AvroSerializer(registry, None, {"use.latest.version": True, "auto.register.schemas": False})
    framed = latest.serialize(topic, {"id": "c", "qty": 3, "note": "n", "tags": []})
    assert framed is not None
    assert int.from_bytes(framed[1:5], "big") == confluent.get_latest_version(f"{topic}-value").schema_id
    assert CAvroDeserializer(confluent)(framed, ctx(topic)) == {"id": "c", "qty": 3, "note": "n", "tags": []}


def test_subject_name_strategies_match_confluents(url: str, registry: SchemaRegistryClient,
                                                  confluent: ConfluentRegistry) -> None:
    topic = topic_name()
    name = f"N{uuid.uuid4().hex[:8]}"
    schema = json.dumps({**V1, "name": name})
    record = {"id": "a", "qty": 1}
    ours = AvroSerializer(registry, schema, {"subject.name.strategy": "RecordNameStrategy"}).serialize(topic, record)
    assert f"acme.{name}" in subjects(url)
    theirs = CAvroSerializer(confluent, schema, conf={"subject.name.strategy": record_subject_name_strategy})(
        record, ctx(topic))
    assert ours == theirs
    ours2 = AvroSerializer(registry, schema, {"subject.name.strategy": "TopicRecordNameStrategy"}).serialize(topic, record)
    assert f"{topic}-acme.{name}" in subjects(url)
    theirs2 = CAvroSerializer(confluent, schema, conf={"subject.name.strategy": topic_record_subject_name_strategy})(
        record, ctx(topic))
    assert ours2 == theirs2
    assert f"{topic}-value" not in subjects(url)


# -- the cache -------------------------------------------------------------------------------


def test_the_second_serialize_and_deserialize_make_no_http_call(url: str) -> None:
    topic = topic_name()
    registry = SchemaRegistryClient(url)
    ser = AvroSerializer(registry, json.dumps(V1))
    first = ser.serialize(topic, {"id": "a", "qty": 1})
    after_first = registry.http_requests
    assert after_first == 1  # one registration
    assert ser.serialize(topic, {"id": "b", "qty": 2}) is not None
    assert registry.http_requests == after_first
    # another serializer of the same schema on the same client: answered by the client's cache
    assert AvroSerializer(registry, json.dumps(V1)).serialize(topic, {"id": "c", "qty": 3}) is not None
    assert registry.http_requests == after_first
    # the deserializer: the id was registered through this client, so it is known already
    deser = AvroDeserializer(registry)
    assert deser.deserialize(topic, first) == {"id": "a", "qty": 1}
    assert registry.http_requests == after_first
    # a fresh client asks once per id, then never again
    other = SchemaRegistryClient(url)
    deser2 = AvroDeserializer(other)
    for _ in range(3):
        assert deser2.deserialize(topic, first) == {"id": "a", "qty": 1}
    assert other.http_requests == 1


# -- JSON Schema ---------------------------------------------------------------------------------


def test_json_schema_both_ways_and_validation(registry: SchemaRegistryClient, confluent: ConfluentRegistry) -> None:
    topic = topic_name("json")
    text = json.dumps(JSON_SCHEMA)
    record = {"id": "a", "qty": 2}
    mine = JSONSerializer(text, registry).serialize(topic, record)
    assert mine is not None
    theirs = CJSONSerializer(text, confluent)(record, ctx(topic))
    assert mine[:5] == theirs[:5] and json.loads(mine[5:]) == json.loads(theirs[5:])
    assert CJSONDeserializer(None, schema_registry_client=confluent)(mine, ctx(topic)) == record
    assert JSONDeserializer(None, registry).deserialize(topic, theirs) == record
    # confluent-kafka refuses an invalid value; so does Odradek's serializer
    with pytest.raises(SerializationError, match="validate"):
        JSONSerializer(text, registry).serialize(topic, {"qty": "many"})
    # and the deserializer validates what it reads against the writer schema
    bad = mine[:5] + b'{"qty":1}'
    with pytest.raises(SerializationError, match="validate"):
        JSONDeserializer(None, registry).deserialize(topic, bad)


# -- Protobuf ------------------------------------------------------------------------------------

STRING, INT32, INT64, MESSAGE = 9, 5, 3, 11


def message_classes(package: str) -> tuple[Any, Any, Any]:
    """Three message classes of one file built at run time (as protoc's generated code gives):
    ``First``, ``Order`` (the second message, holding ``Order.Line``)."""
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package}/order.proto", package=package, syntax="proto3")
    fdp.message_type.add(name="First").field.add(name="x", number=1, type=INT32, label=1, json_name="x")
    order = fdp.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=STRING, label=1, json_name="id")
    order.field.add(name="qty", number=2, type=INT64, label=1, json_name="qty")
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=STRING, label=1, json_name="sku")
    order.field.add(name="line", number=3, type=MESSAGE, type_name=f".{package}.Order.Line", label=1, json_name="line")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName(f"{package}.First")), get(pool.FindMessageTypeByName(f"{package}.Order")),
            get(pool.FindMessageTypeByName(f"{package}.Order.Line")))


def test_protobuf_same_bytes_and_read_both_ways(registry: SchemaRegistryClient, confluent: ConfluentRegistry) -> None:
    package = f"p{uuid.uuid4().hex[:8]}"
    first, order, line = message_classes(package)
    for cls, value, indexes in [(first, first(x=5), b"\x00"),
                                (order, order(id="a", qty=3, line=order.Line(sku="s")), b"\x02\x02"),
                                (line, line(sku="z"), b"\x04\x02\x00")]:
        topic = topic_name("proto")
        mine = ProtobufSerializer(cls, registry).serialize(topic, value)
        assert mine is not None
        theirs = CProtobufSerializer(cls, confluent, {"use.deprecated.format": False})(value, ctx(topic))
        # the message-index array as Confluent writes it: [0] as one byte, else count and indexes
        assert mine == theirs and mine[5:5 + len(indexes)] == indexes
        assert ProtobufDeserializer(cls, registry).deserialize(topic, theirs) == value
        assert CProtobufDeserializer(cls, {"use.deprecated.format": False}, confluent)(mine, ctx(topic)) == value
    with pytest.raises(SerializationError):
        ProtobufSerializer(order, registry).serialize(topic_name(), first(x=1))


def test_protobuf_imports_registered_as_references_like_confluents(url: str, registry: SchemaRegistryClient,
                                                                   confluent: ConfluentRegistry) -> None:
    """A message whose file imports another .proto: the import is registered first under its file
    name and referenced, as confluent-kafka does; google/protobuf/... imports are skipped."""
    package = f"p{uuid.uuid4().hex[:8]}"
    common = descriptor_pb2.FileDescriptorProto(name=f"{package}/common.proto", package=package, syntax="proto3")
    common.message_type.add(name="Money").field.add(name="cents", number=1, type=INT64, label=1, json_name="cents")
    main = descriptor_pb2.FileDescriptorProto(name=f"{package}/order.proto", package=package, syntax="proto3",
                                              dependency=[f"{package}/common.proto", "google/protobuf/timestamp.proto"])
    order = main.message_type.add(name="Order")
    order.field.add(name="price", number=1, type=MESSAGE, type_name=f".{package}.Money", label=1, json_name="price")
    order.field.add(name="at", number=2, type=MESSAGE, type_name=".google.protobuf.Timestamp", label=1, json_name="at")
    pool = descriptor_pool.DescriptorPool()
    from google.protobuf import timestamp_pb2

    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(common)
    pool.Add(main)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))
    value = cls()
    value.price.cents = 250
    value.at.seconds = 1_700_000_000
    topic = topic_name("proto")
    mine = ProtobufSerializer(cls, registry).serialize(topic, value)
    assert f"{package}/common.proto" in subjects(url)
    assert not any(s.startswith("google/") for s in subjects(url))
    latest = call("GET", f"{url}/subjects/{topic}-value/versions/latest").json
    assert latest["references"] == [{"name": f"{package}/common.proto", "subject": f"{package}/common.proto",
                                     "version": 1}]
    theirs = CProtobufSerializer(cls, confluent, {"use.deprecated.format": False})(value, ctx(topic))
    assert mine == theirs
    assert ProtobufDeserializer(cls, registry).deserialize(topic, theirs) == value


# -- asyncio -------------------------------------------------------------------------------------


def test_the_asyncio_api(url: str, confluent: ConfluentRegistry) -> None:
    topic = topic_name("aio")
    package = f"p{uuid.uuid4().hex[:8]}"
    _, order, _ = message_classes(package)

    async def main() -> None:
        client = AsyncSchemaRegistryClient({"url": url, "timeout.ms": 20000})
        ser = AsyncAvroSerializer(client, json.dumps(V1))
        framed = await ser.serialize(topic, {"id": "a", "qty": 1})
        again = await asyncio.gather(*(ser.serialize(topic, {"id": "a", "qty": 1}) for _ in range(5)))
        assert framed is not None and set(again) == {framed}
        assert CAvroDeserializer(confluent)(framed, ctx(topic)) == {"id": "a", "qty": 1}
        calls = client.http_requests
        theirs = CAvroSerializer(confluent, json.dumps(V2))({"id": "b", "qty": 2}, ctx(topic))
        reader = AsyncAvroDeserializer(client, json.dumps(V2))
        assert await reader.deserialize(topic, framed) == {"id": "a", "qty": 1, "note": "none", "tags": []}
        assert await reader.deserialize(topic, theirs) == {"id": "b", "qty": 2, "note": "none", "tags": []}
        assert client.http_requests == calls + 1  # only v2's id was new
        json_framed = await AsyncJSONSerializer(json.dumps(JSON_SCHEMA), client).serialize(f"{topic}-j", {"id": "x"})
        assert json_framed is not None
        assert CJSONDeserializer(None, schema_registry_client=confluent)(json_framed, ctx(f"{topic}-j")) == {"id": "x"}
        value = order(id="p", qty=9)
        proto = CProtobufSerializer(order, confluent, {"use.deprecated.format": False})(value, ctx(f"{topic}-p"))
        assert await AsyncProtobufDeserializer(order, client).deserialize(f"{topic}-p", proto) == value
        with pytest.raises(SerializationError):
            await reader.deserialize(topic, b"\x00\x7f\xff\xff\xf0{}")

    asyncio.run(asyncio.wait_for(main(), 60))


def test_asyncio_serializers_in_asyncproducer_and_asyncconsumer(registry_broker: BrokerProcess, url: str,
                                                                confluent: ConfluentRegistry) -> None:
    """AsyncProducer awaits an asyncio serializer given as value.serializer; AsyncConsumer an
    asyncio deserializer; a record that does not deserialize is not skipped: the records before
    it come, then its error, with the position back at it, until the application seeks past."""
    topic = topic_name("aio")
    bs = registry_broker.bootstrap

    async def main() -> None:
        client = AsyncSchemaRegistryClient(url)
        producer = AsyncProducer(bootstrap_servers=bs, key_serializer=AsyncAvroSerializer(client, '"string"', is_key=True),
                                 value_serializer=AsyncAvroSerializer(client, json.dumps(V1)))
        await producer.start()
        try:
            await (await producer.send(topic, {"id": "a", "qty": 1}, key="k1"))
        finally:
            await producer.close()
        # an unframed value, then a good one, written by a plain producer
        plain = AsyncProducer(bootstrap_servers=bs)
        await plain.start()
        try:
            await (await plain.send(topic, b"not framed"))
            theirs = CAvroSerializer(confluent, json.dumps(V1))({"id": "c", "qty": 3}, ctx(topic))
            await (await plain.send(topic, theirs))
        finally:
            await plain.close()
        got: list[Any] = []
        async with AsyncConsumer(bootstrap_servers=bs, group_id=f"g-{uuid.uuid4().hex[:8]}",
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 key_deserializer=AsyncAvroDeserializer(client, is_key=True),
                                 value_deserializer=AsyncAvroDeserializer(client)) as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            error: BaseException | None = None
            while time.monotonic() < deadline and len(got) < 2:
                try:
                    got.extend(await consumer.poll(0.5))
                except SerializationError as exc:
                    error = exc
                    assert await consumer.position((topic, 0)) == 1
                    consumer.seek((topic, 0), 2)
            assert error is not None and "offset 1" in "".join(getattr(error, "__notes__", []))
        assert [(r.offset, r.key, r.value) for r in got] == [(0, "k1", {"id": "a", "qty": 1}),
                                                              (2, None, {"id": "c", "qty": 3})]

    asyncio.run(asyncio.wait_for(main(), 90))


def test_consumer_stops_at_a_record_that_does_not_deserialize(registry_broker: BrokerProcess,
                                                               registry: SchemaRegistryClient) -> None:
    """The blocking Consumer with a blocking deserializer: the records before an unframed one are
    delivered, then its SerializationError, again on every poll with the position at it (never
    skipped, never a consumer stuck returning nothing), until the application seeks past it."""
    topic = topic_name()
    ser = AvroSerializer(registry, json.dumps(V1))
    producer = Producer(bootstrap_servers=registry_broker.bootstrap)
    try:
        for value in [ser.serialize(topic, {"id": "a", "qty": 1}), b"\x01junk", ser.serialize(topic, {"id": "c", "qty": 3})]:
            producer.send(topic, value)
        producer.flush(30)
    finally:
        producer.close()
    consumer = Consumer(bootstrap_servers=registry_broker.bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        value_deserializer=AvroDeserializer(registry))
    got: list[Any] = []
    errors: list[BaseException] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) < 2:
            try:
                got.extend(consumer.poll(0.5))
            except SerializationError as exc:
                errors.append(exc)
                assert consumer.position((topic, 0)) == 1
                if len(errors) == 2:  # raised again: the record was not skipped
                    consumer.seek((topic, 0), 2)
    finally:
        consumer.close()
    assert len(errors) == 2 and "magic byte 1" in str(errors[0])
    assert [(r.offset, r.value) for r in got] == [(0, {"id": "a", "qty": 1}), (2, {"id": "c", "qty": 3})]


def test_blocking_producer_refuses_an_asyncio_serializer(url: str) -> None:
    with pytest.raises(ClientConfigError):
        Producer(bootstrap_servers="127.0.0.1:1", value_serializer=AsyncAvroSerializer(url, json.dumps(V1)))


# -- malformed frames ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def known(url: str) -> tuple[SchemaRegistryClient, bytes, bytes]:
    """A client, a framed Avro record and a framed Protobuf record."""
    registry = SchemaRegistryClient(url)
    avro = AvroSerializer(registry, json.dumps(V1)).serialize(topic_name(), {"id": "abc", "qty": 3})
    first, _, _ = message_classes(f"p{uuid.uuid4().hex[:8]}")
    proto = ProtobufSerializer(first, registry).serialize(topic_name(), first(x=1))
    assert avro is not None and proto is not None
    return registry, avro, proto


def _frames(valid: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=5),                                                      # too short
        st.builds(lambda m, rest: bytes([m]) + rest, st.integers(1, 255), st.binary(max_size=20)),  # wrong magic
        st.builds(lambda i, rest: b"\x00" + i.to_bytes(4, "big") + rest,            # unknown ids
                  st.integers(2**24, 2**32 - 1), st.binary(max_size=20)),
        st.builds(lambda n: valid[:n], st.integers(0, len(valid) - 1)),             # truncated
        st.builds(lambda rest: valid[:5] + rest, st.binary(max_size=40)),           # garbage payload
    )


@settings(max_examples=60)
@given(data=st.data())
def test_malformed_frames_raise_serialization_error(known: tuple[SchemaRegistryClient, bytes, bytes],
                                                    data: st.DataObject) -> None:
    registry, avro, proto = known
    first, _, _ = message_classes("pmalformed")
    avro_frame = data.draw(_frames(avro))
    proto_frame = data.draw(_frames(proto))
    for deser, frame in [(AvroDeserializer(registry), avro_frame), (JSONDeserializer(None, registry), avro_frame),
                         (ProtobufDeserializer(first, registry), proto_frame)]:
        try:
            deser.deserialize("t", frame)
        except SerializationError as exc:
            assert isinstance(exc, OdradekError) and str(exc)
        # a garbage payload may still decode (Avro and Protobuf have no checksum); anything else
        # than SerializationError fails the test


# -- the wire format without a registry ------------------------------------------------------------


@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=8))
def test_message_indexes_as_confluent_writes_them(indexes: list[int]) -> None:
    import io

    from odradek.client.serde._wire import decode_message_indexes, encode_message_indexes

    theirs = io.BytesIO()
    CProtobufSerializer._encode_varints(theirs, indexes)
    assert encode_message_indexes(indexes) == theirs.getvalue()
    assert decode_message_indexes(theirs.getvalue(), 0) == (indexes, len(theirs.getvalue()))


@given(st.binary(max_size=64))
def test_message_index_reader_takes_any_bytes(data: bytes) -> None:
    from odradek.client.serde._wire import decode_message_indexes, read_header

    try:
        indexes, pos = decode_message_indexes(data, 0)
    except SerializationError:
        pass
    else:
        assert 0 < pos <= len(data) and indexes and all(i >= 0 for i in indexes)
    try:
        read_header(data)
    except SerializationError as exc:
        assert len(data) < 5 or data[0] != 0, exc


def test_latest_version_is_asked_again_after_its_ttl(registry: SchemaRegistryClient,
                                                     confluent: ConfluentRegistry) -> None:
    from odradek._clock import FakeClock

    topic = topic_name()
    clock = FakeClock()
    CAvroSerializer(confluent, json.dumps(V1))({"id": "a", "qty": 1}, ctx(topic))
    conf = {"use.latest.version": True, "auto.register.schemas": False, "latest.cache.ttl.secs": 60}
    ser = AvroSerializer(registry, None, conf, clock=clock)
    forever = AvroSerializer(registry, None, {"use.latest.version": True, "auto.register.schemas": False})
    record = {"id": "b", "qty": 2, "note": "n", "tags": []}
    v1_id = int.from_bytes((ser.serialize(topic, {"id": "a", "qty": 1}) or b"")[1:5], "big")
    assert forever.serialize(topic, {"id": "a", "qty": 1}) is not None
    old = CAvroSerializer(confluent, json.dumps(V1))({"id": "a", "qty": 1}, ctx(topic))
    reader = AvroDeserializer(registry, conf={"use.latest.version": True, "latest.cache.ttl.secs": 60}, clock=clock)
    assert reader.deserialize(topic, old) == {"id": "a", "qty": 1}
    v2_id = confluent.register_schema(f"{topic}-value", CSchema(json.dumps(V2), "AVRO"))
    clock.advance(59_000)
    assert int.from_bytes((ser.serialize(topic, {"id": "a", "qty": 1}) or b"")[1:5], "big") == v1_id
    assert reader.deserialize(topic, old) == {"id": "a", "qty": 1}
    clock.advance(1_000)
    # the TTL is over: the latest version (v2) is asked for and used, to write and as the reader
    assert int.from_bytes((ser.serialize(topic, record) or b"")[1:5], "big") == v2_id
    assert reader.deserialize(topic, old) == {"id": "a", "qty": 1, "note": "none", "tags": []}
    # without a TTL, the first answer stays
    assert int.from_bytes((forever.serialize(topic, {"id": "a", "qty": 1}) or b"")[1:5], "big") == v1_id


_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
                       | st.binary(max_size=5), lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.sampled_from(["id", "qty", "x"]), inner, max_size=3), max_leaves=8)


@settings(max_examples=60)
@given(value=_VALUES)
def test_values_that_do_not_fit_the_schema_raise_serialization_error(known: tuple[SchemaRegistryClient, bytes, bytes],
                                                                    value: Any) -> None:
    registry, _, _ = known
    for ser in (AvroSerializer(registry, json.dumps(V1)), JSONSerializer(json.dumps(JSON_SCHEMA), registry)):
        try:
            framed = ser.serialize("fit", value)
        except SerializationError:
            continue
        # what was written reads back as the value (Avro: the schema's fields of it)
        if value is None:
            assert framed is None  # a null stays null (a tombstone)
        elif isinstance(ser, AvroSerializer):
            assert framed is not None
            assert AvroDeserializer(registry).deserialize("fit", framed) == {"id": value["id"], "qty": value["qty"]}
        else:
            assert framed is not None
            assert JSONDeserializer(None, registry).deserialize("fit", framed) == value
