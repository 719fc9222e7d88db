"""What the benchmarks read of a process from the kernel: its CPU time (all threads, ended ones
included), the user/system split, and its resident memory.  Measuring tools, not test tools:
they live with the benchmarks, not in :mod:`odradek.testing`."""

from __future__ import annotations

import os
import time

__all__ = ["cpu_seconds", "proc_cpu_times", "proc_stat", "rss_kb"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads, those that ended too), 0 if it is
    gone.  Read from the process's CPU-time clock (``clock_getcpuclockid``: nanoseconds) where
    the platform has one; ``/proc/PID/stat`` counts in clock ticks (10 ms), too coarse for the
    tenth of a second a broker spends on a benchmark step."""
    clock = _cpu_clock(pid)
    if clock is not None:
        try:
            return time.clock_gettime(clock)
        except OSError:
            pass  # gone, or not ours to read: /proc says which
    try:
        return sum(proc_cpu_times(pid))
    except OSError:
        return 0.0


def proc_cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process from ``/proc/PID/stat``, in clock ticks (10 ms):
    the split the CPU-time clock of :func:`cpu_seconds` does not give.  OSError when gone."""
    fields = proc_stat(pid)
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def proc_stat(pid: int, tid: int | None = None) -> list[str]:
    """The fields of ``/proc/PID/stat`` (a thread's ``/proc/PID/task/TID/stat`` with ``tid``)
    after the command name, which may hold spaces and parentheses: ``[0]`` is the state, ``[1]``
    the parent's pid, ``[11]`` and ``[12]`` user and system time in clock ticks (proc(5)'s
    fields 3 on).  Raises OSError when the process or thread is gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def rss_kb(pid: int) -> int:
    """Resident set size of a process (VmRSS, kB); 0 when /proc does not say."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _cpu_clock(pid: int) -> int | None:
    """The clock id of ``pid``'s CPU time (POSIX ``clock_getcpuclockid``), None without one."""
    import ctypes

    try:
        getcpuclockid = ctypes.CDLL(None).clock_getcpuclockid  # libc, already in this process
    except (OSError, AttributeError):
        return None
    clock = ctypes.c_int()
    if getcpuclockid(ctypes.c_int(pid), ctypes.byref(clock)) != 0:
        return None
    return clock.value
