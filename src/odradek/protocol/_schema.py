"""Schema-driven codec behind the generated message classes.

The generated modules in :mod:`odradek.protocol.messages` declare, for each struct, a tuple of
:class:`Field` descriptors (name, type, versions, nullable versions, tag, default).  The first
time a struct is encoded or decoded at some version, this module compiles that version into a
pair of generated functions (a *plan*) and caches it on the class, so the steady-state cost of a
message is straight-line code per field with no version checks.

Wire rules implemented here (Kafka's message schema):

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

``records`` fields decode to a :class:`memoryview` of the input, never copied.
"""

from __future__ import annotations

import operator
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, TypeAlias

from odradek.protocol.errors import DecodeError, EncodeError, UnsupportedVersion

__all__ = [
    "BOOL",
    "BYTES",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "MAX",
    "RECORDS",
    "STRING",
    "UINT16",
    "UINT32",
    "UUID",
    "ZERO_UUID",
    "Array",
    "Data",
    "Field",
    "Holes",
    "Message",
    "Records",
    "Region",
    "Struct",
]

MAX = 0x7FFF
ZERO_UUID = uuid.UUID(int=0)

Buffer: TypeAlias = bytes | bytearray | memoryview


class Region(Protocol):
    """Bytes that live elsewhere (a file range): a ``records`` value the encoder does not copy
    when the caller asks for the parts of a message (see ``encode_response_parts``)."""

    @property
    def length(self) -> int: ...

    def to_bytes(self) -> bytes: ...


class Holes(bytearray):
    """An encode buffer that leaves ``records`` regions out: ``holes`` lists ``(position, region)``
    pairs, each region's bytes belonging at that position of the final message."""

    holes: tuple[tuple[int, Region], ...] = ()

    def add_hole(self, position: int, region: Region) -> None:
        self.holes = (*self.holes, (position, region))


#: what a ``records`` field holds: the bytes, or a region of a file
Records: TypeAlias = "bytes | bytearray | memoryview | Region"
Versions: TypeAlias = tuple[int, int] | None
EncodeFn: TypeAlias = Callable[[bytearray, Any], None]
DecodeFn: TypeAlias = Callable[[memoryview, int], tuple[Any, int]]


class _Primitive:
    __slots__ = ("default", "min_size", "name")

    def __init__(self, name: str, default: object, min_size: int) -> None:
        self.name = name
        self.default = default
        self.min_size = min_size

    def __repr__(self) -> str:
        return self.name.upper()


INT8 = _Primitive("int8", 0, 1)
INT16 = _Primitive("int16", 0, 2)
UINT16 = _Primitive("uint16", 0, 2)
INT32 = _Primitive("int32", 0, 4)
UINT32 = _Primitive("uint32", 0, 4)
INT64 = _Primitive("int64", 0, 8)
FLOAT64 = _Primitive("float64", 0.0, 8)
BOOL = _Primitive("bool", False, 1)
STRING = _Primitive("string", "", 1)
BYTES = _Primitive("bytes", b"", 1)
RECORDS = _Primitive("records", None, 1)
UUID = _Primitive("uuid", ZERO_UUID, 16)


class Array:
    """An array of ``element`` (a primitive or a struct class)."""

    __slots__ = ("element",)

    def __init__(self, element: _Primitive | type[Struct]) -> None:
        self.element = element

    def __repr__(self) -> str:
        return f"Array({self.element!r})"


TypeSpec: TypeAlias = "_Primitive | Array | type[Struct]"


def _in(version: int, versions: Versions) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


class Field:
    """One field of a struct as declared in Kafka's JSON definition (facts only)."""

    __slots__ = (
        "attr",
        "default",
        "flexible",
        "ignorable",
        "nullable",
        "tag",
        "tagged",
        "type",
        "versions",
    )

    def __init__(
        self,
        attr: str,
        type: TypeSpec,
        versions: Versions,
        *,
        nullable: Versions = None,
        tag: int | None = None,
        tagged: Versions = None,
        default: object = ...,
        ignorable: bool = False,
        flexible: bool = True,
    ) -> None:
        self.attr = attr
        self.type = type
        self.versions = versions
        self.nullable = nullable
        self.tag = tag
        self.tagged = tagged
        self.ignorable = ignorable
        self.flexible = flexible
        if default is ...:
            default = type.default if isinstance(type, _Primitive) else _FRESH
        self.default = default

    def default_value(self) -> Any:
        """A fresh default value (a new list or struct where the default is mutable)."""
        d = self.default
        if d is _FRESH:
            return [] if isinstance(self.type, Array) else self.type()  # type: ignore[operator]
        return d


class _Fresh:
    """Marks a default that must be built anew for every instance (empty list, default struct)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FRESH"


_FRESH: Any = _Fresh()
#: Parameter default of generated ``__init__`` methods: "use the field's default".
DEFAULT: Any = _FRESH

# --------------------------------------------------------------------------------------------
# primitive codecs

_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_u16 = struct.Struct(">H")
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")
_i64 = struct.Struct(">q")
_f64 = struct.Struct(">d")


def _fixed(s: struct.Struct) -> tuple[EncodeFn, DecodeFn]:
    pack = s.pack
    unpack = s.unpack_from
    size = s.size

    def enc(out: bytearray, v: Any) -> None:
        out += pack(v)

    def dec(buf: memoryview, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + size

    return enc, dec


def _enc_bool(out: bytearray, v: Any) -> None:
    out.append(1 if v else 0)


def _dec_bool(buf: memoryview, pos: int) -> tuple[Any, int]:
    return buf[pos] != 0, pos + 1


def _enc_uuid(out: bytearray, v: Any) -> None:
    out += v.bytes


#: recently decoded UUIDs by their bytes (topic ids repeat in every request that names a topic)
_UUIDS: dict[bytes, uuid.UUID] = {}


def _dec_uuid(buf: memoryview, pos: int) -> tuple[Any, int]:
    end = pos + 16
    if end > len(buf):
        raise DecodeError("truncated uuid")
    raw = bytes(buf[pos:end])
    u = _UUIDS.get(raw)
    if u is None:
        if len(_UUIDS) >= 1024:
            _UUIDS.clear()
        u = _UUIDS[raw] = uuid.UUID(bytes=raw)
    return u, end


def write_uvarint(out: bytearray, v: int) -> None:
    """Append ``v`` (0 <= v < 2**32) as an unsigned varint."""
    if v < 0x80:
        out.append(v)
        return
    if v >> 32:
        raise EncodeError(f"unsigned varint out of range: {v}")
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes (32 bits) at ``pos``."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> 32:
                raise DecodeError("unsigned varint exceeds 32 bits")
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes")


def _length_codecs(
    flexible: bool, wide: bool
) -> tuple[Callable[[bytearray, int], None], Callable[[memoryview, int], tuple[int, int]]]:
    """Length prefix codecs; -1 is null. ``wide`` selects int32 (bytes) over int16 (strings)."""
    if flexible:

        def enc_len(out: bytearray, n: int) -> None:
            if n < 0x7F:
                out.append(n + 1)
            else:
                write_uvarint(out, n + 1)

        def dec_len(buf: memoryview, pos: int) -> tuple[int, int]:
            b = buf[pos]
            if b < 0x80:
                return b - 1, pos + 1
            n, pos = read_uvarint(buf, pos)
            return n - 1, pos

        return enc_len, dec_len
    s = _i32 if wide else _i16
    pack, unpack, size = s.pack, s.unpack_from, s.size

    def enc_fixed(out: bytearray, n: int) -> None:
        out += pack(n)

    def dec_fixed(buf: memoryview, pos: int) -> tuple[int, int]:
        return unpack(buf, pos)[0], pos + size

    return enc_fixed, dec_fixed


def _string_codecs(flexible: bool, nullable: bool, what: str) -> tuple[EncodeFn, DecodeFn]:
    enc_len, dec_len = _length_codecs(flexible, wide=False)

    def enc(out: bytearray, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError(f"{what} is not nullable in this version")
            enc_len(out, -1)
            return
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise EncodeError(f"{what} is longer than 32767 bytes")
        enc_len(out, len(data))
        out += data

    def dec(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = dec_len(buf, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise DecodeError(f"{what}: invalid string length {n}")
        end = pos + n
        if end > len(buf):
            raise DecodeError(f"{what}: string runs past the end of the data")
        return str(buf[pos:end], "utf-8"), end

    return enc, dec


def _bytes_codecs(flexible: bool, nullable: bool, what: str, zero_copy: bool) -> tuple[EncodeFn, DecodeFn]:
    enc_len, dec_len = _length_codecs(flexible, wide=True)

    def enc(out: bytearray, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError(f"{what} is not nullable in this version")
            enc_len(out, -1)
            return
        if zero_copy and not isinstance(v, (bytes, bytearray, memoryview)):
            # a region of a file (anything with ``length``): leave a hole the writer fills
            enc_len(out, v.length)
            if isinstance(out, Holes):
                out.add_hole(len(out), v)
            else:
                out += v.to_bytes()
            return
        enc_len(out, len(v) if not isinstance(v, memoryview) else v.nbytes)
        out += v

    def dec(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = dec_len(buf, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise DecodeError(f"{what}: invalid bytes length {n}")
        end = pos + n
        if end > len(buf):
            raise DecodeError(f"{what}: bytes run past the end of the data")
        if zero_copy:
            return buf[pos:end], end
        return bytes(buf[pos:end]), end

    return enc, dec


_FIXED: dict[_Primitive, tuple[EncodeFn, DecodeFn]] = {
    INT8: _fixed(_i8),
    INT16: _fixed(_i16),
    UINT16: _fixed(_u16),
    INT32: _fixed(_i32),
    UINT32: _fixed(_u32),
    INT64: _fixed(_i64),
    FLOAT64: _fixed(_f64),
    BOOL: (_enc_bool, _dec_bool),
    UUID: (_enc_uuid, _dec_uuid),
}


def _codecs(t: TypeSpec, version: int, flexible: bool, nullable: bool, what: str) -> tuple[EncodeFn, DecodeFn]:
    """Encoder and decoder of one value of type ``t`` at ``version``."""
    if isinstance(t, _Primitive):
        fixed = _FIXED.get(t)
        if fixed is not None:
            return fixed
        if t is STRING:
            return _string_codecs(flexible, nullable, what)
        return _bytes_codecs(flexible, nullable, what, zero_copy=t is RECORDS)
    if isinstance(t, Array):
        return _array_codecs(t, version, flexible, nullable, what)
    plan = t._plan(version, flexible)
    if not nullable:
        return plan.encode, plan.decode
    enc_struct, dec_struct = plan.encode, plan.decode

    def enc(out: bytearray, v: Any) -> None:
        if v is None:
            out.append(0xFF)
        else:
            out.append(1)
            enc_struct(out, v)

    def dec(buf: memoryview, pos: int) -> tuple[Any, int]:
        if _i8.unpack_from(buf, pos)[0] < 0:
            return None, pos + 1
        return dec_struct(buf, pos + 1)

    return enc, dec


def _min_size(t: _Primitive | type[Struct], version: int, flexible: bool) -> int:
    if isinstance(t, _Primitive):
        return t.min_size
    return t._plan(version, flexible).min_size


def _fixed_array_codecs(fmt: str, size: int, flexible: bool, nullable: bool, what: str) -> tuple[EncodeFn, DecodeFn]:
    """Arrays of fixed-width numbers: one ``struct`` call for the whole array."""
    enc_len, dec_len = _length_codecs(flexible, wide=True)

    def enc(out: bytearray, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError(f"{what} is not nullable in this version")
            enc_len(out, -1)
            return
        n = len(v)
        enc_len(out, n)
        if n:
            out += struct.pack(f">{n}{fmt}", *v)

    def dec(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = dec_len(buf, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise DecodeError(f"{what}: invalid array length {n}")
        end = pos + n * size
        if end > len(buf):
            raise DecodeError(f"{what}: array of {n} elements runs past the end of the data")
        return list(struct.unpack_from(f">{n}{fmt}", buf, pos)) if n else [], end

    return enc, dec


def _array_codecs(t: Array, version: int, flexible: bool, nullable: bool, what: str) -> tuple[EncodeFn, DecodeFn]:
    element = t.element
    if isinstance(element, _Primitive) and element in _FIXED_FORMAT and element is not BOOL:
        return _fixed_array_codecs(_FIXED_FORMAT[element], element.min_size, flexible, nullable, what)
    enc_len, dec_len = _length_codecs(flexible, wide=True)
    enc_item, dec_item = _codecs(t.element, version, flexible, False, what + "[]")
    min_size = _min_size(t.element, version, flexible)

    def enc(out: bytearray, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError(f"{what} is not nullable in this version")
            enc_len(out, -1)
            return
        enc_len(out, len(v))
        for item in v:
            enc_item(out, item)

    def dec(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = dec_len(buf, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise DecodeError(f"{what}: invalid array length {n}")
        # every element takes at least min_size bytes: refuse counts the data cannot hold
        if n * max(min_size, 1) > len(buf) - pos and (min_size > 0 or n > 1 << 20):
            raise DecodeError(f"{what}: array of {n} elements runs past the end of the data")
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            item, pos = dec_item(buf, pos)
            append(item)
        return items, pos

    return enc, dec


# --------------------------------------------------------------------------------------------
# structs


class _Plan:
    """A struct's codec compiled for one (version, flexible) pair."""

    __slots__ = ("decode", "encode", "min_size")

    def __init__(self, encode: EncodeFn, decode: DecodeFn, min_size: int) -> None:
        self.encode = encode
        self.decode = decode
        self.min_size = min_size


class Struct:
    """Base of generated structs: slots for the fields plus ``unknown_tagged_fields``.

    ``unknown_tagged_fields`` holds ``(tag, raw bytes)`` pairs read from the wire for tags this
    version does not know; they are written back unchanged, so a message passes through intact.
    """

    __slots__ = ("unknown_tagged_fields",)

    _fields_: ClassVar[tuple[Field, ...]] = ()
    _plans_: ClassVar[dict[tuple[int, bool], _Plan]]

    unknown_tagged_fields: list[tuple[int, bytes]] | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._plans_ = {}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        values = _values_getter(type(self))
        if values(self) != values(other):
            return False
        return (self.unknown_tagged_fields or []) == (other.unknown_tagged_fields or [])

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = [f"{f.attr}={getattr(self, f.attr)!r}" for f in self._fields_]
        if self.unknown_tagged_fields:
            parts.append(f"unknown_tagged_fields={self.unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    @classmethod
    def builder(cls) -> Callable[..., Any]:
        """A function that builds an instance the way the class's constructor does (the same
        keyword arguments and defaults) without the cost of calling a class: for hot paths."""
        build = cls.__dict__.get("_builder_")
        if build is None:
            build = _compile_builder(cls)
            cls._builder_ = build  # type: ignore[attr-defined]
        return build

    @classmethod
    def _plan(cls, version: int, flexible: bool) -> _Plan:
        key = (version, flexible)
        plan = cls._plans_.get(key)
        if plan is None:
            plan = _compile(cls, version, flexible)
            cls._plans_[key] = plan
        return plan


_FIXED_FORMAT = {INT8: "b", INT16: "h", UINT16: "H", INT32: "i", UINT32: "I", INT64: "q", FLOAT64: "d", BOOL: "?"}

#: struct class -> a function returning the tuple of its field values (for ``__eq__``)
_VALUE_GETTERS: dict[type[Struct], Callable[[Any], tuple[Any, ...]]] = {}


def _values_getter(cls: type[Struct]) -> Callable[[Any], tuple[Any, ...]]:
    getter = _VALUE_GETTERS.get(cls)
    if getter is None:
        attrs = [f.attr for f in cls._fields_]
        if len(attrs) > 1:
            getter = operator.attrgetter(*attrs)
        elif attrs:
            single = operator.attrgetter(attrs[0])

            def getter(obj: Any) -> tuple[Any, ...]:
                return (single(obj),)
        else:

            def getter(obj: Any) -> tuple[Any, ...]:
                return ()

        _VALUE_GETTERS[cls] = getter
    return getter


#: default values that are immutable, so one object can stand for every instance's default
_IMMUTABLE_DEFAULTS = (int, float, bool, str, bytes, type(None), uuid.UUID)


def _default_expr(f: Field, ns: dict[str, Any], name: str) -> str:
    """Source of an expression giving ``f``'s default value in a compiled codec: a shared
    constant when the default is immutable, a fresh list or struct otherwise."""
    d = f.default
    if d is not _FRESH and type(d) in _IMMUTABLE_DEFAULTS:
        ns[name] = d
        return name
    if d is _FRESH and isinstance(f.type, Array):
        return "[]"
    if d is _FRESH and isinstance(f.type, type) and issubclass(f.type, Struct):
        ns[name] = f.type.builder()
        return f"{name}()"
    ns[name] = f
    return f"{name}.default_value()"


def _compile(cls: type[Struct], version: int, flexible: bool) -> _Plan:
    """Compile one (struct, version) into two specialised Python functions.

    Runs of consecutive fixed-width fields are read and written with a single ``struct`` call;
    strings, bytes, records and arrays of structs are written out in place (length prefix
    included); other fields call their codec.  An empty tagged-field section (nothing unknown,
    every known tagged field at its default: the common case) is checked for inline too.  The
    functions are generated source, built once per version on first use, so the per-message
    cost has no loops over field descriptors.
    """
    name = cls.__qualname__
    tagged: dict[int, tuple[Field, EncodeFn, DecodeFn]] = {}
    absent: list[Field] = []
    steps: list[tuple[str, Any]] = []  # ("run", [fields]) or ("field", (field, enc, dec))
    min_size = 0
    for f in cls._fields_:
        if not _in(version, f.versions):
            absent.append(f)
            continue
        what = f"{name}.{f.attr}"
        nullable = _in(version, f.nullable)
        if f.tag is not None and _in(version, f.tagged):
            if not flexible:
                absent.append(f)
                continue
            enc, dec = _codecs(f.type, version, True, nullable, what)
            tagged[f.tag] = (f, enc, dec)
            continue
        t = f.type
        if isinstance(t, _Primitive) and t in _FIXED_FORMAT:
            if steps and steps[-1][0] == "run":
                steps[-1][1].append(f)
            else:
                steps.append(("run", [f]))
            min_size += t.min_size
            continue
        fflex = flexible and f.flexible
        enc, dec = _codecs(t, version, fflex, nullable, what)
        steps.append(("field", (f, enc, dec, fflex, nullable, what)))
        min_size += t.min_size if isinstance(t, _Primitive) and t not in (STRING, BYTES, RECORDS) else 1
    if flexible:
        min_size += 1
    # fields this version cannot carry: a non-default value there is an error unless ignorable
    strict_absent = [(f.attr, f.default_value()) for f in absent if not f.ignorable]
    tagged_items = sorted(tagged.items())

    ns: dict[str, Any] = {
        "cls": cls,
        "new": cls.__new__,
        "strict_absent": strict_absent,
        "UnsupportedVersion": UnsupportedVersion,
        "encode_tagged": _encode_tagged,
        "decode_tagged": _decode_tagged,
        "tagged": tagged,
        "tagged_items": tagged_items,
    }
    enc_lines = ["def encode(out, obj):"]
    if strict_absent:
        checks = []
        for j, (attr, default) in enumerate(strict_absent):
            ns[f"strict_default{j}"] = default  # compared with, never handed out
            checks.append(f"obj.{attr} != strict_default{j}")
        enc_lines += [
            f"    if {' or '.join(checks)}:",
            "        for attr, default in strict_absent:",
            "            if getattr(obj, attr) != default:",
            f"                raise UnsupportedVersion(f'{name}.{{attr}} cannot be sent at version {version}')",
        ]
    dec_lines = ["def decode(buf, pos):", "    obj = new(cls)"]
    for i, (kind, item) in enumerate(steps):
        if kind == "run":
            fields: list[Field] = item
            st = struct.Struct(">" + "".join(_FIXED_FORMAT[f.type] for f in fields))  # type: ignore[index]
            ns[f"pack{i}"] = st.pack
            ns[f"unpack{i}"] = st.unpack_from
            attrs = ", ".join(f"obj.{f.attr}" for f in fields)
            enc_lines.append(f"    out += pack{i}({attrs})")
            target = attrs + ("," if len(fields) == 1 else "")
            dec_lines.append(f"    {target} = unpack{i}(buf, pos)")
            dec_lines.append(f"    pos += {st.size}")
        else:
            f, enc, dec, fflex, nullable, what = item
            ns[f"enc{i}"] = enc
            ns[f"dec{i}"] = dec
            inlined = _inline_field(f, i, version, fflex, nullable, what, ns)
            if inlined is None:
                enc_lines.append(f"    enc{i}(out, obj.{f.attr})")
                dec_lines.append(f"    obj.{f.attr}, pos = dec{i}(buf, pos)")
            else:
                enc_lines += inlined[0]
                dec_lines += inlined[1]
    for j, f in enumerate(absent):
        dec_lines.append(f"    obj.{f.attr} = {_default_expr(f, ns, f'absent{j}')}")
    if flexible:
        # the common case: no unknown tagged fields and every known one at its default, which
        # is an empty tagged-field section (one zero byte)
        conds = ["obj.unknown_tagged_fields"]
        for k, (_tag, (f, _e, _d)) in enumerate(tagged_items):
            ns[f"tagged_default{k}"] = default = f.default_value()  # compared with, never handed out
            t = f.type
            if (
                f.default is _FRESH
                and isinstance(t, type)
                and issubclass(t, Struct)
                and all(type(g.default) in _IMMUTABLE_DEFAULTS for g in t._fields_)
            ):
                # a struct of plain values: compared field by field here (a struct of another
                # type, or anything else, takes the exact comparison in encode_tagged)
                ns[f"tagged_type{k}"] = t
                checks = [f"type(t{k} := obj.{f.attr}) is not tagged_type{k}"]
                for g in t._fields_:
                    ns[f"tagged_default{k}_{g.attr}"] = getattr(default, g.attr)
                    checks.append(f"t{k}.{g.attr} != tagged_default{k}_{g.attr}")
                checks.append(f"t{k}.unknown_tagged_fields")
                conds.append("(" + " or ".join(checks) + ")")
            else:
                conds.append(f"obj.{f.attr} != tagged_default{k}")
        enc_lines.append(f"    if {' or '.join(conds)}:")
        enc_lines.append("        encode_tagged(out, obj, tagged_items)")
        enc_lines.append("    else:")
        enc_lines.append("        out.append(0)")
        dec_lines.append("    if buf[pos] == 0:")
        for k, (_tag, (f, _e, _d)) in enumerate(tagged_items):
            dec_lines.append(f"        obj.{f.attr} = {_default_expr(f, ns, f'tagged_field{k}')}")
        dec_lines.append("        obj.unknown_tagged_fields = None")
        dec_lines.append("        pos += 1")
        dec_lines.append("    else:")
        dec_lines.append("        pos = decode_tagged(buf, pos, obj, tagged)")
    else:
        dec_lines.append("    obj.unknown_tagged_fields = None")
    if len(enc_lines) == 1:
        enc_lines.append("    pass")
    dec_lines.append("    return obj, pos")
    exec(compile("\n".join(enc_lines) + "\n\n" + "\n".join(dec_lines), f"<codec {name} v{version}>", "exec"), ns)
    return _Plan(ns["encode"], ns["decode"], min_size)


def _compile_builder(cls: type[Struct]) -> Callable[..., Any]:
    """See :meth:`Struct.builder`: mirrors the generated ``__init__``."""
    ns: dict[str, Any] = {"new": cls.__new__, "cls": cls, "DEFAULT": DEFAULT}
    params, body = [], ["    obj = new(cls)"]
    for j, f in enumerate(cls._fields_):
        a = f.attr
        if f.default is _FRESH:
            params.append(f"{a}=DEFAULT")
            if isinstance(f.type, Array):
                body.append(f"    obj.{a} = [] if {a} is DEFAULT else {a}")
            else:
                ns[f"type{j}"] = f.type.builder()  # type: ignore[union-attr]
                body.append(f"    obj.{a} = type{j}() if {a} is DEFAULT else {a}")
        else:
            ns[f"default{j}"] = f.default
            params.append(f"{a}=default{j}")
            body.append(f"    obj.{a} = {a}")
    params.append("unknown_tagged_fields=None")
    body += ["    obj.unknown_tagged_fields = unknown_tagged_fields", "    return obj"]
    src = f"def build(*, {', '.join(params)}):\n" + "\n".join(body)
    exec(compile(src, f"<builder {cls.__qualname__}>", "exec"), ns)
    return ns["build"]


def _inline_len_enc(flexible: bool, wide: bool, n: str, indent: str) -> list[str]:
    """Source appending the length or count ``n`` (a name, >= 0) as a prefix."""
    if flexible:
        return [
            f"{indent}if {n} < 0x7F:",
            f"{indent}    out.append({n} + 1)",
            f"{indent}else:",
            f"{indent}    write_uvarint(out, {n} + 1)",
        ]
    return [f"{indent}out += {'pack_i32' if wide else 'pack_i16'}({n})"]


def _inline_len_dec(flexible: bool, wide: bool, indent: str, two_bytes: bool = False) -> list[str]:
    """Source reading a length or count prefix into ``n`` (-1 for null) and advancing ``pos``;
    ``two_bytes`` also inlines two-byte varints (bytes and records lengths often take two)."""
    if flexible:
        two = [
            f"{indent}elif buf[pos + 1] < 0x80:",
            f"{indent}    n = (n & 0x7F | buf[pos + 1] << 7) - 1",
            f"{indent}    pos += 2",
        ]
        return [
            f"{indent}n = buf[pos]",
            f"{indent}if n < 0x80:",
            f"{indent}    n -= 1",
            f"{indent}    pos += 1",
            *(two if two_bytes else []),
            f"{indent}else:",
            f"{indent}    n, pos = read_uvarint(buf, pos)",
            f"{indent}    n -= 1",
        ]
    if wide:
        return [f"{indent}n = unpack_i32(buf, pos)[0]", f"{indent}pos += 4"]
    return [f"{indent}n = unpack_i16(buf, pos)[0]", f"{indent}pos += 2"]


def _negative_length(i: int, attr: str, nullable: bool, kind: str) -> list[str]:
    """Decoder lines for a negative length ``n``: null (-1 only) where nullable, else an error."""
    invalid = f"raise DecodeError(f'{{what{i}}}: invalid {kind} length {{n}}')"
    if nullable:
        return ["    if n < 0:", "        if n != -1:", f"            {invalid}", f"        obj.{attr} = None"]
    return ["    if n < 0:", f"        {invalid}"]


def _sized_value(i: int, attr: str, runs_past: str, value: str) -> list[str]:
    """Decoder lines for the ``n`` bytes at ``pos`` (checked to be there) becoming ``value``."""
    return [
        "    else:",
        "        end = pos + n",
        "        if end > len(buf):",
        f"            raise DecodeError(f'{{what{i}}}: {runs_past} past the end of the data')",
        f"        obj.{attr} = {value}",
        "        pos = end",
    ]


def _inline_field(
    f: Field, i: int, version: int, flexible: bool, nullable: bool, what: str, ns: dict[str, Any]
) -> tuple[list[str], list[str]] | None:
    """Encoder and decoder source lines for a string, bytes, records or struct-array field,
    written out in the struct's codec instead of calling the field's codec (which they mirror,
    error messages included); ``None`` for the other kinds, which call their codec."""
    t = f.type
    a = f.attr
    ns.update(
        write_uvarint=write_uvarint,
        read_uvarint=read_uvarint,
        pack_i16=_i16.pack,
        pack_i32=_i32.pack,
        unpack_i16=_i16.unpack_from,
        unpack_i32=_i32.unpack_from,
        DecodeError=DecodeError,
        EncodeError=EncodeError,
    )
    ns[f"what{i}"] = what
    null_enc = ["        out.append(0)"] if flexible else [f"        out += {'pack_i16' if t is STRING else 'pack_i32'}(-1)"]
    if nullable:
        on_none = null_enc
    else:
        on_none = [f"        raise EncodeError(f'{{what{i}}} is not nullable in this version')"]
    if t is STRING:
        enc = [f"    v = obj.{a}", "    if v is None:", *on_none, "    else:"]
        enc += ["        data = v.encode('utf-8')", "        n = len(data)", "        if n > 0x7FFF:"]
        enc += [f"            raise EncodeError(f'{{what{i}}} is longer than 32767 bytes')"]
        enc += _inline_len_enc(flexible, False, "n", "        ")
        enc += ["        out += data"]
        dec = _inline_len_dec(flexible, False, "    ")
        dec += _negative_length(i, a, nullable, "string")
        dec += _sized_value(i, a, "string runs", "str(buf[pos:end], 'utf-8')")
        return enc, dec
    if t is BYTES or t is RECORDS:
        enc = [f"    v = obj.{a}", "    if v is None:", *on_none]
        # bytes and bytearrays here; memoryviews and file regions (records) through the codec
        enc += ["    elif type(v) is bytes or type(v) is bytearray:", "        n = len(v)"]
        enc += _inline_len_enc(flexible, True, "n", "        ")
        enc += ["        out += v", "    else:", f"        enc{i}(out, v)"]
        dec = _inline_len_dec(flexible, True, "    ", two_bytes=True)
        dec += _negative_length(i, a, nullable, "bytes")
        dec += _sized_value(i, a, "bytes run", "buf[pos:end]" if t is RECORDS else "bytes(buf[pos:end])")
        return enc, dec
    if isinstance(t, Array) and isinstance(t.element, type) and issubclass(t.element, Struct):
        plan = t.element._plan(version, flexible)
        ns[f"enc_item{i}"] = plan.encode
        ns[f"dec_item{i}"] = plan.decode
        min_size = plan.min_size
        enc = [f"    v = obj.{a}", "    if v is None:", *on_none, "    else:", "        n = len(v)"]
        enc += _inline_len_enc(flexible, True, "n", "        ")
        enc += ["        for item in v:", f"            enc_item{i}(out, item)"]
        dec = _inline_len_dec(flexible, True, "    ")
        dec += _negative_length(i, a, nullable, "array")
        dec += ["    else:"]
        # every element takes at least min_size bytes: refuse counts the data cannot hold
        if min_size > 0:
            dec += [f"        if n * {min_size} > len(buf) - pos:"]
        else:
            dec += [f"        if n > {1 << 20} and n > len(buf) - pos:"]
        dec += [f"            raise DecodeError(f'{{what{i}}}: array of {{n}} elements runs past the end of the data')"]
        dec += ["        items = []", "        for _ in range(n):"]
        dec += [f"            item, pos = dec_item{i}(buf, pos)", "            items.append(item)"]
        dec += [f"        obj.{a} = items"]
        return enc, dec
    return None


def _encode_tagged(out: bytearray, obj: Any, tagged_items: list[tuple[int, tuple[Field, EncodeFn, DecodeFn]]]) -> None:
    fields: list[tuple[int, bytes | bytearray]] = []
    for tag, (f, enc, _dec) in tagged_items:
        value = getattr(obj, f.attr)
        if value != f.default_value():
            body = bytearray()
            enc(body, value)
            fields.append((tag, body))
    unknown = obj.unknown_tagged_fields
    if unknown:
        fields.extend(unknown)
        fields.sort(key=lambda item: item[0])
    write_uvarint(out, len(fields))
    for tag, raw in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(raw))
        out += raw


def _decode_tagged(buf: memoryview, pos: int, obj: Any, tagged: dict[int, tuple[Field, EncodeFn, DecodeFn]]) -> int:
    count, pos = read_uvarint(buf, pos)
    unknown: list[tuple[int, bytes]] | None = None
    for f, _enc, _dec in tagged.values():
        setattr(obj, f.attr, f.default_value())
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise DecodeError(f"tagged field {tag} runs past the end of the data")
        known = tagged.get(tag)
        if known is None:
            if unknown is None:
                unknown = []
            unknown.append((tag, bytes(buf[pos:end])))
        else:
            value, used = known[2](buf[:end], pos)
            if used != end:
                raise DecodeError(f"tagged field {tag} has size {size} but its value took {used - pos} bytes")
            setattr(obj, known[0].attr, value)
        pos = end
    obj.unknown_tagged_fields = unknown
    return pos


# --------------------------------------------------------------------------------------------
# messages


class Data(Struct):
    """A versioned top-level struct (request, response, header or coordinator record)."""

    __slots__ = ()

    NAME: ClassVar[str] = ""
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_VERSIONS: ClassVar[Versions] = None
    #: version -> body encoder, filled on first use of a (valid) version
    _encoders_: ClassVar[dict[int, EncodeFn]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._encoders_ = {}

    @classmethod
    def encoder(cls, version: int) -> EncodeFn:
        """The body encoder of ``version`` (``encoder(v)(out, message)`` appends the body, with
        no error wrapping); raises UnsupportedVersion for a version outside the valid range."""
        enc = cls._encoders_.get(version)
        if enc is None:
            cls.check_version(version)
            enc = cls._encoders_[version] = cls._plan(version, cls.is_flexible(version)).encode
        return enc

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return _in(version, cls.FLEXIBLE_VERSIONS)

    @classmethod
    def check_version(cls, version: int) -> None:
        lo, hi = cls.VALID_VERSIONS
        if not lo <= version <= hi:
            raise UnsupportedVersion(f"{cls.NAME} has versions {lo}-{hi}, not {version}")

    def encode_into(self, out: bytearray, version: int) -> None:
        """Append this message's body encoded at ``version`` to ``out``."""
        cls = type(self)
        enc = cls._encoders_.get(version)
        if enc is None:
            enc = cls.encoder(version)
        try:
            enc(out, self)
        except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"cannot encode {cls.NAME} v{version}: {exc}") from exc

    def encode(self, version: int) -> bytes:
        """This message's body encoded at ``version``."""
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    @classmethod
    def decode_from(cls, data: Buffer, pos: int, version: int) -> tuple[Any, int]:
        """Decode a body at ``version`` starting at ``pos``; returns ``(message, end position)``."""
        cls.check_version(version)
        buf = data if isinstance(data, memoryview) else memoryview(data)
        try:
            return cls._plan(version, cls.is_flexible(version)).decode(buf, pos)
        except DecodeError:
            raise
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
            raise DecodeError(f"cannot decode {cls.NAME} v{version}: {exc}") from exc

    @classmethod
    def decode(cls, data: Buffer, version: int) -> Any:
        """Decode a whole body at ``version``; ``records`` fields become views of ``data``."""
        return cls.decode_from(data, 0, version)[0]


class Message(Data):
    """A request or response body."""

    __slots__ = ()

    API_KEY: ClassVar[int] = -1
    TYPE: ClassVar[str] = ""


def field_names(cls: type[Struct]) -> Sequence[str]:
    """Attribute names of a struct's fields, in wire order."""
    return [f.attr for f in cls._fields_]
