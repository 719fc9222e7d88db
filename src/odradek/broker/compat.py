"""Format conversions the broker does for clients: pure functions of bytes.

They are per-record work, so the broker runs the large ones in its worker processes
(:mod:`odradek.broker.offload`), never on the event loop; each is a function of its arguments
alone (no broker state), so it runs the same in a worker as inline.

Down-conversion (old fetches)
-----------------------------
Fetch v0-1 returns message format v0 and v2-3 message format v1 (Kafka's rule).  Each v2 batch
is rewritten as legacy messages: uncompressed, one message per record at its own offset;
compressed (gzip, snappy, lz4), wrappers of consecutive records with the batch's codec (inner
offsets absolute with magic 0, relative with magic 1, gaps of a compacted batch kept).  Control
batches (transaction markers) are dropped; zstd, unknown to old formats, becomes uncompressed.
Records below the fetch offset are dropped, as Kafka drops them from an uncompressed batch (some
librdkafka versions rely on it).  Magic 0 has no timestamps: a log-append-time batch becomes
plain magic 0 messages.

Conversion is chunked and bounded, as Kafka's lazy down-conversion (KIP-283) is: it stops once
the converted data reaches the fetch's byte limit for the partition, and always returns at least
one message set whole (a wrapper holds at most ``WRAPPER_BYTES`` of records, so that "one message
set" is never a whole million-record batch).  Sizes are exact here (the response is built after
the conversion), so no entry is cut short and no overflow padding is needed.

Fetch v0-2 read with a hard byte limit, so the data may end inside its first batch.  Such a
fragment is passed on unconverted: old clients see an entry longer than the response and report
"record too large" (Kafka sends an over-long "overflow" entry for the same reason) instead of
receiving nothing and fetching the same offset forever.

Recompression and produce preparation
-------------------------------------
:func:`recompress` applies a topic's ``compression.type`` and turns an old producer's message
set (magic 0/1) into a v2 batch, as Kafka does (it writes format v2 only: a consumer then sees
magic 0's missing timestamps as -1, and a log-append-time topic's time); :func:`prepare_append` is what a
produced batch needs before the log appends it, off the loop: the log's validation of the batch
as sent (framing, CRCs, records, keys of a compacted topic), then the recompression, then the
validation of what will be written, whose batch headers the append uses.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from odradek.records import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    BatchBuilder,
    BatchHeader,
    Compression,
    RecordsError,
    compress,
    crc32,
    decompress,
    iter_batch_headers,
    read_batches,
)
from odradek.records import speedups as _speedups
from odradek.storage.config import LogConfig
from odradek.storage.errors import CorruptRecordError
from odradek.storage.validator import validate_batches

__all__ = [
    "CODECS",
    "WRAPPER_BYTES",
    "down_convert",
    "magic_for_fetch_version",
    "prepare_append",
    "recompress",
    "records_to_convert",
]

#: a topic's ``compression.type`` -> the codec its batches are written with (None: as produced)
CODECS: dict[str, Compression | None] = {
    "producer": None,
    "uncompressed": Compression.NONE,
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}

#: the records (uncompressed bytes) of one compressed wrapper made by down-conversion
WRAPPER_BYTES = 256 * 1024

_V2_HEADER_SIZE = 61
_ATTR_LOG_APPEND_TIME = 0x08
_PREFIX = struct.Struct(">qiI")  # offset, message size, crc
_HEAD_V0 = struct.Struct(">bbi")  # magic, attributes, key length
_HEAD_V1 = struct.Struct(">bbqi")  # magic, attributes, timestamp, key length
_I32 = struct.Struct(">i")
_NULL = b"\xff\xff\xff\xff"


def magic_for_fetch_version(version: int) -> int:
    return 0 if version <= 1 else 1 if version <= 3 else 2


def records_to_convert(headers: Sequence[BatchHeader], magic: int) -> int:
    """How many records down-converting these batches would rewrite at most (a v2 batch's count
    is in its header): the per-record work it costs."""
    return sum(h.record_count for h in headers if h.magic > magic and not h.is_control)


def down_convert(
    data: bytes | bytearray | memoryview, magic: int, fetch_offset: int = -1, limit: int | None = None
) -> bytes:
    """``data`` (a fetch's read of a log) as message format ``magic``: the records from
    ``fetch_offset`` on, until the converted data would pass ``limit`` bytes (None: no limit);
    at least one message set whatever the limit."""
    headers = list(iter_batch_headers(data))
    if not headers:
        return bytes(data)  # only a fragment of the first batch: let the client see it is too large
    out = bytearray()
    cap = None if limit is None else max(limit, 0)
    for h in headers:
        if h.magic <= magic:
            if out and cap is not None and len(out) + h.size > cap:
                break
            out += data[h.position : h.position + h.size]
            continue
        if h.is_control or h.last_offset < fetch_offset:
            continue
        if _convert_batch(out, data, h, magic, fetch_offset, cap):
            break
    return bytes(out)


def _convert_batch(
    out: bytearray, data: bytes | bytearray | memoryview, h: BatchHeader, magic: int, fetch_offset: int, cap: int | None
) -> bool:
    """Append the records of the v2 batch ``h`` at or above ``fetch_offset`` to ``out`` as legacy
    messages; True when ``cap`` stopped it (the response is full)."""
    log_append = h.timestamp_type == 1
    offsets, timestamps, keys, values = _columns(data, h, h.max_timestamp if log_append else None)
    n = len(offsets)
    i = bisect_left(offsets, fetch_offset) if fetch_offset > h.base_offset else 0
    attributes = _ATTR_LOG_APPEND_TIME if log_append and magic > 0 else 0
    codec = h.compression
    if codec in (Compression.NONE, Compression.ZSTD):  # zstd: uncompressed, old formats lack it
        while i < n:
            entry = _message(offsets[i], magic, attributes, timestamps[i], keys[i], values[i])
            if out and cap is not None and len(out) + len(entry) > cap:
                return True
            out += entry
            i += 1
        return False
    target = WRAPPER_BYTES if cap is None else max(1, min(cap, WRAPPER_BYTES))
    while i < n:
        first = i
        base = offsets[first] if magic > 0 else 0  # magic 1: inner offsets relative to the first
        inner = bytearray()
        newest = -1
        while i < n and (i == first or len(inner) < target):
            ts = timestamps[i]
            if ts > newest:
                newest = ts
            inner += _message(offsets[i] - base, magic, attributes, ts, keys[i], values[i])
            i += 1
        wrapper_ts = h.max_timestamp if log_append else newest
        payload = compress(codec, bytes(inner), magic=magic)
        entry = _message(offsets[i - 1], magic, int(codec) | attributes, wrapper_ts, None, payload)
        if out and cap is not None and len(out) + len(entry) > cap:
            return True
        out += entry
    return False


def _message(offset: int, magic: int, attributes: int, timestamp: int, key: Any, value: Any) -> bytes:
    """One legacy message-set entry (magic 0 carries no timestamp)."""
    if magic == 0:
        head = _HEAD_V0.pack(0, attributes & 0x07, -1 if key is None else len(key))
    else:
        head = _HEAD_V1.pack(1, attributes, timestamp, -1 if key is None else len(key))
    body = b"".join(
        (head, b"" if key is None else key, _NULL if value is None else _I32.pack(len(value)), b"" if value is None else value)
    )
    return _PREFIX.pack(offset, len(body) + 4, crc32(body)) + body


class _Binary:
    """A key or value column of the compiled decoder: item ``i`` is bytes or None."""

    __slots__ = ("data", "offsets", "validity")

    def __init__(self, column: tuple[Any, ...]) -> None:
        offsets, data, validity, _nulls = column
        self.offsets = memoryview(offsets).cast("i")
        self.data = data
        self.validity = validity

    def __getitem__(self, i: int) -> bytes | None:
        validity = self.validity
        if validity is not None and not (validity[i >> 3] >> (i & 7)) & 1:
            return None
        offsets = self.offsets
        return bytes(self.data[offsets[i] : offsets[i + 1]])


class _Millis:
    """The compiled decoder's timestamps (microseconds) as milliseconds."""

    __slots__ = ("us",)

    def __init__(self, us: bytes) -> None:
        self.us = memoryview(us).cast("q")

    def __getitem__(self, i: int) -> int:
        return self.us[i] // 1000


def _columns(
    data: bytes | bytearray | memoryview, h: BatchHeader, log_append_time: int | None
) -> tuple[Sequence[int], Any, Any, Any]:
    """(offsets, timestamps, keys, values) of the v2 batch ``h``, indexable: decoded by the
    compiled decoder into columns (no object per record), else by the pure-Python one (which also
    raises the precise error for data the compiled one refuses)."""
    compiled = _speedups.compiled
    if compiled is not None:
        start, stop = h.position + _V2_HEADER_SIZE, h.position + h.size
        buf: Any = data
        try:
            if h.compression:
                buf = decompress(h.compression, bytes(data[start:stop]), magic=2)
                start, stop = 0, len(buf)
            spec = (buf, start, stop, h.record_count, h.base_offset, h.base_timestamp, log_append_time)
            _n, offsets, stamps, keys, values, _headers = compiled.decode_columns([spec], False)
            return memoryview(offsets).cast("q"), _Millis(stamps), _Binary(keys), _Binary(values)
        except (ValueError, RecordsError):
            pass
    batch = next(read_batches(bytes(data[h.position : h.position + h.size]), verify_crc=False))
    records = batch.records
    return [r.offset for r in records], [r.timestamp for r in records], [r.key for r in records], [r.value for r in records]


# -- produce ---------------------------------------------------------------------------------------


def recompress(records: bytes | bytearray | memoryview, compression_type: str) -> bytes | bytearray | memoryview:
    """``records`` as the log writes them: v2 batches, in the codec ``compression_type`` names
    (``producer``: each batch's own).  A message set of magic 0/1 (Produce v0-2) becomes one v2
    batch, as Kafka, which writes message format v2 only, converts it: keys and values as they
    are, magic 0's messages with no timestamp (-1), magic 1's with theirs, in the codec of the
    set's wrapper unless the topic names one.  Raises RecordsError for data that cannot be read."""
    codec = CODECS[compression_type]
    headers = list(iter_batch_headers(records))
    legacy = [h for h in headers if h.magic < 2]
    if not legacy and (codec is None or all(h.compression == codec for h in headers)):
        return records
    out = bytearray()
    if legacy:
        if codec is None:  # the producer's codec: that of its wrappers
            codec = next((h.compression for h in legacy if h.compression), Compression.NONE)
        builder = BatchBuilder(compression=codec)
        for batch in read_batches(bytes(records)):
            if batch.magic == 2:
                raise RecordsError("a produced message set mixes v2 batches with v0/v1 messages")
            for r in batch.records:
                builder.append(r.timestamp if batch.magic == 1 else -1, r.key, r.value)
        out += builder.build()
        return out
    assert codec is not None
    for batch in read_batches(bytes(records)):
        builder = BatchBuilder(
            compression=codec,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
        )
        for r in batch.records:
            builder.append(r.timestamp, r.key, r.value, r.headers, offset_delta=r.offset - batch.base_offset)
        out += builder.build()
    return out


def prepare_append(
    data: bytes | bytearray | memoryview, config: LogConfig, topic: str, partition: int, now_ms: int | None = None,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[bytes | None, list[BatchHeader]]:
    """What the log's append of a produced ``data`` needs first, as a pure function (a worker
    process runs it): ``data`` validated as sent, converted by :func:`recompress` (the topic's
    ``compression.type``, format v2), and the batches to write validated.  Returns (the data to write, None
    when it is ``data`` itself; their batch headers).  Raises the log's errors for data it
    refuses (CorruptRecordError, InvalidRecordError with per-record errors, ...).  ``now_ms``: the
    broker's clock, for the per-record timestamp limits.  ``max_decompressed``: a budget below Kafka's
    bound for a v2 batch's decompression (beyond it DecompressionBudgetExceeded: the caller on the
    event loop hands the batch to a worker, which has the usual bound)."""
    headers = validate_batches(data, config, topic, partition, now_ms=now_ms, max_decompressed=max_decompressed)
    if CODECS[config.compression_type] is None and all(h.magic == 2 for h in headers):
        return None, headers
    try:
        out = recompress(data, config.compression_type)
    except RecordsError as exc:
        raise CorruptRecordError(str(exc)) from exc
    if out is data:
        return None, headers
    written = bytes(out)
    return written, validate_batches(written, config, topic, partition, now_ms=now_ms)
