"""Record batches, magic 2 (Kafka 0.11 and later).

Layout of a batch (big-endian fixed-width integers, 61-byte header)::

    offset  size  field
         0     8  baseOffset              int64
         8     4  batchLength             int32, bytes after this field
        12     4  partitionLeaderEpoch    int32
        16     1  magic                   int8 = 2
        17     4  crc                     uint32, CRC-32C of bytes 21..end
        21     2  attributes              int16: bits 0-2 codec, 3 timestamp type,
                                          4 transactional, 5 control, 6 delete horizon
        23     4  lastOffsetDelta         int32
        27     8  baseTimestamp           int64
        35     8  maxTimestamp            int64
        43     8  producerId              int64
        51     2  producerEpoch           int16
        53     4  baseSequence            int32
        57     4  recordCount             int32
        61        records (compressed as one payload when a codec is set)

The CRC leaves out the base offset and the partition leader epoch, so a broker
can assign both in place without recomputing it.

Each record is::

    length          varint    bytes of the record after this field
    attributes      int8      unused, written as 0
    timestampDelta  varlong   timestamp - baseTimestamp
    offsetDelta     varint    offset - baseOffset
    keyLength       varint    -1 for a null key
    key             bytes
    valueLength     varint    -1 for a null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key UTF-8,
                                   valueLength varint (-1 null), value bytes)

Decoding is table driven: varints of one or two bytes are read through
precomputed tables.  Runs of records with the same layout (same field widths,
key and value lengths, no headers: fixed-size values, say) are found and checked
with strided slices of the bytes (byte ``at`` of every record is
``buf[start + at : end : size]``), and decoded column by column with C iterators
and no Python code per record (:func:`decode_record_columns`); every field is
still checked.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from enum import IntEnum
from itertools import chain, islice, repeat
from operator import itemgetter
from typing import Any, NamedTuple

from . import speedups
from ._crc import crc32c
from ._types import NO_TIMESTAMP, Header, Record
from ._varint import (
    ENCODED_NONNEG,
    ENCODED_SIGNED,
    ZIGZAG1,
    ZIGZAG2,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
)
from .compression import Compression, compress
from .errors import CorruptRecordError, TruncatedBatchError

__all__ = [
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "HEADER",
    "HEADER_SIZE",
    "BatchBuilder",
    "ControlRecordType",
    "RecordColumns",
    "RecordRun",
    "assemble_batch",
    "control_marker",
    "decode_record_columns",
    "decode_records",
    "encode_headers",
    "end_txn_marker",
    "marker_batch",
    "parse_control_key",
]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
RECORD_COUNT_OFFSET = 57

ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

_tuple_new = tuple.__new__
_compiled = speedups.compiled
_encode_body = None if _compiled is None else _compiled.encode_record_body
Buffer = bytes | bytearray | memoryview
_join = b"".join
_ENC_NONNEG = ENCODED_NONNEG
_ENC_SIGNED = ENCODED_SIGNED
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

# ----------------------------------------------------------------------- decoding


def _read_headers(buf: Buffer, pos: int) -> tuple[list[Header], int]:
    """Read a record's header count and headers at ``pos``."""
    # The zig-zag tables hold None for bytes that do not end a varint; where a byte below 0x80
    # indexes ZIGZAG1, or a word whose first byte is a continuation byte ZIGZAG2, the entry is an
    # int. Typed Any rather than narrowed, as each ``is None`` test would cost in this loop.
    z1: tuple[Any, ...] = ZIGZAG1
    b = buf[pos]
    if b < 0x80:
        hc: int = z1[b]
        pos += 1
    else:
        hc, pos = decode_varint(buf, pos)
    if hc < 0:
        raise CorruptRecordError(f"negative record header count {hc}")
    headers: list[Header] = []
    app = headers.append
    size = len(buf)
    for _ in range(hc):
        b = buf[pos]
        if b < 0x80:
            hkl: int = z1[b]
            pos += 1
        else:
            hkl, pos = decode_varint(buf, pos)
        if hkl < 0:
            raise CorruptRecordError(f"negative record header key length {hkl}")
        end = pos + hkl
        if end >= size:
            raise TruncatedBatchError("data ends inside a record header")
        hkey = str(buf[pos:end], "utf-8")
        b = buf[end]
        if b < 0x80:
            hvl: int = z1[b]
            pos = end + 1
        else:
            hvl, pos = decode_varint(buf, end)
        if hvl >= 0:
            app((hkey, bytes(buf[pos : pos + hvl])))
            pos += hvl
        elif hvl == -1:
            app((hkey, None))
        else:
            raise CorruptRecordError(f"invalid record header value length {hvl}")
    return headers, pos


def _shape_at(buf: Buffer, pos: int) -> tuple[int, ...] | None:
    """Layout key of the (already validated) record at ``pos``, or ``None``.

    A record has a fixed layout when its five varints take one or two bytes each
    (the offset delta up to three) and it has no headers; the key lists the varint
    widths and the key and value lengths.
    """
    start = pos
    _, pos = decode_varint(buf, pos)
    ls = pos - start
    start = pos + 1
    _, pos = decode_varlong(buf, start)
    tss = pos - start
    start = pos
    _, pos = decode_varint(buf, pos)
    ods = pos - start
    start = pos
    kl, pos = decode_varint(buf, pos)
    kls = pos - start
    if kl > 0:
        pos += kl
    start = pos
    vl, pos = decode_varint(buf, pos)
    vls = pos - start
    if vl > 0:
        pos += vl
    if buf[pos] != 0 or max(ls, tss, kls, vls) > 2 or ods > 3:
        return None
    return (ls, tss, ods, kls, kl, vls, vl)


# Runs of records with one layout --------------------------------------------------------------
#
# Along a run of records of the same size and layout every field is a strided column of the
# bytes: ``buf[p + at : end : r]`` is byte ``at`` of each record.  A run is found and checked
# with a few such slices (C loops over bytes), and its records are then built column by column
# with C iterators (``range``, ``map``, ``struct.iter_unpack``, ``zip``): no Python bytecode
# runs per record.

#: Runs shorter than this are decoded record by record.
_MIN_RUN = 16
#: ``_HIBIT[b]`` is 1 when byte ``b`` has its continuation bit set.
_HIBIT = bytes(int(b >= 0x80) for b in range(256))
_ONE_BYTE = [bytes((b,)) for b in range(256)]
_EQ, _MORE, _LAST = 0, 1, 2
#: Zig-zag varints of 0, 1, ..., 8191 back to back, by width: consecutive offset deltas.
_SEQ1 = b"".join(ENCODED_NONNEG[:64])
_SEQ2 = b"".join(ENCODED_NONNEG[64:8192])
_LITTLE = sys.byteorder == "little"
_first = itemgetter(0)
#: Records per ``struct`` call when cutting keys and values out of a run.
_BLOCK = 64
#: Maps every non-zero byte to 1.
_NONZERO = bytes([0] + [1] * 255)
_EMPTY: tuple[()] = ()
#: (record size, checks, o_ts, ts width, o_od, od width, o_key, key len, o_value, value len)
_Layout = tuple[int, tuple[tuple[int, int, bytes], ...], int, int, int, int, int, int, int, int]
_LAYOUTS: dict[tuple[int, ...], _Layout] = {}
#: ``Struct.iter_unpack`` of :data:`_BLOCK` records and of one record (each item: the field's bytes)
_Unpack = Callable[[Buffer], Iterator[tuple[Any, ...]]]
_FIELDS: dict[tuple[int, int, int], tuple[_Unpack, _Unpack]] = {}


class RecordRun(NamedTuple):
    """Where the fields of a run of records with one layout lie in the batch's bytes, for
    readers that cut columns out of them (Arrow arrays) instead of iterating.

    ``buf`` is the buffer the records were decoded from (the batch's uncompressed records).
    Record ``j`` of the run is ``buf[start + j * size : start + (j + 1) * size]``; its key is the
    ``key_length`` bytes at ``key_at`` of the record (``None`` when ``key_length`` is -1), its
    value likewise; no record of a run has headers.  ``timestamp_runs`` lists ``(timestamp,
    count)`` in order when the timestamps form few runs of equal values (else ``None``).
    """

    buf: Buffer
    start: int
    size: int
    key_at: int
    key_length: int
    value_at: int
    value_length: int
    timestamp_runs: list[tuple[int, int]] | None


class RecordColumns(NamedTuple):
    """``num_records`` consecutive records of a batch as columns (see
    :func:`decode_record_columns`).

    Each column is an iterable of ``num_records`` items that may be iterated once only (a list, a
    tuple, a ``range`` or an iterator): ``offsets`` and ``timestamps`` ints, ``keys`` and
    ``values`` ``bytes`` or ``None``, ``headers`` a new list of ``(name, value)`` per record.
    ``offsets`` is a ``range`` when they are consecutive; ``run`` describes the bytes of a run
    of records with one layout (``None`` for records decoded one by one).
    """

    num_records: int
    offsets: Iterable[int]
    timestamps: Iterable[int]
    keys: Iterable[bytes | None]
    values: Iterable[bytes | None]
    headers: Iterable[list[Header]]
    run: RecordRun | None = None


def _layout_for(buf: Buffer, rec_start: int, shape: tuple[int, ...]) -> _Layout:
    """What a run of records shaped like the one at ``rec_start`` shares, and where its fields
    are.  ``checks`` lists ``(at, kind, byte)``: the byte at ``at`` equals the template's (the
    record length, key and value lengths and the header count: the shape fixes them), or is a
    varint byte with its continuation bit set or clear (timestamp and offset deltas)."""
    layout = _LAYOUTS.get(shape)
    if layout is not None:
        return layout
    ls, tss, ods, kls, kl, vls, vl = shape
    o_ts = ls + 1
    o_od = o_ts + tss
    o_kl = o_od + ods
    o_key = o_kl + kls
    o_vl = o_key + max(kl, 0)
    o_value = o_vl + vls
    size = o_value + max(vl, 0) + 1
    checks: list[tuple[int, int, bytes]] = []
    for at in (*range(ls), *range(o_kl, o_kl + kls), *range(o_vl, o_vl + vls), size - 1):
        checks.append((at, _EQ, _ONE_BYTE[buf[rec_start + at]]))
    for at, width in ((o_ts, tss), (o_od, ods)):
        for j in range(width):
            more = j < width - 1
            checks.append((at + j, _MORE if more else _LAST, b"\x01" if more else b"\x00"))
    layout = (size, tuple(checks), o_ts, tss, o_od, ods, o_key, kl, o_value, vl)
    if len(_LAYOUTS) >= 4096:
        _LAYOUTS.clear()
    _LAYOUTS[shape] = layout
    return layout


def _run_length(
    buf: Buffer, p: int, size: int, checks: tuple[tuple[int, int, bytes], ...], limit: int, stop: int
) -> int:
    """How many records from ``p`` on (at most ``limit``, all before ``stop``) pass every check:
    a window of records at a time, growing while whole windows pass."""
    limit = min(limit, (stop - p) // size)
    k = 0
    window = 64
    hibit = _HIBIT
    while k < limit:
        w = min(window, limit - k)
        q = p + k * size
        m = w  # records of the window that passed every check so far
        expect: dict[bytes, bytes] = {}  # byte -> the byte m times: a check passes with one compare
        for at, kind, byte in checks:
            col = bytes(buf[q + at : q + m * size : size])
            if kind != _EQ:
                col = col.translate(hibit)
            full = expect.get(byte)
            if full is None:
                full = expect[byte] = byte * m
            if col == full:
                continue
            m -= len(col.lstrip(byte))
            if not m:
                return k
            expect.clear()
        k += m
        if m < w:
            break
        window *= 4
    return k


def _field(region: memoryview, at: int, length: int, size: int, k: int) -> Iterable[bytes]:
    """The ``length`` bytes at ``at`` of each of the ``k`` records of ``size`` bytes in
    ``region``: one ``struct`` call per :data:`_BLOCK` records, then one per record."""
    key = (at, length, size)
    structs = _FIELDS.get(key)
    if structs is None:
        code = f"{at}x{length}s{size - at - length}x"
        structs = (struct.Struct(code * _BLOCK).iter_unpack, struct.Struct(code).iter_unpack)
        if len(_FIELDS) >= 1024:
            _FIELDS.clear()
        _FIELDS[key] = structs
    blocks, one = structs
    split = (k - k % _BLOCK) * size
    if not split:
        return map(_first, one(region))
    whole = chain.from_iterable(blocks(region[:split]))
    return whole if split == len(region) else chain(whole, map(_first, one(region[split:])))


def _words(buf: Buffer, at: int, stop: int, size: int) -> memoryview:
    """The big-endian 16-bit words of the two bytes at ``at`` of each record (an iterable)."""
    first, second = bytes(buf[at:stop:size]), bytes(buf[at + 1 : stop : size])
    pairs = bytearray(2 * len(first))
    if _LITTLE:
        pairs[1::2], pairs[0::2] = first, second
    else:
        pairs[0::2], pairs[1::2] = first, second
    return memoryview(pairs).cast("H")


def _varint_column(buf: Buffer, at: int, stop: int, size: int, width: int) -> Iterator[int]:
    """The zig-zag varints (checked to be ``width`` bytes) at ``at`` of each record."""
    # their bytes were checked to be ``width`` long, so no table entry met is None (see _read_headers)
    z1: tuple[Any, ...] = ZIGZAG1
    z2: tuple[Any, ...] = ZIGZAG2
    if width == 1:
        return map(z1.__getitem__, bytes(buf[at:stop:size]))
    return map(z2.__getitem__, _words(buf, at, stop, size))


def _timestamp_runs(buf: Buffer, at: int, stop: int, size: int, width: int, k: int, base_ts: int) -> list[tuple[int, int]] | None:
    """``(timestamp, count)`` runs of the deltas (``width`` bytes) at ``at`` of each record, or
    ``None`` when there are many short ones.  Records made together share their millisecond.
    Where a run ends is found in C: the XOR of the delta bytes with themselves one record on
    is zero except there."""
    col: bytes | bytearray
    if width == 1:
        col = bytes(buf[at:stop:size])
    else:
        col = bytearray(2 * k)
        col[0::2], col[1::2] = bytes(buf[at:stop:size]), bytes(buf[at + 1 : stop : size])
    n = len(col)
    x = int.from_bytes(col, "big")
    marks = (x ^ ((x << (8 * width)) & ((1 << (8 * n)) - 1))).to_bytes(n, "big").translate(_NONZERO)
    last = n - width  # marks[j] for j < last: byte j differs from byte j + width
    if marks.count(1, 0, last) > k >> 4:
        return None
    z: tuple[Any, ...] = ZIGZAG1 if width == 1 else ZIGZAG2  # Any: see _read_headers
    runs = []
    s = 0  # first record of the current run
    while True:
        j = marks.find(1, s * width, last)
        e = k if j < 0 else j // width + 1
        word = col[s] if width == 1 else (col[2 * s] << 8) | col[2 * s + 1]
        runs.append((base_ts + z[word], e - s))
        if j < 0:
            return runs
        s = e


def _offset_column(buf: Buffer, at: int, stop: int, size: int, width: int, k: int, base_offset: int) -> Iterable[int]:
    """Offsets from the deltas (``width`` bytes) at ``at`` of each record: consecutive deltas
    (nearly always) are a ``range``, after comparing the bytes with their encoding."""
    d0 = decode_varint(buf, at)[0]
    if width == 1:
        col = bytes(buf[at:stop:size])
        if d0 >= 0 and d0 + k <= 64 and col == _SEQ1[d0 : d0 + k]:
            return range(base_offset + d0, base_offset + d0 + k)
    elif width == 2:
        wire = bytearray(2 * k)
        wire[0::2], wire[1::2] = bytes(buf[at:stop:size]), bytes(buf[at + 1 : stop : size])
        if d0 >= 64 and d0 + k <= 8192 and wire == _SEQ2[2 * (d0 - 64) : 2 * (d0 - 64 + k)]:
            return range(base_offset + d0, base_offset + d0 + k)
    else:
        cols = [bytes(buf[at + j : stop : size]) for j in range(width)]
        if cols == _consecutive_columns(d0, k, width):
            return range(base_offset + d0, base_offset + d0 + k)
        return map(base_offset.__add__, map(_varint3, *cols))
    return map(base_offset.__add__, _varint_column(buf, at, stop, size, width))


def _consecutive_columns(d0: int, k: int, width: int) -> list[bytes]:
    """Byte ``j`` of the zig-zag varints of ``d0, ..., d0 + k - 1`` (each ``width`` bytes) for
    each ``j``, or ``[]`` when some of them have another width."""
    if d0 < 0 or size_of_varint(d0) != width or size_of_varint(d0 + k - 1) != width:
        return []
    more = [0x80] * (width - 1) + [0]
    # byte 0 of 2d cycles every 64 values; byte j > 0 holds bits 7j-1.. of d: runs of 2**(7j-1)
    cycle = bytes(((d & 63) << 1) | more[0] for d in range(64))
    start = d0 % 64
    cols = [(cycle * ((start + k) // 64 + 1))[start : start + k]]
    for j in range(1, width):
        shift = 7 * j - 1
        parts = []
        d = d0
        end = d0 + k
        while d < end:
            nxt = min(((d >> shift) + 1) << shift, end)
            parts.append(_ONE_BYTE[((d >> shift) & 0x7F) | more[j]] * (nxt - d))
            d = nxt
        cols.append(b"".join(parts))
    return cols


def _varint3(b0: int, b1: int, b2: int) -> int:
    u = (b0 & 0x7F) | (b1 & 0x7F) << 7 | b2 << 14
    return (u >> 1) ^ -(u & 1)


def _run_columns(
    buf: Buffer, p: int, k: int, layout: _Layout, base_offset: int, base_ts: int, log_append_time: int | None
) -> RecordColumns:
    size, _checks, o_ts, tss, o_od, ods, o_key, kl, o_value, vl = layout
    stop = p + k * size
    offsets = _offset_column(buf, p + o_od, stop, size, ods, k, base_offset)
    if log_append_time is not None:
        ts_runs: list[tuple[int, int]] | None = [(log_append_time, k)]
    else:
        ts_runs = _timestamp_runs(buf, p + o_ts, stop, size, tss, k, base_ts)
    timestamps: Iterable[int]
    if ts_runs is None:
        timestamps = map(base_ts.__add__, _varint_column(buf, p + o_ts, stop, size, tss))
    elif len(ts_runs) == 1:
        timestamps = repeat(ts_runs[0][0], k)
    else:
        timestamps = chain.from_iterable([repeat(t, n) for t, n in ts_runs])
    region = memoryview(buf)[p:stop]
    keys: Iterable[bytes | None] = repeat(None, k) if kl < 0 else _field(region, o_key, kl, size, k)
    values: Iterable[bytes | None] = repeat(None, k) if vl < 0 else _field(region, o_value, vl, size, k)
    run = RecordRun(buf, p, size, o_key, kl, o_value, vl, ts_runs)
    return RecordColumns(k, offsets, timestamps, keys, values, map(list, repeat(_EMPTY, k)), run)


def _increasing(run: RecordColumns, base_offset: int) -> tuple[RecordColumns, int]:
    """``run`` with its offsets checked to increase (consecutive ones, a ``range``, nearly
    always do; others are read into a list and compared), and the offset delta of its last
    record (its first record's delta was checked against what came before it)."""
    offsets = run.offsets
    if isinstance(offsets, range):
        return run, offsets[-1] - base_offset
    values = list(offsets)
    if any(map(int.__ge__, values, values[1:])):
        j = next(j for j in range(1, len(values)) if values[j] <= values[j - 1])
        od, prev = values[j] - base_offset, values[j - 1] - base_offset
        raise CorruptRecordError(f"record offset delta {od} after {prev}: offsets do not increase")
    return run._replace(offsets=values), values[-1] - base_offset


def _decode_segments(
    buf: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    start: int = 0,
    stop: int | None = None,
    last_offset_delta: int | None = None,
) -> list[list[Record] | RecordColumns]:
    """The records of ``buf[start:stop]`` in order: lists of :class:`Record` (decoded one by one)
    and :class:`RecordColumns` (runs of one layout).  Everything is checked before it returns.

    The general path reads each field with an inline one- or two-byte table lookup, falling
    back to a loop only for longer varints.  After a record with a fixed layout (see
    :func:`_shape_at`) the following records that share it are found with strided slices and
    become one :class:`RecordColumns`; a layout that repeats too little backs off
    exponentially, so mixed-layout data costs little extra.
    """
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    segments: list[list[Record] | RecordColumns] = []
    out: list[Record] = []
    app = out.append
    tnew = _tuple_new
    rec_cls = Record
    base_ts = base_timestamp
    z1: tuple[Any, ...] = ZIGZAG1  # Any: see _read_headers
    z2: tuple[Any, ...] = ZIGZAG2
    copy = type(buf) is not bytes  # slices of a memoryview or bytearray become bytes
    end = len(buf) if stop is None else stop
    pos = start
    i = 0
    prev_od = od = -1  # offsets strictly increase within a batch (compaction leaves gaps only)
    skip = 0
    backoff = 0
    # bytes or None in the end; Any as they are first slices of ``buf`` (bytes, or a view made
    # bytes when ``copy``): a union would need narrowing in this loop
    key: Any
    value: Any
    try:
        while i < count:
            rec_start = pos
            b = buf[pos]
            if b < 0x80:
                r_len = z1[b]
                pos += 1
            else:
                r_len = z2[(b << 8) | buf[pos + 1]]
                if r_len is None:
                    r_len, pos = decode_varint(buf, pos)
                else:
                    pos += 2
            start = pos
            b = buf[pos + 1]  # after the unused record attributes
            if b < 0x80:
                tsd = z1[b]
                pos += 2
            else:
                tsd = z2[(b << 8) | buf[pos + 2]]
                if tsd is None:
                    tsd, pos = decode_varlong(buf, pos + 1)
                    if not _INT64_MIN <= base_ts + tsd <= _INT64_MAX:
                        raise CorruptRecordError(f"record timestamp delta {tsd} is beyond the int64 range")
                else:
                    pos += 3
            b = buf[pos]
            if b < 0x80:
                od = z1[b]
                pos += 1
            else:
                od = z2[(b << 8) | buf[pos + 1]]
                if od is None:
                    od, pos = decode_varint(buf, pos)
                else:
                    pos += 2
            b = buf[pos]
            if b < 0x80:
                r_kl = z1[b]
                pos += 1
            else:
                r_kl = z2[(b << 8) | buf[pos + 1]]
                if r_kl is None:
                    r_kl, pos = decode_varint(buf, pos)
                else:
                    pos += 2
            if r_kl >= 0:
                key = buf[pos : pos + r_kl]
                if copy:
                    key = bytes(key)
                pos += r_kl
            elif r_kl == -1:
                key = None
            else:
                raise CorruptRecordError(f"invalid record key length {r_kl}")
            b = buf[pos]
            if b < 0x80:
                r_vl = z1[b]
                pos += 1
            else:
                r_vl = z2[(b << 8) | buf[pos + 1]]
                if r_vl is None:
                    r_vl, pos = decode_varint(buf, pos)
                else:
                    pos += 2
            if r_vl >= 0:
                value = buf[pos : pos + r_vl]
                if copy:
                    value = bytes(value)
                pos += r_vl
            elif r_vl == -1:
                value = None
            else:
                raise CorruptRecordError(f"invalid record value length {r_vl}")
            if buf[pos] == 0:
                headers: list[Header] = []
                pos += 1
            else:
                headers, pos = _read_headers(buf, pos)
            if pos - start != r_len:
                raise CorruptRecordError(f"record length says {r_len} bytes but the record has {pos - start}")
            if od <= prev_od:
                raise CorruptRecordError(f"record offset delta {od} after {prev_od}: offsets do not increase")
            prev_od = od
            app(tnew(rec_cls, (base_offset + od, base_ts + tsd, key, value, headers)))
            i += 1
            if skip:
                skip -= 1
                continue
            if count - i < _MIN_RUN:
                skip = count - i
                continue
            shape = _shape_at(buf, rec_start)
            k = 0
            if shape is not None:
                layout = _layout_for(buf, rec_start, shape)
                k = _run_length(buf, pos, layout[0], layout[1], count - i, end)
            if k < _MIN_RUN:
                skip = backoff
                backoff = min(2 * backoff + 1, 63)
                continue
            backoff = 0
            out.pop()  # the record just decoded starts the run
            if out:
                segments.append(out)
                out = []
                app = out.append
            run, prev_od = _increasing(
                _run_columns(buf, rec_start, k + 1, layout, base_offset, base_ts, log_append_time), base_offset
            )
            segments.append(run)
            pos += k * layout[0]
            i += k
    except IndexError:
        raise TruncatedBatchError("data ends inside a record") from None
    except UnicodeDecodeError:
        raise CorruptRecordError("record header key is not valid UTF-8") from None
    if pos > end:  # the last record runs past the end (into what follows in ``buf``)
        raise TruncatedBatchError("data ends inside a record")
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the last of {count} records")
    if last_offset_delta is not None and prev_od > last_offset_delta:
        raise CorruptRecordError(f"record offset delta {prev_od} is beyond the batch's last offset delta {last_offset_delta}")
    if out:
        segments.append(out)
    if log_append_time is not None:
        segments = [
            [tnew(rec_cls, (r[0], log_append_time, r[2], r[3], r[4])) for r in s] if isinstance(s, list) else s
            for s in segments
        ]
    return segments


def decode_records(
    buf: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
    last_offset_delta: int | None = None,
) -> list[Record]:
    """Decode ``count`` records filling all of ``buf`` (the uncompressed records).

    ``log_append_time`` (the batch's max timestamp for log-append-time batches)
    replaces every record timestamp, as Kafka's readers do.  Records are decoded one
    by one, and runs of records with one layout column-wise (see
    :func:`_decode_segments`); both give identical results.  Record offsets must increase;
    with ``last_offset_delta`` (the batch header's) none may be beyond it.
    """
    if _compiled is not None:
        try:
            records: list[Record] = _compiled.decode_records(
                buf, 0, None, count, base_offset, base_timestamp, log_append_time, Record
            )
            if last_offset_delta is None or not records or records[-1][0] - base_offset <= last_offset_delta:
                return records
        except ValueError:
            pass  # something is wrong with the data: the pure-Python decoder says what
    segments = _decode_segments(
        buf, count, base_offset, base_timestamp, log_append_time, last_offset_delta=last_offset_delta
    )
    if len(segments) == 1 and isinstance(segments[0], list):
        return segments[0]
    out: list[Record] = []
    tnew = _tuple_new
    for s in segments:
        if isinstance(s, list):
            out += s
        else:
            out += map(tnew, repeat(Record, s.num_records), zip(s.offsets, s.timestamps, s.keys, s.values, s.headers))
    return out


def decode_record_columns(
    buf: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
    *,
    start: int = 0,
    stop: int | None = None,
    last_offset_delta: int | None = None,
) -> list[RecordColumns]:
    """Like :func:`decode_records`, as columns: consecutive stretches of the records in order.

    For readers that build their own record objects (or arrays) without a :class:`Record`
    per record in between.  Every problem with the data is raised here, before any column is
    read; the columns themselves are single-use iterables.  ``buf`` may be a ``memoryview``
    (of a fetch response, say): it is not copied, keys and values are ``bytes`` all the same,
    and a :class:`RecordRun` refers to it.  The records may be a part of ``buf``:
    ``buf[start:stop]`` (positions in a :class:`RecordRun` are positions in ``buf``), so the
    batches of a fetch response can share one ``bytes`` object.
    """
    out: list[RecordColumns] = []
    for s in _decode_segments(buf, count, base_offset, base_timestamp, log_append_time, start, stop, last_offset_delta):
        if isinstance(s, list):
            offsets, timestamps, keys, values, headers = zip(*s)
            out.append(RecordColumns(len(s), offsets, timestamps, keys, values, headers))
        else:
            out.append(s)
    return out


# ----------------------------------------------------------------------- encoding


_NAME_CACHE: dict[str, bytes] = {}


def _encode_name(name: str) -> bytes:
    raw = str.encode(name, "utf-8")
    n = len(raw)
    encoded = (ENCODED_NONNEG[n] if n < 8192 else encode_varint(n)) + raw
    if len(_NAME_CACHE) >= 1024:
        _NAME_CACHE.clear()
    _NAME_CACHE[name] = encoded
    return encoded


def encode_headers(headers: Iterable[Header]) -> bytes:
    """Encode a record's header count and headers (names are ``str``, values bytes or None)."""
    if not isinstance(headers, list | tuple):
        headers = list(headers)
    n = len(headers)
    parts = [_ENC_NONNEG[n] if n < 8192 else encode_varint(n)]
    app = parts.append
    names = _NAME_CACHE
    for name, value in headers:
        encoded = names.get(name)
        app(encoded if encoded is not None else _encode_name(name))
        if value is None:
            app(b"\x01")
        else:
            n = len(value)
            app(_ENC_NONNEG[n] if n < 8192 else encode_varint(n))
            app(value)
    return _join(parts)


class BatchBuilder:
    """Build one v2 record batch.

    ``append`` records in offset order, then ``build()`` the batch bytes. Offsets
    run from ``base_offset`` (consecutive unless ``offset_delta`` is given);
    timestamps are milliseconds since the epoch and must be ints. Producers leave
    ``base_offset`` at 0 and ``partition_leader_epoch`` at -1; the broker patches
    both. ``log_append_time`` marks the batch as log-append-time with that max
    timestamp. ``delete_horizon`` (used by compaction) becomes the base timestamp,
    with attribute bit 6 set; record timestamps stay exact as deltas from it. The
    payload after the header is compressed with ``compression``.
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_bodies",
        "_compression",
        "_first_ts",
        "_level",
        "_log_append_time",
        "_max_ts",
        "_next_delta",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
        "_size",
        "_sized",
    )

    def __init__(
        self,
        *,
        compression: Compression | int = Compression.NONE,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        log_append_time: int | None = None,
        delete_horizon: int | None = None,
        compression_level: int | None = None,
    ) -> None:
        codec = int(compression)
        if not 0 <= codec <= 4:
            raise ValueError(f"unknown compression codec {compression}")
        if is_transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        self._compression = codec
        self._level = compression_level
        self._attributes = (
            codec
            | (ATTR_TRANSACTIONAL if is_transactional else 0)
            | (ATTR_CONTROL if is_control else 0)
            | (ATTR_TIMESTAMP_TYPE if log_append_time is not None else 0)
            | (ATTR_DELETE_HORIZON if delete_horizon is not None else 0)
        )
        self._log_append_time = log_append_time
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._bodies: list[bytes] = []  # records without their length prefix
        self._sized = 0  # bodies already counted in _size
        self._first_ts: int | None = delete_horizon
        self._max_ts = NO_TIMESTAMP
        self._next_delta = 0
        self._size = HEADER_SIZE

    @property
    def record_count(self) -> int:
        """Number of records appended so far."""
        return len(self._bodies)

    @property
    def size_in_bytes(self) -> int:
        """Size the batch would have uncompressed (header included), exactly."""
        bodies = self._bodies
        if self._sized < len(bodies):
            size = self._size
            for body in islice(bodies, self._sized, None):
                n = len(body)
                size += n + (1 if n < 64 else 2 if n < 8192 else len(encode_varint(n)))
            self._size = size
            self._sized = len(bodies)
        return self._size

    @property
    def next_offset_delta(self) -> int:
        """Offset delta the next appended record gets by default."""
        return self._next_delta

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Header] | None = None,
        *,
        offset_delta: int | None = None,
    ) -> int:
        """Append one record; return its offset delta."""
        first = self._first_ts
        if first is None:
            if type(timestamp) is not int:
                raise TypeError(f"timestamp must be an int, not {type(timestamp).__name__}")
            first = self._first_ts = timestamp
        tsd = timestamp - first
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        if offset_delta is None:
            od = self._next_delta
        elif offset_delta < self._next_delta:
            raise ValueError("offset deltas must increase")
        else:
            od = offset_delta
        if (
            _encode_body is not None
            and not headers
            and (key is None or type(key) is bytes)
            and (value is None or type(value) is bytes)
        ):
            self._bodies.append(_encode_body(tsd, od, key, value))
            self._next_delta = od + 1
            return od
        odv = _ENC_NONNEG[od] if od < 8192 else encode_varint(od)
        tsv = _ENC_SIGNED[tsd + 8192] if -8192 <= tsd < 8192 else encode_varlong(tsd)
        if key is None:
            kv = b"\x01"
            key = b""
        else:
            n = len(key)
            kv = _ENC_NONNEG[n] if n < 8192 else encode_varint(n)
        if value is None:
            vv = b"\x01"
            value = b""
        else:
            n = len(value)
            vv = _ENC_NONNEG[n] if n < 8192 else encode_varint(n)
        self._bodies.append(
            _join((b"\x00", tsv, odv, kv, key, vv, value, encode_headers(headers) if headers else b"\x00"))
        )
        self._next_delta = od + 1
        return od

    def _records_bytes(self) -> bytes:
        """The records with their length prefixes (each body is stored without one)."""
        bodies = self._bodies
        lengths = list(map(len, bodies))
        try:
            prefixes = list(map(_ENC_NONNEG.__getitem__, lengths))
        except IndexError:
            prefixes = [_ENC_NONNEG[n] if n < 8192 else encode_varint(n) for n in lengths]
        return _join(chain.from_iterable(zip(prefixes, bodies)))

    def set_producer(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Set the idempotent-producer fields before :meth:`build` (a producer numbers a batch
        when it first sends it, after its records were appended)."""
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def build(self) -> bytes:
        """Return the finished batch (header, CRC and, if set, compressed records)."""
        return assemble_batch(
            self._records_bytes(),
            len(self._bodies),
            max(self._next_delta - 1, 0),
            self._first_ts if self._first_ts is not None else NO_TIMESTAMP,
            self._log_append_time if self._log_append_time is not None else self._max_ts,
            attributes=self._attributes,
            compression_level=self._level,
            base_offset=self._base_offset,
            partition_leader_epoch=self._partition_leader_epoch,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
        )


def assemble_batch(
    records: bytes,
    count: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    *,
    attributes: int = 0,
    compression_level: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch around ``records`` (the uncompressed records section: length-prefixed
    records): compressed with the codec in ``attributes``' low bits, header and CRC."""
    codec = attributes & 0x07
    payload = compress(codec, records, magic=2, level=compression_level) if codec else records
    try:
        header = HEADER.pack(
            base_offset,
            MIN_BATCH_LENGTH + len(payload),
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    except struct.error as exc:
        raise ValueError(f"batch field out of range: {exc}") from None
    tail = header[ATTRIBUTES_OFFSET:]
    crc = crc32c(payload, crc32c(tail))
    return b"".join((header[:CRC_OFFSET], crc.to_bytes(4, "big"), tail, payload))


# ------------------------------------------------------------------ control records


class ControlRecordType(IntEnum):
    """Type stored in the key of a control record."""

    ABORT = 0
    COMMIT = 1


_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


def parse_control_key(key: bytes | None) -> tuple[int, int]:
    """Return ``(version, type)`` from a control record key (version 0: int16, int16)."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key is shorter than 4 bytes")
    version, ctype = _CONTROL_KEY.unpack_from(key)
    return version, ctype


def end_txn_marker(commit: bool, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """Key and value of the COMMIT / ABORT marker a transaction coordinator writes."""
    ctype = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return _CONTROL_KEY.pack(0, ctype), _END_TXN_VALUE.pack(0, coordinator_epoch)


def marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytes:
    """The control batch a transaction coordinator's WriteTxnMarkers puts in a partition: one
    COMMIT or ABORT record, transactional, never compressed (offsets assigned on append)."""
    b = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True, is_control=True)
    key, value = end_txn_marker(commit, coordinator_epoch)
    b.append(timestamp, key, value)
    return b.build()


def control_marker(batch: Buffer, record_count: int = 1) -> tuple[int, int]:
    """``(type, coordinator epoch)`` of a control batch's first record (``batch``: the whole v2
    batch; control batches are never compressed): the type from the key (ControlRecordType),
    the epoch from an end-transaction marker's value; -1 for what is missing or too short."""
    if record_count <= 0 or len(batch) <= HEADER_SIZE:
        return -1, -1
    try:
        records = decode_records(memoryview(batch)[HEADER_SIZE:], record_count, 0, 0)
    except (CorruptRecordError, ValueError, IndexError):
        return -1, -1
    if not records or records[0].key is None or len(records[0].key) < 4:
        return -1, -1
    ctype = int(_CONTROL_KEY.unpack_from(records[0].key)[1])
    value = records[0].value
    epoch = _END_TXN_VALUE.unpack_from(value)[1] if value is not None and len(value) >= 6 else -1
    return ctype, int(epoch)
