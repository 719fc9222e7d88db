"""Recovery when a log is opened: clean shutdown, torn or garbage tails, lost or corrupt indexes,
files left behind by interrupted deletions, cleaning and swaps."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.records import read_batches
from odradek.storage import Log, LogConfig, LogManager, LogSegment

from .storage_helpers import (
    TS0,
    base_offsets,
    call_counter,
    parse_index,
    parse_log,
    parse_timeindex,
    read_all,
    record_offsets,
    records,
    v2_batch,
)

CONFIG = {"segment.bytes": 1200, "index.interval.bytes": 200}


def _manager(path: Path, clock: FakeClock | None = None) -> LogManager:
    return LogManager([path], CONFIG, clock=clock or FakeClock(TS0))


def _fill(log: Log, n: int, tag: str = "") -> None:
    for i in range(n):
        log.append(v2_batch(1 + i % 4, ts=TS0 + i, value=b"d" * (40 + i % 50), tag=f"{tag}{i}-"))


def _crash(manager: LogManager) -> None:
    """Stop without a clean shutdown: files are closed but no checkpoint or marker is written and
    the active segment's indexes stay preallocated."""
    for log in manager.logs():
        for seg in log.segments:
            seg.files.close(seg.fd)
            seg.closed = True


def _check_lookups(log: Log) -> None:
    """Every offset reads the batch that holds it."""
    for offset in range(log.log_start_offset, log.log_end_offset):
        first = next(read_batches(log.read(offset, 1).to_bytes()))
        assert first.base_offset <= offset <= first.last_offset


def test_clean_shutdown_skips_recovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _manager(tmp_path)
    _fill(manager.get_or_create("c", 0), 60)
    manager.shutdown()
    recovered = call_counter(LogSegment, "recover", monkeypatch)
    again = _manager(tmp_path)
    assert recovered == []
    log = again.get("c", 0)
    assert log is not None and log.recovered_bytes == 0 and log.recovery_point == log.log_end_offset
    point = log.log_end_offset  # checkpointed by the clean shutdown
    _fill(log, 30, tag="more")
    _crash(again)
    # unclean: every segment holding offsets from the checkpointed recovery point on is validated
    third = _manager(tmp_path)
    log = third.get("c", 0)
    assert log is not None
    assert len(log.segments) > 2
    assert {id(s) for s in recovered} == {id(s) for s in log.segments if s.next_offset > point}
    assert record_offsets(read_all(log)) == list(range(log.log_end_offset))


def test_unclean_recovery_starts_at_the_checkpointed_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(tmp_path)
    log = manager.get_or_create("c", 0)
    _fill(log, 60)
    log.flush()
    manager.checkpoint()
    flushed_segments = len(log.segments)
    _fill(log, 30, tag="late")
    total = len(log.segments)
    _crash(manager)
    recovered = call_counter(LogSegment, "recover", monkeypatch)
    again = _manager(tmp_path)
    log = again.get("c", 0)
    assert log is not None
    assert len(recovered) == total - flushed_segments + 1  # from the segment holding the point
    assert record_offsets(read_all(log)) == list(range(log.log_end_offset))


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00" * 64,
        b"\xff" * 64,
        bytes(range(40)),
        (7).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"x" * 30,
        (7).to_bytes(8, "big") + (200).to_bytes(4, "big") + b"\x00\x00\x00\x00\x09" + b"y" * 200,
        b"rnd",
    ],
)
def test_garbage_after_the_last_batch_is_truncated(tmp_path: Path, garbage: bytes) -> None:
    if garbage == b"rnd":
        garbage = random.Random(5).randbytes(3000)
    manager = _manager(tmp_path)
    log = manager.get_or_create("g", 0)
    _fill(log, 40)
    end, path, size = log.log_end_offset, log.active.log_path, log.active.size
    _crash(manager)
    with open(path, "ab") as f:
        f.write(garbage)
    again = _manager(tmp_path)
    log = again.get("g", 0)
    assert log is not None
    assert log.log_end_offset == end
    assert log.recovered_bytes == len(garbage)
    assert path.stat().st_size == size
    info = log.append(v2_batch(2))
    assert info.first_offset == end
    assert record_offsets(read_all(log)) == list(range(end + 2))
    again.shutdown()
    assert parse_log(path)[1] == 0


def test_a_torn_last_batch_is_truncated(tmp_path: Path) -> None:
    rng = random.Random(11)
    for round_ in range(8):
        d = tmp_path / str(round_)
        manager = _manager(d)
        log = manager.get_or_create("t", 0)
        _fill(log, 25)
        last = log.append(v2_batch(5, value=b"L" * 150))
        path = log.active.log_path
        _crash(manager)
        entries, _ = parse_log(path)
        cut = entries[-1].position + rng.randrange(1, entries[-1].size)
        os.truncate(path, cut)
        again = _manager(d)
        log = again.get("t", 0)
        assert log is not None
        assert log.log_end_offset == last.first_offset
        assert log.recovered_bytes == cut - entries[-1].position
        assert record_offsets(read_all(log)) == list(range(last.first_offset))
        _check_lookups(log)
        again.shutdown()


def test_a_corrupt_batch_truncates_the_log_there(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    log = manager.get_or_create("x", 0)
    _fill(log, 80)
    victim_segment = log.segments[-3]
    entries, _ = parse_log(victim_segment.log_path)
    victim = entries[len(entries) // 2]
    _crash(manager)
    with open(victim_segment.log_path, "r+b") as f:
        f.seek(victim.position + victim.size - 3)
        f.write(b"\xde\xad")
    again = _manager(tmp_path)
    log = again.get("x", 0)
    assert log is not None
    first = victim.first_offset
    assert log.log_end_offset == first
    assert base_offsets(tmp_path / "x-0")[-1] == victim_segment.base_offset  # later segments gone
    assert record_offsets(read_all(log)) == list(range(first))
    assert log.append(v2_batch(1)).first_offset == first
    again.shutdown()


@pytest.mark.parametrize("damage", ["delete", "garbage", "zero-length", "partial-entry", "out-of-order"])
@pytest.mark.parametrize("clean", [True, False])
def test_lost_or_corrupt_indexes_are_rebuilt(tmp_path: Path, damage: str, clean: bool) -> None:
    manager = _manager(tmp_path)
    log = manager.get_or_create("i", 0)
    _fill(log, 80)
    manager.shutdown()
    pdir = tmp_path / "i-0"
    bases = base_offsets(pdir)
    originals = {
        b: (parse_index(pdir / f"{b:020d}.index"), parse_timeindex(pdir / f"{b:020d}.timeindex"))
        for b in bases
    }
    assert sum(len(i) for i, _t in originals.values()) > 10
    rng = random.Random(3)
    for b in bases[1:-1:2]:
        for suffix in (".index", ".timeindex"):
            path = pdir / f"{b:020d}{suffix}"
            size = path.stat().st_size
            if damage == "delete":
                path.unlink()
            elif damage == "garbage":
                path.write_bytes(rng.randbytes(max(size, 24)))
            elif damage == "zero-length":
                path.write_bytes(b"")
            elif damage == "partial-entry":
                path.write_bytes(path.read_bytes() + b"\x01\x02\x03")
            else:
                entries = path.read_bytes()
                width = 8 if suffix == ".index" else 12
                if len(entries) >= 2 * width:
                    path.write_bytes(entries[width : 2 * width] + entries[:width] + entries[2 * width :])
    if not clean:
        (tmp_path / ".kafka_cleanshutdown").unlink()
    again = _manager(tmp_path)
    log = again.get("i", 0)
    assert log is not None
    assert record_offsets(read_all(log)) == list(range(log.log_end_offset))
    _check_lookups(log)
    found = log.offset_for_timestamp(TS0 + 40)
    assert found is not None and found[1] == TS0 + 40
    again.shutdown()
    if damage == "zero-length":
        return  # an empty index is valid (a segment below index.interval.bytes): it is kept
    for b in bases:
        assert (
            parse_index(pdir / f"{b:020d}.index"),
            parse_timeindex(pdir / f"{b:020d}.timeindex"),
        ) == originals[b]


def test_leftover_deleted_cleaned_and_tmp_files_are_removed(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    log = manager.get_or_create("l", 0)
    _fill(log, 60)
    manager.shutdown()
    pdir = tmp_path / "l-0"
    bases = base_offsets(pdir)
    # a deletion interrupted after renaming, a cleaning pass that never committed, a temp file
    first = pdir / f"{bases[0]:020d}.log"
    for suffix in (".log", ".index", ".timeindex"):
        os.rename(first.with_suffix(suffix), first.with_suffix(suffix + ".deleted"))
    shutil.copy(pdir / f"{bases[1]:020d}.log", pdir / f"{bases[1]:020d}.log.cleaned")
    (pdir / "leader-epoch-checkpoint.tmp").write_text("0\n1\n0 0\n")
    again = _manager(tmp_path)
    log = again.get("l", 0)
    assert log is not None
    leftovers = [p.name for p in pdir.iterdir() if p.name.endswith((".deleted", ".cleaned", ".tmp"))]
    assert leftovers == []
    assert log.log_start_offset == bases[1]
    assert record_offsets(read_all(log)) == list(range(bases[1], log.log_end_offset))
    again.shutdown()


def test_a_committed_swap_replaces_the_segments_it_covers(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    log = manager.get_or_create("s", 0)
    _fill(log, 60)
    segs = log.segments
    # what a cleaner writes: a compacted copy of the first two segments (every other batch)
    data = b"".join(seg.read_bytes(0, seg.size) for seg in segs[:2])
    kept = list(read_batches(data))[::2]
    swap_bytes = b"".join(data[b.position : b.position + b.size] for b in kept)
    base = segs[0].base_offset
    second = segs[1].base_offset
    expected = [r for b in kept for r in b.records] + [
        r for seg in segs[2:] for b in read_batches(seg.read_bytes(0, seg.size)) for r in b.records
    ]
    manager.shutdown()
    pdir = tmp_path / "s-0"
    (pdir / f"{base:020d}.log.swap").write_bytes(swap_bytes)
    (pdir / f"{base:020d}.index.swap").write_bytes(b"")
    (pdir / f"{base:020d}.timeindex.swap").write_bytes(b"")
    again = _manager(tmp_path)
    log = again.get("s", 0)
    assert log is not None
    assert not list(pdir.glob("*.swap"))
    assert not (pdir / f"{second:020d}.log").exists()
    assert base_offsets(pdir)[0] == base
    got = [(r.offset, r.key) for r in (r for b in read_all(log) for r in b.records)]
    assert got == [(r.offset, r.key) for r in expected]
    for offset in (r.offset for r in expected):
        first = next(read_batches(log.read(offset, 1).to_bytes()))
        assert first.base_offset <= offset <= first.last_offset
    again.shutdown()


def test_orphaned_index_files_do_not_leak_into_new_segments(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    manager = _manager(tmp_path, clock)
    log = manager.get_or_create("o", 0)
    _fill(log, 40)
    bases = [s.base_offset for s in log.segments]
    manager.shutdown()
    pdir = tmp_path / "o-0"
    # a follower truncation interrupted by a crash: the later .log files were removed, their
    # indexes not yet
    for b in bases[2:]:
        (pdir / f"{b:020d}.log").unlink()
    assert parse_index(pdir / f"{bases[2]:020d}.index")
    (tmp_path / ".kafka_cleanshutdown").unlink()
    again = _manager(tmp_path, clock)
    log = again.get("o", 0)
    assert log is not None
    end = log.log_end_offset
    assert end == bases[2]
    # the next segment has the base offset of a stale index
    log.roll()
    assert log.active.base_offset == bases[2]
    _fill(log, 40, tag="new")
    assert record_offsets(read_all(log)) == list(range(log.log_end_offset))
    _check_lookups(log)
    keys = [r[2] for r in records(read_all(log, end))]
    assert all(k is not None and k.startswith(b"knew") for k in keys)
    again.shutdown()


def test_a_stale_segment_below_the_log_end_of_its_predecessor_is_dropped(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    log = manager.get_or_create("r", 0)
    _fill(log, 40)
    stale_base = log.segments[1].base_offset
    stale = log.segments[1].read_bytes(0, log.segments[1].size)
    # the follower truncated back into the first segment, then wrote past the old boundary
    log.truncate_to(2)
    while log.log_end_offset < stale_base + 5:
        log.append(v2_batch(5, value=b"n"))
    end = log.log_end_offset
    assert len(log.segments) == 1
    _crash(manager)
    # the removal of the old segment file did not survive a power cut: it is back
    (tmp_path / "r-0" / f"{stale_base:020d}.log").write_bytes(stale)
    again = _manager(tmp_path)
    log = again.get("r", 0)
    assert log is not None
    assert log.log_end_offset == end
    assert record_offsets(read_all(log)) == list(range(end))
    assert log.append(v2_batch(1)).first_offset == end
    again.shutdown()


def test_a_log_without_segments_starts_at_its_checkpoints(tmp_path: Path) -> None:
    pdir = tmp_path / "empty-0"
    log = Log(pdir, LogConfig.from_dict({}), recovery_point=70, log_start_offset=50, clock=FakeClock(TS0))
    assert (log.log_start_offset, log.log_end_offset) == (70, 70)
    assert base_offsets(pdir) == [70]
    log.close()
