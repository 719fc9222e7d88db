"""When a new segment is rolled: size, age (with jitter), full indexes, relative-offset overflow."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.storage import Log, LogConfig

from .storage_helpers import TS0, base_offsets, parse_index, parse_log, read_all, record_offsets, v2_batch


def _log(tmp_path: Path, clock: FakeClock, **config: object) -> Log:
    return Log(tmp_path / "r-0", LogConfig.from_dict(config), clock=clock, clean_shutdown=True)


def test_roll_on_segment_bytes(tmp_path: Path) -> None:
    log = _log(tmp_path, FakeClock(TS0), **{"segment.bytes": 1000})
    sizes = []
    for i in range(60):
        data = v2_batch(1 + i % 3, value=b"s" * (30 + i * 7 % 90), tag=str(i))
        sizes.append(len(data))
        log.append(data)
    log.close()
    # recompute where Kafka's rule (roll when size + batch > segment.bytes) puts the boundaries
    expected, current = 1, 0
    for size in sizes:
        if current and current + size > 1000:
            expected, current = expected + 1, 0
        current += size
    bases = base_offsets(tmp_path / "r-0")
    assert len(bases) == expected
    for base in bases:
        path = tmp_path / "r-0" / f"{base:020d}.log"
        assert path.stat().st_size <= 1000
        assert parse_log(path)[0][0].first_offset == base


def test_roll_on_segment_ms_uses_record_timestamps(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.ms": 1000})
    log.append(v2_batch(1, ts=clock.now_ms()))
    clock.advance(1000)
    log.append(v2_batch(1, ts=clock.now_ms()))
    assert len(log.segments) == 1  # waited exactly segment.ms: not yet
    clock.advance(1)
    log.append(v2_batch(1, ts=clock.now_ms()))
    assert [s.base_offset for s in log.segments] == [0, 2]
    # the age is judged by the records' timestamps: an old timestamp in a new batch rolls
    log.append(v2_batch(1, ts=clock.now_ms() + 5000))
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    # without timestamps (magic 0) the segment's creation time on the clock is used
    clock.advance(999)
    assert not log.maybe_roll_for_time()
    clock.advance(1002)
    assert log.maybe_roll_for_time()
    assert [s.base_offset for s in log.segments] == [0, 2, 3, 4]
    assert not log.maybe_roll_for_time()  # the new active segment is empty


def test_segment_jitter_is_bounded_by_segment_ms(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    for p in range(20):
        log = Log(
            tmp_path / f"j-{p}",
            LogConfig.from_dict({"segment.ms": 1000, "segment.jitter.ms": 10**9}),
            clock=clock,
            clean_shutdown=True,
        )
        log.append(v2_batch(1, ts=clock.now_ms()))
        log.append(v2_batch(1, ts=clock.now_ms()))
        assert len(log.segments) == 1, "a jitter above segment.ms must not roll every append"
        log.append(v2_batch(1, ts=clock.now_ms() + 1001))
        assert len(log.segments) == 2, "a segment older than segment.ms always rolls"
        log.close()


def test_jitter_rolls_some_segments_early(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    early = 0
    for p in range(30):
        log = Log(
            tmp_path / f"j-{p}",
            LogConfig.from_dict({"segment.ms": 1000, "segment.jitter.ms": 500}),
            clock=clock,
            clean_shutdown=True,
        )
        log.append(v2_batch(1, ts=clock.now_ms()))
        log.append(v2_batch(1, ts=clock.now_ms() + 750))
        early += len(log.segments) - 1
        log.append(v2_batch(1, ts=clock.now_ms() + 1001))
        assert len(log.segments) >= 2
        log.close()
    # a jitter of 250 ms or less leaves the segment alone at 750 ms: some do, some do not
    assert 0 < early < 30


def test_roll_when_the_offset_index_is_full(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    # 10 offset-index entries, an entry per batch after the first, one timestamp for all
    log = _log(tmp_path, clock, **{"segment.index.bytes": 80, "index.interval.bytes": 1})
    for i in range(45):
        log.append(v2_batch(2, ts=TS0, tag=str(i)))
    log.close()
    pdir = tmp_path / "r-0"
    bases = base_offsets(pdir)
    # 11 batches fill a segment: the first is not indexed, the next 10 are
    assert bases == [0, 22, 44, 66, 88]
    for base in bases[:-1]:
        assert len(parse_index(pdir / f"{base:020d}.index")) == 10
    log = Log(pdir, LogConfig.from_dict({"segment.index.bytes": 80, "index.interval.bytes": 1}), clock=clock)
    assert record_offsets(read_all(log)) == list(range(90))


def test_roll_when_the_time_index_is_full(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    # 80 bytes: 10 offset entries, but only 6 time entries (12 bytes each)
    log = _log(tmp_path, clock, **{"segment.index.bytes": 80, "index.interval.bytes": 1})
    for i in range(20):
        log.append(v2_batch(1, ts=TS0 + i))
    assert [s.base_offset for s in log.segments][:3] == [0, 7, 14]


def test_roll_when_relative_offsets_would_overflow(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"index.interval.bytes": 1})
    log.append_as_follower(v2_batch(3, base_offset=0))
    far = 2**31 + 10
    log.append_as_follower(v2_batch(2, base_offset=far))
    log.append_as_follower(v2_batch(2, base_offset=far + 2))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert log.log_end_offset == far + 4
    farther = far + 2**31  # exactly 2^31 above the base: still too far
    log.append_as_follower(v2_batch(1, base_offset=farther))
    assert [s.base_offset for s in log.segments] == [0, far, farther]
    log.close()
    assert (tmp_path / "r-0" / f"{far:020d}.log").exists()
    log = _log(tmp_path, clock, **{"index.interval.bytes": 1})
    assert record_offsets(read_all(log)) == [0, 1, 2, far, far + 1, far + 2, far + 3, farther]
    assert [b.base_offset for b in read_all(log, far + 3)] == [far + 2, farther]


def test_an_empty_segment_is_replaced_when_offsets_jump_too_far(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"index.interval.bytes": 1})
    far = 2**33
    for i in range(4):
        log.append_as_follower(v2_batch(2, base_offset=far + 2 * i))
    assert [s.base_offset for s in log.segments] == [far]
    assert not (tmp_path / "r-0" / f"{0:020d}.log").exists()
    assert record_offsets(read_all(log)) == list(range(far, far + 8))
    assert [b.base_offset for b in read_all(log, far + 5)] == [far + 4, far + 6]


@pytest.mark.parametrize("what", ["roll", "close"])
def test_explicit_roll_and_reopen_keep_appending(tmp_path: Path, what: str) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock)
    log.append(v2_batch(3))
    if what == "roll":
        log.roll()
        log.roll()  # the active segment is empty: no new segment
        assert [s.base_offset for s in log.segments] == [0, 3]
    else:
        log.close()
        log = _log(tmp_path, clock)
    log.append(v2_batch(2))
    assert record_offsets(read_all(log)) == [0, 1, 2, 3, 4]
