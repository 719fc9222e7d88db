"""Damage is reported, never skipped silently: a read that meets a corrupt batch logs the partition,
segment, position and offset (rate-limited), and at start-up offsets that no segment holds (a
``.log`` deleted under a running broker) get a WARN naming the partition and the offsets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.records import BatchBuilder, iter_batch_headers
from odradek.storage import CorruptSegmentError, LogManager
from odradek.storage.segments import CORRUPT_READ_LOG_INTERVAL_MS

TS0 = 1_700_000_000_000
LOGGER = "odradek.storage.log"


def _batch(i: int, key: bytes | None = None) -> bytes:
    b = BatchBuilder()
    for j in range(3):
        b.append(TS0 + i, key or b"k%d-%d" % (i, j), b"value-%d-%d" % (i, j))
    return b.build()


def _fill(root: Path, batches: int, clock: FakeClock | None = None, **config: object) -> LogManager:
    manager = LogManager([root], {"segment.bytes": 400, **config}, clock=clock or FakeClock(TS0))
    log = manager.get_or_create("t", 0)
    for i in range(batches):
        log.append(_batch(i))
    return manager


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def test_a_read_of_a_corrupt_batch_is_logged_once_a_minute(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(TS0)
    _fill(tmp_path, 12, clock).shutdown()
    seg = sorted((tmp_path / "t-0").glob("*.log"))[1]
    data = bytearray(seg.read_bytes())
    h = next(iter(iter_batch_headers(bytes(data))))
    data[h.position + 70] ^= 0xFF  # a record byte: the CRC no longer matches
    seg.write_bytes(bytes(data))
    manager = LogManager([tmp_path], {"segment.bytes": 400}, clock=clock)
    log = manager.get("t", 0)
    assert log is not None
    caplog.set_level(logging.INFO, logger=LOGGER)
    caplog.clear()
    for _ in range(6):  # a consumer polling the damaged offset
        with pytest.raises(CorruptSegmentError):
            log.read(h.base_offset, 1 << 16)
    lines = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    message = lines[0].getMessage()
    assert message.startswith(
        f"partition t-0: a read at offset {h.base_offset} met a corrupt entry in segment {seg.name} at position "
        f"{h.position} and was answered CORRUPT_MESSAGE"
    ), message
    assert "CRC mismatch" in message and "dump-log --verify" in message
    clock.advance(CORRUPT_READ_LOG_INTERVAL_MS)
    with pytest.raises(CorruptSegmentError):
        log.read(h.base_offset, 1 << 16)
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]
    assert len(lines) == 2 and lines[1].endswith("; 5 more reads met corrupt entries of this partition since the last such line")
    manager.shutdown()


def _segments(part: Path) -> list[Path]:
    return sorted(part.glob("*.log"))


def test_a_deleted_middle_segment_is_reported_at_start_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _fill(tmp_path, 12).shutdown()
    segs = _segments(tmp_path / "t-0")
    assert len(segs) >= 4
    gone, after = segs[1], segs[2]
    gone.unlink()  # its .index and .timeindex stay, as when a .log is deleted under a running broker
    caplog.set_level(logging.INFO, logger=LOGGER)
    manager = LogManager([tmp_path], {"segment.bytes": 400}, clock=FakeClock(TS0))
    warnings = _warnings(caplog)
    assert any(
        w.startswith(f"partition t-0: offsets {int(gone.stem)} to {int(after.stem) - 1} are in no segment: "
                     f"{segs[0].name} ends at offset {int(gone.stem)} and {after.name} starts at {int(after.stem)}")
        and f"the index files of segment(s) {int(gone.stem)} were there without their .log" in w
        for w in warnings
    ), warnings
    log = manager.get("t", 0)
    assert log is not None and log.log_end_offset == 36  # the rest is served
    manager.shutdown()


def test_a_deleted_last_segment_is_reported_at_start_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _fill(tmp_path, 12).shutdown()
    segs = _segments(tmp_path / "t-0")
    segs[-1].unlink()
    caplog.set_level(logging.INFO, logger=LOGGER)
    manager = LogManager([tmp_path], {"segment.bytes": 400}, clock=FakeClock(TS0))
    end = int(segs[-1].stem)
    assert (f"partition t-0: the log was flushed up to offset 36 (recovery-point-offset-checkpoint) but its last "
            f"segment {segs[-2].name} ends at offset {end}: offsets {end} to 35 are in no segment") in "\n".join(
        _warnings(caplog))
    manager.shutdown()


def test_every_segment_deleted_is_reported_at_start_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _fill(tmp_path, 12).shutdown()
    for seg in _segments(tmp_path / "t-0"):
        seg.unlink()
    caplog.set_level(logging.INFO, logger=LOGGER)
    manager = LogManager([tmp_path], {"segment.bytes": 400}, clock=FakeClock(TS0))
    assert ("partition t-0: no segment file, but the log was flushed up to offset 36 "
            "(recovery-point-offset-checkpoint): offsets 0 to 35 are in no segment") in "\n".join(_warnings(caplog))
    manager.shutdown()


def test_a_sound_log_and_compaction_gaps_are_not_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(TS0)
    manager = LogManager([tmp_path], {"segment.bytes": 300, "cleanup.policy": "compact",
                                      "min.cleanable.dirty.ratio": 0.01}, clock=clock)
    log = manager.get_or_create("t", 0)
    for i in range(30):
        b = BatchBuilder()
        b.append(TS0 + i, b"k%d" % i if i % 5 == 1 else b"same", b"v%d" % i)
        log.append(b.build())
    manager.clean(TS0 + 10**9)
    manager.shutdown()
    bases = [int(s.stem) for s in _segments(tmp_path / "t-0")]
    caplog.set_level(logging.INFO, logger=LOGGER)
    LogManager([tmp_path], {"segment.bytes": 300}, clock=clock).shutdown()
    assert not [w for w in _warnings(caplog) if "in no segment" in w]
    # the gaps compaction left are there: without the cleaner checkpoint they would be reported
    (tmp_path / "cleaner-offset-checkpoint").unlink()
    caplog.clear()
    LogManager([tmp_path], {"segment.bytes": 300}, clock=clock).shutdown()
    assert [w for w in _warnings(caplog) if "in no segment" in w], bases
