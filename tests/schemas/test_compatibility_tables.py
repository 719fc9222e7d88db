"""The compatibility verdicts of each format against Confluent's documented rules.

Each row: an old schema, a new one, a level, and whether Confluent's registry accepts the new one
after the old one.  Avro follows Avro's schema resolution (the new schema reads the old one's data
for BACKWARD, the other way round for FORWARD, both for FULL); JSON Schema and Protobuf follow
Confluent's diff rules (for JSON Schema the content model decides: with an open one, adding a
property is incompatible and removing one compatible; with a closed one the other way round).
"""

from __future__ import annotations

import json

import pytest

from odradek.schemas import Previous, check_compatibility, parse_schema


def avro_record(*fields: dict[str, object], name: str = "User") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "acme", "fields": list(fields)})


def f(name: str, type_: object, **extra: object) -> dict[str, object]:
    return {"name": name, "type": type_, **extra}


E_ABC = {"type": "enum", "name": "Color", "symbols": ["A", "B", "C"]}
E_AB = {"type": "enum", "name": "Color", "symbols": ["A", "B"]}
E_AB_DEFAULT = {"type": "enum", "name": "Color", "symbols": ["A", "B"], "default": "A"}

AVRO_CASES = [
    # (case, old, new, level, compatible)
    ("field added with a default", avro_record(f("a", "string")),
     avro_record(f("a", "string"), f("b", "int", default=0)), "BACKWARD", True),
    ("field added without a default", avro_record(f("a", "string")),
     avro_record(f("a", "string"), f("b", "int")), "BACKWARD", False),
    ("field added without a default, forward", avro_record(f("a", "string")),
     avro_record(f("a", "string"), f("b", "int")), "FORWARD", True),
    ("field added without a default, full", avro_record(f("a", "string")),
     avro_record(f("a", "string"), f("b", "int")), "FULL", False),
    ("optional field added, full", avro_record(f("a", "string")),
     avro_record(f("a", "string"), f("b", ["null", "int"], default=None)), "FULL", True),
    ("field removed", avro_record(f("a", "string"), f("b", "int")), avro_record(f("a", "string")), "BACKWARD", True),
    ("field without default removed, forward", avro_record(f("a", "string"), f("b", "int")),
     avro_record(f("a", "string")), "FORWARD", False),
    ("field with default removed, forward", avro_record(f("a", "string"), f("b", "int", default=1)),
     avro_record(f("a", "string")), "FORWARD", True),
    ("int widened to long", avro_record(f("n", "int")), avro_record(f("n", "long")), "BACKWARD", True),
    ("int widened to long, forward", avro_record(f("n", "int")), avro_record(f("n", "long")), "FORWARD", False),
    ("long narrowed to int", avro_record(f("n", "long")), avro_record(f("n", "int")), "BACKWARD", False),
    ("float widened to double", avro_record(f("n", "float")), avro_record(f("n", "double")), "BACKWARD", True),
    ("string to bytes", avro_record(f("s", "string")), avro_record(f("s", "bytes")), "FULL", True),
    ("string to int", avro_record(f("s", "string")), avro_record(f("s", "int")), "BACKWARD", False),
    ("enum symbol added", avro_record(f("c", E_AB)), avro_record(f("c", E_ABC)), "BACKWARD", True),
    ("enum symbol added, forward", avro_record(f("c", E_AB)), avro_record(f("c", E_ABC)), "FORWARD", False),
    ("enum symbol removed", avro_record(f("c", E_ABC)), avro_record(f("c", E_AB)), "BACKWARD", False),
    ("enum symbol removed, reader has a default", avro_record(f("c", E_ABC)), avro_record(f("c", E_AB_DEFAULT)),
     "BACKWARD", True),
    ("union branch added", avro_record(f("u", ["null", "int"], default=None)),
     avro_record(f("u", ["null", "int", "string"], default=None)), "BACKWARD", True),
    ("union branch removed", avro_record(f("u", ["null", "int", "string"], default=None)),
     avro_record(f("u", ["null", "int"], default=None)), "BACKWARD", False),
    ("field made optional", avro_record(f("a", "int")), avro_record(f("a", ["null", "int"], default=None)),
     "BACKWARD", True),
    ("field renamed with an alias", avro_record(f("a", "int")), avro_record(f("b", "int", aliases=["a"])),
     "BACKWARD", True),
    ("field renamed without an alias", avro_record(f("a", "int")), avro_record(f("b", "int")), "BACKWARD", False),
    ("record renamed", avro_record(f("a", "int")), avro_record(f("a", "int"), name="Person"), "BACKWARD", False),
    ("fixed size changed", avro_record(f("x", {"type": "fixed", "name": "H", "size": 16})),
     avro_record(f("x", {"type": "fixed", "name": "H", "size": 32})), "BACKWARD", False),
    ("array items widened", avro_record(f("xs", {"type": "array", "items": "int"})),
     avro_record(f("xs", {"type": "array", "items": "long"})), "BACKWARD", True),
    ("map values narrowed", avro_record(f("m", {"type": "map", "values": "long"})),
     avro_record(f("m", {"type": "map", "values": "int"})), "BACKWARD", False),
    ("anything, at NONE", avro_record(f("a", "string")), avro_record(f("a", "int")), "NONE", True),
]


@pytest.mark.parametrize(("case", "old", "new", "level", "compatible"), AVRO_CASES, ids=[c[0] for c in AVRO_CASES])
def test_avro_verdicts_are_confluents(case: str, old: str, new: str, level: str, compatible: bool) -> None:
    errors = check_compatibility(level, parse_schema("AVRO", new), [Previous(parse_schema("AVRO", old), 1)])
    assert (not errors) is compatible, errors


def test_avro_messages_are_confluents() -> None:
    old = avro_record(f("a", "string"))
    new = avro_record(f("a", "string"), f("b", "int"))
    errors = check_compatibility("BACKWARD", parse_schema("AVRO", new), [Previous(parse_schema("AVRO", old), 3)])
    assert errors[0] == (
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path '/fields/1' in the new "
        "schema has no default value and is missing in the old schema', additionalInfo:'b'}"
    )
    assert errors[1] == "{oldSchemaVersion: 3}"
    assert errors[2].startswith("{oldSchema: '{\"type\":\"record\"")
    assert errors[-1] == "{validateFields: 'false', compatibility: 'BACKWARD'}"


def test_transitive_levels_check_every_earlier_version() -> None:
    v1 = parse_schema("AVRO", avro_record(f("a", "string"), f("s", "string")))
    v2 = parse_schema("AVRO", avro_record(f("a", "string")))
    v3 = parse_schema("AVRO", avro_record(f("a", "string"), f("s", "int", default=0)))
    history = [Previous(v1, 1), Previous(v2, 2)]
    assert check_compatibility("BACKWARD", v3, history) == []
    errors = check_compatibility("BACKWARD_TRANSITIVE", v3, history)
    assert errors and "{oldSchemaVersion: 1}" in errors
    assert check_compatibility("FULL", v3, history) == []
    assert check_compatibility("FULL_TRANSITIVE", v3, history)


def test_recursive_avro_types_compare() -> None:
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "value", "type": "int"},
        {"name": "next", "type": ["null", "Node"], "default": None},
    ]}
    grown = json.loads(json.dumps(node))
    grown["fields"].append({"name": "label", "type": "string", "default": ""})
    old, new = parse_schema("AVRO", json.dumps(node)), parse_schema("AVRO", json.dumps(grown))
    assert check_compatibility("FULL", new, [Previous(old, 1)]) == []


def js(properties: dict[str, object], *, required: list[str] | None = None, closed: bool = False,
       **extra: object) -> str:
    doc: dict[str, object] = {"type": "object", "properties": properties, **extra}
    if required:
        doc["required"] = required
    if closed:
        doc["additionalProperties"] = False
    return json.dumps(doc)


S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741
N = {"type": "number"}

JSON_CASES = [
    ("property added to an open content model", js({"a": S}), js({"a": S, "b": I}), "BACKWARD", False),
    ("property added to a closed content model", js({"a": S}, closed=True), js({"a": S, "b": I}, closed=True),
     "BACKWARD", True),
    ("property removed from an open content model", js({"a": S, "b": I}), js({"a": S}), "BACKWARD", True),
    ("property removed from a closed content model", js({"a": S, "b": I}, closed=True), js({"a": S}, closed=True),
     "BACKWARD", False),
    ("property added to an open content model, forward", js({"a": S}), js({"a": S, "b": I}), "FORWARD", True),
    ("property made required", js({"a": S}), js({"a": S}, required=["a"]), "BACKWARD", False),
    ("property made required with a default", js({"a": S}), js({"a": {"type": "string", "default": "x"}}, required=["a"]),
     "BACKWARD", True),
    ("property made optional", js({"a": S}, required=["a"]), js({"a": S}), "BACKWARD", True),
    ("integer widened to number", js({"n": I}), js({"n": N}), "BACKWARD", True),
    ("number narrowed to integer", js({"n": N}), js({"n": I}), "BACKWARD", False),
    ("string to integer", js({"a": S}), js({"a": I}), "BACKWARD", False),
    ("enum extended", js({"c": {"enum": ["A", "B"]}}), js({"c": {"enum": ["A", "B", "C"]}}), "BACKWARD", True),
    ("enum narrowed", js({"c": {"enum": ["A", "B", "C"]}}), js({"c": {"enum": ["A", "B"]}}), "BACKWARD", False),
    ("maxLength increased", js({"a": {"type": "string", "maxLength": 5}}), js({"a": {"type": "string", "maxLength": 9}}),
     "BACKWARD", True),
    ("maxLength decreased", js({"a": {"type": "string", "maxLength": 9}}), js({"a": {"type": "string", "maxLength": 5}}),
     "BACKWARD", False),
    ("minimum added", js({"n": I}), js({"n": {"type": "integer", "minimum": 0}}), "BACKWARD", False),
    ("minimum removed", js({"n": {"type": "integer", "minimum": 0}}), js({"n": I}), "BACKWARD", True),
    ("type widened to a union", js({"a": S}), js({"a": {"type": ["string", "null"]}}), "BACKWARD", True),
    ("union narrowed to a type", js({"a": {"type": ["string", "null"]}}), js({"a": S}), "BACKWARD", False),
    ("oneOf branch added", js({"a": {"oneOf": [S, I]}}), js({"a": {"oneOf": [S, I, {"type": "boolean"}]}}),
     "BACKWARD", True),
    ("oneOf branch removed", js({"a": {"oneOf": [S, I, {"type": "boolean"}]}}), js({"a": {"oneOf": [S, I]}}),
     "BACKWARD", False),
    ("array items narrowed", js({"xs": {"type": "array", "items": N}}), js({"xs": {"type": "array", "items": I}}),
     "BACKWARD", False),
    ("title and description changed", js({"a": S}, title="One"), js({"a": S}, title="Two", description="d"),
     "FULL", True),
    ("anything, at NONE", js({"a": S}), js({"a": I}), "NONE", True),
]


@pytest.mark.parametrize(("case", "old", "new", "level", "compatible"), JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_json_schema_verdicts_are_confluents(case: str, old: str, new: str, level: str, compatible: bool) -> None:
    errors = check_compatibility(level, parse_schema("JSON", new), [Previous(parse_schema("JSON", old), 1)])
    assert (not errors) is compatible, errors


def test_json_schema_messages_name_the_path() -> None:
    errors = check_compatibility("BACKWARD", parse_schema("JSON", js({"a": S}, required=["a"])),
                                 [Previous(parse_schema("JSON", js({"a": S})), 1)])
    assert errors[0].startswith('{errorType:"REQUIRED_ATTRIBUTE_ADDED", description:"The keyword at path '
                                "'#/required/a' in the new schema is not present in the old schema")


def test_json_schema_refs_and_recursion_compare() -> None:
    tree = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"node": {"type": "object", "properties": {
            "v": I, "children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}},
        "$ref": "#/definitions/node",
    }
    grown = json.loads(json.dumps(tree))
    grown["definitions"]["node"]["properties"]["v"] = N
    old, new = parse_schema("JSON", json.dumps(tree)), parse_schema("JSON", json.dumps(grown))
    assert check_compatibility("BACKWARD", new, [Previous(old, 1)]) == []
    assert check_compatibility("FORWARD", new, [Previous(old, 1)])


def proto(body: str, package: str = "acme", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage {package};\n{body}\n'


PROTO_CASES = [
    ("field added", proto("message E { string id = 1; }"), proto("message E { string id = 1; int32 n = 2; }"),
     "BACKWARD", True),
    ("field removed", proto("message E { string id = 1; int32 n = 2; }"), proto("message E { string id = 1; }"),
     "BACKWARD", True),
    ("field renamed", proto("message E { string id = 1; }"), proto("message E { string key = 1; }"), "FULL", True),
    ("field renumbered", proto("message E { string id = 1; int32 n = 2; }"),
     proto("message E { string id = 1; int32 n = 3; }"), "BACKWARD", True),
    ("int32 widened to int64", proto("message E { int32 n = 1; }"), proto("message E { int64 n = 1; }"),
     "BACKWARD", True),
    ("int32 to sint32", proto("message E { int32 n = 1; }"), proto("message E { sint32 n = 1; }"), "BACKWARD", False),
    ("int32 to string", proto("message E { int32 n = 1; }"), proto("message E { string n = 1; }"), "BACKWARD", False),
    ("string to bytes", proto("message E { string s = 1; }"), proto("message E { bytes s = 1; }"), "BACKWARD", True),
    ("scalar to message", proto("message E { int32 n = 1; } message M { int32 x = 1; }"),
     proto("message E { M n = 1; } message M { int32 x = 1; }"), "BACKWARD", False),
    ("message removed", proto("message E { int32 n = 1; } message F { int32 x = 1; }"),
     proto("message E { int32 n = 1; }"), "BACKWARD", False),
    ("message added", proto("message E { int32 n = 1; }"),
     proto("message E { int32 n = 1; } message F { int32 x = 1; }"), "BACKWARD", True),
    ("enum value added", proto("message E { C c = 1; } enum C { A = 0; }"),
     proto("message E { C c = 1; } enum C { A = 0; B = 1; }"), "FULL", True),
    ("enum value removed", proto("message E { C c = 1; } enum C { A = 0; B = 1; }"),
     proto("message E { C c = 1; } enum C { A = 0; }"), "BACKWARD", True),
    ("package changed", proto("message E { int32 n = 1; }"), proto("message E { int32 n = 1; }", package="other"),
     "BACKWARD", False),
    ("required field added", proto("message E { optional int32 n = 1; }", syntax="proto2"),
     proto("message E { optional int32 n = 1; required int32 m = 2; }", syntax="proto2"), "BACKWARD", False),
    ("optional numeric made repeated", proto("message E { optional int32 n = 1; }", syntax="proto2"),
     proto("message E { repeated int32 n = 1; }", syntax="proto2"), "BACKWARD", False),
    ("field moved out of a oneof", proto("message E { oneof o { int32 a = 1; string b = 2; } }"),
     proto("message E { int32 a = 1; oneof o { string b = 2; } }"), "BACKWARD", True),
    ("two fields moved into a oneof", proto("message E { int32 a = 1; string b = 2; }"),
     proto("message E { oneof o { int32 a = 1; string b = 2; } }"), "BACKWARD", False),
    ("map value type changed", proto("message E { map<string, int32> m = 1; }"),
     proto("message E { map<string, string> m = 1; }"), "BACKWARD", False),
    ("anything, at NONE", proto("message E { int32 n = 1; }"), proto("message E { string n = 1; }"), "NONE", True),
]


@pytest.mark.parametrize(("case", "old", "new", "level", "compatible"), PROTO_CASES, ids=[c[0] for c in PROTO_CASES])
def test_protobuf_verdicts_are_confluents(case: str, old: str, new: str, level: str, compatible: bool) -> None:
    errors = check_compatibility(level, parse_schema("PROTOBUF", new), [Previous(parse_schema("PROTOBUF", old), 1)])
    assert (not errors) is compatible, errors


def test_a_schema_of_another_type_is_incompatible() -> None:
    avro = parse_schema("AVRO", avro_record(f("a", "string")))
    json_schema = parse_schema("JSON", js({"a": S}))
    assert check_compatibility("BACKWARD", json_schema, [Previous(avro, 1)])[0] == (
        "Incompatible because of different schema type"
    )
