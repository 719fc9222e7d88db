"""The Spark source and sink over SASL_SSL: Spark's ``kafka.``-prefixed security options reach
Odradek's client on the executors (reads through the direct path and the general one, writes
through the Producer)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.testing import BrokerProcess
from tests.security.pki import Pki, make_pki

TIMEOUT = 60.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Pki]]:
    d = tmp_path_factory.mktemp("spark-sec")
    pki = make_pki(d / "pki")
    b = BrokerProcess(
        d / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        overrides={"ssl.keystore.location": pki.broker_keystore, "sasl.enabled.mechanisms": "SCRAM-SHA-256"},
        log_level="INFO,odradek.access=DEBUG",
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        up = UserScramCredentialUpsertion("spark", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"spark-pw")
        for f in admin.alter_user_scram_credentials([up]).values():
            f.result(TIMEOUT)
        yield b, pki
    finally:
        b.stop()


def _options(b: BrokerProcess, pki: Pki) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": b.bootstrap_of("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.location": str(pki.ca),
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="spark" password="spark-pw";'
        ),
    }


def test_batch_read_and_write_over_sasl_ssl(spark: Any, secured: tuple[BrokerProcess, Pki], tmp_path: Path) -> None:
    b, pki = secured
    source, sink = f"sec-in-{uuid.uuid4().hex[:6]}", f"sec-out-{uuid.uuid4().hex[:6]}"
    p = ck.Producer({"bootstrap.servers": b.bootstrap})
    for i in range(200):
        p.produce(source, b"v%d" % i, key=b"k%d" % i, partition=0)
    assert p.flush(TIMEOUT) == 0
    opts = _options(b, pki)
    df = spark.read.format("odradek").options(**opts).option("subscribe", source).load()
    rows = sorted(r.value for r in df.select("value").collect())
    assert rows == sorted(b"v%d" % i for i in range(200))
    df.selectExpr("key", "value").write.format("odradek").options(**opts).option("topic", sink).mode("append").save()
    back = spark.read.format("odradek").options(**opts).option("subscribe", sink).load().select("value").collect()
    assert sorted(r.value for r in back) == rows
    b.wait_for_log("principal=User:spark listener=SASL_SSL")
