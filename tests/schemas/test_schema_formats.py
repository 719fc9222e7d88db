"""The formats as pure logic: parsing (and refusing) schemas, canonical forms, references, and
malformed schemas of every kind refused with SchemaError (the registry's 42201), never another
exception."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.schemas import Reference, SchemaError, parse_schema
from odradek.schemas.avro import parse_avro

# -- Avro ------------------------------------------------------------------------------------------


def test_avro_canonical_form_ignores_layout_and_key_order() -> None:
    a = '{"type": "record", "name": "User", "namespace": "acme", "fields": [{"name": "n", "type": {"type": "int"}}]}'
    b = '{\n "fields": [{"type": "int", "name": "n"}],\n "name": "acme.User",\n "type": "record"\n}'
    assert parse_schema("AVRO", a).canonical == parse_schema("AVRO", b).canonical == (
        '{"type":"record","name":"User","namespace":"acme","fields":[{"name":"n","type":"int"}]}'
    )
    assert parse_schema("AVRO", '{"type": "string"}').canonical == '"string"'
    # properties are kept (unlike the Parsing Canonical Form)
    logical = parse_schema("AVRO", '{"type": "int", "logicalType": "date"}')
    assert logical.canonical == '{"type":"int","logicalType":"date"}'


def test_avro_named_types_are_defined_once_then_named() -> None:
    schema = parse_schema("AVRO", json.dumps({
        "type": "record", "name": "Pair", "namespace": "acme", "fields": [
            {"name": "a", "type": {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}},
            {"name": "b", "type": "Point"},
            {"name": "c", "type": {"type": "enum", "name": "other.Color", "symbols": ["R"]}},
        ]}))
    doc = json.loads(schema.canonical)
    assert doc["fields"][0]["type"]["name"] == "Point" and "namespace" not in doc["fields"][0]["type"]
    assert doc["fields"][1]["type"] == "Point"
    assert doc["fields"][2]["type"]["namespace"] == "other"


def test_avro_parsing_canonical_form_is_the_specifications() -> None:
    schema = parse_avro(json.dumps({
        "type": "record", "name": "User", "namespace": "acme", "doc": "a user", "fields": [
            {"name": "n", "type": "int", "default": 1, "doc": "x"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ]}))
    assert schema.parsing_canonical_form() == (
        '{"name":"acme.User","type":"record","fields":[{"name":"n","type":"int"},'
        '{"name":"tags","type":{"type":"array","items":"string"}}]}'
    )


def test_avro_references_are_named_not_inlined() -> None:
    address = json.dumps({"type": "record", "name": "Address", "namespace": "acme",
                          "fields": [{"name": "city", "type": "string"}]})
    user = json.dumps({"type": "record", "name": "User", "namespace": "acme",
                       "fields": [{"name": "home", "type": "Address"}]})
    ref = Reference("acme.Address", "address", 1)
    parsed = parse_schema("AVRO", user, [(ref, address)])
    assert json.loads(parsed.canonical)["fields"][0]["type"] == "Address"
    assert json.loads(parsed.formatted("resolved"))["fields"][0]["type"]["name"] == "Address"
    with pytest.raises(SchemaError):
        parse_schema("AVRO", user)  # without its reference, Address is unknown


@pytest.mark.parametrize("bad", [
    "", "not json", "[", "42", '{"type": "nope"}', '{"type": "record", "name": "R"}',
    '{"type": "record", "name": "1R", "fields": []}', '{"type": "record", "name": "R", "fields": [{"name": "a"}]}',
    '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]}',
    '{"type": "enum", "name": "E", "symbols": ["A", "A"]}', '{"type": "enum", "name": "E", "symbols": ["1"]}',
    '{"type": "fixed", "name": "F", "size": -1}', '{"type": "array"}', '{"type": "map"}',
    '["int", "int"]', '["null", ["int"]]', '{"type": "record", "name": "int", "fields": []}',
    '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}',
    '{"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "int"], "default": 1}]}',
    '{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}',
], ids=lambda s: s[:40] or "empty")
def test_invalid_avro_schemas_are_refused(bad: str) -> None:
    with pytest.raises(SchemaError):
        parse_schema("AVRO", bad)


def test_stored_avro_schemas_are_read_without_checking_defaults() -> None:
    """As Confluent: a new schema's defaults are checked; a stored one (registered by an older
    registry that did not check them) is still read."""
    bad_default = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}'
    with pytest.raises(SchemaError):
        parse_schema("AVRO", bad_default)
    assert parse_schema("AVRO", bad_default, new=False).canonical.startswith('{"type":"record"')


def test_deeply_nested_avro_is_refused_not_a_crash() -> None:
    for depth in (300, 5000):
        text = '{"type": "array", "items": ' * depth + '"int"' + "}" * depth
        with pytest.raises(SchemaError):
            parse_schema("AVRO", text)


# -- JSON Schema -----------------------------------------------------------------------------------


def test_json_schema_canonical_form_keeps_key_order_without_blanks() -> None:
    text = '{ "type": "object",\n  "properties": { "b": {"type": "string"}, "a": {"type": "integer"} } }'
    parsed = parse_schema("JSON", text)
    assert parsed.canonical == '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}'
    assert parsed.normalized().canonical == '{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}'


@pytest.mark.parametrize("draft", [
    "http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
])
def test_every_draft_is_read(draft: str) -> None:
    parsed = parse_schema("JSON", json.dumps({"$schema": draft, "type": "object",
                                              "properties": {"a": {"type": "string"}}}))
    assert parsed.schema_type == "JSON"


def test_json_schema_references_resolve_by_name() -> None:
    customer = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
    order = json.dumps({"type": "object", "properties": {"customer": {"$ref": "customer.json"}}})
    parse_schema("JSON", order, [(Reference("customer.json", "customer", 1), customer)])
    with pytest.raises(SchemaError, match="Unresolved"):
        parse_schema("JSON", order)


@pytest.mark.parametrize("bad", [
    '{"type": 5}', '{"type": "object", "properties": 3}', '{"$ref": "#/definitions/missing"}',
    '{"$schema": "http://example.com/my-meta"}', '"a string"', "[1, 2]", "{", '{"minLength": -1}',
    '{"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}}, "$ref": "#/definitions/a"}',
], ids=lambda s: s[:40])
def test_invalid_json_schemas_are_refused(bad: str) -> None:
    with pytest.raises(SchemaError):
        parse_schema("JSON", bad)


# -- Protobuf --------------------------------------------------------------------------------------

PROTO = '''syntax = "proto3";
package acme;

import "google/protobuf/timestamp.proto";

message Event {
  string id = 1;
  google.protobuf.Timestamp at = 2;
  map<string, int64> counts = 3;
  optional string note = 4;
  oneof kind {
    int32 a = 5;
    string b = 6;
  }
  enum Level { LOW = 0; HIGH = 1; }
  Level level = 7;
  repeated Event children = 8;
}
'''


def test_proto_text_and_its_descriptor_give_one_canonical_form() -> None:
    text = parse_schema("PROTOBUF", PROTO)
    serialized = text.formatted("serialized")
    base64.b64decode(serialized, validate=True)
    from_descriptor = parse_schema("PROTOBUF", serialized)
    assert from_descriptor.canonical == text.canonical
    assert "map<string, int64> counts = 3;" in text.canonical
    assert "optional string note = 4;" in text.canonical
    assert "oneof kind {" in text.canonical
    # the canonical text compiles back to the same schema
    assert parse_schema("PROTOBUF", text.canonical).canonical == text.canonical


def test_proto_imports_resolve_to_references() -> None:
    common = 'syntax = "proto3";\npackage acme.common;\nmessage Money { int64 units = 1; string currency = 2; }\n'
    order = ('syntax = "proto3";\npackage acme;\nimport "acme/common.proto";\n'
             "message Order { acme.common.Money total = 1; }\n")
    ref = Reference("acme/common.proto", "common", 1)
    parsed = parse_schema("PROTOBUF", order, [(ref, common)])
    assert ".acme.common.Money total = 1;" in parsed.canonical
    with pytest.raises(SchemaError):
        parse_schema("PROTOBUF", order)


@pytest.mark.parametrize("bad", [
    'syntax = "proto3"; message E { strin a = 1; }',
    'syntax = "proto3"; message E { int32 a = 1; int32 b = 1; }',
    'syntax = "proto3"; import "../../etc/passwd"; message E { int32 a = 1; }',
    'syntax = "proto3"; import "/etc/passwd"; message E { int32 a = 1; }',
    "message {",
    "AAAA",  # base64 of bytes that are not a FileDescriptorProto
    base64.b64encode(b"\xff\xff\xff\xff").decode(),
], ids=lambda s: s[:40])
def test_invalid_protobuf_schemas_are_refused(bad: str) -> None:
    with pytest.raises(SchemaError):
        parse_schema("PROTOBUF", bad)


def test_unknown_schema_types_are_refused() -> None:
    with pytest.raises(SchemaError, match="Invalid schema type"):
        parse_schema("XML", "<a/>")


# -- hypothesis: malformed input is always a SchemaError ------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(
        st.sampled_from(["type", "name", "namespace", "fields", "symbols", "items", "values", "size", "default",
                         "properties", "required", "$ref", "enum", "anyOf", "oneOf", "allOf", "not",
                         "additionalProperties", "aliases", "doc", "logicalType", "$schema", "definitions"])
        | st.text(max_size=6), children, max_size=6),
    max_leaves=30,
)
type_names = st.sampled_from(["record", "enum", "fixed", "array", "map", "int", "string", "null", "R", "object",
                              "integer", "number", "boolean", "Foo.Bar"])


def schema_like() -> st.SearchStrategy[object]:
    field = st.fixed_dictionaries({"name": st.text(max_size=4), "type": type_names | json_values},
                                  optional={"default": json_values})
    record = st.fixed_dictionaries({"type": type_names, "name": st.text(max_size=5)},
                                   optional={"fields": st.lists(field, max_size=4), "symbols": st.lists(st.text(max_size=3)),
                                             "items": type_names | json_values, "size": json_values,
                                             "properties": st.dictionaries(st.text(max_size=3), json_values, max_size=3),
                                             "required": json_values, "namespace": json_values})
    return record | json_values


@settings(max_examples=300)
@given(schema_like(), st.sampled_from(["AVRO", "JSON"]))
def test_malformed_schemas_raise_only_schema_error(doc: object, schema_type: str) -> None:
    try:
        parsed = parse_schema(schema_type, json.dumps(doc))
    except SchemaError:
        return
    # what parses has a canonical form that parses again to the same form
    assert parse_schema(schema_type, parsed.canonical, new=False).canonical == parsed.canonical


@settings(max_examples=200)
@given(st.text(max_size=200), st.sampled_from(["AVRO", "JSON"]))
def test_arbitrary_text_raises_only_schema_error(text: str, schema_type: str) -> None:
    with contextlib.suppress(SchemaError):
        parse_schema(schema_type, text)


proto_tokens = st.sampled_from([
    'syntax = "proto3";', 'syntax = "proto2";', "package a.b;", "message", "M", "{", "}", "int32", "string",
    "repeated", "optional", "oneof", "map<string,int32>", "=", "1", "2", ";", "enum", "E", "import",
    '"google/protobuf/any.proto"', '"x.proto"', "reserved", "to", "max", "[default = 3]", "extend", "service",
    "rpc", "(", ")", "returns", "stream",
])


@settings(max_examples=25)
@given(st.lists(proto_tokens, max_size=25).map(" ".join) | st.binary(max_size=80).map(
    lambda b: base64.b64encode(b).decode()))
def test_malformed_protobuf_raises_only_schema_error(text: str) -> None:
    with contextlib.suppress(SchemaError):
        parse_schema("PROTOBUF", text)
