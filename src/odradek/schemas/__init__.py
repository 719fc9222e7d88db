"""Schemas as pure logic: the registry's formats (Avro, JSON Schema, Protobuf), their canonical
forms, compatibility, and the records of Confluent's ``_schemas`` topic.

No sockets and no asyncio here; the registry service (:mod:`odradek.registry`) serves this over
HTTP, and serializers and the Spark source use it to parse a schema by type, get its canonical
form, check compatibility and read data written with another version of a schema:

* :func:`parse_schema` — a schema text of a type (``AVRO``, ``JSON``, ``PROTOBUF``) with the
  texts of the schemas it references, parsed and checked: a :class:`ParsedSchema`, or
  :class:`SchemaError` (the registry's 42201);
* :meth:`ParsedSchema.canonical` / :meth:`~ParsedSchema.normalized` /
  :meth:`~ParsedSchema.formatted` — the forms the registry stores and serves;
* :func:`check_compatibility` — Confluent's compatibility levels over a subject's versions, with
  its messages; :meth:`ParsedSchema.incompatibilities` the format's own reader/writer rule;
* :mod:`odradek.schemas.store` — the ``_schemas`` records (keys and values in Confluent's JSON)
  and the registry's state rebuilt from them;
* :mod:`odradek.schemas.avro` also gives Avro's Parsing Canonical Form, and the parsed tree a
  reader uses to resolve data written with an older writer schema.

Parsing a Protobuf schema given as ``.proto`` text runs grpcio-tools' compiler in a child
process (:mod:`odradek.schemas._protoc`); everything else is in-process Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from odradek.schemas._common import (
    AVRO,
    JSON,
    PROTOBUF,
    SCHEMA_TYPES,
    Incompatibility,
    ParsedSchema,
    Reference,
    SchemaError,
)
from odradek.schemas.compatibility import DEFAULT_LEVEL, LEVELS, Previous, parse_level
from odradek.schemas.compatibility import check as check_compatibility

__all__ = [
    "AVRO",
    "DEFAULT_LEVEL",
    "JSON",
    "LEVELS",
    "PROTOBUF",
    "SCHEMA_TYPES",
    "Incompatibility",
    "ParsedSchema",
    "Previous",
    "Reference",
    "SchemaError",
    "check_compatibility",
    "parse_level",
    "parse_schema",
    "schema_type_of",
]


def schema_type_of(value: object) -> str:
    """A request's ``schemaType`` (absent: AVRO); SchemaError for a type the registry lacks."""
    if value is None:
        return AVRO
    if isinstance(value, str) and value.upper() in SCHEMA_TYPES:
        return value.upper()
    raise SchemaError(f"Invalid schema type {value}")


def parse_schema(
    schema_type: str,
    text: str,
    references: Iterable[tuple[Reference, str]] = (),
    *,
    new: bool = True,
) -> ParsedSchema:
    """Parse ``text`` as a schema of ``schema_type``.  ``references`` pairs each reference with
    the text of the schema it names, the references of references first (the caller resolves
    them).  ``new``: the schema is being registered (Avro's default values are checked, as
    Confluent checks a new schema and not the stored ones)."""
    if not isinstance(text, str) or not text.strip():
        raise SchemaError("Empty schema")
    refs: Sequence[tuple[Reference, str]] = list(references)
    if schema_type == AVRO:
        from odradek.schemas.avro import parse_avro

        return parse_avro(text, refs, validate_defaults=new)
    if schema_type == JSON:
        from odradek.schemas.jsonschema import parse_json_schema

        return parse_json_schema(text, refs)
    if schema_type == PROTOBUF:
        from odradek.schemas.protobuf import parse_protobuf

        return parse_protobuf(text, refs)
    raise SchemaError(f"Invalid schema type {schema_type}")
