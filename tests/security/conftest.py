"""A broker with every kind of listener, and the certificates its TLS listeners use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing import BrokerProcess
from tests.security.pki import Pki, make_pki

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
#: listener name -> protocol: the four protocols, and a custom name for mTLS-only
LISTENERS = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",
    "MTLS": "SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def secure_overrides(pki: Pki) -> dict[str, object]:
    return {
        "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in LISTENERS.items()),
        "ssl.keystore.location": pki.broker_keystore,
        "ssl.truststore.location": pki.ca,
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        # a group's first join is not held back for members yet to come (Kafka's 3 s): these
        # tests are about who may connect, not about rebalancing
        "group.initial.rebalance.delay.ms": 0,
    }


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("secure") / "data",
        listeners=",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        overrides=secure_overrides(pki),
        log_level="INFO,odradek.access=DEBUG",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def tls_client(pki: Pki, *, cert: Path | None = None, key: Path | None = None) -> dict[str, str]:
    """confluent-kafka (librdkafka) settings for a TLS listener, optionally with a client certificate."""
    conf = {"ssl.ca.location": str(pki.ca), "ssl.endpoint.identification.algorithm": "https"}
    if cert is not None and key is not None:
        conf.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    return conf
