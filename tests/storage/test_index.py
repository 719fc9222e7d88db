"""Offset and time indexes: Kafka's file formats, parsed independently of the storage code."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from odradek.storage.errors import CorruptIndexError
from odradek.storage.index import OffsetIndex, TimeIndex


def _entries(path: Path, fmt: str) -> list[tuple[int, int]]:
    data = path.read_bytes()
    size = struct.calcsize(fmt)
    assert len(data) % size == 0
    return [struct.unpack_from(fmt, data, i) for i in range(0, len(data), size)]


def test_offset_index_is_preallocated_then_trimmed_to_kafka_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, 1000, writable=True)
    assert path.stat().st_size == 1000 - 1000 % 8  # preallocated, whole entries
    for i in range(10):
        idx.append(100 + i * 7, i * 4096)
    idx.close()
    assert _entries(path, ">ii") == [(i * 7, i * 4096) for i in range(10)]


def test_offset_index_lookup_is_a_floor_search(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", 1000, 4096, writable=True)
    for i in range(1, 50):
        idx.append(1000 + i * 10, i * 100)
    assert idx.lookup(999) == (1000, 0)
    assert idx.lookup(1005) == (1000, 0)
    assert idx.lookup(1010) == (1010, 100)
    assert idx.lookup(1255) == (1250, 2500)
    assert idx.lookup(10**9) == (1490, 4900)
    with pytest.raises(CorruptIndexError):
        idx.append(1490, 5000)  # offsets must increase


def test_offset_index_truncate_and_full(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", 0, 8 * 4, writable=True)
    for i in range(4):
        idx.append(i * 10, i)
    assert idx.is_full
    with pytest.raises(CorruptIndexError):
        idx.append(100, 9)
    idx.truncate_to(20)
    assert idx.entries == 2 and idx.last_offset == 10
    idx.append(25, 7)
    assert idx.lookup(26) == (25, 7)


def test_reopened_untrimmed_index_stops_at_zero_fill(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    idx = OffsetIndex(path, 0, 8 * 100, writable=True)
    for i in range(1, 6):
        idx.append(i * 3, i * 50)
    idx.flush()
    # simulate a crash: the file is still preallocated when reopened
    idx2 = OffsetIndex(path, 0, 8 * 100, writable=False)
    assert idx2.entries == 5
    assert idx2.lookup(100) == (15, 250)


def test_time_index_only_increases_and_finds_floor(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    idx = TimeIndex(path, 50, 12 * 10, writable=True)
    idx.maybe_append(1000, 50)
    idx.maybe_append(1000, 52)  # not larger: ignored
    idx.maybe_append(900, 53)  # smaller: ignored
    idx.maybe_append(2000, 60)
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1500) == (1000, 50)
    assert idx.lookup(2000) == (2000, 60)
    assert idx.last_entry == (2000, 60)
    idx.close()
    assert _entries(path, ">qi") == [(1000, 0), (2000, 10)]


def test_sanity_check_detects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">ii", 5, 10) + struct.pack(">ii", 3, 20))
    idx = OffsetIndex(path, 0, 1024, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size=100)
