"""One history run end to end: a 3-broker cluster on its own ZooKeeper, the workload, the nemesis, healing,
a final full read, the checker.

    PYTHONPATH=src python -m tests.cluster.history.run --seed 7 --duration 600 --out /tmp/hist

prints the schedule, then the checker's summary and the history file's path; exit status 0 when no safety
anomaly was found (lost, duplicated, reordered, vanished, committed offsets backwards), 1 otherwise.
The cluster is driven only through processes (``odradek serve`` brokers, ZooKeeper's JVM, signals) and
Kafka clients (confluent-kafka); nothing of Odradek is imported but the test harness that starts processes.
The run directory keeps ``history.jsonl``, ``summary.txt``, the brokers' logs and their data directories.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.coordination.zkserver import ZooKeeperServer, zookeeper_available
from tests.cluster.conftest import Cluster
from tests.cluster.history.checker import Report, check_file
from tests.cluster.history.nemesis import KINDS, Nemesis, schedule
from tests.cluster.history.workload import GROUP_SUB, History, Workload, final_read

TOPIC = "history"
PARTITIONS = 6
OFFSETS_PARTITIONS = 10
OVERRIDES = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "min.insync.replicas": 2,
    "default.replication.factor": 3,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,  # fewer than Kafka's 50: less start-up work
    "offsets.topic.replication.factor": 3,
    "group.initial.rebalance.delay.ms": 0,
    "controlled.shutdown.retry.backoff.ms": 500,
}


def _isr_full(cluster: Cluster, topic: str, partitions: int) -> bool:
    assignment = cluster.topic_assignment(topic)
    for p in range(partitions):
        state = cluster.partition_state(topic, p)
        if state is None or state.get("leader", -1) < 0 or sorted(state["isr"]) != sorted(assignment.get(p, [])):
            return False
    return True


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # ZooKeeper or a broker restarting: not yet
            pass
        time.sleep(0.5)
    return False


def _create_topic(bootstrap: str, attempts: int = 4) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    for attempt in range(attempts):
        future = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                                     request_timeout=30)[TOPIC]
        try:
            future.result(40)
            return
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if attempt == attempts - 1:
                raise
        except TimeoutError:  # a slow start on a loaded machine: ask again
            if attempt == attempts - 1:
                raise
        time.sleep(2)


def run_history(cluster: Cluster, out: Path, *, seed: int, duration: float, rate: float = 25.0,
                kinds: tuple[str, ...] = KINDS, say: Callable[[str], None] = print) -> tuple[Report, Path]:
    """Workload + nemesis for ``duration`` seconds on a started cluster; heal, read everything, check."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "history.jsonl"
    history = History(path)
    ops = schedule(seed, duration, kinds=kinds)
    say(f"seed {seed}, {duration:g} s: " + "; ".join(op.describe() for op in ops))
    cluster.wait_for_registered(timeout=60)
    cluster.wait_for_controller(60)
    _create_topic(cluster.bootstrap)
    if not _wait(lambda: _isr_full(cluster, TOPIC, PARTITIONS), 60):
        say("warning: the topic's ISRs were not full after 60 s")
    history.log("setup", seed=seed, duration=duration, topic=TOPIC, partitions=PARTITIONS, overrides=OVERRIDES,
                schedule=[op.__dict__ for op in ops])
    workload = Workload(history, cluster.bootstrap, TOPIC, PARTITIONS, rate=rate).start()
    nemesis = Nemesis(cluster, history, TOPIC, PARTITIONS, group=GROUP_SUB, offsets_partitions=OFFSETS_PARTITIONS,
                      logs_dir=out / "logs")
    try:
        # warm up: a few seconds of fault-free load, every producer through
        warm_until = time.monotonic() + 5
        _wait(lambda: workload.acked() >= 100 and time.monotonic() >= warm_until, 30)
        # the schedule fits ``duration``; restarts take time of their own: a bounded allowance for them
        nemesis.run(ops, time.monotonic() + duration * 1.5 + 30)
    finally:
        nemesis.heal()
    healed = _wait(lambda: _isr_full(cluster, TOPIC, PARTITIONS), 90)
    history.log("isr_full" if healed else "isr_not_full")
    if not healed:
        say("warning: ISRs not full 90 s after healing")
    # a few seconds of fault-free load: writes must resume on every partition
    settle_from = workload.acked()
    _wait(lambda: workload.acked() >= settle_from + 100, 30)
    unresolved = workload.stop_producers()
    if unresolved:
        say(f"{unresolved} records unresolved after the producers' flush")
    time.sleep(2)  # let the consumers catch up a little; not required by the checker
    workload.stop_consumers()
    complete = final_read(history, cluster.bootstrap, TOPIC, PARTITIONS)
    if not complete:
        say("warning: the final read did not reach every high watermark")
    for i in cluster.ids:
        nemesis._save_logs(i)
    history.close()
    report = check_file(path)
    (out / "summary.txt").write_text(report.summary() + f"\nfaults run: {nemesis.done}\nhistory: {path}\n")
    return report, path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.cluster.history.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of faults (set-up and final read extra)")
    ap.add_argument("--out", type=Path, default=None, help="run directory (default: ./history-<seed>-<time>)")
    ap.add_argument("--rate", type=float, default=25.0, help="records per second per producer (4 producers)")
    ap.add_argument("--log-level", default="WARNING", help="the brokers' log level")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds, comma-separated (of {', '.join(KINDS)})")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # its reconnection chatter while ZooKeeper is down
    problem = zookeeper_available()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    out: Path = args.out or Path(f"history-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    zk = ZooKeeperServer(out / "zookeeper")
    zk.start()
    cluster = Cluster(zk, out / "cluster", 3, overrides=OVERRIDES, log_level=args.log_level)
    t0 = time.monotonic()
    try:
        cluster.start_all()
        kinds = tuple(k for k in args.kinds.split(",") if k)
        unknown = set(kinds) - set(KINDS)
        if unknown:
            print(f"unknown fault kinds: {sorted(unknown)}", file=sys.stderr)
            return 2
        report, path = run_history(cluster, out, seed=args.seed, duration=args.duration, rate=args.rate, kinds=kinds)
    finally:
        cluster.close()
        zk.stop()
    print(report.summary())
    print(f"wall time: {time.monotonic() - t0:.0f} s")
    print(f"history: {path.resolve()}")
    print(f"summary: {(out / 'summary.txt').resolve()}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
