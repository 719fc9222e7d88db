"""``benchmarks._proc.cpu_seconds``, the benchmarks' measure of a broker's CPU time: every
thread's time, those that have ended included, finer than /proc's 10 ms clock ticks."""

from __future__ import annotations

import subprocess
import sys

from benchmarks._proc import cpu_seconds

CHILD = """
import sys, threading, time
def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
t = threading.Thread(target=burn, args=(0.15,))
t.start(); t.join()  # a thread that burns CPU and ends
burn(0.05)
print("done", flush=True)
time.sleep(30)
"""


def test_counts_ended_threads_finer_than_clock_ticks() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        first = cpu_seconds(child.pid)
        assert first >= 0.2  # the ended thread's 0.15 s and the main thread's 0.05 s
        readings = [first] + [cpu_seconds(child.pid) for _ in range(3)]
        # nanoseconds, not /proc's 10 ms ticks: a reading that is a whole number of ticks
        # every time would be the coarse measure
        assert any(abs(r * 100 - round(r * 100)) > 1e-6 for r in readings), readings
    finally:
        child.kill()
        child.wait()
    assert cpu_seconds(child.pid) == 0.0  # gone
