"""XXH32 in pure Python, for the few bytes of an LZ4 frame header.

The LZ4 frame format protects its frame descriptor with one byte, the second
least significant byte of XXH32(descriptor, seed=0). Only a handful of bytes are
ever hashed here, so a plain implementation is fast enough and avoids a
dependency.
"""

from __future__ import annotations

__all__ = ["xxh32"]

_P1 = 0x9E3779B1
_P2 = 0x85EBCA77
_P3 = 0xC2B2AE3D
_P4 = 0x27D4EB2F
_P5 = 0x165667B1
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M
    return (_rotl(acc, 13) * _P1) & _M


def xxh32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """Return the 32-bit XXH32 digest of ``data``."""
    data = bytes(data)
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        limit = n - 16
        while pos <= limit:
            v1 = _round(v1, int.from_bytes(data[pos : pos + 4], "little"))
            v2 = _round(v2, int.from_bytes(data[pos + 4 : pos + 8], "little"))
            v3 = _round(v3, int.from_bytes(data[pos + 8 : pos + 12], "little"))
            v4 = _round(v4, int.from_bytes(data[pos + 12 : pos + 16], "little"))
            pos += 16
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        acc = (seed + _P5) & _M
    acc = (acc + n) & _M
    while pos + 4 <= n:
        lane = int.from_bytes(data[pos : pos + 4], "little")
        acc = (acc + lane * _P3) & _M
        acc = (_rotl(acc, 17) * _P4) & _M
        pos += 4
    while pos < n:
        acc = (acc + data[pos] * _P5) & _M
        acc = (_rotl(acc, 11) * _P1) & _M
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M
    acc ^= acc >> 13
    acc = (acc * _P3) & _M
    acc ^= acc >> 16
    return acc
