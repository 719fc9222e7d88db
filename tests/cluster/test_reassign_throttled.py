"""``odradek reassign`` on a 3-broker cluster under a running producer and consumer (issue 46):
``execute --throttle`` moves a partition from brokers {1, 2} to {2, 3} with the new replica
copying at the throttle's rate (measured from its log's size over time), ``verify`` reports the
progress, then the completion, and removes the throttle configs, no acknowledged record is lost;
``cancel`` rolls back a move that has not finished.  confluent-kafka's AdminClient runs leader
elections against the same cluster with Kafka's per-partition results.

One cluster for the module; small data and a low throttle keep it to seconds."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ElectionType, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient

from odradek.cli.__main__ import main
from odradek.cli.reassign import format_reassignment_json
from odradek.client import Admin, AdminError, ConfigResource
from odradek.client.admin import ConfigSource
from odradek.coordination.zkserver import ZooKeeperServer
from odradek.errors import ErrorCode
from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import ProducerThread, check_no_loss, consume_all, create_topic, isr_full
from tests.console.conftest import Console
from tests.console.test_pages import _cells

pytestmark = pytest.mark.slow

TIMEOUT = 120.0
RATE = 400_000  # bytes/s
FILL_RECORDS, FILL_VALUE = 2000, 1000  # about 2 MB: about five seconds at the rate
OVERRIDES = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "auto.leader.rebalance.enable": False,
    # the throttle's rate over 2 windows of 1 s (Kafka's default is 11), and fetches of at most
    # 64 KB per partition, so that what a follower copies follows the rate closely
    "replication.quota.window.num": 2,
    "replication.quota.window.size.seconds": 1,
    "replica.fetch.max.bytes": 65536,
    "controlled.shutdown.retry.backoff.ms": 500,
}
THROTTLES = {
    "broker": ("leader.replication.throttled.rate", "follower.replication.throttled.rate"),
    "topic": ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"),
}


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(zookeeper, tmp_path_factory.mktemp("reassign"), 3, overrides=OVERRIDES,
                chroot=f"/reassign-{uuid.uuid4().hex[:8]}")  # fmt: skip
    with c:
        yield c


def _log_bytes(data_dir: Path, topic: str, partition: int = 0) -> int:
    d = data_dir / f"{topic}-{partition}"
    try:
        return sum(f.stat().st_size for f in d.glob("*.log"))
    except OSError:  # being deleted
        return 0


def _fill(bootstrap: str, topic: str, records: int = FILL_RECORDS) -> dict[int, list[tuple[int, bytes]]]:
    """About 2 MB (``records`` of 1 KB) into partition 0 with acks=all; what was acknowledged, at
    which offsets."""
    acked: dict[int, list[tuple[int, bytes]]] = {}

    def cb(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "acks": "all",
                  "enable.idempotence": True})  # small batches: a fetch is at least one whole batch
    for i in range(records):
        value = (b"fill-%08d-" % i).ljust(FILL_VALUE, b"x")
        while True:
            try:
                p.produce(topic, value=value, partition=0, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(TIMEOUT) == 0
    return acked


class ConsumerThread:
    """Reads partition 0 from the beginning until stopped (a consumer running through the move)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000})  # fmt: skip
        self.consumer.assign([CKTopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.got: list[tuple[int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self.consumer.poll(0.2)
            if m is not None and not m.error():
                self.got.append((m.offset(), m.value()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()  # (the test's own prints)
    rc = main(list(argv))
    got = capsys.readouterr()
    assert rc == 0, (argv, got.out, got.err)
    return got.out


def _throttle_overrides(bootstrap: str, topic: str) -> dict[str, str]:
    """The throttle configs set anywhere (dynamic broker configs, topic overrides)."""
    resources = [ConfigResource("broker", str(b)) for b in (1, 2, 3)] + [ConfigResource("topic", topic)]
    with Admin(bootstrap_servers=bootstrap) as admin:
        described = admin.describe_configs(resources, timeout=30)
    found = {}
    for r, entries in described.items():
        for name in THROTTLES["broker" if r.type.name == "BROKER" else "topic"]:
            e = entries.get(name)
            if e is not None and e.source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG):
                found[f"{r.name}/{name}"] = str(e.value)
    return found


def test_throttled_move_under_load(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"thr-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2]])
    cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR")
    filled = _fill(cluster.bootstrap, topic)
    producer = ProducerThread(cluster.bootstrap, topic, interval=0.01).start()
    consumer = ConsumerThread(cluster.bootstrap, topic)
    b = ["-b", cluster.bootstrap]
    console: Console | None = None
    try:
        producer.wait_progress(50, 30, "before the move")
        target = _log_bytes(cluster.broker(1).data_dir, topic)
        assert target >= FILL_RECORDS * FILL_VALUE
        plan = tmp_path / "plan.json"
        plan.write_text(format_reassignment_json({(topic, 0): [2, 3]}))
        console = Console(cluster.bootstrap, "--metrics-url", "none").start()  # started before the copy
        out = _cli(capsys, "reassign", "execute", *b, "--reassignment-json-file", str(plan), "--throttle", str(RATE))
        assert '"replicas":[1,2]' in out and "Save this to use as the --reassignment-json-file option" in out
        assert f"The inter-broker throttle limit was set to {RATE} B/s" in out
        # Kafka's tool's configs: the rates on every broker involved; leader side the old replicas,
        # follower side the new one
        assert _throttle_overrides(cluster.bootstrap, topic) == {
            **{f"{n}/{c}": str(RATE) for n in "123" for c in THROTTLES["broker"]},
            f"{topic}/leader.replication.throttled.replicas": "0:1,0:2",
            f"{topic}/follower.replication.throttled.replicas": "0:3",
        }

        # the progress while it copies (the throttle makes this take seconds)
        state = json.loads(_cli(capsys, "reassign", "verify", *b, "--reassignment-json-file", str(plan), "--output", "json"))
        assert not state["complete"] and not state["throttles_cleared"], state
        (p,) = state["partitions"]
        assert p["state"] == "in_progress" and p["adding_replicas"] == [3] and p["removing_replicas"] == [1]
        assert 0 <= state["bytes_moved"] < state["bytes_total"], state
        with Admin(bootstrap_servers=cluster.bootstrap) as admin:
            listed = admin.list_partition_reassignments(timeout=30)
        assert listed[(topic, 0)].adding_replicas == [3] and listed[(topic, 0)].removing_replicas == [1]
        assert sorted(listed[(topic, 0)].replicas) == [1, 2, 3]
        # the console shows the move and its progress too
        rows = {r[0]: r for r in _cells(console.page("/reassignments"), "reassignments")}
        row = rows[topic]
        assert row[1:5] == ["0", ",".join(map(str, listed[(topic, 0)].replicas)), "3", "1"], row
        moved, total = (int(x.replace(",", "")) for x in row[5:7])
        assert 0 <= moved < total and row[7].endswith("%"), row
        dirs = _cells(console.page("/log-dirs"), "log-dirs")
        assert sorted({int(r[0]) for r in dirs}) == [1, 2, 3] and all(r[2] == "online" for r in dirs), dirs

        # the new replica's log, sampled as it grows
        samples: list[tuple[float, int]] = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < TIMEOUT:
            size = _log_bytes(cluster.broker(3).data_dir, topic)
            samples.append((time.monotonic(), size))
            if size >= target:
                break
            time.sleep(0.05)
        assert samples[-1][1] >= target, samples[-5:]
        # the rate between a quarter and nine tenths of the copy (past the first window's burst)
        t1, b1 = next((t, s) for t, s in samples if s >= target // 4)
        t2, b2 = next((t, s) for t, s in samples if s >= target * 9 // 10)
        rate = (b2 - b1) / (t2 - t1)
        with capsys.disabled():
            print(f"\nfollower copy rate {rate / 1e3:.0f} KB/s against a throttle of {RATE / 1e3:.0f} KB/s "
                  f"({target} bytes in {samples[-1][0] - t0:.1f} s)")  # fmt: skip
        assert 0.8 * RATE <= rate <= 1.2 * RATE, (rate, samples[::10])

        out = _cli(capsys, "reassign", "verify", *b, "--reassignment-json-file", str(plan), "--output", "json",
                   "--wait", "--wait-timeout", str(TIMEOUT), "--poll-interval", "0.2")  # fmt: skip
        state = json.loads(out)
        assert state["complete"] and state["throttles_cleared"] and state["partitions"][0]["state"] == "completed", state
        assert _throttle_overrides(cluster.bootstrap, topic) == {}
        assert cluster.topic_assignment(topic) == {0: [2, 3]}
        cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR on the new replicas")
        out = _cli(capsys, "reassign", "verify", *b, "--reassignment-json-file", str(plan))
        assert f"Reassignment of partition {topic}-0 is completed." in out
        producer.wait_progress(50, 30, "after the move")
    finally:
        producer.stop()
        consumer.stop()
        if console is not None:
            console.stop()
    assert not producer.errors, producer.errors[:5]
    acked = {0: filled.get(0, []) + producer.acked.get(0, [])}
    check_no_loss(acked, {0: consumer.got})  # the consumer that ran through the move
    check_no_loss(acked, consume_all(cluster.bootstrap, topic, len(acked[0])))


def test_cancel_rolls_back_an_unfinished_move(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"cxl-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2]])
    cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR")
    filled = _fill(cluster.bootstrap, topic, 500)
    producer = ProducerThread(cluster.bootstrap, topic, interval=0.01).start()
    b = ["-b", cluster.bootstrap]
    try:
        plan = tmp_path / "plan.json"
        plan.write_text(format_reassignment_json({(topic, 0): [2, 3]}))
        # so slow that it cannot finish: 10 KB/s for 500 KB
        _cli(capsys, "reassign", "execute", *b, "--reassignment-json-file", str(plan), "--throttle", "10000")
        cluster.wait_for(lambda: _log_bytes(cluster.broker(3).data_dir, topic) > 0, 30, "broker 3 copying")
        out = _cli(capsys, "reassign", "list", *b)
        assert f"{topic}-0: replicas: 2,3,1. adding: 3. removing: 1." in out, out
        # waiting for it (given up here) shows its progress
        capsys.readouterr()
        rc = main(["reassign", "verify", *b, "--reassignment-json-file", str(plan), "--wait", "--wait-timeout", "2",
                   "--progress", "--progress-interval", "0.5", "--poll-interval", "0.2"])  # fmt: skip
        err = capsys.readouterr().err
        assert rc == 1 and "still in progress after 2 s" in err, err
        assert "reassign: 0/1 partitions done, " in err and " copied to new replicas" in err, err
        out = _cli(capsys, "reassign", "cancel", *b, "--reassignment-json-file", str(plan))
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in out
        assert "Clearing broker-level throttles on brokers 1,2,3" in out
        # back on its original replicas (in the order Kafka keeps them: the union's minus the
        # replicas being added); broker 3 stops and deletes its copy; the throttles are gone
        cluster.wait_for(lambda: sorted(cluster.topic_assignment(topic)[0]) == [1, 2], 30, "the original replicas")
        assert _cli(capsys, "reassign", "list", *b) == "No partition reassignments found.\n"
        cluster.wait_for(lambda: not (cluster.broker(3).data_dir / f"{topic}-0").exists(), 30, "broker 3's copy deleted")
        cluster.wait_for(lambda: isr_full(cluster, topic, 1) and cluster.isr(topic, 0) == [1, 2], 30, "ISR [1, 2]")
        assert _throttle_overrides(cluster.bootstrap, topic) == {}
        producer.wait_progress(50, 30, "after the cancel")
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    acked = {0: filled.get(0, []) + producer.acked.get(0, [])}
    check_no_loss(acked, consume_all(cluster.bootstrap, topic, len(acked[0])))


def test_confluent_admin_elects_leaders_with_kafkas_results(cluster: Cluster, capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:  # fmt: skip
    """A reorder (no copy) keeps leader 1 while broker 2 becomes the preferred leader; a
    preferred election then elects it (no error), a second one is not needed; an unclean
    election of a partition with a leader is not needed either."""
    topic = f"elect-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2]])
    cluster.wait_for(lambda: isr_full(cluster, topic, 1) and cluster.leader(topic, 0) == 1, 30, "led by 1")
    plan = tmp_path / "plan.json"
    plan.write_text(format_reassignment_json({(topic, 0): [2, 1]}))
    _cli(capsys, "reassign", "execute", *["-b", cluster.bootstrap], "--reassignment-json-file", str(plan), "--wait")
    assert cluster.topic_assignment(topic) == {0: [2, 1]} and cluster.leader(topic, 0) == 1
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tp = CKTopicPartition(topic, 0)
    first = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(TIMEOUT)
    assert [(k.topic, k.partition, v) for k, v in first.items()] == [(topic, 0, None)]
    cluster.wait_for(lambda: cluster.leader(topic, 0) == 2, 30, "broker 2 leading")
    again = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(TIMEOUT)
    assert [v.code() for v in again.values()] == [ErrorCode.ELECTION_NOT_NEEDED]
    unclean = admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(TIMEOUT)
    assert [v.code() for v in unclean.values()] == [ErrorCode.ELECTION_NOT_NEEDED]
    # Odradek's Admin agrees
    with Admin(bootstrap_servers=cluster.bootstrap) as odradek:
        got = odradek.elect_leaders("preferred", [(topic, 0)], timeout=30)
        assert got[(topic, 0)] is not None and got[(topic, 0)].code == ErrorCode.ELECTION_NOT_NEEDED
        dirs = odradek.describe_log_dirs(timeout=30)
        assert sorted(dirs) == [1, 2, 3]
        holders = sorted(bid for bid, by in dirs.items() for d in by.values() if (topic, 0) in d.replicas)
        assert holders == [1, 2]
        # the controller's refusals, with Kafka's codes and messages
        with pytest.raises(AdminError) as info:
            odradek.alter_partition_reassignments(
                {(topic, 0): [2, 9], (topic, 1): [2], (topic, 2): None}, timeout=30
            )
        errors = info.value.errors
        assert {tp: e.code for tp, e in errors.items()} == {
            (topic, 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            (topic, 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (topic, 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert "Replica assignment has brokers that are not alive. Replica list: [9]" in errors[(topic, 0)].message
        with pytest.raises(AdminError) as info:
            odradek.alter_partition_reassignments({(topic, 0): [2, -1]}, timeout=30)
        assert "Invalid broker id in replica list: [2, -1]" in info.value.errors[(topic, 0)].message
        with pytest.raises(AdminError) as info:
            odradek.alter_partition_reassignments({(topic, 0): None}, timeout=30)
        assert info.value.errors[(topic, 0)].code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        # KIP-860 (v1): a new replication factor refused when the request says so
        with pytest.raises(AdminError) as info:
            odradek.alter_partition_reassignments({(topic, 0): [2, 1, 3]}, allow_replication_factor_change=False,
                                                  timeout=30)  # fmt: skip
        assert info.value.errors[(topic, 0)].code == ErrorCode.INVALID_REPLICATION_FACTOR
        assert odradek.list_partition_reassignments(timeout=30) == {}



def test_kafka_python_admin_reassigns_lists_and_describes(cluster: Cluster) -> None:
    """kafka-python's KafkaAdminClient (which has these calls) against the cluster: Kafka's
    per-partition results for a move, a refused target and a cancel; the move listed with its
    adding and removing replicas while throttled; each broker's log dirs; a preferred election."""
    import kafka.errors as ke
    from kafka import KafkaAdminClient, TopicPartition

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2]])
    cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR")
    _fill(cluster.bootstrap, topic, 500)
    with Admin(bootstrap_servers=cluster.bootstrap) as odradek:  # slow enough to list it moving
        odradek.incremental_alter_configs({
            ConfigResource("broker", "3"): {"follower.replication.throttled.rate": 10000},
            ConfigResource("topic", topic): {"follower.replication.throttled.replicas": "0:3"},
        }, timeout=30)  # fmt: skip
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, 0)
        assert admin.alter_partition_reassignments({tp: [2, 3]}) == {tp: None}
        bad = admin.alter_partition_reassignments({TopicPartition(topic, 1): [2], tp: [2, 9]})
        assert bad == {TopicPartition(topic, 1): ke.UnknownTopicOrPartitionError, tp: ke.InvalidReplicationAssignmentError}
        listed = admin.list_partition_reassignments([tp])
        assert listed == {tp: {"replicas": [2, 3, 1], "adding_replicas": [3], "removing_replicas": [1]}}
        dirs = admin.describe_log_dirs(topic_partitions={topic: [0]})
        holders = sorted(
            b["broker"] if "broker" in b else b.get("node_id", -1)
            for b in dirs
            for d in b.get("log_dirs", b.get("results", []))
            for t in d.get("topics", []) if t.get("name") == topic and t.get("partitions")
        )  # fmt: skip
        assert holders == [1, 2, 3], dirs
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: ke.NoReassignmentInProgressError}
        cluster.wait_for(lambda: not admin.list_partition_reassignments([tp]), 30, "no reassignment listed")
        # a cancel leaves the replicas in the order Kafka keeps (the union's, less the added
        # ones): [2, 1], so broker 2 is now the preferred leader and an election moves it there
        assert cluster.topic_assignment(topic) == {0: [2, 1]} and cluster.leader(topic, 0) == 1
        elected = admin.elect_leaders(0, {topic: [0]}, raise_errors=False)
        [result] = elected.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, 0)]
        cluster.wait_for(lambda: cluster.leader(topic, 0) == 2, 30, "broker 2 leading")
        elected = admin.elect_leaders(0, {topic: [0]}, raise_errors=False)
        [result] = elected.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, ErrorCode.ELECTION_NOT_NEEDED)]
    finally:
        admin.close()
