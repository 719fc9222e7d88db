"""Retention by time, size and log start offset; delayed deletion; reads during deletion."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.records import read_batches
from odradek.storage import Log, LogConfig, LogManager, OffsetOutOfRangeError

from .storage_helpers import TS0, read_all, record_offsets, v2_batch

DAY = 86_400_000


def _log(tmp_path: Path, clock: FakeClock, **config: object) -> Log:
    return Log(tmp_path / "ret-0", LogConfig.from_dict(config), clock=clock, clean_shutdown=True)


def _fill(log: Log, batches: int, *, ts: int, step: int = 0) -> None:
    for i in range(batches):
        log.append(v2_batch(2, ts=ts + i * step, value=b"r" * 80, tag=str(i)))


def test_retention_ms_is_judged_by_the_largest_record_timestamp(tmp_path: Path) -> None:
    clock = FakeClock(TS0 + 10 * DAY)
    log = _log(tmp_path, clock, **{"segment.bytes": 1000, "retention.ms": DAY})
    # records stamped 3 days ago, then 1 minute ago; files are new (mtime = now, real time)
    _fill(log, 20, ts=clock.now_ms() - 3 * DAY, step=1)
    old_segments = len(log.segments)
    log.roll()
    _fill(log, 20, ts=clock.now_ms() - 60_000)
    recent = [s.base_offset for s in log.segments[old_segments:]]
    assert log.delete_old_segments() == old_segments
    assert [s.base_offset for s in log.segments] == recent
    assert log.log_start_offset == recent[0]
    # an old mtime does not make recent records expire
    for seg in log.segments:
        os.utime(seg.log_path, (0, 0))
    assert log.delete_old_segments() == 0
    # once the newest record of a segment is older than retention.ms it goes
    clock.advance(DAY - 60_000)
    assert log.delete_old_segments() == 0  # exactly retention.ms: not yet
    clock.advance(1)
    assert log.delete_old_segments() == len(recent) - 1  # all but the active segment
    assert len(log.segments) == 1


def test_one_recent_record_keeps_a_segment(tmp_path: Path) -> None:
    clock = FakeClock(TS0 + 10 * DAY)
    log = _log(tmp_path, clock, **{"segment.bytes": 1000, "retention.ms": DAY})
    _fill(log, 3, ts=clock.now_ms() - 3 * DAY)
    log.append(v2_batch(1, ts=clock.now_ms()))  # same segment, recent
    log.roll()
    log.append(v2_batch(1, ts=clock.now_ms() - 3 * DAY))
    log.roll()
    log.append(v2_batch(1, ts=clock.now_ms()))
    # retention removes a prefix only: the old second segment stays behind the recent first one
    assert log.delete_old_segments() == 0


def test_retention_bytes(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.bytes": 1000, "retention.bytes": 2500})
    _fill(log, 60, ts=TS0)
    sizes = [s.size for s in log.segments]
    total = sum(sizes)
    removed = log.delete_old_segments()
    assert removed > 0
    remaining = [s.size for s in log.segments]
    assert remaining == sizes[removed:]
    # Kafka deletes the oldest segments while the log stays at or above retention.bytes without them
    assert sum(remaining) >= 2500
    assert sum(remaining) - remaining[0] < 2500 or len(remaining) == 1
    assert total - sum(remaining) == sum(sizes[:removed])
    assert log.delete_old_segments() == 0
    assert log.log_start_offset == log.segments[0].base_offset
    assert record_offsets(read_all(log))[0] == log.log_start_offset


def test_log_start_offset_removes_whole_segments_below_it(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.bytes": 600})
    _fill(log, 30, ts=TS0)
    bases = [s.base_offset for s in log.segments]
    target = bases[3] + 1  # inside the fourth segment
    assert log.maybe_increment_log_start_offset(target)
    assert not log.maybe_increment_log_start_offset(target - 1)  # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(log.log_end_offset + 1)
    assert log.delete_old_segments() == 3
    assert log.segments[0].base_offset == bases[3]
    assert log.log_start_offset == target  # not rounded down to the segment
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 1000)
    assert record_offsets(read_all(log))[0] == bases[3]  # the batch holding the start offset


def test_the_active_segment_is_never_deleted(tmp_path: Path) -> None:
    clock = FakeClock(TS0 + 10 * DAY)
    log = _log(tmp_path, clock, **{"segment.bytes": 700, "retention.ms": 0, "retention.bytes": 0})
    _fill(log, 20, ts=TS0)
    end = log.log_end_offset
    log.maybe_increment_log_start_offset(end)
    assert log.delete_old_segments() >= 1
    assert len(log.segments) == 1
    assert log.delete_old_segments() == 0
    active = log.active
    assert not active.is_empty and active.log_path.exists()
    assert log.log_end_offset == end and log.log_start_offset == end
    assert log.read(end, 1000).size == 0
    info = log.append(v2_batch(1, ts=clock.now_ms()))
    assert info.first_offset == end


def test_deleted_segments_are_renamed_then_removed_after_the_delay(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    manager = LogManager([tmp_path], {"segment.bytes": 600, "file.delete.delay.ms": 5000}, clock=clock)
    log = manager.get_or_create("del", 0)
    _fill(log, 20, ts=TS0)
    doomed = log.segments[0].base_offset, log.segments[1].base_offset
    log.maybe_increment_log_start_offset(log.segments[2].base_offset)
    assert manager.cleanup() == 2
    pdir = tmp_path / "del-0"
    for base in doomed:
        for suffix in (".log", ".index", ".timeindex"):
            assert not (pdir / f"{base:020d}{suffix}").exists()
            assert (pdir / f"{base:020d}{suffix}.deleted").exists()
    clock.advance(4999)
    manager.cleanup()
    assert len(list(pdir.glob("*.deleted"))) == 6
    clock.advance(1)
    manager.cleanup()
    assert list(pdir.glob("*.deleted")) == []
    manager.shutdown()


def test_close_finishes_pending_deletions(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.bytes": 600, "file.delete.delay.ms": 60_000})
    _fill(log, 20, ts=TS0)
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    log.delete_old_segments()
    assert list((tmp_path / "ret-0").glob("*.deleted"))
    log.close()
    assert list((tmp_path / "ret-0").glob("*.deleted")) == []


def test_a_read_keeps_working_while_retention_deletes_its_segment(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.bytes": 600, "file.delete.delay.ms": 1000})
    _fill(log, 20, ts=TS0)
    segments = log.segments  # a reader's snapshot
    result = log.read(0, 10_000)
    log.maybe_increment_log_start_offset(log.segments[2].base_offset)
    assert log.delete_old_segments() == 2
    assert log.segments != segments and segments[0] not in log.segments
    # the region still reads the old segment (renamed .deleted, still open)
    batches = list(read_batches(result.to_bytes()))
    assert batches[0].base_offset == 0 and all(b.records for b in batches)
    assert result.region is not None
    assert os.pread(result.region.fd, result.region.length, result.region.position) == result.to_bytes()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 10_000)


def test_concurrent_readers_during_appends_and_retention(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.bytes": 2000, "file.delete.delay.ms": 60_000})
    _fill(log, 10, ts=TS0)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                offset = log.log_start_offset
                while offset < log.log_end_offset and not stop.is_set():
                    try:
                        result = log.read(offset, 3000)
                    except OffsetOutOfRangeError:
                        break  # retention overtook us: start again from the new start
                    batches = list(read_batches(result.to_bytes()))
                    assert batches and batches[0].base_offset <= offset <= batches[0].last_offset
                    offset = batches[-1].last_offset + 1
                    reads[0] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < deadline and not errors and (i < 1000 or reads[0] < 500):
            log.append(v2_batch(2, value=b"c" * 100, tag=str(i)))
            if i % 20 == 19:
                log.maybe_increment_log_start_offset(log.log_end_offset - 40)
                log.delete_old_segments()
            i += 1
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        for t in threads:
            t.join(10)
    if errors:
        raise errors[0]
    assert reads[0] > 0
    assert log.log_start_offset > 0


def test_a_reader_between_the_steps_of_retention_never_gets_other_offsets(
    tmp_path: Path, monkeypatch
) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.bytes": 600, "retention.bytes": 1500})
    _fill(log, 20, ts=TS0)
    seen: list[object] = []
    set_segments = log._segs.swap

    def reader_runs_here(segments, **kw):  # a reader thread scheduled between the writer's steps
        set_segments(segments, **kw)
        try:
            batch = next(read_batches(log.read(0, 10_000).to_bytes()))
            seen.append((batch.base_offset, batch.last_offset))
        except OffsetOutOfRangeError:
            seen.append("out of range")

    monkeypatch.setattr(log._segs, "swap", reader_runs_here)
    assert log.delete_old_segments() > 0
    assert seen == ["out of range"]
    seen.clear()
    log.truncate_fully_and_start_at(500)
    assert seen == ["out of range"]
