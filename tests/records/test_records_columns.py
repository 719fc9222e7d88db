"""The column-wise decoding of runs of records with one layout (``odradek.records.v2``).

Every test compares it with the record-by-record path (``_shape_at`` patched to find no layout,
as in ``test_general_path_alone_matches``): same records, same errors.  The data is shaped to
hit the run path's cases: long runs whose varints change width (offset deltas of one, two and
three bytes, timestamp deltas of one and two), runs of equal timestamps, gaps in the offsets,
null and empty keys and values, log-append time, and corruption anywhere in a run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import odradek.records as odr
from odradek.records import v2

from .records_helpers import PROFILE, TS0

Spec = tuple[int, int, int | None, int | None, int]  # count, ts step, key len, value len, offset step


@contextmanager
def general_path() -> Iterator[None]:
    saved = v2._shape_at
    v2._shape_at = lambda buf, pos: None  # type: ignore[assignment]
    try:
        yield
    finally:
        v2._shape_at = saved  # type: ignore[assignment]


def build(specs: list[Spec], *, base_offset: int = 1000, **kwargs: Any) -> bytes:
    b = odr.BatchBuilder(base_offset=base_offset, **kwargs)
    ts = TS0
    delta = 0
    n = 0
    for count, ts_every, key_len, value_len, offset_step in specs:
        for _ in range(count):
            if ts_every and n % ts_every == 0:
                ts += 1
            key = None if key_len is None else bytes([n % 251]) * key_len
            value = None if value_len is None else bytes([(7 * n) % 253]) * value_len
            b.append(ts, key, value, offset_delta=delta)
            delta += offset_step
            n += 1
    return b.build()


def payload_args(data: bytes) -> tuple[bytes, int, int, int, int | None]:
    [batch] = list(odr.read_batches(data))
    h = batch.header
    lat = h.max_timestamp if h.attributes & v2.ATTR_TIMESTAMP_TYPE else None
    return data[v2.HEADER_SIZE :], h.record_count, h.base_offset, h.base_timestamp, lat


def decode_both(args: tuple[Any, ...]) -> tuple[Any, Any]:
    """(fast, general) results: records, or the type and text of the error raised."""
    out = []
    for ctx in (contextmanager(lambda: iter([None]))(), general_path()):
        with ctx:
            try:
                out.append(v2.decode_records(*args))
            except odr.RecordsError as exc:
                out.append((type(exc), str(exc)))
    return out[0], out[1]


def from_run(run: v2.RecordRun, n: int) -> tuple[list[Any], list[Any], list[Any] | None]:
    """Keys, values and timestamps as a column-wise reader finds them from ``run``."""

    def cut(at: int, length: int) -> list[Any]:
        if length < 0:
            return [None] * n
        return [run.buf[run.start + j * run.size + at :][:length] for j in range(n)]

    stamps = None if run.timestamp_runs is None else [t for t, c in run.timestamp_runs for _ in range(c)]
    return cut(run.key_at, run.key_length), cut(run.value_at, run.value_length), stamps


def flatten(columns: list[v2.RecordColumns]) -> list[odr.Record]:
    rows: list[odr.Record] = []
    for c in columns:
        cols = [list(c.offsets), list(c.timestamps), list(c.keys), list(c.values), list(c.headers)]
        assert all(len(col) == c.num_records for col in cols)
        if c.run is not None:
            keys, values, stamps = from_run(c.run, c.num_records)
            assert keys == cols[2] and values == cols[3] and stamps in (None, cols[1])
            assert cols[4] == [[]] * c.num_records
        rows.extend(odr.Record(*r) for r in zip(*cols))
    return rows


specs = st.lists(
    st.tuples(
        st.integers(1, 300),
        st.sampled_from([0, 1, 2, 7, 50, 1000]),
        st.sampled_from([None, 0, 1, 5, 70]),
        st.sampled_from([None, 0, 3, 100, 200]),
        st.sampled_from([1, 1, 1, 2, 100]),
    ),
    min_size=1,
    max_size=6,
)


@given(specs, st.booleans())
@PROFILE
def test_runs_decode_as_the_general_path(spec: list[Spec], log_append: bool) -> None:
    data = build(spec, log_append_time=TS0 + 99_999 if log_append else None)
    args = payload_args(data)
    fast, general = decode_both(args)
    assert isinstance(fast, list) and fast == general
    assert flatten(v2.decode_record_columns(*args)) == general
    assert [tuple(r) for r in odr.read_batches(data).__next__().records] == [tuple(r) for r in general]


@pytest.mark.parametrize(
    "spec",
    [
        [(9000, 0, None, 100, 1)],  # offset deltas of 1, 2 and 3 bytes, one timestamp
        [(9000, 3, None, 10, 1)],  # timestamps change every third record, then widen
        [(4000, 1, 4, 20, 3)],  # gaps: offset deltas are not a range (3-byte ones too)
        [(20000, 997, None, 0, 1)],
        [(100, 1, None, None, 1), (100, 0, 0, 0, 1), (5000, 10, 3, 1, 2)],
    ],
)
def test_long_runs(spec: list[Spec]) -> None:
    args = payload_args(build(spec))
    fast, general = decode_both(args)
    assert isinstance(fast, list) and fast == general
    columns = v2.decode_record_columns(*args)
    runs = [c for c in columns if c.run is not None]
    assert sum(c.num_records for c in runs) > 0.9 * sum(c.num_records for c in columns)
    # consecutive offsets (deltas of one, two and three bytes) are found to be ranges
    if len({step for *_, step in spec}) == 1:
        assert all(isinstance(c.offsets, range) for c in runs) == (spec[0][4] == 1)
    assert flatten(v2.decode_record_columns(*args)) == general


def test_headers_are_new_lists() -> None:
    args = payload_args(build([(500, 0, None, 10, 1)]))
    records = v2.decode_records(*args)
    assert records[0].headers == [] and records[0].headers is not records[1].headers
    records[0].headers.append(("h", None))
    assert records[1].headers == [] and records[-1].headers == []
    [first, *_] = v2.decode_record_columns(*args)
    assert first.run is not None  # a run, not records decoded one by one
    headers = list(first.headers)
    assert len(headers) == first.num_records and len({id(h) for h in headers}) == len(headers)


def test_runs_with_headers_and_varying_records_in_between() -> None:
    b = odr.BatchBuilder(base_offset=5)
    for i in range(3000):
        headers = [("h", b"x" * (i % 3))] if i % 500 == 7 else []
        value = b"v" * (100 if i % 900 else 300)
        b.append(TS0 + i // 40, b"key" if i % 1000 else None, value, headers)
    args = payload_args(b.build())
    fast, general = decode_both(args)
    assert isinstance(fast, list) and fast == general and len(fast) == 3000
    assert flatten(v2.decode_record_columns(*args)) == general


@given(st.data())
@PROFILE
def test_corruption_in_a_run_is_found_as_by_the_general_path(data: st.DataObject) -> None:
    spec = [(data.draw(st.integers(40, 400)), data.draw(st.sampled_from([0, 3, 100])), None, 30, 1)]
    buf, count, base, base_ts, lat = payload_args(build(spec))
    bad = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(bad) - 1))
        bad[at] = data.draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, bad[at] ^ 0x80, bad[at] ^ 0x01]))
    cut = data.draw(st.sampled_from([len(bad), len(bad) - 1, len(bad) // 2]))
    count = data.draw(st.sampled_from([count, count - 1, count + 1]))
    args = (bytes(bad[:cut]), count, base, base_ts, lat)
    fast, general = decode_both(args)
    assert fast == general
    if isinstance(general, list):
        assert flatten(v2.decode_record_columns(*args)) == general
    else:
        with pytest.raises(general[0]):
            v2.decode_record_columns(*args)


@given(specs, st.binary(max_size=40), st.binary(max_size=40), st.sampled_from([0, -1, 1]), st.booleans())
@PROFILE
def test_records_inside_a_larger_buffer(spec: list[Spec], before: bytes, after: bytes, shift: int, truncate: bool) -> None:
    """``start``/``stop``: the same columns (run positions in the whole buffer) as of the records
    alone; when those fail (a record runs past the end, bytes are left), so does the part (the
    error may differ: past ``stop`` a record meets other bytes, not the end of the data)."""
    buf, count, base, base_ts, lat = payload_args(build(spec))
    if truncate:
        buf = buf[: len(buf) * 2 // 3]
    # a longer or shorter count also moves where the records end relative to ``stop``
    count = max(count + shift, 0)
    whole = before + buf + after
    try:
        alone: Any = flatten(v2.decode_record_columns(buf, count, base, base_ts, lat))
    except odr.RecordsError:
        alone = "error"
    try:
        inside: Any = v2.decode_record_columns(whole, count, base, base_ts, lat, start=len(before), stop=len(before) + len(buf))
    except odr.RecordsError:
        inside = "error"
    if isinstance(inside, list):
        assert all(c.run is None or len(before) <= c.run.start < len(before) + len(buf) for c in inside)
        inside = flatten(inside)
    assert inside == alone


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(codec: str) -> None:
    data = build([(3000, 5, None, 100, 1)], compression=odr.Compression[codec.upper()])
    plain = build([(3000, 5, None, 100, 1)])
    batch = next(odr.read_batches(data))
    assert flatten(batch.record_columns()) == list(next(odr.read_batches(plain)).records)


def test_batch_record_columns_of_every_magic() -> None:
    legacy = odr.LegacyBatchBuilder(1, base_offset=3)
    for i in range(5):
        legacy.append(TS0 + i, None, b"m%d" % i)
    for data in (legacy.build(), build([(50, 2, 1, 1, 1)])):
        batch = next(odr.read_batches(data))
        assert flatten(batch.record_columns()) == list(batch.records)
        assert flatten(batch.record_columns()) == list(batch.records)  # again, after ``records``
    assert next(odr.read_batches(odr.BatchBuilder().build())).record_columns() == []
