"""Kafka's JSON message definitions read into a small model the emitters share.

Only facts reach the model: names, types, versions, tags, defaults, entity types and map keys.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX = 0x7FFF

Versions = tuple[int, int] | None

#: attribute names that differ from the snake_case of the JSON name (public API of the headers)
RENAMES = {
    ("RequestHeader", "RequestApiKey"): "api_key",
    ("RequestHeader", "RequestApiVersion"): "api_version",
}
RESERVED = {"encode", "decode", "encode_into", "decode_from", "check_version", "is_flexible", "unknown_tagged_fields"}

#: JSON type -> (descriptor constant in odradek.protocol._schema, Python type)
PRIMITIVES = {
    "int8": ("INT8", "int"),
    "int16": ("INT16", "int"),
    "uint16": ("UINT16", "int"),
    "int32": ("INT32", "int"),
    "uint32": ("UINT32", "int"),
    "int64": ("INT64", "int"),
    "float64": ("FLOAT64", "float"),
    "bool": ("BOOL", "bool"),
    "string": ("STRING", "str"),
    "bytes": ("BYTES", "bytes"),
    "records": ("RECORDS", "Records"),
    "uuid": ("UUID", "uuid.UUID"),
}


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    return s + "_" if keyword.iskeyword(s) else s


def upper_snake(name: str) -> str:
    return snake(name).rstrip("_").upper()


def parse_versions(spec: Any) -> Versions:
    if spec is None:
        return None
    spec = str(spec).strip()
    if spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def within(version: int, versions: Versions) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def load(path: Path) -> dict[str, Any]:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))
    result: dict[str, Any] = json.loads(text)
    return result


@dataclass
class FieldDef:
    """One field of a struct, with its type resolved."""

    spec: dict[str, Any]
    owner: str  # the struct's name (for renames and messages)
    attr: str
    type: str  # the JSON type: "int32", "[]string", "TopicData", "[]TopicData"
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    ignorable: bool
    flexible: bool  # false for ``flexibleVersions: none``: the non-flexible encoding everywhere
    struct: StructDef | None = None  # the struct type, of the field or of its elements

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def base(self) -> str:
        """The type without ``[]``."""
        return self.type[2:] if self.is_array else self.type

    @property
    def entity_type(self) -> str | None:
        e = self.spec.get("entityType")
        return str(e) if e else None

    @property
    def map_key(self) -> bool:
        return bool(self.spec.get("mapKey"))

    @property
    def json_default(self) -> Any:
        return self.spec.get("default")

    def present(self, version: int) -> bool:
        """Carried at ``version`` (as a regular or a tagged field)."""
        return within(version, self.versions)

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and within(version, self.tagged)


@dataclass
class StructDef:
    name: str  # class name (inside the message, or the message's own)
    qual: str  # qualified class name: "ProduceRequest.TopicProduceData"
    fields: list[FieldDef]
    versions: Versions

    @property
    def ident(self) -> str:
        """The qualified name as a Python identifier."""
        return self.qual.replace(".", "_")


@dataclass
class MessageDef:
    spec: dict[str, Any]
    name: str
    structs: dict[str, StructDef] = field(default_factory=dict)  # in definition order
    top: StructDef | None = None  # the message's own fields

    @property
    def kind(self) -> str:
        return str(self.spec["type"])

    @property
    def valid_versions(self) -> tuple[int, int]:
        v = parse_versions(self.spec["validVersions"])
        assert v is not None
        return v

    @property
    def flexible_versions(self) -> Versions:
        return parse_versions(self.spec.get("flexibleVersions"))

    def is_flexible(self, version: int) -> bool:
        return within(version, self.flexible_versions)

    @property
    def versions(self) -> range:
        lo, hi = self.valid_versions
        return range(lo, hi + 1)


def attr_name(struct_name: str, f: dict[str, Any]) -> str:
    a = RENAMES.get((struct_name, f["name"])) or snake(f["name"])
    if a in RESERVED:
        raise SystemExit(f"{struct_name}.{f['name']}: attribute name {a} is reserved")
    return a


def collect_structs(msg: MessageDef) -> None:
    """Find every struct the message uses: inline definitions and commonStructs."""
    common = {s["name"]: s for s in msg.spec.get("commonStructs", [])}
    raw: dict[str, tuple[list[dict[str, Any]], Versions]] = {}

    def walk(fields: list[dict[str, Any]]) -> None:
        for f in fields:
            t = f["type"]
            base = t[2:] if t.startswith("[]") else t
            if base in PRIMITIVES:
                continue
            if "fields" in f:
                if base in raw:
                    raise SystemExit(f"{msg.name}: struct {base} defined twice")
                raw[base] = (f["fields"], parse_versions(f.get("versions")))
                walk(f["fields"])
            elif base in common:
                if base not in raw:
                    c = common[base]
                    raw[base] = (c["fields"], parse_versions(c.get("versions")))
                    walk(c["fields"])
            elif base not in raw:
                raise SystemExit(f"{msg.name}: unknown type {t}")

    walk(msg.spec["fields"])
    # commonStructs that no field reaches are still part of the message's vocabulary
    for name, c in common.items():
        if name not in raw:
            raw[name] = (c["fields"], parse_versions(c.get("versions")))
            walk(c["fields"])
    for name, (_fields, versions) in raw.items():
        msg.structs[name] = StructDef(name, f"{msg.name}.{name}", [], versions)
    msg.top = StructDef(msg.name, msg.name, [], parse_versions(msg.spec["validVersions"]))
    for name, (fields, _versions) in raw.items():
        msg.structs[name].fields = [_field(msg, name, f) for f in fields]
    msg.top.fields = [_field(msg, msg.name, f) for f in msg.spec["fields"]]


def _field(msg: MessageDef, owner: str, f: dict[str, Any]) -> FieldDef:
    t = f["type"]
    base = t[2:] if t.startswith("[]") else t
    versions = parse_versions(f.get("versions", f.get("taggedVersions")))
    return FieldDef(
        spec=f,
        owner=owner,
        attr=attr_name(owner, f),
        type=t,
        versions=versions,
        nullable=parse_versions(f.get("nullableVersions")),
        tag=int(f["tag"]) if "tag" in f else None,
        tagged=parse_versions(f.get("taggedVersions")) if "tag" in f else None,
        ignorable=bool(f.get("ignorable")),
        flexible=f.get("flexibleVersions") != "none",
        struct=None if base in PRIMITIVES else msg.structs[base],
    )


def message_defs(group: list[dict[str, Any]]) -> list[MessageDef]:
    result = []
    for s in group:
        m = MessageDef(s, s["name"])
        collect_structs(m)
        result.append(m)
    return result


def default_of(where: str, f: dict[str, Any]) -> tuple[str, bool]:
    """(Python expression, is-literal) of a field's default; non-literal means a fresh list or
    struct for every instance (``DEFAULT`` in constructors)."""
    t = f["type"]
    d = f.get("default")
    nullable = parse_versions(f.get("nullableVersions")) is not None
    if d == "null":
        if not nullable and t != "records":
            raise SystemExit(f"{where}.{f['name']}: null default on a non-nullable field")
        return "None", True
    if t.startswith("[]") or t not in PRIMITIVES:
        if d not in (None, ""):
            raise SystemExit(f"{where}.{f['name']}: unsupported default {d!r}")
        return "DEFAULT", False
    if t == "records":
        return "None", True
    if d is None:
        return {"float64": "0.0", "bool": "False", "string": '""', "bytes": 'b""', "uuid": "ZERO_UUID"}.get(t, "0"), True
    if t == "bool":
        return ("True" if str(d).lower() == "true" else "False"), True
    if t == "string":
        return repr(str(d)), True
    if t == "float64":
        return repr(float(d)), True
    if t == "uuid":
        return "ZERO_UUID", True
    if t == "bytes":
        raise SystemExit(f"{where}.{f['name']}: unsupported bytes default {d!r}")
    return str(int(str(d), 0)), True


def fmt_versions(v: Versions) -> str:
    if v is None:
        return "None"
    return f"({v[0]}, {'MAX' if v[1] == MAX else v[1]})"
