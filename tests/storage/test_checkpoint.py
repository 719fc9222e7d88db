"""Checkpoint files: Kafka's text format, atomic replacement."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage.checkpoint import read_epochs, read_offsets, write_epochs, write_offsets
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
