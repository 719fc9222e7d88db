"""The ZooKeeper-coordinated high-level consumer and the 0.8 offset storage, against real
ZooKeeper and real brokers: group balancing with SIGKILLed and joining consumers (each in its own
process), Whitelist consumers picking up new topics, OffsetCommit/OffsetFetch v0 in ZooKeeper
(kafka-python with api_version (0, 8, 1)) and the seeds' migration of offsets to Kafka."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from kazoo.exceptions import NoNodeError

from odradek.client import Admin, NewTopic, Producer, Whitelist, ZookeeperConsumer
from odradek.client.zk_consumer import ConsumerTimeoutError as _Timeout

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.slow

SESSION_MS = 5000
WAIT = 120.0  # generous bound for every wait: two shared cores
OVERRIDES = {"offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 4}

WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    from odradek.client import Whitelist, ZookeeperConsumer
    from odradek.client.zk_consumer import ConsumerTimeoutError

    connect, group, cid, topic, out, stop, extra = sys.argv[1:8]
    cfg = {"zookeeper.connect": connect, "group.id": group, "consumer.id": cid,
           "auto.offset.reset": "smallest", "zookeeper.session.timeout.ms": SESSION_MS,
           "rebalance.max.retries": 30, "rebalance.backoff.ms": 500, "consumer.timeout.ms": 200,
           "auto.commit.interval.ms": 500}
    cfg.update(json.loads(extra))
    manual = not cfg.get("auto.commit.enable", True)
    c = ZookeeperConsumer(cfg)
    [stream] = c.create_message_streams({topic: 1})[topic]
    with open(out, "a", buffering=1) as f:
        f.write("STARTED\\n")
        while not os.path.exists(stop):
            before = time.monotonic()
            try:
                m = next(stream)
            except ConsumerTimeoutError:
                continue
            except StopIteration:
                break
            f.write(f"{m.topic} {m.partition} {m.offset} {before} {time.monotonic()}\\n")
            if manual:
                c.commit_offsets()
    c.shutdown()
    """
).replace("SESSION_MS", str(SESSION_MS))


class Worker:
    """A ZookeeperConsumer in its own process (so SIGKILL is real), logging what it consumed."""

    def __init__(self, tmp: Path, cluster: Cluster, group: str, cid: str, topic: str, **cfg: Any) -> None:
        self.cid = cid
        self.out = tmp / f"{cid}.out"
        self.stop_file = tmp / f"{cid}.stop"
        script = tmp / "zk_worker.py"
        if not script.exists():
            script.write_text(WORKER)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), cluster.zookeeper_connect, group, cid, topic, str(self.out), str(self.stop_file),
             json.dumps({k.replace("_", "."): v for k, v in cfg.items()})],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / f"{cid}.err", "ab"),  # noqa: SIM115
        )

    def records(self) -> list[tuple[str, int, int]]:
        return [(t, p, o) for t, p, o, _b, _a in self.timed_records()]

    def timed_records(self) -> list[tuple[str, int, int, float, float]]:
        """(topic, partition, offset, monotonic time before and after the stream handed it out)."""
        if not self.out.exists():
            return []
        out = []
        for line in self.out.read_text().splitlines():
            parts = line.split()
            if len(parts) == 5:
                out.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3]), float(parts[4])))
        return out

    def stop(self) -> int | None:
        self.stop_file.touch()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()


def _topic(cluster: Cluster, name: str, partitions: int) -> None:
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)], timeout=60)
    wait_for(lambda: all(cluster.leader(name, p) for p in range(partitions)), WAIT, f"leaders of {name}")


def _produce(cluster: Cluster, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as p:
        futures = [p.send(topic, f"{tag}-{i}".encode(), partition=part) for part in range(partitions) for i in range(per_partition)]
        p.flush(60)
        for f in futures:
            f.result(60)


def _owners(cluster: Cluster, group: str, topic: str) -> dict[int, str]:
    out = {}
    for p in cluster.zk_children(f"/consumers/{group}/owners/{topic}"):
        raw = cluster.zk_get(f"/consumers/{group}/owners/{topic}/{p}")
        if raw is not None:
            out[int(p)] = raw.decode()
    return out


def _short(thread: str) -> str:
    """``<group>_<consumer.id>-<n>`` (Kafka's consumer ids) without the group."""
    return thread.partition("_")[2]


def _shares(owners: dict[int, str]) -> dict[str, int]:
    """Partitions per consumer (by consumer.id)."""
    return dict(Counter(_short(v).rsplit("-", 1)[0] for v in owners.values()))


class OwnerWatcher(threading.Thread):
    """Polls the owners nodes (owner and czxid of each), timed with the system-wide monotonic
    clock that the worker processes also stamp their records with; and checks that every owner's
    consumer is (or was until its session ended) registered in the group."""

    def __init__(self, cluster: Cluster, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.group, self.topic = cluster, group, topic
        self.halt = threading.Event()
        self.problems: list[str] = []
        self.snapshots = 0
        self.ever_registered: set[str] = set()
        #: (monotonic time before the read, after it, {partition: (owner thread, czxid)})
        self.timeline: list[tuple[float, float, dict[int, tuple[str, int]]]] = []

    def _read(self) -> dict[int, tuple[str, int]]:
        zk = self.cluster.kazoo()
        out = {}
        base = f"/consumers/{self.group}/owners/{self.topic}"
        for p in self.cluster.zk_children(base):
            try:
                raw, stat = zk.get(f"{base}/{p}")
            except NoNodeError:
                continue
            out[int(p)] = (raw.decode(), stat.czxid)
        return out

    def run(self) -> None:
        while not self.halt.wait(0.1):
            before = time.monotonic()
            try:
                self.ever_registered.update(self.cluster.zk_children(f"/consumers/{self.group}/ids"))
                snapshot = self._read()
            except Exception:  # ZooKeeper busy: the next poll
                continue
            self.timeline.append((before, time.monotonic(), snapshot))
            owners = {p: o for p, (o, _z) in snapshot.items()}
            self.snapshots += 1
            for p, thread in owners.items():
                cid = thread.rsplit("-", 1)[0]
                if cid not in self.ever_registered:
                    self.problems.append(f"partition {p} owned by {thread}, never registered")


def _ends(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    from odradek.client import SimpleConsumer

    with SimpleConsumer({"bootstrap.servers": cluster.bootstrap}) as s:
        return {p: s.latest_offset(topic, p) for p in range(partitions)}


def test_three_zookeeper_consumers_share_rebalance_on_kill_and_join(
    cluster_factory: Callable[..., Cluster], tmp_path: Path, workers: list[Worker]
) -> None:
    cluster = cluster_factory(2, OVERRIDES)
    cluster.wait_for_controller()
    topic, group, n = "zk-events", "zk-group", 6
    _topic(cluster, topic, n)
    # half of the first records now (consumed while the group forms), half once c3 owns 4 and 5:
    # c1, started first, may consume all of the first half before c3 is even registered
    _produce(cluster, topic, n, 10, "a")
    watcher = OwnerWatcher(cluster, group, topic)
    watcher.start()
    try:
        # manual commits after every record: c1..c3 (c3 is killed); c4 joins with auto commit
        for cid in ("c1", "c2", "c3"):
            workers.append(Worker(tmp_path, cluster, group, cid, topic, auto_commit_enable=False))
        def shared() -> dict[int, str] | None:
            owners = _owners(cluster, group, topic)
            return owners if _shares(owners) == {"c1": 2, "c2": 2, "c3": 2} else None

        # (judged on the snapshot that showed the share: a late rebalance may be releasing it again)
        owners = wait_for(shared, WAIT, "a 2/2/2 share")
        # the share is what the range assignment gives: contiguous partitions in consumer order
        assert {p: _short(o) for p, o in owners.items()} == {0: "c1-0", 1: "c1-0", 2: "c2-0", 3: "c2-0", 4: "c3-0", 5: "c3-0"}
        _produce(cluster, topic, n, 10, "a2")
        wait_for(lambda: any(r[1] in (4, 5) for r in workers[2].records()), WAIT, "c3 consuming")
        _produce(cluster, topic, n, 20, "b")
        workers[2].kill()  # SIGKILL: its nodes go when its session times out
        wait_for(lambda: f"{group}_c3" not in cluster.zk_children(f"/consumers/{group}/ids"), WAIT, "c3's registration to expire")
        wait_for(lambda: _shares(_owners(cluster, group, topic)) == {"c1": 3, "c2": 3}, WAIT, "a 3/3 share after the kill")
        _produce(cluster, topic, n, 20, "c")
        workers.append(Worker(tmp_path, cluster, group, "c4", topic))
        wait_for(lambda: _shares(_owners(cluster, group, topic)) == {"c1": 2, "c2": 2, "c4": 2}, WAIT, "a 2/2/2 share after the join")
        _produce(cluster, topic, n, 20, "d")
        ends = _ends(cluster, topic, n)
        assert ends == dict.fromkeys(range(n), 80)

        def consumed() -> set[tuple[int, int]]:
            return {(p, o) for w in workers for (_t, p, o) in w.records()}

        wanted = {(p, o) for p in range(n) for o in range(ends[p])}
        wait_for(lambda: wanted <= consumed(), WAIT, "every record consumed")
        for w in workers:
            if w.cid != "c3":
                assert w.stop() == 0, (tmp_path / f"{w.cid}.err").read_text()[-3000:]
    finally:
        watcher.halt.set()
        watcher.join(10)
    assert watcher.snapshots > 10
    assert not watcher.problems, watcher.problems[:5]
    # no record handed out by a consumer while another owned its partition: when two polls see
    # the same owner node (same czxid), it existed all the time between them, so a record handed
    # out entirely within that time must be that owner's
    timeline = watcher.timeline
    checked = 0
    for w in workers:
        for _t, p, o, before, after in w.timed_records():
            for (_a0, b0, s0), (a1, _b1, s1) in itertools.pairwise(timeline):
                if b0 < before and after < a1:
                    if p in s0 and s0.get(p) == s1.get(p):
                        owner = s0[p][0]
                        assert _short(owner) == f"{w.cid}-0", f"{w.cid} consumed {p}@{o} while {owner} owned it"
                        checked += 1
                    break
    assert checked > 0
    # every record at least once.  Repeats: what c3 consumed after its last commit, and (manual
    # commits, as in Kafka: no commit at a rebalance) a record taken just before a rebalance
    # whose commit came after the partition was released — at most one per partition and move
    counts = Counter((p, o) for w in workers for (_t, p, o) in w.records())
    assert set(counts) == wanted
    repeated = Counter(p for (p, _o), k in counts.items() if k > 1 and p not in (4, 5))
    assert all(k <= 4 for k in repeated.values()), repeated
    # the committed offsets are where consumption ended: the log ends
    for p in range(n):
        assert cluster.zk_get(f"/consumers/{group}/offsets/{topic}/{p}") == str(ends[p]).encode()
    # everyone left: no registration, no owner
    assert cluster.zk_children(f"/consumers/{group}/ids") == []
    assert _owners(cluster, group, topic) == {}


class Reader(threading.Thread):
    """Iterates one stream of an in-process consumer, keeping what it got."""

    def __init__(self, consumer: ZookeeperConsumer, stream: Any) -> None:
        super().__init__(daemon=True)
        self.consumer, self.stream = consumer, stream
        self.got: list[tuple[str, int, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                m = next(self.stream)
            except _Timeout:
                continue
            except StopIteration:
                return
            self.got.append((m.topic, m.partition, m.offset))


def _zk_config(cluster: Cluster, group: str, cid: str, **extra: Any) -> dict[str, Any]:
    cfg = {
        "zookeeper.connect": cluster.zookeeper_connect,
        "group.id": group,
        "consumer.id": cid,
        "auto.offset.reset": "smallest",
        "zookeeper.session.timeout.ms": SESSION_MS,
        "rebalance.max.retries": 30,
        "rebalance.backoff.ms": 500,
        "consumer.timeout.ms": 200,
        "auto.commit.interval.ms": 500,
    }
    cfg.update({k.replace("_", "."): v for k, v in extra.items()})
    return cfg


def test_whitelist_consumers_pick_up_a_topic_created_later(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(1, OVERRIDES)
    cluster.wait_for_controller()
    group = "wl-group"
    _topic(cluster, "wl-a", 2)
    _topic(cluster, "other", 1)
    _produce(cluster, "wl-a", 2, 10, "a")
    _produce(cluster, "other", 1, 10, "o")
    consumers: list[ZookeeperConsumer] = []
    readers: list[Reader] = []
    try:
        for cid in ("w1", "w2"):
            c = ZookeeperConsumer(_zk_config(cluster, group, cid))
            consumers.append(c)
            [stream] = c.create_message_streams_by_filter(Whitelist("wl-.*"), 1)
            readers.append(Reader(c, stream))
            readers[-1].start()
        reg = json.loads(cluster.zk_get(f"/consumers/{group}/ids/{group}_w1") or b"{}")
        assert reg["version"] == 1 and reg["pattern"] == "white_list" and reg["subscription"] == {"wl-.*": 1}
        assert int(reg["timestamp"]) > 0

        def got() -> set[tuple[str, int, int]]:
            return {r for rd in readers for r in rd.got}

        wait_for(lambda: {("wl-a", p, o) for p in range(2) for o in range(10)} <= got(), WAIT, "wl-a consumed")
        _topic(cluster, "wl-b", 4)
        _produce(cluster, "wl-b", 4, 10, "b")
        wait_for(lambda: {("wl-b", p, o) for p in range(4) for o in range(10)} <= got(), WAIT, "wl-b consumed")
        wait_for(lambda: _shares(_owners(cluster, group, "wl-b")) == {"w1": 2, "w2": 2}, WAIT, "wl-b shared 2/2")
        assert not any(t == "other" for t, _p, _o in got())
    finally:
        for c in consumers:
            c.shutdown()
        for r in readers:
            r.halt.set()
            r.join(30)
    counts = Counter(r for rd in readers for r in rd.got)
    assert max(counts.values()) == 1  # auto commit at each rebalance: nothing handed out twice
    for t, parts in (("wl-a", 2), ("wl-b", 4)):
        for p in range(parts):
            assert cluster.zk_get(f"/consumers/{group}/offsets/{t}/{p}") == b"10"


@pytest.mark.interop
def test_kafka_python_0_8_1_offsets_live_in_zookeeper(cluster_factory: Callable[..., Cluster]) -> None:
    """kafka-python with api_version (0, 8, 1) sends OffsetCommit/OffsetFetch v0 (to any broker):
    in a ZooKeeper cluster they write and read /consumers/<group>/offsets, as Kafka 0.8.2-0.10."""
    cluster = cluster_factory(2, OVERRIDES)
    cluster.wait_for_controller()
    _topic(cluster, "kp", 2)
    _produce(cluster, "kp", 2, 5, "x")
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id="kp-group", api_version=(0, 8, 1), enable_auto_commit=False
    )
    try:
        tps = [TopicPartition("kp", 0), TopicPartition("kp", 1)]
        consumer.assign(tps)
        consumer.commit({tps[0]: OffsetAndMetadata(3, "", -1), tps[1]: OffsetAndMetadata(4, "", -1)})
        assert cluster.zk_get("/consumers/kp-group/offsets/kp/0") == b"3"
        assert cluster.zk_get("/consumers/kp-group/offsets/kp/1") == b"4"
        # a value written by a 0.8 ZooKeeper consumer is what OffsetFetch v0 returns
        cluster.kazoo().set("/consumers/kp-group/offsets/kp/1", b"2")
        assert consumer.committed(tps[0]) == 3
        assert consumer.committed(tps[1]) == 2
        # and the v0 offsets are not in __consumer_offsets (v1+ storage)
        with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
            assert admin.list_group_offsets("kp-group", [("kp", 0), ("kp", 1)]) == {}
    finally:
        consumer.close()
    # the ZooKeeper consumer reads those offsets: it starts at 3 and 2
    c = ZookeeperConsumer(_zk_config(cluster, "kp-group", "z1"))
    try:
        [stream] = c.create_message_streams({"kp": 1})["kp"]
        first: dict[int, int] = {}
        deadline = time.monotonic() + WAIT
        while len(first) < 2 and time.monotonic() < deadline:
            try:
                m = next(stream)
            except _Timeout:
                continue
            first.setdefault(m.partition, m.offset)
        assert first == {0: 3, 1: 2}
    finally:
        c.shutdown()


def test_migrating_a_live_group_from_zookeeper_to_kafka_offsets(cluster_factory: Callable[..., Cluster]) -> None:
    """The seeds' steps: offsets.storage=kafka with dual commit, roll the consumers; dual commit
    off, roll them again; then the roll-back (the same with offsets.storage=zookeeper).  Two consumers, rolled one at a time while records keep coming: every
    record is consumed exactly once (auto commit at every rebalance and at shutdown).  The
    consumer ids are chosen so that every roll moves partitions between consumers of different
    storage settings (range assignment in consumer id order)."""
    cluster = cluster_factory(1, OVERRIDES)
    cluster.wait_for_controller()
    topic, group, n = "mig", "mig-group", 4
    _topic(cluster, topic, n)
    running: dict[str, tuple[ZookeeperConsumer, Reader]] = {}
    finished: list[Reader] = []
    produced = 0

    def start(cid: str, **storage: Any) -> None:
        c = ZookeeperConsumer(_zk_config(cluster, group, cid, **storage))
        [stream] = c.create_message_streams({topic: 1})[topic]
        r = Reader(c, stream)
        r.start()
        running[cid] = (c, r)

    def stop(cid: str) -> None:
        c, r = running.pop(cid)
        c.shutdown()
        r.halt.set()
        r.join(30)
        finished.append(r)

    def produce_and_drain(tag: str) -> None:
        nonlocal produced
        _produce(cluster, topic, n, 10, tag)
        produced += 10
        wait_for(
            lambda: {(p, o) for p in range(n) for o in range(produced)}
            <= {(p, o) for r in [*finished, *(x[1] for x in running.values())] for (_t, p, o) in r.got},
            WAIT,
            f"records {tag} consumed",
        )

    def kafka_offsets() -> dict[tuple[str, int], int]:
        with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
            return {tp: om.offset for tp, om in admin.list_group_offsets(group, [(topic, p) for p in range(n)]).items()}

    def zk_offsets() -> dict[int, int]:
        return {p: int((cluster.zk_get(f"/consumers/{group}/offsets/{topic}/{p}") or b"-1").decode()) for p in range(n)}

    zk_only = {"offsets_storage": "zookeeper"}
    dual = {"offsets_storage": "kafka", "dual_commit_enabled": True}
    kafka_only = {"offsets_storage": "kafka", "dual_commit_enabled": False}
    try:
        start("a1", **zk_only)
        start("a2", **zk_only)
        produce_and_drain("zk")
        assert kafka_offsets() == {}
        # step 1-2: dual commit with Kafka storage, a rolling bounce
        for cid, new in (("a1", "b1"), ("a2", "b2")):
            stop(cid)
            start(new, **dual)
            produce_and_drain(f"dual-{new}")
        for cid in ("b1", "b2"):
            running[cid][0].commit_offsets()
        assert kafka_offsets() == {(topic, p): produced for p in range(n)}
        assert zk_offsets() == dict.fromkeys(range(n), produced)
        dual_end = produced
        # step 3-4: dual commit off, a rolling bounce
        zk_when_dual_ended: dict[int, int] = {}
        for cid, new in (("b1", "c1"), ("b2", "c2")):
            stop(cid)
            if cid == "b2":  # the last consumer committing to ZooKeeper is gone
                zk_when_dual_ended = zk_offsets()
            start(new, **kafka_only)
            produce_and_drain(f"kafka-{new}")
        assert zk_offsets() == zk_when_dual_ended
        # the roll-back, the same steps with offsets.storage=zookeeper
        for cid, new in (("c1", "d1"), ("c2", "d2")):
            stop(cid)
            start(new, offsets_storage="zookeeper", dual_commit_enabled=True)
            produce_and_drain(f"back-dual-{new}")
        for cid, new in (("d1", "e1"), ("d2", "e2")):
            stop(cid)
            start(new, offsets_storage="zookeeper", dual_commit_enabled=False)
            produce_and_drain(f"back-zk-{new}")
        for cid in list(running):
            stop(cid)
    finally:
        for cid in list(running):
            stop(cid)
    counts = Counter((p, o) for r in finished for (_t, p, o) in r.got)
    assert set(counts) == {(p, o) for p in range(n) for o in range(produced)}
    assert max(counts.values()) == 1, sorted(po for po, k in counts.items() if k > 1)[:10]
    # ZooKeeper has the offsets again; Kafka's stopped where the roll-back's dual commit ended
    assert zk_offsets() == dict.fromkeys(range(n), produced)
    assert all(o < produced for o in kafka_offsets().values())
    assert all(dual_end <= o for o in zk_when_dual_ended.values()), zk_when_dual_ended


def _groups_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "groups", "--bootstrap-server", cluster.bootstrap,
         "--zookeeper", cluster.zookeeper_connect, *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


def test_groups_cli_lists_describes_and_resets_zookeeper_groups(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(1, OVERRIDES)
    cluster.wait_for_controller()
    _topic(cluster, "cli-t", 2)
    _produce(cluster, "cli-t", 2, 5, "x")
    c = ZookeeperConsumer(_zk_config(cluster, "zk-cli", "k1", auto_commit_enable=False))
    try:
        [stream] = c.create_message_streams({"cli-t": 1})["cli-t"]
        got = 0
        deadline = time.monotonic() + WAIT
        while got < 10 and time.monotonic() < deadline:
            try:
                next(stream)
                got += 1
            except _Timeout:
                continue
        assert got == 10
        c.commit_offsets()
        listed = _groups_cli(cluster, "list")
        assert listed.returncode == 0, listed.stderr
        row = next(line.split() for line in listed.stdout.splitlines() if line.startswith("zk-cli"))
        assert row == ["zk-cli", "Stable", "zookeeper"]
        described = _groups_cli(cluster, "describe", "zk-cli")
        assert described.returncode == 0, described.stderr
        assert "ZooKeeper-based" in described.stdout
        rows = [line.split() for line in described.stdout.splitlines() if line.startswith("zk-cli ")]
        assert rows == [["zk-cli", "cli-t", "0", "5", "5", "0", "zk-cli_k1-0"], ["zk-cli", "cli-t", "1", "5", "5", "0", "zk-cli_k1-0"]]
        refused = _groups_cli(cluster, "reset-offsets", "zk-cli", "--topic", "cli-t", "--to-earliest", "--execute")
        assert refused.returncode == 1 and "inactive" in refused.stdout
    finally:
        c.shutdown()
    reset = _groups_cli(cluster, "reset-offsets", "zk-cli", "--topic", "cli-t:1", "--to-offset", "2", "--execute")
    assert reset.returncode == 0, reset.stderr
    assert cluster.zk_get("/consumers/zk-cli/offsets/cli-t/1") == b"2"
    assert cluster.zk_get("/consumers/zk-cli/offsets/cli-t/0") == b"5"
    listed = _groups_cli(cluster, "list")
    assert ["zk-cli", "Empty", "zookeeper"] in [line.split() for line in listed.stdout.splitlines()]


@pytest.mark.interop
def test_single_node_broker_keeps_v0_offsets_in_the_offsets_topic(tmp_path: Path) -> None:
    """Without ZooKeeper (the embedded store) OffsetCommit/OffsetFetch v0 go to the group
    coordinator like v1+."""
    from odradek.testing import BrokerProcess

    broker = BrokerProcess(tmp_path / "single", overrides={"offsets.topic.num.partitions": 2})
    broker.start()
    try:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("v0-t", 1, 1)], timeout=60)
            # a 0.8.1 client sends no FindCoordinator, which creates the offsets topic: do it first
            assert admin.list_group_offsets("v0-group", timeout=60) == {}
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id="v0-group", api_version=(0, 8, 1), enable_auto_commit=False
        )
        try:
            tp = TopicPartition("v0-t", 0)
            consumer.assign([tp])
            consumer.commit({tp: OffsetAndMetadata(0, "", -1)})
            assert consumer.committed(tp) == 0
        finally:
            consumer.close()
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            assert {tp: om.offset for tp, om in admin.list_group_offsets("v0-group").items()} == {("v0-t", 0): 0}
    finally:
        assert broker.stop() == 0


def test_a_consumer_whose_session_expires_registers_again_and_goes_on(cluster_factory: Callable[..., Cluster]) -> None:
    """ZooKeeper's own way to expire a session: a second client on the same session id closes it."""
    from kazoo.client import KazooClient

    cluster = cluster_factory(1, OVERRIDES)
    cluster.wait_for_controller()
    topic, group = "exp-t", "exp-group"
    _topic(cluster, topic, 2)
    _produce(cluster, topic, 2, 5, "a")
    c = ZookeeperConsumer(_zk_config(cluster, group, "x1"))
    [stream] = c.create_message_streams({topic: 1})[topic]
    reader = Reader(c, stream)
    reader.start()
    try:
        wait_for(lambda: len(reader.got) >= 10, WAIT, "the first records")
        ids = f"/consumers/{group}/ids/{group}_x1"
        first_owner = cluster.kazoo().exists(ids).ephemeralOwner
        session_id, password = c.zk.client_id
        twin = KazooClient(hosts=cluster.zookeeper_connect, client_id=(session_id, password))
        twin.start(timeout=30)
        twin.stop()
        twin.close()

        def registered_again() -> bool:
            stat = cluster.kazoo().exists(ids)
            return stat is not None and stat.ephemeralOwner not in (0, first_owner)

        wait_for(registered_again, WAIT, "a new registration")
        wait_for(lambda: _shares(_owners(cluster, group, topic)) == {"x1": 2}, WAIT, "the partitions owned again")
        _produce(cluster, topic, 2, 5, "b")
        wait_for(lambda: {(topic, p, o) for p in range(2) for o in range(10)} <= set(reader.got), WAIT, "records after the expiry")
    finally:
        c.shutdown()
        reader.halt.set()
        reader.join(30)
    assert cluster.zk_get(f"/consumers/{group}/offsets/{topic}/0") == b"10"
