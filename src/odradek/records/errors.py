"""Typed errors raised by :mod:`odradek.records`.

Every failure caused by the *bytes* handed to a reader (truncation, impossible
sizes, bad varints, checksum mismatches, broken or oversized compressed data)
raises a subclass of :class:`RecordsError`; nothing else escapes the decoders.
Programming mistakes made by a caller of a builder (a ``str`` where ``bytes`` is
expected, an offset out of range) raise the usual ``TypeError`` / ``ValueError``.

Each class carries ``error_code``, the Kafka error code a broker answers with when
it rejects a produce request for that reason (a hint for the layers above).

Hierarchy::

    RecordsError
    ├── CorruptRecordError            sizes, varints, structure     (CORRUPT_MESSAGE, 2)
    │   ├── TruncatedBatchError       data ends inside an entry     (CORRUPT_MESSAGE, 2)
    │   ├── CrcMismatchError          stored CRC != computed CRC    (CORRUPT_MESSAGE, 2)
    │   └── DecompressionError        codec rejected the payload    (CORRUPT_MESSAGE, 2)
    ├── UnsupportedMagicError         magic byte not 0, 1 or 2      (UNSUPPORTED_VERSION, 35)
    ├── UnsupportedCodecError         codec id unknown for the magic (UNSUPPORTED_COMPRESSION_TYPE, 76)
    └── DecompressionLimitExceeded    output would pass the limit   (MESSAGE_TOO_LARGE, 10)
"""

from __future__ import annotations

from odradek.errors import OdradekError

__all__ = [
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionError",
    "DecompressionLimitExceeded",
    "RecordsError",
    "TruncatedBatchError",
    "UnsupportedCodecError",
    "UnsupportedMagicError",
]


class RecordsError(OdradekError):
    """Base class of every error raised while reading or writing record data."""

    error_code: int = 2


class CorruptRecordError(RecordsError):
    """The bytes do not form a valid message set or record batch."""

    error_code = 2


class TruncatedBatchError(CorruptRecordError):
    """The data ends inside a batch, message or record.

    Readers of fetch data stop silently before an incomplete *trailing* entry (a
    broker cuts fetch responses at a byte limit); this error is raised where a
    reader was asked to be strict, and for truncation inside a batch.
    """


class CrcMismatchError(CorruptRecordError):
    """The checksum stored in a batch or message does not match its contents."""

    def __init__(self, message: str, *, stored: int, computed: int) -> None:
        super().__init__(message)
        self.stored = stored
        self.computed = computed


class DecompressionError(CorruptRecordError):
    """A compressed payload could not be decoded (bad or truncated stream)."""


class UnsupportedMagicError(RecordsError):
    """The magic byte names a format this package does not know (only 0, 1, 2)."""

    error_code = 35


class UnsupportedCodecError(RecordsError):
    """The compression codec id is unknown, or not allowed with this magic."""

    error_code = 76


class DecompressionLimitExceeded(RecordsError):
    """Decompressing would produce more bytes than the configured limit."""

    error_code = 10

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit
