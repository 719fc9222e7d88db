"""Confluent's framing of a serialized key or value, read and written in one place.

A framed payload is a magic byte 0, the writer schema's id as 4 big-endian bytes, then the
payload; a Protobuf payload starts with its message-index array (the path of the message in its
``.proto`` file: a zigzag-varint count, then each index; the file's first message, ``[0]``, is the
single byte 0).  The serializers (:mod:`odradek.client.serde`), the broker's schema validation
(:mod:`odradek.schemas.validation`) and the Spark source's typed columns read frames with this
module; each turns a :class:`FramingError` into its own report (a SerializationError, a record
error of the produce answer, a corrupt-record row).
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.errors import OdradekError

__all__ = [
    "HEADER_BYTES",
    "MAGIC_BYTE",
    "MAX_MESSAGE_INDEXES",
    "FramingError",
    "decode_message_indexes",
    "encode_message_indexes",
    "frame_header",
    "read_header",
    "schema_id",
]

MAGIC_BYTE = 0
#: the magic byte and the schema id
HEADER_BYTES = 5
#: the longest message-index array read from a frame (a nesting deeper than any real .proto)
MAX_MESSAGE_INDEXES = 100

_Bytes = bytes | bytearray | memoryview


class FramingError(OdradekError, ValueError):
    """Bytes that are not a Confluent frame: too short, another magic byte, a schema id out of
    range, a message-index array that is truncated, too long or negative."""


def frame_header(schema_id: int) -> bytes:
    """The 5 bytes before a payload written with schema ``schema_id``."""
    if not 0 <= schema_id < 2**31:
        raise FramingError(f"schema id {schema_id} does not fit the wire format")
    return bytes((MAGIC_BYTE,)) + schema_id.to_bytes(4, "big")


def schema_id(data: _Bytes) -> int | None:
    """The schema id of framed bytes; None when they are not framed (no exception: for loops over
    every record of a batch)."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC_BYTE:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def read_header(data: _Bytes) -> int:
    """The schema id of framed bytes; FramingError saying why when they are not framed."""
    if len(data) < HEADER_BYTES:
        raise FramingError(
            f"{len(data)} bytes are too short for Confluent's framing (a magic byte and a 4-byte schema id)")
    if data[0] != MAGIC_BYTE:
        raise FramingError(f"unknown magic byte {data[0]} (expected {MAGIC_BYTE}): the bytes are not framed "
                           "with a schema registry id")
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def _zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """Protobuf's message-index array as Confluent writes it: the count then each index, zigzag
    varints; the first message of the file (``[0]``) is the single byte 0."""
    if list(indexes) == [0]:
        return b"\x00"
    return _zigzag(len(indexes)) + b"".join(_zigzag(i) for i in indexes)


def _read_zigzag(data: _Bytes, pos: int) -> tuple[int, int]:
    shift = 0
    n = 0
    while True:
        if pos >= len(data):
            raise FramingError("the Protobuf message-index array is truncated")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise FramingError("a varint of the Protobuf message-index array is longer than 10 bytes")
    return (n >> 1) ^ -(n & 1), pos


def decode_message_indexes(data: _Bytes, pos: int = HEADER_BYTES) -> tuple[list[int], int]:
    """The message-index array at ``pos`` and the position after it."""
    count, pos = _read_zigzag(data, pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > MAX_MESSAGE_INDEXES:
        raise FramingError(f"the Protobuf message-index array claims {count} indexes")
    out = []
    for _ in range(count):
        i, pos = _read_zigzag(data, pos)
        if i < 0:
            raise FramingError(f"negative Protobuf message index {i}")
        out.append(i)
    return out, pos
