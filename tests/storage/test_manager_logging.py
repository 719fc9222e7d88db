"""Deleting a partition's log leaves a line in the log (issue 16: every deletion is logged)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.storage import LogManager
from tests.storage.storage_helpers import v2_batch


def test_deleting_a_log_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = LogManager([tmp_path])
    log = manager.get_or_create("gone", 3)
    for _ in range(5):
        log.append(v2_batch(2))
    with caplog.at_level(logging.INFO, logger="odradek.storage"):
        assert manager.delete("gone", 3)
    assert not (tmp_path / "gone-3").exists()
    lines = [r.getMessage() for r in caplog.records if "deleted the log of gone-3" in r.getMessage()]
    assert len(lines) == 1 and "offsets up to 9" in lines[0]
    manager.shutdown()
