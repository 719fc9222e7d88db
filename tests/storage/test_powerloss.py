"""Power-loss tests: random workloads through :class:`powerloss.PowerLossFiles`, a simulated power
cut, and a reopen through the normal code (the default file layer).

The property: every batch acknowledged as flushed (appended with ``flush.messages=1``, or below
the recovery point a ``flush()`` returned) is intact after the power cut, the log reads back
with valid CRCs and without gaps or duplicate offsets.  The same check against a file layer whose
``datasync`` (or ``sync_dir``) does nothing must fail, or the check proves nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.storage import LogManager
from odradek.storage.manager import CLEAN_SHUTDOWN_FILE

from .powerloss import NoDatasyncFiles, NoDirSyncFiles, PowerLossFiles
from .storage_helpers import TS0, read_all, v2_batch

CONFIG = {"segment.bytes": 4000, "index.interval.bytes": 300}


@dataclass
class Workload:
    acked: dict[int, tuple[int, int, str]] = field(default_factory=dict)  # first -> last, count, tag
    start: int = 0  # the log start offset before the power cut
    appended: int = 0
    flushes: int = 0


def run(directory: Path, files: PowerLossFiles, rng: random.Random, *, flush_each: bool) -> Workload:
    """Random appends, flushes, checkpoints, rolls and retention; then the power goes."""
    config = dict(CONFIG, **({"flush.messages": 1} if flush_each else {}))
    manager = LogManager([directory], config, clock=FakeClock(TS0), files=files)
    log = manager.get_or_create("p", 0, config)
    w = Workload(start=log.log_start_offset)
    pending: dict[int, tuple[int, int, str]] = {}
    for step in range(rng.randint(20, 100)):
        r = rng.random()
        if r < 0.75:
            tag = f"s{step}"
            size = rng.choice((5, 50, 500, 1500))
            n = rng.randint(1, min(6, 3000 // size))
            info = log.append(v2_batch(n, value=b"p" * size, tag=tag))
            (w.acked if flush_each else pending)[info.first_offset] = (info.last_offset, n, tag)
            w.appended += 1
        elif r < 0.87:
            point = log.flush()
            w.flushes += 1
            for first in [f for f, (last, _n, _t) in pending.items() if last < point]:
                w.acked[first] = pending.pop(first)
        elif r < 0.92:
            manager.checkpoint()
        elif r < 0.95:
            log.roll()
        elif log.log_end_offset > log.log_start_offset:
            log.maybe_increment_log_start_offset(rng.randint(log.log_start_offset, log.log_end_offset))
            log.delete_old_segments()
    w.start = log.log_start_offset
    files.power_cut(rng)
    return w


def lost_after_reopen(directory: Path, w: Workload) -> list[str]:
    """Reopen with the normal file layer; the acknowledged appends that are not intact."""
    manager = LogManager([directory], CONFIG)
    log = manager.get("p", 0)
    assert log is not None
    try:
        batches = read_all(log)  # CRC-checked, inner records too
        # the first batch may start below the log start offset (it holds it)
        offsets = [r.offset for b in batches for r in b.records if r.offset >= log.log_start_offset]
        assert offsets == list(range(log.log_start_offset, log.log_end_offset)), "gaps or duplicates"
        assert log.log_start_offset <= max(w.start, 0)
        keys = {r.offset: r.key for b in batches for r in b.records}
        lost = []
        for first, (last, n, tag) in sorted(w.acked.items()):
            if first < w.start:
                continue  # removed by retention before the power cut
            if [keys.get(o) for o in range(first, last + 1)] != [f"k{tag}{i}".encode() for i in range(n)]:
                lost.append(tag)
        # the log keeps working
        end = log.log_end_offset
        assert log.append(v2_batch(1)).first_offset == end
    finally:
        manager.shutdown()
    return lost


@pytest.mark.parametrize("flush_each", [True, False], ids=["flush.messages=1", "explicit-flush"])
def test_acknowledged_batches_survive_a_power_cut(tmp_path: Path, flush_each: bool) -> None:
    acked_total = 0
    for seed in range(15):
        rng = random.Random(seed)
        directory = tmp_path / str(seed)
        files = PowerLossFiles()
        w = run(directory, files, rng, flush_each=flush_each)
        assert files.datasyncs > 0
        assert lost_after_reopen(directory, w) == [], f"seed {seed}"
        acked_total += len(w.acked)
    assert acked_total > 100


def test_several_power_cuts_in_a_row(tmp_path: Path) -> None:
    rng = random.Random(99)
    acked: dict[int, tuple[int, int, str]] = {}
    for _ in range(8):
        files = PowerLossFiles()
        w = run(tmp_path, files, rng, flush_each=rng.random() < 0.5)
        acked = {f: v for f, v in acked.items() if f >= w.start}
        acked.update(w.acked)
        w.acked = acked
        assert lost_after_reopen(tmp_path, w) == []


@pytest.mark.parametrize("broken", [NoDatasyncFiles, NoDirSyncFiles])
@pytest.mark.parametrize("flush_each", [True, False], ids=["flush.messages=1", "explicit-flush"])
def test_a_broken_sync_fails_the_same_check(
    tmp_path: Path, broken: type[PowerLossFiles], flush_each: bool
) -> None:
    """The check above is not vacuous: without working syncs acknowledged batches are lost."""
    caught = 0
    for seed in range(4):
        rng = random.Random(seed)
        directory = tmp_path / str(seed)
        w = run(directory, broken(), rng, flush_each=flush_each)
        if not w.acked:
            continue
        try:
            lost = lost_after_reopen(directory, w)
        except AssertionError:
            lost = ["(the log did not even read back consistently)"]
        caught += bool(lost)
    assert caught >= 3


def test_follower_truncation_is_durable_before_new_data(tmp_path: Path) -> None:
    """A follower truncates into an earlier segment and writes past the old boundary; a power cut
    must not bring back the removed segments (they would follow the new data after a gap)."""
    for seed in range(10):
        rng = random.Random(seed)
        directory = tmp_path / str(seed)
        files = PowerLossFiles()
        manager = LogManager([directory], CONFIG, clock=FakeClock(TS0), files=files)
        log = manager.get_or_create("p", 0)
        for i in range(60):
            log.append(v2_batch(3, value=b"o" * 100, tag=f"old{i}-"))
        log.flush()
        bases = [s.base_offset for s in log.segments]
        target = rng.randint(1, bases[2] - 1)
        log.truncate_to(target)
        end = log.log_end_offset
        w = Workload()
        for i in range(rng.randint(1, 5)):
            info = log.append(v2_batch(2, value=b"n", tag=f"new{i}-"))
            w.acked[info.first_offset] = (info.last_offset, 2, f"new{i}-")
        log.flush()
        files.power_cut(rng)
        assert lost_after_reopen(directory, w) == []
        again = LogManager([directory], CONFIG)
        reopened = again.get("p", 0)
        assert reopened is not None
        assert reopened.log_end_offset == end + 2 * len(w.acked) + 1  # + the check's own append
        again.shutdown()


def test_the_clean_shutdown_marker_stays_gone_after_a_power_cut(tmp_path: Path) -> None:
    """Once a start has removed the marker, a power cut must not bring it back: the next start
    would skip recovery and keep a torn tail."""
    manager = LogManager([tmp_path], CONFIG)
    log = manager.get_or_create("p", 0)
    for i in range(10):
        log.append(v2_batch(2, tag=str(i)))
    manager.shutdown()
    marker = tmp_path / CLEAN_SHUTDOWN_FILE
    assert marker.exists()
    files = PowerLossFiles()
    files.track(marker)  # the marker is durable: written and fsynced by the shutdown
    manager = LogManager([tmp_path], CONFIG, files=files)
    log = manager.get("p", 0)
    assert log is not None
    for i in range(20):  # unflushed appends: the power cut tears them
        log.append(v2_batch(3, value=b"t" * 700, tag=f"x{i}"))
    files.power_cut(random.Random(1))
    assert not marker.exists()
    again = LogManager([tmp_path], CONFIG)
    reopened = again.get("p", 0)
    assert reopened is not None
    assert [r.offset for b in read_all(reopened) for r in b.records] == list(range(reopened.log_end_offset))
    again.shutdown()
