"""A broker always starts and never deletes data: damaged or missing state files, invalid ports.

Issue 16, faults 3 and 8: a missing ``cluster-metadata.json`` deleted every partition directory
(user topics and ``__consumer_offsets``) without a log line; ``--port 99999`` printed a ready line;
garbage in ``meta.properties`` / ``cluster-metadata.json`` stopped the start with a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess, wait_for

#: a group's first join is not held back 3 s for members yet to come (group.initial.rebalance.delay.ms):
#: nothing here is about rebalancing
QUICK_JOIN = {"group.initial.rebalance.delay.ms": 0}
TOPIC = "keep"
GROUP = "keepers"


def _serve(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``odradek serve`` expected to refuse to start (bounded by a timeout)."""
    cmd = [sys.executable, "-m", "odradek", "serve", "--data-dir", str(data), *args]
    if "--port" not in args and not any(a.startswith("listeners=") for a in args):
        cmd += ["--host", "127.0.0.1", "--port", "0"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0, result.stdout + result.stderr
    assert "ready on" not in result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    for w in words:
        assert w in result.stderr, (w, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("odradek serve:")]
    assert len(lines) == 1, result.stderr


def _populate(data: Path, records: int = 30) -> tuple[str, int]:
    """A topic with records in 3 partitions and a committed group offset; returns the topic's
    partition.metadata text and the committed offset of partition 0."""
    with BrokerProcess(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 3, 1)]).values():
            f.result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(records):
            producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % 3)
        assert producer.flush(15) == 0
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False}
        )
        try:
            offsets = [TopicPartition(TOPIC, 0, 7)]
            committed = wait_for(lambda: consumer.commit(offsets=offsets, asynchronous=False), 30, "offset commit")
            assert committed[0].error is None
        finally:
            consumer.close()
    assert (data / "__consumer_offsets-0").is_dir()
    return (data / f"{TOPIC}-0" / "partition.metadata").read_text(), 7


def _read_all(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])
        for _ in range(300):
            if len(got) >= expected:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _committed(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        result = wait_for(lambda: consumer.committed([TopicPartition(TOPIC, 0)], timeout=5), 30, "committed offsets")
        return int(result[0].offset)
    finally:
        consumer.close()


def test_a_missing_metadata_file_is_rebuilt_from_the_log_dirs_and_nothing_is_deleted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    partition_metadata, offset = _populate(data)
    (data / "cluster-metadata.json").unlink()
    with BrokerProcess(data, overrides=QUICK_JOIN) as broker:
        # every partition directory is still there (the old code deleted them all at start)
        assert all((data / f"{TOPIC}-{p}").is_dir() for p in range(3))
        assert len(list(data.glob("__consumer_offsets-*"))) == 50
        for part in ("rebuilt", "cluster-metadata.json is missing", "Topic configs cannot be recovered"):
            broker.wait_for_log(part)
        assert sorted(_read_all(broker.bootstrap, 30)) == sorted(f"v{i}".encode() for i in range(30))
        assert _committed(broker.bootstrap) == offset
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert len(md.topics[TOPIC].partitions) == 3
    # the topic keeps its id; the rebuilt store is written and marks __consumer_offsets internal
    assert (data / f"{TOPIC}-0" / "partition.metadata").read_text() == partition_metadata
    stored = json.loads((data / "cluster-metadata.json").read_text())
    topics = {t["name"]: t for t in stored["topics"]}
    assert topics["__consumer_offsets"]["internal"] is True
    assert topics["__consumer_offsets"]["configs"]["cleanup.policy"] == "compact"
    assert topics[TOPIC]["configs"] == {"retention.ms": "-1", "retention.bytes": "-1"}  # nothing expires
    assert len(topics["__consumer_offsets"]["partitions"]) == 50


@pytest.mark.parametrize("garbage", [b"{\"cluster_id\": ", b"\x00\xff\xfe garbage", b"", b"[1, 2, 3]"])
def test_garbage_in_the_metadata_file_refuses_to_start_and_deletes_nothing(tmp_path: Path, garbage: bytes) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
            f.result(15)
    store = data / "cluster-metadata.json"
    store.write_bytes(garbage)
    result = _serve(data)
    _assert_refused(result, str(store), "Move the file away", "rebuild the topics from the log dirs")
    assert store.read_bytes() == garbage
    assert (data / f"{TOPIC}-0").is_dir() and (data / f"{TOPIC}-1").is_dir()
    # the fix the message names works: moved away, the broker rebuilds the topic
    store.rename(tmp_path / "bad.json")
    with BrokerProcess(data) as broker:
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert len(md.topics[TOPIC].partitions) == 2


def test_conflicting_topic_ids_on_disk_refuse_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
            f.result(15)
    from odradek.storage.manager import kafka_uuid

    (data / f"{TOPIC}-1" / "partition.metadata").write_text(f"version: 0\ntopic_id: {kafka_uuid(uuid.uuid4())}\n")
    (data / "cluster-metadata.json").unlink()
    result = _serve(data)
    _assert_refused(result, f"topic {TOPIC}", "different topic ids", "nothing was deleted")
    assert (data / f"{TOPIC}-0").is_dir() and (data / f"{TOPIC}-1").is_dir()


def test_only_recorded_deletions_delete_partition_directories_and_each_is_logged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data, log_level="INFO") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("gone", 2, 1), NewTopic("stays", 1, 1)]).values():
            f.result(15)
        for f in admin.delete_topics(["gone"]).values():
            f.result(15)
        wait_for(lambda: not (data / "gone-0").exists(), 15, "gone-0 deleted")
        wait_for(lambda: any("deleting" in ln and "gone-1" in ln for ln in broker.stderr_lines), 15, "a log line")
    assert json.loads((data / "cluster-metadata.json").read_text())["deleted_topics"] == []
    # a deletion recorded while the broker was down (its directories still there) is carried out
    # at start, with a log line; an unknown directory of another topic is not deleted but adopted
    store = data / "cluster-metadata.json"
    image = json.loads(store.read_text())
    stays = next(t for t in image["topics"] if t["name"] == "stays")
    image["topics"] = [t for t in image["topics"] if t["name"] != "stays"]
    image["deleted_topics"] = [{"name": "stays", "topic_id": stays["topic_id"]}]
    store.write_text(json.dumps(image))
    (data / "stranger-0").mkdir()
    with BrokerProcess(data, log_level="INFO") as broker:
        assert not (data / "stays-0").exists()
        assert (data / "stranger-0").is_dir()
        broker.wait_for_log("deleting", "stays-0")
        broker.wait_for_log("stranger")
        broker.wait_for_log("rebuilt")
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert "stranger" in md.topics and "stays" not in md.topics


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--port", "99999"), ("--port 99999", "0-65535")),
        (("--port", "-1"), ("--port -1", "0-65535")),
        (("--override", "listeners=PLAINTEXT://127.0.0.1:70000"), ("listeners", "70000", "0-65535")),
        (("--override", "listeners=PLAINTEXT://127.0.0.1:http"), ("listeners", "'http'")),
    ],
)
def test_invalid_listener_ports_are_refused_naming_the_setting(
    tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    result = _serve(tmp_path / "data", *args)
    _assert_refused(result, *words)
    assert result.returncode == 2


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff", "not text"),
        (b"version=0\nbroker.id=zero\ncluster.id=abc\n", "broker.id 'zero' is not a number"),
        (b"lorem ipsum dolor\n", "no cluster.id"),
    ],
)
def test_garbage_in_meta_properties_stops_the_start_with_a_message(tmp_path: Path, content: bytes, problem: str) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data):
        pass
    meta = data / "meta.properties"
    meta.write_bytes(content)
    result = _serve(data)
    _assert_refused(result, str(meta), problem, "remove it and start again")
    assert meta.read_bytes() == content
    # the fix the message names works and keeps the cluster id
    cluster_id = json.loads((data / "cluster-metadata.json").read_text())["cluster_id"]
    meta.unlink()
    with BrokerProcess(data) as broker:
        assert cluster_id in broker.ready_line


def _backend(tmp_path: Path, on_disk: dict[tuple[str, int], uuid.UUID | None]) -> object:
    import asyncio

    from odradek.cluster.metadata import BrokerInfo
    from odradek.coordination.embedded import EmbeddedBackend

    backend = EmbeddedBackend(
        tmp_path, "c1", on_disk=lambda: on_disk, internal_topics={"__consumer_offsets": {"cleanup.policy": "compact"}}
    )
    asyncio.run(backend.start(BrokerInfo(0, ())))
    return backend


def test_the_embedded_store_rebuilds_from_partition_directories_and_keeps_recorded_deletions(tmp_path: Path) -> None:
    import asyncio

    from odradek.coordination.embedded import EmbeddedBackend, is_deleted

    tid = uuid.uuid4()
    # t-0 and t-2 on disk (t-1 lost): the topic gets 3 partitions; ids from partition.metadata
    backend = _backend(tmp_path, {("t", 0): tid, ("t", 2): None, ("__consumer_offsets", 0): None})
    assert isinstance(backend, EmbeddedBackend)
    image = backend.image
    assert image.topics["t"].topic_id == tid and image.topics["t"].partition_count == 3
    assert image.topics["__consumer_offsets"].internal
    assert image.topics["__consumer_offsets"].configs == {"cleanup.policy": "compact"}
    # a deletion is recorded, survives a restart while its directories are on disk, and only
    # directories of that topic id count as deleted
    asyncio.run(backend.delete_topic("t"))
    assert backend.image.deleted_topics == {tid: "t"}
    again = _backend(tmp_path, {("t", 0): tid, ("t", 2): None})
    assert isinstance(again, EmbeddedBackend)
    assert "t" not in again.image.topics and again.image.deleted_topics == {tid: "t"}
    assert is_deleted(again.image, "t", tid) and is_deleted(again.image, "t", None)
    assert not is_deleted(again.image, "t", uuid.uuid4()) and not is_deleted(again.image, "u", tid)
    again.deletions_done([tid])
    assert again.image.deleted_topics == {}
    # once the directories are gone, a start forgets the record by itself
    asyncio.run(again.delete_topic("__consumer_offsets"))
    assert _backend(tmp_path, {}).image.deleted_topics == {}  # type: ignore[attr-defined]


def _leader_epochs(b: BrokerProcess, topic: str) -> list[int]:
    from odradek.protocol.messages.metadata import MetadataRequest
    from odradek.testing import WireClient

    w = WireClient(b.host, b.port, "epochs")
    try:
        resp = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 9)
    finally:
        w.close()
    (t,) = resp.topics
    return [p.leader_epoch for p in sorted(t.partitions, key=lambda p: p.partition_index)]


def test_a_single_node_bumps_leader_epochs_after_a_crash_not_after_a_clean_shutdown(tmp_path: Path) -> None:
    """After SIGKILL, recovery may cut records clients saw: a new leader epoch has them check their
    positions (KIP-320).  After SIGTERM the epochs stay, and no partition rewrites its leader-epoch
    checkpoint at start-up (with 10,000 partitions those fsyncs took most of a start)."""
    data = tmp_path / "data"
    with BrokerProcess(data) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept while its future is pending
        admin.create_topics([NewTopic("epochs", 3, 1)])["epochs"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(3):  # an empty log drops the epoch that starts at its end when it loads (as Kafka)
            p.produce("epochs", b"x", partition=i)
        assert p.flush(30) == 0
        first = _leader_epochs(b, "epochs")
    checkpoint = data / "epochs-0" / "leader-epoch-checkpoint"
    written = checkpoint.stat().st_mtime_ns
    b = BrokerProcess(data)
    b.start()
    try:
        assert _leader_epochs(b, "epochs") == first
        assert checkpoint.stat().st_mtime_ns == written
    finally:
        b.kill()  # a crash
    b = BrokerProcess(data)
    b.start()
    try:
        assert _leader_epochs(b, "epochs") == [e + 1 for e in first]
    finally:
        b.stop()
