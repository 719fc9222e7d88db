"""A broker under a low descriptor limit refuses what it cannot hold and always starts again.

Issue 16, fault 1: ``create_topics([NewTopic("huge", 5000, 1)])`` under ``ulimit -n 4096`` wrote
5,000 partitions into the metadata, ran out of descriptors creating their logs (Errno 24) and
every later start failed with ``Too many open files``.
"""

from __future__ import annotations

import socket
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from odradek.testing import BrokerProcess, wait_for

#: a group's first join is not held back 3 s for members yet to come (group.initial.rebalance.delay.ms):
#: nothing here is about rebalancing
QUICK_JOIN = {"group.initial.rebalance.delay.ms": 0}
FD_LIMIT = 512  # budget: (512 - 128 reserved) / 5 per partition = 76 partitions


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 20000})
    failed: list[object] = []
    for v in values:
        producer.produce(topic, value=v, on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(30) == 0
    assert failed == []


def _consume(bootstrap: str, topic: str, group: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(300):
            if len(got) >= expected:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _policy_violation(future: object) -> str:
    try:
        future.result(30)  # type: ignore[attr-defined]
    except KafkaException as exc:
        err = exc.args[0]
        assert err.code() == KafkaError.POLICY_VIOLATION, err
        return str(err.str())
    raise AssertionError("the request was accepted")


def test_a_huge_create_topics_is_refused_and_the_broker_restarts_under_the_same_fd_limit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = [f"r{i}".encode() for i in range(20)]
    with BrokerProcess(data, fd_limit=FD_LIMIT, overrides=QUICK_JOIN) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("small", 2, 1)]).values():
            f.result(15)
        _produce(broker.bootstrap, "small", first)
        assert sorted(_consume(broker.bootstrap, "small", "g", len(first))) == sorted(first)  # + __consumer_offsets

        message = _policy_violation(admin.create_topics([NewTopic("huge", 5000, 1)])["huge"])
        assert "file descriptor limit 512" in message and "max.broker.partitions" in message
        message = _policy_violation(admin.create_partitions([NewPartitions("small", 5000)])["small"])
        assert "max.broker.partitions" in message
        assert not (data / "huge-0").exists()

        # still serving: produce and consume on the old topic, and a topic that fits is created
        _produce(broker.bootstrap, "small", [b"after"])
        assert b"after" in _consume(broker.bootstrap, "small", "g2", len(first) + 1)
        for f in admin.create_topics([NewTopic("fits", 3, 1)]).values():
            f.result(15)
        md = admin.list_topics(timeout=10)
        assert "huge" not in md.topics and len(md.topics["fits"].partitions) == 3
    assert broker.proc is not None and broker.proc.returncode == 0

    with BrokerProcess(data, fd_limit=FD_LIMIT, overrides=QUICK_JOIN) as broker:
        got = _consume(broker.bootstrap, "small", "g3", len(first) + 1)
        assert sorted(got) == sorted([*first, b"after"])
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
        try:
            committed = wait_for(lambda: c.committed([TopicPartition("small", 0), TopicPartition("small", 1)], timeout=5),
                                 30, "committed offsets")
            assert sum(tp.offset for tp in committed) == len(first)
        finally:
            c.close()


def test_request_and_topic_limits_refuse_before_anything_is_written(tmp_path: Path) -> None:
    overrides = {
        "max.partitions.per.request": 10,
        "max.partitions.per.topic": 8,
        "max.broker.partitions": 12,
        "offsets.topic.num.partitions": 1,  # kept free in the budget until __consumer_offsets exists
    }
    with BrokerProcess(tmp_path / "data", overrides=overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        fs = admin.create_topics([NewTopic("a", 6, 1), NewTopic("b", 6, 1)])
        fs["a"].result(15)
        assert "max.partitions.per.request=10" in _policy_violation(fs["b"])
        assert "max.partitions.per.topic=8" in _policy_violation(admin.create_topics([NewTopic("c", 9, 1)])["c"])
        assert "max.partitions.per.topic=8" in _policy_violation(admin.create_partitions([NewPartitions("a", 9)])["a"])
        admin.create_partitions([NewPartitions("a", 8)])["a"].result(15)
        assert "max.broker.partitions=12" in _policy_violation(admin.create_topics([NewTopic("d", 5, 1)])["d"])
        # auto-creation is held to the same budget: the metadata answer names the refusal
        p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 3000, "linger.ms": 0})
        errors: list[KafkaError] = []
        for i in range(5):
            p.produce(f"auto{i}", b"x", on_delivery=lambda err, _m: errors.append(err) if err else None)
        p.flush(15)
        md = admin.list_topics(timeout=10)
        created = [t for t in md.topics if t.startswith("auto")]
        assert len(created) == 3  # 8 + 1 kept for __consumer_offsets + 3 = 12 partitions
        assert len(errors) == 2
        assert not any((tmp_path / "data").glob("b-*")) and not any((tmp_path / "data").glob("c-*"))


def test_running_out_of_descriptors_on_accept_does_not_stop_the_listener(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", fd_limit=160, log_level="INFO") as broker:
        socks = []
        try:
            for _ in range(400):  # more connections than the broker has descriptors
                s = socket.create_connection((broker.host, broker.port), timeout=5)
                socks.append(s)
            wait_for(lambda: any("accept" in ln.lower() for ln in broker.stderr_lines), 20, "a log line about accept")
        finally:
            for s in socks:
                s.close()
        assert broker.running()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        md = wait_for(lambda: admin.list_topics(timeout=5), 30, "metadata after the descriptors came back")
        assert md.brokers
        accept_lines = [ln for ln in broker.stderr_lines if "accept" in ln.lower()]
        assert len(accept_lines) < 20, accept_lines[:5]  # logged once per episode, not per failed accept


def test_metadata_with_more_partitions_than_descriptors_still_starts(tmp_path: Path) -> None:
    """The state the old code left behind (5,000 partitions in the metadata, few logs): the broker
    starts, serves what it has, keeps the rest offline with an ERROR line, and refuses more."""
    import json
    import uuid

    data = tmp_path / "data"
    with BrokerProcess(data, fd_limit=FD_LIMIT, overrides=QUICK_JOIN) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("small", 1, 1)]).values():
            f.result(15)
        _produce(broker.bootstrap, "small", [b"kept"])
    store = data / "cluster-metadata.json"
    image = json.loads(store.read_text())
    image["topics"].append(
        {
            "name": "huge",
            "topic_id": str(uuid.uuid4()),
            "internal": False,
            "configs": {},
            "partitions": [
                {"partition": p, "replicas": [0], "isr": [0], "leader": 0, "leader_epoch": 0, "partition_epoch": 0}
                for p in range(5000)
            ],
        }
    )
    store.write_text(json.dumps(image))
    for run in range(2):  # and again: the state it leaves is startable too
        with BrokerProcess(data, fd_limit=FD_LIMIT, overrides=QUICK_JOIN) as broker:
            broker.wait_for_log("stay offline")
            assert _consume(broker.bootstrap, "small", f"g{run}", 1) == [b"kept"]
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            assert "max.broker.partitions" in _policy_violation(admin.create_topics([NewTopic("more", 1, 1)])["more"])
        assert broker.proc is not None and broker.proc.returncode == 0
    assert len(list(data.glob("huge-*"))) < 100


def test_a_lower_fd_limit_than_the_logs_need_is_refused_with_a_message(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("wide", 300, 1)]).values():
            f.result(30)
    low = BrokerProcess(data, fd_limit=256)
    try:
        low.start(timeout=60)
    except RuntimeError as exc:
        text = str(exc)
    else:
        low.stop()
        raise AssertionError("started with 300 partitions' logs (one descriptor each at least) under ulimit -n 256")
    assert "ulimit -n" in text and "Traceback" not in text, text
    assert len(list(data.glob("wide-*"))) == 300
    with BrokerProcess(data) as broker:  # a higher limit again: everything is there
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert len(md.topics["wide"].partitions) == 300
