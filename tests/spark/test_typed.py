"""Typed keys and values (keyFormat / valueFormat): registry-framed Avro, JSON Schema and Protobuf
as struct columns.

The pure tests check the Avro -> Spark type mapping and the executor's decoding without Spark;
the Spark tests (local[2], the session's broker with its schema registry) read a topic of Avro
records of two schema versions written by confluent-kafka's AvroSerializer, in a batch and a
streaming query, write typed rows back, and check FAILFAST and PERMISSIVE on a corrupt record
(marked slow, as the other Spark tests).
"""

from __future__ import annotations

import datetime
import json
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.spark._typed import (
    MalformedRecordError,
    SchemaMappingError,
    TypedColumn,
    TypedOptions,
    apply_typed,
    arrow_type_of,
    avro_of_arrow,
)

from .spark_helpers import create_topic, produce

V1 = {"type": "record", "name": "Order", "namespace": "acme", "fields": [
    {"name": "id", "type": "string"},
    {"name": "qty", "type": "int"},
]}
V2 = {"type": "record", "name": "Order", "namespace": "acme", "fields": [
    {"name": "id", "type": "string"},
    {"name": "qty", "type": "long"},  # widened
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
]}


# --- pure: the type mapping and the decoding, no Spark ----------------------------------------


def test_avro_types_map_as_spark_avro_maps_them() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 2}},
        {"name": "opt", "type": ["null", "int"]},
        {"name": "il", "type": ["int", "long"]},
        {"name": "fd", "type": ["float", "double"]},
        {"name": "u", "type": ["int", "string"]},
        {"name": "arr", "type": {"type": "array", "items": "long"}},
        {"name": "m", "type": {"type": "map", "values": "double"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "nested", "type": {"type": "record", "name": "N", "fields": [{"name": "x", "type": "E"}]}},
    ]}
    t = arrow_type_of("AVRO", json.dumps(schema))
    got = {f.name: f.type for f in t}
    assert got == {
        "b": pa.bool_(), "i": pa.int32(), "l": pa.int64(), "f": pa.float32(), "d": pa.float64(),
        "by": pa.binary(), "s": pa.string(), "e": pa.string(), "fx": pa.binary(), "opt": pa.int32(),
        "il": pa.int64(), "fd": pa.float64(),
        "u": pa.struct([("member0", pa.int32()), ("member1", pa.string())]),
        "arr": pa.list_(pa.field("element", pa.int64())), "m": pa.map_(pa.string(), pa.float64()),
        "day": pa.date32(), "ts": pa.timestamp("us", tz="UTC"), "lts": pa.timestamp("us"),
        "dec": pa.decimal128(10, 2), "nested": pa.struct([("x", pa.string())]),
    }


def test_recursive_avro_type_is_refused() -> None:
    schema = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(SchemaMappingError, match="recursive"):
        arrow_type_of("AVRO", json.dumps(schema))


def _framed(schema_id: int, schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    import io

    import fastavro

    buf = io.BytesIO()
    buf.write(b"\x00" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def _column(url: str, schema_id: int, schema: dict[str, Any]) -> TypedColumn:
    text = json.dumps(schema)
    return TypedColumn("value", "avro", "t", "t-value", url, None, schema_id, "AVRO", text, arrow_type_of("AVRO", text))


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": pa.nulls(n, pa.binary()), "value": pa.array(values, pa.binary()),
        "offset": pa.array(range(100, 100 + n), pa.int64()),
    })


def test_decoding_resolves_an_older_writer_schema_and_fails_fast_naming_the_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    from odradek.spark import _typed

    # the writer schemas by id, as the registry would answer
    monkeypatch.setattr(_typed.RegistryClient, "by_id", lambda self, i, **kw: ("AVRO", json.dumps({1: V1, 2: V2}[i])))
    col = _column("http://test-resolve", 2, V2)
    good = [_framed(1, V1, {"id": "a", "qty": 1}), _framed(2, V2, {"id": "b", "qty": 2, "note": "n", "tags": ["x"]}), None]
    out = apply_typed(_batch(good), (col,), TypedOptions(value_format="avro"), 3)
    assert out.column("value").to_pylist() == [
        {"id": "a", "qty": 1, "note": None, "tags": []},
        {"id": "b", "qty": 2, "note": "n", "tags": ["x"]},
        None,
    ]
    with pytest.raises(MalformedRecordError, match=r"offset 101 of topic t partition 3"):
        apply_typed(_batch([good[0], b"not framed"]), (col,), TypedOptions(value_format="avro"), 3)
    permissive = TypedOptions(value_format="avro", mode="PERMISSIVE")
    truncated = good[1][:-2]
    out = apply_typed(_batch([good[0], b"\x01xyz", truncated]), (col,), permissive, 3)
    assert out.column("value").to_pylist()[1:] == [None, None]
    assert out.column("_corrupt_record").to_pylist() == [None, b"\x01xyz", truncated]


_MALFORMED_SCHEMA = {"type": "record", "name": "M", "fields": [
    {"name": "s", "type": "string"},
    {"name": "n", "type": ["null", "long"]},
    {"name": "a", "type": {"type": "array", "items": "string"}},
    {"name": "m", "type": {"type": "map", "values": "double"}},
    {"name": "e", "type": {"type": "enum", "name": "E2", "symbols": ["X", "Y"]}},
    {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}


@given(st.lists(st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=40).map(lambda b: b"\x00\x00\x00\x00\x07" + b),  # framed with the reader's id
    st.binary(max_size=40).map(lambda b: b"\x00\x00\x00\x00\x08" + b),  # an id the registry lacks
), min_size=1, max_size=8))
def test_malformed_values_are_corrupt_records_or_fail_fast(values: list[bytes]) -> None:
    """Whatever the bytes, PERMISSIVE gives each row a struct or its bytes in the corrupt-record
    column (never both, never neither), and FAILFAST raises MalformedRecordError or decodes the
    same rows."""
    from odradek.spark import _typed

    def by_id(self: Any, i: int, **kw: Any) -> tuple[str, str]:
        if i != 7:
            raise SchemaMappingError(f"schema registry: HTTP 404 Schema {i} not found")
        return "AVRO", json.dumps(_MALFORMED_SCHEMA)

    original = _typed.RegistryClient.by_id
    _typed.RegistryClient.by_id = by_id  # type: ignore[method-assign]
    try:
        col = _column("http://test-malformed", 7, _MALFORMED_SCHEMA)
        out = apply_typed(_batch(list(values)), (col,), TypedOptions(value_format="avro", mode="PERMISSIVE"), 0)
        decoded, corrupt = out.column("value").to_pylist(), out.column("_corrupt_record").to_pylist()
        for raw, value, bad in zip(values, decoded, corrupt, strict=True):
            assert (value is None) != (bad is None)
            assert bad is None or bad == raw
        try:
            strict = apply_typed(_batch(list(values)), (col,), TypedOptions(value_format="avro"), 0)
        except MalformedRecordError as exc:
            assert any(c is not None for c in corrupt)
            assert "of topic t partition 0" in str(exc)
        else:
            assert all(c is None for c in corrupt) and strict.column("value").to_pylist() == decoded
    finally:
        _typed.RegistryClient.by_id = original  # type: ignore[method-assign]


def test_an_array_of_nulls_cannot_make_an_endless_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record claiming 2**62 items of zero bytes each is refused, not read for ever."""
    schema = {"type": "record", "name": "Z", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}
    col = _column("http://test-zero", 9, schema)
    count = (2**62) << 1  # zigzag
    varint = bytearray()
    while count > 0x7F:
        varint.append((count & 0x7F) | 0x80)
        count >>= 7
    varint.append(count)
    value = b"\x00" + struct.pack(">I", 9) + bytes(varint)
    out = apply_typed(_batch([value]), (col,), TypedOptions(value_format="avro", mode="PERMISSIVE"), 0)
    assert out.column("_corrupt_record").to_pylist() == [value]


def test_typed_options_are_checked() -> None:
    from odradek.spark._options import parse_sink_options, parse_source_options

    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
    opts = parse_source_options({**base, "valueFormat": "AVRO", "mode": "permissive"}, streaming=False).typed
    assert (opts.value_format, opts.key_format, opts.mode, opts.corrupt_column) == ("avro", "binary", "PERMISSIVE", "_corrupt_record")
    for bad, message in (({"valueFormat": "xml"}, "valueFormat"), ({"mode": "DROPMALFORMED"}, "mode"),
                         ({"columnNameOfCorruptRecord": "value"}, "columnNameOfCorruptRecord")):
        with pytest.raises(ValueError, match=message):
            parse_source_options({**base, "valueFormat": "avro", **bad}, streaming=False)
    assert parse_sink_options({"kafka.bootstrap.servers": "x:1", "topic": "t", "valueFormat": "json",
                               "autoRegister": "true"}).typed.auto_register


def test_spark_avro_type_of_a_struct_column() -> None:
    t = pa.struct([pa.field("id", pa.string(), nullable=False), ("qty", pa.int64()),
                   ("at", pa.timestamp("us", tz="UTC")), ("inner", pa.struct([("x", pa.int32())]))])
    assert avro_of_arrow(t) == {"type": "record", "name": "topLevelRecord", "fields": [
        {"name": "id", "type": "string"},
        {"name": "qty", "type": ["long", "null"]},
        {"name": "at", "type": [{"type": "long", "logicalType": "timestamp-micros"}, "null"]},
        {"name": "inner", "type": [{"type": "record", "name": "inner", "namespace": "topLevelRecord",
                                    "fields": [{"name": "x", "type": ["int", "null"]}]}, "null"]},
    ]}


def test_the_brokers_registry_is_found_by_default(tmp_path: Path) -> None:
    import socket

    from odradek.spark._typed import discover_registry_url
    from odradek.testing import BrokerProcess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with BrokerProcess(tmp_path / "fixed", overrides={"schema.registry.listeners": f"http://127.0.0.1:{port}"}) as b:
        assert b.registry_url == f"http://127.0.0.1:{port}"
        assert discover_registry_url({"bootstrap.servers": b.bootstrap}) == b.registry_url
    with (
        BrokerProcess(tmp_path / "ephemeral", overrides={"schema.registry.listeners": "http://127.0.0.1:0"}) as b,
        pytest.raises(SchemaMappingError, match=r"schema\.registry\.url"),
    ):
        discover_registry_url({"bootstrap.servers": b.bootstrap})


# --- Spark, local[2] --------------------------------------------------------------------------


def _serialized(registry: str, topic: str, values: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[bytes]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry})
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializers = {id(s): AvroSerializer(client, json.dumps(s)) for s in (V1, V2)}
    return [serializers[id(schema)](value, ctx) for schema, value in values]


@pytest.fixture(scope="module")
def avro_topic(broker: Any) -> tuple[str, list[dict[str, Any]]]:
    """A topic of 2 partitions with 40 records of V1 and V2 mixed (V2 the latest), keys binary."""
    import uuid

    assert broker.registry_url is not None
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    values: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i in range(40):
        if i % 3 == 0:
            values.append((V1, {"id": f"o{i}", "qty": i}))
        else:
            values.append((V2, {"id": f"o{i}", "qty": i * 1000, "note": f"n{i}" if i % 2 else None, "tags": ["a"] * (i % 3)}))
    framed = _serialized(broker.registry_url, topic, values)
    produce(broker.bootstrap, topic, [{"key": f"k{i}".encode(), "value": v} for i, v in enumerate(framed)])
    expected = []
    for schema, value in values:
        expected.append({"note": None, "tags": []} | value if schema is V1 else value)
    return topic, expected


def _read(spark: Any, broker: Any, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("schema.registry.url", broker.registry_url)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _as_dicts(rows: list[Any]) -> list[dict[str, Any]]:
    return sorted((r.asDict(recursive=True) for r in rows), key=lambda d: int(d["id"][1:]))


@pytest.mark.slow
def test_batch_read_of_two_avro_versions_as_a_struct_and_write_back(spark: Any, broker: Any, avro_topic: Any, topic: str) -> None:
    source, expected = avro_topic
    df = _read(spark, broker, source, valueFormat="avro")
    assert df.schema["value"].dataType.simpleString() == "struct<id:string,qty:bigint,note:string,tags:array<string>>"
    assert df.schema["key"].dataType.simpleString() == "binary"
    got = _as_dicts([r.value for r in df.select("value").collect()])
    assert got == expected

    # typed rows back: the schema derived from the struct registered under <topic>-value
    create_topic(broker.bootstrap, topic, 1)
    (
        df.select("key", "value").write.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("schema.registry.url", broker.registry_url)
        .option("valueFormat", "avro")
        .option("autoRegister", "true")
        .mode("append").save()
    )
    again = _read(spark, broker, topic, valueFormat="avro")
    rows = again.select("key", "value").collect()
    assert _as_dicts([r.value for r in rows]) == expected
    assert sorted(r.key for r in rows) == sorted(f"k{i}".encode() for i in range(40))
    # the values are Confluent-framed: confluent-kafka's AvroDeserializer reads them
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    raw = _read(spark, broker, topic).select("value").collect()
    decode = AvroDeserializer(SchemaRegistryClient({"url": broker.registry_url}))
    first = decode(raw[0].value, SerializationContext(topic, MessageField.VALUE))
    assert set(first) == {"id", "qty", "note", "tags"}


@pytest.mark.slow
def test_streaming_read_of_two_avro_versions(spark: Any, broker: Any, avro_topic: Any, tmp_path: Any) -> None:
    source, expected = avro_topic
    stream = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("schema.registry.url", broker.registry_url)
        .option("valueFormat", "avro")
        .option("maxOffsetsPerTrigger", "15")
        .load()
    )
    name = f"typed_{source.replace('-', '_')}"
    query = (
        stream.select("value.*").writeStream.format("memory").queryName(name)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True).start()
    )
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None
    got = sorted((r.asDict(recursive=True) for r in spark.table(name).collect()), key=lambda d: int(d["id"][1:]))
    assert got == expected


@pytest.mark.slow
def test_failfast_names_the_offset_and_permissive_gives_the_corrupt_record(spark: Any, broker: Any, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    good = _serialized(broker.registry_url, topic, [(V2, {"id": "o1", "qty": 1, "note": None, "tags": []})])[0]
    produce(broker.bootstrap, topic, [{"value": good}, {"value": good}, {"value": b"\x00\x00\x00garbage"}, {"value": good}])
    with pytest.raises(Exception, match=rf"offset 2 of topic {topic} partition 0") as failed:
        _read(spark, broker, topic, valueFormat="avro").collect()
    assert "FAILFAST" in str(failed.value)
    df = _read(spark, broker, topic, valueFormat="avro", mode="PERMISSIVE")
    rows = df.select("offset", "value", "_corrupt_record").orderBy("offset").collect()
    assert [r._corrupt_record for r in rows] == [None, None, b"\x00\x00\x00garbage", None]
    assert [r.value is None for r in rows] == [False, False, True, False]
    assert rows[0].value.id == "o1"


@pytest.mark.slow
def test_timestamps_and_dates_arrive_as_spark_types(spark: Any, broker: Any, topic: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = {"type": "record", "name": "E", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
    ]}
    create_topic(broker.bootstrap, topic, 1)
    ser = AvroSerializer(SchemaRegistryClient({"url": broker.registry_url}), json.dumps(schema))
    at = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)
    value = ser({"at": at, "day": datetime.date(2024, 5, 1), "kind": "B"}, SerializationContext(topic, MessageField.VALUE))
    produce(broker.bootstrap, topic, [{"value": value}])
    df = _read(spark, broker, topic, valueFormat="avro")
    assert df.schema["value"].dataType.simpleString() == "struct<at:timestamp,day:date,kind:string>"
    row = df.select("value.*").collect()[0]
    assert (row.at.replace(tzinfo=datetime.UTC), row.day, row.kind) == (at, datetime.date(2024, 5, 1), "B")


@pytest.mark.slow
def test_json_schema_values_as_a_struct_and_written_back(spark: Any, broker: Any, topic: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Item", "type": "object", "properties": {
        "id": {"type": "string"},
        "qty": {"type": "integer"},
        "price": {"type": ["number", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {},  # anything: its JSON text
    }}
    create_topic(broker.bootstrap, topic, 1)
    ser = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": broker.registry_url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    items = [{"id": "a", "qty": 1, "price": 2.5, "tags": ["x"], "meta": {"k": [1, 2]}}, {"id": "b", "qty": 2, "tags": []}]
    produce(broker.bootstrap, topic, [{"value": ser(item, ctx)} for item in items])
    df = _read(spark, broker, topic, valueFormat="json")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:string,qty:bigint,price:double,tags:array<string>,meta:string>"
    )
    rows = [r.value.asDict(recursive=True) for r in df.orderBy("offset").collect()]
    assert rows == [{"id": "a", "qty": 1, "price": 2.5, "tags": ["x"], "meta": '{"k":[1,2]}'},
                    {"id": "b", "qty": 2, "price": None, "tags": [], "meta": None}]
    # back, with the subject's latest schema (the one the serializer registered)
    out = f"{topic}-copy"
    create_topic(broker.bootstrap, out, 1)
    SchemaRegistryClient({"url": broker.registry_url}).register_schema(f"{out}-value", Schema(json.dumps(schema), "JSON"))
    (
        df.select("value").write.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", out)
        .option("schema.registry.url", broker.registry_url).option("valueFormat", "json")
        .mode("append").save()
    )
    again = [r.value.asDict(recursive=True) for r in _read(spark, broker, out, valueFormat="json").orderBy("offset").collect()]
    assert [(r["id"], r["qty"], r["price"], r["tags"]) for r in again] == [("a", 1, 2.5, ["x"]), ("b", 2, None, [])]


@pytest.mark.slow
def test_typed_read_and_write_on_a_standalone_cluster(spark_standalone: Any, broker: Any, avro_topic: Any, tmp_path: Any) -> None:
    from odradek.testing import wait_for

    from .standalone import spark_submit

    source, expected = avro_topic
    sink = f"{source}-standalone-copy"
    create_topic(broker.bootstrap, sink, 2)
    log = tmp_path / "driver.log"
    jobs = Path(__file__).resolve().parent / "jobs"
    args = [broker.bootstrap, broker.registry_url, source, sink, str(tmp_path / "checkpoint")]
    driver = spark_submit(spark_standalone.url, jobs / "typed_roundtrip.py", args, log, conf={"spark.cores.max": "2"})
    try:
        wait_for(lambda: driver.poll() is not None, 400, "the job ended", 1.0)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
    text = log.read_text(errors="replace")
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT ")), None)
    assert driver.returncode == 0 and line is not None, text[-4000:]
    result = json.loads(line[len("RESULT "):])
    assert result["exception"] is None
    for name in ("batch", "copy", "stream"):
        assert sorted(result[name], key=lambda d: int(d["id"][1:])) == expected, name


def _proto_class(version: int) -> Any:
    """acme.Order, version 1 (id, qty int32) or 2 (qty int64, a note, repeated tags, a nested
    Line message, an enum), built at run time as protoc's generated code would give it."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="acme/order.proto", package="acme", syntax="proto3")
    msg = fdp.message_type.add(name="Order")
    msg.field.add(name="id", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL, json_name="id")
    msg.field.add(name="qty", number=2, type=f.TYPE_INT32 if version == 1 else f.TYPE_INT64, label=f.LABEL_OPTIONAL, json_name="qty")
    if version == 2:
        msg.field.add(name="note", number=3, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL, json_name="note")
        msg.field.add(name="tags", number=4, type=f.TYPE_STRING, label=f.LABEL_REPEATED, json_name="tags")
        msg.field.add(name="line", number=5, type=f.TYPE_MESSAGE, type_name=".acme.Order.Line", label=f.LABEL_OPTIONAL, json_name="line")
        msg.field.add(name="state", number=6, type=f.TYPE_ENUM, type_name=".acme.State", label=f.LABEL_OPTIONAL, json_name="state")
        line = msg.nested_type.add(name="Line")
        line.field.add(name="sku", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL, json_name="sku")
        state = fdp.enum_type.add(name="State")
        state.value.add(name="NEW", number=0)
        state.value.add(name="PAID", number=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("acme.Order"))


@pytest.mark.slow
def test_protobuf_values_of_two_versions_as_a_struct(spark: Any, broker: Any, topic: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": broker.registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = _proto_class(1), _proto_class(2)
    conf = {"use.deprecated.format": False}
    values = [
        ProtobufSerializer(v1, client, conf)(v1(id="a", qty=1), ctx),
        ProtobufSerializer(v2, client, conf)(v2(id="b", qty=2, note="x", tags=["t1", "t2"], line=v2.Line(sku="s"), state=1), ctx),
    ]
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": v} for v in values] + [{"value": b"\x00\x00\x00\x00\x01"}])
    df = _read(spark, broker, topic, valueFormat="protobuf", mode="PERMISSIVE")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:string,qty:bigint,note:string,tags:array<string>,line:struct<sku:string>,state:string>"
    )
    rows = df.orderBy("offset").select("value", "_corrupt_record").collect()
    assert [r.value.asDict(recursive=True) if r.value else None for r in rows] == [
        {"id": "a", "qty": 1, "note": "", "tags": [], "line": None, "state": "NEW"},
        {"id": "b", "qty": 2, "note": "x", "tags": ["t1", "t2"], "line": {"sku": "s"}, "state": "PAID"},
        None,
    ]
    assert rows[2]._corrupt_record == b"\x00\x00\x00\x00\x01"
