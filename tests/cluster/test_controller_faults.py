"""Controller faults (issue 18) on a real 3-broker cluster with real ZooKeeper.

* The controller's broker is SIGKILLed while a librdkafka idempotent ``acks=all`` producer writes to
  a 6-partition topic (RF 3, ``min.insync.replicas=2``) and started again 20 s later: every
  partition must keep receiving acknowledgements (it used to stop for good, until ZooKeeper was
  restarted).
* The new controller removes the dead broker from the ISR of the partitions it only followed
  (Kafka's replica state machine: Online -> Offline shrinks the ISR), and leaders shrink ISRs on
  their own after ``replica.lag.time.max.ms``.

Each test records, per partition, the monotonic time of every acknowledgement; no timing
thresholds: a fault shows as a partition that gets no acknowledgement within a generous bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replication import check_no_loss, consume_all, create_topic

OVERRIDES = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "controlled.shutdown.retry.backoff.ms": 500,
}
PARTITIONS = 6


class AckRecorder:
    """An idempotent acks=all confluent-kafka producer at about ``rate`` records/s, round-robin
    over the partitions; remembers each acknowledgement's partition, offset, value and time."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 180.0) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval = 1.0 / rate
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 300000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.acked: dict[int, list[tuple[int, bytes]]] = {}
        self.ack_times: dict[int, list[float]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
                return
            self.acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
            self.ack_times[msg.partition()].append(now)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            p = self.sent % self.partitions
            self.producer.produce(self.topic, value=b"rec-%08d" % self.sent, partition=p, on_delivery=self._cb)
            self.sent += 1
            self.producer.poll(0)
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def start(self) -> AckRecorder:
        self._thread.start()
        return self

    def acks_since(self, t: float) -> dict[int, int]:
        with self._lock:
            return {p: sum(1 for x in times if x >= t) for p, times in self.ack_times.items()}

    def wait_all_partitions(self, since: float, timeout: float, what: str) -> None:
        """Every partition gets an acknowledgement at or after ``since`` (within ``timeout`` s)."""
        wait_for(lambda: all(n > 0 for n in self.acks_since(since).values()), timeout,
                 f"an acknowledgement on every partition {what}: {self.acks_since(since)}")

    def gaps(self, start: float, end: float) -> dict[int, float]:
        """Per partition, the longest time without an acknowledgement within [start, end]."""
        out = {}
        with self._lock:
            for p, times in self.ack_times.items():
                inside = [start] + [t for t in times if start <= t <= end] + [end]
                out[p] = max(b - a for a, b in itertools.pairwise(inside))
        return out

    def stop(self, timeout: float = 120) -> None:
        self._stop.set()
        self._thread.join(10)
        remaining = self.producer.flush(timeout)
        assert remaining == 0, f"{remaining} records never resolved"


def states(cluster: Cluster, topic: str) -> str:
    return "; ".join(f"{p}: {cluster.partition_state(topic, p)}" for p in range(PARTITIONS))


@pytest.mark.slow
def test_writes_continue_after_controller_death_and_restart(cluster_factory: Callable[..., Cluster]) -> None:
    """Issue 18's first fault, exactly: SIGKILL the controller at T+8 s, start it again at T+28 s;
    every partition must be acknowledged again after the restart (it used to stall until a
    ZooKeeper restart) and nothing acknowledged may be lost or duplicated."""
    cluster = cluster_factory(3, overrides=OVERRIDES)
    topic = "ctl-death"
    create_topic(cluster.bootstrap, topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    cluster.wait_for(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(PARTITIONS)), 30, "full ISRs")
    producer = AckRecorder(cluster.bootstrap, topic, PARTITIONS).start()
    t0 = time.monotonic()
    try:
        producer.wait_all_partitions(t0, 30, "before the fault")
        controller = cluster.wait_for_controller()
        time.sleep(max(0.0, t0 + 8 - time.monotonic()))
        cluster.kill(controller)
        time.sleep(max(0.0, t0 + 28 - time.monotonic()))
        cluster.start(controller)
        restarted = time.monotonic()
        try:
            producer.wait_all_partitions(restarted, 60, "after the old controller came back")
            later = time.monotonic() + 5
            time.sleep(5)
            producer.wait_all_partitions(later, 60, "a while after the old controller came back")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nstates: {states(cluster, topic)}\ncontroller {cluster.controller_id()}\n"
                                 + "\n".join(f"broker {i}: {cluster.logs(i, 30)}" for i in cluster.ids)) from None
        gaps = producer.gaps(t0, time.monotonic())
        print(f"longest gap per partition: { {p: round(g, 1) for p, g in gaps.items()} }")
    finally:
        producer.stop()
    got = consume_all(cluster.bootstrap, topic, sum(len(v) for v in producer.acked.values()))
    check_no_loss(producer.acked, got)


@pytest.mark.slow
def test_new_controller_shrinks_isr_of_dead_follower(cluster_factory: Callable[..., Cluster]) -> None:
    """Issue 18's second fault: the controller's broker dies; on the partitions it only followed,
    the new controller (Offline replica) or the leader (replica.lag.time.max.ms) drops it from the
    ISR, so acks=all writes there resume.  The leader's shrink is switched off here (a huge lag
    time) to prove the controller's part; the leader's part is tested below."""
    overrides = dict(OVERRIDES)
    overrides["replica.lag.time.max.ms"] = 600000
    cluster = cluster_factory(3, overrides=overrides)
    controller = cluster.wait_for_controller()
    others = [b for b in cluster.ids if b != controller]
    topic = "ctl-follower"
    # the controller follows every partition; the others lead
    create_topic(cluster.bootstrap, topic, assignment=[[others[0], controller, others[1]],
                                                       [others[1], others[0], controller]],
                 config={"min.insync.replicas": "2"})
    cluster.wait_for(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(2)), 30, "full ISRs")
    cluster.kill(controller)
    cluster.wait_for(lambda: cluster.controller_id() not in (controller, None), 40, "a new controller")
    try:
        cluster.wait_for(lambda: all(controller not in cluster.isr(topic, p) for p in range(2)), 30,
                         "the dead broker out of every ISR")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {[cluster.partition_state(topic, p) for p in range(2)]}") from None
    producer = AckRecorder(cluster.bootstrap, topic, 2, rate=50).start()
    try:
        producer.wait_all_partitions(time.monotonic(), 30, "with the dead broker out of the ISR")
    finally:
        producer.stop()


@pytest.mark.slow
def test_leader_shrinks_isr_of_dead_follower(cluster_factory: Callable[..., Cluster]) -> None:
    """A follower (not the controller) dies: its leaders drop it from the ISR after
    replica.lag.time.max.ms even while the controller cannot help (its session timeout is long
    here, so ZooKeeper keeps the dead broker registered for a while)."""
    overrides = dict(OVERRIDES)
    overrides["zookeeper.session.timeout.ms"] = 60000
    cluster = cluster_factory(3, overrides=overrides)
    controller = cluster.wait_for_controller()
    others = [b for b in cluster.ids if b != controller]
    victim = others[1]
    topic = "leader-shrink"
    create_topic(cluster.bootstrap, topic, assignment=[[controller, victim, others[0]],
                                                       [others[0], victim, controller]],
                 config={"min.insync.replicas": "2"})
    cluster.wait_for(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(2)), 30, "full ISRs")
    producer = AckRecorder(cluster.bootstrap, topic, 2, rate=50).start()
    try:
        producer.wait_all_partitions(time.monotonic(), 30, "before the fault")
        cluster.kill(victim)
        killed = time.monotonic()
        cluster.wait_for(lambda: all(victim not in cluster.isr(topic, p) for p in range(2)), 40,
                         "the dead follower out of every ISR")
        producer.wait_all_partitions(time.monotonic(), 30, "after the ISR shrank")
        assert victim in cluster.registered_brokers(), "the session outlived the test's window: no proof"
        print(f"gaps: {producer.gaps(killed, time.monotonic())}")
    finally:
        producer.stop()


# -- the leader's ISR change against a concurrent LeaderAndIsr (in process, a fake ZooKeeper) -----------


class _Stat:
    def __init__(self, version: int) -> None:
        self.version = version


class _FakeStore:
    """The partition state znode: version-checked sets; ``during_set`` runs while a set is in flight."""

    def __init__(self, data: dict[str, Any], version: int) -> None:
        self.data, self.version = data, version
        self.during_set: Callable[[], None] | None = None

    async def set(self, path: str, value: Any, version: int = -1) -> _Stat:
        from odradek.coordination.zookeeper import BadVersionError

        if self.during_set is not None:
            self.during_set()
        await asyncio.sleep(0)
        if version not in (-1, self.version):
            raise BadVersionError()
        self.data, self.version = value, self.version + 1
        return _Stat(self.version)

    async def get(self, path: str) -> tuple[Any, _Stat]:
        return self.data, _Stat(self.version)

    async def get_or_none(self, path: str) -> tuple[Any, _Stat]:
        return await self.get(path)

    async def create(self, path: str, value: Any, **_kwargs: Any) -> None:
        return None  # the ISR change notification


def _leader(tmp_path: Path) -> tuple[Any, Any, _FakeStore]:
    """Broker 2 leading t-0 (replicas 2, 3, 1; ISR all three, partition epoch 4) with 5 records
    that follower 3 has and follower 1 (dead) has not: the HW is stuck at 0."""
    from odradek.broker.replica import ReplicaManager
    from odradek.broker.replication import ClusterReplication
    from odradek.cluster.metadata import PartitionState
    from odradek.config import BrokerConfig
    from odradek.coordination.zookeeper import ZooKeeperBackend
    from odradek.records import BatchBuilder
    from odradek.settings import settings_from
    from odradek.storage import LogConfig, LogManager

    rm = ReplicaManager(2, LogManager([tmp_path]), lambda _t: LogConfig.from_dict({}))
    state = PartitionState("t", 0, (2, 3, 1), (2, 3, 1), 2, 7, 4)
    p = rm.make_leader(state, None, 0)
    for i in range(5):
        b = BatchBuilder()
        b.append(1_700_000_000_000 + i, None, b"v")
        rm.append(p, bytearray(b.build()), -1)
    p.record_follower_fetch(3, p.log.log_end_offset, 1)
    p.update_high_watermark()
    assert p.high_watermark == 0
    store = _FakeStore({"leader": 2, "leader_epoch": 7, "isr": [2, 3, 1], "controller_epoch": 1, "version": 1}, 4)

    zk = ZooKeeperBackend("127.0.0.1:1", 6000)  # never connected: its store is the fake
    zk.store = store  # type: ignore[assignment]
    fake = ClusterReplication(
        2, settings_from(BrokerConfig({})), types.SimpleNamespace(), rm, zk,  # type: ignore[arg-type]
        types.SimpleNamespace(now_ms=lambda: 10),  # type: ignore[arg-type]
        cluster_id="c", inter_broker_listener=None, fetcher_settings=BrokerConfig({}),
    )
    fake.controller_epoch = 2
    return fake, p, store


def test_isr_shrink_survives_a_same_epoch_leader_and_isr_during_the_write(tmp_path: Path) -> None:
    """A new controller's start-up LeaderAndIsr (same leader epoch, the partition epoch it read
    before the leader's write) lands while the leader writes its shrunk ISR: ZooKeeper holds the
    shrunk ISR, so the leader must keep it and let its acks=all waiters go (it used to go back to
    the old ISR, waiting for the dead follower)."""
    fake, p, store = _leader(tmp_path)
    old = p.state

    def leader_and_isr() -> None:
        p.state = dataclasses.replace(old)  # what make_leader installs: same epoch, partition epoch 4

    store.during_set = leader_and_isr

    async def run() -> bool:
        waiter = p.wait_for_hw(p.log.log_end_offset)
        await fake.change_isr(p, (2, 3))
        return waiter.done()

    assert asyncio.run(run())
    assert p.state.isr == (2, 3) and p.state.partition_epoch == 5
    assert p.high_watermark == p.log.log_end_offset


def test_isr_shrink_after_a_lost_race_adopts_zookeepers_isr(tmp_path: Path) -> None:
    """The leader's view is stale (ZooKeeper already has the shrunk ISR, version 5): the
    version-checked write fails; the leader adopts ZooKeeper's ISR and its HW moves at once."""
    fake, p, store = _leader(tmp_path)
    store.data, store.version = {"leader": 2, "leader_epoch": 7, "isr": [2, 3], "controller_epoch": 1, "version": 1}, 5

    async def run() -> bool:
        waiter = p.wait_for_hw(p.log.log_end_offset)
        await fake.change_isr(p, (2, 3))
        return waiter.done()

    assert asyncio.run(run())
    assert p.state.isr == (2, 3) and p.state.partition_epoch == 5
    assert p.high_watermark == p.log.log_end_offset


@pytest.mark.slow
def test_controller_survives_a_partition_state_written_under_it(cluster_factory: Callable[..., Cluster]) -> None:
    """The root of issue 18's first fault: the controller's version-checked write of a partition
    state failed because a leader had changed the ISR meanwhile (what happens when a takeover
    races the leaders' own ISR shrinks), and the failed ZooKeeper multi-op was read as "another
    controller": the controller resigned, its /controller znode stayed, and no broker was
    controller any more.  Here the state znode is rewritten behind the controller's back before
    it must take a dead follower out of the ISR (the leaders' own shrink is off)."""
    overrides = dict(OVERRIDES)
    overrides["replica.lag.time.max.ms"] = 600000
    cluster = cluster_factory(3, overrides=overrides)
    controller = cluster.wait_for_controller()
    leader, victim = [b for b in cluster.ids if b != controller]
    topic = "raced"
    create_topic(cluster.bootstrap, topic, assignment=[[leader, victim, controller]],
                 config={"min.insync.replicas": "2"})
    cluster.wait_for(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    epoch = cluster.controller_epoch()
    client = cluster.kazoo()
    path = f"/brokers/topics/{topic}/partitions/0/state"
    data, _ = client.get(path)
    client.set(path, data)  # same content, a new znode version the controller has not seen
    cluster.kill(victim)
    try:
        cluster.wait_for(lambda: victim not in cluster.isr(topic, 0), 40, "the dead follower out of the ISR")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {cluster.partition_state(topic, 0)}; controller {cluster.controller_id()}\n"
                             f"{cluster.logs(controller, 30)}") from None
    assert cluster.controller_id() == controller and cluster.controller_epoch() == epoch
    producer = AckRecorder(cluster.bootstrap, topic, 1, rate=50).start()
    try:
        producer.wait_all_partitions(time.monotonic(), 30, "with the dead broker out of the ISR")
    finally:
        producer.stop()
