"""Issue 16 fault 1 (storage part): descriptors per partition.

A broker with thousands of partitions ran out of descriptors at ~5 per partition.  Indexes now
hold no descriptor: an active segment's entries live in memory (written out by flushes), a sealed
segment's are read on first use and its file closed.  What is left is one descriptor per
``.log`` (the one sendfile reads from).
"""

from __future__ import annotations

import errno
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.storage import LogManager
from odradek.storage.files import FileOps
from odradek.storage.manager import _LOAD_CHUNK
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


class _RunsOut(FileOps):
    """Operating-system files that run out of descriptors after ``allowed`` opens."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self._lock = threading.Lock()

    def open(self, path: Path) -> int:
        with self._lock:
            self.allowed -= 1
            if self.allowed < 0:
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))
        return super().open(path)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_load_that_runs_out_of_descriptors_closes_what_it_opened_and_writes_nothing(tmp_path: Path) -> None:
    # Seen in CI: a broker under a low ``ulimit -n`` refused to start (as it should), but the
    # partitions loaded before the failure, and those the other loader threads went on loading,
    # kept their descriptors, and the event loop had none left to shut down with.
    manager = LogManager([tmp_path], CONFIG)
    for p in range(3 * _LOAD_CHUNK):
        log = manager.get_or_create("t", p)
        while len(log.segments) < 2:
            log.append(v2_batch(3, value=b"x" * 100))
    manager.shutdown()
    on_disk = _files(tmp_path)

    before = _open_fds()
    with ThreadPoolExecutor(2) as pool:
        for allowed in (0, 1, _LOAD_CHUNK, 2 * _LOAD_CHUNK + 1, 5 * _LOAD_CHUNK):  # 2 .logs a partition
            try:
                LogManager([tmp_path], CONFIG, files=_RunsOut(allowed), parallel_map=pool.map)
            except OSError as exc:
                assert exc.errno == errno.EMFILE
            else:
                raise AssertionError(f"loaded {6 * _LOAD_CHUNK} segments with {allowed} opens")
            assert _open_fds() == before, allowed
            assert _files(tmp_path) == on_disk, allowed

    again = LogManager([tmp_path], CONFIG)
    assert len(again) == 3 * _LOAD_CHUNK
    again.shutdown()
