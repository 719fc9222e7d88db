"""Odradek's own client (Producer, SimpleConsumer, group Consumer, Admin) over TLS and SASL, with
Kafka's Java config names and with librdkafka's, and its errors for wrong credentials."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.client import Admin, ClientConfigError, Consumer, Producer, SimpleConsumer
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess
from tests.security.pki import Pki

TIMEOUT = 30.0


@pytest.fixture(scope="module")
def broker(secure_broker: BrokerProcess) -> BrokerProcess:
    admin = AdminClient({"bootstrap.servers": secure_broker.bootstrap})
    ups = [UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"erin-512")]
    for f in admin.alter_user_scram_credentials(ups).values():
        assert f.result(TIMEOUT) is None
    return secure_broker


def _modes(broker: BrokerProcess, pki: Pki) -> dict[str, dict[str, Any]]:
    scram_jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="erin" password="erin-512";'
    return {
        # Kafka's (Java) names
        "ssl-java-names": {
            "bootstrap.servers": broker.bootstrap_of("SSL"),
            "security.protocol": "SSL",
            "ssl.truststore.location": str(pki.ca),
        },
        # librdkafka's names, and a client certificate where the listener requires one
        "mtls-librdkafka-names": {
            "bootstrap.servers": broker.bootstrap_of("MTLS"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        },
        "sasl-plain": {
            "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        },
        "sasl-ssl-scram-512-jaas": {
            "bootstrap.servers": broker.bootstrap_of("SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "ssl.truststore.location": str(pki.ca),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": scram_jaas,
        },
    }


MODES = ["ssl-java-names", "mtls-librdkafka-names", "sasl-plain", "sasl-ssl-scram-512-jaas"]


@pytest.mark.parametrize("mode", MODES)
def test_every_client_over(broker: BrokerProcess, pki: Pki, mode: str) -> None:
    conf = _modes(broker, pki)[mode]
    topic = f"oc-{mode}-{uuid.uuid4().hex[:6]}"
    with Admin(conf) as admin:
        from odradek.client import NewTopic

        admin.create_topics([NewTopic(topic, 2, 1)])
        assert topic in admin.list_topics()
    with Producer({**conf, "linger.ms": 1}) as p:
        futures = [p.send(topic, b"r%d" % i, key=b"k%d" % i) for i in range(20)]
        p.flush(TIMEOUT)
        placed = [f.result(TIMEOUT) for f in futures]
    with SimpleConsumer(conf) as sc:
        got = []
        for part in (0, 1):
            got += [r.value for r in sc.fetch(topic, part, 0)]
    assert sorted(got) == sorted(b"r%d" % i for i in range(20))
    assert len(placed) == 20
    c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 20:
            assert time.monotonic() < deadline, f"group consumer read {len(seen)} of 20"
            seen += [r.value for r in c.poll(0.5)]
    finally:
        c.close()
    assert sorted(seen) == sorted(got)


def test_a_wrong_password_fails_fast_with_the_brokers_message(broker: BrokerProcess, pki: Pki) -> None:
    conf = {**_modes(broker, pki)["sasl-plain"], "sasl.password": "wrong"}
    t0 = time.monotonic()
    with SimpleConsumer({**conf, "request.timeout.ms": 20000}) as sc, pytest.raises(KafkaError) as info:
        sc.partitions_for("anything")
    assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Invalid username or password" in str(info.value)
    assert time.monotonic() - t0 < 15  # not retried until the request times out


def test_an_untrusted_broker_certificate_is_refused(broker: BrokerProcess, pki: Pki) -> None:
    conf = {
        "bootstrap.servers": broker.bootstrap_of("SSL"),
        "security.protocol": "SSL",
        "ssl.truststore.location": str(pki.stranger_cert),  # not the CA that signed the broker
        "request.timeout.ms": 5000,
        "default.api.timeout.ms": 5000,
    }
    with Admin(conf) as admin, pytest.raises((ConnectionError, TimeoutError, KafkaError)) as info:
        admin.list_topics()
    assert "certificate verify failed" in str(info.value) or "CERTIFICATE" in str(info.value).upper()


@pytest.mark.parametrize(
    ("conf", "says"),
    [
        ({"security.protocol": "SASL_SSL"}, "GSSAPI is not supported"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs a user"),
        ({"security.protocol": "TLS"}, "invalid security.protocol"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"}, "cannot load the TLS files"),
    ],
)
def test_client_security_settings_are_checked_at_once(conf: dict[str, Any], says: str) -> None:
    with pytest.raises(ClientConfigError, match=says):
        Producer({"bootstrap.servers": "127.0.0.1:1", **conf})


def test_users_cli_through_a_secured_listener(broker: BrokerProcess, pki: Pki, tmp_path: Any) -> None:
    """``odradek users`` with ``--command-config`` (Kafka's tools' way to pass client security):
    a new user made over SASL_SSL can log in at once; deleting it locks it out."""
    import subprocess
    import sys

    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={pki.ca}\n"
        "sasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret";\n'
    )
    base = [sys.executable, "-m", "odradek", "users", "--bootstrap-server", broker.bootstrap_of("SASL_SSL"),
            "--command-config", str(props)]
    pw = tmp_path / "frank.pw"
    pw.write_text("frank-secret\n")
    r = subprocess.run([*base, "add", "frank", "--mechanism", "SCRAM-SHA-256", "--password-file", str(pw)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*base, "describe", "frank"], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "frank: SCRAM-SHA-256 iterations=4096", r.stderr
    conf = {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "frank",
        "sasl.password": "frank-secret",
    }
    with Admin(conf) as admin:
        assert isinstance(admin.list_topics(), dict)
    r = subprocess.run([*base, "delete", "frank"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with Admin({**conf, "default.api.timeout.ms": 10000}) as admin, pytest.raises(KafkaError) as info:
        admin.list_topics()
    assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    r = subprocess.run([*base, "describe", "frank"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "does not exist" in r.stderr
