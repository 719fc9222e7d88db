"""Start-up says what it does with many partitions: how many logs it loads and whether it
recovers them, a progress line per tenth, and nothing for a handful."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.storage.manager import LogManager


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "odradek.storage.manager"]


def test_loading_many_logs_reports_progress(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = LogManager([tmp_path])
    for p in range(250):
        manager.get_or_create("many", p)
    manager.shutdown()

    with caplog.at_level(logging.INFO, logger="odradek.storage.manager"):
        again = LogManager([tmp_path])
    assert _lines(caplog) == [
        "loading 250 partition logs from 1 log dirs (clean shutdown)",
        "loaded 100 of 250 partition logs (40%)",
        "loaded 200 of 250 partition logs (80%)",
    ]
    again.close()  # no clean-shutdown marker: the next start recovers every log

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="odradek.storage.manager"):
        third = LogManager([tmp_path])
    assert _lines(caplog)[0] == "loading 250 partition logs from 1 log dirs (250 after an unclean shutdown: recovering them)"
    assert len(third) == 250
    third.shutdown()


def test_a_few_logs_load_with_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = LogManager([tmp_path])
    for p in range(3):
        manager.get_or_create("few", p)
    manager.shutdown()
    with caplog.at_level(logging.INFO, logger="odradek.storage.manager"):
        LogManager([tmp_path]).shutdown()
    assert _lines(caplog) == ["loading 3 partition logs from 1 log dirs (clean shutdown)"]
