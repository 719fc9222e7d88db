"""Exceptions of the storage layer (each carries the Kafka error code it maps to)."""

from __future__ import annotations

from pathlib import Path

from odradek.errors import ErrorCode, KafkaError, OdradekError

__all__ = [
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptSegmentError",
    "DecompressionBudgetExceeded",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "LogClosedError",
    "LogDirLockedError",
    "OffsetOutOfRangeError",
    "ProducerStateError",
    "RecordBatchTooLargeError",
    "StorageError",
    "UnknownFormatError",
]


class StorageError(KafkaError):
    """Base of the storage layer's errors."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.KAFKA_STORAGE_ERROR) -> None:
        super().__init__(code, message)


class UnknownFormatError(StorageError):
    """A file in a log dir in a format version this Odradek does not read (written by a newer
    version, or by another program): refused, never guessed at.  Loading stops with a message
    naming the file, the version found and the versions this Odradek reads; the file is left as
    it is (no truncation, no deletion)."""

    def __init__(
        self, path: Path, what: str, found: object, known: str, where: str = "",
        remedy: str = "restore the file from a backup",
    ) -> None:
        super().__init__(
            f"{path}{where}: {what} version {found} is not one this Odradek reads (it reads {known}): it was "
            f"written by a newer Odradek or by another program. The file is left as it is; run the version "
            f"that wrote it, or {remedy}"
        )
        self.path = path
        self.found = found


class OffsetOutOfRangeError(StorageError):
    """A read outside ``[log start offset, log end offset]``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.OFFSET_OUT_OF_RANGE)


class CorruptRecordError(StorageError):
    """Appended data that fails validation (sizes, CRC, magic)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.CORRUPT_MESSAGE)


class CorruptSegmentError(CorruptRecordError):
    """Data on disk that cannot be what was written: an impossible entry header (length, magic,
    offsets) in a segment file, found by a read.  Answered as CORRUPT_MESSAGE for the partition;
    the log dir stays online (the rest of the log and the other partitions are readable).
    ``segment`` and ``position``: where (when known)."""

    def __init__(self, message: str, segment: Path | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.segment = segment
        self.position = position


class InvalidRecordError(StorageError):
    """A batch that is well-formed but not acceptable (e.g. a null key on a compacted topic).

    ``record_errors`` lists the offending records as ``(index of the record within its batch,
    message)`` (Kafka's KIP-467 RecordError): the whole batch is refused, and a Produce v8+
    response names these records so that a client fails just their deliveries."""

    def __init__(
        self, message: str, record_errors: list[tuple[int, str]] | None = None, code: ErrorCode = ErrorCode.INVALID_RECORD
    ) -> None:
        super().__init__(message, code)
        self.record_errors = record_errors or []


class InvalidTimestampError(InvalidRecordError):
    """Record timestamps out of ``message.timestamp.*.max.ms`` of the broker's clock: refused
    with INVALID_TIMESTAMP and, as Kafka's LogValidator does, a record error (KIP-467) per record
    out of range (an InvalidRecordError for that reason: the produce answer lists them)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message, record_errors, ErrorCode.INVALID_TIMESTAMP)


class RecordBatchTooLargeError(StorageError):
    """A batch larger than ``max.message.bytes`` (or than a segment can hold)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.MESSAGE_TOO_LARGE)


class DecompressionBudgetExceeded(OdradekError):
    """A compressed batch decompresses to more than the caller's budget (``max_decompressed``, set
    below Kafka's bound): not refused, only too much work for where the caller runs (the broker's
    event loop), which then validates the batch elsewhere with the usual bound.  Not a KafkaError:
    nothing answers a client with it."""


class InvalidConfigError(StorageError):
    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.INVALID_CONFIG)


class ProducerStateError(StorageError):
    """An idempotent-producer batch that fails the sequence or epoch checks."""

    @classmethod
    def out_of_order(cls, message: str) -> ProducerStateError:
        return cls(message, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    @classmethod
    def fenced(cls, message: str) -> ProducerStateError:
        return cls(message, ErrorCode.INVALID_PRODUCER_EPOCH)

    @classmethod
    def unknown_producer(cls, message: str) -> ProducerStateError:
        return cls(message, ErrorCode.UNKNOWN_PRODUCER_ID)


class CorruptIndexError(StorageError):
    """An index file that fails its sanity check (it is rebuilt from the segment)."""


class LogClosedError(StorageError):
    """An operation on a log that was closed or deleted."""


class LogDirLockedError(StorageError):
    """A log dir is locked by another process (another broker is using it)."""
