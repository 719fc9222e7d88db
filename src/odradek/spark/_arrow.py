"""Columnar decoding of a partition's fetched bytes straight into ``pyarrow.RecordBatch``.

The executors' hot path.  A Fetch response holds a partition's record batches as bytes.  With
the compiled decoder (:mod:`odradek.records.speedups`), the records of all the response's v2
batches are decoded in one C pass straight into one set of Arrow buffers; if it doubts
anything, or is not built, the pure-Python path below decodes them (and raises the precise
error).  There, each
v2 batch is decoded by :func:`odradek.records.decode_record_columns`, which finds the runs of
records with one layout (fixed-size values, say: nearly all records of a topic) with a few
C-level passes over the bytes, and decodes other records one by one.  A run comes with where
its fields lie (:class:`~odradek.records.v2.RecordRun`), so its columns are cut out of the
batch bytes by Arrow kernels, with no Python work per record: keys and values with one
``binary_slice`` over the records seen as a ``fixed_size_binary`` array (a strided memcpy),
offsets as an arange when they are consecutive, timestamps from runs of equal values.
Records decoded one by one become Arrow arrays from Python lists.

Batches are skipped or filtered exactly as the client does: control batches, records of
aborted transactions (``read_committed``), records before the requested offset (a batch
starts earlier) and at or after the end of the range.  Magic 0/1 message sets take a slow
path through :func:`odradek.records.read_batches` that yields identical columns.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from itertools import groupby
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from odradek.records import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Batch,
    CorruptRecordError,
    RecordColumns,
    RecordsError,
    decode_record_columns,
    decompress,
    iter_batch_headers,
    parse_control_key,
    speedups,
    validate,
)

__all__ = ["HEADERS_TYPE", "Decoded", "arrow_schema", "decode_partition_data"]

HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_RUNS = pa.run_end_encoded(pa.int32(), pa.int64())
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", _TIMESTAMP),
    pa.field("timestampType", pa.int32()),
]
_SCHEMAS = {
    False: pa.schema(_BASE_FIELDS),
    True: pa.schema([*_BASE_FIELDS, pa.field("headers", HEADERS_TYPE)]),
}

_HEADER_SIZE = 61  # v2 batch header
_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ABORT = 0
_MAX_OFFSET = (1 << 31) - 1  # binary arrays have 32-bit offsets
_THOUSAND = 1000
_compiled = speedups.compiled
_last_offset = struct.Struct("<i")  # an Arrow int32 offset


def _decode_pool() -> pa.MemoryPool:
    """The memory pool the compiled decoder's columns come from: jemalloc's where pyarrow has it.

    A response's or a file chunk's columns are a few MiB each, allocated and freed once per batch.
    pyarrow's default pool (mimalloc in its wheels) hands allocations that large back to the
    system when they are freed, so every batch's columns were page-faulted in afresh (measured
    here: the kernel time of reading a topic outside Spark fell from 0.15-0.2 s to 0.015 s a
    million records for the segment files, and by half for a fetch, with jemalloc's pool, which
    keeps them)."""
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        return pa.default_memory_pool()


_POOL = _decode_pool()


def _allocate(size: int) -> pa.Buffer:
    """A buffer for the compiled decoder to fill, from :data:`_POOL`."""
    return pa.allocate_buffer(size, memory_pool=_POOL)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for the source's columns (timestamps in UTC micros)."""
    return _SCHEMAS[bool(include_headers)]


class Decoded(NamedTuple):
    """What one partition's fetched bytes held.

    ``batch`` is ``None`` when no record in ``[offset, until)`` was there; ``next_offset`` is
    where to fetch next (past the last complete batch examined, control batches and aborted
    transactions included); ``complete`` is False when the bytes held only the beginning of
    the batch containing ``offset`` (fetch again with a larger size).
    """

    batch: pa.RecordBatch | None
    next_offset: int
    complete: bool


class _Slow(Exception):
    """The vectorised path cannot take this data; decode it record by record."""


def decode_partition_data(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    offset: int,
    until: int,
    *,
    include_headers: bool = False,
    aborted: Iterable[tuple[int, int]] | None = None,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Decoded:
    """Decode the records at offsets ``offset <= o < until`` in one partition's fetched bytes.

    ``aborted`` lists ``(producer_id, first_offset)`` of aborted transactions (the Fetch
    response's, for ``read_committed``); ``None`` keeps transactional records as they are
    (``read_uncommitted``).  Corrupt data raises :class:`~odradek.records.RecordsError`.
    """
    try:
        return _decode_fast(
            data, topic, partition, offset, until, include_headers, aborted, verify_crc, max_decompressed_size
        )
    except _Slow:
        return _decode_slow(
            data, topic, partition, offset, until, include_headers, aborted, verify_crc, max_decompressed_size
        )


class _Txn:
    """The client's rule for read_committed: skip batches of producers whose transaction was
    aborted (from the aborted transaction's first offset to its abort marker)."""

    __slots__ = ("aborted", "pids")

    def __init__(self, aborted: Iterable[tuple[int, int]] | None) -> None:
        self.aborted: list[tuple[int, int]] | None = (
            sorted(aborted, key=lambda a: a[1]) if aborted is not None else None
        )
        self.pids: set[int] = set()

    def skip(self, attrs: int, last: int, producer_id: int, first_key: Any) -> bool:
        """Whether a v2 batch with these attributes is left out (control batches always)."""
        if not attrs & (_ATTR_TRANSACTIONAL | _ATTR_CONTROL):
            return False
        aborted = self.aborted
        if aborted is None:  # read_uncommitted: only control batches are hidden
            return bool(attrs & _ATTR_CONTROL)
        if attrs & _ATTR_TRANSACTIONAL:
            while aborted and aborted[0][1] <= last:
                self.pids.add(aborted.pop(0)[0])
        if attrs & _ATTR_CONTROL:
            if producer_id in self.pids:
                key = first_key()
                if key is not None and parse_control_key(key)[1] == _ABORT:
                    self.pids.discard(producer_id)
            return True
        return producer_id in self.pids


def _first_control_key(batch_bytes: Any, header: Any, max_size: int) -> Any:
    def get() -> Any:
        recs = Batch(header, batch_bytes, verify_crc=False, max_decompressed_size=max_size).records
        return recs[0].key if recs else None

    return get


def _decode_fast(
    data: Any,
    topic: str,
    partition: int,
    offset: int,
    until: int,
    include_headers: bool,
    aborted: Iterable[tuple[int, int]] | None,
    verify_crc: bool,
    max_size: int,
) -> Decoded:
    builder = _Builder(include_headers)
    txn = _Txn(aborted)
    next_offset = offset
    first_base = -1
    useful = False
    end = 0
    n = len(data)
    view = memoryview(data)
    # the uncompressed batches are decoded in the buffer that holds the data (strided slices of
    # ``bytes`` and ``bytearray`` are C loops; of a view ten times slower), so that a column of a
    # whole response can be cut out of it at once
    whole: bytes | bytearray | None = None
    shift = 0  # position in ``data`` of ``whole[0]``
    pending: list[tuple[tuple[Any, int, int, int, int, int, int | None], int]] = []  # batches for the compiled decoder
    for h in iter_batch_headers(data):
        end = h.position + h.size
        last = h.last_offset
        if last < offset:
            continue
        if h.magic < 2:
            raise _Slow()
        if h.base_offset >= until:  # nothing left before ``until`` (compaction leaves gaps)
            useful = True
            next_offset = max(next_offset, until)
            break
        useful = True
        if verify_crc:
            validate(data, h)
        attrs = h.attributes
        if attrs & (_ATTR_TRANSACTIONAL | _ATTR_CONTROL) and txn.skip(
            attrs, last, h.producer_id, _first_control_key(data, h, max_size)
        ):
            next_offset = last + 1
            continue
        count = h.record_count
        if count < 0:
            raise CorruptRecordError(f"negative record count {count} at offset {h.base_offset}")
        if count:
            lat = h.max_timestamp if attrs & _ATTR_TIMESTAMP_TYPE else None
            tt = 0 if lat is None else 1
            if attrs & 0x07:
                payload = view[h.position + _HEADER_SIZE : end]
                buf: Any = decompress(h.compression, payload, magic=2, max_size=max_size)
                start, stop = 0, len(buf)
            elif _compiled is not None:
                buf, start, stop = data, h.position + _HEADER_SIZE, end
            else:
                if whole is None:
                    whole, shift = _whole(data, view, h.position)
                buf, start, stop = whole, h.position + _HEADER_SIZE - shift, end - shift
            if _compiled is not None:  # decoded together after the loop
                pending.append(((buf, start, stop, count, h.base_offset, h.base_timestamp, lat), tt))
            else:
                segments = decode_record_columns(
                    buf, count, h.base_offset, h.base_timestamp, lat, start=start, stop=stop
                )
                builder.add_all(segments, tt)
            if first_base < 0:
                first_base = h.base_offset
        next_offset = last + 1
        if next_offset >= until:
            break
    if pending and not builder.add_compiled(pending):
        for (buf, start, stop, count, base_offset, base_timestamp, lat), tt in pending:
            segments = decode_record_columns(buf, count, base_offset, base_timestamp, lat, start=start, stop=stop)
            builder.add_all(segments, tt)
    complete = useful or end >= n or n == 0
    if not builder.count:
        return Decoded(None, next_offset, complete)
    batch = builder.build(topic, partition)
    offsets = batch.column(4)
    if first_base < offset or next_offset > until:
        lo, hi = pc.min_max(offsets).values()
        if lo.as_py() < offset or hi.as_py() >= until:
            mask = pc.and_(
                pc.greater_equal(offsets, pa.scalar(offset, pa.int64())),
                pc.less(offsets, pa.scalar(until, pa.int64())),
            )
            batch = batch.filter(mask)
    if batch.num_rows == 0:
        return Decoded(None, next_offset, complete)
    return Decoded(batch, next_offset, complete)


def _whole(data: Any, view: memoryview, first: int) -> tuple[bytes | bytearray, int]:
    """The buffer to decode ``data``'s uncompressed batches in, and the position in ``data`` of
    its first byte: ``data`` itself, the ``bytearray`` a view of it lies in (a client's response
    buffer), or else a copy from ``first`` (the first batch needed) on."""
    if type(data) is bytes or type(data) is bytearray:
        return data, 0
    owner = view.obj
    if type(owner) is bytearray and view.contiguous and view.itemsize == 1 and view.ndim == 1:
        # both export their memory: where ``view`` starts inside ``owner``
        return owner, pa.py_buffer(owner).address - pa.py_buffer(view).address
    return bytes(view[first:]), first


class _Builder:
    """The columns of a record batch, built a segment (:class:`RecordColumns`) at a time.

    Keys and values of runs are kept as where they lie (:class:`_Cut`) and cut out at the end,
    the runs that lie in one buffer with one length in one Arrow call; those of records decoded
    one by one, and headers, become Arrow arrays at once.  Offsets and timestamps are kept as
    ranges and runs of equal values while they are, and become arrays at the end."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.count = 0
        self.keys: list[pa.Array | _Cut] = []
        self.values: list[pa.Array | _Cut] = []
        self.headers: list[pa.Array] = []
        self.offsets: list[range | list[int] | pa.Array] = []
        self.timestamps: list[list[tuple[int, int]] | list[int] | pa.Array] = []  # runs, ms values, or us arrays
        self.types: list[tuple[int, int]] = []  # (timestamp type, records)

    def add_all(self, segments: list[RecordColumns], ts_type: int) -> None:
        for cols in segments:
            self.add(cols, ts_type)

    def add(self, cols: RecordColumns, ts_type: int) -> None:
        k = cols.num_records
        self.count += k
        self.keys.append(_part(cols, True))
        self.values.append(_part(cols, False))
        if self.include_headers:
            self.headers.append(_headers(cols))
        offsets = cols.offsets
        self.offsets.append(offsets if isinstance(offsets, range) and offsets.step == 1 else list(offsets))
        run = cols.run
        if run is not None and run.timestamp_runs is not None:
            self.timestamps.append(run.timestamp_runs)
        else:
            stamps = list(cols.timestamps)
            self.timestamps.append([(t, len(list(g))) for t, g in groupby(stamps)] if k < 64 else stamps)
        self._count_type(ts_type, k)

    def _count_type(self, ts_type: int, k: int) -> None:
        """``k`` more records of timestamp type ``ts_type`` (kept as runs)."""
        if self.types and self.types[-1][0] == ts_type:
            self.types[-1] = (ts_type, self.types[-1][1] + k)
        else:
            self.types.append((ts_type, k))

    def add_compiled(self, batches: list[tuple[tuple[Any, int, int, int, int, int, int | None], int]]) -> bool:
        """Add the records of ``batches`` (``(buf, start, stop, count, base_offset,
        base_timestamp, log_append_time)`` and the timestamp type of each), decoded together by
        the compiled decoder straight into one set of Arrow buffers; False (nothing added) when
        it finds something wrong: the pure-Python decoder then says what."""
        assert _compiled is not None
        try:
            n, offsets, stamps, key, value, headers = _compiled.decode_columns(
                [spec for spec, _ in batches], self.include_headers, _allocate
            )
            if headers is not None:
                header_array = _compiled_headers(n, headers)
                header_array.validate(full=True)  # header keys are strings: UTF-8 checked here
        except (ValueError, pa.ArrowInvalid):
            return False
        self.count += n
        self.keys.append(_compiled_binary(n, key))
        self.values.append(_compiled_binary(n, value))
        if self.include_headers:
            self.headers.append(header_array)
        self.offsets.append(pa.Array.from_buffers(pa.int64(), n, [None, offsets]))
        self.timestamps.append(pa.Array.from_buffers(pa.int64(), n, [None, stamps]))
        for spec, ts_type in batches:
            self._count_type(ts_type, spec[3])
        return True

    def build(self, topic: str, partition: int) -> pa.RecordBatch:
        n = self.count
        if len(self.types) == 1:
            ts_types = _constant(self.types[0][0], pa.int32(), n)
        else:
            ts_types = _concat([_constant(t, pa.int32(), c) for t, c in self.types])
        columns = [
            _binary_column(self.keys),
            _binary_column(self.values),
            _constant(topic, pa.string(), n),
            _constant(partition, pa.int32(), n),
            _offsets(self.offsets),
            _timestamps(self.timestamps),
            ts_types,
        ]
        if self.include_headers:
            columns.append(_concat(self.headers))
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self.include_headers))


_CONSTANTS: dict[tuple[Any, pa.DataType], pa.Array] = {}


def _constant(value: Any, typ: pa.DataType, n: int) -> pa.Array:
    """``value`` ``n`` times: a slice of a cached array (the topic, partition and timestamp
    type columns hold one value)."""
    key = (value, typ)
    cached = _CONSTANTS.get(key)
    if cached is None or len(cached) < n:
        if len(_CONSTANTS) >= 64:
            _CONSTANTS.clear()
        size = max(n, 2 * len(cached) if cached is not None else 0, 1 << 16)
        cached = _CONSTANTS[key] = pa.repeat(pa.scalar(value, typ), size)
    return cached.slice(0, n)


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _compiled_binary(
    n: int, column: tuple[pa.Buffer, pa.Buffer, pa.Buffer | None, int], typ: pa.DataType | None = None
) -> pa.Array:
    """A binary (or string) column from the compiled decoder's buffers; its data buffer is cut
    to the bytes the offsets use (it was sized by a bound)."""
    offsets, data, validity, nulls = column
    typ = pa.binary() if typ is None else typ
    used = _last_offset.unpack_from(offsets, 4 * n)[0]
    if used < data.size:
        data = data.slice(0, used)
    return pa.Array.from_buffers(typ, n, [validity, offsets, data], null_count=nulls)


def _compiled_headers(n: int, headers: tuple[Any, ...]) -> pa.Array:
    list_offsets, list_validity, list_nulls, count, keys, values = headers
    fields = pa.StructArray.from_arrays(
        [_compiled_binary(count, keys, pa.string()), _compiled_binary(count, values)],
        fields=list(HEADERS_TYPE.value_type),
    )
    return pa.Array.from_buffers(
        HEADERS_TYPE, n, [list_validity, list_offsets], null_count=list_nulls, children=[fields]
    )


def _offsets(columns: list[range | list[int] | pa.Array]) -> pa.Array:
    """The offsets column: consecutive ``range``s (nearly always) merged into aranges."""
    parts: list[pa.Array] = []
    start = stop = 0
    for column in columns:
        if isinstance(column, pa.Array):
            if stop > start:
                parts.append(_arange64(start, stop))
                start = stop = 0
            parts.append(column)
            continue
        if isinstance(column, range):
            if stop == column.start and stop > start:
                stop = column.stop
                continue
            if stop > start:
                parts.append(_arange64(start, stop))
            start, stop = column.start, column.stop
            continue
        if stop > start:
            parts.append(_arange64(start, stop))
            start = stop = 0
        parts.append(pa.array(column, pa.int64()))
    if stop > start:
        parts.append(_arange64(start, stop))
    return _concat(parts)


def _timestamps(columns: list[list[tuple[int, int]] | list[int] | pa.Array]) -> pa.Array:
    """The timestamp column (microseconds): runs of equal timestamps run-end decoded."""
    parts: list[pa.Array] = []
    runs: list[tuple[int, int]] = []
    for column in columns:
        if not isinstance(column, pa.Array) and column and isinstance(column[0], tuple):
            runs += column  # type: ignore[arg-type]
            continue
        if runs:
            parts.append(_decode_runs(runs))
            runs = []
        if isinstance(column, pa.Array):  # microseconds already
            parts.append(column)
            continue
        parts.append(pc.multiply(pa.array(column, pa.int64()), pa.scalar(_THOUSAND, pa.int64())))
    if runs:
        parts.append(_decode_runs(runs))
    return _concat(parts).view(_TIMESTAMP)


def _decode_runs(runs: list[tuple[int, int]]) -> pa.Array:
    if len(runs) == 1:
        t, count = runs[0]
        return pa.repeat(pa.scalar(t * _THOUSAND, pa.int64()), count)
    ends = []
    at = 0
    for _, count in runs:
        at += count
        ends.append(at)
    values = pa.array([t * _THOUSAND for t, _ in runs], pa.int64())
    # from_buffers, not from_arrays: that one retries importing the absent dateutil every call
    encoded = pa.RunEndEncodedArray.from_buffers(_RUNS, at, [None], 0, 0, [pa.array(ends, pa.int32()), values])
    return pc.run_end_decode(encoded)


class _Cut(NamedTuple):
    """The keys or values of a run: ``length`` bytes (-1: null) at ``first``, ``first + size``,
    ... (``records`` of them) in ``buf``."""

    buf: Any
    first: int
    size: int
    records: int
    length: int

    @property
    def stop(self) -> int:
        """Where the last of its slices ends in ``buf``."""
        return self.first + (self.records - 1) * self.size + self.length


def _part(cols: RecordColumns, key: bool) -> pa.Array | _Cut:
    """Keys or values: of a run, where they lie; else an array of the Python objects."""
    run = cols.run
    if run is None:
        return pa.array(list(cols.keys if key else cols.values), pa.binary())
    at, length = (run.key_at, run.key_length) if key else (run.value_at, run.value_length)
    return _Cut(run.buf, run.start + at, run.size, cols.num_records, length)


def _binary_column(parts: list[pa.Array | _Cut]) -> pa.Array:
    """The column of ``parts`` in order; consecutive cuts in one buffer with one length are cut
    out together."""
    arrays: list[pa.Array] = []
    group: list[_Cut] = []
    for p in parts:
        if isinstance(p, _Cut):
            if group and (p.buf is not group[0].buf or p.length != group[0].length):
                arrays.append(_gather(group))
                group = []
            group.append(p)
            continue
        if group:
            arrays.append(_gather(group))
            group = []
        arrays.append(p)
    if group:
        arrays.append(_gather(group))
    return _concat(arrays)


def _gather(cuts: list[_Cut]) -> pa.Array:
    """The bytes of ``cuts`` (one buffer, one length, in order) as one binary array.

    The buffer is seen as a binary array whose elements start where the wanted bytes start
    and run to the next one's start; ``binary_slice`` keeps the first ``length`` bytes of each:
    a single copy of the keys or values, however many runs."""
    n = sum(c.records for c in cuts)
    length = cuts[0].length
    if length < 0:
        return pa.nulls(n, pa.binary())
    if length == 0:
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(bytes(4 * (n + 1))), pa.py_buffer(b"")])
    if cuts[-1].stop > _MAX_OFFSET:
        # beyond 32-bit offsets (not from a fetch response): a run at a time, each in a
        # buffer of its own bytes
        return _concat([_cut_out([_rebased(c)]) for c in cuts])
    return _cut_out(cuts)


def _rebased(cut: _Cut) -> _Cut:
    return cut._replace(buf=pa.py_buffer(cut.buf).slice(cut.first, cut.stop - cut.first), first=0)


def _cut_out(cuts: list[_Cut]) -> pa.Array:
    starts = [
        pc.add(pc.multiply(_arange32(c.records), pa.scalar(c.size, pa.int32())), pa.scalar(c.first, pa.int32()))
        for c in cuts
    ]
    starts.append(pa.array([cuts[-1].stop], pa.int32()))
    offsets = pa.concat_arrays(starts)
    buf = cuts[0].buf
    data = buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)
    spans = pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, offsets.buffers()[1], data])
    return pc.binary_slice(spans, 0, cuts[0].length)


def _headers(cols: RecordColumns) -> pa.Array:
    if cols.run is not None:  # runs have no headers
        return pa.nulls(cols.num_records, HEADERS_TYPE)
    return pa.array([list(h) or None for h in cols.headers], HEADERS_TYPE)


#: empty at import: ``pa.array`` of a Python list imports pandas (pyarrow's check for pandas
#: objects), ~0.2 s that Spark's planner workers, which import this module and never decode, need not pay
_ARANGE64: list[pa.Array] = [pa.nulls(0, pa.int64())]
_ARANGE32: list[pa.Array] = [pa.nulls(0, pa.int32())]


def _arange64(start: int, stop: int) -> pa.Array:
    """start, start + 1, ..., stop - 1 as int64."""
    n = stop - start
    cached = _ARANGE64[0]
    if len(cached) < n:
        cached = _ARANGE64[0] = pa.array(range(max(n, 2 * len(cached), 1 << 16)), pa.int64())
    return pc.add(cached.slice(0, n), pa.scalar(start, pa.int64()))


def _arange32(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int32 (a slice of a cached array)."""
    cached = _ARANGE32[0]
    if len(cached) < n:
        cached = _ARANGE32[0] = pa.array(range(max(n, 2 * len(cached), 1 << 16)), pa.int32())
    return cached.slice(0, n)


def _decode_slow(
    data: Any,
    topic: str,
    partition: int,
    offset: int,
    until: int,
    include_headers: bool,
    aborted: Iterable[tuple[int, int]] | None,
    verify_crc: bool,
    max_size: int,
) -> Decoded:
    """Record by record through :func:`odradek.records.read_batches` (any magic)."""
    from odradek.records import read_batches

    keys: list[Any] = []
    values: list[Any] = []
    offs: list[int] = []
    stamps: list[int] = []
    types: list[int] = []
    heads: list[Any] = []
    txn = _Txn(aborted)
    next_offset = offset
    useful = False
    end = 0
    n = len(data)
    try:
        for batch in read_batches(data, verify_crc=verify_crc, max_decompressed_size=max_size):
            h = batch.header
            end = h.position + h.size
            last = h.last_offset
            if last < offset:
                continue
            useful = True
            if h.magic >= 2 and h.base_offset >= until:
                next_offset = max(next_offset, until)
                break
            attrs = h.attributes
            if h.magic >= 2 and txn.skip(attrs, last, h.producer_id, lambda b=batch: _key0(b)):
                next_offset = last + 1
                continue
            tt = -1 if h.magic == 0 else (1 if attrs & _ATTR_TIMESTAMP_TYPE else 0)
            for r in batch.records:
                if offset <= r.offset < until:
                    keys.append(r.key)
                    values.append(r.value)
                    offs.append(r.offset)
                    stamps.append(r.timestamp * 1000)
                    types.append(tt)
                    heads.append(list(r.headers) or None)
            next_offset = last + 1
            if next_offset >= until:
                break
    except RecordsError:
        if not offs and next_offset <= offset:
            raise
    complete = useful or end >= n or n == 0
    if not offs:
        return Decoded(None, next_offset, complete)
    count = len(offs)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(offs, pa.int64()),
        pa.array(stamps, pa.int64()).view(_TIMESTAMP),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array(heads, HEADERS_TYPE))
    return Decoded(
        pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers)), next_offset, complete
    )


def _key0(batch: Batch) -> Any:
    recs = batch.records
    return recs[0].key if recs else None
