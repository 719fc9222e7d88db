"""What the generated codec modules (``odradek.protocol.messages._codecs``) call.

The codecs themselves are emitted by ``tools/codegen`` as plain functions, one encoder and one
decoder per struct and version; this module holds the few helpers they share: length and
varint primitives (varints from :mod:`odradek._varint`, Odradek's one implementation),
UUIDs, the writers of ``bytes``/``records`` values that are not ``bytes`` (views, file regions),
and the tagged-field section when it is not empty.
"""

from __future__ import annotations

import struct
import uuid
from struct import Struct
from typing import TYPE_CHECKING, TypeVar

from odradek._varint import decode_uvarint as read_uvarint
from odradek._varint import write_uvarint
from odradek.errors import ErrorCode
from odradek.protocol._schema import DEFAULT, ZERO_UUID, Holes, Records, Region
from odradek.protocol.errors import DecodeError, EncodeError

__all__ = [
    "BYTES_TYPES",
    "DEFAULT",
    "MAX_ARRAY_LENGTH",
    "MAX_TAGGED_FIELD_COUNT",
    "MINUS_ONE_I16",
    "MINUS_ONE_I32",
    "UNSUPPORTED_VERSION",
    "ZERO_UUID",
    "DecodeError",
    "EncodeError",
    "Records",
    "Struct",
    "array_refused",
    "new",
    "pack_i16",
    "pack_i32",
    "put_bytes",
    "put_compact_bytes",
    "put_compact_records",
    "put_records",
    "read_unknown_tagged",
    "read_uuid",
    "read_uvarint",
    "spack",
    "sunpack",
    "tagged_count_refused",
    "unpack_i16",
    "unpack_i32",
    "write_tagged",
    "write_uvarint",
]

_T = TypeVar("_T")

if TYPE_CHECKING:

    def new(cls: type[_T]) -> _T:
        """An instance of ``cls`` with no attribute set (``__init__`` not called)."""
        ...

else:
    new = object.__new__

_i16 = Struct(">h")
_i32 = Struct(">i")
pack_i16 = _i16.pack
pack_i32 = _i32.pack
unpack_i16 = _i16.unpack_from
unpack_i32 = _i32.unpack_from
spack = struct.pack
sunpack = struct.unpack_from
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
#: the values of a ``bytes`` field written as they are (others by put_bytes)
BYTES_TYPES = (bytes, bytearray)
#: a null length or count (-1) in non-flexible versions
MINUS_ONE_I16 = b"\xff\xff"
MINUS_ONE_I32 = b"\xff\xff\xff\xff"

#: Kafka 4.4's decoding limits (MessageUtil.MAX_ARRAY_LENGTH, MAX_TAGGED_FIELD_COUNT): a message
#: declaring more array elements or tagged fields is refused, as is one declaring more than the
#: bytes left could hold
MAX_ARRAY_LENGTH = 1_000_000
MAX_TAGGED_FIELD_COUNT = 10_000


def array_refused(what: str, count: int, remaining: int) -> DecodeError:
    """The error for an array count a message cannot have (Kafka's messages)."""
    if count > remaining:
        return DecodeError(f"{what}: Tried to allocate a collection of size {count}, but there are only {remaining} bytes remaining.")
    if count > MAX_ARRAY_LENGTH:
        return DecodeError(
            f"{what}: Tried to read a collection of size {count}, which exceeds the maximum allowed size of "
            f"{MAX_ARRAY_LENGTH}."
        )
    return DecodeError(f"{what}: array of {count} elements runs past the end of the data")


def tagged_count_refused(count: int, remaining: int) -> DecodeError:
    """The error for a tagged-field count a struct cannot have (Kafka's messages)."""
    if count > remaining:
        return DecodeError(f"Tried to read {count} tagged fields, but there are only {remaining} bytes remaining.")
    return DecodeError(
        f"Tried to read {count} tagged fields, which exceeds the maximum allowed count of {MAX_TAGGED_FIELD_COUNT}."
    )


#: recently decoded UUIDs by their bytes (topic ids repeat in every request that names a topic)
_UUIDS: dict[bytes, uuid.UUID] = {}


def read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
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


def _compact_len(out: bytearray, n: int) -> None:
    if n < 0x7F:
        out.append(n + 1)
    else:
        write_uvarint(out, n + 1)


def put_bytes(out: bytearray, v: bytes | bytearray | memoryview) -> None:
    """A ``bytes`` value that is not ``bytes`` or ``bytearray`` (a view), int32 length first."""
    n = memoryview(v).nbytes
    out += _i32.pack(n)
    out += v


def put_compact_bytes(out: bytearray, v: bytes | bytearray | memoryview) -> None:
    n = memoryview(v).nbytes
    _compact_len(out, n)
    out += v


def put_records(out: bytearray, v: Records) -> None:
    """A ``records`` value that is a view, or a file region (anything with ``length`` and
    ``to_bytes()``): left as a hole when ``out`` is :class:`Holes`, copied otherwise."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        out += _i32.pack(memoryview(v).nbytes)
        out += v
        return
    out += _i32.pack(v.length)
    _region(out, v)


def put_compact_records(out: bytearray, v: Records) -> None:
    if isinstance(v, (bytes, bytearray, memoryview)):
        _compact_len(out, memoryview(v).nbytes)
        out += v
        return
    _compact_len(out, v.length)
    _region(out, v)


def _region(out: bytearray, v: Region) -> None:
    if isinstance(out, Holes):
        out.add_hole(len(out), v)
    else:
        out += v.to_bytes()


def write_tagged(
    out: bytearray, fields: list[tuple[int, bytes | bytearray]], unknown: list[tuple[int, bytes]] | None
) -> None:
    """A tagged-field section: the known fields (in tag order) and the unknown ones kept from
    decoding, merged in increasing tag order."""
    if unknown:
        fields = [*fields, *unknown]
        fields.sort(key=lambda item: item[0])
    if not fields:
        out.append(0)
        return
    write_uvarint(out, len(fields))
    for tag, raw in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(raw))
        out += raw


def read_unknown_tagged(buf: memoryview, pos: int) -> tuple[list[tuple[int, bytes]] | None, int]:
    """A tagged-field section of a struct that knows no tags at this version: every field is kept
    as ``(tag, raw bytes)``."""
    count, pos = read_uvarint(buf, pos)
    if count > MAX_TAGGED_FIELD_COUNT or count > len(buf) - pos:
        raise tagged_count_refused(count, len(buf) - pos)
    unknown: list[tuple[int, bytes]] | None = None
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise DecodeError(f"tagged field {tag} runs past the end of the data")
        if unknown is None:
            unknown = []
        unknown.append((tag, bytes(buf[pos:end])))
        pos = end
    return unknown, pos
