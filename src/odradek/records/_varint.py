"""Zig-zag varints as used inside v2 record batches.

Kafka writes signed integers as protobuf-style varints after a zig-zag mapping
(0, -1, 1, -2, ... become 0, 1, 2, 3, ...): seven payload bits per byte, least
significant group first, the top bit of each byte set while more bytes follow.
A ``varint`` carries an int32 and takes at most 5 bytes; a ``varlong`` carries an
int64 and takes at most 10 bytes. As in Kafka's own reader, bits beyond the width
of the type in the final byte are dropped; a longer sequence is corrupt.

The hot paths avoid per-byte loops with precomputed tables:

* :data:`ZIGZAG1` maps a single byte to its decoded value (``None`` when the byte
  has its continuation bit set, i.e. it is not a complete 1-byte varint);
* :data:`ZIGZAG2` maps the big-endian 16-bit word of two bytes to the decoded
  value of a 2-byte varint (``None`` when the two bytes are not exactly one
  2-byte varint);
* :data:`ENCODED_NONNEG` and :data:`ENCODED_SIGNED` hold the encoded bytes of
  every value that fits in one or two bytes.

The varint loop itself is :mod:`odradek._varint`'s (Odradek's one implementation, shared with
the wire protocol's unsigned varints); this module adds the zig-zag mapping, the tables and the
records layer's errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek._varint import VarintError, append_unsigned, read_unsigned

from .errors import CorruptRecordError, TruncatedBatchError

__all__ = [
    "ENCODED_NONNEG",
    "ENCODED_SIGNED",
    "SIGNED_BIAS",
    "ZIGZAG1",
    "ZIGZAG2",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "size_of_varint",
]

# Decoded value of every 14-bit zig-zag payload (the largest a 2-byte varint holds).
_UNZIG14: list[int] = [(u >> 1) ^ -(u & 1) for u in range(1 << 14)]

ZIGZAG1: tuple[int | None, ...] = tuple(_UNZIG14[:128] + [None] * 128)


def _build_zigzag2() -> tuple[int | None, ...]:
    table: list[int | None] = [None] * 0x8000  # first byte < 0x80: not a 2-byte varint
    tail: list[int | None] = [None] * 128  # second byte >= 0x80: longer than 2 bytes
    for low in range(128):
        table.extend(_UNZIG14[low::128])  # word (0x80|low)<<8 | high -> low | high<<7
        table.extend(tail)
    return tuple(table)


ZIGZAG2: tuple[int | None, ...] = _build_zigzag2()


def _encode_unsigned(u: int) -> bytes:
    out = bytearray()
    append_unsigned(out, u)
    return bytes(out)


# The encoding of every 14-bit payload: one byte below 128, else the low seven bits with the
# continuation bit and then the high seven (built directly: this table is part of every start-up)
_ENCODED_ZZ: list[bytes] = [bytes((u,)) for u in range(128)] + [
    bytes((0x80 | low, high)) for high in range(1, 128) for low in range(128)
]

#: ``ENCODED_NONNEG[v]`` is the zig-zag varint of ``v`` for ``0 <= v < 8192``.
ENCODED_NONNEG: Sequence[bytes] = _ENCODED_ZZ[0::2]
#: ``ENCODED_SIGNED[v + SIGNED_BIAS]`` is the zig-zag varint of ``v`` for ``-8192 <= v < 8192``.
SIGNED_BIAS = 8192
ENCODED_SIGNED: Sequence[bytes] = _ENCODED_ZZ[-1::-2] + _ENCODED_ZZ[0::2]

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def encode_varint(value: int) -> bytes:
    """Return the zig-zag varint encoding of the int32 ``value``."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    if -8192 <= value < 8192:
        return ENCODED_SIGNED[value + SIGNED_BIAS]
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Return the zig-zag varint encoding of the int64 ``value``."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    if -8192 <= value < 8192:
        return ENCODED_SIGNED[value + SIGNED_BIAS]
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def size_of_varint(value: int) -> int:
    """Number of bytes of the zig-zag varint (or varlong) encoding of ``value``."""
    u = (value << 1) ^ (value >> 63) if value < 0 else value << 1
    return max(1, (u.bit_length() + 6) // 7)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an int32 varint at ``buf[pos]``; return ``(value, next_pos)``."""
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        result, pos = read_unsigned(buf, pos, 28)
    except IndexError:
        raise TruncatedBatchError("data ends inside a varint") from None
    except VarintError:
        raise CorruptRecordError("varint is longer than 5 bytes") from None
    result &= 0xFFFFFFFF
    return (result >> 1) ^ -(result & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an int64 varlong at ``buf[pos]``; return ``(value, next_pos)``."""
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        result, pos = read_unsigned(buf, pos, 63)
    except IndexError:
        raise TruncatedBatchError("data ends inside a varlong") from None
    except VarintError:
        raise CorruptRecordError("varlong is longer than 10 bytes") from None
    result &= 0xFFFFFFFFFFFFFFFF
    return (result >> 1) ^ -(result & 1), pos
