"""``odradek.testing.freeze``: SIGSTOP that returns only once every thread of the process has
stopped.  A plain ``kill`` queues the signal; on loaded cores the process's other threads ran
on for milliseconds and a frozen ZooKeeper answered a request sent after it (a CI failure)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks._proc import cpu_seconds
from odradek.testing import _all_threads_stopped, freeze

# four threads that never sleep: each must be stopped, not only the one the kernel woke
CHILD = """
import threading
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("spinning", flush=True)
spin()
"""


def test_every_thread_is_stopped_when_freeze_returns() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spinning"
        assert not _all_threads_stopped(child.pid)
        freeze(child.pid)
        assert len(os.listdir(f"/proc/{child.pid}/task")) == 5
        assert _all_threads_stopped(child.pid)
        used = cpu_seconds(child.pid)
        time.sleep(0.2)
        assert cpu_seconds(child.pid) == used  # nothing runs any more
        os.kill(child.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while _all_threads_stopped(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _all_threads_stopped(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_gone_process_counts_as_stopped_and_an_unknown_pid_raises() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert _all_threads_stopped(child.pid)
    with pytest.raises(ProcessLookupError):
        freeze(child.pid)
