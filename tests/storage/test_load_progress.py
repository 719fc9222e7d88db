"""Start-up says what it does with many partitions: how many logs it loads and whether it
recovers them, a progress line per tenth, and nothing for a handful."""

from __future__ import annotations

import logging
import re
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
    lines = _lines(caplog)
    assert lines[0] == "loading 250 partition logs from 1 log dirs (clean shutdown)"
    # progress after every 100 logs or so (they load in chunks), never at the end
    progress = [re.fullmatch(r"loaded (\d+) of 250 partition logs \((\d+)%\)", line) for line in lines[1:]]
    assert progress and all(progress), lines
    done = [int(m.group(1)) for m in progress if m]
    assert done == sorted(set(done)) and done[0] >= 100 and done[-1] < 250, done
    assert [int(m.group(2)) for m in progress if m] == [n * 100 // 250 for n in done]
    assert len(again) == 250
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
