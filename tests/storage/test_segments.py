"""The log's collaborators on their own: the segment list (removed segments wait for their delay,
lookups on a snapshot) and the retention rules (a prefix, never the active segment)."""

from __future__ import annotations

from pathlib import Path

from odradek._clock import FakeClock
from odradek.storage import Log, LogConfig
from odradek.storage.retention import deletable_segments

from .storage_helpers import TS0, v2_batch

DAY = 86_400_000


def _log(tmp_path: Path, clock: FakeClock, **config: object) -> Log:
    log = Log(tmp_path / "t-0", LogConfig.from_dict({"segment.bytes": 400, **config}), clock=clock)
    for i in range(12):
        log.append(v2_batch(2, ts=TS0 + i, value=b"v" * 60), leader_epoch=0)
    assert len(log.segments) >= 4
    return log


def test_removed_segments_keep_their_files_until_their_delay_has_passed(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"file.delete.delay.ms": 1_000})
    segs = log._segs
    doomed = list(log.segments[:2])
    segs.remove(doomed, clock.monotonic_ms() + 1_000)
    assert log.segments[0].base_offset == doomed[-1].next_offset
    assert all(s.log_path.name.endswith(".log.deleted") and s.log_path.exists() for s in doomed)
    assert segs.take_due(clock.monotonic_ms() + 999, force=False) == []
    assert segs.take_due(clock.monotonic_ms() + 1_000, force=False) == doomed
    assert segs.removed == [] and segs.take_due(0, force=True) == []
    for seg in doomed:
        seg.delete_files()
    log.close()


def test_retention_takes_a_prefix_and_never_the_active_segment(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock)
    snapshot = log.segments
    cfg = log.config
    # every segment is past retention.ms: all but the active one go
    assert deletable_segments(snapshot, cfg, 0, TS0 + 8 * DAY) == list(snapshot[:-1])
    # the log start offset inside the third segment: the two before it go, nothing else
    assert deletable_segments(snapshot, cfg, snapshot[2].base_offset + 1, TS0) == list(snapshot[:2])
    # retention.bytes: the oldest segments go until the rest fits
    small = LogConfig.from_dict({"segment.bytes": 400, "retention.bytes": snapshot[-1].size + snapshot[-2].size})
    assert deletable_segments(snapshot, small, 0, TS0) == list(snapshot[:-2])
    assert deletable_segments(snapshot[-1:], cfg, log.log_end_offset, TS0 + 8 * DAY) == []
    log.close()


def test_lookups_answer_for_the_snapshot_they_are_given(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock)
    segs = log._segs
    segments, bases = segs.view
    assert segs.index_of(bases, 0) == 0 and segs.index_of(bases, log.log_end_offset) == len(segments) - 1
    assert [s.base_offset for s in segs.iter_from(bases[2])] == list(bases[2:])
    region = segs.read(segments, bases, bases[1], log.log_end_offset, 1 << 20, True)
    assert region is not None and region.segment is segments[1] and region.position == 0
    assert segs.offset_for_timestamp(TS0 + 5, 0) == (10, TS0 + 5)
    assert segs.max_timestamp_and_offset() == (TS0 + 11, 23)
    log.close()
