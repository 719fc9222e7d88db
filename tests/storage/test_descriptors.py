"""Issue 16 fault 1 (storage part): descriptors per partition.

A broker with thousands of partitions ran out of descriptors at ~5 per partition.  Indexes now
hold no descriptor: an active segment's entries live in memory (written out by flushes), a sealed
segment's are read on first use and its file closed.  What is left is one descriptor per
``.log`` (the one sendfile reads from).
"""

from __future__ import annotations

import os
from pathlib import Path

from odradek.storage import LogManager
from tests.storage.storage_helpers import read_all, record_offsets, v2_batch

CONFIG = {"segment.bytes": 3000, "index.interval.bytes": 200}


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_new_partition_costs_one_descriptor_and_a_sealed_segment_one_more(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], CONFIG)
    before = _open_fds()
    for p in range(20):
        manager.get_or_create("empty", p)
    assert _open_fds() - before == 20  # the active .log of each

    before = _open_fds()
    logs = [manager.get_or_create("full", p) for p in range(5)]
    for log in logs:
        while len(log.segments) < 4:
            log.append(v2_batch(3, value=b"x" * 100))
        log.flush()
    assert _open_fds() - before == 5 * 4  # 3 sealed + 1 active .log each
    for log in logs:  # lookups through every index leave no descriptor behind
        assert record_offsets(read_all(log, max_bytes=300)) == list(range(log.log_end_offset))
        assert log.offset_for_timestamp(0) is not None
    assert _open_fds() - before == 5 * 4
    manager.shutdown()

    before = _open_fds()
    again = LogManager([tmp_path], CONFIG)
    assert _open_fds() - before == 1 + 20 + 5 * 4  # the log dir lock, then one per .log
    for p in range(5):
        log = again.get("full", p)
        assert log is not None
        assert record_offsets(read_all(log, max_bytes=300)) == list(range(log.log_end_offset))
    again.shutdown()
    assert _open_fds() == before
