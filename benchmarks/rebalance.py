"""Benchmark of a rebalance: KIP-848's consumer protocol against the classic protocol with the
cooperative-sticky assignor, both with confluent-kafka (librdkafka) consumers on the same
``odradek serve`` broker in the same run.

Run: ``python benchmarks/rebalance.py [--quick]`` (or ``python -m benchmarks.rebalance``).
Prints one JSON object (~1 min; ``--quick`` ~20 s).

Each trial: a fresh group of three members of a topic of 12 partitions (each member on a thread
of its own, polling every 10 ms), settled with four partitions each; then, at a random point of
the members' heartbeat cycle, a fourth member subscribes.  The figure is the rebalance time: from that ``subscribe()`` until every member owns
its share (3 partitions each, every partition owned once, as the members' rebalance callbacks
say).  The protocols alternate, trial after trial; figures are medians over the trials, and
``ratio`` is the consumer protocol's median over the classic one's (target <= 0.5).

Both protocols get the same heartbeat interval (``interval_ms``): the classic members'
``heartbeat.interval.ms`` (with ``session.timeout.ms`` 10 s), the broker's
``group.consumer.heartbeat.interval.ms`` for the consumer protocol; the broker's
``group.initial.rebalance.delay.ms`` is 0 (it only concerns empty groups, which no window
includes).  With the classic protocol, every member stops at the rebalance: the ones that must
give a partition up revoke it in a first JoinGroup/SyncGroup round and rejoin for a second; with
the consumer protocol the broker computes the target at once, members revoke on their next
heartbeat and the new member gets what they freed on its own next one, nobody else stopping.
Odradek asks a member waiting for partitions others have yet to release to heartbeat at a tenth
of the interval (Kafka keeps the interval): the new member takes its partitions soon after they
are freed instead of a whole interval after it joined (without that, the ratio measured here was
about 0.65).

The machine is a shared 2-core VM and the figures move between runs: provisional.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 12
INTERVAL_MS = 1000
FULL = {"trials": 5}
QUICK = {"trials": 2}
TARGET_RATIO = 0.5


class Member:
    """A confluent-kafka consumer on a thread of its own; ``owned`` follows its callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, name: str) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                "enable.auto.commit": False, "auto.offset.reset": "latest"}
        if protocol == "classic":
            conf.update({"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
                         "heartbeat.interval.ms": INTERVAL_MS, "session.timeout.ms": 10000})
        else:
            conf.update({"group.protocol": "consumer"})
        self.consumer = ck.Consumer(conf)
        self.topic = topic
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        def assigned(_c: Any, parts: list[ck.TopicPartition]) -> None:
            with self.lock:
                self.owned |= {p.partition for p in parts}

        def revoked(_c: Any, parts: list[ck.TopicPartition]) -> None:
            with self.lock:
                self.owned -= {p.partition for p in parts}

        self.consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.01)

    def snapshot(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


def _settled(members: list[Member], each: int) -> bool:
    owned = [m.snapshot() for m in members]
    flat = [p for o in owned for p in o]
    return len(flat) == len(set(flat)) == PARTITIONS and all(len(o) == each for o in owned)


def _wait(members: list[Member], each: int, timeout: float = 120.0) -> float:
    deadline = time.monotonic() + timeout
    while not _settled(members, each):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no settled group: {[sorted(m.snapshot()) for m in members]}")
        time.sleep(0.002)
    return time.monotonic()


def trial(bootstrap: str, topic: str, protocol: str) -> float:
    group = f"rebalance-{protocol}-{uuid.uuid4().hex[:8]}"
    members = [Member(bootstrap, group, topic, protocol, f"{protocol}-{i}") for i in range(3)]
    try:
        for m in members:
            m.start()
        settled = _wait(members, PARTITIONS // 3)
        # the newcomer arrives at any point of the members' heartbeat cycle (they settled right
        # after a heartbeat round: without this, every trial would start at the same phase)
        time.sleep(max(0.0, settled + random.uniform(0, INTERVAL_MS / 1000) - time.monotonic()))
        newcomer = Member(bootstrap, group, topic, protocol, f"{protocol}-new")
        members.append(newcomer)
        started = time.monotonic()
        newcomer.start()
        done = _wait(members, PARTITIONS // 4)
        return done - started
    finally:
        for m in members:
            m.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    overrides = {
        "group.initial.rebalance.delay.ms": 0,
        "group.consumer.min.heartbeat.interval.ms": min(INTERVAL_MS, 5000),
        "group.consumer.heartbeat.interval.ms": INTERVAL_MS,
        "group.consumer.min.session.timeout.ms": 10000,
        "group.consumer.session.timeout.ms": 10000,
    }
    times: dict[str, list[float]] = {"consumer": [], "classic": []}
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp), overrides=overrides) as broker:
        topic = "rebalance"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # alive until the topic is made
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        for i in range(plan["trials"]):
            order = ("consumer", "classic") if i % 2 == 0 else ("classic", "consumer")
            for protocol in order:
                times[protocol].append(trial(broker.bootstrap, topic, protocol))
    consumer, classic = (statistics.median(times[p]) for p in ("consumer", "classic"))
    print(json.dumps({
        "benchmark": "rebalance",
        "window": "the fourth member's subscribe() until every member owns its share (3 of 12 partitions)",
        "heartbeat_interval_ms": INTERVAL_MS,
        "partitions": PARTITIONS,
        "trials": plan["trials"],
        "consumer_protocol_s": round(consumer, 3),
        "classic_cooperative_sticky_s": round(classic, 3),
        "consumer_protocol_trials_s": [round(t, 3) for t in times["consumer"]],
        "classic_trials_s": [round(t, 3) for t in times["classic"]],
        "ratio": round(consumer / classic, 3),
        "target_ratio": TARGET_RATIO,
        "reference": "the classic protocol with cooperative-sticky, same broker, same run",
        "client": f"confluent-kafka {ck.version()[0]} (librdkafka {ck.libversion()[0]})",
        "python": platform.python_version(),
        "provisional": "a shared 2-core machine: figures move between runs",
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
