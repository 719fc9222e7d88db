"""Reads of the batches just appended (a consumer that keeps up) take a short cut past the index
and the segment file: it must give exactly the region the full lookup gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.storage import Log, LogConfig, ReadResult

from .storage_helpers import TS0, legacy_batch, v2_batch


def _key(r: ReadResult) -> tuple[object, ...]:
    region = None if r.region is None else (r.region.segment.base_offset, r.region.position, r.region.length)
    return region, r.fetch_offset, r.log_start_offset, r.log_end_offset


def _read_both(log: Log, offset: int, max_bytes: int, max_offset: int | None, min_one: bool) -> None:
    fast = log.read(offset, max_bytes, max_offset, min_one_message=min_one)
    saved = list(log._segs.recent)
    log._segs.recent.clear()  # the full lookup: index, then batch headers from the file
    try:
        slow = log.read(offset, max_bytes, max_offset, min_one_message=min_one)
    finally:
        log._segs.recent.extend(saved)
    assert _key(fast) == _key(slow), (offset, max_bytes, max_offset, min_one)


@pytest.mark.parametrize("seed", range(6))
def test_reads_of_recent_batches_match_the_full_lookup(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = Log(
        tmp_path / "t-0",
        LogConfig.from_dict(
            {"segment.bytes": rng.choice([3000, 8000, 1 << 20]), "index.interval.bytes": rng.choice([1, 600, 4096])}
        ),
        clock=FakeClock(TS0),
        flush_inline=False,
    )
    hits = 0
    for _ in range(120):
        if rng.random() < 0.1:
            log.append(v2_batch(rng.randint(1, 3), value=b"x" * 40) + v2_batch(rng.randint(1, 3)), leader_epoch=0)
        else:
            log.append(v2_batch(rng.randint(1, 4), value=b"v" * rng.randint(0, 200)), leader_epoch=0)
        if rng.random() < 0.04 and log.log_end_offset > 3:
            log.truncate_to(log.log_end_offset - rng.randint(1, 3))
        end = log.log_end_offset
        for _ in range(6):
            offset = rng.randint(max(log.log_start_offset, end - 12), end)
            max_offset = rng.choice([None, end, rng.randint(offset, end), rng.randint(0, end)])
            hits += bool(log._segs.recent) and offset >= log._segs.recent[0][1]
            _read_both(log, offset, rng.choice([0, 1, 60, 400, 1 << 20]), max_offset, rng.random() < 0.5)
    assert hits > 50  # the short cut was taken


def test_message_sets_and_rolls_drop_the_recent_batches(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig.from_dict({"segment.bytes": 2000}), clock=FakeClock(TS0))
    log.append(v2_batch(2), leader_epoch=0)
    assert len(log._segs.recent) == 1
    log.append(legacy_batch(1, 2))
    assert not log._segs.recent
    _read_both(log, 2, 1 << 20, None, True)
    log.append(v2_batch(1), leader_epoch=0)
    segments = len(log.segments)
    while len(log.segments) == segments:
        log.append(v2_batch(1, value=b"z" * 300), leader_epoch=0)
    assert len(log._segs.recent) == 1  # only the batch that opened the new segment
    for offset in range(log.log_end_offset + 1):
        _read_both(log, offset, 1 << 20, None, True)
