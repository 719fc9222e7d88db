"""Avro schemas: parsing and the checks Java's Avro makes, the canonical forms, and Avro's schema
resolution rules as the compatibility test.

A schema is read from its JSON text into a small tree (:class:`Primitive`, :class:`Record`,
:class:`Enum`, :class:`Fixed`, :class:`Array`, :class:`Map`, :class:`Union`).  It is first
handed to fastavro (the library Odradek's serializers use, so that a schema the registry
accepts is one they can use), then checked as Java's ``Schema.Parser`` does, which is stricter:
names, duplicate fields and union branches, nested unions, and (for a new schema) default values
against their types.

Forms:

* :attr:`AvroSchema.canonical` — what the registry stores, as Java's ``Schema.toString()``
  writes it (Confluent's ``canonicalString``): compact JSON, keys in Avro's order, a primitive
  without properties as a bare name, named types defined once and then named, namespaces written
  only where they change, the types of referenced schemas named rather than inlined;
* :meth:`AvroSchema.formatted` ``"resolved"`` — the same with the referenced types inlined;
* :func:`parsing_canonical_form` — Avro's Parsing Canonical Form (the specification's
  fingerprinting form: full names, only the attributes that affect parsing);
* :meth:`AvroSchema.normalized` — ``normalize=true``: full names, keys in one order and custom
  properties sorted, so that schemas that differ only in how they are written compare equal.

Compatibility (:meth:`AvroSchema.incompatibilities`) is Avro's reader/writer check
(``SchemaCompatibility`` in Java's Avro), with its incompatibility types, locations and the
messages Confluent's registry gives for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.schemas._common import (
    AVRO,
    DIFFERENT_TYPE,
    Incompatibility,
    Reference,
    SchemaError,
    escape,
    loads,
)

__all__ = [
    "Array",
    "AvroSchema",
    "AvroType",
    "Enum",
    "Field",
    "Fixed",
    "Map",
    "Primitive",
    "Record",
    "Union",
    "parse_avro",
    "parsing_canonical_form",
]

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_NAMED_KINDS = ("record", "error", "enum", "fixed")
#: how deep a schema may nest (a hostile schema cannot exhaust the stack)
MAX_DEPTH = 200
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_NO_DEFAULT: Any = object()

_RECORD_KEYS = frozenset({"type", "name", "namespace", "doc", "fields", "aliases"})
_FIELD_KEYS = frozenset({"name", "type", "doc", "default", "order", "aliases"})
_ENUM_KEYS = frozenset({"type", "name", "namespace", "doc", "symbols", "aliases", "default"})
_FIXED_KEYS = frozenset({"type", "name", "namespace", "doc", "size", "aliases"})


# -- the tree ----------------------------------------------------------------------------------


@dataclass(eq=False)
class Primitive:
    type: str
    props: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class _Named:
    name: str  # the simple name
    namespace: str | None
    doc: str | None = None
    aliases: list[str] = field(default_factory=list)  # full names
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def fullname(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


@dataclass(eq=False)
class Field:
    name: str
    type: AvroType
    pos: int
    doc: str | None = None
    default: Any = _NO_DEFAULT
    order: str = "ascending"
    aliases: list[str] = field(default_factory=list)
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


@dataclass(eq=False)
class Record(_Named):
    fields: list[Field] = field(default_factory=list)
    is_error: bool = False

    @property
    def type(self) -> str:
        return "record"


@dataclass(eq=False)
class Enum(_Named):
    symbols: list[str] = field(default_factory=list)
    default: str | None = None

    @property
    def type(self) -> str:
        return "enum"


@dataclass(eq=False)
class Fixed(_Named):
    size: int = 0

    @property
    def type(self) -> str:
        return "fixed"


@dataclass(eq=False)
class Array:
    items: AvroType
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return "array"


@dataclass(eq=False)
class Map:
    values: AvroType
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return "map"


@dataclass(eq=False)
class Union:
    branches: list[AvroType]

    @property
    def type(self) -> str:
        return "union"


AvroType = Primitive | Record | Enum | Fixed | Array | Map | Union
Named = Record | Enum | Fixed


# -- parsing -----------------------------------------------------------------------------------


def _valid_name(name: object) -> bool:
    if not isinstance(name, str) or not name:
        return False
    first = name[0]
    if not (first.isalpha() or first == "_"):
        return False
    return all(c.isalnum() or c == "_" for c in name[1:])


def _split_fullname(name: str, namespace: str | None) -> tuple[str, str | None]:
    """(simple name, namespace) of ``name`` given in the scope ``namespace`` (Java's Name)."""
    if "." in name:
        ns, _, simple = name.rpartition(".")
        return simple, ns or None
    return name, namespace or None


class _Parser:
    def __init__(self, names: dict[str, Named], validate_defaults: bool) -> None:
        self.names = names
        self.validate_defaults = validate_defaults

    def parse(self, node: Any, namespace: str | None, depth: int = 0) -> AvroType:
        if depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, str):
            return self._named_or_primitive(node, namespace, {})
        if isinstance(node, list):
            return self._union(node, namespace, depth)
        if not isinstance(node, dict):
            raise SchemaError(f"Not a schema: {_short(node)}")
        if "type" not in node:
            raise SchemaError(f"No type: {_short(node)}")
        kind = node["type"]
        if isinstance(kind, (dict, list)):
            # {"type": {...}} nests a schema: Java's Avro reads the inner one
            return self.parse(kind, namespace, depth + 1)
        if not isinstance(kind, str):
            raise SchemaError(f"No type: {_short(node)}")
        if kind in ("record", "error"):
            return self._record(node, namespace, depth, kind == "error")
        if kind == "enum":
            return self._enum(node, namespace)
        if kind == "fixed":
            return self._fixed(node, namespace)
        if kind == "array":
            if "items" not in node:
                raise SchemaError(f"Array has no items type: {_short(node)}")
            items = self.parse(node["items"], namespace, depth + 1)
            return Array(items, _props(node, ("type", "items")))
        if kind == "map":
            if "values" not in node:
                raise SchemaError(f"Map has no values type: {_short(node)}")
            values = self.parse(node["values"], namespace, depth + 1)
            return Map(values, _props(node, ("type", "values")))
        return self._named_or_primitive(kind, namespace, _props(node, ("type",)))

    def _named_or_primitive(self, name: str, namespace: str | None, props: dict[str, Any]) -> AvroType:
        if name in PRIMITIVES:
            return Primitive(name, props)
        if name in _NAMED_KINDS or name in ("array", "map"):
            raise SchemaError(f'"{name}" is not a type name here: it needs its attributes ({{"type": "{name}", ...}})')
        simple, ns = _split_fullname(name, namespace)
        full = f"{ns}.{simple}" if ns else simple
        found = self.names.get(full)
        if found is None and "." not in name:
            found = self.names.get(name)
        if found is None:
            raise SchemaError(f'"{name}" is not a defined name. The type of the "{name}" field must be a defined '
                              "name or a {\"type\": ...} expression.")
        return found

    def _name(self, node: dict[str, Any], namespace: str | None, what: str) -> tuple[str, str | None]:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaError(f"No name in schema: {_short(node)}")
        declared = node.get("namespace")
        if declared is not None and not isinstance(declared, str):
            raise SchemaError(f"namespace is not a string: {_short(declared)}")
        scope = declared if declared is not None else namespace
        simple, ns = _split_fullname(name, scope)
        if not _valid_name(simple):
            raise SchemaError(f"Illegal initial character: {simple}" if simple and not (simple[0].isalpha() or simple[0] == "_")
                              else f"Illegal character in: {simple}")
        for part in (ns or "").split(".") if ns else ():
            if not _valid_name(part):
                raise SchemaError(f"Illegal character in namespace: {ns}")
        full = f"{ns}.{simple}" if ns else simple
        if simple in PRIMITIVES and not ns:
            raise SchemaError(f"Schemas may not be named after primitives: {simple}")
        if full in self.names:
            raise SchemaError(f"Can't redefine: {full}")
        return simple, ns

    def _aliases(self, node: Mapping[str, Any], namespace: str | None) -> list[str]:
        aliases = node.get("aliases")
        if aliases is None:
            return []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise SchemaError(f"aliases not a list of strings: {_short(aliases)}")
        out = []
        for a in aliases:
            simple, ns = _split_fullname(a, namespace)
            out.append(f"{ns}.{simple}" if ns else simple)
        return out

    def _doc(self, node: Mapping[str, Any]) -> str | None:
        doc = node.get("doc")
        if doc is not None and not isinstance(doc, str):
            raise SchemaError(f"doc is not a string: {_short(doc)}")
        return doc

    def _record(self, node: dict[str, Any], namespace: str | None, depth: int, is_error: bool) -> Record:
        simple, ns = self._name(node, namespace, "record")
        record = Record(simple, ns, self._doc(node), self._aliases(node, ns), _props(node, _RECORD_KEYS), is_error=is_error)
        self.names[record.fullname] = record  # defined before its fields: recursive types
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise SchemaError(f"Record has no fields: {_short(node)}")
        seen: set[str] = set()
        for pos, f in enumerate(fields):
            if not isinstance(f, dict):
                raise SchemaError(f"Not a field: {_short(f)}")
            fname = f.get("name")
            if not isinstance(fname, str):
                raise SchemaError(f"No field name: {_short(f)}")
            if not _valid_name(fname):
                raise SchemaError(f"Illegal character in: {fname}")
            if fname in seen:
                raise SchemaError(f"Duplicate field {fname} in record {record.fullname}: {fname} type:... pos:{pos}")
            seen.add(fname)
            if "type" not in f:
                raise SchemaError(f"No field type: {_short(f)}")
            ftype = self.parse(f["type"], ns, depth + 1)
            order = f.get("order", "ascending")
            if order not in ("ascending", "descending", "ignore"):
                raise SchemaError(f"Illegal order: {_short(order)}")
            default = f.get("default", _NO_DEFAULT)
            if default is not _NO_DEFAULT and self.validate_defaults and not _valid_default(ftype, default, 0):
                raise SchemaError(
                    f"Invalid default for field {fname}: {_short(default)} not a {_type_text(ftype)}"
                )
            aliases = f.get("aliases")
            if aliases is not None and (not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases)):
                raise SchemaError(f"aliases not a list of strings: {_short(aliases)}")
            record.fields.append(
                Field(fname, ftype, pos, self._doc(f), default, order, list(aliases or []), _props(f, _FIELD_KEYS))
            )
        return record

    def _enum(self, node: dict[str, Any], namespace: str | None) -> Enum:
        simple, ns = self._name(node, namespace, "enum")
        symbols = node.get("symbols")
        if not isinstance(symbols, list):
            raise SchemaError(f"Enum has no symbols: {_short(node)}")
        seen: set[str] = set()
        for s in symbols:
            if not _valid_name(s):
                raise SchemaError(f"Illegal character in: {_short(s)}")
            if s in seen:
                raise SchemaError(f"Duplicate enum symbol: {s}")
            seen.add(s)
        default = node.get("default")
        if default is not None and default not in seen:
            raise SchemaError(f"The Enum Default: {_short(default)} is not in the enum symbol set: {symbols}")
        enum = Enum(simple, ns, self._doc(node), self._aliases(node, ns), _props(node, _ENUM_KEYS), list(symbols), default)
        self.names[enum.fullname] = enum
        return enum

    def _fixed(self, node: dict[str, Any], namespace: str | None) -> Fixed:
        simple, ns = self._name(node, namespace, "fixed")
        size = node.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size > _INT_MAX:
            raise SchemaError(f"Invalid or no size: {_short(node)}")
        fixed = Fixed(simple, ns, self._doc(node), self._aliases(node, ns), _props(node, _FIXED_KEYS), size)
        self.names[fixed.fullname] = fixed
        return fixed

    def _union(self, node: list[Any], namespace: str | None, depth: int) -> Union:
        branches: list[AvroType] = []
        seen: set[str] = set()
        for item in node:
            t = self.parse(item, namespace, depth + 1)
            if isinstance(t, Union):
                raise SchemaError(f"Nested union: {_short(node)}")
            key = t.fullname if isinstance(t, (Record, Enum, Fixed)) else t.type
            if key in seen:
                raise SchemaError(f"Duplicate in union:{key}")
            seen.add(key)
            branches.append(t)
        return Union(branches)


def _props(node: Mapping[str, Any], reserved: Iterable[str]) -> dict[str, Any]:
    skip = set(reserved)
    return {k: v for k, v in node.items() if k not in skip}


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _type_text(t: AvroType) -> str:
    if isinstance(t, (Record, Enum, Fixed)):
        return t.fullname
    if isinstance(t, Union):
        return "union"
    return t.type


def _valid_default(t: AvroType, value: Any, depth: int) -> bool:
    """Java's ``Schema.isValidDefault``: whether a JSON ``value`` is a default of type ``t``."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(t, Primitive):
        k = t.type
        if k == "null":
            return value is None
        if k == "boolean":
            return isinstance(value, bool)
        if k == "int":
            return isinstance(value, int) and not isinstance(value, bool) and _INT_MIN <= value <= _INT_MAX
        if k == "long":
            return isinstance(value, int) and not isinstance(value, bool) and _LONG_MIN <= value <= _LONG_MAX
        if k in ("float", "double"):
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        return isinstance(value, str)  # bytes, string
    if isinstance(t, Enum):
        return isinstance(value, str) and value in t.symbols
    if isinstance(t, Fixed):
        return isinstance(value, str)
    if isinstance(t, Array):
        return isinstance(value, list) and all(_valid_default(t.items, v, depth + 1) for v in value)
    if isinstance(t, Map):
        return isinstance(value, dict) and all(_valid_default(t.values, v, depth + 1) for v in value.values())
    if isinstance(t, Union):
        return bool(t.branches) and _valid_default(t.branches[0], value, depth + 1)
    if not isinstance(value, dict):
        return False
    for f in t.fields:
        if f.name in value:
            if not _valid_default(f.type, value[f.name], depth + 1):
                return False
        elif not f.has_default:
            return False
    return True


# -- writing -----------------------------------------------------------------------------------


class _Writer:
    """Java's ``Schema.toJson``: the canonical JSON of a schema."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        self.defined: set[str] = set(known)
        self.space: str | None = None

    def write(self, t: AvroType) -> Any:
        if isinstance(t, Primitive):
            if not t.props:
                return t.type
            return {"type": t.type, **t.props}
        if isinstance(t, Union):
            return [self.write(b) for b in t.branches]
        if isinstance(t, Array):
            return {"type": "array", "items": self.write(t.items), **t.props}
        if isinstance(t, Map):
            return {"type": "map", "values": self.write(t.values), **t.props}
        full = t.fullname
        if full in self.defined:
            return t.name if (t.namespace or None) == (self.space or None) else full
        self.defined.add(full)
        out: dict[str, Any] = {"type": "error" if isinstance(t, Record) and t.is_error else t.type, "name": t.name}
        if t.namespace:
            if t.namespace != self.space:
                out["namespace"] = t.namespace
        elif self.space:
            out["namespace"] = ""
        saved = self.space
        self.space = t.namespace
        if t.doc is not None:
            out["doc"] = t.doc
        if isinstance(t, Record):
            out["fields"] = [self._field(f) for f in t.fields]
        elif isinstance(t, Enum):
            out["symbols"] = list(t.symbols)
        else:
            out["size"] = t.size
        out.update(t.props)
        if t.aliases:
            out["aliases"] = [_relative(a, t.namespace) for a in t.aliases]
        if isinstance(t, Enum) and t.default is not None:
            out["default"] = t.default
        self.space = saved
        return out

    def _field(self, f: Field) -> dict[str, Any]:
        out: dict[str, Any] = {"name": f.name, "type": self.write(f.type)}
        if f.doc is not None:
            out["doc"] = f.doc
        if f.has_default:
            out["default"] = f.default
        if f.order != "ascending":
            out["order"] = f.order
        if f.aliases:
            out["aliases"] = list(f.aliases)
        out.update(f.props)
        return out


def _relative(full: str, space: str | None) -> str:
    ns, _, simple = full.rpartition(".")
    return simple if ns and ns == space else full


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def parsing_canonical_form(t: AvroType) -> str:
    """Avro's Parsing Canonical Form of ``t`` (the specification's rules: full names, only
    ``type``/``name``/``fields``/``symbols``/``items``/``values``/``size``, in that order)."""
    seen: set[str] = set()

    def build(t: AvroType) -> str:
        if isinstance(t, Primitive):
            return json.dumps(t.type)
        if isinstance(t, Union):
            return "[" + ",".join(build(b) for b in t.branches) + "]"
        if isinstance(t, Array):
            return '{"type":"array","items":' + build(t.items) + "}"
        if isinstance(t, Map):
            return '{"type":"map","values":' + build(t.values) + "}"
        full = t.fullname
        if full in seen:
            return json.dumps(full, ensure_ascii=False)
        seen.add(full)
        head = '{"name":' + json.dumps(full, ensure_ascii=False) + ',"type":"' + t.type + '"'
        if isinstance(t, Record):
            fields = ",".join(
                '{"name":' + json.dumps(f.name, ensure_ascii=False) + ',"type":' + build(f.type) + "}" for f in t.fields
            )
            return head + ',"fields":[' + fields + "]}"
        if isinstance(t, Enum):
            return head + ',"symbols":' + json.dumps(t.symbols, ensure_ascii=False, separators=(",", ":")) + "}"
        return head + ',"size":' + str(t.size) + "}"

    return build(t)


def _normalized_json(t: AvroType, known: Iterable[str]) -> Any:
    """The normal form: full names everywhere, named types defined once, keys in one order
    with custom properties sorted by name."""
    defined: set[str] = set(known)

    def props(p: Mapping[str, Any]) -> dict[str, Any]:
        return {k: p[k] for k in sorted(p)}

    def build(t: AvroType) -> Any:
        if isinstance(t, Primitive):
            return {"type": t.type, **props(t.props)} if t.props else t.type
        if isinstance(t, Union):
            return [build(b) for b in t.branches]
        if isinstance(t, Array):
            return {"type": "array", "items": build(t.items), **props(t.props)}
        if isinstance(t, Map):
            return {"type": "map", "values": build(t.values), **props(t.props)}
        full = t.fullname
        if full in defined:
            return full
        defined.add(full)
        out: dict[str, Any] = {"name": full, "type": "error" if isinstance(t, Record) and t.is_error else t.type}
        if t.doc is not None:
            out["doc"] = t.doc
        if isinstance(t, Record):
            fields = []
            for f in t.fields:
                fo: dict[str, Any] = {"name": f.name, "type": build(f.type)}
                if f.doc is not None:
                    fo["doc"] = f.doc
                if f.has_default:
                    fo["default"] = f.default
                if f.order != "ascending":
                    fo["order"] = f.order
                if f.aliases:
                    fo["aliases"] = sorted(f.aliases)
                fo.update(props(f.props))
                fields.append(fo)
            out["fields"] = fields
        elif isinstance(t, Enum):
            out["symbols"] = list(t.symbols)
            if t.default is not None:
                out["default"] = t.default
        else:
            out["size"] = t.size
        if t.aliases:
            out["aliases"] = sorted(t.aliases)
        out.update(props(t.props))
        return out

    return build(t)


# -- compatibility -----------------------------------------------------------------------------

_READER_FIELD_MISSING_DEFAULT_VALUE = "READER_FIELD_MISSING_DEFAULT_VALUE"
_TYPE_MISMATCH = "TYPE_MISMATCH"
_NAME_MISMATCH = "NAME_MISMATCH"
_MISSING_ENUM_SYMBOLS = "MISSING_ENUM_SYMBOLS"
_MISSING_UNION_BRANCH = "MISSING_UNION_BRANCH"
_FIXED_SIZE_MISMATCH = "FIXED_SIZE_MISMATCH"

_PROMOTIONS = {
    "long": ("int",),
    "float": ("int", "long"),
    "double": ("int", "long", "float"),
    "bytes": ("string",),
    "string": ("bytes",),
}


def _incompat(kind: str, message: str, location: list[str]) -> Incompatibility:
    path = "/" + "/".join(location)
    info = escape(message)
    p = escape(path)
    if kind == _FIXED_SIZE_MISMATCH:
        text = f"The size of FIXED type field at path '{p}' in the %s schema does not match with the %s schema"
    elif kind == _TYPE_MISMATCH:
        text = f"The type (path '{p}') of a field in the %s schema does not match with the %s schema"
    elif kind == _NAME_MISMATCH:
        text = f"The name of the schema has changed (path '{p}')"
    elif kind == _MISSING_ENUM_SYMBOLS:
        text = f"The %s schema is missing enum symbols '{info}' at path '{p}' in the %s schema"
    elif kind == _MISSING_UNION_BRANCH:
        text = f"The %s schema is missing a type inside a union field at path '{p}' in the %s schema"
    else:
        text = f"The field '{info}' at path '{p}' in the %s schema has no default value and is missing in the %s schema"
    return Incompatibility(kind, text, message)


def _kind(t: AvroType) -> str:
    return t.type


class _Checker:
    """Java's ``SchemaCompatibility.ReaderWriterCompatibilityChecker``."""

    def __init__(self) -> None:
        self.memo: dict[tuple[int, int], list[Incompatibility] | None] = {}

    def check(self, reader: AvroType, writer: AvroType, location: list[str]) -> list[Incompatibility]:
        key = (id(reader), id(writer))
        if key in self.memo:
            cached = self.memo[key]
            return [] if cached is None else cached  # None: in progress (a recursive type): assumed compatible
        self.memo[key] = None
        result = self._calculate(reader, writer, location)
        self.memo[key] = result
        return result

    def _at(self, token: str, reader: AvroType, writer: AvroType, location: list[str]) -> list[Incompatibility]:
        location.append(token)
        try:
            return self.check(reader, writer, location)
        finally:
            location.pop()

    def _calculate(self, reader: AvroType, writer: AvroType, location: list[str]) -> list[Incompatibility]:
        rk, wk = _kind(reader), _kind(writer)
        if rk == wk:
            if isinstance(reader, Primitive):
                return []
            if isinstance(reader, Array) and isinstance(writer, Array):
                return self._at("items", reader.items, writer.items, location)
            if isinstance(reader, Map) and isinstance(writer, Map):
                return self._at("values", reader.values, writer.values, location)
            if isinstance(reader, Fixed) and isinstance(writer, Fixed):
                out = self._names(reader, writer, location)
                if reader.size != writer.size:
                    location.append("size")
                    out.append(_incompat(_FIXED_SIZE_MISMATCH, f"expected: {writer.size}, found: {reader.size}", location))
                    location.pop()
                return out
            if isinstance(reader, Enum) and isinstance(writer, Enum):
                out = self._names(reader, writer, location)
                missing = sorted(set(writer.symbols) - set(reader.symbols))
                if missing and not (reader.default is not None and reader.default in reader.symbols):
                    location.append("symbols")
                    out.append(_incompat(_MISSING_ENUM_SYMBOLS, "[" + ", ".join(missing) + "]", location))
                    location.pop()
                return out
            if isinstance(reader, Record) and isinstance(writer, Record):
                out = self._names(reader, writer, location)
                out.extend(self._fields(reader, writer, location))
                return out
            if isinstance(reader, Union) and isinstance(writer, Union):
                out = []
                for i, branch in enumerate(writer.branches):
                    location.append(str(i))
                    if self.check(reader, branch, location):
                        out.append(_incompat(_MISSING_UNION_BRANCH, f"reader union lacking writer type: {_upper(branch)}",
                                             location))
                    location.pop()
                return out
            raise AssertionError(f"unexpected kinds {rk} {wk}")
        # different kinds
        if isinstance(writer, Union):
            out = []
            for branch in writer.branches:
                out.extend(self.check(reader, branch, location))
            return out
        if isinstance(reader, Union):
            for branch in reader.branches:
                if not self.check(branch, writer, location):
                    return []
            return [_incompat(_MISSING_UNION_BRANCH, f"reader union lacking writer type: {_upper(writer)}", location)]
        if isinstance(reader, Primitive) and wk in _PROMOTIONS.get(rk, ()):
            return []
        return [_incompat(_TYPE_MISMATCH, f"reader type: {_upper(reader)} not compatible with writer type: {_upper(writer)}",
                          location)]

    def _names(self, reader: Named, writer: Named, location: list[str]) -> list[Incompatibility]:
        if reader.name == writer.name or writer.fullname in reader.aliases:
            return []
        location.append("name")
        out = [_incompat(_NAME_MISMATCH, f"expected: {writer.fullname}", location)]
        location.pop()
        return out

    def _fields(self, reader: Record, writer: Record, location: list[str]) -> list[Incompatibility]:
        out: list[Incompatibility] = []
        location.append("fields")
        by_name = {f.name: f for f in writer.fields}
        for rf in reader.fields:
            location.append(str(rf.pos))
            wf = by_name.get(rf.name)
            if wf is None:
                wf = next((by_name[a] for a in rf.aliases if a in by_name), None)
            if wf is None:
                if not rf.has_default:
                    if isinstance(rf.type, Enum) and rf.type.default is not None:
                        out.extend(self._at("type", rf.type, writer, location))
                    else:
                        out.append(_incompat(_READER_FIELD_MISSING_DEFAULT_VALUE, rf.name, location))
            else:
                out.extend(self._at("type", rf.type, wf.type, location))
            location.pop()
        location.pop()
        return out


def _upper(t: AvroType) -> str:
    return t.type.upper()


# -- the parsed schema -------------------------------------------------------------------------


class AvroSchema:
    """An Avro schema as the registry keeps it (see the module docstring)."""

    schema_type = AVRO

    def __init__(self, root: AvroType, references: tuple[Reference, ...], ref_names: frozenset[str],
                 named: Mapping[str, Named]) -> None:
        self.root = root
        self.references = references
        #: the full names the referenced schemas define (named, never inlined, in the canonical form)
        self.ref_names = ref_names
        self.named = dict(named)
        self._canonical: str | None = None

    @property
    def canonical(self) -> str:
        if self._canonical is None:
            self._canonical = _dumps(_Writer(self.ref_names).write(self.root))
        return self._canonical

    @property
    def name(self) -> str | None:
        """The full name of the top-level type (None: not a named type)."""
        return self.root.fullname if isinstance(self.root, (Record, Enum, Fixed)) else None

    def normalized(self) -> AvroSchema:
        out = AvroSchema(self.root, tuple(sorted(set(self.references))), self.ref_names, self.named)
        out._canonical = _dumps(_normalized_json(self.root, self.ref_names))
        return out

    def formatted(self, fmt: str) -> str:
        if fmt == "resolved":
            return _dumps(_Writer().write(self.root))
        return self.canonical

    def parsing_canonical_form(self) -> str:
        return parsing_canonical_form(self.root)

    def incompatibilities(self, writer: Any) -> list[Incompatibility]:
        if not isinstance(writer, AvroSchema):
            return [DIFFERENT_TYPE]
        return _Checker().check(self.root, writer.root, [])

    def __repr__(self) -> str:
        return f"AvroSchema({self.canonical[:80]!r})"


def parse_avro(
    text: str,
    references: Iterable[tuple[Reference, str]] = (),
    *,
    validate_defaults: bool = True,
) -> AvroSchema:
    """Parse an Avro schema's JSON ``text``; ``references`` are the referenced schemas' texts
    (resolved by the caller, each before the schemas that refer to it), whose named types the
    schema may use by name.  Raises :class:`SchemaError`."""
    refs = list(references)
    try:
        node = loads(text)
    except (ValueError, RecursionError) as exc:
        raise SchemaError(f"Invalid schema: not JSON: {exc}") from None
    ref_docs = []
    for ref, ref_text in refs:
        try:
            ref_docs.append((ref, loads(ref_text)))
        except (ValueError, RecursionError) as exc:
            raise SchemaError(f"Invalid schema: the reference {ref.name} is not JSON: {exc}") from None
    _check_fastavro(node, [d for _r, d in ref_docs])
    names: dict[str, Named] = {}
    ref_parser = _Parser(names, validate_defaults=False)
    for ref, doc in ref_docs:
        try:
            ref_parser.parse(doc, None)
        except SchemaError as exc:
            raise SchemaError(f"the reference {ref.name} is not a valid Avro schema: {exc}") from None
    ref_names = frozenset(names)
    try:
        root = _Parser(names, validate_defaults).parse(node, None)
    except RecursionError:
        raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels") from None
    return AvroSchema(root, tuple(r for r, _t in refs), ref_names, names)


def _check_fastavro(node: Any, refs: list[Any]) -> None:
    """The schema must be one fastavro can use (Odradek's serializers are built on it)."""
    try:
        import fastavro
    except ImportError:  # the registry extra is not installed: Java's rules alone
        return
    import copy

    named: dict[str, Any] = {}
    try:
        for r in refs:
            fastavro.parse_schema(copy.deepcopy(r), named_schemas=named, _ignore_default_error=True)
        fastavro.parse_schema(copy.deepcopy(node), named_schemas=named, _ignore_default_error=True)
    except RecursionError:
        raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels") from None
    except Exception as exc:  # fastavro raises SchemaParseException, UnknownType, KeyError, TypeError...
        detail = str(exc) or type(exc).__name__
        if type(exc).__name__ == "UnknownType":
            detail = f'"{exc}" is not a defined name'
        raise SchemaError(detail) from None

