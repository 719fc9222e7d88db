"""What an append must satisfy before it is written (Kafka's LogValidator), as functions of the
bytes and the topic's config: batch framing and CRCs, ``max.message.bytes`` and
``segment.bytes``, a v2 batch's record count against its offsets, a key on every record of a
compacted topic (refused per record, KIP-467), and timestamps within
``message.timestamp.*.max.ms`` of the broker's clock.
"""

from __future__ import annotations

import struct

from odradek.records import (
    BatchHeader,
    RecordsError,
    crc32c,
    decode_varint,
    decode_varlong,
    iter_batch_headers,
    read_batches,
)
from odradek.records.errors import DecompressionLimitExceeded, UnsupportedCodecError, UnsupportedMagicError
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
)

__all__ = ["V2_HEADER", "check_keys", "check_timestamps", "new_header", "timestamp_limits", "validate_batches"]

# Kafka's message for a keyless record sent to a compacted topic (LogValidator.validateKey)
_NO_KEY = "Compacted topic cannot accept message without key in topic partition {}-{}"
_LONG_MAX = 9223372036854775807
V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header
_I32 = struct.Struct(">i")


def new_header(fields: tuple[int, ...]) -> BatchHeader:
    return tuple.__new__(BatchHeader, fields)


def validate_batches(
    data: bytes | bytearray | memoryview, config: LogConfig, topic: str, partition: int, *, produce: bool = True
) -> list[BatchHeader]:
    """One pass over the batch headers with CRC checks; Kafka's size and produce rules."""
    headers: list[BatchHeader] | None = None
    n = len(data)
    if n >= 61 and data[16] == 2:
        # the common case, one v2 batch (a produce request's partition data): one unpack
        base, length, ple, _m, crc, attrs, lod, bts, mts, pid, pep, bseq, count = V2_HEADER.unpack_from(data, 0)
        if length + 12 == n and length >= 49:
            if crc32c(memoryview(data)[21:]) != crc:
                raise CorruptRecordError(f"CRC mismatch in the batch at offset {base}")
            if count < 0:
                raise CorruptRecordError(f"negative record count {count}")
            headers = [new_header((0, n, 2, base, base + lod, crc, attrs, bts, mts, pid, pep, bseq, count, ple))]
    if headers is None:
        try:
            headers = list(iter_batch_headers(data, strict=True, verify=True))
        except RecordsError as exc:
            raise CorruptRecordError(str(exc)) from exc
    if not headers:
        raise CorruptRecordError("no record batches in the data")
    limit = config.max_message_bytes
    for h in headers:
        # Kafka compares the whole batch (its 12-byte offset/size prefix included) with
        # max.message.bytes, whose default 1048588 is 1 MiB plus that prefix
        if h.size > limit:
            raise RecordBatchTooLargeError(f"batch of {h.size} bytes exceeds max.message.bytes={limit}")
        if h.size > config.segment_bytes:
            raise RecordBatchTooLargeError(f"batch of {h.size} bytes exceeds segment.bytes={config.segment_bytes}")
        if produce and h.magic == 2 and (h.record_count <= 0 or h.record_count != h.last_offset - h.base_offset + 1):
            raise CorruptRecordError(
                f"batch at byte {h.position} has {h.record_count} records "
                f"but last offset delta {h.last_offset - h.base_offset}"
            )
    if config.compact:
        check_keys(data, topic, partition)
    return headers


def check_keys(data: bytes | bytearray | memoryview, topic: str, partition: int) -> None:
    """Compacted topics need a key on every record (the one per-record check on append).

    As Kafka's LogValidator does, a batch with keyless records is refused as a whole, with
    a record error (KIP-467) for each keyless record: its index within the batch."""
    if _all_keyed_v2(data):
        return
    try:
        for batch in read_batches(bytes(data)):
            if batch.is_control:
                continue
            errors: list[tuple[int, str]] = []
            for index, record in enumerate(batch.records):
                if record.key is None:
                    errors.append((index, _NO_KEY.format(topic, partition)))
            if errors:
                shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
                raise InvalidRecordError(
                    f"One or more records have been rejected due to {len(errors)} record errors in total, "
                    f"and only showing the first three errors at most: [{shown}]",
                    errors,
                )
    except DecompressionLimitExceeded as exc:
        raise RecordBatchTooLargeError(str(exc)) from exc
    except (UnsupportedMagicError, UnsupportedCodecError, RecordsError) as exc:
        raise CorruptRecordError(str(exc)) from exc


def _all_keyed_v2(data: bytes | bytearray | memoryview) -> bool:
    """True when ``data`` is one uncompressed v2 batch whose records all have keys, read from
    the record headers alone (a coordinator's offset or transaction-state write, a keyed
    produce). False otherwise, and for anything malformed: :func:`check_keys` then decodes
    the records and says what is wrong."""
    n = len(data)
    if n < 61 or data[16] != 2 or data[22] & 0x27:  # v2, no codec, not a control batch
        return False
    if _I32.unpack_from(data, 8)[0] + 12 != n:
        return False
    count = _I32.unpack_from(data, 57)[0]
    pos = 61
    try:
        for _ in range(count):
            length, pos = decode_varint(data, pos)
            end = pos + length
            _ts, at = decode_varlong(data, pos + 1)  # after the attributes byte
            _delta, at = decode_varint(data, at)
            key_length, at = decode_varint(data, at)
            if key_length < 0 or length < 0 or end > n:
                return False
            pos = end
    except RecordsError:
        return False
    return pos == n


def timestamp_limits(config: LogConfig) -> tuple[int, int] | None:
    """(how far before, how far after the broker's clock) a record timestamp may be; None: any."""
    before = min(config.message_timestamp_difference_max_ms, config.message_timestamp_before_max_ms)
    after = min(config.message_timestamp_difference_max_ms, config.message_timestamp_after_max_ms)
    return None if before >= _LONG_MAX and after >= _LONG_MAX else (before, after)


def check_timestamps(headers: list[BatchHeader], now: int, limits: tuple[int, int]) -> None:
    before, after = limits
    for h in headers:
        if h.magic == 0 or h.max_timestamp < 0:
            continue
        if now - h.max_timestamp > before or h.max_timestamp - now > after:
            raise InvalidTimestampError(f"timestamp {h.max_timestamp} is out of range of the broker time {now}")
