"""Compaction and retention on a worker thread while the owner's thread appends and rolls.

A broker runs retention and compaction on its I/O executor while its event loop appends (and
rolls segments).  Both replace the log's segment list; with the lock the broker installs
(:func:`odradek.storage.log.set_lock_factory`) neither replacement may lose the other's.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek._clock import FakeClock
from odradek.records import BatchBuilder, read_batches
from odradek.storage import Log, LogConfig
from odradek.storage import cleaner as cleaner_mod
from odradek.storage import log as log_mod


@pytest.fixture
def threaded_logs() -> Iterator[None]:
    log_mod.set_lock_factory(threading.RLock)
    try:
        yield
    finally:
        log_mod.set_lock_factory(contextlib.nullcontext)


def _log(tmp_path: Path, clock: FakeClock) -> Log:
    cfg = LogConfig.from_dict(
        {"cleanup.policy": "compact", "segment.bytes": 600, "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 0}
    )
    return Log(tmp_path / "t-0", cfg, clock=clock)


def _append(log: Log, clock: FakeClock, key: bytes, value: bytes) -> None:
    b = BatchBuilder()
    b.append(clock.now_ms(), key, value, [])
    log.append(b.build())


def _values(log: Log) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for seg in log.segments:
        for batch in read_batches(seg.read_bytes(0, seg.size)):
            for r in batch.records:
                assert r.key is not None
                latest[r.key] = r.value
    return latest


def test_a_roll_during_a_compaction_swap_is_kept(tmp_path: Path, threaded_logs: None) -> None:
    clock = FakeClock()
    log = _log(tmp_path, clock)
    for i in range(60):
        _append(log, clock, b"k%d" % (i % 5), b"v%d" % i)
    before_end = log.log_end_offset
    real_replace = log.replace_segments
    rolled: list[Any] = []
    fired: list[bool] = []

    def appender() -> None:  # the event loop: appends until the active segment rolls
        n = len(log.segments)
        i = 0
        while len(log.segments) <= n and i < 200:
            _append(log, clock, b"new%d" % i, b"x" * 40)
            i += 1
        rolled.append(log.active)

    def replace_with_a_roll_inside(old: Any, new: Any) -> None:
        # the appender runs while the cleaner (first group) is between reading and replacing
        # the list
        if fired:
            real_replace(old, new)
            return
        fired.append(True)
        real_rename = new.rename_suffix

        def rename(suffix: str) -> None:
            if suffix == "":
                t = threading.Thread(target=appender)
                t.start()
                t.join(0.5)  # with the lock it blocks until this swap completes
                real_rename(suffix)
                return
            real_rename(suffix)

        new.rename_suffix = rename
        real_replace(old, new)

    log.replace_segments = replace_with_a_roll_inside  # type: ignore[method-assign]
    cleaner_mod.clean(log, 0, clock.now_ms())
    for _ in range(100):  # the appender finishes once the swap released the lock
        if rolled:
            break
        threading.Event().wait(0.05)
    assert rolled, "the appender never rolled"
    assert any(s is rolled[0] for s in log.segments), "the segment rolled during the swap was dropped from the list"
    assert all(not s.closed for s in log.segments)
    names = {p.name for p in (tmp_path / "t-0").iterdir()}
    for seg in log.segments:
        assert f"{seg.base_offset:020d}.log" in names, f"segment {seg.base_offset} in the list has no file"
    assert log.log_end_offset > before_end
    latest = _values(log)
    assert latest[b"k4"] == b"v59"
    assert all(latest[b"new%d" % i] == b"x" * 40 for i in range(3))


def test_retention_on_a_thread_and_appends_keep_every_recent_record(tmp_path: Path, threaded_logs: None) -> None:
    clock = FakeClock()
    cfg = LogConfig.from_dict({"segment.bytes": 600, "retention.bytes": 3000, "file.delete.delay.ms": 0})
    log = Log(tmp_path / "r-0", cfg, clock=clock)
    stop = threading.Event()
    errors: list[BaseException] = []

    def retention() -> None:
        try:
            while not stop.is_set():
                log.delete_old_segments()
                log.delete_pending()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=retention)
    t.start()
    try:
        for i in range(3000):
            _append(log, clock, b"k", b"%06d" % i)
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    # the list is a contiguous run of segments ending at the log end, all with their files
    segs = log.segments
    for a, b in itertools.pairwise(segs):
        assert a.next_offset == b.base_offset
    assert segs[-1].next_offset == log.log_end_offset == 3000
    assert segs[0].base_offset == log.log_start_offset
    offsets = [r.offset for s in segs for batch in read_batches(s.read_bytes(0, s.size)) for r in batch.records]
    assert offsets == list(range(log.log_start_offset, 3000))
