"""ACLs in a 3-broker ZooKeeper cluster: Kafka's ZooKeeper layout, every broker applying a change
made through one of them within 2 s, ACLs surviving restarts, and replication running on the
inter-broker principal's ClusterAction (no super user between the brokers).

The brokers talk to each other as ``User:broker`` over an INTERNAL SASL_PLAINTEXT listener;
clients come in on EXTERNAL as ``admin`` (a super user), ``alice`` and ``bob``.  The one ACL the
brokers need — ClusterAction on the cluster for ``User:broker`` — is written to ZooKeeper with
``odradek acls --zookeeper`` before the first start, as ``kafka-acls`` did with
``--authorizer-properties zookeeper.connect=``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.cluster.conftest import Cluster

TIMEOUT = 60.0
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
USERS = ("admin", "alice", "bob")


def _client(cluster: Cluster, user: str, ids: list[int] | None = None) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(cluster.broker(i).bootstrap_of("EXTERNAL") for i in (ids or cluster.ids)),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def _produce(conf: dict[str, Any], topic: str, partition: int, n: int = 1) -> list[int]:
    codes: list[int] = []
    p = Producer({**conf, "message.timeout.ms": 15000})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition,
                  on_delivery=lambda err, _m: codes.append(0 if err is None else err.code()))
    p.flush(TIMEOUT)
    return codes


def _log_time(line: str) -> float:
    stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
    assert stamp is not None, line
    return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_acls_reach_every_broker_and_survive_restarts(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    users = " ".join(f'user_{u}="{u}-secret"' for u in (*USERS, "broker"))
    overrides = {
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": f'{PLAIN} username="broker" password="broker-secret" {users};',
        "listener.name.external.plain.sasl.jaas.config": f"{PLAIN} {users};",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "default.replication.factor": 3,
        "offsets.topic.replication.factor": 3,
    }
    cluster = cluster_factory(
        overrides=overrides,
        start=False,
        listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        log_level="INFO",
    )
    r = subprocess.run(
        [sys.executable, "-m", "odradek", "acls", "--zookeeper", cluster.zookeeper_connect, "add",
         "--allow-principal", "User:broker", "--operation", "ClusterAction", "--cluster"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    # Kafka's layout, readable by Kafka's own tools
    assert cluster.zk_json("/kafka-acl/Cluster/kafka-cluster") == {
        "version": 1,
        "acls": [{"principal": "User:broker", "permissionType": "Allow", "operation": "ClusterAction", "host": "*"}],
    }
    cluster.start_all()
    cluster.wait_for(lambda: sorted(cluster.registered_brokers()) == [1, 2, 3], TIMEOUT, "three brokers")
    # start_all waits for every broker to name the controller only over PLAINTEXT; this cluster has
    # SASL listeners only.  A Metadata answered before the controller's first UpdateMetadata says
    # "no controller", and librdkafka's AdminClient then let CreateTopics time out (seen in CI).
    cluster.wait_for(lambda: _metadata_ready(cluster), TIMEOUT, "every broker naming the controller and 3 brokers")

    topic = f"acl-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(_client(cluster, "admin"))
    for f in admin.create_topics([NewTopic(topic, 3, 3)], request_timeout=TIMEOUT).values():
        f.result(timeout=TIMEOUT)
    # followers replicate on User:broker's ClusterAction: every ISR fills
    cluster.wait_for(
        lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(3)), TIMEOUT, "full ISRs"
    )
    assert _produce(_client(cluster, "admin"), topic, 0, 3) == [0, 0, 0]
    cluster.wait_for(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(3)), TIMEOUT, "full ISRs after writes")

    # alice cannot write anywhere yet
    leaders = {p: cluster.leader(topic, p) for p in range(3)}
    assert set(_produce(_client(cluster, "alice"), topic, 0)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    # an ACL made through one broker (librdkafka picks which, not always its bootstrap broker)...
    one = AdminClient(_client(cluster, "admin", [1]))
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    one.create_acls([binding], request_timeout=TIMEOUT)[binding].result(timeout=TIMEOUT)
    created = time.time()
    handler = _handled_by(cluster, "ACLs added by User:admin on Topic:LITERAL:" + topic)
    # ...is applied by the other brokers within 2 s (the time each logs that it applied it)
    for i in (i for i in cluster.ids if i != handler):
        line = cluster.broker(i).wait_for_log("applied ACL changes from ZooKeeper on Topic:LITERAL:" + topic,
                                              timeout=TIMEOUT)
        delay = _log_time(line) - created
        print(f"broker {i} applied the ACL {delay * 1000:.0f} ms after CreateAcls was answered")
        assert delay < 2.0, (i, line)
    assert cluster.zk_json(f"/kafka-acl/Topic/{topic}")["acls"][0]["principal"] == "User:alice"
    changes = cluster.zk_children("/kafka-acl-changes")
    assert changes and all(c.startswith("acl_changes_") for c in changes)
    assert any(cluster.zk_get(f"/kafka-acl-changes/{c}") == f"Topic:{topic}".encode() for c in changes)
    # ...and alice's writes now succeed on every partition, whichever broker leads it
    for p in range(3):
        assert _produce(_client(cluster, "alice"), topic, p) == [0], (p, leaders[p])
    assert set(_produce(_client(cluster, "bob"), topic, 1)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    # a PREFIXED ACL goes to /kafka-acl-extended and its own notifications
    pfx = AclBinding(ResourceType.TOPIC, "acl-", ResourcePatternType.PREFIXED, "User:bob", "*",
                     AclOperation.WRITE, AclPermissionType.ALLOW)
    one.create_acls([pfx], request_timeout=TIMEOUT)[pfx].result(timeout=TIMEOUT)
    assert cluster.zk_json("/kafka-acl-extended/prefixed/Topic/acl-")["acls"][0]["principal"] == "User:bob"
    handler = _handled_by(cluster, "ACLs added by User:admin on Topic:PREFIXED:acl-")
    for i in (i for i in cluster.ids if i != handler):
        cluster.broker(i).wait_for_log("applied ACL changes from ZooKeeper on Topic:PREFIXED:acl-", timeout=TIMEOUT)
    assert _produce(_client(cluster, "bob"), topic, 2) == [0]

    for i in cluster.ids:
        assert not any("User:broker is Denied" in ln for ln in cluster.broker(i).stderr_lines), cluster.logs(i)
    # every broker restarted: the ACLs are read back from ZooKeeper
    for i in cluster.ids:
        cluster.restart(i)
    cluster.wait_for(lambda: sorted(cluster.registered_brokers()) == [1, 2, 3], TIMEOUT, "three brokers again")
    cluster.wait_for(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(3)), TIMEOUT, "full ISRs again")
    for p in range(3):
        assert _produce(_client(cluster, "alice"), topic, p) == [0]
    assert set(_produce(_client(cluster, "alice"), "__consumer_offsets", 0)) == {
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    }
    # nothing refused between the brokers
    for i in cluster.ids:
        assert not any("User:broker is Denied" in ln for ln in cluster.broker(i).stderr_lines), cluster.logs(i)
    # and every acknowledged record is there: 3 + 3 + 1 + 3
    c = Consumer({**_client(cluster, "admin"), "group.id": "check"})
    total = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1] for p in range(3))
    c.close()
    assert total == 10


def _handled_by(cluster: Cluster, line: str) -> int:
    """The broker that logged ``line``: the one a client's CreateAcls reached (it applies its own
    change at once; the others learn it from ZooKeeper's change notifications)."""
    def find() -> int | None:
        return next((i for i in cluster.ids if any(line in ln for ln in list(cluster.broker(i).stderr_lines))), None)

    found = cluster.wait_for(find, TIMEOUT, f"a broker logging {line!r}")
    assert found is not None
    return found


def _metadata_ready(cluster: Cluster) -> bool:
    """Every broker's Metadata, asked as the super user over SASL, names a controller and all three."""
    for i in cluster.ids:
        md = AdminClient(_client(cluster, "admin", [i])).list_topics(timeout=5)
        if md.controller_id < 0 or len(md.brokers) != len(cluster.ids):
            return False
    return True
