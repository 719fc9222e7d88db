"""Checksums: CRC-32 (IEEE) for message sets v0/v1, CRC-32C (Castagnoli) for v2.

Both are computed in C: ``zlib.crc32`` and the ``crc32c`` package, which uses the
SSE4.2 / ARMv8 CRC instructions when the CPU has them. Results are unsigned 32-bit.
"""

from __future__ import annotations

import zlib

from crc32c import crc32c as _crc32c

__all__ = ["crc32", "crc32c"]


#: CRC-32C of ``data`` as an unsigned 32-bit integer, continuing from ``value``: the package's
#: function itself (it returns an int), no Python call around it (one or two per produced batch)
crc32c = _crc32c


def crc32(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (the zlib / IEEE 802.3 polynomial) of ``data``, unsigned 32-bit."""
    return zlib.crc32(data) & 0xFFFFFFFF
