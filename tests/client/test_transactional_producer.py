"""Odradek's transactional Producer and AsyncProducer against a real broker, checked with
librdkafka read_committed / read_uncommitted consumers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from prometheus_client.parser import text_string_to_metric_families

from odradek.client import Admin, AsyncProducer, Consumer, NewTopic, Producer
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, BrokerProcess]]:
    """A default broker (``transaction.version`` 2 finalized: the producer uses transactions v2)
    and one downgraded to ``transaction.version=1`` (transactions v1), both with their metrics."""
    started: dict[str, BrokerProcess] = {}
    try:
        for name in ("v2", "v1"):
            b = BrokerProcess(tmp_path_factory.mktemp(f"tp-{name}") / "data", overrides={
                "transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2,
                "group.initial.rebalance.delay.ms": 0,
            }, extra_args=["--metrics-port", "0"])
            b.start()
            started[name] = b
        r = subprocess.run([sys.executable, "-m", "odradek", "features", "downgrade", "--feature", "transaction.version=1",
                            "-b", started["v1"].bootstrap], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        yield started
    finally:
        for b in started.values():
            b.stop()


@pytest.fixture(params=["v2", "v1"])
def broker(request: pytest.FixtureRequest, brokers: dict[str, BrokerProcess]) -> BrokerProcess:
    return brokers[request.param]


@pytest.fixture
def broker_v1(brokers: dict[str, BrokerProcess]) -> BrokerProcess:
    return brokers["v1"]


def _topic(bs: str, partitions: int = 1) -> str:
    name = f"tp-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics([NewTopic(name, partitions, 1)], timeout=30)
    return name


def _read(bs: str, topic: str, isolation: str, partition: int = 0) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": f"r-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
                     "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, partition, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                return got
            got.append(m.value())
    finally:
        c.close()


def test_commit_abort_and_offsets_in_a_transaction(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    src, dst = _topic(bs), _topic(bs)
    with Producer(bootstrap_servers=bs) as plain:
        for i in range(10):
            plain.send(src, b"%d" % i)
    with (
        Producer(bootstrap_servers=bs, transactional_id=f"p-{dst}") as p,
        Consumer(bootstrap_servers=bs, group_id=f"g-{dst}", isolation_level="read_committed",
                 auto_offset_reset="earliest", enable_auto_commit=False) as c,
    ):
        with pytest.raises(KafkaError):
            p.send(dst, b"too early")  # before init_transactions / begin_transaction
        p.init_transactions(30)
        p.begin_transaction()
        p.send(dst, b"aborted")
        p.flush(30)
        p.abort_transaction(30)
        c.subscribe([src])
        got: list[object] = []
        deadline = time.monotonic() + 20
        while len(got) < 10:
            assert time.monotonic() < deadline
            got += c.poll(0.5)
        p.begin_transaction()
        for r in got:
            p.send(dst, b"out-" + r.value)  # type: ignore[attr-defined]
        p.send_offsets_to_transaction({(src, 0): 10}, c.consumer_group_metadata())
        p.commit_transaction(30)
        p.begin_transaction()
        p.commit_transaction(30)  # an empty transaction
        assert c.committed([(src, 0)]) == {(src, 0): 10}
    out = [b"out-%d" % i for i in range(10)]
    assert _read(bs, dst, "read_committed") == out
    assert _read(bs, dst, "read_uncommitted") == [b"aborted", *out]


def test_a_second_instance_fences_the_first(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = _topic(bs)
    txn_id = f"f-{topic}"
    with Producer(bootstrap_servers=bs, transactional_id=txn_id) as old:
        old.init_transactions(30)
        old.begin_transaction()
        old.send(topic, b"old")
        old.flush(30)
        with Producer(bootstrap_servers=bs, transactional_id=txn_id) as new:
            new.init_transactions(30)  # aborts the old instance's open transaction
            new.begin_transaction()
            new.send(topic, b"new")
            new.commit_transaction(30)
        with pytest.raises(KafkaError) as info:
            old.commit_transaction(30)
        assert info.value.code is ErrorCode.PRODUCER_FENCED
    assert _read(bs, topic, "read_committed") == [b"new"]


def test_the_async_producer_commits_transactions(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = _topic(bs)

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=bs, transactional_id=f"a-{topic}") as p:
            await p.init_transactions(30)
            for n in range(3):
                p.begin_transaction()
                await p.send(topic, b"v%d" % n)
                if n == 1:
                    await p.abort_transaction(30)
                else:
                    await p.commit_transaction(30)

    asyncio.run(main())
    assert _read(bs, topic, "read_committed") == [b"v0", b"v2"]


def test_partitions_join_the_transaction_before_their_batches_are_sent(broker_v1: BrokerProcess) -> None:
    """Transactions v1: AddPartitionsToTxn goes out when a partition gets its first record of the
    transaction (as the Java client does), not when its batch is sent: with linger.ms=5000 the
    coordinator has the partition long before the batch leaves."""
    broker = broker_v1
    bs = broker.bootstrap
    topic = _topic(bs, partitions=2)
    txn_id = f"early-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id, "linger.ms": 5000})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        sent_at = time.monotonic()
        p.send(topic, b"first", partition=1)
        with Admin({"bootstrap.servers": bs}) as admin:
            while True:
                desc = admin.describe_transactions([txn_id], timeout=10)[txn_id]
                if desc.partitions:
                    break
                assert time.monotonic() - sent_at < 3, "the partition joined only with its batch"
                time.sleep(0.05)
        assert desc.state == "Ongoing" and desc.partitions == [(topic, 1)]
        assert _read(bs, topic, "read_uncommitted", partition=1) == []  # the batch itself still lingers
        p.commit_transaction(30)
    finally:
        p.close()
    assert _read(bs, topic, "read_committed", partition=1) == [b"first"]


def _requests(broker: BrokerProcess) -> Counter[tuple[str, int]]:
    """The broker's count of requests answered, by (request name, version), from its metrics."""
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    out: Counter[tuple[str, int]] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name == "kafka_network_requestmetrics_requests":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[(s.labels["request"], int(s.labels["version"]))] += int(s.value)
    return out


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_the_transaction_requests_on_the_wire(brokers: dict[str, BrokerProcess], version: str) -> None:
    """Transactions v2 against a broker that finalizes ``transaction.version`` 2: Produce v12,
    TxnOffsetCommit v5, EndTxn v5 (the epoch bumped by each, taken from its answer), and no
    AddPartitionsToTxn or AddOffsetsToTxn; after ``odradek features downgrade --feature
    transaction.version=1``, transactions v1: both add requests, Produce v11, EndTxn v4,
    TxnOffsetCommit v4.  Counted by the broker (its request metrics), with commits, an abort,
    offsets in a transaction and read_committed reads."""
    broker = brokers[version]
    bs = broker.bootstrap
    topic = _topic(bs, partitions=2)
    before = _requests(broker)
    with Producer(bootstrap_servers=bs, transactional_id=f"w-{topic}") as p:
        p.init_transactions(30)
        epochs = [p._core.txns.manager().producer_epoch]
        for n in range(3):
            p.begin_transaction()
            p.send(topic, b"a%d" % n, partition=0)
            p.send(topic, b"b%d" % n, partition=1)
            if n == 0:
                p.send_offsets_to_transaction({(topic, 0): 1}, f"g-{topic}")
            if n == 1:
                p.flush(30)  # on the log, then aborted
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
            epochs.append(p._core.txns.manager().producer_epoch)
    sent = _requests(broker) - before
    by_name: Counter[str] = Counter()
    for (name, _v), n in sent.items():
        by_name[name] += n
    versions = {name: sorted({v for (nm, v) in sent if nm == name}) for name in by_name}
    assert by_name["EndTxn"] == 3, sent
    assert by_name["TxnOffsetCommit"] == 1, sent
    if version == "v2":
        assert by_name["AddPartitionsToTxn"] == by_name["AddOffsetsToTxn"] == 0, sent
        assert (versions["Produce"], versions["EndTxn"], versions["TxnOffsetCommit"]) == ([12], [5], [5]), sent
        assert epochs == [epochs[0] + i for i in range(4)]  # bumped by each EndTxn
    else:
        assert by_name["AddPartitionsToTxn"] >= 3 and by_name["AddOffsetsToTxn"] == 1, sent
        assert (versions["Produce"], versions["EndTxn"], versions["TxnOffsetCommit"]) == ([11], [4], [4]), sent
        assert len(set(epochs)) == 1
    assert _read(bs, topic, "read_committed", 0) == [b"a0", b"a2"]
    assert _read(bs, topic, "read_committed", 1) == [b"b0", b"b2"]
    assert _read(bs, topic, "read_uncommitted", 1) == [b"b0", b"b1", b"b2"]


def test_aborts_racing_their_batches_then_a_commit(broker: BrokerProcess) -> None:
    """Aborts right after the sends (their batches dropped unsent, or in flight, or written): the
    producer goes on with the epoch each EndTxn answered (v2), and the commit after them is read."""
    bs = broker.bootstrap
    topic = _topic(bs)
    with Producer(bootstrap_servers=bs, transactional_id=f"r-{topic}", linger_ms=0) as p:
        p.init_transactions(30)
        for n in range(5):
            p.begin_transaction()
            p.send(topic, b"gone%d" % n)
            if n % 2:
                time.sleep(0.01 * n)  # varies where the abort meets the batch; no test condition waits on it
            p.abort_transaction(30)
        p.begin_transaction()
        p.send(topic, b"kept")
        p.commit_transaction(30)
    assert _read(bs, topic, "read_committed") == [b"kept"]
