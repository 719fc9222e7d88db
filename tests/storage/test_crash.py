"""Crash tests with real processes: a child appends and acknowledges, the parent SIGKILLs it at
random moments (during start-up and recovery too), reopens the log and checks it.

SIGKILL keeps the page cache, so every acknowledged append must survive in every variant, not
only with ``flush.messages=1``.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from odradek.storage import LogManager

from .crash_child import VARIANTS
from .storage_helpers import read_all

CHILD = Path(__file__).with_name("crash_child.py")
DEADLINE_S = 30.0


class Child:
    """A running ``crash_child.py`` whose stdout lines arrive on a queue."""

    def __init__(self, data_dir: Path, variant: str, seed: int, round_: int) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(data_dir), variant, str(seed), str(round_)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.kill_at_next_write = threading.Event()
        self.kill_delay_s = 0.0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line == "W\n" and self.kill_at_next_write.is_set():
                # kill from here, a random moment (0-0.8 ms, spun, not slept) after the child
                # announced a large append: somewhere inside validation, write or fdatasync
                until = time.perf_counter() + self.kill_delay_s
                while time.perf_counter() < until:
                    pass
                os.kill(self.proc.pid, signal.SIGKILL)
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self, deadline: float) -> str:
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError("the child stopped answering") from None
        if line is None:
            assert self.proc.stderr is not None
            raise AssertionError(f"the child exited: {self.proc.wait()}\n{self.proc.stderr.read()}")
        return line

    def kill(self, at_next_large_write_after: float | None = None) -> list[str]:
        """SIGKILL now, or from the reader thread a given time after the child announces its
        next large append; returns every line the child wrote that the parent had not read."""
        if at_next_large_write_after is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        else:
            self.kill_delay_s = at_next_large_write_after
            self.kill_at_next_write.set()
        try:
            self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # never leave a child behind
            raise
        self.reader.join(DEADLINE_S)
        rest = []
        while (line := self.lines.get_nowait()) is not None:
            rest.append(line)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return rest


def _verify(data_dir: Path, variant: str, acked: dict[int, tuple[int, int, str]], clean: bool) -> int:
    """Reopen the log, check it, close it (cleanly or not); returns the bytes recovery truncated."""
    manager = LogManager([data_dir], VARIANTS[variant])
    log = manager.get("crash", 0)
    if log is None:  # killed before the partition existed
        assert not acked
        manager.shutdown()
        return 0
    batches = read_all(log)  # every batch passes its CRC check, inner messages too
    offsets = [r.offset for b in batches for r in b.records]
    assert offsets == list(range(log.log_end_offset)), "offsets have gaps or duplicates"
    keys = {r.offset: r.key for b in batches for r in b.records}
    for first, (last, n, tag) in acked.items():
        assert last - first + 1 == n
        assert last < log.log_end_offset, f"acknowledged append {tag} at {first}..{last} was lost"
        assert [keys[o] for o in range(first, last + 1)] == [f"{tag}:{i}".encode() for i in range(n)]
    recovered = log.recovered_bytes
    if clean:
        manager.shutdown()  # the next child starts after a clean shutdown
    else:
        manager.close()  # no marker: the next child recovers again; the log dir is unlocked
    return recovered


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "rounds"), [("flush-each", 20), ("defaults", 20), ("mixed-formats", 12)])
def test_sigkill_at_random_moments_loses_no_acknowledged_append(
    tmp_path: Path, variant: str, rounds: int
) -> None:
    rng = random.Random(f"crash-{variant}")
    acked: dict[int, tuple[int, int, str]] = {}
    torn = 0
    for round_ in range(rounds):
        deadline = time.monotonic() + DEADLINE_S
        child = Child(tmp_path, variant, rng.randrange(1 << 30), round_)
        lines: list[str] = []
        moment = rng.random()
        if moment >= 0.1:  # else kill at once: during start-up or recovery
            lines.append(child.next_line(deadline))
            assert lines[0].startswith("ready ")
            acks = rng.randint(0, 25)
            while acks > 0:
                lines.append(child.next_line(deadline))
                acks -= lines[-1] not in ("w\n", "W\n")
        # between appends, or inside the next large one
        lines += child.kill(rng.uniform(0, 0.0008) if moment > 0.4 else None)
        for line in lines:
            if line.startswith("ready ") or line in ("w\n", "W\n"):
                continue
            first, last, n, tag = line.split()
            assert int(first) not in acked, "an offset was handed out twice"
            acked[int(first)] = (int(last), int(n), tag)
        torn += _verify(tmp_path, variant, acked, clean=rng.random() < 0.5) > 0
    assert len(acked) > rounds, "the children acknowledged too little to test anything"
    print(f"{variant}: {rounds} kills, {len(acked)} acknowledged appends, {torn} torn tails recovered")
