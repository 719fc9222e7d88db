"""What an append must satisfy before it is written (Kafka's LogValidator), as pure functions of
the bytes, the topic's config and (for timestamps) the broker's clock: nothing here keeps state,
so any thread may run them.

:func:`validate_batches` checks the batch framing and CRCs, ``max.message.bytes`` and
``segment.bytes``, and on a leader (``produce``) what Kafka checks of a produced batch: a v2
batch's record count against its offsets, one magic for all batches, and every record read
against its batch header (:func:`validate_records`: counts, lengths, header counts, trailing
bytes, offset deltas 0..n-1, timestamps within int64, in one pass with no object per record,
compressed batches decompressed within the usual bound).  Refusals carry Kafka's error codes:
CORRUPT_MESSAGE (2) for a bad CRC or bytes that do not form batches, INVALID_RECORD (87) for
records that contradict their header (Kafka's InvalidRecordException), MESSAGE_TOO_LARGE (10)
for sizes.  On a compacted topic every record needs a key, and with
``message.timestamp.*.max.ms`` every record's timestamp must be within range of the broker's
clock: both are refused per record (KIP-467 record errors), as Kafka does.  As Kafka's
LogValidator does, a v2 batch's max timestamp is taken from its records (CreateTime topics):
:func:`fix_max_timestamps` writes it when the producer's header said otherwise.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from odradek.records import (
    BatchHeader,
    RecordsError,
    crc32c,
    decompress,
    iter_batch_headers,
    legacy,
    speedups,
)
from odradek.records.check import (
    NO_MIN_TIMESTAMP,
    RecordsCheck,
    check_records,
    check_records_python,
    problem_text,
)
from odradek.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    decompress_scratch,
    give_scratch,
    take_scratch,
)
from odradek.records.errors import (
    CrcMismatchError,
    DecompressionLimitExceeded,
    UnsupportedCodecError,
    UnsupportedMagicError,
)
from odradek.records.v2 import decode_records
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptRecordError,
    DecompressionBudgetExceeded,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
)

__all__ = [
    "V2_HEADER",
    "check_batch_header",
    "check_keys",
    "check_one_v2",
    "check_produced",
    "check_produced_one_v2",
    "check_timestamps",
    "fix_max_timestamps",
    "new_header",
    "produced_check_args",
    "records_problem",
    "timestamp_limits",
    "validate_batches",
    "validate_records",
]

# Kafka's message for a keyless record sent to a compacted topic (LogValidator.validateKey)
_NO_KEY = "Compacted topic cannot accept message without key in topic partition {}-{}"
_LONG_MAX = 9223372036854775807
V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_HEADER_SIZE = 61
_ATTR_LOG_APPEND_TIME = 0x08
_ATTR_CONTROL = 0x20


def _check_python(
    buf: bytes | bytearray | memoryview, start: int, stop: int, count: int, base_ts: int, lod: int, sequential: bool
) -> tuple[int, ...]:
    return check_records_python(buf, start, stop, count, base_ts, lod, sequential=sequential)


#: check_records as a plain function returning a plain tuple: the compiled one when it is there
_check = getattr(speedups.compiled, "check_records", None) or _check_python

_I64_MIN = -(1 << 63)


def _check_produced_python(
    data: bytes | bytearray | memoryview,
    max_size: int,
    refuse_keyless: bool,
    create_time: bool,
    now: int,
    before: int | None,
    after: int | None,
) -> int | None:
    """The produce fast path's whole check of ``data`` when it is one uncompressed v2 batch: its
    max timestamp as :func:`validate_records` gives it when every check passes, else None (then
    the general checks find what is wrong, or what this path does not take: a compressed batch).
    Passing means: magic 2, the batch's length, no codec, a record count above 0 that matches
    the last offset delta, a size within ``max_size``, the CRC, every record (check_records,
    sequential), no keyless record in a non-control batch when ``refuse_keyless`` and, for a
    CreateTime batch (``create_time``, not log-append time), record timestamps within
    [now - before, now + after] (-1 aside; ``before`` and ``after`` None: no limits).  None too
    when a number given is beyond int64.  The compiled ``check_produced`` is the same in C; this
    one reads the records with :data:`_check` (compiled too when the module is built: an older
    build without ``check_produced`` keeps the record pass compiled)."""
    if not (
        _I64_MIN <= max_size <= _LONG_MAX and _I64_MIN <= now <= _LONG_MAX
        and (before is None or (after is not None and _I64_MIN <= before <= _LONG_MAX and _I64_MIN <= after <= _LONG_MAX))
    ):
        return None
    n = len(data)
    if n < _HEADER_SIZE or data[16] != 2:
        return None
    _base, length, _ple, _m, crc, attrs, lod, bts, mts, _pid, _pep, _bseq, count = V2_HEADER.unpack_from(data, 0)
    if length + 12 != n or attrs & 0x07 or not 0 < count == lod + 1 or n > max_size:
        return None
    if crc32c(memoryview(data)[21:]) != crc:
        return None
    # problem, record, position, value, extra, max timestamp, min timestamp, keyless records
    c = _check(data, _HEADER_SIZE, n, count, bts, lod, True)
    if c[0] or (c[7] and not attrs & _ATTR_CONTROL and refuse_keyless):
        return None
    if attrs & _ATTR_LOG_APPEND_TIME or not create_time:
        header_max: int = mts
        return header_max
    if before is None or after is None:
        return c[5]
    if (c[6] == NO_MIN_TIMESTAMP or c[6] >= now - before) and c[5] <= now + after:
        return c[5]
    return None


#: the produce fast path's check (see _check_produced_python): the compiled one when it is there
check_produced = getattr(speedups.compiled, "check_produced", None) or _check_produced_python


def produced_check_args(
    config: LogConfig, limits: tuple[int, int] | None
) -> tuple[int, bool, bool, int | None, int | None]:
    """:func:`check_produced`'s arguments for a topic's ``config`` (``max_size``,
    ``refuse_keyless``, ``create_time``, ``before``, ``after``: all but the batch and ``now``), to
    keep per config.  ``limits``: ``timestamp_limits(config)``."""
    before, after = limits if limits is not None else (None, None)
    return (
        min(config.max_message_bytes, config.segment_bytes), config.compact,
        config.message_timestamp_type == "CreateTime", before, after,
    )


def new_header(fields: tuple[int, ...]) -> BatchHeader:
    return tuple.__new__(BatchHeader, fields)


def validate_batches(
    data: bytes | bytearray | memoryview,
    config: LogConfig,
    topic: str,
    partition: int,
    *,
    produce: bool = True,
    now_ms: int | None = None,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[BatchHeader]:
    """The headers of the batches of ``data`` after Kafka's checks of an append (see the module
    docstring).  ``produce``: a leader's append (a client's or a coordinator's batches): the
    records are checked too, and the returned headers of v2 batches on a CreateTime topic carry
    their records' max timestamp (apply it with :func:`fix_max_timestamps`).  ``now_ms``: the
    broker's clock, for the per-record timestamp limits (without it only the batch headers'
    timestamps are checked, by :func:`check_timestamps`).  Followers (``produce=False``) check
    the framing, CRCs and sizes (and keys on a compacted topic).  ``max_decompressed``: a v2
    batch that decompresses to more raises DecompressionBudgetExceeded when it is below Kafka's
    bound (:data:`~odradek.records.DEFAULT_MAX_DECOMPRESSED_SIZE`: MESSAGE_TOO_LARGE)."""
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
    magic = headers[0].magic
    for h in headers:
        # Kafka compares the whole batch (its 12-byte offset/size prefix included) with
        # max.message.bytes, whose default 1048588 is 1 MiB plus that prefix
        if h.size > limit:
            raise RecordBatchTooLargeError(f"batch of {h.size} bytes exceeds max.message.bytes={limit}")
        if h.size > config.segment_bytes:
            raise RecordBatchTooLargeError(f"batch of {h.size} bytes exceeds segment.bytes={config.segment_bytes}")
        if produce:
            check_batch_header(h, magic, topic, partition)
    if produce:
        return [
            _v2_header(data, h, config, topic, partition, now_ms, max_decompressed)
            if h.magic == 2
            else _check_legacy(data, h, topic, partition, config.compact, _legacy_bounds(h, config, now_ms))
            for h in headers
        ]
    if config.compact:
        check_keys(data, topic, partition)
    return headers


def check_batch_header(h: BatchHeader, magic: int, topic: str, partition: int) -> None:
    """Kafka's LogValidator.validateBatch for a produced batch (INVALID_RECORD): the magic of
    the first batch, and a v2 batch's offset range and record count."""
    if h.magic != magic:
        raise InvalidRecordError(
            f"Batch magic {h.magic} is not the same as the first batch's magic byte {magic} in topic partition "
            f"{topic}-{partition}"
        )
    if h.magic < 2:
        return
    count = h.record_count
    if count > 0 and count == h.last_offset - h.base_offset + 1:
        return
    if h.last_offset - h.base_offset + 1 <= 0:
        raise InvalidRecordError(
            f"Batch has an invalid offset range: [{h.base_offset}, {h.last_offset}] in topic partition "
            f"{topic}-{partition}"
        )
    if count <= 0:
        raise InvalidRecordError(f"Invalid reported count for record batch: {count} in topic partition {topic}-{partition}")
    raise InvalidRecordError(
        f"Inconsistent batch offset range [{h.base_offset}, {h.last_offset}] and count of records "
        f"{count} in topic partition {topic}-{partition}"
    )


def check_one_v2(
    data: bytes | bytearray | memoryview, fields: tuple[int, ...], config: LogConfig, topic: str, partition: int
) -> BatchHeader:
    """The header checks of the produce fast path's one v2 batch (``fields``: its header
    unpacked with :data:`V2_HEADER`): CRC, :func:`check_batch_header`, ``max.message.bytes`` and
    ``segment.bytes``.  Returns the batch's header as given (its records are not read here)."""
    base, length, ple, _m, crc, attrs, lod, bts, mts, pid, pep, bseq, count = fields
    size = length + 12
    if crc32c(memoryview(data)[21:]) != crc:
        raise CorruptRecordError(f"CRC mismatch in the batch at offset {base}")
    given = new_header((0, size, 2, base, base + lod, crc, attrs, bts, mts, pid, pep, bseq, count, ple))
    check_batch_header(given, 2, topic, partition)
    if size > config.max_message_bytes:
        raise RecordBatchTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={config.max_message_bytes}")
    if size > config.segment_bytes:
        raise RecordBatchTooLargeError(f"batch of {size} bytes exceeds segment.bytes={config.segment_bytes}")
    return given


def check_produced_one_v2(
    data: bytes | bytearray | memoryview,
    fields: tuple[int, ...],
    config: LogConfig,
    topic: str,
    partition: int,
    now: int,
    limits: tuple[int, int] | None,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> int:
    """:func:`check_one_v2` then :func:`validate_records` of the produce fast path's one v2 batch
    (``fields``: its header unpacked with :data:`V2_HEADER`, at position 0 of ``data``), the
    same checks in one call for the common batch (uncompressed, valid): the header, the CRC and
    every record (compiled when the extension is built).  ``limits``: ``timestamp_limits(config)``,
    which the caller keeps per config.  Returns the batch's max timestamp, as
    :func:`validate_records`.  A compressed batch, or one with anything to refuse, takes the
    general functions, which raise what Kafka answers."""
    max_size, compact, create_time, before, after = produced_check_args(config, limits)
    max_timestamp = check_produced(data, max_size, compact, create_time, now, before, after)
    if max_timestamp is not None:
        return max_timestamp
    given = check_one_v2(data, fields, config, topic, partition)
    return validate_records(data, given, config, topic, partition, now, max_decompressed=max_decompressed)


def _records_span(
    data: bytes | bytearray | memoryview,
    h: BatchHeader,
    scratch: bytearray | None = None,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[bytes | bytearray | memoryview, int, int]:
    """Where a v2 batch's records lie: in ``data`` itself, or decompressed (within ``max_size``:
    beyond the usual bound MESSAGE_TOO_LARGE, beyond a smaller budget DecompressionBudgetExceeded;
    a bad payload CORRUPT_MESSAGE), perhaps into ``scratch`` (see
    :func:`odradek.records.compression.take_scratch`)."""
    start = h.position + _HEADER_SIZE
    codec = h.attributes & 0x07
    if not codec:
        return data, start, h.position + h.size
    buf: bytes | bytearray | memoryview
    try:
        payload = memoryview(data)[start : h.position + h.size]
        if scratch is None:
            buf = decompress(codec, payload, magic=2, max_size=max_size)
        else:
            buf = decompress_scratch(codec, payload, scratch, max_size=max_size)
    except DecompressionLimitExceeded as exc:
        if max_size < DEFAULT_MAX_DECOMPRESSED_SIZE:
            raise DecompressionBudgetExceeded(f"{exc} (batch at offset {h.base_offset})") from exc
        raise RecordBatchTooLargeError(str(exc)) from exc
    except RecordsError as exc:
        raise CorruptRecordError(f"{exc} (batch at offset {h.base_offset})") from exc
    return buf, 0, len(buf)


def validate_records(
    data: bytes | bytearray | memoryview,
    h: BatchHeader,
    config: LogConfig,
    topic: str,
    partition: int,
    now_ms: int | None = None,
    *,
    sequential: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> int:
    """Read every record of the v2 batch ``h`` of ``data`` against its header, as Kafka's
    LogValidator iterates them; raise what Kafka answers for what is wrong (see the module
    docstring).  Returns the max timestamp the batch is to carry: its records' (Kafka sets it
    from them), or the header's for a log-append-time batch or topic.  ``sequential``: offset
    deltas must be 0..n-1 (a producer's batch); else only increasing (data after compaction).
    ``max_decompressed``: as for :func:`validate_batches`."""
    if h.attributes & 0x07:
        scratch = take_scratch()
        try:
            span = _records_span(data, h, scratch, max_decompressed)
            return _validate_span(*span, h, config, topic, partition, now_ms, sequential)
        finally:
            give_scratch(scratch)
    # the common case: the records read where they lie
    return _validate_span(
        data, h.position + _HEADER_SIZE, h.position + h.size, h, config, topic, partition, now_ms, sequential
    )


def _validate_span(
    buf: bytes | bytearray | memoryview,
    start: int,
    stop: int,
    h: BatchHeader,
    config: LogConfig,
    topic: str,
    partition: int,
    now_ms: int | None,
    sequential: bool,
) -> int:
    attributes = h.attributes
    count = h.record_count
    # problem, record, position, value, extra, max timestamp, min timestamp, keyless records
    c = _check(buf, start, stop, count, h.base_timestamp, h.last_offset - h.base_offset, sequential)
    if c[0]:
        raise InvalidRecordError(f"{problem_text(RecordsCheck._make(c), count)} in topic partition {topic}-{partition}")
    create_time = not attributes & _ATTR_LOG_APPEND_TIME and config.message_timestamp_type == "CreateTime"
    keyless = bool(c[7] and config.compact and not attributes & _ATTR_CONTROL)
    bounds = None
    if create_time and now_ms is not None:
        limits = timestamp_limits(config)
        if limits is not None:
            low, high = now_ms - limits[0], now_ms + limits[1]
            if (c[6] != NO_MIN_TIMESTAMP and c[6] < low) or c[5] > high:
                bounds = (low, high)
    if keyless or bounds is not None:
        _refuse_records(buf, start, stop, h, topic, partition, keys=keyless, bounds=bounds)
    return c[5] if create_time else h.max_timestamp


def _v2_header(
    data: bytes | bytearray | memoryview, h: BatchHeader, config: LogConfig, topic: str, partition: int, now: int | None,
    max_decompressed: int,
) -> BatchHeader:
    max_timestamp = validate_records(data, h, config, topic, partition, now, max_decompressed=max_decompressed)
    return h if max_timestamp == h.max_timestamp else h._replace(max_timestamp=max_timestamp)


def _refuse_records(
    buf: bytes | bytearray | memoryview,
    start: int,
    stop: int,
    h: BatchHeader,
    topic: str,
    partition: int,
    *,
    keys: bool,
    bounds: tuple[int, int] | None,
) -> None:
    """Raise the record errors of a batch found to hold keyless records on a compacted topic or
    timestamps out of range (decoding it: only batches being refused get here)."""
    records = decode_records(bytes(buf[start:stop]), h.record_count, h.base_offset, h.base_timestamp)
    _raise_record_errors(
        [(i, r.timestamp, r.offset, r.key is None) for i, r in enumerate(records)], topic, partition, keys, bounds
    )


def _raise_record_errors(
    records: Sequence[tuple[int, int, int, bool]],
    topic: str,
    partition: int,
    keys: bool,
    bounds: tuple[int, int] | None,
) -> None:
    """``records``: (index, timestamp, offset, keyless).  Kafka's LogValidator.validateRecord:
    a record's key error first, else its timestamp error; INVALID_TIMESTAMP when any record's
    timestamp is out of range, else INVALID_RECORD, each listing every record error."""
    errors: list[tuple[int, str]] = []
    timestamps = False
    for i, ts, offset, keyless in records:
        if keys and keyless:
            errors.append((i, _NO_KEY.format(topic, partition)))
        elif bounds is not None and ts != -1 and not bounds[0] <= ts <= bounds[1]:
            timestamps = True
            errors.append(
                (i, f"Timestamp {ts} of message with offset {offset} is out of range. "
                    f"The timestamp should be within [{bounds[0]}, {bounds[1]}]")
            )
    if not errors:
        return
    if timestamps:
        raise InvalidTimestampError("One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise InvalidRecordError(
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        errors,
    )


def fix_max_timestamps(buf: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> list[BatchHeader]:
    """Write into ``buf`` (the batches :func:`validate_batches` read, writable) the max timestamp of each v2
    batch whose header said another than its records (Kafka's LogValidator does the same), with
    its CRC; returns the headers with the new CRCs.  Nothing is written in the usual case."""
    out = headers
    for k, h in enumerate(headers):
        if h.magic != 2 or _I64.unpack_from(buf, h.position + 35)[0] == h.max_timestamp:
            continue
        _I64.pack_into(buf, h.position + 35, h.max_timestamp)
        crc = crc32c(memoryview(buf)[h.position + 21 : h.position + h.size])
        _U32.pack_into(buf, h.position + 17, crc)
        if out is headers:
            out = list(headers)
        out[k] = h._replace(crc=crc)
    return out


def _check_legacy(
    data: bytes | bytearray | memoryview,
    h: BatchHeader,
    topic: str,
    partition: int,
    compact: bool,
    bounds: tuple[int, int] | None,
) -> BatchHeader:
    """A magic 0 or 1 entry of a produce: its message's framing, and a compressed wrapper's inner
    messages (their CRCs: CORRUPT_MESSAGE; a magic other than the wrapper's or a codec of their
    own: record errors, INVALID_RECORD), keys on a compacted topic, timestamps within
    ``bounds`` (magic 1)."""
    where = f" in topic partition {topic}-{partition}" if topic else ""  # no topic: a log read offline
    try:
        [(offset, magic, attributes, timestamp, key, value)] = legacy.parse_message_set(
            bytes(data[h.position : h.position + h.size]), verify_crc=False
        )
    except RecordsError as exc:
        raise InvalidRecordError(f"{exc}{where}") from exc
    if not attributes & 0x07:
        inner = [(offset, magic, attributes, timestamp, key, value)]
    else:
        if value is None:
            raise InvalidRecordError(f"Compressed wrapper message has a null value{where}")
        try:
            payload = decompress(attributes & 0x07, value, magic=magic)
        except DecompressionLimitExceeded as exc:
            raise RecordBatchTooLargeError(str(exc)) from exc
        except (UnsupportedCodecError, UnsupportedMagicError, RecordsError) as exc:
            raise CorruptRecordError(f"{exc}{where}") from exc
        try:
            inner = legacy.parse_message_set(payload, verify_crc=True)
        except CrcMismatchError as exc:
            raise CorruptRecordError(f"{exc}{where}") from exc
        except RecordsError as exc:
            raise InvalidRecordError(f"{exc}{where}") from exc
        if not inner:
            raise InvalidRecordError(f"Compressed wrapper message holds no messages{where}")
        errors = []
        for i, (i_offset, i_magic, i_attributes, *_rest) in enumerate(inner):
            if i_attributes & 0x07:
                errors.append((i, "Compressed outer record should not have an inner record with a compression "
                                  f"attribute set: offset {i_offset}"))
            elif i_magic != magic:
                errors.append((i, f"Record at offset {i_offset}'s magic does not match outer magic {magic} "
                                  f"{where}"))
        if errors:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
                f"showing the first three errors at most: [{shown}]",
                errors,
            )
    _raise_record_errors([(i, m[3], m[0], m[4] is None) for i, m in enumerate(inner)], topic, partition, compact, bounds)
    return h


def _legacy_bounds(h: BatchHeader, config: LogConfig, now: int | None) -> tuple[int, int] | None:
    """The timestamp range of a magic 1 CreateTime entry's messages (None: not checked)."""
    if h.magic != 1 or now is None or config.message_timestamp_type != "CreateTime":
        return None
    limits = timestamp_limits(config)
    if limits is None or h.attributes & _ATTR_LOG_APPEND_TIME:
        return None
    return now - limits[0], now + limits[1]


def check_keys(data: bytes | bytearray | memoryview, topic: str, partition: int) -> None:
    """Compacted topics need a key on every record.

    As Kafka's LogValidator does, a batch with keyless records is refused as a whole, with a
    record error (KIP-467) for each keyless record: its index within the batch.  v2 batches are
    read by the one pass of :func:`odradek.records.check.check_records` (a key count, no object
    per record); records that contradict their header are refused (INVALID_RECORD)."""
    try:
        headers = list(iter_batch_headers(data, strict=True, verify=True))
    except RecordsError as exc:
        raise CorruptRecordError(str(exc)) from exc
    for h in headers:
        if h.magic == 2:
            if h.attributes & _ATTR_CONTROL:
                continue
            buf, start, stop = _records_span(data, h)
            c = check_records(
                buf, start, stop, h.record_count, h.base_timestamp, h.last_offset - h.base_offset, sequential=False
            )
            if c.problem:
                raise InvalidRecordError(f"{problem_text(c, h.record_count)} in topic partition {topic}-{partition}")
            if c.keyless:
                _refuse_records(buf, start, stop, h, topic, partition, keys=True, bounds=None)
        else:
            _check_legacy(data, h, topic, partition, True, None)


def records_problem(data: bytes | bytearray | memoryview, h: BatchHeader) -> str | None:
    """What is wrong with the records of the entry ``h`` of ``data`` as a log holds it (its frame
    and CRC already found sound), or None: every record of a v2 batch read against its header
    (offsets increasing up to the last offset delta: what compaction leaves), a v0/v1 message's
    framing and a compressed wrapper's inner messages (framing, CRCs, magic, no codec of their
    own); compressed data decompressed within the usual bound.  For ``dump-log --verify``."""
    try:
        if h.magic == 2:
            buf, start, stop = _records_span(data, h)
            c = check_records(
                buf, start, stop, h.record_count, h.base_timestamp, h.last_offset - h.base_offset, sequential=False
            )
            return None if c.ok else problem_text(c, h.record_count)
        _check_legacy(data, h, "", 0, False, None)
    except (InvalidRecordError, CorruptRecordError, RecordBatchTooLargeError) as exc:
        return exc.message
    except RecordsError as exc:
        return str(exc)
    return None


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
