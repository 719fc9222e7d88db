"""The executors' column-wise decoder against the client's record-by-record decoder.

``decode_partition_data`` (pyarrow.compute over all records of a fetch) must give exactly what
``AsyncSimpleConsumer`` gives for the same fetched bytes: same records, offsets, timestamps,
timestamp types, keys, values and headers, the same skipping of control batches and aborted
transactions, and the same ``next_offset``.  Batches are built with odradek's own builders in
every codec and shape (long varints, null keys and values, headers, log-append time, offset
gaps from compaction, magic 0/1 message sets, truncated tails).  No Spark needed.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from odradek.client import AsyncSimpleConsumer  # noqa: E402
from odradek.records import (  # noqa: E402
    BatchBuilder,
    Compression,
    LegacyBatchBuilder,
    RecordsError,
    end_txn_marker,
)
from odradek.spark import _arrow  # noqa: E402
from odradek.spark._arrow import arrow_schema, decode_partition_data  # noqa: E402

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def _oracle(data: bytes, offset: int, until: int, aborted: list[tuple[int, int]] | None) -> tuple[list[dict], int]:
    """Rows and next offset as the client's SimpleConsumer decodes them."""
    cfg = {"bootstrap.servers": "127.0.0.1:1", "isolation.level": "read_committed" if aborted is not None else "read_uncommitted"}
    consumer = AsyncSimpleConsumer(cfg)
    pd = SimpleNamespace(
        records=data,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=[SimpleNamespace(producer_id=p, first_offset=f) for p, f in aborted or ()],
    )
    out = consumer._decode("t", 3, offset, pd)
    rows = [
        {
            "key": r.key,
            "value": r.value,
            "topic": "t",
            "partition": 3,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "timestampType": int(r.timestamp_type),
            "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
        }
        for r in out
        if r.offset < until
    ]
    return rows, out.next_offset


def _rows(batch: Any) -> list[dict]:
    if batch is None:
        return []
    assert batch.schema.equals(arrow_schema(True))
    rows = batch.to_pylist()
    for r in rows:
        r["timestamp"] = int(r["timestamp"].timestamp() * 1000) if r["timestamp"] is not None else None
    return rows


def _ts_ms(batch: Any) -> list[int]:
    return batch.column(5).cast(pa.int64()).to_pylist() if batch is not None else []


def _check(data: bytes, offset: int = 0, until: int = 1 << 62, aborted: list[tuple[int, int]] | None = None) -> Any:
    expected, expected_next = _oracle(data, offset, until, aborted)
    got = decode_partition_data(data, "t", 3, offset, until, include_headers=True, aborted=aborted)
    rows = _rows(got.batch)
    # timestamps compared in ms exactly (datetime rounding aside)
    stamps = [t // 1000 for t in _ts_ms(got.batch)]
    for r, ts in zip(rows, stamps):
        r["timestamp"] = ts
    assert rows == expected
    if until > 1 << 60:
        assert got.next_offset == expected_next
    return got


def _no_slow_path(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("v2 batches must take the column-wise path")


def _random_bytes(rng: random.Random, big: bool) -> bytes | None:
    roll = rng.random()
    if roll < 0.15:
        return None
    size = rng.choice([0, 1, 5, 63, 64, 100, 8191, 8200, 20000] if big else [0, 1, 7, 50, 63, 64, 130])
    return rng.randbytes(size)


def _random_batches(rng: random.Random, codec: int, *, headers: bool, big: bool, lat: bool) -> bytes:
    out = []
    offset = rng.choice([0, 5, 1000])
    for _ in range(rng.randint(1, 5)):
        b = BatchBuilder(compression=codec, base_offset=offset, log_append_time=1_700_000_999_000 if lat else None)
        ts = 1_700_000_000_000 + rng.randint(-10**6, 10**6)
        delta = 0
        for _ in range(rng.randint(1, 150)):
            delta += rng.choice([1, 1, 1, 2, 70])  # gaps: compacted batches
            stamp = ts + rng.choice([0, 1, 63, 64, 10**4, 2**35, -5])
            hs = [(f"h{j}", _random_bytes(rng, False)) for j in range(rng.randint(0, 3))] if headers else None
            b.append(stamp, _random_bytes(rng, big), _random_bytes(rng, big), hs, offset_delta=delta - 1)
        out.append(b.build())
        offset += delta + rng.randint(0, 3)
    return b"".join(out)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: Compression(c).name)
@pytest.mark.parametrize("seed", range(6))
def test_random_v2_batches_match_the_client(codec: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_arrow, "_decode_slow", _no_slow_path)
    rng = random.Random(seed * 31 + codec)
    data = _random_batches(rng, codec, headers=seed % 2 == 0, big=seed % 3 == 0, lat=seed == 5)
    got = _check(data)
    assert got.complete
    # any start and end inside the data
    first = got.batch.column(4)[0].as_py()
    last = got.batch.column(4)[-1].as_py()
    for _ in range(3):
        lo = rng.randint(first, last)
        hi = rng.randint(lo, last + 1)
        _check(data, lo, hi)


def test_fixed_size_records_the_benchmark_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_arrow, "_decode_slow", _no_slow_path)
    b = BatchBuilder()
    for i in range(5000):
        b.append(1_700_000_000_000 + i // 10, None, b"x" * 100)
    got = _check(b.build() + b.build()[:500])  # plus a truncated copy at the end
    assert got.batch.num_rows == 5000
    assert got.next_offset == 5000
    assert got.batch.column(0).null_count == 5000


def _inside_a_larger_bytearray(data: bytes) -> memoryview:
    """As a client hands a response's records over: a view into its (larger) frame buffer."""
    return memoryview(bytearray(b"\xff" * 37 + data + b"\xee" * 11))[37 : 37 + len(data)]


@pytest.mark.parametrize("one_run_at_a_time", [False, True])
@pytest.mark.parametrize("as_type", [bytes, bytearray, memoryview, _inside_a_larger_bytearray])
def test_runs_of_several_batches_cut_out_together(
    one_run_at_a_time: bool, as_type: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of uncompressed batches are cut out of the buffer holding the response, compressed ones
    out of their own buffers, keys and values of other lengths apart: all as the client."""
    monkeypatch.setattr(_arrow, "_decode_slow", _no_slow_path)
    if one_run_at_a_time:  # the path for buffers beyond 32-bit offsets
        monkeypatch.setattr(_arrow, "_MAX_OFFSET", 0)
    parts = []
    offset = 0
    shapes = [(Compression.NONE, 3, 100), (Compression.NONE, 3, 100), (Compression.LZ4, 3, 100),
              (Compression.NONE, 3, 100), (Compression.NONE, 0, 7), (Compression.NONE, -1, 100)]
    for codec, key_len, value_len in shapes:
        b = BatchBuilder(compression=codec, base_offset=offset)
        for i in range(300):
            key = None if key_len < 0 else bytes([i % 200]) * key_len
            b.append(1_700_000_000_000 + i // 50, key, bytes([i % 250]) * value_len)
        parts.append(b.build())
        offset += 300
    data = b"".join(parts)
    expected, _ = _oracle(data, 0, 1 << 62, None)
    for lo, hi in [(0, 1 << 62), (450, 1500), (910, 1799)]:
        got = decode_partition_data(as_type(data), "t", 3, lo, hi, include_headers=True)
        rows = _rows(got.batch)
        want = [r for r in expected if lo <= r["offset"] < hi]
        assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(r["offset"], r["key"], r["value"]) for r in want]
    assert _check(data).batch.num_rows == 1800


def test_truncated_first_batch_is_incomplete() -> None:
    b = BatchBuilder(base_offset=10)
    for i in range(100):
        b.append(1_700_000_000_000, b"k", b"v" * i)
    data = b.build()
    got = decode_partition_data(data[: len(data) // 2], "t", 0, 10, 1000)
    assert got.batch is None and not got.complete and got.next_offset == 10
    assert decode_partition_data(b"", "t", 0, 10, 1000) == (None, 10, True)


def _txn_log() -> tuple[bytes, list[tuple[int, int]]]:
    parts = []

    def batch(base: int, pid: int, values: list[bytes], txn: bool = True) -> None:
        b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=txn)
        for v in values:
            b.append(1_700_000_000_000, None, v)
        parts.append(b.build())

    def marker(base: int, pid: int, commit: bool) -> None:
        b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True)
        k, v = end_txn_marker(commit, 0)
        b.append(1_700_000_000_000, k, v)
        parts.append(b.build())

    batch(0, 7, [b"a0", b"a1"])  # aborted
    batch(2, 8, [b"c0", b"c1"])  # committed
    batch(4, 7, [b"a2"])
    marker(5, 7, commit=False)
    marker(6, 8, commit=True)
    batch(7, 9, [b"plain"], txn=False)
    batch(8, 7, [b"n0"])  # a new transaction of 7, committed
    marker(9, 7, commit=True)
    return b"".join(parts), [(7, 0)]


def test_read_committed_skips_aborted_transactions_and_markers() -> None:
    data, aborted = _txn_log()
    got = _check(data, aborted=aborted)
    assert got.batch.column(1).to_pylist() == [b"c0", b"c1", b"plain", b"n0"]
    assert got.next_offset == 10
    uncommitted = _check(data, aborted=None)
    assert uncommitted.batch.column(1).to_pylist() == [b"a0", b"a1", b"c0", b"c1", b"a2", b"plain", b"n0"]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_legacy_message_sets_take_the_slow_path(magic: int, codec: int) -> None:
    parts = []
    for base in (0, 3):
        b = LegacyBatchBuilder(magic, compression=codec, base_offset=base)
        for i in range(3):
            b.append(1_700_000_000_000 + i, b"k%d" % i if i else None, b"v%d" % (base + i))
        parts.append(b.build())
    got = _check(b"".join(parts), 1, 5)
    assert got.batch.column(4).to_pylist() == [1, 2, 3, 4]


def test_corrupt_record_lengths_raise() -> None:
    b = BatchBuilder()
    for _ in range(10):
        b.append(1_700_000_000_000, None, b"v" * 10)
    data = bytearray(b.build())
    data[61] = 0x7E  # first record claims 63 bytes; the CRC is not checked here
    with pytest.raises(RecordsError):
        decode_partition_data(bytes(data), "t", 0, 0, 100, verify_crc=False)
    with pytest.raises(RecordsError):
        decode_partition_data(bytes(data), "t", 0, 0, 100)  # CRC mismatch


def test_a_compaction_gap_at_the_end_of_the_range_completes_it() -> None:
    b = BatchBuilder(base_offset=210)
    b.append(1_700_000_000_000, b"k", b"v")
    got = decode_partition_data(b.build(), "t", 0, 150, 200)
    assert got == (None, 200, True)  # nothing is left in [150, 200): the range is done
