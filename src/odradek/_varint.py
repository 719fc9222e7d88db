"""Varints: Odradek's one implementation of the base-128 varint loop.

Seven payload bits per byte, least significant group first, the top bit of each byte set while
more bytes follow.  The wire protocol's compact lengths, array counts and tagged fields are
unsigned varints of at most 32 bits (:func:`decode_uvarint`, :func:`write_uvarint`); the zig-zag
varints and varlongs inside v2 record batches (:mod:`odradek.records._varint`) and the snappy
block preamble are built on the same loop (:func:`read_unsigned`, :func:`append_unsigned`).

This module sits in the lowest layer so that ``protocol`` and ``records`` both use it without
importing each other's packages.  Truncated input raises ``IndexError``; a varint longer than its
type allows raises :class:`VarintError`; each caller turns those into its layer's error.
"""

from __future__ import annotations

from odradek.errors import OdradekError

__all__ = ["VarintError", "append_unsigned", "decode_uvarint", "read_unsigned", "write_uvarint"]

Buffer = bytes | bytearray | memoryview


class VarintError(OdradekError, ValueError):
    """Bytes that are not a varint of the expected width (too many bytes, too many bits)."""


def append_unsigned(out: bytearray, u: int) -> None:
    """Append the non-negative ``u`` (of any size) as a varint."""
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def write_uvarint(out: bytearray, value: int) -> None:
    """Append the unsigned varint of ``value`` (``0 <= value < 2**32``): the wire protocol's."""
    if 0 <= value < 0x80:
        out.append(value)
        return
    if value < 0 or value >> 32:
        raise ValueError(f"unsigned varint out of uint32 range: {value}")
    append_unsigned(out, value)


def read_unsigned(buf: Buffer, pos: int, max_shift: int) -> tuple[int, int]:
    """The varint at ``buf[pos]`` as read, and the position after it: at most
    ``max_shift // 7 + 1`` bytes (28: 5 bytes, 63: 10 bytes).  The last byte's bits beyond the
    caller's width are left in the result for the caller to drop or refuse."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        if b < 0x80:
            return result | b << shift, pos
        result |= (b & 0x7F) << shift
        shift += 7
        if shift > max_shift:
            raise VarintError(f"varint is longer than {max_shift // 7 + 1} bytes")


def decode_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint (at most 5 bytes, 32 bits) at ``buf[pos]`` and the position after it."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result, pos = read_unsigned(buf, pos, 28)
    if result >> 32:
        raise VarintError("unsigned varint exceeds 32 bits")
    return result, pos
