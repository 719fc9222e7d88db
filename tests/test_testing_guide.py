"""The "Testing your app" guide (docs/testing-your-app.md, issue 44): its worked examples are the
files under docs/examples/testing/, shown in the page exactly as they are, and they run as written
(a pytest run of that directory, as a user's project would run them, with the plugin's broker)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "testing-your-app.md"
EXAMPLES = REPO / "docs" / "examples" / "testing"
_BLOCK = re.compile(r"```python\n# docs/examples/testing/(?P<name>\S+)\n(?P<code>.*?)```\n", re.S)


def test_the_page_shows_every_example_as_it_is() -> None:
    shown = {m.group("name"): m.group("code") for m in _BLOCK.finditer(PAGE.read_text())}
    files = {p.name: p.read_text() for p in EXAMPLES.glob("test_*.py")}
    assert len(files) >= 6
    assert shown == files


def test_the_examples_run_as_written(tmp_path: Path) -> None:
    # hypothesis's pytest plugin is left out: at the end of a session it imports a module, and
    # CPython 3.11 (gh-106905) can fail that compile ("AST constructor recursion depth mismatch")
    # after aiokafka's fenced producer; a user's project does not have it loaded anyway
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(EXAMPLES), "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
         "-q", "--durations=0", "--durations-min=0", f"--basetemp={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=dict(os.environ),
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert re.search(r"\b6 passed\b", done.stdout), done.stdout[-3000:]
    # each example's time (reported, not asserted: timing is not a test condition)
    for line in done.stdout.splitlines():
        if " call " in line:
            print(line)
