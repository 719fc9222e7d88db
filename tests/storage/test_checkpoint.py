"""Checkpoint files: Kafka's text format, atomic replacement."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from odradek.storage.checkpoint import read_epochs, read_offsets, write_atomic, write_epochs, write_offsets
from odradek.storage.errors import StorageError


def test_offsets_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offsets(path, {("orders", 1): 77, ("orders", 0): 1234, ("a-b.c", 12): 0})
    assert path.read_text() == "0\n3\na-b.c 12 0\norders 0 1234\norders 1 77\n"
    assert read_offsets(path) == {("orders", 1): 77, ("orders", 0): 1234, ("a-b.c", 12): 0}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_epochs_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_epochs(path, [(0, 0), (3, 150)])
    assert path.read_text() == "0\n2\n0 0\n3 150\n"
    assert read_epochs(path) == [(0, 0), (3, 150)]


def test_missing_is_empty_and_malformed_is_an_error(tmp_path: Path) -> None:
    assert read_offsets(tmp_path / "nope") == {}
    bad = tmp_path / "bad"
    bad.write_text("0\n2\ntopic 0 5\n")
    with pytest.raises(StorageError):
        read_offsets(bad)
    bad.write_text("7\n0\n")
    with pytest.raises(StorageError):
        read_offsets(bad)


def test_concurrent_writers_of_one_checkpoint_never_fail_nor_expose_an_empty_file(tmp_path: Path) -> None:
    """Issue 16 fault 6: writers shared one ``.tmp`` name, so one writer's rename took the other's
    file away (FileNotFoundError) and a reader could find the checkpoint empty.  With a unique temp
    file per write, every write succeeds and every read parses a complete checkpoint."""
    path = tmp_path / "log-start-offset-checkpoint"
    write_offsets(path, {("t", p): 0 for p in range(20)})
    errors: list[BaseException] = []
    seen: list[int] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        try:
            for i in range(150):
                write_offsets(path, {("t", p): w * 1000 + i for p in range(20)})
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        while not stop.is_set():
            try:
                offsets = read_offsets(path)
            except BaseException as exc:
                errors.append(exc)
                return
            seen.append(len(offsets))

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    assert seen and set(seen) == {20}
    assert len(read_offsets(path)) == 20
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    write_atomic(path, "version=0\n")

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", failing_replace)
        with pytest.raises(OSError):
            write_atomic(path, b"version=1\n")
    assert path.read_text() == "version=0\n"
    assert sorted(os.listdir(tmp_path)) == ["meta.properties"]


def test_temp_files_left_by_a_crash_are_removed_at_start(tmp_path: Path) -> None:
    from odradek.storage import LogManager

    (tmp_path / "recovery-point-offset-checkpoint.x1y2z3.tmp").write_text("0\n")
    manager = LogManager([tmp_path])
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    manager.shutdown()
