"""The nemesis: faults on a seeded schedule against a :class:`tests.cluster.conftest.Cluster`.

The schedule is drawn up front from ``random.Random(seed)`` (operation kinds, durations, quiet periods and
which partition to aim at); the broker an operation hits is resolved when it runs, from the cluster's live
state in ZooKeeper (the controller, the group coordinator, a partition's leader or follower), so a seed
replays the same sequence of fault kinds and timings, aimed at the same roles.

Operations (one at a time, each healed before the next; a quiet period between them):

* ``kill-controller``, ``kill-coordinator``, ``kill-leader``, ``kill-follower``, ``kill-random``: SIGKILL the
  broker, start it again (same port and data) after the fault's duration.
* ``pause``: SIGSTOP a broker for less than ``zookeeper.session.timeout.ms``, then SIGCONT.
* ``isolate``: the broker is cut off from the others, ZooKeeper and clients - implemented as a SIGSTOP held
  *longer* than the session timeout, then SIGCONT. This is an approximation of a network partition, not a
  real one: network namespaces need privileges the test machine does not grant, and the broker's transport
  has no fault-injection hook (one would be a socket-level switch in the broker's connection code that refuses
  inter-broker and ZooKeeper traffic while keeping the process running). What it does exercise is the part of
  a partition that matters most for safety: the ZooKeeper session expires, the controller moves leadership
  away and shrinks ISRs, and then a broker that still believes it leads partitions comes back with a stale
  view, with clients connected to it.
* ``zk-restart``: stop ZooKeeper (SIGTERM of its JVM), start it again after the fault's duration (sessions
  survive a restart that is shorter than their timeout; longer ones expire every broker's session).

Every operation is recorded in the history as a ``nemesis`` event with ``phase`` "start" and "end".
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster.conftest import Cluster
from tests.cluster.history.workload import History

KINDS = ("kill-controller", "kill-coordinator", "kill-leader", "kill-follower", "kill-random", "pause", "isolate",
         "zk-restart")


def java_string_hash(s: str) -> int:
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class Op:
    kind: str
    duration: float  # how long the fault lasts
    quiet: float  # how long to wait after healing it
    pick: int  # which partition / broker to aim at, where there is a choice

    def describe(self) -> str:
        return f"{self.kind} for {self.duration:.1f} s, then {self.quiet:.1f} s quiet"


def schedule(seed: int, duration: float, session_timeout: float = 6.0, kinds: tuple[str, ...] = KINDS) -> list[Op]:
    """Operations that fit in ``duration`` seconds (faults and quiet periods), drawn from the seed.

    The first operations go through ``kinds`` in a seeded order, so a short schedule still covers the
    controller, the coordinator and ZooKeeper; then kinds are drawn at random."""
    rng = random.Random(seed)
    first = list(kinds)
    rng.shuffle(first)
    ops: list[Op] = []
    used = 0.0
    while True:
        kind = first.pop(0) if first else rng.choice(kinds)
        if kind == "pause":
            d = rng.uniform(1.5, session_timeout * 0.6)
        elif kind == "isolate":
            d = rng.uniform(session_timeout * 1.5, session_timeout * 2.5)
        elif kind == "zk-restart":
            d = rng.uniform(3.0, 15.0)
        else:
            d = rng.uniform(4.0, 15.0)
        op = Op(kind, round(d, 2), round(rng.uniform(4.0, 8.0), 2), rng.randrange(1 << 30))
        if used + op.duration + op.quiet > duration and ops:
            return ops
        ops.append(op)
        used += op.duration + op.quiet


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, topic: str, partitions: int, *,
                 group: str, offsets_partitions: int, logs_dir: Path | None = None) -> None:
        self.cluster = cluster
        self.h = history
        self.topic = topic
        self.partitions = partitions
        self.group = group
        self.offsets_partitions = offsets_partitions
        self.logs_dir = logs_dir
        self.zk_down = False
        self.done: list[str] = []
        self._stop = threading.Event()
        self._ids = 0

    # -- targets -------------------------------------------------------------------------------------

    def _live(self) -> list[int]:
        return self.cluster.live_ids()

    def _target(self, op: Op) -> int | None:
        c = self.cluster
        live = self._live()
        if not live:
            return None
        if op.kind == "kill-controller":
            return c.controller_id()
        if op.kind == "kill-coordinator":
            return c.leader("__consumer_offsets", coordinator_partition(self.group, self.offsets_partitions))
        if op.kind == "kill-leader":
            return c.leader(self.topic, op.pick % self.partitions)
        if op.kind == "kill-follower":
            p = op.pick % self.partitions
            leader = c.leader(self.topic, p)
            followers = sorted(r for r in c.topic_assignment(self.topic).get(p, []) if r != leader)
            return followers[op.pick % len(followers)] if followers else None
        return live[op.pick % len(live)]

    # -- operations ----------------------------------------------------------------------------------

    def _save_logs(self, i: int) -> None:
        if self.logs_dir is None or i not in self.cluster.brokers:
            return
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.logs_dir / f"broker-{i}.log", "a") as f:
            f.write(f"==== broker {i} log at t={self.h.now():.1f} (before a restart or at the end)\n")
            f.write("".join(self.cluster.brokers[i].stderr_lines))

    def _start_broker(self, i: int) -> None:
        self._save_logs(i)
        for attempt in range(3):
            try:
                self.cluster.start(i, timeout=90)
                return
            except RuntimeError as exc:
                self.h.log("nemesis_error", op="start", target=i, error=str(exc)[-2000:], attempt=attempt)
                time.sleep(2)

    def run_op(self, op: Op) -> None:
        self._ids += 1
        op_id = f"n{self._ids}"
        target: Any = None
        try:
            target = None if op.kind == "zk-restart" else self._target(op)
        except Exception as exc:  # ZooKeeper trouble while resolving a role: hit a random live broker
            self.h.log("nemesis_error", op=op.kind, error=f"resolving the target: {exc!r}")
        if op.kind != "zk-restart" and (target is None or target not in self._live()):
            live = self._live()
            if not live:
                return
            target = live[op.pick % len(live)]
        self.h.log("nemesis", op=op.kind, phase="start", target=target, id=op_id, duration=op.duration)
        c = self.cluster
        if op.kind.startswith("kill-"):
            c.kill(target)
            self._stop.wait(op.duration)
            self._start_broker(target)
        elif op.kind in ("pause", "isolate"):
            c.sigstop(target)
            self._stop.wait(op.duration)
            c.sigcont(target)
        elif op.kind == "zk-restart":
            c.zk.stop()
            self.zk_down = True
            self._stop.wait(op.duration)
            c.zk.start()
            self.zk_down = False
        self.h.log("nemesis", op=op.kind, phase="end", target=target, id=op_id)
        label = f"{op.kind}" + (f"(broker {target})" if target is not None else "")
        self.done.append(label)

    def run(self, ops: list[Op], deadline: float) -> None:
        """Run ``ops`` in order until ``deadline`` (monotonic): every fault is healed before returning."""
        for op in ops:
            if self._stop.is_set() or time.monotonic() + op.duration > deadline:
                break
            self.run_op(op)
            self._stop.wait(max(0.0, min(op.quiet, deadline - time.monotonic())))

    def stop(self) -> None:
        self._stop.set()

    def heal(self) -> None:
        """Undo anything left: ZooKeeper up, every broker running and unfrozen."""
        if self.zk_down:
            self.cluster.zk.start()
            self.zk_down = False
        for i in list(self.cluster.stopped):
            self.cluster.sigcont(i)
        for i in self.cluster.ids:
            if not self.cluster.running(i):
                self._start_broker(i)
        self.h.log("healed")
