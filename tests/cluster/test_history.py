"""The history checker's CI schedule: a short seeded run of the workload and the nemesis over a 3-broker
cluster (RF 3, min.insync.replicas=2, real ZooKeeper), then the checker's safety properties.

Asserted: 0 lost acknowledged (acks=all) records, 0 duplicates and 0 reorderings from idempotent producers,
0 vanished reads, committed offsets never backwards, a final read that reached every high watermark.
Reported only (printed): the unavailability windows per fault and stale committed-offset reads (see
:mod:`tests.cluster.history.checker`). On failure the checker's summary and the path
of the history file (kept in pytest's tmp dir) are in the assertion message.

The long run is on demand: ``python -m tests.cluster.history.run --seed N --duration SECONDS --out DIR``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.history.run import OVERRIDES, run_history

pytestmark = pytest.mark.slow

# seed 2 over 75 s: isolate (14 s), kill-coordinator, zk-restart (10 s), pause, kill-controller (10 s)
SEED = 2
DURATION = 75.0
KINDS = ("kill-controller", "kill-coordinator", "isolate", "zk-restart", "pause")


def test_history_ci_schedule(cluster_factory: Callable[..., Cluster]) -> None:
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    cluster = cluster_factory(3, OVERRIDES)
    # outside pytest's tmp dirs (rotated after 3 sessions): kept when the test fails, removed when it passes
    # (unless ODRADEK_TEST_KEEP_HISTORY is set)
    base = Path(os.environ.get("ODRADEK_TEST_HISTORY_DIR", tempfile.gettempdir()))
    out = base / f"odradek-history-seed{SEED}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    report, path = run_history(cluster, out, seed=SEED, duration=DURATION, kinds=KINDS)
    summary = report.summary()
    print(summary)
    print(f"history: {path}")
    assert report.acked_all > 0 and report.polls > 0 and report.commits > 0, summary
    assert report.final_complete, f"the final read did not reach every high watermark\n{summary}\nhistory: {path}"
    problems = {
        "lost": report.lost_count,
        "duplicated": report.duplicated_count,
        "reordered": report.reordered_count,
        "vanished": report.vanished_count,
        "offsets backwards": report.backwards_count,
        "log problems": len(report.log_problems),
    }
    assert not any(problems.values()), f"{problems}\n{summary}\nhistory: {path}\nbroker logs: {out / 'logs'}"
    if not os.environ.get("ODRADEK_TEST_KEEP_HISTORY"):
        shutil.rmtree(out, ignore_errors=True)
