"""A data dir written by an earlier Odradek (tests/fixtures/upgrade: commit d65ee6b of
2026-12-06) starts under this version and serves what it held: every record with its key, value
and headers, the group's committed offsets and metadata, a committed and an aborted transaction
(read_committed sees only the first, the coordinator still knows the transactional id), the
idempotent producer's state, and the registered schema with its id and subject config."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import confluent_kafka as ck

from odradek.client.admin import Admin
from odradek.testing import BrokerProcess
from tests.registry.conftest import call

FIXTURE = Path(__file__).parent.parent / "fixtures" / "upgrade" / "odradek-d65ee6b.tar.gz"


#: the settings the fixture was written with (the coordinators' topics have 2 partitions)
WRITTEN_WITH = {
    "schema.registry.listeners": "http://127.0.0.1:0",
    "log.segment.bytes": 4096,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "num.partitions": 1,
}


def unpack(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data"


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int) -> list[ck.Message]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}", "enable.auto.commit": False,
                     "isolation.level": isolation, "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[ck.Message] = []
        eof: set[int] = set()
        for _ in range(600):  # bounded: at most 600 polls of 0.1 s
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    if len(eof) == partitions and len(got) >= expected:
                        break
                    continue
                raise AssertionError(m.error())
            got.append(m)
        return got
    finally:
        c.close()


def test_a_data_dir_of_an_earlier_version_starts_and_serves_its_data(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    before = {p.relative_to(data): p.read_bytes() for p in data.rglob("*.log")}
    broker = BrokerProcess(data, overrides=WRITTEN_WITH)
    broker.start()
    try:
        # every record of the idempotent producer, in order, with its key, value and header
        records = consume_all(broker.bootstrap, "plain", 2, "read_uncommitted", 300)
        for p in (0, 1):
            mine = [m for m in records if m.partition() == p]
            assert [m.offset() for m in mine] == list(range(150))
            assert [m.key() for m in mine] == [f"k{i}".encode() for i in range(p, 300, 2)]
            assert [m.value() for m in mine] == [f"v{i}".encode() * 5 for i in range(p, 300, 2)]
            assert all(m.headers() == [("h", b"x")] for m in mine)

        # the transactions: read_committed sees the committed one only
        committed = consume_all(broker.bootstrap, "txn", 1, "read_committed", 5)
        assert [m.value() for m in committed] == [f"committed{i}".encode() for i in range(5)]
        uncommitted = consume_all(broker.bootstrap, "txn", 1, "read_uncommitted", 8)
        assert [m.value() for m in uncommitted] == (
            [f"committed{i}".encode() for i in range(5)] + [f"aborted{i}".encode() for i in range(3)]
        )

        # the group's committed offsets and their metadata
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fixture-group"})
        try:
            offsets = c.committed([ck.TopicPartition("plain", 0), ck.TopicPartition("plain", 1)], timeout=30)
        finally:
            c.close()
        assert [(tp.partition, tp.offset, tp.metadata) for tp in offsets] == [(0, 17, None), (1, 23, "meta-1")]

        with Admin(bootstrap_servers=broker.bootstrap, default_api_timeout_ms=30000) as admin:
            # the transaction coordinator's state of the transactional id
            txn = admin.describe_transactions(["fixture-txn"])["fixture-txn"]
            assert txn.state == "CompleteAbort"
            assert txn.producer_id >= 0
            # the partition leader's producer state (from the snapshots and the log)
            producers = admin.describe_producers([("txn", 0)])[("txn", 0)]
            assert [p.producer_id for p in producers] == [txn.producer_id]

        # the registry: the schema under its id and version, the subject's compatibility
        url = broker.registry_url
        assert url is not None
        version = call("GET", f"{url}/subjects/fixture-value/versions/1").json
        assert version["id"] == 1
        assert json.loads(version["schema"]) == {
            "type": "record", "name": "Fixture", "fields": [{"name": "a", "type": "int"}]
        }
        assert call("GET", f"{url}/config/fixture-value").json["compatibilityLevel"] == "FULL"
        assert call("POST", f"{url}/subjects/other-value/versions",
                    {"schema": json.dumps({"type": "string"})}).json["id"] == 2

        # and it takes new records after the old ones
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        p.produce("plain", value=b"after", partition=0)
        assert p.flush(30) == 0
        after = consume_all(broker.bootstrap, "plain", 1, "read_uncommitted", 151)
        assert (after[-1].offset(), after[-1].value()) == (150, b"after")
    finally:
        broker.stop()
    # the old segments were read in place, not rewritten or truncated
    for name, content in before.items():
        assert (data / name).read_bytes()[: len(content)] == content


def test_coordinators_find_their_keys_by_the_topics_partition_counts(tmp_path: Path) -> None:
    """Started without the partition counts the fixture was written with (the defaults, 50),
    the coordinators still find the group and the transactional id in the 2-partition topics, as
    Kafka does (it hashes by the topic's partition count once the topic exists)."""
    data = unpack(tmp_path)
    broker = BrokerProcess(data, overrides={"log.segment.bytes": 4096})
    broker.start()
    try:
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fixture-group"})
        try:
            offsets = c.committed([ck.TopicPartition("plain", 0), ck.TopicPartition("plain", 1)], timeout=30)
        finally:
            c.close()
        assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 17), (1, 23)]
        with Admin(bootstrap_servers=broker.bootstrap, default_api_timeout_ms=30000) as admin:
            assert admin.describe_transactions(["fixture-txn"])["fixture-txn"].state == "CompleteAbort"
        # a new transaction with the same id goes on from the stored state
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "fixture-txn"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("txn", value=b"after")
        p.commit_transaction(30)
    finally:
        broker.stop()
