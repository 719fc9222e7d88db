"""key_value rows decoded straight from the batches' bytes (the compiled column decoder) are the
rows the records give one by one: keys, values, nulls, headers, timestamps (log-append time
too), compressed batches, gaps, aborted transactions and batches read in part."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.records import BatchBuilder, Compression, speedups
from odradek.tables.convert import KeyValueRows, committed_records

pytestmark = pytest.mark.skipif(speedups.compiled is None, reason="the compiled decoder is not built")

_bytes = st.one_of(st.none(), st.binary(max_size=12))
_header = st.tuples(st.text(max_size=4), _bytes)
_record = st.tuples(st.integers(-1, 2_000_000_000_000), _bytes, _bytes, st.lists(_header, max_size=3),
                    st.integers(0, 2))
_batch = st.tuples(
    st.lists(_record, min_size=1, max_size=6),
    st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD, Compression.LZ4]),
    st.sampled_from(["plain", "log_append_time", "aborted", "committed"]),
)


def _log(batches: list[Any]) -> tuple[bytes, list[tuple[int, int]]]:
    data = bytearray()
    aborted: list[tuple[int, int]] = []
    offset = 0
    for pid, (records, codec, kind) in enumerate(batches, start=1):
        txn = kind in ("aborted", "committed")
        b = BatchBuilder(compression=codec, base_offset=offset, producer_id=pid if txn else -1,
                         producer_epoch=0 if txn else -1, base_sequence=0 if txn else -1, is_transactional=txn,
                         log_append_time=1_700_000_000_000 if kind == "log_append_time" else None)
        delta = 0
        for ts, key, value, headers, gap in records:
            b.append(max(ts, 0) if kind == "log_append_time" else ts, key, value, headers, offset_delta=delta)
            delta += 1 + gap  # gaps, as compaction leaves
        data += b.build()
        if kind == "aborted":
            aborted.append((pid, offset))
        offset += delta
    return bytes(data), aborted


@given(st.lists(_batch, min_size=1, max_size=5), st.data())
def test_the_rows_decoded_from_the_bytes_are_the_rows_of_the_records(batches: list[Any], data: st.DataObject) -> None:
    raw, aborted = _log(batches)
    _, end = committed_records(raw, aborted, 0, 1 << 40)
    start = data.draw(st.integers(0, end), "start")
    limit = data.draw(st.integers(start, end + 1), "limit")
    fast, after = committed_records(raw, aborted, start, limit)
    slow, after_slow = committed_records(raw, aborted, start, limit)
    assert after == after_slow
    rows = KeyValueRows("t", 2)
    assert fast.key_value_columns() is not None or not fast
    fast_table = rows.convert(fast)[0]
    slow_table = rows.convert(list(slow))[0]  # the records one by one
    assert fast_table.to_pylist() == slow_table.to_pylist()
    assert fast_table.schema == slow_table.schema


def test_a_stretch_read_in_several_pieces_is_one_table() -> None:
    raw, _ = _log([([(1_700_000_000_000 + i, b"k", f"v{i}".encode(), [("h", b"x")], 0) for i in range(4)],
                     Compression.NONE, "plain")] * 1)
    first, after = committed_records(raw, [], 0, 2)
    second, end = committed_records(raw, [], after, 4)
    first.extend(second)
    table = KeyValueRows("t", 0).convert(first)[0]
    assert table["offset"].to_pylist() == [0, 1, 2, 3] and end == 4
    assert table["headers"].to_pylist() == [[{"key": "h", "value": b"x"}]] * 4
