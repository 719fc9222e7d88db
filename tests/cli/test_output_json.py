"""``--output json`` of every listing command, compared with the state of a real broker.

The state is made with confluent-kafka (librdkafka), not with Odradek's own client, and read back
with it where it can be: topics with known partitions and configs, records counted per partition,
a group with known committed offsets (so known lag), ACLs, a SCRAM user, a client quota and an
open transaction.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from odradek.testing import BrokerProcess

ORDERS = "orders"
COUNTS = {0: 5, 1: 7, 2: 9}  # records per partition of ORDERS
ORDERS_CONFIGS = {"retention.ms": "86400000", "cleanup.policy": "compact"}
COMMITTED = {0: 5, 1: 3}  # group billing's offsets (nothing committed for partition 2)


def odradek(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60, input=stdin
    )


def as_json(broker: BrokerProcess, *args: str) -> Any:
    r = odradek(*args, "--bootstrap-server", broker.bootstrap, "--output", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "group.initial.rebalance.delay.ms": 0,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with BrokerProcess(tmp_path_factory.mktemp("json") / "data", overrides=overrides) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        new = [NewTopic(ORDERS, 3, 1, config=ORDERS_CONFIGS), NewTopic("payments", 2, 1), NewTopic("audit", 1, 1)]
        for f in admin.create_topics(new).values():
            f.result(15)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for partition, n in COUNTS.items():
            for i in range(n):
                p.produce(ORDERS, key=str(i).encode(), value=b"v", partition=partition)
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "billing", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(ORDERS, p, o) for p, o in COMMITTED.items()], asynchronous=False)
        c.close()
        yield b


def test_topics_list(broker: BrokerProcess) -> None:
    listed = as_json(broker, "topics", "list")
    by_name = {t["name"]: t for t in listed}
    assert {ORDERS, "payments", "audit"} <= set(by_name)
    assert all(set(t) == {"name", "topic_id", "internal"} for t in listed)
    assert not by_name[ORDERS]["internal"]
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert set(by_name) == set(md.topics)  # internal topics too, unless --exclude-internal
    assert by_name["__consumer_offsets"]["internal"]
    assert "__consumer_offsets" not in {t["name"] for t in as_json(broker, "topics", "list", "--exclude-internal")}
    described = {t["name"]: t for t in as_json(broker, "topics", "describe")}
    assert by_name[ORDERS]["topic_id"] == described[ORDERS]["topic_id"] and by_name[ORDERS]["topic_id"]


def test_topics_describe(broker: BrokerProcess) -> None:
    [t] = as_json(broker, "topics", "describe", ORDERS)
    assert t["name"] == ORDERS and t["partition_count"] == 3 and t["replication_factor"] == 1
    assert t["configs"] == ORDERS_CONFIGS
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(ORDERS, timeout=10).topics[ORDERS]
    assert [p["partition"] for p in t["partitions"]] == sorted(md.partitions)
    for p in t["partitions"]:
        real = md.partitions[p["partition"]]
        assert (p["leader"], p["replicas"], p["isr"]) == (real.leader, list(real.replicas), list(real.isrs))
        assert (p["earliest_offset"], p["latest_offset"]) == (0, COUNTS[p["partition"]])
        assert p["offline_replicas"] == []
    every = {d["name"]: d for d in as_json(broker, "topics", "describe")}
    assert every["payments"]["partition_count"] == 2 and every["payments"]["configs"] == {}


def test_groups_list_and_describe(broker: BrokerProcess) -> None:
    listed = {g["group_id"]: g for g in as_json(broker, "groups", "list")}
    # offsets committed without joining: an Empty group without a protocol type
    assert listed["billing"] == {"group_id": "billing", "state": "Empty", "protocol_type": ""}

    g = as_json(broker, "groups", "describe", "billing")
    assert (g["group_id"], g["state"], g["members"]) == ("billing", "Empty", [])
    offsets = {o["partition"]: o for o in g["offsets"] if o["topic"] == ORDERS}
    for partition, committed in COMMITTED.items():
        o = offsets[partition]
        assert (o["committed_offset"], o["log_end_offset"]) == (committed, COUNTS[partition])
        assert o["lag"] == COUNTS[partition] - committed and o["member_id"] is None
    assert g["total_lag"] == sum(COUNTS[p] - o for p, o in COMMITTED.items())

    missing = odradek("groups", "describe", "nobody", "--bootstrap-server", broker.bootstrap, "--output", "json")
    assert missing.returncode == 1 and missing.stdout == "" and "does not exist" in missing.stderr


def test_groups_describe_with_a_member(broker: BrokerProcess) -> None:
    c = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "live", "client.id": "live-client",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip
    try:
        c.subscribe(["payments"])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment()
        g = as_json(broker, "groups", "describe", "live")
        assert g["state"] == "Stable" and g["protocol_type"] == "consumer"
        [m] = g["members"]
        assert m["client_id"] == "live-client"
        assert sorted((a["topic"], a["partition"]) for a in m["assignment"]) == [("payments", 0), ("payments", 1)]
    finally:
        c.close()


def test_configs_describe(broker: BrokerProcess) -> None:
    d = as_json(broker, "configs", "describe", "--topic", ORDERS)
    assert d["resource"] == {"type": "topic", "name": ORDERS}
    assert {e["name"]: e["value"] for e in d["configs"]} == ORDERS_CONFIGS
    assert {e["source"] for e in d["configs"]} == {"DYNAMIC_TOPIC_CONFIG"}

    every = as_json(broker, "configs", "describe", "--topic", ORDERS, "--all")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", ORDERS)
    real = admin.describe_configs([resource])[resource].result(10)
    assert {e["name"]: e["value"] for e in every["configs"]} == {n: e.value for n, e in real.items()}

    b = as_json(broker, "configs", "describe", "--broker", "0", "--all")
    assert b["resource"] == {"type": "broker", "name": "0"}
    by_name = {e["name"]: e for e in b["configs"]}
    assert by_name["group.initial.rebalance.delay.ms"]["value"] == "0"


def test_acls_list(broker: BrokerProcess) -> None:
    added = odradek(
        "acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
        "--topic", ORDERS, "--bootstrap-server", broker.bootstrap,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed = as_json(broker, "acls", "list", "--principal", "User:alice")
    assert sorted(listed, key=lambda r: r["operation"]) == [
        {"resource_type": "Topic", "pattern_type": "LITERAL", "name": ORDERS, "principal": "User:alice",
         "host": "*", "operation": op, "permission": "Allow"}
        for op in ("Describe", "Read")
    ]  # fmt: skip


def test_users_and_quotas(broker: BrokerProcess) -> None:
    add = odradek(
        "users", "add", "carol", "--mechanism", "SCRAM-SHA-256", "--iterations", "8192", "--password-stdin",
        "--bootstrap-server", broker.bootstrap, stdin="secret\n",
    )  # fmt: skip
    assert add.returncode == 0, add.stderr
    users = {u["user"]: u for u in as_json(broker, "users", "list")}
    assert users["carol"]["credentials"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]
    assert as_json(broker, "users", "describe", "carol") == [users["carol"]]

    quota = odradek(
        "configs", "--entity-type", "users", "--entity-name", "carol", "--alter",
        "--add-config", "producer_byte_rate=1024", "--bootstrap-server", broker.bootstrap,
    )  # fmt: skip
    assert quota.returncode == 0, quota.stderr
    assert as_json(broker, "configs", "describe", "--user", "carol") == [
        {"entity": {"user": "carol"}, "quotas": {"producer_byte_rate": 1024.0}}
    ]


def test_transactions_list_and_describe(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-json", "linger.ms": 0})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("payments", b"pending", partition=1)
    assert p.flush(15) == 0
    try:
        listed = {t["transactional_id"]: t for t in as_json(broker, "transactions", "list")}
        assert listed["tx-json"]["state"] == "Ongoing"
        [d] = as_json(broker, "transactions", "describe", "--transactional-id", "tx-json")
        assert d["state"] == "Ongoing" and d["partitions"] == ["payments-1"]
        assert d["producer_id"] == listed["tx-json"]["producer_id"] >= 0
    finally:
        p.abort_transaction(15)
    [after] = as_json(broker, "transactions", "describe", "--transactional-id", "tx-json")
    assert after["state"] in ("PrepareAbort", "CompleteAbort") and after["partitions"] in ([], ["payments-1"])


def test_cluster_status(tmp_path: Path) -> None:
    from odradek.coordination.zkserver import ZooKeeperServer, zookeeper_available

    problem = zookeeper_available()
    if problem is not None:
        pytest.fail(problem, pytrace=False)  # scripts/test.sh installs it: never skipped
    zk = ZooKeeperServer(tmp_path / "zk")
    with zk, BrokerProcess(tmp_path / "b1", broker_id=1, extra_args=["--zookeeper", zk.connect]) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        # a ready broker learns the controller from its first UpdateMetadata; until then librdkafka's
        # admin client waits for a controller much longer than this test would
        deadline = time.monotonic() + 30
        while admin.list_topics(timeout=10).controller_id < 0:
            assert time.monotonic() < deadline, "the broker never named a controller"
            time.sleep(0.1)
        for f in admin.create_topics([NewTopic("zk-topic", 2, 1)]).values():
            f.result(15)
        status = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = odradek("cluster", "status", "--zookeeper", zk.connect, "--output", "json")
            assert r.returncode == 0, r.stderr
            status = json.loads(r.stdout)
            if len(status["partitions"]) == 2 and all(p["leader"] == 1 for p in status["partitions"]):
                break
            time.sleep(0.2)
        assert status is not None
        assert [x["id"] for x in status["brokers"]] == [1] and status["controller"] == 1
        md = admin.list_topics("zk-topic", timeout=10).topics["zk-topic"]
        got = {(p["topic"], p["partition"]): (p["leader"], p["replicas"], p["isr"]) for p in status["partitions"]}
        assert got == {("zk-topic", n): (x.leader, list(x.replicas), list(x.isrs)) for n, x in md.partitions.items()}
        assert status["under_replicated"] == 0 and status["offline"] == 0
        legacy = odradek("cluster", "status", "--zookeeper", zk.connect, "--json")
        assert json.loads(legacy.stdout).keys() == status.keys()


def test_metadata(broker: BrokerProcess) -> None:
    m = as_json(broker, "metadata")
    real = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert m["cluster_id"] == real.cluster_id and m["controller"] == real.controller_id
    assert m["brokers"] == [{"id": b.id, "host": b.host, "port": b.port, "rack": None} for b in real.brokers.values()]
    topics = {t["name"]: t for t in m["topics"]}
    assert {ORDERS, "payments", "audit"} <= set(topics)
    for name, t in topics.items():
        partitions = real.topics[name].partitions
        assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in t["partitions"]] == [
            (n, x.leader, list(x.replicas), list(x.isrs)) for n, x in sorted(partitions.items())
        ]
    [only] = as_json(broker, "metadata", "--topic", "audit")["topics"]
    assert only["name"] == "audit" and len(only["partitions"]) == 1
