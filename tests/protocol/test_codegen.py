"""The committed generated code is current, and --check notices when it is not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFS = ROOT.parent / "shared" / "reference" / "kafka-protocol"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.codegen", *args], cwd=ROOT, capture_output=True, text=True)


def test_committed_output_is_current() -> None:
    result = _run("--check")
    assert result.returncode == 0, result.stderr


def test_check_fails_on_stale_output(tmp_path: Path) -> None:
    out = tmp_path / "messages"
    shutil.copytree(ROOT / "src" / "odradek" / "protocol" / "messages", out)
    defs = [str(DEFS / "messages"), str(DEFS / "coordinator-records")]
    assert _run(*defs, "--out", str(out), "--check").returncode == 0
    target = out / "produce.py"
    target.write_text(target.read_text().replace("(0, 11)", "(0, 12)"))
    result = _run(*defs, "--out", str(out), "--check")
    assert result.returncode == 1
    assert "produce.py" in result.stderr


def test_output_carries_no_prose_from_the_definitions() -> None:
    text = (ROOT / "src" / "odradek" / "protocol" / "messages" / "produce.py").read_text()
    assert "The transactional ID" not in text
    assert "Licensed to the Apache" not in text
