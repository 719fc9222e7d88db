"""``/metrics`` of a real broker while a confluent-kafka producer and consumer group run: the
counters agree with what was sent, consumer lag falls to 0, and the output parses."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from odradek.testing import BrokerProcess

TOPIC = "metered"
RECORDS = 3000
VALUE = 100  # bytes per record (no key, no headers)
# a v2 record without key or headers carries at most ~12 bytes of its own (length, attributes,
# timestamp and offset deltas, key and value lengths, header count); a batch adds 61 bytes
RECORD_OVERHEAD = 12
BATCH_OVERHEAD = 61


def scrape(url: str) -> dict[str, list[Any]]:
    """Every sample by family name (the text must parse with prometheus_client's parser)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(samples: dict[str, list[Any]], family: str, **labels: str) -> float:
    """The one sample of ``family`` whose labels are exactly ``labels`` (suffix samples excluded)."""
    found = [s.value for s in samples[family] if s.labels == labels]
    assert len(found) == 1, (family, labels, samples[family])
    return found[0]


def lag_of(samples: dict[str, list[Any]], group: str, topic: str) -> float | None:
    rows = [s.value for s in samples.get("kafka_consumergroup_lag_sum", [])
            if s.labels == {"consumergroup": group, "topic": topic}]
    return rows[0] if rows else None


def dashboard_series() -> set[str]:
    """The metric names docs/grafana/odradek.json queries."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "grafana" / "odradek.json").read_text()
    exprs = [t["expr"] for p in json.loads(text)["panels"] for t in p.get("targets", [])]
    return {n for e in exprs for n in re.findall(r"\b((?:kafka|odradek|process)_[a-z0-9_]+)", e)}


def wait_until(fn: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with BrokerProcess(
        tmp_path / "data",
        overrides={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1, "num.partitions": 3},
        extra_args=["--metrics-port", "0"],
    ) as b:
        yield b


def test_metrics_follow_a_producer_and_a_consumer_group(broker: BrokerProcess) -> None:
    url = broker.metrics_url
    assert url is not None and url.startswith("http://127.0.0.1:"), broker.ready_line

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    payload = b"x" * VALUE
    for i in range(RECORDS):
        producer.produce(TOPIC, payload, partition=i % 3)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0

    m = scrape(url)
    assert value(m, "kafka_server_brokertopicmetrics_messagesin", topic=TOPIC) == RECORDS
    batches = value(m, "kafka_server_brokertopicmetrics_totalproducerequests", topic=TOPIC)
    assert batches >= 3
    bytes_in = value(m, "kafka_server_brokertopicmetrics_bytesin", topic=TOPIC)
    assert RECORDS * VALUE < bytes_in <= RECORDS * (VALUE + RECORD_OVERHEAD) + batches * BATCH_OVERHEAD
    # the broker-wide meter has no topic label and covers this topic
    assert value(m, "kafka_server_brokertopicmetrics_messagesin") >= RECORDS
    assert value(m, "kafka_server_brokertopicmetrics_failedproducerequests", topic=TOPIC) == 0
    produce_requests = sum(
        s.value for s in m["kafka_network_requestmetrics_requests"] if s.labels["request"] == "Produce"
    )
    assert produce_requests >= 1
    times = {s.labels["request"]: s.value for s in m["kafka_network_requestmetrics_totaltimems"]
             if s.name.endswith("_count")}
    assert times["Produce"] == produce_requests
    assert times["Metadata"] >= 1
    assert value(m, "kafka_server_replicamanager_partitioncount") == 3
    assert value(m, "kafka_server_replicamanager_leadercount") == 3
    assert value(m, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    ends = {s.labels["partition"]: s.value for s in m["kafka_log_log_logendoffset"] if s.labels["topic"] == TOPIC}
    assert ends == {"0": RECORDS / 3, "1": RECORDS / 3, "2": RECORDS / 3}
    size = sum(s.value for s in m["kafka_log_log_size"] if s.labels["topic"] == TOPIC)
    assert size >= bytes_in  # what was appended is in the segments
    assert value(m, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1
    assert value(m, "kafka_server_socket_server_metrics_connection_creation", listener="PLAINTEXT") >= 1
    assert value(m, "process_resident_memory_bytes") > 0
    assert value(m, "process_open_fds") > 0

    # a consumer group reads half, commits, and its lag is the other half; then all of it: lag 0
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "readers", "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    try:
        consumer.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 30
        while got < RECORDS // 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        assert got >= RECORDS // 2
        consumer.commit(asynchronous=False)
        m = scrape(url)
        committed = {s.labels["partition"]: s.value for s in m["kafka_consumergroup_current_offset"]
                     if s.labels["consumergroup"] == "readers" and s.labels["topic"] == TOPIC}
        assert sum(committed.values()) == got
        # lag is known for the partitions the group has committed offsets for
        assert lag_of(m, "readers", TOPIC) == sum(RECORDS / 3 - c for c in committed.values()) > 0
        assert value(m, "kafka_coordinator_group_groupmetadatamanager_numgroupsstable") == 1
        assert value(m, "kafka_server_group_coordinator_metrics_group_completed_rebalance") >= 1
        assert value(m, "kafka_server_brokertopicmetrics_bytesout", topic=TOPIC) > 0
        while got < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        assert got == RECORDS
        consumer.commit(asynchronous=False)

        def caught_up() -> dict[str, list[Any]] | None:
            samples = scrape(url)
            return samples if lag_of(samples, "readers", TOPIC) == 0 else None

        m = wait_until(caught_up, 10, "lag 0")
        lags = [s.value for s in m["kafka_consumergroup_lag"] if s.labels["consumergroup"] == "readers"]
        assert lags == [0, 0, 0]
        # every byte appended went out to the consumer at least once
        assert value(m, "kafka_server_brokertopicmetrics_bytesout", topic=TOPIC) >= bytes_in
        assert value(m, "kafka_server_group_coordinator_metrics_offset_commit") >= 3
        fetches = sum(s.value for s in m["kafka_network_requestmetrics_requests"]
                      if s.labels["request"] == "FetchConsumer")
        assert fetches >= 1
        # every series the Grafana dashboard in the repo queries is exported
        exported = {s.name for samples in m.values() for s in samples}
        assert dashboard_series() - exported == set()
    finally:
        consumer.close()


def test_metrics_endpoint_paths_and_off_switch(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "on", extra_args=["--metrics-port", "0"]) as b:
        assert b.metrics_url is not None
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(b.metrics_url.replace("/metrics", "/nothing"), timeout=10)
        assert err.value.code == 404
        assert "kafka_server_replicamanager_partitioncount" in scrape(b.metrics_url)
    with BrokerProcess(tmp_path / "off", extra_args=["--metrics-port", "-1"]) as b:
        assert b.metrics_url is None
        assert "metrics at" not in b.ready_line
