"""Real clients push their metrics (KIP-714) and they appear on the broker's ``/metrics``: a
client-metrics subscription is set with ``odradek configs --entity-type client-metrics`` (Kafka's
kafka-configs names), then confluent-kafka (librdkafka, ``enable.metrics.push``) and, when it is
built in /work/java-kafka, the Java 4.x consumer push, each under its client id and instance id.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess

T = 60.0
RUN = Path("/work/java-kafka/run.sh")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 1}
    with BrokerProcess(
        tmp_path_factory.mktemp("telemetry") / "data", overrides=overrides, extra_args=["--metrics-port", "0"]
    ) as b:
        # every client, every 1 s, the metrics named org.apache.kafka.* (both clients' names)
        cli = subprocess.run(
            [sys.executable, "-m", "odradek", "configs", "--bootstrap-server", b.bootstrap,
             "--entity-type", "client-metrics", "--entity-name", "everyone", "--alter",
             "--add-config", "metrics=[org.apache.kafka.],interval.ms=1000,match=[client_id=tel-.*]"],
            capture_output=True, text=True, timeout=T,
        )
        assert cli.returncode == 0, cli.stderr
        assert "Completed updating config for client-metric everyone" in cli.stdout
        shown = subprocess.run(
            [sys.executable, "-m", "odradek", "configs", "--bootstrap-server", b.bootstrap,
             "--entity-type", "client-metrics", "--entity-name", "everyone", "--describe"],
            capture_output=True, text=True, timeout=T,
        )
        assert "interval.ms=1000" in shown.stdout and "match=client_id=tel-.*" in shown.stdout, shown
        yield b


def _scrape(broker: BrokerProcess) -> str:
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        return r.read().decode()  # type: ignore[no-any-return]


def _pushed(broker: BrokerProcess, client_id: str, prefix: str) -> list[str]:
    pattern = re.compile(rf'^kafka_client_{prefix}\w*\{{[^}}]*client_id="{re.escape(client_id)}"[^}}]*\}}.*$', re.M)
    return [m.group(0) for m in pattern.finditer(_scrape(broker))]


def test_confluent_kafka_pushes_its_metrics_to_metrics(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("tel-topic", 1, 1)]).values():
        f.result(T)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "client.id": "tel-rdkafka", "enable.metrics.push": True})
    deadline = time.monotonic() + T
    found: list[str] = []
    i = 0
    while not found:
        assert time.monotonic() < deadline, _scrape(broker)[-3000:]
        p.produce("tel-topic", f"v{i}".encode())
        i += 1
        p.poll(0.2)
        found = _pushed(broker, "tel-rdkafka", "org_apache_kafka_producer_")
    p.flush(T)
    assert 'client_instance_id="' in found[0]
    # a client that matches no subscription pushes nothing
    assert not _pushed(broker, "other", "")


@pytest.mark.skipif(not RUN.exists(), reason="the Kafka Java client is not built here (/work/java-kafka)")
def test_a_java_consumer_pushes_its_metrics_to_metrics(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("tel-java", 1, 1)]).values():
        f.result(T)
    proc = subprocess.Popen(
        [str(RUN), "ConsumerScenario", "--bootstrap", broker.bootstrap, "--topics", "tel-java",
         "--group-id", "tel-java-g", "--client-id", "tel-java", "--telemetry", "on", "--duration-ms", "120000"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ},
    )
    try:
        deadline = time.monotonic() + 2 * T
        found: list[str] = []
        while not found:
            assert proc.poll() is None, proc.communicate(timeout=T)
            assert time.monotonic() < deadline, _scrape(broker)[-3000:]
            time.sleep(0.5)  # polling /metrics until the pushed metrics show
            found = _pushed(broker, "tel-java", "org_apache_kafka_consumer_")
        assert 'client_instance_id="' in found[0]
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.flush()
            try:
                proc.wait(timeout=T)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=T)
        proc.communicate(timeout=T)
