"""Scale: 1,000 empty partitions created, shut down and opened again (cleanly, and after a crash)
by a child process, so that time and peak RSS are the storage layer's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("scale_child.py")
PARTITIONS = 1000
MB = 1 << 20


def _child(mode: str, directory: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, str(CHILD), mode, str(directory), str(PARTITIONS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if mode != "crash" else {}


def test_a_thousand_empty_partitions_open_fast_in_little_memory(tmp_path: Path) -> None:
    created = _child("create", tmp_path)
    assert created["partitions"] == PARTITIONS
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == PARTITIONS
    clean = _child("open", tmp_path)
    _child("crash", tmp_path)  # a start, then a crash: preallocated indexes, no marker
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    unclean = _child("open", tmp_path)
    for name, run in (("create", created), ("clean open", clean), ("open after a crash", unclean)):
        print(
            f"{name}: {run['partitions']} partitions in {run['seconds']:.2f} s (shutdown "
            f"{run['shutdown_seconds']:.2f} s), peak RSS {run['rss_peak'] / MB:.1f} MB "
            f"(baseline {run['rss_baseline'] / MB:.1f} MB), {run['fds']} fds, {run['maps']} maps"
        )
        assert run["partitions"] == PARTITIONS
        assert run["rss_peak"] < 150 * MB, name
    assert clean["seconds"] < 5.0
    assert unclean["seconds"] < 5.0


def test_recovering_a_large_segment_reads_it_in_chunks(tmp_path: Path) -> None:
    """Recovery after a crash validates the whole active segment; it must not read it into
    memory at once (segment.bytes is 1 GiB by default)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    batches = 100  # of 1.5 MiB each
    subprocess.run(
        [sys.executable, str(CHILD), "fill", str(tmp_path), str(batches)], check=True, env=env, timeout=120
    )
    size = (tmp_path / "big-0" / f"{0:020d}.log").stat().st_size
    assert size > batches * 1.5 * MB
    run = _child("open", tmp_path)
    print(f"recovering {size / MB:.0f} MB: {run['seconds']:.2f} s, peak RSS {run['rss_peak'] / MB:.1f} MB")
    assert (tmp_path / "big-0" / f"{0:020d}.log").stat().st_size == size  # nothing truncated
    assert run["rss_peak"] - run["rss_baseline"] < 40 * MB
