"""Protobuf schemas: ``.proto`` text or the base64 file descriptor confluent-kafka registers, the
canonical ``.proto`` text, and Confluent's compatibility rules.

A schema arrives in one of two forms:

* ``.proto`` text: compiled by grpcio-tools' ``protoc`` (:mod:`odradek.schemas._protoc`, in a
  child process) into a ``FileDescriptorProto``, with the referenced schemas written under their
  reference names, which are the paths the schema imports;
* the base64 of a serialized ``FileDescriptorProto`` (what confluent-kafka's
  ``ProtobufSerializer`` registers): decoded, then built in a descriptor pool with its
  dependencies, which checks it as the protobuf runtime does.

Either way the registry stores the canonical ``.proto`` text printed from the descriptor
(:func:`to_proto_text`, as Confluent's registry stores the text of its parsed form: fully
qualified type names with a leading dot, ``map<K, V>`` fields, declarations in descriptor order),
and ``?format=serialized`` gives the base64 file descriptor back, which is what
confluent-kafka's deserializer asks for.

Compatibility is Confluent's Protobuf diff over the two descriptors: fields matched by number
(renaming is compatible, renumbering is removing one field and adding another), scalar kinds
(``int32``/``int64``/``uint32``/``uint64``/``bool`` and enums are one kind; ``sint*``, ``fixed32``,
``fixed64``, ``float``, ``double``, ``string``/``bytes`` are others), message, map and scalar
fields not interchangeable, numeric labels fixed, ``oneof`` moves, a changed package, removed
messages and required fields; messages, enums, enum values, fields and oneofs may come and go.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from odradek.schemas._common import DIFFERENT_TYPE, PROTOBUF, Incompatibility, Reference, SchemaError, escape
from odradek.schemas._protoc import ROOT_FILE, compile_proto

__all__ = ["COMPATIBLE_CHANGES", "ProtobufSchema", "parse_protobuf", "to_proto_text"]

COMPATIBLE_CHANGES = frozenset({
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED", "ENUM_CONST_CHANGED",
    "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED", "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED", "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
})

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
#: the files every schema may import without a reference (bundled with protoc)
_WELL_KNOWN = re.compile(r"google/protobuf/[a-z_]+\.proto")


def _pb() -> Any:
    try:
        from google.protobuf import descriptor_pb2
    except ImportError:
        raise SchemaError("Protobuf schemas need the protobuf package (pip install 'odradek[registry]')") from None
    return descriptor_pb2


# -- the .proto text of a descriptor -----------------------------------------------------------

_SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
    9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64",
}
_TYPE_GROUP, _TYPE_MESSAGE, _TYPE_ENUM = 10, 11, 14
_LABEL_OPTIONAL, _LABEL_REQUIRED, _LABEL_REPEATED = 1, 2, 3
_SKIPPED_OPTIONS = frozenset({"features", "uninterpreted_option", "edition_defaults", "feature_support", "map_entry"})


def _quote(text: str) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\{code:03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _option_values(options: Any) -> Iterator[tuple[str, str]]:
    """(name, value text) of every standard option set in an options message."""
    if options is None:
        return
    for fd, value in options.ListFields():
        if fd.name in _SKIPPED_OPTIONS or fd.is_extension or fd.label == _LABEL_REPEATED:
            continue
        if fd.type == 9:  # string
            text = _quote(value)
        elif fd.type == 8:  # bool
            text = "true" if value else "false"
        elif fd.enum_type is not None:
            text = fd.enum_type.values_by_number[value].name
        elif fd.type in (1, 2):
            text = repr(float(value))
        else:
            text = str(value)
        yield fd.name, text


def _camel(name: str) -> str:
    """protoc's default ``json_name`` of a field."""
    out = []
    upper = False
    for ch in name:
        if ch == "_":
            upper = True
        elif upper:
            out.append(ch.upper())
            upper = False
        else:
            out.append(ch)
    return "".join(out)


class _Printer:
    def __init__(self, fd: Any) -> None:
        self.fd = fd
        self.lines: list[str] = []
        syntax = getattr(fd, "syntax", "") or "proto2"
        self.syntax = syntax

    def text(self) -> str:
        fd = self.fd
        if self.syntax == "editions":
            self.lines.append(f'edition = "{_edition_name(getattr(fd, "edition", 0))}";')
        else:
            self.lines.append(f'syntax = "{self.syntax}";')
        if fd.package:
            self.lines.append(f"package {fd.package};")
        deps = list(fd.dependency)
        if deps:
            self.lines.append("")
            public = set(fd.public_dependency)
            weak = set(fd.weak_dependency)
            for i, dep in enumerate(deps):
                kind = "public " if i in public else "weak " if i in weak else ""
                self.lines.append(f"import {kind}{_quote(dep)};")
        opts = list(_option_values(fd.options if fd.HasField("options") else None))
        if opts:
            self.lines.append("")
            for name, value in opts:
                self.lines.append(f"option {name} = {value};")
        for msg in fd.message_type:
            self.lines.append("")
            self._message(msg, 0)
        for enum in fd.enum_type:
            self.lines.append("")
            self._enum(enum, 0)
        self._extensions(fd.extension, 0)
        for svc in fd.service:
            self.lines.append("")
            self._service(svc)
        return "\n".join(self.lines) + "\n"

    def _line(self, indent: int, text: str) -> None:
        self.lines.append("  " * indent + text)

    def _type_name(self, f: Any) -> str:
        t = f.type
        if t in _SCALARS:
            return _SCALARS[t]
        return f.type_name

    def _map_entries(self, msg: Any) -> dict[str, Any]:
        prefix = ""
        return {
            prefix + n.name: n
            for n in msg.nested_type
            if n.HasField("options") and n.options.map_entry
        }

    def _field_options(self, f: Any, show_default: bool = True) -> str:
        parts = []
        if show_default and f.HasField("default_value"):
            value = f.default_value
            if f.type in (9, 12):
                value = _quote(value)
            parts.append(f"default = {value}")
        if f.HasField("json_name") and f.json_name != _camel(f.name):
            parts.append(f"json_name = {_quote(f.json_name)}")
        if f.HasField("options"):
            parts += [f"{n} = {v}" for n, v in _option_values(f.options)]
        return f" [{', '.join(parts)}]" if parts else ""

    def _label(self, f: Any) -> str:
        label = f.label
        if label == _LABEL_REPEATED:
            return "repeated "
        if label == _LABEL_REQUIRED:
            return "required "
        if self.syntax == "proto2":
            return "optional " if not f.HasField("oneof_index") else ""
        if getattr(f, "proto3_optional", False):
            return "optional "
        return ""

    def _field(self, f: Any, indent: int, maps: dict[str, Any], groups: dict[str, Any], scope: str) -> None:
        t = f.type
        name, number = f.name, f.number
        entry_name = f.type_name.rsplit(".", 1)[-1] if t == _TYPE_MESSAGE else ""
        entry = maps.get(entry_name) if f.type_name == f"{scope}.{entry_name}" else None
        if entry is not None and f.label == _LABEL_REPEATED:
            key = next(x for x in entry.field if x.number == 1)
            value = next(x for x in entry.field if x.number == 2)
            self._line(indent, f"map<{self._type_name(key)}, {self._type_name(value)}> {name} = {number}"
                       f"{self._field_options(f)};")
            return
        if t == _TYPE_GROUP:
            group = groups.get(f.type_name.rsplit(".", 1)[-1])
            if group is not None:
                self._line(indent, f"{self._label(f)}group {group.name} = {number}{self._field_options(f)} {{")
                self._message_body(group, indent + 1, f"{scope}.{group.name}")
                self._line(indent, "}")
                return
        self._line(indent, f"{self._label(f)}{self._type_name(f)} {name} = {number}{self._field_options(f)};")

    def _message(self, msg: Any, indent: int, scope: str | None = None) -> None:
        name = msg.name
        if scope is None:
            pkg = self.fd.package
            scope = f".{pkg}.{name}" if pkg else f".{name}"
        else:
            scope = f"{scope}.{name}"
        self._line(indent, f"message {name} {{")
        self._message_body(msg, indent + 1, scope)
        self._line(indent, "}")

    def _message_body(self, msg: Any, indent: int, scope: str) -> None:
        if msg.HasField("options"):
            for n, v in _option_values(msg.options):
                self._line(indent, f"option {n} = {v};")
        maps = self._map_entries(msg)
        group_types = {
            f.type_name.rsplit(".", 1)[-1] for f in msg.field if f.type == _TYPE_GROUP
        }
        groups = {n.name: n for n in msg.nested_type if n.name in group_types}
        oneofs = list(msg.oneof_decl)
        real = _real_oneofs(msg)
        printed_oneofs: set[int] = set()
        for f in msg.field:
            if f.HasField("oneof_index") and f.oneof_index in real:
                idx = f.oneof_index
                if idx in printed_oneofs:
                    continue
                printed_oneofs.add(idx)
                self._line(indent, f"oneof {oneofs[idx].name} {{")
                if oneofs[idx].HasField("options"):
                    for n, v in _option_values(oneofs[idx].options):
                        self._line(indent + 1, f"option {n} = {v};")
                for member in msg.field:
                    if member.HasField("oneof_index") and member.oneof_index == idx:
                        self._field(member, indent + 1, maps, groups, scope)
                self._line(indent, "}")
                continue
            self._field(f, indent, maps, groups, scope)
        for rr in msg.reserved_range:
            end = rr.end - 1
            self._line(indent, f"reserved {rr.start};" if end == rr.start else
                       f"reserved {rr.start} to {'max' if rr.end >= 536870912 else end};")
        for rn in msg.reserved_name:
            self._line(indent, f"reserved {_quote(rn)};")
        for er in msg.extension_range:
            end = er.end - 1
            self._line(indent, f"extensions {er.start};" if end == er.start else
                       f"extensions {er.start} to {'max' if er.end >= 536870912 else end};")
        for n in msg.nested_type:
            if n.name in maps or n.name in groups:
                continue
            self._message(n, indent, scope)
        for e in msg.enum_type:
            self._enum(e, indent)
        self._extensions(msg.extension, indent)

    def _extensions(self, extensions: Iterable[Any], indent: int) -> None:
        by_extendee: dict[str, list[Any]] = {}
        for ext in extensions:
            by_extendee.setdefault(ext.extendee, []).append(ext)
        for extendee, fields in by_extendee.items():
            self._line(indent, f"extend {extendee} {{")
            for f in fields:
                self._line(indent + 1, f"{self._label(f)}{self._type_name(f)} {f.name} = {f.number}"
                           f"{self._field_options(f)};")
            self._line(indent, "}")

    def _enum(self, enum: Any, indent: int) -> None:
        self._line(indent, f"enum {enum.name} {{")
        if enum.HasField("options"):
            for n, v in _option_values(enum.options):
                self._line(indent + 1, f"option {n} = {v};")
        for v in enum.value:
            opts = ""
            if v.HasField("options"):
                listed = [f"{n} = {val}" for n, val in _option_values(v.options)]
                opts = f" [{', '.join(listed)}]" if listed else ""
            self._line(indent + 1, f"{v.name} = {v.number}{opts};")
        for rr in enum.reserved_range:
            self._line(indent + 1, f"reserved {rr.start};" if rr.end == rr.start else f"reserved {rr.start} to {rr.end};")
        for rn in enum.reserved_name:
            self._line(indent + 1, f"reserved {_quote(rn)};")
        self._line(indent, "}")

    def _service(self, svc: Any) -> None:
        self._line(0, f"service {svc.name} {{")
        if svc.HasField("options"):
            for n, v in _option_values(svc.options):
                self._line(1, f"option {n} = {v};")
        for m in svc.method:
            cs = "stream " if m.client_streaming else ""
            ss = "stream " if m.server_streaming else ""
            opts = list(_option_values(m.options)) if m.HasField("options") else []
            if opts:
                self._line(1, f"rpc {m.name} ({cs}{m.input_type}) returns ({ss}{m.output_type}) {{")
                for n, v in opts:
                    self._line(2, f"option {n} = {v};")
                self._line(1, "}")
            else:
                self._line(1, f"rpc {m.name} ({cs}{m.input_type}) returns ({ss}{m.output_type});")
        self._line(0, "}")


def _edition_name(edition: int) -> str:
    return {1000: "2023", 1001: "2024"}.get(edition, "2023")


def _real_oneofs(msg: Any) -> set[int]:
    """The indexes of a message's real oneofs (not those protoc makes for proto3 ``optional``)."""
    synthetic = {
        f.oneof_index for f in msg.field
        if f.HasField("oneof_index") and getattr(f, "proto3_optional", False)
    }
    return {i for i in range(len(msg.oneof_decl)) if i not in synthetic}


def to_proto_text(fd: Any) -> str:
    """The ``.proto`` text of a ``FileDescriptorProto``."""
    return _Printer(fd).text()


# -- compatibility -----------------------------------------------------------------------------


@dataclass
class _TypeInfo:
    package: str
    ref: tuple[str, int] | None  # (subject, version) of the reference holding it; None: the schema itself
    element: Any
    is_enum: bool
    is_map: bool


def _collect(files: Iterable[tuple[Any, tuple[str, int] | None]]) -> dict[str, _TypeInfo]:
    out: dict[str, _TypeInfo] = {}
    for fd, ref in files:
        pkg = fd.package

        def walk(prefix: str, messages: Iterable[Any], enums: Iterable[Any],
                 pkg: str = pkg, ref: tuple[str, int] | None = ref) -> None:
            for m in messages:
                full = f"{prefix}{m.name}"
                is_map = m.HasField("options") and m.options.map_entry
                out[full] = _TypeInfo(pkg, ref, m, False, bool(is_map))
                walk(full + ".", m.nested_type, m.enum_type)
            for e in enums:
                out[f"{prefix}{e.name}"] = _TypeInfo(pkg, ref, e, True, False)

        walk(f"{pkg}." if pkg else "", fd.message_type, fd.enum_type)
    return out


def _scalar_kind(f: Any, types: dict[str, _TypeInfo]) -> str:
    t = f.type
    if t == _TYPE_ENUM:
        return "GENERAL_NUMBER"
    name = _SCALARS.get(t, "")
    if name in ("int32", "int64", "uint32", "uint64", "bool"):
        return "GENERAL_NUMBER"
    if name in ("sint32", "sint64"):
        return "SIGNED_NUMBER"
    if name in ("string", "bytes"):
        return "STRING_OR_BYTES"
    if name in ("fixed32", "sfixed32"):
        return "FIXED32"
    if name in ("fixed64", "sfixed64"):
        return "FIXED64"
    return name.upper()


@dataclass(frozen=True, slots=True)
class _Difference:
    type: str
    path: str

    def incompatibility(self) -> Incompatibility:
        p = escape(self.path)
        t = self.type
        text = {
            "PACKAGE_CHANGED": f"The package at '{p}' in the %s schema does not match the package in the %s schema",
            "MESSAGE_REMOVED": f"The %s schema is missing a MESSAGE type at path '{p}' in the %s schema",
            "FIELD_KIND_CHANGED": f"The type of a field at path '{p}' in the %s schema does not match the %s schema",
            "FIELD_SCALAR_KIND_CHANGED": (f"The kind of a SCALAR field at path '{p}' in the %s schema does not match "
                                          "its kind in the %s schema"),
            "FIELD_NAMED_TYPE_CHANGED": (f"The type of a MESSAGE field at path '{p}' in the %s schema does not match "
                                         "its type in the %s schema"),
            "FIELD_NUMERIC_LABEL_CHANGED": (f"The label for a NUMERIC field at path '{p}' in the %s schema does not "
                                            "match its label in the %s schema"),
            "REQUIRED_FIELD_ADDED": f"A required field  at path '{p}' in the %s schema is missing in the %s schema",
            "REQUIRED_FIELD_REMOVED": f"The %s schema is missing a required field at path: '{p}' in the %s schema",
            "ONEOF_FIELD_REMOVED": f"The %s schema is missing a oneof field at path '{p}' in the %s schema",
            "ONEOF_FIELD_MOVED_TO_TOP_LEVEL": (f"The oneof field at path '{p}' in the %s schema was moved out of its "
                                               "oneof to a top-level field in the %s schema"),
            "MULTIPLE_FIELDS_MOVED_TO_ONEOF": (f"Multiple fields in the oneof at path '{p}' in the %s schema are "
                                               "outside a oneof in the %s schema"),
            "FIELD_MOVED_TO_EXISTING_ONEOF": (f"A field in the oneof at path '{p}' in the %s schema is outside an "
                                              "existing oneof in the %s schema"),
        }.get(t, "")
        return Incompatibility(t, text, style="protobuf")


class _Diff:
    def __init__(self, original: dict[str, _TypeInfo], update: dict[str, _TypeInfo],
                 proto3: tuple[bool, bool]) -> None:
        self.types = (original, update)
        #: whether the original and the update are proto3 files (implicit labels)
        self.proto3 = proto3
        self.path: list[str] = []
        self.diffs: list[_Difference] = []
        self.schemas: set[int] = set()

    def sub(self) -> _Diff:
        d = _Diff(*self.types, proto3=self.proto3)
        d.path = list(self.path)
        d.schemas = set(self.schemas)
        return d

    def add(self, t: str) -> None:
        self.diffs.append(_Difference(t, "#/" + "/".join(self.path)))

    def compatible(self) -> bool:
        return all(d.type in COMPATIBLE_CHANGES for d in self.diffs)

    def at(self, part: str) -> _At:
        return _At(self, part)

    # --

    def file(self, original: Any, update: Any) -> None:
        if (original.package or "") != (update.package or ""):
            self.add("PACKAGE_CHANGED")
        self.type_elements(original.message_type, original.enum_type, update.message_type, update.enum_type)

    def type_elements(self, o_msgs: Iterable[Any], o_enums: Iterable[Any], u_msgs: Iterable[Any],
                      u_enums: Iterable[Any]) -> None:
        def index(msgs: Iterable[Any]) -> tuple[dict[str, Any], dict[str, int]]:
            by_name: dict[str, Any] = {}
            pos: dict[str, int] = {}
            i = 0
            for m in msgs:
                if m.HasField("options") and m.options.map_entry:
                    continue
                by_name[m.name] = m
                pos[m.name] = i
                i += 1
            return by_name, pos

        om, opos = index(o_msgs)
        um, upos = index(u_msgs)
        for name in sorted(set(om) | set(um)):
            with self.at(name):
                o, u = om.get(name), um.get(name)
                if u is None:
                    self.add("MESSAGE_REMOVED")
                elif o is None:
                    self.add("MESSAGE_ADDED")
                else:
                    self.message(o, u)
                    if opos.get(name) != upos.get(name):
                        self.add("MESSAGE_MOVED")
        oe = {e.name: e for e in o_enums}
        ue = {e.name: e for e in u_enums}
        for name in sorted(set(oe) | set(ue)):
            with self.at(name):
                o, u = oe.get(name), ue.get(name)
                if u is None:
                    self.add("ENUM_REMOVED")
                elif o is None:
                    self.add("ENUM_ADDED")
                else:
                    ob = {v.number: v.name for v in o.value}
                    ub = {v.number: v.name for v in u.value}
                    for tag in sorted(set(ob) | set(ub)):
                        with self.at(str(tag)):
                            if tag not in ub:
                                self.add("ENUM_CONST_REMOVED")
                            elif tag not in ob:
                                self.add("ENUM_CONST_ADDED")
                            elif ob[tag] != ub[tag]:
                                self.add("ENUM_CONST_CHANGED")

    def message(self, original: Any, update: Any) -> None:
        key = id(original)
        if key not in self.schemas:
            self.schemas.add(key)
            try:
                self._fields(original, update)
            finally:
                self.schemas.discard(key)
        self.type_elements(original.nested_type, original.enum_type, update.nested_type, update.enum_type)

    def _collect_fields(self, msg: Any) -> tuple[dict[int, Any], dict[int, str], dict[str, list[Any]]]:
        by_tag: dict[int, Any] = {}
        tag_oneof: dict[int, str] = {}
        oneofs: dict[str, list[Any]] = {}
        real = _real_oneofs(msg)
        for f in msg.field:
            by_tag[f.number] = f
            if f.HasField("oneof_index") and f.oneof_index in real:
                name = msg.oneof_decl[f.oneof_index].name
                tag_oneof[f.number] = name
                oneofs.setdefault(name, []).append(f)
        return by_tag, tag_oneof, oneofs

    def _fields(self, original: Any, update: Any) -> None:
        o_tags, o_oneof, o_oneofs = self._collect_fields(original)
        u_tags, u_oneof, u_oneofs = self._collect_fields(update)
        gone = {name for name, fields in o_oneofs.items()
                if name not in u_oneofs and not any(f.number in u_tags for f in fields)}
        for name, fields in u_oneofs.items():
            with self.at(name):
                origins: set[str] = set()
                moved_in = 0
                for f in fields:
                    tag = f.number
                    if tag in o_oneof:
                        origins.add("oneof:" + o_oneof[tag])
                    elif tag in o_tags:
                        origins.add(f"field:{tag}")
                        moved_in += 1
                if len(origins) > 1:
                    self.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF")
        for name in sorted(set(o_oneofs) | set(u_oneofs)):
            with self.at(name):
                if name not in u_oneofs:
                    self.add("ONEOF_REMOVED")
                elif name not in o_oneofs:
                    self.add("ONEOF_ADDED")
        for tag in sorted(set(o_tags) | set(u_tags)):
            of, uf = o_tags.get(tag), u_tags.get(tag)
            oo, uo = o_oneof.get(tag), u_oneof.get(tag)
            if uf is None:
                assert of is not None
                if oo is not None:
                    if oo not in gone:
                        with self.at(oo), self.at(str(tag)):
                            self.add("ONEOF_FIELD_REMOVED")
                else:
                    with self.at(str(tag)):
                        self.add("REQUIRED_FIELD_REMOVED" if of.label == _LABEL_REQUIRED else "FIELD_REMOVED")
            elif of is None:
                if uo is not None:
                    with self.at(uo), self.at(str(tag)):
                        self.add("ONEOF_FIELD_ADDED")
                else:
                    with self.at(str(tag)):
                        self.add("REQUIRED_FIELD_ADDED" if uf.label == _LABEL_REQUIRED else "FIELD_ADDED")
            else:
                if oo is not None and uo is None:
                    with self.at(str(tag)):
                        self.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL")
                if uo is not None:
                    with self.at(uo), self.at(str(tag)):
                        self.field(of, uf, original, update)
                else:
                    with self.at(str(tag)):
                        self.field(of, uf, original, update)

    def _label(self, f: Any, syntax_proto3: bool) -> int | None:
        label = f.label
        if label == _LABEL_OPTIONAL and syntax_proto3 and not getattr(f, "proto3_optional", False):
            return None
        return int(label)

    def _info(self, f: Any, side: int) -> _TypeInfo | None:
        name = f.type_name.lstrip(".")
        return self.types[side].get(name) if name else None

    def _kind(self, f: Any | None, side: int) -> str:
        if f is None:
            return "SCALAR"
        t = f.type
        if t in _SCALARS or t == _TYPE_ENUM:
            return "SCALAR"
        info = self._info(f, side)
        if info is not None and info.is_map:
            return "MAP"
        if info is not None and info.is_enum:
            return "SCALAR"
        return "MESSAGE"

    def field(self, of: Any, uf: Any, original_msg: Any, update_msg: Any) -> None:
        if of.name != uf.name:
            self.add("FIELD_NAME_CHANGED")
        self.labels_and_types(self._label(of, self.proto3[0]), self._label(uf, self.proto3[1]), of, uf)

    def labels_and_types(self, o_label: int | None, u_label: int | None, of: Any, uf: Any) -> None:
        o_kind, u_kind = self._kind(of, 0), self._kind(uf, 1)
        if o_kind == "MAP":
            o_label = None
        if u_kind == "MAP":
            u_label = None
        if o_kind != u_kind:
            self.add("FIELD_KIND_CHANGED")
            return
        if o_kind == "SCALAR":
            ok, uk = _scalar_kind(of, self.types[0]), _scalar_kind(uf, self.types[1])
            if ok != uk:
                self.add("FIELD_SCALAR_KIND_CHANGED")
            elif o_label is not None and u_label is not None and o_label != u_label:
                if ok == "STRING_OR_BYTES":
                    self.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED")
                else:
                    self.add("FIELD_NUMERIC_LABEL_CHANGED")
        elif o_kind == "MESSAGE":
            self._message_types(of, uf)
        else:  # MAP: the key and value types
            oi, ui = self._info(of, 0), self._info(uf, 1)
            assert oi is not None and ui is not None
            ok = next(x for x in oi.element.field if x.number == 1)
            uk = next(x for x in ui.element.field if x.number == 1)
            ov = next(x for x in oi.element.field if x.number == 2)
            uv = next(x for x in ui.element.field if x.number == 2)
            self.labels_and_types(None, None, ok, uk)
            self.labels_and_types(None, None, ov, uv)

    def _message_types(self, of: Any, uf: Any) -> None:
        oi, ui = self._info(of, 0), self._info(uf, 1)
        oname, uname = of.type_name.lstrip("."), uf.type_name.lstrip(".")
        if oi is None or ui is None:
            if oname != uname:
                self.add("FIELD_NAMED_TYPE_CHANGED")
            return
        olocal = oname[len(oi.package) + 1:] if oi.package and oname.startswith(oi.package + ".") else oname
        ulocal = uname[len(ui.package) + 1:] if ui.package and uname.startswith(ui.package + ".") else uname
        if olocal != ulocal:
            self.add("FIELD_NAMED_TYPE_CHANGED")
            return
        if oi.ref is None and ui.ref is None:
            return  # both in the schema itself: compared where they are declared
        if oi.ref == ui.ref:
            return
        sub = self.sub()
        sub.path = olocal.split(".")
        sub.message(oi.element, ui.element)
        self.diffs.extend(sub.diffs)
        if not sub.compatible():
            self.add("FIELD_NAMED_TYPE_CHANGED")


class _At:
    def __init__(self, d: _Diff, part: str) -> None:
        self.d = d
        self.part = part

    def __enter__(self) -> None:
        self.d.path.append(self.part)

    def __exit__(self, *exc: Any) -> None:
        self.d.path.pop()


# -- the parsed schema -------------------------------------------------------------------------


class ProtobufSchema:
    """A Protobuf schema as the registry keeps it (see the module docstring)."""

    schema_type = PROTOBUF

    def __init__(self, fd: Any, dependencies: dict[str, tuple[Any, Reference | None]],
                 references: tuple[Reference, ...]) -> None:
        self.fd = fd
        #: import path -> (its FileDescriptorProto, the reference it came from; None: well-known)
        self.dependencies = dependencies
        self.references = references
        self._canonical: str | None = None

    @property
    def canonical(self) -> str:
        if self._canonical is None:
            self._canonical = to_proto_text(self.fd)
        return self._canonical

    def normalized(self) -> ProtobufSchema:
        return ProtobufSchema(self.fd, self.dependencies, tuple(sorted(set(self.references))))

    def formatted(self, fmt: str) -> str:
        if fmt == "serialized":
            return base64.b64encode(self.fd.SerializeToString(deterministic=True)).decode("ascii")
        return self.canonical

    def message_names(self) -> list[str]:
        """The full names of the top-level messages, in declaration order."""
        pkg = self.fd.package
        return [f"{pkg}.{m.name}" if pkg else m.name for m in self.fd.message_type]

    def _files(self) -> list[tuple[Any, tuple[str, int] | None]]:
        files: list[tuple[Any, tuple[str, int] | None]] = []
        for dep, ref in self.dependencies.values():
            files.append((dep, (ref.subject, ref.version) if ref is not None else ("", 0)))
        files.append((self.fd, None))
        return files

    def incompatibilities(self, writer: Any) -> list[Incompatibility]:
        if not isinstance(writer, ProtobufSchema):
            return [DIFFERENT_TYPE]
        d = _Diff(_collect(writer._files()), _collect(self._files()),
                  (writer.fd.syntax == "proto3", self.fd.syntax == "proto3"))
        d.file(writer.fd, self.fd)
        return [x.incompatibility() for x in d.diffs if x.type not in COMPATIBLE_CHANGES]

    def __repr__(self) -> str:
        return f"ProtobufSchema({self.canonical[:80]!r})"


def _decode_descriptor(text: str) -> Any | None:
    """The FileDescriptorProto of a base64 text (None: the text is not base64)."""
    compact = text.strip()
    if not compact or len(compact) % 4 or not _BASE64.fullmatch(compact):
        return None
    try:
        raw = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    pb = _pb()
    try:
        fd = pb.FileDescriptorProto.FromString(raw)
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        raise SchemaError(f"the base64 text is not a serialized FileDescriptorProto: {exc}") from None
    return fd


def _check_pool(fd: Any, deps: dict[str, tuple[Any, Reference | None]]) -> None:
    """Build ``fd`` with its dependencies in a fresh descriptor pool, as the protobuf runtime
    would: names, types and numbers are checked there."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    try:
        for dep, _ref in deps.values():
            pool.Add(dep)
        pool.Add(fd)
        pool.FindFileByName(fd.name)
    except Exception as exc:  # TypeError / KeyError from the pool
        raise SchemaError(f"the file descriptor is not valid: {exc}") from None


def _well_known(name: str) -> Any:
    """The descriptor of one of ``google/protobuf``'s files (the protobuf package ships them)."""
    import importlib

    from google.protobuf import descriptor_pool

    pb = _pb()
    fd = pb.FileDescriptorProto()
    stem = name[len("google/protobuf/"):-len(".proto")]
    try:
        importlib.import_module(f"google.protobuf.{stem}_pb2")
        descriptor_pool.Default().FindFileByName(name).CopyToProto(fd)
    except (ImportError, KeyError):
        raise SchemaError(f"{name} is not one of the well-known files protobuf ships") from None
    return fd


def parse_protobuf(
    text: str,
    references: Iterable[tuple[Reference, str]] = (),
    *,
    compiler: Callable[[dict[str, str], str], bytes] = compile_proto,
) -> ProtobufSchema:
    """Parse a Protobuf schema given as ``.proto`` text or as a base64 ``FileDescriptorProto``;
    ``references`` are the imported schemas' texts, keyed by the import path (the reference
    name).  Raises :class:`SchemaError`."""
    pb = _pb()
    refs = list(references)
    fd = _decode_descriptor(text)
    deps: dict[str, tuple[Any, Reference | None]] = {}
    if fd is None:
        files = {ROOT_FILE: text}
        by_name: dict[str, Reference] = {}
        for ref, ref_text in refs:
            decoded = _decode_descriptor(ref_text)
            files[ref.name] = to_proto_text(decoded) if decoded is not None else ref_text
            by_name[ref.name] = ref
        fds = pb.FileDescriptorSet.FromString(compiler(files, ROOT_FILE))
        compiled = list(fds.file)
        if not compiled or compiled[-1].name != ROOT_FILE:
            raise SchemaError("the Protobuf compiler gave no descriptor for the schema")
        fd = compiled[-1]
        for dep in compiled[:-1]:
            deps[dep.name] = (dep, by_name.get(dep.name))
    else:
        for ref, ref_text in refs:
            dep = _decode_descriptor(ref_text)
            if dep is None:
                inner = parse_protobuf(ref_text, (), compiler=compiler)
                dep = inner.fd
            dep.name = ref.name
            deps[ref.name] = (dep, ref)
        for name in fd.dependency:
            if name not in deps:
                if not _WELL_KNOWN.fullmatch(name):
                    raise SchemaError(f"the schema imports {name}, which is neither a reference nor a well-known file")
                deps[name] = (_well_known(name), None)
        if not fd.name:
            fd.name = ROOT_FILE
        _check_pool(fd, deps)
    fd.ClearField("source_code_info")
    return ProtobufSchema(fd, deps, tuple(r for r, _t in refs))
