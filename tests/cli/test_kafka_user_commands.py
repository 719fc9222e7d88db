"""Commands a Kafka user reaches for: ``delete-records``, ``groups delete-offsets``, ``consume
--group`` and kafka-console-consumer's ``--topic`` / ``--from-beginning`` (``metadata``, like
``kcat -L``, is in test_output_json)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"group.initial.rebalance.delay.ms": 0}
    with BrokerProcess(tmp_path_factory.mktemp("kafka-user") / "data", overrides=overrides) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("events", 2, 1), NewTopic("trim", 2, 1)]).values():
            f.result(15)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for topic in ("events", "trim"):
            for i in range(10):
                p.produce(topic, f"{topic}-{i}".encode(), partition=i % 2)
        assert p.flush(15) == 0
        yield b


def low_watermarks(broker: BrokerProcess, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0] for p in (0, 1)]
    finally:
        c.close()


def test_delete_records(broker: BrokerProcess, tmp_path: Path) -> None:
    r = odradek("delete-records", "--topic", "trim", "--partition", "0", "--offset", "3", "-b", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Records delete operation completed:\npartition: trim-0\tlow_watermark: 3\n"
    assert low_watermarks(broker, "trim") == [3, 0]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "trim", "partition": 1, "offset": -1}]}))
    r = odradek("delete-records", "--offset-json-file", str(plan), "--bootstrap-server", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert low_watermarks(broker, "trim") == [3, 5]
    beyond = odradek("delete-records", "--topic", "trim", "--partition", "0", "--offset", "99", "-b", broker.bootstrap)
    assert beyond.returncode == 1 and len(beyond.stderr.splitlines()) == 1 and "OFFSET_OUT_OF_RANGE" in beyond.stderr
    assert odradek("delete-records", "-b", broker.bootstrap).returncode == 2


def test_groups_delete_offsets(broker: BrokerProcess) -> None:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "trimmer", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("events", 0, 2), TopicPartition("events", 1, 4)], asynchronous=False)
    c.close()
    r = odradek("groups", "delete-offsets", "trimmer", "--topic", "events:0", "-b", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["TOPIC", "PARTITION", "STATUS", "events", "0", "Successful"]
    d = json.loads(odradek("groups", "describe", "trimmer", "--output", "json", "-b", broker.bootstrap).stdout)
    assert [(o["partition"], o["committed_offset"]) for o in d["offsets"]] == [(1, 4)]


def test_consume_kafka_spellings(broker: BrokerProcess) -> None:
    r = odradek("consume", "--topic", "events", "--from-beginning", "--partition", "1", "-e", "-b", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"events-{i}" for i in range(1, 10, 2)]
    both = odradek("consume", "events", "--topic", "other", "-e", "-b", broker.bootstrap)
    assert both.returncode == 2 and "two different topics" in both.stderr


def test_consume_as_a_group_commits_what_it_printed(broker: BrokerProcess) -> None:
    b = ["--bootstrap-server", broker.bootstrap]
    first = odradek("consume", "events", "--group", "readers", "--from-beginning", "-c", "4", "-f", "%p:%s\\n", *b)
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 4
    d = json.loads(odradek("groups", "describe", "readers", "--output", "json", *b).stdout)
    committed = {o["partition"]: o["committed_offset"] for o in d["offsets"] if o["committed_offset"] is not None}
    assert sum(committed.values()) == 4  # the offsets after the 4 records printed, nothing more
    assert d["total_lag"] == sum(5 - c for c in committed.values())
    # a partition without a committed offset starts where --offset says: the beginning
    rest = odradek("consume", "events", "--group", "readers", "--from-beginning", "-e", "-f", "%p:%s\\n", *b)
    assert rest.returncode == 0, rest.stderr
    printed = first.stdout.splitlines() + rest.stdout.splitlines()
    assert sorted(printed) == sorted(f"{i % 2}:events-{i}" for i in range(10))
    d = json.loads(odradek("groups", "describe", "readers", "--output", "json", *b).stdout)
    assert [(o["partition"], o["committed_offset"], o["lag"]) for o in d["offsets"]] == [(0, 5, 0), (1, 5, 0)]
    bad = odradek("consume", "events", "--group", "readers", "-o", "3", "-e", *b)
    assert bad.returncode == 1 and "with --group" in bad.stderr
