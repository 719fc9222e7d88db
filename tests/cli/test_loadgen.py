"""The compiled load generator (``src/odradek/cli/loadgen/odradek_loadgen.c``, run by ``odradek bench``
and the benchmarks) builds, produces to a real Odradek broker and reads everything back: counts
only, never timings."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli import _loadgen
from odradek.testing import BrokerProcess

RECORDS = 10_000


@pytest.fixture(scope="module")
def loadgen() -> str:
    try:
        return str(_loadgen.binary())
    except _loadgen.LoadgenUnavailable as exc:  # scripts/test.sh installs gcc and librdkafka-dev
        pytest.fail(str(exc), pytrace=False)


@pytest.mark.slow
def test_produce_then_consume_counts(loadgen: str, tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("loadgen", 4, 1)])["loadgen"].result(30)

        produced = _loadgen.run_produce(
            broker.bootstrap, "loadgen", RECORDS, record_size=100, acks="all", clients=2,
            config={"linger.ms": 5}, timeout=120,
        )
        assert produced["mode"] == "produce"
        assert produced["records"] == RECORDS
        assert produced["sent"] == RECORDS
        assert produced["bytes"] == RECORDS * 100
        assert produced["errors"] == 0 and produced["undelivered"] == 0
        assert produced["partitions"] == 4
        assert produced["latency_ms"]["produce_to_ack"]["count"] == RECORDS
        assert produced["exit_code"] == 0

        consumed = _loadgen.run_consume(broker.bootstrap, "loadgen", RECORDS, clients=2, timeout=120)
        assert consumed["mode"] == "consume"
        assert consumed["records"] == RECORDS
        assert consumed["bytes"] == RECORDS * 100
        assert consumed["errors"] == 0
        assert consumed["exit_code"] == 0
        assert produced["allocator"] == consumed["allocator"] == "libc"

        # the same read with jemalloc preloaded (scripts/test.sh installs libjemalloc2)
        again = _loadgen.run_consume(broker.bootstrap, "loadgen", RECORDS, clients=2, timeout=120, allocator="jemalloc")
        assert again["allocator"] == "jemalloc"
        assert again["records"] == RECORDS and again["errors"] == 0


@pytest.mark.slow
def test_an_idempotent_producer_sends_once_it_has_its_producer_id(loadgen: str, tmp_path: Path) -> None:
    """With ``enable.idempotence=true`` the load generator waits, before its window, for the
    producer id (read from librdkafka's statistics; a wrong reading ends it after 30 s with exit 2)."""
    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("idem", 2, 1)])["idem"].result(30)
        produced = _loadgen.run_produce(
            broker.bootstrap, "idem", 2000, record_size=100, acks="all", clients=2,
            config={"enable.idempotence": "true", "linger.ms": 5}, timeout=60,
        )
        assert produced["records"] == 2000 and produced["errors"] == 0 and produced["undelivered"] == 0
        assert produced["exit_code"] == 0
        consumed = _loadgen.run_consume(broker.bootstrap, "idem", 2000, timeout=60)
        assert consumed["records"] == 2000


@pytest.mark.slow
def test_transactional_producers_commit_every_record(loadgen: str, tmp_path: Path) -> None:
    """With ``transaction_records`` each instance sends transactions of that many records: 2
    instances x 1,250 records in transactions of 1,000 are 4 commits (the last of each instance
    is the 250 left over), and a read_committed consumer sees all 2,500 (a transaction left
    open would hold its partition's last stable offset, and the read would stop short)."""
    with BrokerProcess(tmp_path / "data", overrides={"transaction.state.log.num.partitions": 2}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("txn", 2, 1)])["txn"].result(30)
        produced = _loadgen.run_produce(
            broker.bootstrap, "txn", 2500, record_size=100, acks="all", clients=2, transaction_records=1000,
            config={"linger.ms": 5}, timeout=120,
        )
        assert produced["records"] == 2500 and produced["errors"] == 0 and produced["undelivered"] == 0
        assert produced["transaction_records"] == 1000
        assert produced["transactions"] == 4
        assert produced["latency_ms"]["commit"]["count"] == 4
        assert produced["window"] == "first produce() to last commit_transaction()"
        consumed = _loadgen.run_consume(
            broker.bootstrap, "txn", 2500, config={"isolation.level": "read_committed"}, idle_timeout=10, timeout=60,
            check=False,
        )
        assert consumed["records"] == 2500
