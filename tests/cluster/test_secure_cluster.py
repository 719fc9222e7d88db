"""A 3-broker ZooKeeper cluster whose brokers talk to each other over SASL_SSL with SCRAM-SHA-512
(inter.broker.listener.name=INTERNAL), with clients on PLAINTEXT and on a SASL_SSL EXTERNAL
listener: replication, the controller's requests and a failover all go through the secured
listener, and a client on EXTERNAL is handed EXTERNAL endpoints in Metadata."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster
from tests.security.pki import make_pki

TIMEOUT = 60.0
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{u}" password="{p}";'


def test_inter_broker_sasl_ssl_replicates_and_fails_over(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    overrides: dict[str, Any] = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": pki.broker_keystore,
        "ssl.truststore.location": pki.ca,
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format(u="broker", p="broker-secret"),
        "default.replication.factor": 3,
        "min.insync.replicas": 2,
    }
    cluster = cluster_factory(
        overrides=overrides,
        start=False,
        listeners="PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        log_level="WARNING,odradek.access=DEBUG,odradek.authentication=INFO",
    )
    # the users exist before any broker starts: written to ZooKeeper by the CLI, as with
    # kafka-configs --zookeeper (the passwords come in on stdin, never on a command line)
    for user, password in (("broker", "broker-secret"), ("alice", "alice-secret")):
        r = subprocess.run(
            [sys.executable, "-m", "odradek", "users", "--zookeeper", cluster.zookeeper_connect, "add", user,
             "--mechanism", "SCRAM-SHA-512", "--password-stdin"],
            input=password + "\n", capture_output=True, text=True, timeout=60,
        )
        assert r.returncode == 0, r.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "odradek", "users", "--zookeeper", cluster.zookeeper_connect, "list"],
        capture_output=True, text=True, timeout=60,
    )
    assert listed.stdout.splitlines() == ["alice: SCRAM-SHA-512 iterations=4096", "broker: SCRAM-SHA-512 iterations=4096"]
    cluster.start_all()
    cluster.wait_for(lambda: sorted(cluster.registered_brokers()) == [1, 2, 3], TIMEOUT, "three brokers")

    # registered as Kafka registers a broker: every endpoint and the protocol of each listener
    info = cluster.zk_json("/brokers/ids/1")
    assert info["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SASL_SSL", "EXTERNAL": "SASL_SSL"}
    assert [e.split("://")[0] for e in info["endpoints"]] == ["PLAINTEXT", "INTERNAL", "EXTERNAL"]
    assert info["port"] == cluster.broker(1).endpoints["PLAINTEXT"][1]

    topic = f"secure-{uuid.uuid4().hex[:6]}"
    external = {
        "bootstrap.servers": ",".join(cluster.broker(i).bootstrap_of("EXTERNAL") for i in cluster.ids),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    ext_admin = AdminClient(external)
    for f in ext_admin.create_topics([NewTopic(topic, 3, 3)]).values():
        f.result(TIMEOUT)
    # Metadata on EXTERNAL names every broker by its EXTERNAL endpoint
    md = ext_admin.list_topics(timeout=TIMEOUT)
    assert {(b.host, b.port) for b in md.brokers.values()} == {
        ("127.0.0.1", cluster.broker(i).endpoints["EXTERNAL"][1]) for i in cluster.ids
    }

    sent: list[bytes] = []

    def produce(n: int) -> None:
        p = ck.Producer({**external, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60000})
        errors: list[Any] = []
        for _ in range(n):
            # numbered across both calls: a random prefix alone repeated about once in 200 runs,
            # and the read below, which counts distinct values, then never finished
            v = b"%s-%d" % (uuid.uuid4().hex[:4].encode(), len(sent))
            p.produce(topic, v, key=v, on_delivery=lambda err, _m: errors.append(err))
            sent.append(v)
        assert p.flush(TIMEOUT) == 0
        assert errors == [None] * n

    produce(300)
    # followers fetch over INTERNAL with SASL_SSL: every partition's ISR fills up
    cluster.wait_for(lambda: all(cluster.isr(topic, p) == [1, 2, 3] for p in range(3)), TIMEOUT, "full ISR")
    for i in cluster.ids:
        cluster.broker(i).wait_for_log("FETCH", "principal=User:broker listener=INTERNAL")

    # the leader of partition 0 dies; another takes over, elected and told over INTERNAL
    victim = cluster.leader(topic, 0)
    assert victim is not None
    cluster.kill(victim)
    cluster.wait_for(
        lambda: cluster.leader(topic, 0) not in (None, victim), TIMEOUT, "a new leader for partition 0"
    )
    produce(300)
    cluster.start(victim)
    cluster.wait_for(lambda: all(cluster.isr(topic, p) == [1, 2, 3] for p in range(3)), TIMEOUT, "ISR back to 3")

    c = ck.Consumer({**external, "group.id": topic, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got: set[bytes] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(got) < len(sent):
            assert time.monotonic() < deadline, f"read {len(got)} of {len(sent)}; missing {sorted(set(sent) - got)[:10]}"
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value())
    finally:
        c.close()
    assert got == set(sent)

    # the ZooKeeper high-level consumer fetches over SASL_SSL too: the brokers' SASL_SSL endpoints
    # come from /brokers/ids, the TLS and SASL settings from its configuration
    from odradek.client import ZookeeperConsumer

    zk_consumer = ZookeeperConsumer({
        "zookeeper.connect": cluster.zookeeper_connect, "group.id": f"zk-{topic}", "auto.offset.reset": "smallest",
        "consumer.timeout.ms": 10000, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-secret",
    })
    try:
        [stream] = zk_consumer.create_message_streams({topic: 1})[topic]
        zk_got: set[bytes] = set()
        for m in stream:
            assert m.value is not None
            zk_got.add(m.value)
            if len(zk_got) == len(sent):
                break
        zk_consumer.commit_offsets()
        committed = sum(int(cluster.zk_get(f"/consumers/zk-{topic}/offsets/{topic}/{p}") or b"0") for p in range(3))
    finally:
        zk_consumer.shutdown()
    assert zk_got == set(sent) and committed == len(sent)
    assert any("FETCH" in line and "principal=User:alice" in line for i in cluster.ids
               for line in cluster.broker(i).stderr_lines)

    # a user made through one broker can log in at every broker without a restart (the other
    # brokers learn it from ZooKeeper's change notification), and a removed one nowhere
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    up = UserScramCredentialUpsertion("zed", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"zed-pw")
    one = AdminClient({**external, "bootstrap.servers": cluster.broker(1).bootstrap_of("EXTERNAL")})
    for f in one.alter_user_scram_credentials([up]).values():  # through broker 1 only
        assert f.result(TIMEOUT) is None

    def zed_on(i: int, password: str = "zed-pw") -> bool:
        conf = {**external, "bootstrap.servers": cluster.broker(i).bootstrap_of("EXTERNAL"),
                "sasl.username": "zed", "sasl.password": password}
        try:
            AdminClient(conf).list_topics(timeout=5)
            return True
        except ck.KafkaException:
            return False

    for i in (2, 3):
        cluster.wait_for(lambda i=i: zed_on(i), TIMEOUT, f"user zed known to broker {i}")
    for f in one.alter_user_scram_credentials([UserScramCredentialDeletion("zed", ScramMechanism.SCRAM_SHA_512)]).values():
        assert f.result(TIMEOUT) is None
    for i in cluster.ids:
        cluster.wait_for(lambda i=i: not zed_on(i), TIMEOUT, f"user zed forgotten by broker {i}")
    # no secret in any broker's log (the access and authentication loggers were at DEBUG/INFO)
    for i in cluster.ids:
        for line in cluster.broker(i).stderr_lines:
            assert not any(secret in line for secret in ("broker-secret", "alice-secret", "zed-pw")), line
    assert not any("Failed authentication" in line for i in cluster.ids for line in cluster.broker(i).stderr_lines
                   if "listener INTERNAL" in line and "broker" in line)

