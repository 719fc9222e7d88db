"""Benchmark of a 3-broker Odradek cluster coordinated by ZooKeeper: the cost of replication, and failover.

Run: ``.venv/bin/python benchmarks/cluster.py [--quick] [--records N] [--sections produce,failover,faults]`` (or ``python -m
benchmarks.cluster``). Prints one JSON object (~1.5 min; ``--quick`` ~1 min). Exit status 0
whatever the figures (a benchmark reports, it does not assert), 1 when something is broken: a
record not acknowledged, an acknowledged record missing from the log, a duplicate written by the
idempotent producer, a failover that never happened, a cluster that did not form.

Everything runs on 127.0.0.1 with ephemeral ports, in a temporary directory (under ``$BENCH_DIR``,
default /tmp) removed at the end: one ZooKeeper (Debian's package, via
:class:`odradek.coordination.zkserver.ZooKeeperServer`) and three ``odradek serve --zookeeper``
brokers (ids 1..3, :class:`odradek.testing.BrokerProcess`, default flush policy) with
``zookeeper.session.timeout.ms=6000, replica.lag.time.max.ms=5000,
leader.imbalance.check.interval.seconds=5``. Every process is stopped by PID at the end. The
client is confluent-kafka (librdkafka) in this process. The machine is a shared 2-core VM: the
three brokers, ZooKeeper and the client share both cores, so absolute figures drift from run to
run; the ratio is of figures measured in the same run, on the same cluster.

* ``produce`` - ``records`` x 100-byte values (no key; librdkafka's sticky partitioner spreads
  them over the partitions) to one of two 3-partition topics of the same cluster, each
  partition led by a different broker (explicit replica assignment):

  - ``rf1``: replication factor 1 (partition p on broker p+1), ``acks=1``,
    ``enable.idempotence=false``;
  - ``rf3``: replication factor 3 (replicas [1,2,3], [2,3,1], [3,1,2]),
    ``min.insync.replicas=2``, ``acks=all``, ``enable.idempotence=true``.

  Both with ``linger.ms=5, batch.size=1048576, compression.type=none`` and a fresh producer per
  run. Window: first ``produce()`` to the last delivery report (a Python ``on_delivery`` callback
  per record, counting successes and errors). Before the window the producer has sent one record
  (acknowledged). One warm-up run of each first, then ``repeats`` runs alternating rf1, rf3, rf1,
  rf3...; figures are medians, ``ratio`` = rf3 / rf1 of the medians (target >= 0.4; Kafka's
  2014 figure for 3 replicas with acks=all vs. 1 replica was 0.51). After every run the
  partitions' high watermarks must have grown by exactly ``records`` (every acknowledged record
  is committed, nothing written twice). The brokers' CPU time (all three, ``benchmarks._proc.cpu_seconds``) per
  record is given too.
* ``failover`` - a 1-partition topic, replication factor 3, ``min.insync.replicas=2``; an
  idempotent producer (``acks=all, linger.ms=0``, other settings at librdkafka's defaults) sends
  one record every 5 ms (each carrying its sequence number); after ``failover_lead_s`` s of
  acknowledged sends the partition leader's broker (from ZooKeeper's
  ``/brokers/topics/T/partitions/0/state``) is SIGKILLed. Figure: kill -> the first successful
  delivery report of a record *sent after the kill* (target <= 12 s; ZooKeeper notices the dead
  broker only when its 6 s session expires, so ~6-8 s is expected). Also: kill -> ZooKeeper
  showing another leader, kill -> the new leader's metadata answer naming itself, the longest
  gap between two successful delivery reports, the errors the producer reported. The killed
  broker is then started again (same port and data), and the next repeat waits until the ISR is
  full and the leader has not changed for a while. At the end the topic is read back: every
  acknowledged record must be there exactly once.

  Where the time goes: kill -> new leader in ZooKeeper is the session expiry (ZooKeeper expires
  sessions on tick boundaries, tickTime 2000 ms: 6-8 s); the brokers' metadata follows within
  milliseconds. The remaining 1-2 s are librdkafka's: while a partition's leader is down it
  re-queries metadata once a second, and when the dead broker drops out of the metadata it
  decommissions that broker handle, which parks the partition for one more round.
* ``faults`` - the unavailability window per fault type (issue 18): one idempotent ``acks=all``
  producer (``linger.ms=5``) sends 180 records/s round-robin to a 6-partition topic (RF 3,
  ``min.insync.replicas=2``; brokers 1 and 2 lead, broker 3 only follows) while, one after the
  other and each from a settled cluster (full ISRs, preferred leaders), the controller's broker is
  SIGKILLed, a partition leader (not the controller) is SIGKILLed, a follower (neither) is
  SIGKILLed (each started again 25 s later), a follower is SIGSTOPped for 12 s, and ZooKeeper is
  stopped for 15 s and started again. Figure per fault: the longest gap between two
  acknowledgements of each partition from the fault to 25 s after it, and the worst of them
  (target <= 12 s; while ZooKeeper is down the ISRs stay full, so writes should not stop at
  all). At the end every acknowledged record must be in the log exactly once. ~4 min;
  ``--sections faults`` runs only this part.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

try:
    from benchmarks._proc import cpu_seconds
    from odradek import testing
    from odradek.coordination.zkserver import ZooKeeperServer
    from odradek.testing import BrokerProcess, freeze
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import cpu_seconds
    from odradek import testing
    from odradek.coordination.zkserver import ZooKeeperServer
    from odradek.testing import BrokerProcess, freeze

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

T = TypeVar("T")

VALUE_BYTES = 100
BROKER_IDS = (1, 2, 3)
TOPIC_RF1 = "bench-rf1"
TOPIC_RF3 = "bench-rf3"
TOPIC_FAILOVER = "bench-failover"
OVERRIDES: dict[str, Any] = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "leader.imbalance.check.interval.seconds": 5,
}
FULL = {
    "records": 1_000_000,
    "warmup_records": 300_000,
    "repeats": 5,
    "failover_repeats": 2,
    "failover_lead_s": 3.0,
}
QUICK = {
    "records": 300_000,
    "warmup_records": 100_000,
    "repeats": 3,
    "failover_repeats": 2,
    "failover_lead_s": 2.0,
}
TARGETS = {"produce_ratio_rf3_acks_all_vs_rf1_acks_1": 0.4, "failover_max_s": 12.0, "fault_max_gap_s": 12.0}
KAFKA_2014_RATIO = 0.51
PRODUCE_COMMON: dict[str, Any] = {"linger.ms": 5, "batch.size": 1048576, "compression.type": "none"}
PRODUCE_SETTINGS: dict[str, dict[str, Any]] = {
    "rf1": {**PRODUCE_COMMON, "acks": 1, "enable.idempotence": False},
    "rf3": {**PRODUCE_COMMON, "acks": "all", "enable.idempotence": True},
}
FAILOVER_PRODUCER: dict[str, Any] = {"acks": "all", "enable.idempotence": True, "linger.ms": 0}
FAILOVER_INTERVAL_S = 0.005
FAILOVER_GIVE_UP_S = 60.0  # no successful post-kill delivery within this: failover did not happen
SETTLE_S = 6.0  # before a failover repeat: the leader must not have changed for this long
TOPIC_FAULTS = "bench-faults"
# brokers 1 and 2 lead, broker 3 only follows (the victim of the follower faults)
FAULT_ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [1, 3, 2], [2, 1, 3], [1, 2, 3], [2, 3, 1]]
FAULT_PRODUCER: dict[str, Any] = {"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 300000}
FAULT_RATE = 180.0
FAULT_OBSERVE_S = 25.0
FAULT_KINDS = ("controller_kill", "leader_kill", "follower_kill", "follower_sigstop_12s", "zookeeper_down_15s")
SECTIONS = ("produce", "failover", "faults")


class Broken(RuntimeError):
    """Something the benchmark relies on does not work (lost records, no failover...): exit 1."""


def rnd(x: float, digits: int = 2) -> float:
    return round(x, digits)


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    return testing.wait_for(predicate, timeout, what, interval, error=Broken)


# ------------------------------------------------------------------------------------------------
# the cluster


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.zk = ZooKeeperServer(root / "zookeeper")
        self.brokers: dict[int, BrokerProcess] = {}
        self.kazoo: KazooClient | None = None

    def start(self) -> None:
        self.zk.start()
        self.kazoo = KazooClient(
            hosts=self.zk.connect,
            timeout=10.0,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0},
            command_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0, "deadline": 20.0},
        )
        self.kazoo.start(timeout=15)
        for i in BROKER_IDS:
            self.brokers[i] = BrokerProcess(
                self.root / f"broker-{i}",
                broker_id=i,
                overrides=OVERRIDES,
                extra_args=["--zookeeper", self.zk.connect],
            )
        errors: dict[int, BaseException] = {}

        def one(i: int) -> None:
            try:
                self.brokers[i].start(timeout=60)
            except BaseException as exc:
                errors[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in BROKER_IDS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise Broken(
                "brokers did not start: " + "; ".join(f"{i}: {e}" for i, e in sorted(errors.items()))
            )
        wait_for(lambda: self.registered() == list(BROKER_IDS), 30, "3 brokers registered in ZooKeeper")
        wait_for(lambda: self.zk_json("/controller"), 30, "a controller")

    @property
    def bootstrap(self) -> str:
        return ",".join(self.brokers[i].bootstrap for i in BROKER_IDS)

    def close(self) -> None:
        """Stop every broker (SIGTERM, SIGKILL after 30 s) and ZooKeeper, by PID."""
        try:
            threads = [
                threading.Thread(target=b.stop, args=(30,)) for b in self.brokers.values() if b.running()
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for b in self.brokers.values():
                b.kill()
        finally:
            if self.kazoo is not None:
                with contextlib.suppress(Exception):
                    self.kazoo.stop()
                    self.kazoo.close()
            self.zk.stop()

    def broker_cpu(self) -> float:
        return sum(cpu_seconds(b.pid) for b in self.brokers.values() if b.running())

    # -- ZooKeeper views

    def zk_json(self, path: str) -> Any:
        assert self.kazoo is not None
        try:
            data, _ = self.kazoo.retry(self.kazoo.get, path)
        except NoNodeError:
            return None
        return json.loads(data.decode()) if data else None

    def registered(self) -> list[int]:
        assert self.kazoo is not None
        try:
            return sorted(int(c) for c in self.kazoo.retry(self.kazoo.get_children, "/brokers/ids"))
        except NoNodeError:
            return []

    def state(self, topic: str, partition: int) -> dict[str, Any]:
        data = self.zk_json(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return data if isinstance(data, dict) else {}

    def leader(self, topic: str, partition: int) -> int:
        return int(self.state(topic, partition).get("leader", -1))

    # -- topics

    def create_topic(self, name: str, assignment: list[list[int]], configs: dict[str, str]) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        fut = admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=len(assignment),  # librdkafka 2.16 wants the count here too
                    replication_factor=-1,
                    replica_assignment=assignment,
                    config=configs,
                )
            ]
        )[name]
        fut.result(30)
        wait_for(lambda: self.topic_ready(name, assignment), 60, f"topic {name}: leaders and full ISR")

    def topic_ready(self, name: str, assignment: list[list[int]]) -> bool:
        """Every partition has a leader and a full ISR, in ZooKeeper and in every broker's metadata."""
        for p, replicas in enumerate(assignment):
            st = self.state(name, p)
            if st.get("leader", -1) not in replicas or sorted(st.get("isr", [])) != sorted(replicas):
                return False
        for i in BROKER_IDS:  # each broker's own metadata cache
            admin = AdminClient({"bootstrap.servers": self.brokers[i].bootstrap})
            md = admin.list_topics(name, timeout=5)
            t = md.topics.get(name)
            if t is None or t.error is not None or len(t.partitions) != len(assignment):
                return False
            for p, replicas in enumerate(assignment):
                pm = t.partitions[p]
                if pm.leader not in replicas or sorted(pm.isrs) != sorted(replicas):
                    return False
        return True

    def high_watermarks(self, topic: str, partitions: int) -> list[int]:
        c = ck.Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "bench-hw", "enable.auto.commit": False}
        )
        try:
            return [
                c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
            ]
        finally:
            c.close()


# ------------------------------------------------------------------------------------------------
# 1. produce throughput


def produce_run(cluster: Cluster, kind: str, topic: str, n: int) -> dict[str, Any]:
    value = os.urandom(VALUE_BYTES)
    state = {"ok": 0, "errors": 0, "end": 0.0}
    error_kinds: collections.Counter[str] = collections.Counter()

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            error_kinds[str(err.name())] += 1
        else:
            state["ok"] += 1
        if state["ok"] + state["errors"] == n:
            state["end"] = time.perf_counter()

    hw0 = cluster.high_watermarks(topic, 3)
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, **PRODUCE_SETTINGS[kind]})
    first: list[Any] = []
    p.produce(topic, value, on_delivery=lambda err, _m: first.append(err))  # connected: outside the window
    p.flush(30)
    if first != [None]:
        raise Broken(f"{kind}: the first record was not acknowledged: {first}")
    produce, poll = p.produce, p.poll
    b0 = cluster.broker_cpu()
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce(topic, value, on_delivery=report)
                break
            except BufferError:
                poll(0.0005)
        if i % 10000 == 9999:
            poll(0)
    deadline = time.monotonic() + 300
    while not state["end"] and time.monotonic() < deadline:
        p.flush(1.0)
    b1 = cluster.broker_cpu()
    left = len(p)
    del p
    hw1 = cluster.high_watermarks(topic, 3)
    seconds = (state["end"] or time.perf_counter()) - t0
    appended = sum(hw1) - sum(hw0) - 1  # minus the record before the window
    return {
        "records_per_s": n / seconds,
        "seconds": seconds,
        "acked": state["ok"],
        "errors": state["errors"],
        "error_kinds": dict(error_kinds),
        "not_reported": n - state["ok"] - state["errors"],
        "left_in_queue": left,
        "appended": appended,
        "broker_cpu_us_per_record": (b1 - b0) / n * 1e6,
    }


def throughput(cluster: Cluster, cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    for kind in ("rf1", "rf3"):  # warm-up: not counted
        w = produce_run(cluster, kind, TOPIC_RF1 if kind == "rf1" else TOPIC_RF3, cfg["warmup_records"])
        if w["acked"] != cfg["warmup_records"]:
            problems.append(f"warm-up {kind}: {w}")
    runs: dict[str, list[dict[str, Any]]] = {"rf1": [], "rf3": []}
    for _ in range(cfg["repeats"]):
        for kind in ("rf1", "rf3"):
            r = produce_run(cluster, kind, TOPIC_RF1 if kind == "rf1" else TOPIC_RF3, cfg["records"])
            runs[kind].append(r)
            if r["acked"] != cfg["records"] or r["errors"]:
                problems.append(
                    f"{kind}: {r['acked']}/{cfg['records']} acknowledged, {r['errors']} errors "
                    f"{r['error_kinds']}, {r['not_reported']} without a delivery report"
                )
            if r["appended"] != cfg["records"]:
                problems.append(
                    f"{kind}: high watermarks grew by {r['appended']}, {cfg['records']} records sent"
                )
    med = {k: statistics.median(r["records_per_s"] for r in v) for k, v in runs.items()}
    ratio = med["rf3"] / med["rf1"]
    target = TARGETS["produce_ratio_rf3_acks_all_vs_rf1_acks_1"]
    out: dict[str, Any] = {
        "records": cfg["records"],
        "value_bytes": VALUE_BYTES,
        "settings": PRODUCE_SETTINGS,
        "rf1_records_per_s": {
            "median": round(med["rf1"]),
            "samples": [round(r["records_per_s"]) for r in runs["rf1"]],
        },
        "rf3_records_per_s": {
            "median": round(med["rf3"]),
            "samples": [round(r["records_per_s"]) for r in runs["rf3"]],
        },
        "rf1_mb_per_s": rnd(med["rf1"] * VALUE_BYTES / 1e6),
        "rf3_mb_per_s": rnd(med["rf3"] * VALUE_BYTES / 1e6),
        "seconds_per_run": {k: rnd(statistics.median(r["seconds"] for r in v), 3) for k, v in runs.items()},
        "ratio": rnd(ratio, 3),
        "target": target,
        "kafka_2014_ratio": KAFKA_2014_RATIO,
        "met": ratio >= target,
        "broker_cpu_us_per_record": {
            k: rnd(statistics.median(r["broker_cpu_us_per_record"] for r in v), 2) for k, v in runs.items()
        },
        "acked": {k: sum(r["acked"] for r in v) for k, v in runs.items()},
        "errors": {k: sum(r["errors"] for r in v) for k, v in runs.items()},
        "error_kinds": {
            k: dict(sum((collections.Counter(r["error_kinds"]) for r in v), collections.Counter()))
            for k, v in runs.items()
        },
        "sent": {k: cfg["records"] * len(v) for k, v in runs.items()},
    }
    return out, problems


# ------------------------------------------------------------------------------------------------
# 2. failover


class LeaderWatch(threading.Thread):
    """After the kill: when ZooKeeper's partition state names another leader (polled every 20 ms), and
    then when the new leader's own metadata answer (what a client learns) names it too."""

    def __init__(self, cluster: Cluster, topic: str, old_leader: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.old = cluster, topic, old_leader
        self.changed_at = 0.0
        self.metadata_at = 0.0
        self.new_leader = -1
        self.done = threading.Event()
        # connected before the kill, one per surviving broker (each talks to that broker only)
        self.admins = {
            i: AdminClient({"bootstrap.servers": b.bootstrap})
            for i, b in cluster.brokers.items()
            if i != old_leader
        }
        for admin in self.admins.values():
            admin.list_topics(topic, timeout=10)

    def run(self) -> None:
        while not self.done.is_set() and not self.changed_at:
            with contextlib.suppress(Exception):
                leader = self.cluster.leader(self.topic, 0)
                if leader not in (-1, self.old):
                    self.changed_at = time.monotonic()
                    self.new_leader = leader
                    break
            time.sleep(0.02)
        admin = self.admins.get(self.new_leader)
        while admin is not None and not self.done.is_set():
            with contextlib.suppress(Exception):
                md = admin.list_topics(self.topic, timeout=1)
                if md.topics[self.topic].partitions[0].leader == self.new_leader:
                    self.metadata_at = time.monotonic()
                    return
            time.sleep(0.02)


def wait_settled(cluster: Cluster, topic: str) -> int:
    """Full ISR, every broker registered, and the same leader for SETTLE_S s: the leader."""
    deadline = time.monotonic() + 120
    stable_since, leader = time.monotonic(), -2
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            st = cluster.state(topic, 0)
            now_leader = int(st.get("leader", -1))
            full = sorted(st.get("isr", [])) == list(BROKER_IDS) and cluster.registered() == list(BROKER_IDS)
            if now_leader != leader or not full:
                leader, stable_since = now_leader if full else -2, time.monotonic()
            elif time.monotonic() - stable_since >= SETTLE_S:
                return leader
        time.sleep(0.1)
    raise Broken(f"{topic}: ISR not full / leader not stable within 120 s: {cluster.state(topic, 0)}")


def failover_run(cluster: Cluster, run: int, lead_s: float, acked: dict[str, int]) -> dict[str, Any]:
    topic = TOPIC_FAILOVER
    old_leader = wait_settled(cluster, topic)
    victim = cluster.brokers[old_leader]
    sent_at: dict[int, float] = {}
    acks: list[tuple[int, float]] = []  # (seq, monotonic) of successful delivery reports, in order
    error_kinds: collections.Counter[str] = collections.Counter()

    kill = {"at": 0.0}
    first_after: list[tuple[int, float]] = []  # the first successful report of a record sent after the kill

    def report(err: Any, msg: Any) -> None:
        now = time.monotonic()
        value = msg.value().decode()
        seq = int(value.split(":")[1])
        if err is not None:
            error_kinds[str(err.name())] += 1
            return
        acks.append((seq, now))
        acked[value] = acked.get(value, 0) + 1
        if kill["at"] and not first_after and sent_at[seq] > kill["at"]:
            first_after.append((seq, now))

    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, **FAILOVER_PRODUCER})
    seq = 0
    watch = LeaderWatch(cluster, topic, old_leader)  # connects its clients now, not in the loop
    start = time.monotonic()
    next_send = start
    try:
        while True:
            now = time.monotonic()
            if now >= next_send:
                sent_at[seq] = now
                try:
                    p.produce(topic, f"{run}:{seq}".encode(), on_delivery=report)
                    seq += 1
                except BufferError:
                    sent_at.pop(seq)
                next_send += FAILOVER_INTERVAL_S
                if next_send < now - 0.05:  # fell far behind (paused): do not burst
                    next_send = now
            p.poll(max(0.0, min(0.002, next_send - time.monotonic())))
            now = time.monotonic()
            if not kill["at"] and now - start >= lead_s and acks and acks[-1][1] - start >= lead_s * 0.5:
                watch.start()
                kill["at"] = time.monotonic()
                victim.kill()  # SIGKILL by PID
            if kill["at"] and not first_after and now - kill["at"] > FAILOVER_GIVE_UP_S:
                break
            if first_after and now - first_after[0][1] >= 1.0:
                break
            if not kill["at"] and now - start > FAILOVER_GIVE_UP_S:
                raise Broken(
                    f"failover run {run}: no acknowledged record within {FAILOVER_GIVE_UP_S:g}s before the kill"
                )
        p.flush(60)
        unreported = len(p)
    finally:
        watch.done.set()
    del p
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(acks)]
    ok = bool(first_after)
    kill_at = kill["at"]
    result: dict[str, Any] = {
        "killed_broker": old_leader,
        "new_leader_in_zookeeper": watch.new_leader,
        "kill_to_first_ack_of_record_sent_after_kill_s": rnd(first_after[0][1] - kill_at, 3)
        if first_after
        else None,
        "kill_to_zookeeper_new_leader_s": rnd(watch.changed_at - kill_at, 3) if watch.changed_at else None,
        "kill_to_metadata_shows_new_leader_s": rnd(watch.metadata_at - kill_at, 3)
        if watch.metadata_at
        else None,
        "longest_gap_between_acks_s": rnd(max(gaps), 3) if gaps else None,
        "sent": seq,
        "acked": len(acks),
        "delivery_errors": dict(error_kinds),
        "not_reported_after_flush": unreported,
        "failover_happened": ok,
    }
    # the killed broker comes back (same port and data); the next run waits for a full ISR
    victim.start(timeout=60)
    return result


def read_back(cluster: Cluster, topic: str) -> collections.Counter[str]:
    """Every value in partition 0 of ``topic``, with its count."""
    hw = cluster.high_watermarks(topic, 1)[0]
    c = ck.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "bench-readback",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    seen: collections.Counter[str] = collections.Counter()
    got = 0
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while got < hw and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=1.0):
                if m.error() is not None:
                    continue
                got += 1
                seen[m.value().decode()] += 1
    finally:
        c.close()
    if got < hw:
        raise Broken(f"read back {got} of {hw} records of {topic} within 60 s")
    return seen


def failover(cluster: Cluster, cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    acked: dict[str, int] = {}
    runs = []
    for run in range(cfg["failover_repeats"]):
        r = failover_run(cluster, run, cfg["failover_lead_s"], acked)
        runs.append(r)
        if not r["failover_happened"]:
            problems.append(
                f"failover run {run}: no record sent after the kill was acknowledged "
                f"within {FAILOVER_GIVE_UP_S:g}s: {r}"
            )
    wait_settled(cluster, TOPIC_FAILOVER)
    seen = read_back(cluster, TOPIC_FAILOVER)
    lost = sorted(v for v in acked if v not in seen)
    dupes = sorted(v for v, n in seen.items() if n > 1)
    unacked_but_written = sum(1 for v in seen if v not in acked)
    if lost:
        problems.append(f"failover: {len(lost)} acknowledged records missing from the log, e.g. {lost[:5]}")
    if dupes:
        problems.append(
            f"failover: {len(dupes)} records written more than once (idempotent producer), e.g. {dupes[:5]}"
        )
    times = [r["kill_to_first_ack_of_record_sent_after_kill_s"] for r in runs]
    valid = [t for t in times if t is not None]
    worst = max(valid) if len(valid) == len(times) and valid else None
    out = {
        "settings": {
            "producer": FAILOVER_PRODUCER,
            "send_interval_ms": FAILOVER_INTERVAL_S * 1000,
            "topic": "1 partition, replication factor 3, min.insync.replicas=2",
            "broker": OVERRIDES,
        },
        "seconds": times,
        "max_s": worst,
        "target_max_s": TARGETS["failover_max_s"],
        "met": worst is not None and worst <= TARGETS["failover_max_s"],
        "runs": runs,
        "note": "kill -> ZooKeeper new leader = session expiry (6 s timeout, expired on 2 s tick "
        "boundaries); the rest is librdkafka re-querying metadata once a second for a partition "
        "whose leader is down",
        "read_back": {
            "acked": len(acked),
            "in_log": len(seen),
            "lost": len(lost),
            "duplicates": len(dupes),
            "written_but_not_acked": unacked_but_written,
        },
    }
    return out, problems


# ------------------------------------------------------------------------------------------------
# 3. unavailability per fault


class AckLog:
    """One idempotent acks=all producer at FAULT_RATE records/s, round-robin over the partitions of
    TOPIC_FAULTS, on its own thread; the monotonic time of every acknowledgement, per partition."""

    def __init__(self, cluster: Cluster, partitions: int) -> None:
        self.partitions = partitions
        self.producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, **FAULT_PRODUCER})
        self.times: dict[int, list[float]] = {p: [] for p in range(partitions)}
        self.acked: dict[str, int] = {}
        self.errors: collections.Counter[str] = collections.Counter()
        self.sent = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        now = time.monotonic()
        with self.lock:
            if err is not None:
                self.errors[str(err.name())] += 1
                return
            self.times[msg.partition()].append(now)
            value = msg.value().decode()
            self.acked[value] = self.acked.get(value, 0) + 1

    def _run(self) -> None:
        next_send = time.monotonic()
        while not self.stopping.is_set():
            try:
                self.producer.produce(
                    TOPIC_FAULTS, f"f:{self.sent}".encode(), partition=self.sent % self.partitions,
                    on_delivery=self._report,
                )
                self.sent += 1
            except (BufferError, ck.KafkaException):  # a full queue; a topic not yet in the metadata
                self.producer.poll(0.1)
            next_send += 1 / FAULT_RATE
            if next_send < time.monotonic() - 0.05:
                next_send = time.monotonic()
            self.producer.poll(max(0.0, next_send - time.monotonic()))

    def start(self) -> AckLog:
        self.thread.start()
        return self

    def stop(self) -> int:
        self.stopping.set()
        self.thread.join(10)
        self.producer.flush(120)
        return len(self.producer)

    def gaps(self, start: float, end: float) -> dict[int, float]:
        """Per partition, the longest time between two acknowledgements around [start, end]: from
        the last one at or before ``start`` (or ``start``) to the first after ``end`` (or ``end``)."""
        out = {}
        with self.lock:
            for p, times in self.times.items():
                before = [t for t in times if t <= start]
                inside = [t for t in times if start < t <= end]
                after = [t for t in times if t > end]
                points = [before[-1] if before else start, *inside, after[0] if after else end]
                out[p] = max(b - a for a, b in itertools.pairwise(points))
        return out

    def acks_after(self, t: float) -> bool:
        with self.lock:
            return all(any(x > t for x in times) for times in self.times.values())


def fault_settled(cluster: Cluster, assignment: list[list[int]]) -> bool:
    """Every broker registered and running, full ISRs, preferred leaders."""
    if cluster.registered() != list(BROKER_IDS):
        return False
    for p, replicas in enumerate(assignment):
        st = cluster.state(TOPIC_FAULTS, p)
        if st.get("leader") != replicas[0] or sorted(st.get("isr", [])) != sorted(replicas):
            return False
    return True


def controller(cluster: Cluster) -> int:
    data = cluster.zk_json("/controller")
    return int(data["brokerid"]) if isinstance(data, dict) else -1


def fault_run(cluster: Cluster, log: AckLog, kind: str) -> dict[str, Any]:
    assignment = FAULT_ASSIGNMENT
    wait_for(lambda: fault_settled(cluster, assignment), 120, f"before {kind}: full ISRs, preferred leaders")
    time.sleep(2)
    ctl = controller(cluster)
    leaders = {p: cluster.leader(TOPIC_FAULTS, p) for p in range(len(assignment))}
    leading = set(leaders.values())
    victim: int | None
    if kind == "controller_kill":
        victim = ctl
    elif kind == "leader_kill":
        victim = next((b for b in sorted(leading) if b != ctl), ctl)
    elif kind in ("follower_kill", "follower_sigstop_12s"):
        # a broker leading nothing (broker 3 by the assignment); the controller only if it is the
        # one (after a controller failover it may be)
        victim = next((b for b in BROKER_IDS if b not in leading and b != ctl), None)
        if victim is None:
            victim = next((b for b in BROKER_IDS if b not in leading), None)
        if victim is None:
            victim = next(b for b in BROKER_IDS if b != ctl)
    else:
        victim = None
    t0 = time.monotonic()
    if kind.endswith("_kill"):
        assert victim is not None
        cluster.brokers[victim].kill()
        time.sleep(FAULT_OBSERVE_S)
        end = time.monotonic()
        cluster.brokers[victim].start(timeout=60)
    elif kind == "follower_sigstop_12s":
        assert victim is not None
        freeze(cluster.brokers[victim].pid)
        try:
            time.sleep(12)
        finally:
            os.kill(cluster.brokers[victim].pid, signal.SIGCONT)
        time.sleep(FAULT_OBSERVE_S - 12)
        end = time.monotonic()
    else:  # zookeeper_down_15s
        cluster.zk.stop()
        try:
            time.sleep(15)
        finally:
            cluster.zk.start()
        time.sleep(FAULT_OBSERVE_S - 15)
        end = time.monotonic()
    wait_for(lambda: log.acks_after(end), 120, f"after {kind}: acknowledgements on every partition")
    gaps = log.gaps(t0, end)
    worst = max(gaps.values())
    return {
        "victim": victim,
        "victim_role": None if victim is None else {
            "controller": victim == ctl,
            "leads_partitions": sorted(p for p, b in leaders.items() if b == victim),
        },
        "longest_gap_per_partition_s": {p: rnd(g, 2) for p, g in sorted(gaps.items())},
        "longest_gap_s": rnd(worst, 2),
        "met": worst <= TARGETS["fault_max_gap_s"],
    }


def faults(cluster: Cluster, cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    del cfg
    problems: list[str] = []
    log = AckLog(cluster, len(FAULT_ASSIGNMENT)).start()
    runs: dict[str, Any] = {}
    try:
        wait_for(lambda: log.acks_after(time.monotonic() - 0.5), 60, "acknowledgements before the faults")
        for kind in FAULT_KINDS:
            try:
                runs[kind] = fault_run(cluster, log, kind)
                print(json.dumps({kind: runs[kind]}), file=sys.stderr, flush=True)  # progress
            except Broken as exc:
                problems.append(f"faults: {kind}: {exc}")
                runs[kind] = {"error": str(exc)}
    finally:
        unreported = log.stop()
    # read back: every acknowledged record exactly once
    seen: collections.Counter[str] = collections.Counter()
    try:
        wait_for(lambda: fault_settled(cluster, FAULT_ASSIGNMENT), 120, "after the faults: full ISRs")
        hws = cluster.high_watermarks(TOPIC_FAULTS, len(FAULT_ASSIGNMENT))
        c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bench-faults-readback",
                         "enable.auto.commit": False})
        try:
            c.assign([ck.TopicPartition(TOPIC_FAULTS, p, 0) for p in range(len(FAULT_ASSIGNMENT))])
            deadline = time.monotonic() + 60
            while sum(seen.values()) < sum(hws) and time.monotonic() < deadline:
                for m in c.consume(num_messages=10000, timeout=1.0):
                    if m.error() is None:
                        seen[m.value().decode()] += 1
        finally:
            c.close()
        read_ok = True
    except (Broken, ck.KafkaException) as exc:
        problems.append(f"faults: reading back failed: {exc}")
        read_ok = False
    lost = [v for v in log.acked if v not in seen] if read_ok else []
    dupes = [v for v, n in seen.items() if n > 1]
    if lost:
        problems.append(f"faults: {len(lost)} acknowledged records missing from the log, e.g. {lost[:5]}")
    if dupes:
        problems.append(f"faults: {len(dupes)} records written twice (idempotent producer), e.g. {dupes[:5]}")
    overall = [r["longest_gap_s"] for r in runs.values() if "longest_gap_s" in r]
    out = {
        "settings": {
            "producer": FAULT_PRODUCER,
            "records_per_s": FAULT_RATE,
            "topic": f"{len(FAULT_ASSIGNMENT)} partitions, replication factor 3, min.insync.replicas=2, "
            f"replicas {FAULT_ASSIGNMENT}",
            "observed_s_after_each_fault": FAULT_OBSERVE_S,
            "broker": OVERRIDES,
        },
        "by_fault": runs,
        "longest_gap_s": max(overall) if overall else None,
        "target_max_gap_s": TARGETS["fault_max_gap_s"],
        "met": len(overall) == len(FAULT_KINDS) and all(r.get("met") for r in runs.values()),
        "read_back": {"acked": len(log.acked), "in_log": len(seen) if read_ok else None,
                      "lost": len(lost) if read_ok else None, "duplicates": len(dupes) if read_ok else None,
                      "delivery_errors": dict(log.errors), "not_reported_after_flush": unreported},
        "note": "gap = the longest time between two acknowledgements of a partition from the fault to "
        f"{FAULT_OBSERVE_S} s after it; a SIGSTOP lasts 12 s, ZooKeeper is down 15 s",
    }
    return out, problems


# ------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and repeats")
    parser.add_argument("--records", type=int, help="records per produce run")
    parser.add_argument("--repeats", type=int, help="produce runs of each kind")
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)} (default all)"
    )
    args = parser.parse_args()
    sections = [x for x in args.sections.split(",") if x]
    if any(x not in SECTIONS for x in sections):
        parser.error(f"--sections: expected some of {', '.join(SECTIONS)}")
    cfg = dict(QUICK if args.quick else FULL)
    if args.records:
        cfg["records"] = args.records
    if args.repeats:
        cfg["repeats"] = args.repeats
    # SIGTERM (e.g. from ``timeout``) unwinds through the ``finally`` that stops every process
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="odradek-bench-cluster-", dir=os.environ.get("BENCH_DIR", "/tmp")))
    result: dict[str, Any] = {
        "benchmark": "cluster",
        "mode": "quick" if args.quick else "full",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "client": {"confluent_kafka": ck.__version__, "librdkafka": ck.libversion()[0]},
        "cluster": {
            "brokers": len(BROKER_IDS),
            "zookeeper": "Debian zookeeper package, standalone, via odradek.coordination.zkserver",
            "broker_overrides": OVERRIDES,
            "data_dirs_under": str(root),
        },
        "config": cfg,
        "targets": TARGETS,
    }
    problems: list[str] = []
    cluster = Cluster(root)
    try:
        try:
            cluster.start()
            result["cluster"]["ports"] = {i: b.port for i, b in cluster.brokers.items()}
            cluster.create_topic(TOPIC_RF1, [[1], [2], [3]], {})
            cluster.create_topic(TOPIC_RF3, [[1, 2, 3], [2, 3, 1], [3, 1, 2]], {"min.insync.replicas": "2"})
            cluster.create_topic(TOPIC_FAILOVER, [[1, 2, 3]], {"min.insync.replicas": "2"})
            cluster.create_topic(TOPIC_FAULTS, FAULT_ASSIGNMENT, {"min.insync.replicas": "2"})
            if "produce" in sections:
                result["produce"], p = throughput(cluster, cfg)
                problems += p
            if "failover" in sections:
                result["failover"], p = failover(cluster, cfg)
                problems += p
            if "faults" in sections:
                result["faults"], p = faults(cluster, cfg)
                problems += p
        except Broken as exc:
            problems.append(str(exc))
        except Exception as exc:
            problems.append(f"{type(exc).__name__}: {exc}")
        if problems:  # the brokers' last words, for the report
            result["broker_stderr_tail"] = {
                i: [line.rstrip() for line in b.stderr_lines[-20:]] for i, b in cluster.brokers.items()
            }
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
    met = {
        name: bool(result.get(section, {}).get("met"))
        for name, section in (("produce_ratio", "produce"), ("failover", "failover"), ("faults", "faults"))
        if section in sections
    }
    result["targets_met"] = met
    result["pass"] = all(met.values()) and not problems
    result["problems"] = problems
    result["broken"] = bool(problems)
    result["elapsed_s"] = rnd(time.perf_counter() - started)
    print(json.dumps(result, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
