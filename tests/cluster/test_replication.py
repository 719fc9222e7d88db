"""Replication and failover on a real 3-broker cluster with real ZooKeeper.

A confluent-kafka idempotent producer (acks=all) writes continuously while brokers are killed,
the controller's broker is killed and a follower is frozen; afterwards every acknowledged record
must be in the log exactly once and in order, the ISR must be full again and the preferred
leaders restored.  Other tests: unclean leader election off and on, reassignment while
producing, ZooKeeper session expiry, group offsets across a coordinator failover.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster, wait_for

pytestmark = pytest.mark.slow

OVERRIDES = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "leader.imbalance.check.interval.seconds": 3,
    # with 50 __consumer_offsets partitions one topic partition is a few percent of a broker's
    # preferred leaderships, below Kafka's default 10% trigger
    "leader.imbalance.per.broker.percentage": 0,
    "controlled.shutdown.retry.backoff.ms": 500,
}


class ProducerThread:
    """Produces numbered records until stopped; remembers what was acknowledged where."""

    def __init__(self, bootstrap: str, topic: str, *, interval: float = 0.002) -> None:
        self.topic = topic
        self.interval = interval
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.acked: dict[int, list[tuple[int, bytes]]] = {}
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()

    def _cb(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"rec-%08d" % self.sent, on_delivery=self._cb)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(self.interval)

    def start(self) -> ProducerThread:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def wait_progress(self, more: int, timeout: float, what: str) -> None:
        target = self.acked_count() + more
        wait_for(lambda: self.acked_count() >= target, timeout, f"{more} more acknowledged records {what}")

    def stop(self, timeout: float = 120) -> None:
        self._stop.set()
        self._thread.join(10)
        remaining = self.producer.flush(timeout)
        assert remaining == 0, f"{remaining} records never resolved"


def create_topic(bootstrap: str, name: str, partitions: int = 3, rf: int = 3, *, config: dict[str, str] | None = None,
                 assignment: list[list[int]] | None = None) -> None:
    if assignment is not None:  # confluent-kafka's AdminClient rejects explicit assignments locally
        from odradek.client import Admin
        from odradek.client.admin import NewTopic as OdradekNewTopic

        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([OdradekNewTopic(name, configs=config or {}, assignments=assignment)], timeout=30)
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    # assign(), not a group: with a broker down for good, fewer brokers may be alive than
    # offsets.topic.replication.factor, and then (as in Kafka) no group can be coordinated
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    deadline = time.monotonic() + timeout
    # a broker that has just restarted answers Metadata from an empty cache until the
    # controller's UpdateMetadata reaches it (as Kafka's do): ask until the partitions are there
    while True:
        t = c.list_topics(topic, timeout=10).topics[topic]
        if t.error is None and t.partitions:
            parts = t.partitions
            break
        if time.monotonic() > deadline:
            c.close()
            raise AssertionError(f"no partitions of {topic} in the metadata: {t.error}")
        time.sleep(0.2)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    got: dict[int, list[tuple[int, bytes]]] = {}
    errors: list[str] = []
    count = 0
    idle_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                if count >= expected and time.monotonic() - idle_since > 2:
                    break
                continue
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(str(m.error()))
                continue
            idle_since = time.monotonic()
            got.setdefault(m.partition(), []).append((m.offset(), m.value()))
            count += 1
        if count < expected:
            marks = {}
            for p in parts:
                try:
                    marks[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                except Exception as exc:  # a diagnostic only
                    marks[p] = str(exc)
            print(f"consume_all: {count} of {expected} records; watermarks {marks}; consumer errors: {errors[:10]}")
    finally:
        c.close()
    return got


def check_no_loss(acked: dict[int, list[tuple[int, bytes]]], got: dict[int, list[tuple[int, bytes]]]) -> None:
    """Every acknowledged record is at its acknowledged offset; no value appears twice; offsets
    increase within each partition."""
    all_values: list[bytes] = []
    for part, records in got.items():
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets)), f"partition {part}: offsets not strictly increasing"
        all_values += [v for _, v in records]
    assert len(all_values) == len(set(all_values)), "a record was written twice"
    for part, records in acked.items():
        log = dict(got.get(part, []))
        values = set(log.values())
        # librdkafka acknowledges without an offset the batches it learns were written only from
        # the acknowledgement of a later sequence (they were being retried): those must be in
        # the partition, at whatever offset
        lost = [(o, v) for o, v in records if (log.get(o) != v if o is not None else v not in values)]
        assert not lost, f"partition {part}: {len(lost)} acknowledged records missing, e.g. {lost[:3]}"


def metadata(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=10)
    t = md.topics[topic]
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}


def isr_full(cluster: Cluster, topic: str, partitions: int) -> bool:
    for p in range(partitions):
        state = cluster.partition_state(topic, p)
        replicas = cluster.topic_assignment(topic)[p]
        if state is None or sorted(state["isr"]) != sorted(replicas) or state["leader"] < 0:
            return False
    return True


def preferred_leaders(cluster: Cluster, topic: str, partitions: int) -> bool:
    assignment = cluster.topic_assignment(topic)
    return all(cluster.leader(topic, p) == assignment[p][0] for p in range(partitions))


def diagnose(cluster: Cluster, topic: str, partitions: int) -> str:
    """Partition states and the end of every broker's log, for a failure message."""
    lines = [f"{topic}-{p}: {cluster.partition_state(topic, p)}" for p in range(partitions)]
    lines.append(f"controller: {cluster.controller_id()}, registered: {cluster.registered_brokers()}")
    for i in sorted(cluster.brokers):
        lines.append(f"--- broker {i}:\n" + cluster.logs(i, 60))
    return "\n".join(lines)


@pytest.mark.parametrize("security", ["plaintext", "sasl_ssl"])
def test_failover_loses_no_acknowledged_record(cluster_factory: Callable[..., Cluster], security: str) -> None:
    """Also with the brokers talking to each other over SASL_SSL (SCRAM-SHA-512)."""
    cluster = cluster_factory(3, OVERRIDES, log_level="INFO", security=security)
    topic = "orders"
    create_topic(cluster.bootstrap, topic, 3, 3, config={"min.insync.replicas": "2"})
    cluster.wait_for(lambda: isr_full(cluster, topic, 3), 30, "a full ISR")
    producer = ProducerThread(cluster.bootstrap, topic).start()
    try:
        _failures(cluster, topic, producer)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(cluster, topic, 3)}") from None
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    total = producer.acked_count()
    assert total == producer.sent
    got = consume_all(cluster.bootstrap, topic, total)
    check_no_loss(producer.acked, got)
    assert sum(len(v) for v in got.values()) == total
    # the automatic preferred-replica election gives leadership back to the first replicas
    try:
        cluster.wait_for(lambda: preferred_leaders(cluster, topic, 3), 40, "preferred leaders restored")
    except AssertionError as exc:
        states = {p: cluster.partition_state(topic, p) for p in range(3)}
        ctl = cluster.controller_id()
        raise AssertionError(f"{exc}: {states} {cluster.topic_assignment(topic)}; controller {ctl}:\n"
                             + cluster.logs(ctl or 1, 200)) from None
    md = metadata(cluster.bootstrap, topic)
    assert all(sorted(isr) == sorted(replicas) for _leader, replicas, isr in md.values()), md


def _failures(cluster: Cluster, topic: str, producer: ProducerThread) -> None:
    producer.wait_progress(300, 30, "before any failure")

    # (a) the leader of partition 0 is killed, later restarted
    leader = cluster.leader(topic, 0)
    assert leader is not None
    cluster.kill(leader)
    cluster.wait_for(lambda: cluster.leader(topic, 0) not in (leader, -1, None), 30, "a new leader for partition 0")
    producer.wait_progress(300, 60, "after the leader was killed")
    cluster.start(leader)
    cluster.wait_for(lambda: isr_full(cluster, topic, 3), 120, "the restarted broker back in every ISR")

    # (b) the controller's broker is killed, later restarted
    controller = cluster.wait_for_controller()
    cluster.kill(controller)
    cluster.wait_for(lambda: cluster.controller_id() not in (controller, None), 30, "a new controller")
    producer.wait_progress(300, 60, "after the controller was killed")
    cluster.start(controller)
    cluster.wait_for(lambda: isr_full(cluster, topic, 3), 120, "the old controller back in every ISR")

    # (c) a follower is frozen for 10 s: the ISR shrinks, then expands again
    leader0 = cluster.leader(topic, 0)
    follower = next(r for r in cluster.topic_assignment(topic)[0] if r != leader0)
    cluster.sigstop(follower)
    frozen_at = time.monotonic()
    cluster.wait_for(lambda: follower not in cluster.isr(topic, 0), 20, "the frozen follower out of the ISR")
    # the frozen broker may also lead another partition: the idempotent producer's requests in
    # flight to it end only at librdkafka's request.timeout.ms (30 s), and it holds every partition
    # while it drains them to bump its epoch, so progress can pause for about that long
    producer.wait_progress(200, 90, "with a frozen follower")
    time.sleep(max(0.0, 10 - (time.monotonic() - frozen_at)))
    cluster.sigcont(follower)
    cluster.wait_for(lambda: isr_full(cluster, topic, 3), 120, "the follower back in the ISR")
    producer.wait_progress(200, 30, "after everything recovered")


@pytest.mark.parametrize("unclean", [False, True])
def test_partition_with_whole_isr_down(cluster_factory: Callable[..., Cluster], unclean: bool) -> None:
    cluster = cluster_factory(
        3, {**OVERRIDES, "zookeeper.session.timeout.ms": 20000, "auto.leader.rebalance.enable": False}, log_level="INFO"
    )
    topic = "ledger"
    create_topic(
        cluster.bootstrap, topic, assignment=[[1, 2]],
        config={"min.insync.replicas": "1", "unclean.leader.election.enable": str(unclean).lower()},
    )
    cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR")
    producer = ProducerThread(cluster.bootstrap, topic).start()
    try:
        producer.wait_progress(200, 30, "with both replicas in sync")
        cluster.sigstop(2)  # the follower falls out of the ISR (its session stays: 20 s timeout)
        cluster.wait_for(lambda: cluster.isr(topic, 0) == [1], 20, "the ISR down to the leader")
        producer.wait_progress(200, 30, "with the leader alone in the ISR")
    finally:
        producer.stop()
    acked = producer.acked
    cluster.kill(1)  # the whole ISR is gone
    cluster.sigcont(2)
    if not unclean:
        # broker 1's session ends after 20 s; then the partition has no eligible leader
        cluster.wait_for(lambda: 1 not in cluster.registered_brokers(), 40, "broker 1's session to expire")
        time.sleep(3)
        state = cluster.partition_state(topic, 0)
        assert state is not None and state["leader"] == -1 and state["isr"] == [1], state  # offline, ISR kept
        cluster.start(1)
        cluster.wait_for(lambda: cluster.leader(topic, 0) == 1, 40, "broker 1 leading again")
        got = consume_all(cluster.bootstrap, topic, sum(len(v) for v in acked.values()))
        try:
            check_no_loss(acked, got)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnose(cluster, topic, 1)}") from None
    else:
        cluster.wait_for(lambda: cluster.leader(topic, 0) == 2, 40, "the out-of-sync replica elected")
        # the controller logs the election after writing it to ZooKeeper, so the log line may trail the state
        cluster.wait_for(
            lambda: any("unclean leader election" in cluster.logs(i, 400) for i in (2, 3)), 10,
            "the controller to log the unclean election",
        )
        cluster.start(1)
        # the old leader truncates to the new leader's log: both replicas agree again
        cluster.wait_for(lambda: isr_full(cluster, topic, 1), 60, "broker 1 back in sync")


@pytest.mark.parametrize("security", ["plaintext", "sasl_ssl"])
def test_reassignment_while_producing(cluster_factory: Callable[..., Cluster], security: str) -> None:
    from odradek.protocol.messages.alter_partition_reassignments import (
        AlterPartitionReassignmentsRequest as A,
    )
    from odradek.protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest as L
    from odradek.transport import BrokerConnection

    cluster = cluster_factory(3, OVERRIDES, security=security)
    topic = "moving"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2], [2, 1]])
    cluster.wait_for(lambda: isr_full(cluster, topic, 2), 30, "a full ISR")
    producer = ProducerThread(cluster.bootstrap, topic).start()
    try:
        producer.wait_progress(300, 30, "before the reassignment")
        controller = cluster.wait_for_controller()
        port = cluster.broker(controller).port
        conn = BrokerConnection("127.0.0.1", port, client_id="test", timeout=30)
        try:
            resp = conn.request(
                A(timeout_ms=30000, topics=[A.ReassignableTopic(name=topic, partitions=[
                    A.ReassignablePartition(partition_index=0, replicas=[2, 3]),
                    A.ReassignablePartition(partition_index=1, replicas=[3, 2]),
                ])]),
                0,
            )
            assert resp.error_code == 0, resp
            assert all(p.error_code == 0 for t in resp.responses for p in t.partitions), resp

            def done() -> bool:
                listed = conn.request(L(timeout_ms=10000, topics=None), 0)
                return not listed.topics and cluster.topic_assignment(topic) == {0: [2, 3], 1: [3, 2]}

            cluster.wait_for(done, 60, "the reassignment to finish")
        finally:
            conn.close()
        cluster.wait_for(lambda: isr_full(cluster, topic, 2), 30, "a full ISR on the new replicas")
        producer.wait_progress(300, 30, "after the reassignment")
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    got = consume_all(cluster.bootstrap, topic, producer.acked_count())
    check_no_loss(producer.acked, got)
    # broker 1 deleted its replicas
    cluster.wait_for(
        lambda: not any(d.name.startswith(f"{topic}-") for d in (cluster.broker(1).data_dir).iterdir()),
        30,
        "broker 1's replica directories deleted",
    )


def test_session_expiry_and_zookeeper_restart(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, OVERRIDES)
    topic = "sessions"
    create_topic(cluster.bootstrap, topic, 3, 3, config={"min.insync.replicas": "2"})
    cluster.wait_for(lambda: isr_full(cluster, topic, 3), 30, "a full ISR")
    producer = ProducerThread(cluster.bootstrap, topic).start()
    try:
        producer.wait_progress(200, 30, "at the start")
        # a broker frozen past its session timeout: its session expires; it re-registers
        victim = 2
        czxid_before = cluster.kazoo().exists("/brokers/ids/2").czxid
        cluster.sigstop(victim)
        cluster.wait_for(lambda: victim not in cluster.registered_brokers(), 30, "the frozen broker's session to expire")
        cluster.sigcont(victim)
        cluster.wait_for(lambda: victim in cluster.registered_brokers(), 30, "the broker to register again")
        assert cluster.kazoo().exists("/brokers/ids/2").czxid != czxid_before  # a new broker epoch
        cluster.wait_for(lambda: isr_full(cluster, topic, 3), 60, "a full ISR after the session expiry")
        producer.wait_progress(200, 30, "after the session expiry")
        # ZooKeeper itself restarted: the brokers reconnect and the cluster keeps working
        cluster.zk.stop()
        time.sleep(2)
        cluster.zk.start()
        cluster.wait_for_registered([1, 2, 3], timeout=60)
        cluster.wait_for_controller(60)
        producer.wait_progress(200, 60, "after the ZooKeeper restart")
        create_topic(cluster.bootstrap, "after-restart", 2, 3)
        cluster.wait_for(lambda: isr_full(cluster, "after-restart", 2), 30, "a new topic with a full ISR")
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    got = consume_all(cluster.bootstrap, topic, producer.acked_count())
    check_no_loss(producer.acked, got)


@pytest.mark.parametrize("security", ["plaintext", "sasl_ssl"])
def test_group_offsets_survive_coordinator_failover(cluster_factory: Callable[..., Cluster], security: str) -> None:
    from odradek.cluster.assignment import partition_for

    cluster = cluster_factory(3, OVERRIDES, log_level="INFO", security=security)  # logs for the failure message
    topic = "events"
    create_topic(cluster.bootstrap, topic, 3, 3, config={"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        p.produce(topic, value=b"%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    group = "billing"
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 150 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            seen += 1
    assert seen >= 150
    c.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, i) for i in range(3)], 30)}
    c.close()
    assert sum(max(o, 0) for o in committed.values()) == seen
    # kill the coordinator: the leader of the group's __consumer_offsets partition
    coordinator = cluster.leader("__consumer_offsets", partition_for(group, 50))
    assert coordinator is not None and coordinator > 0
    cluster.kill(coordinator)
    cluster.wait_for(
        lambda: cluster.leader("__consumer_offsets", partition_for(group, 50)) not in (coordinator, -1, None),
        30,
        "a new coordinator",
    )
    c2 = Consumer(conf)
    try:
        try:
            after = wait_for(
                lambda: {tp.partition: tp.offset
                         for tp in c2.committed([TopicPartition(topic, i) for i in range(3)], 10)},
                60,
                "committed offsets from the new coordinator",
            )
        except AssertionError as exc:
            offsets_partition = partition_for(group, 50)
            state = cluster.partition_state("__consumer_offsets", offsets_partition)
            raise AssertionError(
                f"{exc}\n__consumer_offsets-{offsets_partition}: {state}\n{diagnose(cluster, topic, 3)}"
            ) from None
        assert after == committed
        c2.subscribe([topic])
        rest = 0
        deadline = time.monotonic() + 60
        while rest < 300 - seen and time.monotonic() < deadline:
            m = c2.poll(1)
            if m is not None and not m.error():
                rest += 1
        assert rest == 300 - seen  # resumed exactly where the group left off
    finally:
        c2.close()


def test_duplicate_broker_id_fails_start_up(cluster_factory: Callable[..., Cluster], tmp_path: Any) -> None:
    from odradek.testing import BrokerProcess

    cluster = cluster_factory(1, {"zookeeper.session.timeout.ms": 6000})
    dup = BrokerProcess(tmp_path / "dup", broker_id=1, extra_args=["--zookeeper", cluster.zookeeper_connect])
    with pytest.raises(Exception):  # noqa: B017  (BrokerProcess reports the failed start)
        dup.start(timeout=30)
    text = "\n".join(dup.stderr_lines)
    dup.stop()
    assert "already registered" in text, text


def test_elect_leaders_on_demand(cluster_factory: Callable[..., Cluster], capsys: Any) -> None:
    from odradek.cli.__main__ import main

    cluster = cluster_factory(3, {**OVERRIDES, "auto.leader.rebalance.enable": False})
    topic = "elect"
    create_topic(cluster.bootstrap, topic, 3, 3)
    cluster.wait_for(lambda: isr_full(cluster, topic, 3), 30, "a full ISR")
    victim = cluster.leader(topic, 0)
    assert victim is not None
    cluster.restart(victim, clean=True)  # controlled shutdown moves its leaderships away
    cluster.wait_for(lambda: isr_full(cluster, topic, 3), 60, "the restarted broker back in the ISR")
    assert cluster.leader(topic, 0) != victim  # no automatic rebalance
    time.sleep(4)
    assert cluster.leader(topic, 0) != victim
    rc = main(["cluster", "elect-leaders", "-b", cluster.bootstrap, "--topic", topic])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"{topic}-0: elected" in out
    cluster.wait_for(lambda: preferred_leaders(cluster, topic, 3), 10, "preferred leaders after elect-leaders")


def _reassign(cluster: Cluster, topic: str, targets: dict[int, list[int]]) -> None:
    from odradek.protocol.messages.alter_partition_reassignments import (
        AlterPartitionReassignmentsRequest as A,
    )
    from odradek.transport import BrokerConnection

    controller = cluster.wait_for_controller()
    conn = BrokerConnection("127.0.0.1", cluster.broker(controller).port, client_id="test", timeout=30)
    try:
        resp = conn.request(
            A(timeout_ms=30000, topics=[A.ReassignableTopic(name=topic, partitions=[
                A.ReassignablePartition(partition_index=p, replicas=r) for p, r in targets.items()
            ])]),
            0,
        )
    finally:
        conn.close()
    assert resp.error_code == 0 and all(p.error_code == 0 for t in resp.responses for p in t.partitions), resp


def test_reassignment_resumes_after_controller_failover(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, {**OVERRIDES, "zookeeper.session.timeout.ms": 15000})
    controller = cluster.wait_for_controller()
    others = [b for b in (1, 2, 3) if b != controller]
    frozen, keeper = others
    topic = "resume"
    create_topic(cluster.bootstrap, topic, assignment=[[controller, keeper]])
    cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR")
    producer = ProducerThread(cluster.bootstrap, topic).start()
    try:
        producer.wait_progress(200, 30, "before the reassignment")
        cluster.sigstop(frozen)  # the new replica cannot catch up: the reassignment stalls mid-way
        _reassign(cluster, topic, {0: [keeper, frozen]})
        cluster.wait_for(lambda: cluster.topic_assignment(topic)[0] == [keeper, frozen, controller], 20,
                         "the union of old and new replicas written first")
        assert cluster.zk_json("/admin/reassign_partitions")["partitions"][0]["replicas"] == [keeper, frozen]
        cluster.kill(controller)
        cluster.wait_for(lambda: cluster.controller_id() not in (controller, None), 40, "a new controller")
        producer.wait_progress(200, 60, "after the controller failover")
        cluster.sigcont(frozen)
        cluster.wait_for(lambda: cluster.topic_assignment(topic)[0] == [keeper, frozen], 60,
                         "the new controller to finish the reassignment")
        cluster.wait_for(lambda: isr_full(cluster, topic, 1), 60, "the new replicas in sync")
        assert cluster.zk_get("/admin/reassign_partitions") is None
        producer.wait_progress(200, 30, "after the reassignment")
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    got = consume_all(cluster.bootstrap, topic, producer.acked_count())
    check_no_loss(producer.acked, got)


def test_topic_changes_reach_every_broker(cluster_factory: Callable[..., Cluster]) -> None:
    from odradek.client import Admin
    from odradek.client.admin import ConfigResource, NewPartitions

    cluster = cluster_factory(3, OVERRIDES)
    create_topic(cluster.bootstrap, "short-lived", 3, 3)
    create_topic(cluster.bootstrap, "growing", 2, 2)
    cluster.wait_for(lambda: isr_full(cluster, "short-lived", 3) and isr_full(cluster, "growing", 2), 30, "full ISRs")
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        # a topic config change reaches every broker through /config/changes
        admin.incremental_alter_configs({ConfigResource("topic", "growing"): {"retention.ms": "3600000"}})
        for i in (1, 2, 3):
            with Admin({"bootstrap.servers": cluster.broker(i).bootstrap}) as one:
                cluster.wait_for(
                    lambda one=one: one.describe_configs([ConfigResource("topic", "growing")])[
                        ConfigResource("topic", "growing")]["retention.ms"].value == "3600000",
                    20, f"broker {i} to see the new retention.ms")
        # partitions added: placed on live brokers, led, replicated
        admin.create_partitions({"growing": NewPartitions(4)})
        cluster.wait_for(lambda: isr_full(cluster, "growing", 4), 30, "the new partitions in sync")
        # deletion: every replica's directory goes away, the znodes too
        admin.delete_topics(["short-lived"])
    cluster.wait_for(lambda: cluster.zk_get("/brokers/topics/short-lived") is None, 30, "the topic znode deleted")
    for i in (1, 2, 3):
        cluster.wait_for(
            lambda i=i: not any(d.name.startswith("short-lived-") for d in cluster.broker(i).data_dir.iterdir()),
            30, f"broker {i}'s replicas deleted")
    assert "short-lived" not in metadata_topics(cluster.bootstrap)


def metadata_topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)
