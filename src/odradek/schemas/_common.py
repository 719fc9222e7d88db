"""What every schema format shares: the error a bad schema raises, references, and the form
compatibility messages take."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.errors import OdradekError

__all__ = [
    "AVRO",
    "DIFFERENT_TYPE",
    "JSON",
    "PROTOBUF",
    "SCHEMA_TYPES",
    "Incompatibility",
    "ParsedSchema",
    "Reference",
    "SchemaError",
    "loads",
]

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
#: the schema types the registry serves (``GET /schemas/types``), in Confluent's order
SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)


class SchemaError(OdradekError, ValueError):
    """A schema that cannot be parsed, or breaks its format's rules (the registry answers 42201)."""


@dataclass(frozen=True, slots=True, order=True)
class Reference:
    """A schema reference as the registry stores it: the name the schema uses for it (an Avro
    full name, a ``.proto`` import path, a JSON Schema ``$ref`` URL) and the subject version
    that holds the referenced schema."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """One reason a reader schema cannot read data written with a writer schema.

    ``description`` holds Confluent's wording with two ``%s`` marks for the roles of the schemas
    (``reader``, ``writer``: "new" and "old", or the other way round, filled in by
    :func:`odradek.schemas.compatibility.check`); a literal ``%`` is written ``%%``."""

    error_type: str
    description: str
    #: Avro's "additionalInfo" (None: the format has no such part)
    info: str | None = None
    #: JSON Schema and Protobuf messages quote with double quotes, Avro's with single ones
    style: str = "avro"

    def render(self, reader: str, writer: str) -> str:
        description = _fill(self.description, reader, writer)
        if self.style == "plain":
            return description
        if self.style == "avro":
            return f"{{errorType:'{self.error_type}', description:'{description}', additionalInfo:'{self.info}'}}"
        if self.style == "json":
            return f'{{errorType:"{self.error_type}", description:"{description}\'}}'
        return f'{{errorType:"{self.error_type}", description:"{description}"}}'


#: a schema of another type than the one it is compared with
DIFFERENT_TYPE = Incompatibility("SCHEMA_TYPE_CHANGED", "Incompatible because of different schema type", style="plain")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def loads(text: str | bytes) -> Any:
    """Standard JSON only (no ``NaN``/``Infinity``, no number beyond a double): ValueError or
    RecursionError otherwise."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite)


def _fill(template: str, reader: str, writer: str) -> str:
    """``template`` with its first ``%s`` replaced by ``reader`` and its second by ``writer``
    (Java's String.format ignores arguments beyond the marks), ``%%`` by ``%``."""
    out: list[str] = []
    args = [reader, writer]
    i = 0
    while i < len(template):
        c = template[i]
        if c == "%" and i + 1 < len(template):
            nxt = template[i + 1]
            if nxt == "s":
                out.append(args.pop(0) if args else "")
                i += 2
                continue
            if nxt == "%":
                out.append("%")
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def escape(text: str) -> str:
    """``text`` safe inside an :class:`Incompatibility` description."""
    return text.replace("%", "%%")


class ParsedSchema(Protocol):
    """A schema of one of the registry's formats, parsed and checked.

    * ``canonical`` is what the registry stores and compares: the same schema written with other
      white space or key order gives the same string (Confluent's ``canonicalString``);
    * :meth:`normalized` is the schema put in its normal form (``normalize=true``);
    * :meth:`formatted` is the schema in a named format (``?format=``), the canonical form for a
      format the type does not know;
    * :meth:`incompatibilities` lists why this schema, as the reader, cannot read what
      ``writer`` wrote (empty: it can): Avro's schema resolution, Confluent's JSON Schema and
      Protobuf rules.
    """

    schema_type: str
    references: tuple[Reference, ...]

    @property
    def canonical(self) -> str: ...

    def normalized(self) -> ParsedSchema: ...

    def formatted(self, fmt: str) -> str: ...

    def incompatibilities(self, writer: ParsedSchema) -> list[Incompatibility]: ...
