"""The pure rules of broker-side schema validation (odradek.schemas.validation): record names,
the ids each subject name strategy allows, and the framing check over every record format."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.records import BatchBuilder, Compression, LegacyBatchBuilder, RecordsError
from odradek.schemas.store import RegistryState, SchemaVersion, schema_record
from odradek.schemas.validation import allowed_ids, check_framing, record_name


def test_record_names_as_confluent_takes_them() -> None:
    avro = {"type": "record", "name": "Order", "namespace": "shop", "fields": []}
    assert record_name("AVRO", json.dumps(avro)) == "shop.Order"
    assert record_name("AVRO", json.dumps({**avro, "name": "a.b.Order"})) == "a.b.Order"
    assert record_name("AVRO", json.dumps({"type": "enum", "name": "E", "symbols": ["A"]})) == "E"
    assert record_name("AVRO", '"string"') == "string"
    assert record_name("AVRO", '["null", "string"]') is None
    assert record_name("JSON", json.dumps({"title": "Person", "type": "object"})) == "Person"
    assert record_name("JSON", json.dumps({"type": "object"})) is None
    proto = 'syntax = "proto3";\npackage acme.v1;\n\nmessage Order {\n  message Line { int32 n = 1; }\n}\n'
    assert record_name("PROTOBUF", proto) == "acme.v1.Order"
    assert record_name("PROTOBUF", 'syntax = "proto3";\nmessage Bare {}\n') == "Bare"
    assert record_name("AVRO", "{not json") is None


def _state(*versions: SchemaVersion) -> RegistryState:
    state = RegistryState()
    for v in versions:
        state.apply(*schema_record(v))
    return state


def _avro(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": []})


def test_allowed_ids_per_strategy() -> None:
    state = _state(
        SchemaVersion("t-value", 1, 1, "AVRO", _avro("A")),
        SchemaVersion("t-value", 2, 2, "AVRO", _avro("B")),
        SchemaVersion("shop.A", 1, 1, "AVRO", _avro("A")),
        SchemaVersion("shop.C", 1, 3, "AVRO", _avro("B")),  # a subject that is not its schema's record name
        SchemaVersion("t-shop.B", 1, 2, "AVRO", _avro("B")),
        SchemaVersion("t-key", 1, 4, "AVRO", _avro("K"), deleted=True),
    )
    assert allowed_ids(state, "io.confluent.kafka.serializers.subject.TopicNameStrategy", "t", False) == {1, 2}
    assert allowed_ids(state, "TopicNameStrategy", "t", True) == frozenset()  # soft-deleted versions do not count
    assert allowed_ids(state, "RecordNameStrategy", "t", False) == {1}
    assert allowed_ids(state, "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy", "t", False) == {2}
    assert allowed_ids(state, "TopicRecordNameStrategy", "u", False) == frozenset()


def _framed(i: int) -> bytes:
    return b"\x00" + i.to_bytes(4, "big") + b"payload"


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_every_record_of_a_batch_is_read(codec: Compression) -> None:
    b = BatchBuilder(compression=codec)
    for i in range(50):
        b.append(1, _framed(9) if i != 7 else b"raw", _framed(5) if i != 30 else _framed(6))
    errors, total = check_framing(b.build(), frozenset({9}), frozenset({5}), "k-subject", "v-subject")
    assert total == 2
    assert [i for i, _m in errors] == [7, 30]
    assert "key is not framed" in errors[0][1]
    assert "schema id 6" in errors[1][1] and "v-subject" in errors[1][1]
    # only the side that is checked
    assert check_framing(b.build(), None, frozenset({5, 6}))[1] == 0


def test_a_legacy_message_set_is_read_too() -> None:
    b = LegacyBatchBuilder(1, compression=Compression.GZIP)
    b.append(1, None, _framed(3))
    b.append(1, None, b"\x00\x00")
    errors, total = check_framing(b.build(), None, frozenset({3}))
    assert total == 1 and errors[0][0] == 1


@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_read_or_refused_as_records_errors(data: bytes) -> None:
    try:
        errors, total = check_framing(data, frozenset({1}), frozenset({1}))
    except RecordsError:
        return
    assert total == len(errors)
