"""Down-conversion's contract, for any log data (hypothesis): the converted message sets hold the
records from the fetch offset on (control batches dropped), at their offsets, with their keys,
values and (magic 1) timestamps; whole entries only; within the byte limit except for a first
entry that alone passes it (KIP-283's "at least one message set"); everything when there is no
limit.  And damaged log data is refused with a RecordsError (the fetch answers CORRUPT_MESSAGE),
never another exception."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from odradek.broker.compat import down_convert
from odradek.records import (
    BatchBuilder,
    Compression,
    RecordsError,
    iter_batch_headers,
    marker_batch,
    read_batches,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
BASE_TS = 1_700_000_000_000

_field = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def logs(draw: Any) -> tuple[bytes, list[tuple[int, int, bytes | None, bytes | None]]]:
    """Batches as a log holds them (offsets assigned), and their records (offset, timestamp,
    key, value) as an old consumer should see them (timestamps as magic 1 carries them)."""
    data = bytearray()
    expected: list[tuple[int, int, bytes | None, bytes | None]] = []
    offset = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 5)) == 0:  # a transaction marker: dropped
            marker = bytearray(marker_batch(7, 0, True, 0, BASE_TS))
            marker[0:8] = offset.to_bytes(8, "big")
            data += marker
            offset += 1
            continue
        n = draw(st.integers(1, 40))
        gaps = draw(st.booleans())  # a compacted batch: offsets with holes
        lat = BASE_TS + 99 if draw(st.booleans()) else None
        b = BatchBuilder(compression=draw(st.sampled_from(CODECS)), base_offset=offset, log_append_time=lat)
        delta = 0
        for i in range(n):
            key, value = draw(_field), draw(_field)
            ts = BASE_TS + draw(st.integers(-5, 5)) * 1000 + i
            b.append(ts, key, value, offset_delta=delta)
            expected.append((offset + delta, lat if lat is not None else ts, key, value))
            delta += draw(st.integers(1, 3)) if gaps else 1
        data += b.build()
        offset += delta
    return bytes(data), expected


@given(
    log=logs(),
    magic=st.sampled_from([0, 1]),
    start=st.integers(0, 200),
    limit=st.one_of(st.none(), st.integers(0, 3000)),
)
def test_down_conversion(log: tuple[bytes, list[Any]], magic: int, start: int, limit: int | None) -> None:
    data, records = log
    fetch_offset = records[0][0] + start if records else 0
    wanted = [r for r in records if r[0] >= fetch_offset]
    out = down_convert(data, magic, fetch_offset, limit)
    entries = list(iter_batch_headers(out))
    assert sum(h.size for h in entries) == len(out)  # whole entries only
    batches = list(read_batches(out))
    assert {b.magic for b in batches} <= {magic}
    got = [(r.offset, r.timestamp, r.key, r.value) for b in batches for r in b.records]
    if magic == 0:
        wanted = [(o, -1, k, v) for o, _ts, k, v in wanted]
    assert got == wanted[: len(got)]
    if limit is None:
        assert len(got) == len(wanted)
    else:
        assert len(out) <= limit or len(entries) == 1
        if wanted:
            assert got  # at least one message set


@given(log=logs(), magic=st.sampled_from([0, 1]), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4))
def test_damaged_data_is_refused_as_records_error(log: tuple[bytes, list[Any]], magic: int, flips: list[tuple[int, int]]) -> None:
    data = bytearray(log[0])
    for at, xor in flips:
        data[at % len(data)] ^= xor
    with contextlib.suppress(RecordsError):
        down_convert(bytes(data), magic, -1, None)
