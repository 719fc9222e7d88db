"""BatchBuilder and LegacyBatchBuilder details, and both v2 decoding paths."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

import odradek.records as odr
from odradek.records import v2

from .records_helpers import PROFILE, TS0, RecordInput, kafka_read, odr_build_v2, odr_read


def test_size_in_bytes_and_count_are_exact() -> None:
    builder = odr.BatchBuilder()
    assert builder.size_in_bytes == 61 and builder.record_count == 0
    for i, value in enumerate([b"", b"x" * 50, b"y" * 200, b"z" * 9000, None]):
        builder.append(TS0 + i * 100_000, b"k" * i * 30, value, [("a", b"b")] if i % 2 else None)
    data = builder.build()
    assert builder.size_in_bytes == len(data)
    assert builder.record_count == 5


def test_large_fields_and_deltas_beyond_the_tables() -> None:
    records: list[RecordInput] = [
        (TS0, b"k" * 9000, b"v" * 70_000, [("h" * 9000, b"x" * 9000)]),
        (TS0 - 10**10, None, b"", []),
        (TS0 + 2**40, b"", None, [("", None)] * 9000),
    ]
    data = odr_build_v2(records)
    assert odr_read(data) == [(i, ts, k, v_, h) for i, (ts, k, v_, h) in enumerate(records)]
    assert kafka_read(data) == odr_read(data)


def test_offset_deltas_with_gaps() -> None:
    builder = odr.BatchBuilder(base_offset=100)
    assert builder.append(TS0, None, b"a") == 0
    assert builder.append(TS0, None, b"b", offset_delta=10) == 10
    assert builder.append(TS0, None, b"c") == 11
    assert builder.append(TS0, None, b"d", offset_delta=20_000) == 20_000
    with pytest.raises(ValueError):
        builder.append(TS0, None, b"e", offset_delta=5)
    data = builder.build()
    [batch] = list(odr.read_batches(data))
    assert [r.offset for r in batch.records] == [100, 110, 111, 20_100]
    assert batch.last_offset == 20_100 and batch.record_count == 4


def test_empty_batch() -> None:
    data = odr.BatchBuilder(producer_id=5, producer_epoch=1, base_sequence=9).build()
    [batch] = list(odr.read_batches(data))
    assert batch.records == [] and batch.record_count == 0
    assert batch.base_timestamp == -1 and batch.max_timestamp == -1
    assert odr.LegacyBatchBuilder(1, compression=odr.Compression.GZIP).build() == b""


def test_builder_argument_errors() -> None:
    with pytest.raises(ValueError):
        odr.BatchBuilder(compression=5)
    with pytest.raises(ValueError):
        odr.BatchBuilder(is_transactional=True)
    with pytest.raises(TypeError):
        odr.BatchBuilder().append("now", None, b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        odr.BatchBuilder().append(TS0, "key", b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        odr.BatchBuilder().append(TS0, None, b"", [(b"bytes-name", b"")])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        b = odr.BatchBuilder(producer_id=2**63)
        b.append(TS0, None, b"")
        b.build()
    with pytest.raises(ValueError):
        odr.LegacyBatchBuilder(2)
    with pytest.raises(ValueError):
        odr.LegacyBatchBuilder(1, compression=odr.Compression.ZSTD)
    with pytest.raises(ValueError):
        odr.LegacyBatchBuilder(0, log_append_time=5)
    with pytest.raises(TypeError):
        odr.LegacyBatchBuilder(1).append(TS0, "k", b"")  # type: ignore[arg-type]


def test_header_iterables_are_accepted() -> None:
    data = odr_build_v2([(TS0, None, b"v", iter([("a", b"1"), ("b", None)]))])  # type: ignore[list-item]
    assert odr_read(data)[0][4] == [("a", b"1"), ("b", None)]


def test_legacy_builder_layout() -> None:
    builder = odr.LegacyBatchBuilder(1, compression=odr.Compression.GZIP, base_offset=40)
    assert [builder.append(TS0 + i, None, b"x") for i in range(3)] == [40, 41, 42]
    assert builder.record_count == 3
    data = builder.build()
    offset, size, _crc, magic, attributes, timestamp = struct.unpack_from(">qiIbbq", data)
    assert (offset, magic, attributes, timestamp, size + 12) == (42, 1, 1, TS0 + 2, len(data))
    builder = odr.LegacyBatchBuilder(0, base_offset=7)
    builder.extend([(TS0, b"a", None), (TS0, None, b"b")])
    assert [
        (r.offset, r.timestamp, r.key, r.value) for b in odr.read_batches(builder.build()) for r in b
    ] == [
        (7, -1, b"a", None),
        (8, -1, None, b"b"),
    ]


# --- the fixed-layout fast path and the general path agree ---------------------------


@st.composite
def runs(draw: st.DrawFn) -> list[RecordInput]:
    """Records in runs that share a layout, with layout changes between runs."""
    out: list[RecordInput] = []
    for _ in range(draw(st.integers(1, 5))):
        key_len = draw(st.sampled_from([None, 0, 3, 63, 64, 200]))
        value_len = draw(st.sampled_from([None, 0, 10, 63, 64, 100, 5000, 9000]))
        step = draw(st.sampled_from([0, 1, 60, -3, 100_000]))
        headers = draw(st.sampled_from([[], [], [("x", b"y")]]))
        for _ in range(draw(st.integers(1, 90))):
            ts = TS0 + step * len(out)
            out.append(
                (
                    ts,
                    None if key_len is None else b"k" * key_len,
                    None if value_len is None else bytes([len(out) % 256]) * value_len,
                    headers,
                )
            )
    return out


@given(runs())
@PROFILE
def test_fast_and_general_paths_agree(records: list[RecordInput]) -> None:
    data = odr_build_v2(records, base_offset=1000)
    expected = [(1000 + i, ts, k, v_, h) for i, (ts, k, v_, h) in enumerate(records)]
    assert odr_read(data) == expected
    assert kafka_read(data) == expected


def test_general_path_alone_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [(TS0 + i, b"key-%d" % i, b"v" * 100, []) for i in range(300)]
    data = odr_build_v2(records)
    with_fast = odr_read(data)
    monkeypatch.setattr(v2, "_shape_at", lambda buf, pos: None)
    assert odr_read(data) == with_fast


def test_record_tuple_shape() -> None:
    [record] = odr.read_batches(odr_build_v2([(TS0, b"k", b"v", [("h", None)])])).__next__().records
    assert record == odr.Record(0, TS0, b"k", b"v", [("h", None)])
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == tuple(record)
    assert type(record.key) is bytes and type(record.value) is bytes
