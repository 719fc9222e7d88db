"""``benchmarks._proc.proc_stat``: the fields of /proc/PID/stat after the command name, which a
process may set to anything, parentheses and spaces included."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from benchmarks._proc import cpu_seconds, proc_cpu_times, proc_stat
from odradek.testing import wait_for

# renames itself to a name that looks like the end of the command field, then waits
CHILD = """
import sys
with open("/proc/self/comm", "w") as f:
    f.write(") S 1 (x")
print("renamed", flush=True)
sys.stdin.read()
"""


def test_a_command_name_with_parentheses_and_spaces_does_not_shift_the_fields() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "renamed"
        with open(f"/proc/{child.pid}/comm") as f:
            assert f.read().strip() == ") S 1 (x"
        wait_for(lambda: proc_stat(child.pid)[0] == "S", 10, "the child waiting on stdin")
        assert int(proc_stat(child.pid)[1]) == os.getpid()  # its parent: this process, not the "1" of the name
    finally:
        child.kill()
        child.wait(10)


def test_a_thread_of_this_process_and_its_cpu_ticks() -> None:
    ready, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def waiter() -> None:
        tids.append(threading.get_native_id())
        ready.set()
        done.wait(10)

    t = threading.Thread(target=waiter)
    t.start()
    try:
        assert ready.wait(10)
        wait_for(lambda: proc_stat(os.getpid(), tids[0])[0] == "S", 10, "the thread sleeping in done.wait")
        assert int(proc_stat(os.getpid(), tids[0])[1]) == os.getppid()  # a thread's parent is its process's
        fields = proc_stat(os.getpid())
        assert int(fields[1]) == os.getppid()
        user, system = proc_cpu_times(os.getpid())
        assert user > 0 and system >= 0  # this test process has run Python code
        assert abs(user + system - cpu_seconds(os.getpid())) < 0.1  # ticks vs the CPU-time clock
    finally:
        done.set()
        t.join(10)


def test_a_process_that_does_not_exist_raises_oserror() -> None:
    with open("/proc/sys/kernel/pid_max") as f:
        never = int(f.read())  # one more than the largest pid the kernel hands out
    with pytest.raises(OSError):
        proc_stat(never)
    with pytest.raises(OSError):
        proc_stat(os.getpid(), never)
    with pytest.raises(OSError):
        proc_cpu_times(never)
    assert cpu_seconds(never) == 0.0
