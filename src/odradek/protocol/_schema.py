"""The base classes and field descriptors of the generated message classes.

The generated modules in :mod:`odradek.protocol.messages` declare one class per message (with
nested classes for its structs) and, for each struct, a tuple of :class:`Field` descriptors
(name, type, versions, nullable versions, tag, default): facts about the schema, for
introspection.  Encoding and decoding is done by generated code too: the codec module of each
message module (``odradek.protocol.messages._codecs.<module>``) holds an encoder and a decoder
per struct and version, as straight-line Python; ``_builders.<module>`` a builder per struct.
Each is imported on the first encode or decode (or ``builder()``) of one of its classes, and
installs the functions on them (``_encoders_`` / ``_decoders_`` by version, ``_builder_``).

``records`` fields decode to a :class:`memoryview` of the input, never copied.
"""

from __future__ import annotations

import importlib
import operator
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, Self, TypeAlias

from odradek.errors import ErrorCode
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
# Any for the message: each struct class's functions take or make that class, which the type of a
# table shared by all classes cannot say (its methods below put the class back: Self)
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
        """A fresh default value (a new list or struct where the default is mutable); Any: its
        type is the field's, which varies."""
        d = self.default
        if d is _FRESH:
            if isinstance(self.type, Array):
                return []
            assert isinstance(self.type, type)  # a primitive's default is its own, never _FRESH
            return self.type()
        return d


class _Fresh:
    """Marks a default that must be built anew for every instance (empty list, default struct)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FRESH"


_FRESH: Any = _Fresh()
#: Parameter default of generated ``__init__`` methods: "use the field's default". Any, as the
#: default of parameters of every type.
DEFAULT: Any = _FRESH

#: what generated decoders raise on bad bytes (besides DecodeError; a bad varint is a
#: ValueError), made DecodeErrors by callers
DECODE_ERRORS = (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError, MemoryError)
#: what generated encoders raise on values they cannot encode, made EncodeErrors by callers
ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)

# --------------------------------------------------------------------------------------------
# structs


class Struct:
    """Base of generated structs: slots for the fields plus ``unknown_tagged_fields``.

    ``unknown_tagged_fields`` holds ``(tag, raw bytes)`` pairs read from the wire for tags this
    version does not know; they are written back unchanged, so a message passes through intact.
    """

    __slots__ = ("unknown_tagged_fields",)

    _fields_: ClassVar[tuple[Field, ...]] = ()
    #: see :meth:`builder`; installed by the class's codec module (Any: a ClassVar cannot say Self)
    _builder_: ClassVar[Callable[..., Any]]

    unknown_tagged_fields: list[tuple[int, bytes]] | None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        values = _values_getter(type(self))
        if values(self) != values(other):
            return False
        return (self.unknown_tagged_fields or []) == (other.unknown_tagged_fields or [])

    # mutable and compared by value, so unhashable (typeshed declares object.__hash__ a method,
    # hence the ignore: the usual spelling of this)
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = [f"{f.attr}={getattr(self, f.attr)!r}" for f in self._fields_]
        if self.unknown_tagged_fields:
            parts.append(f"unknown_tagged_fields={self.unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    @classmethod
    def builder(cls) -> Callable[..., Self]:
        """A function that builds an instance the way the class's constructor does (the same
        keyword arguments and defaults) without the cost of calling a class: for hot paths."""
        build: Callable[..., Any] | None = cls.__dict__.get("_builder_")
        if build is None:
            _load_codecs(cls, "_builders")
            build = cls.__dict__["_builder_"]
        return build


def _load_codecs(cls: type[Struct], kind: str = "_codecs") -> None:
    """Import the codec module (or the builders module) of ``cls``'s message module, which
    installs its functions on the classes."""
    package, _, module = cls.__module__.rpartition(".")
    importlib.import_module(f"{package}.{kind}.{module}")


#: struct class -> a function returning the tuple of its field values (for ``__eq__``)
_VALUE_GETTERS: dict[type[Struct], Callable[[Struct], tuple[object, ...]]] = {}


def _values_getter(cls: type[Struct]) -> Callable[[Struct], tuple[object, ...]]:
    getter = _VALUE_GETTERS.get(cls)
    if getter is None:
        attrs = [f.attr for f in cls._fields_]
        if len(attrs) > 1:
            getter = operator.attrgetter(*attrs)
        elif attrs:
            single = operator.attrgetter(attrs[0])

            def getter(obj: Struct) -> tuple[object, ...]:
                return (single(obj),)
        else:

            def getter(obj: Struct) -> tuple[object, ...]:
                return ()

        _VALUE_GETTERS[cls] = getter
    return getter


# messages


class Data(Struct):
    """A versioned top-level struct (request, response, header or coordinator record)."""

    __slots__ = ()

    NAME: ClassVar[str] = ""
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_VERSIONS: ClassVar[Versions] = None
    #: version -> body encoder and decoder: empty until the codec module is loaded
    _encoders_: ClassVar[dict[int, EncodeFn]]
    _decoders_: ClassVar[dict[int, DecodeFn]]

    def __init_subclass__(cls, **kwargs: Any) -> None:  # Any: passed on to object's
        super().__init_subclass__(**kwargs)
        cls._encoders_ = {}
        cls._decoders_ = {}

    @classmethod
    def encoder(cls, version: int) -> EncodeFn:
        """The body encoder of ``version`` (``encoder(v)(out, message)`` appends the body, with
        no error wrapping); raises EncodeError for a version outside the valid range."""
        enc = cls._encoders_.get(version)
        if enc is None:
            lo, hi = cls.VALID_VERSIONS
            if not lo <= version <= hi:
                raise EncodeError(f"{cls.NAME} has versions {lo}-{hi}, not {version}", ErrorCode.UNSUPPORTED_VERSION)
            if not cls._encoders_:
                _load_codecs(cls)
            enc = cls._encoders_[version]
        return enc

    @classmethod
    def decoder(cls, version: int) -> DecodeFn:
        """The body decoder of ``version`` (``decoder(v)(buf, pos)`` returns ``(message, end)``,
        with no error wrapping: ``buf`` must be a memoryview); raises UnsupportedVersion for a
        version outside the valid range."""
        dec = cls._decoders_.get(version)
        if dec is None:
            cls.check_version(version)
            if not cls._decoders_:
                _load_codecs(cls)
            dec = cls._decoders_[version]
        return dec

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
        except ENCODE_ERRORS as exc:
            raise EncodeError(f"cannot encode {cls.NAME} v{version}: {exc}") from exc

    def encode(self, version: int) -> bytes:
        """This message's body encoded at ``version``."""
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    @classmethod
    def decode_from(cls, data: Buffer, pos: int, version: int) -> tuple[Self, int]:
        """Decode a body at ``version`` starting at ``pos``; returns ``(message, end position)``."""
        decode = cls.decoder(version)
        buf = data if isinstance(data, memoryview) else memoryview(data)
        try:
            return decode(buf, pos)
        except DecodeError:
            raise
        except DECODE_ERRORS as exc:
            raise DecodeError(f"cannot decode {cls.NAME} v{version}: {exc}") from exc

    @classmethod
    def decode(cls, data: Buffer, version: int) -> Self:
        """Decode a whole body at ``version``; ``records`` fields become views of ``data``."""
        return cls.decode_from(data, 0, version)[0]


class Message(Data):
    """A request or response body."""

    __slots__ = ()

    API_KEY: ClassVar[int] = -1
    TYPE: ClassVar[str] = ""
    #: a request's error answer (see odradek.protocol.error_responses); installed by the codec
    #: module (Any: the request, of the class it is installed on, as for EncodeFn)
    _error_response_: ClassVar[Callable[[Any, int, int, str | None], Message | None]]


def field_names(cls: type[Struct]) -> Sequence[str]:
    """Attribute names of a struct's fields, in wire order."""
    return [f.attr for f in cls._fields_]
