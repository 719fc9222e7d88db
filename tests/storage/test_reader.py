"""The read-only segment reader shared by ``odradek dump-log`` and Spark's offline read.

Logs are written by :class:`~odradek.storage.LogManager` (the broker's storage), then read back
with :mod:`odradek.storage.reader` only: entry checks, index and time-index seeks (counting the
bytes read from the ``.log``), tails torn or damaged, and no file ever written.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import pytest

from odradek.records import BatchBuilder, Compression, LegacyBatchBuilder, iter_batch_headers
from odradek.storage import LogManager
from odradek.storage.reader import SegmentReader, check_entries, list_segments

TS0 = 1_700_000_000_000


def _log(tmp_path: Path, batches: int = 400, per_batch: int = 5, segment_bytes: int = 1 << 20) -> Path:
    manager = LogManager([tmp_path], {"segment.bytes": segment_bytes, "index.interval.bytes": 256})
    log = manager.get_or_create("events", 0)
    for i in range(batches):
        b = BatchBuilder(compression=Compression.GZIP if i % 3 == 0 else Compression.NONE)
        for j in range(per_batch):
            b.append(TS0 + 10 * i + j, b"k%d" % j, b"value-%d-%d" % (i, j) * 3)
        log.append(b.build())
    manager.shutdown()
    return tmp_path / "events-0"


def _segment(part: Path, i: int = 0) -> Path:
    return sorted(part.glob("*.log"))[i]


def test_check_entries_reports_position_and_problem(tmp_path: Path) -> None:
    seg = _segment(_log(tmp_path, 20))
    data = bytearray(seg.read_bytes())
    headers = list(iter_batch_headers(data))
    assert all(c.problem is None for c in check_entries(data, base_offset=0, expected=0))
    # a CRC mismatch in the fifth batch: reported at its position, the walk goes on after it
    data[headers[4].position + 70] ^= 0xFF
    checks = list(check_entries(data, base_offset=0, expected=0))
    bad = [c for c in checks if c.problem]
    assert len(checks) == 20 and [c.position for c in bad] == [headers[4].position]
    assert bad[0].problem is not None and "CRC mismatch" in bad[0].problem
    # a torn tail: the last entry cut short
    torn = bytes(data[: headers[-1].position + 30])
    last = list(check_entries(torn, base_offset=0, expected=0))[-1]
    assert last.header is None and last.position == headers[-1].position
    assert last.problem is not None and last.problem.startswith("torn tail")
    # the same bytes as a chunk of a longer file: the walk just stops before the cut entry
    chunk = list(check_entries(torn, base_offset=0, expected=0, file_size=len(data)))
    assert len(chunk) == 19 and chunk[-1].position == headers[-2].position
    # offsets going backwards
    back = bytearray(seg.read_bytes())
    struct.pack_into(">q", back, headers[7].position, 0)
    problems = [c for c in check_entries(back, base_offset=0, expected=0) if c.problem]
    assert problems[0].position == headers[7].position and "offsets go backwards" in str(problems[0].problem)


def test_offset_seek_reads_a_small_part_of_the_segment(tmp_path: Path) -> None:
    part = _log(tmp_path)
    seg_path = _segment(part)
    with SegmentReader(seg_path) as seg:
        assert seg.index.entries > 50  # index.interval.bytes=256: an entry every few batches
        size = seg.size
        for offset in (0, 3, 999, 1503, 1999):
            before = seg.bytes_read
            position, _expected = seg.position_of(offset)
            h = seg.peek(position)
            assert h is not None and h.base_offset <= offset <= h.last_offset
            # through the index: a few header reads near the offset, not a scan from the start
            assert seg.bytes_read - before < 6000 < size // 10, (offset, seg.bytes_read - before, size)
        assert seg.position_of(10_000)[0] == size  # past the end: the end of the file


def test_timestamp_seek_matches_the_log_and_uses_the_time_index(tmp_path: Path) -> None:
    part = _log(tmp_path)
    manager = LogManager([tmp_path], {})
    log = manager.get("events", 0)
    assert log is not None
    try:
        with SegmentReader(_segment(part)) as seg:
            for ts in (TS0 - 5, TS0, TS0 + 1234, TS0 + 2500, TS0 + 3995, TS0 + 3999):
                before = seg.bytes_read
                found = seg.find_offset_by_timestamp(ts, 0, 2000)
                assert found == log.offset_for_timestamp(ts), ts
                assert seg.bytes_read - before < 10000, (ts, seg.bytes_read - before)
            assert seg.find_offset_by_timestamp(TS0 + 4000, 0, 2000) is None
            assert (
                seg.find_offset_by_timestamp(TS0 + 1234, 0, 619) is None
            )  # offset 619: not before the end given
            assert seg.find_offset_by_timestamp(TS0 + 1234, 0, 620) == (619, TS0 + 1234)
            assert seg.find_offset_by_timestamp(TS0, 1500, 2000) == (1500, TS0 + 3000)
    finally:
        manager.shutdown()


def test_a_stale_or_missing_index_only_costs_a_scan(tmp_path: Path) -> None:
    part = _log(tmp_path, 100)
    seg_path = _segment(part)
    index = seg_path.with_suffix(".index")
    entries = bytearray(index.read_bytes())
    struct.pack_into(">ii", entries, len(entries) - 8, 480, 123)  # points into the middle of a batch
    index.write_bytes(bytes(entries))
    with SegmentReader(seg_path) as seg:
        position, _ = seg.position_of(490)
        h = seg.peek(position)
        assert h is not None and h.base_offset <= 490 <= h.last_offset
    index.unlink()
    seg_path.with_suffix(".timeindex").unlink()
    with SegmentReader(seg_path) as seg:
        position, _ = seg.position_of(490)
        h = seg.peek(position)
        assert h is not None and h.base_offset <= 490 <= h.last_offset
        assert seg.find_offset_by_timestamp(TS0 + 500, 0, 500) == (250, TS0 + 500)
    assert not index.exists()  # nothing created


def test_scan_tail_finds_the_last_complete_entry(tmp_path: Path) -> None:
    seg_path = _segment(_log(tmp_path, 60))
    data = seg_path.read_bytes()
    headers = list(iter_batch_headers(data))
    with SegmentReader(seg_path) as seg:
        tail = seg.scan_tail()
        assert (tail.end, tail.next_offset, tail.problem) == (len(data), 300, None)
    seg_path.write_bytes(
        data + data[headers[-1].position : headers[-1].position + 40]
    )  # an append in progress
    with SegmentReader(seg_path) as seg:
        tail = seg.scan_tail()
        assert (tail.end, tail.next_offset, tail.problem_position) == (len(data), 300, len(data))
        assert tail.problem is not None and tail.problem.startswith("torn tail")
    bad = bytearray(data)
    bad[headers[-1].position + 80] ^= 0xFF  # the last entry complete but its CRC wrong
    seg_path.write_bytes(bytes(bad))
    with SegmentReader(seg_path) as seg:
        tail = seg.scan_tail()
        assert (tail.end, tail.next_offset) == (headers[-1].position, 295)
        assert tail.problem is not None and "CRC mismatch" in tail.problem


def test_reads_a_read_only_copy_of_old_message_formats(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "data"], {"index.interval.bytes": 100})
    log = manager.get_or_create("old", 0)
    for i in range(60):
        b = LegacyBatchBuilder(i % 2, compression=Compression.GZIP if i % 4 >= 2 else Compression.NONE)
        for j in range(3):
            b.append(TS0 + i, b"k%d" % j, b"v%d" % i)
        log.append(b.build())
    manager.shutdown()
    part = tmp_path / "data" / "old-0"
    before = sorted(os.listdir(part))
    os.chmod(part, stat.S_IRUSR | stat.S_IXUSR)
    try:
        segments, swapping = list_segments(part)
        assert [b for b, _ in segments] == [0] and not swapping
        with SegmentReader(segments[0][1]) as seg:
            assert all(
                c.problem is None for c in check_entries(seg.read(0, seg.size), base_offset=0, expected=0)
            )
            position, _ = seg.position_of(100)
            h = seg.peek(position)
            assert h is not None and h.last_offset >= 100 and (h.base_offset == -1 or h.base_offset <= 100)
            assert seg.scan_tail().next_offset == 180
        assert sorted(os.listdir(part)) == before
    finally:
        os.chmod(part, stat.S_IRWXU)


def test_the_reader_refuses_other_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a segment file"):
        SegmentReader(tmp_path / "notes.log")
