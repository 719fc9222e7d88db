"""What replication needs: truncation, follower appends that keep offsets, the leader-epoch cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.records import read_batches
from odradek.storage import CorruptRecordError, Log, LogConfig, LogManager
from odradek.storage.epoch import LeaderEpochCache

from .storage_helpers import (
    TS0,
    base_offsets,
    expected_index,
    parse_checkpoint,
    parse_index,
    parse_log,
    read_all,
    record_offsets,
    records,
    v2_batch,
)

CONFIG = {"segment.bytes": 700, "index.interval.bytes": 150}


def _log(tmp_path: Path, *, clean: bool = True) -> Log:
    return Log(tmp_path / "f-0", LogConfig.from_dict(CONFIG), clock=FakeClock(TS0), clean_shutdown=clean)


def _fill(log: Log, n: int, tag: str = "a") -> list[tuple[int, int]]:
    spans = []
    for i in range(n):
        info = log.append(v2_batch(1 + i % 3, value=b"f" * 60, tag=f"{tag}{i}-"))
        spans.append((info.first_offset, info.last_offset))
    return spans


def _check_files(pdir: Path) -> None:
    """After close: every index entry sits at a batch start with the right offset."""
    for base in base_offsets(pdir):
        entries, tail = parse_log(pdir / f"{base:020d}.log")
        assert tail == 0
        positions = {e.position: e for e in entries}
        index = parse_index(pdir / f"{base:020d}.index")
        assert [p for _r, p in index] == expected_index(entries, CONFIG["index.interval.bytes"])
        for rel, pos in index:
            assert positions[pos].last_offset == base + rel


@pytest.mark.parametrize("where", ["same segment", "segment boundary", "earlier segment"])
def test_truncate_to_removes_everything_from_the_offset(tmp_path: Path, where: str) -> None:
    log = _log(tmp_path)
    spans = _fill(log, 40)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    if where == "same segment":  # the second batch of the last segment holding two or more
        target = max(first for first, _last in spans if first not in bases and first > bases[1])
    elif where == "segment boundary":
        target = bases[-2]
    else:
        target = next(first for first, _last in spans if bases[1] < first < bases[2])
    assert log.truncate_to(target)
    assert log.log_end_offset == target
    assert record_offsets(read_all(log)) == list(range(target))
    assert all(s.base_offset < target or s.base_offset == 0 for s in log.segments)
    assert not log.truncate_to(target)  # nothing at or after it any more
    # appending continues at the truncation point, with new content
    more = _fill(log, 10, tag="b")
    assert more[0][0] == target
    keys = [r[2] for r in records(read_all(log))]
    assert keys[target].startswith(b"kb0-")
    log.close()
    _check_files(tmp_path / "f-0")
    for clean in (True, False):
        again = _log(tmp_path, clean=clean)
        assert again.log_end_offset == more[-1][1] + 1
        assert [r[2] for r in records(read_all(again))] == keys
        again.close()


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(v2_batch(5))
    log.append(v2_batch(5))
    log.truncate_to(7)
    assert log.log_end_offset == 5
    assert record_offsets(read_all(log)) == [0, 1, 2, 3, 4]


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 30)
    log.advance_high_watermark(20)
    log.truncate_fully_and_start_at(1000)
    pdir = tmp_path / "f-0"
    assert base_offsets(pdir) == [1000]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) == (1000,) * 4
    assert log.read(1000, 100).size == 0
    info = log.append_as_follower(v2_batch(3, base_offset=1000))
    assert (info.first_offset, info.last_offset) == (1000, 1002)
    info = log.append(v2_batch(2))
    assert (info.first_offset, info.last_offset) == (1003, 1004)
    log.close()
    again = _log(tmp_path, clean=False)
    assert record_offsets(read_all(again)) == list(range(1000, 1005))
    # truncating below the first segment also starts over
    again.truncate_to(10)
    assert (again.log_start_offset, again.log_end_offset) == (10, 10)


def test_append_as_follower_keeps_the_leaders_offsets(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_follower(v2_batch(3, base_offset=0, epoch=2))
    log.append_as_follower(v2_batch(2, base_offset=3, epoch=2) + v2_batch(1, base_offset=5, epoch=3))
    # a gap (offsets removed by compaction on the leader) is kept
    log.append_as_follower(v2_batch(2, base_offset=10, epoch=3))
    assert log.log_end_offset == 12
    batches = read_all(log)
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in batches] == [
        (0, 2, 2),
        (3, 4, 2),
        (5, 5, 3),
        (10, 11, 3),
    ]
    assert log.epochs.entries == [(2, 0), (3, 5)]
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(v2_batch(1, base_offset=11))  # below the log end
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(v2_batch(1, base_offset=20) + v2_batch(1, base_offset=15))  # backwards
    assert log.log_end_offset == 12
    # reads at offsets in the gap return the next batch
    assert next(read_batches(log.read(7, 1000).to_bytes())).base_offset == 10


def _cache(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_epoch_end_offsets_follow_offset_for_leader_epoch(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0), (3, 50), (6, 80)])
    leo = 120
    assert cache.end_offset_for(6, leo) == (6, 120)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, leo) == (3, 80)
    assert cache.end_offset_for(4, leo) == (3, 80)  # an unknown epoch: the largest one below it
    assert cache.end_offset_for(5, leo) == (3, 80)
    assert cache.end_offset_for(1, leo) == (1, 50)
    assert cache.end_offset_for(2, leo) == (1, 50)
    # older than every known epoch: the requested epoch ends where the first known one starts
    assert cache.end_offset_for(0, leo) == (0, 0)
    assert cache.end_offset_for(-1, leo) == (-1, -1)  # undefined epoch
    # newer than every known epoch (never expected): undefined
    assert cache.end_offset_for(7, leo) == (-1, -1)
    assert LeaderEpochCache(tmp_path / "empty").end_offset_for(3, leo) == (-1, -1)


def test_epoch_cache_assign_and_truncation(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0), (3, 50), (6, 80)])
    cache.assign(6, 90)  # same epoch later: nothing new
    cache.assign(2, 100)  # an older epoch: ignored
    assert cache.entries == [(1, 0), (3, 50), (6, 80)]
    cache.truncate_from_end(80)
    assert cache.entries == [(1, 0), (3, 50)]
    cache.truncate_from_start(60)
    assert cache.entries == [(3, 60)]
    assert cache.end_offset_for(1, 70) == (1, 60)
    assert LeaderEpochCache(tmp_path).entries == [(3, 60)]  # written through
    assert parse_checkpoint(tmp_path / "leader-epoch-checkpoint") == [["3", "60"]]


def test_a_load_fits_the_epoch_cache_to_the_log_with_one_checkpoint_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import odradek.storage.epoch as epoch_module

    writes: list[list[tuple[int, int]]] = []
    real = epoch_module.write_epochs
    monkeypatch.setattr(epoch_module, "write_epochs", lambda path, entries: (writes.append(list(entries)), real(path, entries)))
    cache = _cache(tmp_path, [(1, 0), (3, 50), (6, 80)])
    writes.clear()
    cache.truncate_to_log(60, 80)  # both cuts: what truncate_from_end then truncate_from_start give
    assert cache.entries == [(3, 60)] and writes == [[(3, 60)]]
    assert LeaderEpochCache(tmp_path).entries == [(3, 60)]
    cache.truncate_to_log(60, 80)  # already fitted: nothing written
    cache.truncate_to_log(0, 100)
    assert writes == [[(3, 60)]]


def test_log_keeps_its_epoch_cache_in_step(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], CONFIG, clock=FakeClock(TS0))
    log = manager.get_or_create("f", 0)
    for epoch, n in ((0, 5), (2, 10), (5, 10)):
        for _ in range(n):
            log.append(v2_batch(2, value=b"e" * 50), leader_epoch=epoch)
    assert log.epochs.entries == [(0, 0), (2, 10), (5, 30)]
    assert log.epochs.end_offset_for(2, log.log_end_offset) == (2, 30)
    assert log.epochs.end_offset_for(5, log.log_end_offset) == (5, 50)
    # a new leader said epoch 2 ended at 25 for it: truncate there
    log.truncate_to(24)
    assert log.log_end_offset == 24
    assert log.epochs.entries == [(0, 0), (2, 10)]
    log.append_as_follower(v2_batch(3, base_offset=24, epoch=7))
    assert log.epochs.entries[-1] == (7, 24)
    # retention moves the first epoch's start
    log.maybe_increment_log_start_offset(12)
    assert log.epochs.entries[0] == (2, 12)
    manager.shutdown()
    assert parse_checkpoint(tmp_path / "f-0" / "leader-epoch-checkpoint") == [["2", "12"], ["7", "24"]]
    again = LogManager([tmp_path], CONFIG, clock=FakeClock(TS0))
    reloaded = again.get("f", 0)
    assert reloaded is not None and reloaded.epochs.entries == [(2, 12), (7, 24)]
    assert reloaded.epochs.end_offset_for(2, reloaded.log_end_offset) == (2, 24)
    again.shutdown()


def test_epochs_beyond_a_torn_tail_are_dropped_on_recovery(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(v2_batch(3), leader_epoch=1)
    log.append(v2_batch(3), leader_epoch=4)
    path = log.active.log_path
    log.close()
    with open(path, "r+b") as f:  # tear the last batch
        f.truncate(path.stat().st_size - 5)
    again = _log(tmp_path, clean=False)
    assert again.log_end_offset == 3
    assert again.epochs.entries == [(1, 0)]
