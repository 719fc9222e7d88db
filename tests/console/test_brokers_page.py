"""The console's brokers page: the broker from DescribeCluster with its rates read from its own
``/metrics`` (bytes in while a producer writes, bytes out while a consumer reads), its partition
and leader counts, and an unreadable metrics URL named on the page without breaking it.  The
Prometheus text parser gets malformed pages (hypothesis): it never raises, and only well-formed
samples of the families it sums count."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given
from hypothesis import strategies as st

from odradek.console._scrape import parse_metrics, parse_table_lag
from odradek.testing import BrokerProcess
from tests.console.conftest import Console, wait_until
from tests.console.test_pages import _cells

T = 30.0


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("console-metrics-broker") / "data", overrides={"metrics.port": 0})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_the_brokers_page_shows_each_brokers_rates_from_its_metrics(mbroker: BrokerProcess) -> None:
    assert mbroker.metrics_url
    console = Console(mbroker.bootstrap, "--metrics-url", mbroker.metrics_url,
                      "--metrics-url", "http://127.0.0.1:9/metrics").start()
    try:
        admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
        for f in admin.create_topics([NewTopic("rates", 3, 1)]).values():
            f.result(T)
        stop = threading.Event()

        def produce() -> None:
            p = Producer({"bootstrap.servers": mbroker.bootstrap, "linger.ms": 5})
            while not stop.is_set():
                for _ in range(100):
                    p.produce("rates", b"x" * 1000)
                p.poll(0)
                time.sleep(0.05)
            p.flush(T)

        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        try:
            def row() -> list[str] | None:
                rows = _cells(console.page("/brokers"), "brokers")
                return rows[0] if rows and rows[0][3] not in ("-", "0.0") else None

            r = wait_until(row, T, "a bytes-in rate on the brokers page")
        finally:
            stop.set()
            writer.join(T)
        assert r[0] == "0 (controller)" and r[1] == mbroker.bootstrap
        assert float(r[3].replace(",", "")) > 1000  # bytes in/s: ~100 kB/s were written
        assert r[6] == r[7] and int(r[6]) >= 3  # partitions = leaders on a single node, incl. "rates"
        assert r[8] == "0"
        c = Consumer({"bootstrap.servers": mbroker.bootstrap, "group.id": "rates-reader",
                      "auto.offset.reset": "earliest"})
        c.subscribe(["rates"])
        try:
            def reading() -> list[str] | None:
                c.consume(500, 0.2)
                rows = _cells(console.page("/brokers"), "brokers")
                return rows[0] if rows[0][4] not in ("-", "0.0") else None

            r = wait_until(reading, T, "a bytes-out rate while a consumer reads")
            assert float(r[4].replace(",", "")) > 0
        finally:
            c.close()
        body = console.page("/brokers")
        assert 'data-testid="metrics-unread"' in body and "127.0.0.1:9/metrics" in body
    finally:
        console.stop()


def test_parse_metrics_sums_the_families_and_reads_the_broker_id() -> None:
    text = (
        "# HELP kafka_server_brokertopicmetrics_bytesin_total x\n"
        'kafka_server_brokertopicmetrics_bytesin_total{topic="a"} 10.0\n'
        'kafka_server_brokertopicmetrics_bytesin_total{topic="b"} 5\n'
        "kafka_server_brokertopicmetrics_replicationbytesout_total 7\n"
        'kafka_server_brokertopicmetrics_bytesout_total{topic="a"} 1e3\n'
        'kafka_network_requestmetrics_requests_total{request="Produce",version="9"} 4\n'
        "kafka_server_replicamanager_partitioncount 3\n"
        'kafka_server_app_info{id="7",version="1"} 1\n'
        "kafka_server_brokertopicmetrics_bytesin_total not-a-number\n"
    )
    assert parse_metrics(text) == (7, {"bytes_in": 15.0, "bytes_out": 1007.0, "requests": 4.0, "partitions": 3.0})


@given(st.text(max_size=400))
def test_parse_metrics_never_raises_on_malformed_pages(text: str) -> None:
    broker_id, values = parse_metrics(text)
    assert broker_id is None or isinstance(broker_id, int)
    assert all(isinstance(v, float) for v in values.values())


def test_parse_table_lag_reads_each_partitions_writer_lag() -> None:
    text = (
        'odradek_iceberg_writer_lag_records{partition="0",topic="orders"} 12.0\n'
        'odradek_iceberg_writer_lag_seconds{partition="0",topic="orders"} 1.5\n'
        'odradek_iceberg_writer_lag_records{partition="x",topic="orders"} 3\n'
        'odradek_iceberg_writer_lag_records{topic="orders"} 3\n'
    )
    assert parse_table_lag(text) == {("orders", 0): {"records": 12.0, "seconds": 1.5}}


@given(st.text(max_size=400))
def test_parse_table_lag_never_raises_on_malformed_pages(text: str) -> None:
    for (topic, partition), values in parse_table_lag("odradek_iceberg_writer_lag_" + text).items():
        assert isinstance(topic, str) and isinstance(partition, int)
        assert all(isinstance(v, float) for v in values.values())
