"""Emit the codec module of a message module (an encoder and a decoder per struct and version,
as straight-line Python) and its builders module (a builder per struct: what ``builder()``
returns, kept apart so that a handler's builders do not load the codecs).

Wire rules (Kafka's message schema):

* fixed-width big-endian integers ``int8 int16 uint16 int32 uint32 int64``, ``float64``, ``bool``
  (one byte, non-zero is true), ``uuid`` (16 bytes);
* in non-flexible versions strings carry an int16 length, bytes/records an int32 length and
  arrays an int32 count, with -1 meaning null;
* in flexible versions the same carry an unsigned varint of length + 1 (0 meaning null) and
  every struct ends with a tagged-field section: an unsigned varint count, then for each field
  its tag and size as unsigned varints and its value; tags are written in increasing order and
  a known tagged field is written only when it differs from its default;
* a field declared with ``flexibleVersions: none`` keeps the non-flexible encoding everywhere;
* a nullable struct field is preceded by an int8: -1 for null, 1 for present.

What the emitted code does, per struct and version:

* runs of consecutive fixed-width fields are read and written with one ``struct`` call;
* strings, bytes, records and arrays are written out in place, length prefix included, one-
  and two-byte varint lengths read inline;
* an empty tagged-field section (nothing unknown, every known tagged field at its default: the
  common case) is checked for inline; otherwise a helper function reads or writes the section;
* a field the version cannot carry must hold its default when encoding (unless ignorable), and
  gets its default when decoding;
* an array count above the bytes left (times its elements' least size) or above 1,000,000, and a
  tagged-field count above the bytes left or above 10,000, refuse the message (Kafka 4.4's
  limits, with its messages);
* ``records`` fields decode to a ``memoryview`` of the input; a ``records`` value that is a file
  region (anything with ``length`` and ``to_bytes()``) is left as a hole of a ``Holes`` buffer.

Versions whose code is the same share one function (named after the first of them); a comment
above each function lists the versions it serves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.codegen.error_responses import ErrorResponses
from tools.codegen.model import (
    PRIMITIVES,
    FieldDef,
    MessageDef,
    StructDef,
    default_of,
    within,
)

#: fixed-width types -> ``struct`` format character
FIXED = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q", "float64": "d", "bool": "?"}
SIZE = {"b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "d": 8, "?": 1}
#: format characters as parts of Python names
IDENT = {"b": "b", "h": "h", "H": "H", "i": "i", "I": "I", "q": "q", "d": "d", "?": "o"}
#: the fewest bytes a value of a variable-size type takes
MIN_SIZE = {"string": 1, "bytes": 1, "records": 1, "uuid": 16}
PLACEHOLDER = "@FN@"
BUILDERS = "_builders"  # the builders' subpackage of the output directory
#: Kafka 4.4's limits (MessageUtil): the most elements an array may declare, the most tagged
#: fields a struct may; a count above them, or above the bytes left, refuses the message
MAX_ARRAY_LENGTH = 1_000_000


def py_type(f: FieldDef) -> str:
    """The Python type of a field's values (as the class annotates it)."""
    inner = element_type(f)
    py = f"list[{inner}]" if f.is_array else inner
    if f.nullable is not None or f.type == "records":
        py += " | None"
    return py


def element_type(f: FieldDef) -> str:
    """The Python type of a field's value, or of its elements for an array."""
    if f.struct is not None:
        return f.struct.qual
    return PRIMITIVES[f.base][1]


@dataclass
class Plan:
    encode: str
    decode: str
    min_size: int


class _Unit:
    """The source of one function (and its helpers) before it gets its name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.helpers: list[list[str]] = []
        self.counter = 0

    def fresh(self) -> int:
        self.counter += 1
        return self.counter

    def text(self) -> str:
        parts = ["\n".join(self.lines), *("\n".join(h) for h in self.helpers)]
        return "\n\n\n".join(parts)


class CodecModule:
    """The codec module for the messages of one generated module."""

    def __init__(
        self, module: str, doc: str, messages: list[MessageDef], api: tuple[MessageDef, MessageDef] | None = None
    ) -> None:
        self.module = module
        self.doc = doc
        self.messages = messages
        self.api = api  # (request, response): the module also builds the request's error answer
        self.plans: dict[tuple[str, int, bool], Plan] = {}
        self.by_text: dict[tuple[str, str], str] = {}  # (kind, text) -> function name
        self.functions: dict[str, str] = {}  # name -> text, in emission order
        self.serves: dict[str, list[str]] = {}  # function name -> "Struct vN" it serves
        self.formats: dict[str, None] = {}
        self.default_consts: dict[str, str] = {}  # constant name -> struct ident
        self.current: MessageDef | None = None

    # ------------------------------------------------------------------ helpers of emitted code

    def fmt(self, chars: str) -> tuple[str, str, int]:
        """Names of the pack and unpack functions of a ``struct`` format, and its size."""
        self.formats[chars] = None
        ident = "".join(IDENT[c] for c in chars)
        return f"_pack_{ident}", f"_unpack_{ident}", sum(SIZE[c] for c in chars)

    def alias(self, s: StructDef) -> str:
        """The module-level name bound to a struct class (for use at run time)."""
        return f"_{s.ident}"

    def default_expr(self, f: FieldDef) -> str:
        """An expression giving ``f``'s default: a constant, a new list, a new struct."""
        expr, literal = default_of(f.owner, f.spec)
        if literal:
            return expr
        if f.is_array:
            return "[]"
        assert f.struct is not None
        return f"_build_{f.struct.ident}()"

    def differs(self, f: FieldDef, value: str) -> str:
        """A condition: ``value`` is not ``f``'s default."""
        expr, literal = default_of(f.owner, f.spec)
        if literal:
            return f"{value} is not None" if expr == "None" else f"{value} != {expr}"
        if f.is_array:
            return f"{value} != []"
        assert f.struct is not None
        const = f"_DEFAULT_{f.struct.ident}"
        self.default_consts[const] = f.struct.ident
        return f"{value} != {const}"

    # ------------------------------------------------------------------ plans

    def plan(self, s: StructDef, version: int, flexible: bool) -> Plan:
        key = (s.qual, version, flexible)
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        tagged: list[FieldDef] = []
        absent: list[FieldDef] = []
        steps: list[tuple[str, list[FieldDef]]] = []
        min_size = 0
        for f in s.fields:
            if not f.present(version):
                absent.append(f)
                continue
            if f.is_tagged(version):
                if flexible:
                    tagged.append(f)
                else:
                    absent.append(f)
                continue
            if not f.is_array and f.type in FIXED:
                if steps and steps[-1][0] == "run":
                    steps[-1][1].append(f)
                else:
                    steps.append(("run", [f]))
                min_size += SIZE[FIXED[f.type]]
                continue
            steps.append(("field", [f]))
            min_size += MIN_SIZE["uuid"] if f.type == "uuid" else 1
        if flexible:
            min_size += 1
        tagged.sort(key=lambda f: f.tag or 0)
        enc = self._encoder(s, version, flexible, steps, tagged, absent)
        dec = self._decoder(s, version, flexible, steps, tagged, absent)
        suffix = f"_v{version}" + ("" if flexible == self._natural_flexible(version) else "_nf")
        plan = Plan(
            self._name("enc", f"_enc_{s.ident}{suffix}", enc, f"{s.qual} v{version}"),
            self._name("dec", f"_dec_{s.ident}{suffix}", dec, f"{s.qual} v{version}"),
            min_size,
        )
        self.plans[key] = plan
        return plan

    def _natural_flexible(self, version: int) -> bool:
        assert self.current is not None
        return self.current.is_flexible(version)

    def _name(self, kind: str, name: str, unit: _Unit, serves: str) -> str:
        text = unit.text()
        existing = self.by_text.get((kind, text))
        if existing is not None:
            self.serves[existing].append(serves)
            return existing
        self.by_text[(kind, text)] = name
        self.functions[name] = text.replace(PLACEHOLDER, name)
        self.serves[name] = [serves]
        return name

    # ------------------------------------------------------------------ encoder

    def _encoder(
        self,
        s: StructDef,
        version: int,
        flexible: bool,
        steps: list[tuple[str, list[FieldDef]]],
        tagged: list[FieldDef],
        absent: list[FieldDef],
    ) -> _Unit:
        u = _Unit()
        lines = u.lines
        lines.append(f"def {PLACEHOLDER}(out: bytearray, obj: {s.qual}) -> None:")
        for f in absent:
            if f.ignorable:
                continue
            lines.append(f"    if {self.differs(f, 'obj.' + f.attr)}:")
            lines.append(
                f'        raise EncodeError("{s.qual}.{f.attr} cannot be sent in this version: '
                f'{_versions_text(f)}", UNSUPPORTED_VERSION)'
            )
        for kind, fields in steps:
            if kind == "run":
                pack, _unpack, _size = self.fmt("".join(FIXED[f.type] for f in fields))
                lines.append(f"    out += {pack}({', '.join('obj.' + f.attr for f in fields)})")
                continue
            f = fields[0]
            lines += self.encode_value(
                u, f, version, flexible and f.flexible, within(version, f.nullable), f"{s.qual}.{f.attr}",
                f"obj.{f.attr}", "out", "    ",
            )
        if flexible:
            if tagged:
                conds = ["obj.unknown_tagged_fields"]
                for f in tagged:
                    conds.append(self._tagged_differs(u, f))
                lines.append(f"    if {' or '.join(conds)}:")
                lines.append(f"        {PLACEHOLDER}_tagged(out, obj)")
                lines.append("    else:")
                lines.append("        out.append(0)")
                u.helpers.append(self._tagged_encoder(u, s, version, tagged))
            else:
                lines.append("    if obj.unknown_tagged_fields:")
                lines.append("        write_tagged(out, [], obj.unknown_tagged_fields)")
                lines.append("    else:")
                lines.append("        out.append(0)")
        if len(lines) == 1:
            lines.append("    pass")
        return u

    def _tagged_differs(self, u: _Unit, f: FieldDef) -> str:
        """Condition: tagged field ``f`` is not at its default (a struct of plain values is
        compared field by field, without building a default)."""
        _expr, literal = default_of(f.owner, f.spec)
        st = f.struct
        if not literal and not f.is_array and st is not None and all(default_of(g.owner, g.spec)[1] for g in st.fields):
            k = u.fresh()
            checks = [f"type(t{k} := obj.{f.attr}) is not {self.alias(st)}"]
            for g in st.fields:
                checks.append(self.differs(g, f"t{k}.{g.attr}"))
            checks.append(f"t{k}.unknown_tagged_fields")
            return "(" + " or ".join(checks) + ")"
        return self.differs(f, f"obj.{f.attr}")

    def _tagged_encoder(self, u: _Unit, s: StructDef, version: int, tagged: list[FieldDef]) -> list[str]:
        lines = [
            f"def {PLACEHOLDER}_tagged(out: bytearray, obj: {s.qual}) -> None:",
            "    fields: list[tuple[int, bytes | bytearray]] = []",
        ]
        for f in tagged:
            lines.append(f"    if {self.differs(f, 'obj.' + f.attr)}:")
            lines.append("        body = bytearray()")
            lines += self.encode_value(
                u, f, version, True, within(version, f.nullable), f"{s.qual}.{f.attr}", f"obj.{f.attr}", "body",
                "        ",
            )
            lines.append(f"        fields.append(({f.tag}, body))")
        lines.append("    write_tagged(out, fields, obj.unknown_tagged_fields)")
        return lines

    def encode_value(
        self,
        u: _Unit,
        f: FieldDef,
        version: int,
        flexible: bool,
        nullable: bool,
        what: str,
        src: str,
        out: str,
        ind: str,
        element: bool = False,
    ) -> list[str]:
        """Lines appending the value ``src`` of field ``f`` (or of one of its elements) to ``out``."""
        base = f.base
        array = f.is_array and not element
        k = u.fresh()
        v = f"v{k}"
        lines: list[str] = []
        if not array and base in FIXED:
            pack, _unpack, _size = self.fmt(FIXED[base])
            return [f"{ind}{out} += {pack}({src})"]
        if not array and base == "uuid":
            return [f"{ind}{out} += {src}.bytes"]
        if not array and base not in PRIMITIVES:
            assert f.struct is not None
            child = self.plan(f.struct, version, flexible).encode
            if not nullable:
                if f.nullable is None:
                    return [f"{ind}{child}({out}, {src})"]
                # null in other versions: refused in this one
                return [
                    f"{ind}{v} = {src}",
                    f"{ind}if {v} is None:",
                    f'{ind}    raise EncodeError("{what} is not nullable in this version")',
                    f"{ind}{child}({out}, {v})",
                ]
            return [
                f"{ind}{v} = {src}",
                f"{ind}if {v} is None:",
                f"{ind}    {out}.append(0xFF)",
                f"{ind}else:",
                f"{ind}    {out}.append(1)",
                f"{ind}    {child}({out}, {v})",
            ]
        wide = array or base != "string"
        lines.append(f"{ind}{v} = {src}")
        lines.append(f"{ind}if {v} is None:")
        if nullable:
            if flexible:
                lines.append(f"{ind}    {out}.append(0)")
            else:
                lines.append(f"{ind}    {out} += {'MINUS_ONE_I32' if wide else 'MINUS_ONE_I16'}")
        else:
            lines.append(f'{ind}    raise EncodeError("{what} is not nullable in this version")')
        n = f"n{k}"
        if not array and base == "string":
            lines.append(f"{ind}else:")
            lines.append(f'{ind}    data{k} = {v}.encode("utf-8")')
            lines.append(f"{ind}    {n} = len(data{k})")
            lines.append(f"{ind}    if {n} > 0x7FFF:")
            lines.append(f'{ind}        raise EncodeError("{what} is longer than 32767 bytes")')
            lines += _len_enc(flexible, False, n, out, ind + "    ")
            lines.append(f"{ind}    {out} += data{k}")
            return lines
        if not array:  # bytes, records
            # bytes and bytearrays here; memoryviews and file regions (records) by a helper
            if base == "records":
                lines.append(f"{ind}elif type({v}) is bytes or type({v}) is bytearray:")
            else:  # typed bytes (a bytearray is welcome too)
                lines.append(f"{ind}elif type({v}) in BYTES_TYPES:")
            lines.append(f"{ind}    {n} = len({v})")
            lines += _len_enc(flexible, True, n, out, ind + "    ", two_bytes=True)
            lines.append(f"{ind}    {out} += {v}")
            lines.append(f"{ind}else:")
            helper = ("put_compact_" if flexible else "put_") + ("records" if base == "records" else "bytes")
            lines.append(f"{ind}    {helper}({out}, {v})")
            return lines
        lines.append(f"{ind}else:")
        lines.append(f"{ind}    {n} = len({v})")
        lines += _len_enc(flexible, True, n, out, ind + "    ")
        if base in FIXED and base != "bool":
            lines.append(f"{ind}    if {n}:")
            lines.append(f'{ind}        {out} += spack(f">{{{n}}}{FIXED[base]}", *{v})')
            return lines
        item = f"item{k}"
        lines.append(f"{ind}    for {item} in {v}:")
        if base not in PRIMITIVES:
            assert f.struct is not None
            child = self.plan(f.struct, version, flexible).encode
            lines.append(f"{ind}        {child}({out}, {item})")
        else:
            lines += self.encode_value(u, f, version, flexible, False, what + "[]", item, out, ind + "        ", True)
        return lines

    # ------------------------------------------------------------------ decoder

    def _decoder(
        self,
        s: StructDef,
        version: int,
        flexible: bool,
        steps: list[tuple[str, list[FieldDef]]],
        tagged: list[FieldDef],
        absent: list[FieldDef],
    ) -> _Unit:
        u = _Unit()
        lines = u.lines
        lines.append(f"def {PLACEHOLDER}(buf: memoryview, pos: int) -> tuple[{s.qual}, int]:")
        lines.append(f"    obj = new({self.alias(s)})")
        for kind, fields in steps:
            if kind == "run":
                _pack, unpack, size = self.fmt("".join(FIXED[f.type] for f in fields))
                targets = ", ".join("obj." + f.attr for f in fields)
                if len(fields) == 1:
                    targets = f"({targets},)"
                lines.append(f"    {targets} = {unpack}(buf, pos)")
                lines.append(f"    pos += {size}")
                continue
            f = fields[0]
            lines += self.decode_value(
                u, f, version, flexible and f.flexible, within(version, f.nullable), f"{s.qual}.{f.attr}",
                f"obj.{f.attr}", "buf", "    ",
            )
        for f in absent:
            lines.append(f"    obj.{f.attr} = {self.default_expr(f)}")
        if flexible:
            lines.append("    if buf[pos] == 0:")
            for f in tagged:
                lines.append(f"        obj.{f.attr} = {self.default_expr(f)}")
            lines.append("        obj.unknown_tagged_fields = None")
            lines.append("        pos += 1")
            lines.append("    else:")
            if tagged:
                lines.append(f"        pos = {PLACEHOLDER}_tagged(buf, pos, obj)")
                u.helpers.append(self._tagged_decoder(u, s, version, tagged))
            else:
                lines.append("        obj.unknown_tagged_fields, pos = read_unknown_tagged(buf, pos)")
        else:
            lines.append("    obj.unknown_tagged_fields = None")
        lines.append("    return obj, pos")
        return u

    def _tagged_decoder(self, u: _Unit, s: StructDef, version: int, tagged: list[FieldDef]) -> list[str]:
        lines = [
            f"def {PLACEHOLDER}_tagged(buf: memoryview, pos: int, obj: {s.qual}) -> int:",
            "    count, pos = read_uvarint(buf, pos)",
            "    if count > MAX_TAGGED_FIELD_COUNT or count > len(buf) - pos:",
            "        raise tagged_count_refused(count, len(buf) - pos)",
        ]
        for f in tagged:
            lines.append(f"    obj.{f.attr} = {self.default_expr(f)}")
        lines += [
            "    unknown: list[tuple[int, bytes]] | None = None",
            "    for _ in range(count):",
            "        tag, pos = read_uvarint(buf, pos)",
            "        size, pos = read_uvarint(buf, pos)",
            "        end = pos + size",
            "        if end > len(buf):",
            '            raise DecodeError(f"tagged field {tag} runs past the end of the data")',
        ]
        for i, f in enumerate(tagged):
            lines.append(f"        {'if' if i == 0 else 'elif'} tag == {f.tag}:")
            lines.append("            sub = buf[:end]")
            lines.append("            start = pos")
            lines += self.decode_value(
                u, f, version, True, within(version, f.nullable), f"{s.qual}.{f.attr}", f"obj.{f.attr}", "sub",
                "            ",
            )
            lines.append("            if pos != end:")
            lines.append(
                '                raise DecodeError(f"tagged field {tag} has size {size} but its value took '
                '{pos - start} bytes")'
            )
        lines += [
            "        else:",
            "            if unknown is None:",
            "                unknown = []",
            "            unknown.append((tag, bytes(buf[pos:end])))",
            "        pos = end",
            "    obj.unknown_tagged_fields = unknown",
            "    return pos",
        ]
        return lines

    def decode_value(
        self,
        u: _Unit,
        f: FieldDef,
        version: int,
        flexible: bool,
        nullable: bool,
        what: str,
        dst: str,
        buf: str,
        ind: str,
        element: bool = False,
    ) -> list[str]:
        """Lines reading a value of field ``f`` (or one of its elements) at ``pos`` of ``buf``
        into ``dst``, advancing ``pos``."""
        base = f.base
        array = f.is_array and not element
        k = u.fresh()
        n = f"n{k}"
        end = f"end{k}"
        if not array and base in FIXED:
            _pack, unpack, size = self.fmt(FIXED[base])
            return [f"{ind}({dst},) = {unpack}({buf}, pos)", f"{ind}pos += {size}"]
        if not array and base == "uuid":
            return [f"{ind}{dst}, pos = read_uuid({buf}, pos)"]
        if not array and base not in PRIMITIVES:
            assert f.struct is not None
            child = self.plan(f.struct, version, flexible).decode
            if not nullable:
                return [f"{ind}{dst}, pos = {child}({buf}, pos)"]
            return [
                f"{ind}if {buf}[pos] >= 0x80:",
                f"{ind}    {dst} = None",
                f"{ind}    pos += 1",
                f"{ind}else:",
                f"{ind}    {dst}, pos = {child}({buf}, pos + 1)",
            ]
        wide = array or base != "string"
        lines = _len_dec(flexible, wide, n, buf, ind, two_bytes=not array and base != "string")
        kind = "array" if array else "string" if base == "string" else "bytes"
        invalid = f'raise DecodeError(f"{what}: invalid {kind} length {{{n}}}")'
        lines.append(f"{ind}if {n} < 0:")
        if nullable:
            lines.append(f"{ind}    if {n} != -1:")
            lines.append(f"{ind}        {invalid}")
            lines.append(f"{ind}    {dst} = None")
        else:
            lines.append(f"{ind}    {invalid}")
        lines.append(f"{ind}else:")
        i2 = ind + "    "
        if not array:
            runs = "string runs" if base == "string" else "bytes run"
            value = {
                "string": f'str({buf}[pos:{end}], "utf-8")',
                "records": f"{buf}[pos:{end}]",
                "bytes": f"bytes({buf}[pos:{end}])",
            }[base]
            return [*lines, f"{i2}{end} = pos + {n}", f"{i2}if {end} > len({buf}):", f'{i2}    raise DecodeError("{what}: {runs} past the end of the data")', f"{i2}{dst} = {value}", f"{i2}pos = {end}"]
        too_many = f'raise array_refused("{what}", {n}, len({buf}) - pos)'
        if base in FIXED and base != "bool":
            c = FIXED[base]
            return [*lines, f"{i2}{end} = pos + {n} * {SIZE[c]}", f"{i2}if {end} > len({buf}) or {n} > {MAX_ARRAY_LENGTH}:", f"{i2}    {too_many}", f'{i2}{dst} = list(sunpack(f">{{{n}}}{c}", {buf}, pos)) if {n} else []', f"{i2}pos = {end}"]
        if base in PRIMITIVES:
            least = SIZE[FIXED[base]] if base in FIXED else MIN_SIZE[base]
        else:
            assert f.struct is not None
            least = self.plan(f.struct, version, flexible).min_size
        # every element takes at least ``least`` bytes: refuse counts the data cannot hold
        # (and Kafka's: a count above the bytes left, or above MAX_ARRAY_LENGTH)
        lines.append(f"{i2}if {n} * {max(least, 1)} > len({buf}) - pos or {n} > {MAX_ARRAY_LENGTH}:")
        lines.append(f"{i2}    {too_many}")
        items, item = f"items{k}", f"item{k}"
        lines.append(f"{i2}{items}: list[{element_type(f)}] = []")
        lines.append(f"{i2}for _ in range({n}):")
        if base not in PRIMITIVES:
            assert f.struct is not None
            child = self.plan(f.struct, version, flexible).decode
            lines.append(f"{i2}    {item}, pos = {child}({buf}, pos)")
        else:
            lines += self.decode_value(u, f, version, flexible, False, what + "[]", item, buf, i2 + "    ", True)
        lines.append(f"{i2}    {items}.append({item})")
        lines.append(f"{i2}{dst} = {items}")
        return lines

    # ------------------------------------------------------------------ builders

    def builder(self, s: StructDef) -> str:
        lines = [f"def _build_{s.ident}(", "    *,"]
        body = [f"    obj = new({self.alias(s)})"]
        for f in s.fields:
            expr, literal = default_of(f.owner, f.spec)
            lines.append(f"    {f.attr}: {py_type(f)} = {expr},")
            if literal:
                body.append(f"    obj.{f.attr} = {f.attr}")
            elif f.is_array:
                body.append(f"    obj.{f.attr} = [] if {f.attr} is DEFAULT else {f.attr}")
            else:
                assert f.struct is not None
                body.append(f"    obj.{f.attr} = _build_{f.struct.ident}() if {f.attr} is DEFAULT else {f.attr}")
        lines.append("    unknown_tagged_fields: list[tuple[int, bytes]] | None = None,")
        lines.append(f") -> {s.qual}:")
        body.append("    obj.unknown_tagged_fields = unknown_tagged_fields")
        body.append("    return obj")
        return "\n".join(lines + body)

    # ------------------------------------------------------------------ module

    def _structs(self) -> list[StructDef]:
        out: list[StructDef] = []
        for m in self.messages:
            assert m.top is not None
            out += [*m.structs.values(), m.top]
        return out

    def text(self, header: str, class_module: str) -> str:
        """The codec module: encoders and decoders by version (and the request's error answer)."""
        tables: list[str] = []
        all_structs = self._structs()
        for m in self.messages:
            self.current = m
            assert m.top is not None
            enc, dec = [], []
            for v in m.versions:
                plan = self.plan(m.top, v, m.is_flexible(v))
                enc.append(f"{v}: {plan.encode}")
                dec.append(f"{v}: {plan.decode}")
            tables.append(f"{m.name}._encoders_ = {{{', '.join(enc)}}}")
            tables.append(f"{m.name}._decoders_ = {{{', '.join(dec)}}}")
        names = ", ".join(m.name for m in self.messages)
        body: list[str] = []
        for name, text in self.functions.items():
            served = self.serves[name]
            body += ["", "", f"# {_serves_text(served)}", text]
        if self.api is not None:
            request, response = self.api
            alias = {s.qual: self.alias(s) for s in all_structs}
            body += ["", "", ErrorResponses(request, response, alias).function()]
            tables.append(f"{request.name}._error_response_ = _error_{request.name}")
        body += ["", ""]
        for const, ident in sorted(self.default_consts.items()):
            body.append(f"{const} = _build_{ident}()  # compared with, never handed out")
        body += tables
        builders = sorted(set(re.findall(r"\b_build_\w+", "\n".join(body))))
        out = [
            header + f'"""{self.doc}"""',
            "",
            "from __future__ import annotations",
            "",
            "import uuid  # noqa: F401",
            "",
            "from odradek.protocol._codec import (  # noqa: F401",
            "    BYTES_TYPES,",
            "    MAX_TAGGED_FIELD_COUNT,",
            "    MINUS_ONE_I16,",
            "    MINUS_ONE_I32,",
            "    UNSUPPORTED_VERSION,",
            "    ZERO_UUID,",
            "    DecodeError,",
            "    EncodeError,",
            "    Records,",
            "    Struct,",
            "    array_refused,",
            "    new,",
            "    pack_i16,",
            "    pack_i32,",
            "    put_bytes,",
            "    put_compact_bytes,",
            "    put_compact_records,",
            "    put_records,",
            "    read_unknown_tagged,",
            "    tagged_count_refused,",
            "    read_uuid,",
            "    read_uvarint,",
            "    spack,",
            "    sunpack,",
            "    unpack_i16,",
            "    unpack_i32,",
            "    write_tagged,",
            "    write_uvarint,",
            ")",
        ]
        if builders:
            out.append(f"from odradek.protocol.messages.{BUILDERS}.{class_module} import (")
            out += [f"    {b}," for b in builders]
            out.append(")")
        out += [f"from odradek.protocol.messages.{class_module} import {names}", ""]
        for s in all_structs:
            out.append(f"{self.alias(s)} = {s.qual}")
        for chars in sorted(self.formats):
            ident = "".join(IDENT[c] for c in chars)
            out.append(f'_pack_{ident} = Struct(">{chars}").pack')
            out.append(f'_unpack_{ident} = Struct(">{chars}").unpack_from')
        return "\n".join(out + body) + "\n"

    def builders_text(self, header: str, class_module: str, doc: str) -> str:
        """The builders module: one function per struct building it as its constructor does."""
        all_structs = self._structs()
        names = ", ".join(m.name for m in self.messages)
        out = [
            header + f'"""{doc}"""',
            "",
            "from __future__ import annotations",
            "",
            "import uuid  # noqa: F401",
            "",
            "from odradek.protocol._codec import DEFAULT, ZERO_UUID, Records, new  # noqa: F401",
            f"from odradek.protocol.messages.{class_module} import {names}",
            "",
        ]
        for s in all_structs:
            out.append(f"{self.alias(s)} = {s.qual}")
        for s in all_structs:
            out += ["", "", self.builder(s)]
        out += ["", ""]
        for s in all_structs:
            out.append(f"{self.alias(s)}._builder_ = _build_{s.ident}")
        return "\n".join(out) + "\n"


def _versions_text(f: FieldDef) -> str:
    v = f.versions
    assert v is not None
    if f.tag is not None:
        return "a tagged field, only in flexible versions" if v[1] >= 0x7FFF else f"only in versions {v[0]}-{v[1]}"
    return f"only in versions {v[0]}+" if v[1] >= 0x7FFF else f"only in versions {v[0]}-{v[1]}"


def _serves_text(served: list[str]) -> str:
    """``Struct v3, v4, v7`` for the struct-versions a function serves (grouped by struct)."""
    by_struct: dict[str, list[int]] = {}
    for item in served:
        name, _, v = item.rpartition(" v")
        by_struct.setdefault(name, []).append(int(v))
    parts = []
    for name, versions in by_struct.items():
        parts.append(f"{name} {_ranges(versions)}")
    return "; ".join(parts)


def _ranges(versions: list[int]) -> str:
    versions = sorted(set(versions))
    out = []
    start = prev = versions[0]
    for v in versions[1:]:
        if v == prev + 1:
            prev = v
            continue
        out.append(f"v{start}" if start == prev else f"v{start}-{prev}")
        start = prev = v
    out.append(f"v{start}" if start == prev else f"v{start}-{prev}")
    return ", ".join(out)


def _len_enc(flexible: bool, wide: bool, n: str, out: str, ind: str, two_bytes: bool = False) -> list[str]:
    """Lines appending the length or count ``n`` (>= 0) as a prefix; ``two_bytes`` also writes
    two-byte varints inline (bytes and records lengths often take two)."""
    if flexible:
        lines = [f"{ind}if {n} < 0x7F:", f"{ind}    {out}.append({n} + 1)"]
        if two_bytes:
            lines += [
                f"{ind}elif {n} < 0x3FFF:",
                f"{ind}    {out}.append(({n} + 1) & 0x7F | 0x80)",
                f"{ind}    {out}.append(({n} + 1) >> 7)",
            ]
        return [*lines, f"{ind}else:", f"{ind}    write_uvarint({out}, {n} + 1)"]
    return [f"{ind}{out} += {'pack_i32' if wide else 'pack_i16'}({n})"]


def _len_dec(flexible: bool, wide: bool, n: str, buf: str, ind: str, two_bytes: bool = False) -> list[str]:
    """Lines reading a length or count prefix into ``n`` (-1 for null) and advancing ``pos``;
    ``two_bytes`` also reads two-byte varints inline (bytes and records lengths often take two)."""
    if flexible:
        lines = [f"{ind}{n} = {buf}[pos]", f"{ind}if {n} < 0x80:", f"{ind}    {n} -= 1", f"{ind}    pos += 1"]
        if two_bytes:
            lines += [
                f"{ind}elif {buf}[pos + 1] < 0x80:",
                f"{ind}    {n} = ({n} & 0x7F | {buf}[pos + 1] << 7) - 1",
                f"{ind}    pos += 2",
            ]
        return [*lines, f"{ind}else:", f"{ind}    {n}, pos = read_uvarint({buf}, pos)", f"{ind}    {n} -= 1"]
    if wide:
        return [f"{ind}{n} = unpack_i32({buf}, pos)[0]", f"{ind}pos += 4"]
    return [f"{ind}{n} = unpack_i16({buf}, pos)[0]", f"{ind}pos += 2"]
