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
precomputed tables, and runs of records with the same layout (same field widths,
key and value lengths, no headers) are read with one precompiled ``struct``
call per record, with every field still checked.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from enum import IntEnum
from itertools import chain, islice
from typing import Any

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
    "decode_records",
    "encode_headers",
    "end_txn_marker",
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
_join = b"".join
_ENC_NONNEG = ENCODED_NONNEG
_ENC_SIGNED = ENCODED_SIGNED

# ----------------------------------------------------------------------- decoding


def _read_headers(buf: bytes, pos: int) -> tuple[list[Header], int]:
    """Read a record's header count and headers at ``pos``."""
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
        hkey = buf[pos:end].decode("utf-8")
        b = buf[end]
        if b < 0x80:
            hvl: int = z1[b]
            pos = end + 1
        else:
            hvl, pos = decode_varint(buf, end)
        if hvl >= 0:
            app((hkey, buf[pos : pos + hvl]))
            pos += hvl
        else:
            app((hkey, None))
    return headers, pos


def _shape_at(buf: bytes, pos: int) -> tuple[int, ...] | None:
    """Layout key of the (already validated) record at ``pos``, or ``None``.

    A record has a fixed layout when its five varints take one or two bytes each
    and it has no headers; the key lists the varint widths and the key and value
    lengths.
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
    if buf[pos] != 0 or max(ls, tss, ods, kls, vls) > 2:
        return None
    return (ls, tss, ods, kls, kl, vls, vl)


_FIELD = ("", "B", "H")
_TABLE = ((), ZIGZAG1, ZIGZAG2)
_Shape = tuple  # (unpack, size, L, tl, tt, to, tk, KL, tv, VL, key_null, value_null)
_SHAPES: dict[tuple[int, ...], _Shape] = {}


def _shape_for(key: tuple[int, ...]) -> _Shape:
    shape = _SHAPES.get(key)
    if shape is None:
        ls, tss, ods, kls, kl, vls, vl = key
        fmt = f">{_FIELD[ls]}B{_FIELD[tss]}{_FIELD[ods]}{_FIELD[kls]}{max(kl, 0)}s{_FIELD[vls]}{max(vl, 0)}sB"
        st = struct.Struct(fmt)
        shape = (
            st.unpack_from,
            st.size,
            st.size - ls,
            _TABLE[ls],
            _TABLE[tss],
            _TABLE[ods],
            _TABLE[kls],
            kl,
            _TABLE[vls],
            vl,
            kl < 0,
            vl < 0,
        )
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        _SHAPES[key] = shape
    return shape


def decode_records(
    buf: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
) -> list[Record]:
    """Decode ``count`` records filling all of ``buf`` (the uncompressed records).

    ``log_append_time`` (the batch's max timestamp for log-append-time batches)
    replaces every record timestamp, as Kafka's readers do.

    Two paths produce identical results. The general path reads each field with
    an inline one- or two-byte table lookup, falling back to a loop only for
    longer varints. When a record has a fixed layout (see :func:`_shape_at`), the
    following records are first tried with one precompiled ``struct`` call that
    returns all fields at once; the varint words are checked through the tables,
    so any record that differs falls back to the general path. Repeated misses
    back off exponentially so mixed-layout data costs little extra.
    """
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    out: list[Record] = []
    app = out.append
    tnew = _tuple_new
    rec_cls = Record
    base_ts = base_timestamp
    z1: tuple[Any, ...] = ZIGZAG1
    z2: tuple[Any, ...] = ZIGZAG2
    pos = 0
    i = 0
    shape_key: tuple[int, ...] | None = None
    unpack = None
    size = length = kl = vl = 0
    tl = tt = to = tk = tv = ZIGZAG1
    key_null = value_null = False
    skip = 0
    backoff = 0
    struct_error = struct.error
    key: bytes | None
    value: bytes | None
    try:
        while i < count:
            if unpack is not None and not skip:
                try:
                    lw, _attr, tw, ow, kw, key, vw, value, hc = unpack(buf, pos)
                except struct_error:
                    unpack = None
                    shape_key = None
                else:
                    tsd = tt[tw]
                    od = to[ow]
                    if (
                        tl[lw] == length
                        and tk[kw] == kl
                        and tv[vw] == vl
                        and not hc
                        and tsd is not None
                        and od is not None
                    ):
                        if key_null:
                            key = None
                        if value_null:
                            value = None
                        app(tnew(rec_cls, (base_offset + od, base_ts + tsd, key, value, [])))
                        pos += size
                        i += 1
                        backoff = 0
                        continue
                    skip = backoff
                    backoff = min(2 * backoff + 1, 63)
            # General path.
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
                pos += r_kl
            else:
                key = None
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
                pos += r_vl
            else:
                value = None
            if buf[pos] == 0:
                headers: list[Header] = []
                pos += 1
            else:
                headers, pos = _read_headers(buf, pos)
            if pos - start != r_len:
                raise CorruptRecordError(f"record length says {r_len} bytes but the record has {pos - start}")
            app(tnew(rec_cls, (base_offset + od, base_ts + tsd, key, value, headers)))
            i += 1
            if skip:
                skip -= 1
            else:
                new_key = _shape_at(buf, rec_start)
                if new_key is None:
                    skip = backoff
                    backoff = min(2 * backoff + 1, 63)
                elif new_key != shape_key:
                    shape_key = new_key
                    (unpack, size, length, tl, tt, to, tk, kl, tv, vl, key_null, value_null) = _shape_for(
                        new_key
                    )
    except IndexError:
        raise TruncatedBatchError("data ends inside a record") from None
    except UnicodeDecodeError:
        raise CorruptRecordError("record header key is not valid UTF-8") from None
    if pos != len(buf):
        raise CorruptRecordError(f"{len(buf) - pos} bytes left after the last of {count} records")
    if log_append_time is not None:
        out = [tnew(rec_cls, (r[0], log_append_time, r[2], r[3], r[4])) for r in out]
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
        payload = self._records_bytes()
        if self._compression:
            payload = compress(self._compression, payload, magic=2, level=self._level)
        first = self._first_ts if self._first_ts is not None else NO_TIMESTAMP
        max_ts = self._log_append_time if self._log_append_time is not None else self._max_ts
        try:
            header = HEADER.pack(
                self._base_offset,
                MIN_BATCH_LENGTH + len(payload),
                self._partition_leader_epoch,
                2,
                0,
                self._attributes,
                max(self._next_delta - 1, 0),
                first,
                max_ts,
                self._producer_id,
                self._producer_epoch,
                self._base_sequence,
                len(self._bodies),
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
