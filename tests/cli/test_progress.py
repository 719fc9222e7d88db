"""Progress lines of long CLI work (``dump-log`` over many or big segments): on a terminal only."""

from __future__ import annotations

import io
import re
from pathlib import Path

from odradek.cli._progress import Progress
from tests.cli.test_dump_log import _make, _run


def test_progress_prints_on_a_terminal_only_and_at_most_once_per_interval() -> None:
    pipe = io.StringIO()
    quiet = Progress("work", stream=pipe, interval=0)  # StringIO is not a terminal
    quiet.update(lambda: "never called")
    assert pipe.getvalue() == "" and quiet.lines == 0
    forced = Progress("work", stream=pipe, interval=3600, enabled=True)
    forced.update(lambda: "not yet")  # the first line comes one interval after the start
    assert pipe.getvalue() == ""
    every = Progress("work", stream=pipe, interval=0, enabled=True)
    every.update(lambda: "1 of 2")
    every.update(lambda: "2 of 2")
    assert pipe.getvalue() == "work: 1 of 2\nwork: 2 of 2\n"


def test_dump_log_verify_reports_progress(tmp_path: Path) -> None:
    part = _make(tmp_path, 60, 1500)
    segments = len(list(part.glob("*.log")))
    assert segments >= 4
    result = _run("--verify", str(part), "--progress", "--progress-interval", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    pattern = re.compile(
        r"^dump-log: [\d.,]+ of [\d.,]+ MB \((\d+)%\) of segments checked, (\d+) segment\(s\), \d+ entries, 0 problem\(s\)$"
    )
    assert len(lines) == segments and all(pattern.match(line) for line in lines), lines
    last = pattern.match(lines[-1])
    assert last is not None and last.group(2) == str(segments) and last.group(1) == "100"
    assert int(pattern.match(lines[0]).group(1)) < 100  # type: ignore[union-attr]
    assert "OK:" in result.stdout

    dumped = _run(str(part), "--progress", "--progress-interval", "0")
    assert dumped.returncode == 0 and dumped.stderr.count("of segments dumped") == segments, dumped.stderr
    # not a terminal, no flag: nothing on stderr
    assert _run("--verify", str(part)).stderr == ""
