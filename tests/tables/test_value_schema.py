"""value_schema mode: the value's Avro schema from the registry as typed columns; a compatible new
version adds a column; records that cannot be converted go to the dead-letter table with why."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.testing import BrokerProcess
from tests.tables.conftest import FAST, create_topic, duckdb_rows, open_catalog, wait_rows

pytest.importorskip("fastavro")

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}


def _serializer(url: str, schema: dict[str, Any]) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))


def test_value_schema_table_has_typed_columns_evolves_and_dead_letters(broker: BrokerProcess) -> None:
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = "orders-avro"
    assert broker.registry_url is not None
    create_topic(broker.bootstrap, topic, 1, {"odradek.iceberg.mode": "value_schema", **FAST})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = _serializer(broker.registry_url, ORDER_V1)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    placed = datetime(2026, 12, 6, 15, 0, tzinfo=UTC)
    for i in range(50):
        p.produce(topic, v1({"id": i, "customer": f"c{i}", "amount": i * 1.5, "placed": placed,
                             "tags": ["a"] * (i % 3), "note": None if i % 2 else f"n{i}"}, ctx))
    p.produce(topic, b"not avro at all")  # offset 50: not framed for the registry
    p.produce(topic, b"\x00\x00\x01\x86\xa0\x02")  # 51: framed, an id (100000) the registry does not have
    assert p.flush(30) == 0

    table = wait_rows(broker.data_dir, topic, 50)
    t = open_catalog(broker.data_dir).load_table(("odradek", topic))
    types = {f.name: str(f.field_type) for f in t.schema().fields}
    assert types["id"] == "long" and types["customer"] == "string" and types["amount"] == "double"
    assert types["placed"] == "timestamptz" and types["tags"].startswith("list<string>")
    assert types["kafka_offset"] == "long" and types["kafka_timestamp"] == "timestamptz"
    rows = sorted(table.to_pylist(), key=lambda r: r["kafka_offset"])
    assert [r["id"] for r in rows] == list(range(50))
    assert rows[3]["customer"] == "c3" and rows[3]["amount"] == 4.5 and rows[3]["placed"] == placed
    assert rows[4]["tags"] == ["a"] and rows[4]["note"] == "n4" and rows[5]["note"] is None

    dead = wait_rows(broker.data_dir, topic + "~dlq", 2).to_pylist()
    reasons = {r["offset"]: r["reason"] for r in dead}
    assert set(reasons) == {50, 51}
    assert "not framed" in reasons[50] and "100000" in reasons[51]
    assert {r["value"] for r in dead} == {b"not avro at all", b"\x00\x00\x01\x86\xa0\x02"}

    # a compatible new version (a field with a default) adds a column; the older rows read null there
    v2 = _serializer(broker.registry_url, ORDER_V2)
    for i in range(50, 60):
        p.produce(topic, v2({"id": i, "customer": f"c{i}", "amount": 1.0, "placed": placed, "tags": [],
                             "note": None, "coupon": f"X{i}"}, ctx))
    assert p.flush(30) == 0
    table = wait_rows(broker.data_dir, topic, 60)
    rows = sorted(table.to_pylist(), key=lambda r: r["kafka_offset"])
    assert len(rows) == 60
    assert [r["coupon"] for r in rows] == [None] * 50 + [f"X{i}" for i in range(50, 60)]
    assert "coupon" in {f.name for f in open_catalog(broker.data_dir).load_table(("odradek", topic)).schema().fields}
    # DuckDB reads the evolved table too
    assert duckdb_rows(broker.data_dir, topic, "id, coupon")[-1] == (59, "X59")
