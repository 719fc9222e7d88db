"""Transactions on a single-node broker with real clients (confluent-kafka's transactional
producer; confluent-kafka, kafka-python and aiokafka read_committed consumers)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess

OVERRIDES = {
    "transaction.state.log.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", overrides=OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures resolve
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    return name


def _read(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> list[bytes]:
    """Everything a consumer at ``isolation`` reads up to the end it may see."""
    c = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
        "auto.offset.reset": "earliest", "enable.partition.eof": True, "enable.auto.commit": False,
    })
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"no end of {topic} within 30 s: {got}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                continue
            eof.discard(m.partition())
            got.append(m.value())
        return got
    finally:
        c.close()


def _producer(bootstrap: str, txn_id: str, **extra: Any) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    p.init_transactions(30)
    return p


def test_aborted_records_are_invisible_to_read_committed_consumers(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = _topic(bs)
    p = _producer(bs, f"t-{topic}")
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"aborted-%d" % i)
    p.flush(30)  # sent: abort_transaction would otherwise purge them unsent
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"committed-%d" % i)
    p.commit_transaction(30)
    p.begin_transaction()  # a transaction with no records commits too
    p.commit_transaction(30)
    committed = [b"committed-%d" % i for i in range(5)]
    assert _read(bs, topic, "read_committed") == committed
    assert _read(bs, topic, "read_uncommitted") == [b"aborted-%d" % i for i in range(5)] + committed

    # kafka-python and aiokafka honour the aborted-transaction list the same way
    from kafka import KafkaConsumer

    kp = KafkaConsumer(topic, bootstrap_servers=bs, isolation_level="read_committed",
                       auto_offset_reset="earliest", consumer_timeout_ms=3000, group_id=None)
    try:
        assert [m.value for m in kp] == committed
    finally:
        kp.close()

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(topic, bootstrap_servers=bs, isolation_level="read_committed",
                             auto_offset_reset="earliest")
        await c.start()
        try:
            out: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(out) < len(committed) and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    out += [r.value for r in records if r.value is not None]
            return out
        finally:
            await c.stop()

    assert asyncio.run(aio()) == committed


def test_consume_transform_produce_commits_output_and_offsets_together(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    src, dst = _topic(bs, 2), _topic(bs)
    plain = ck.Producer({"bootstrap.servers": bs})
    for i in range(40):
        plain.produce(src, b"%d" % i, partition=i % 2)
    plain.flush(30)
    group = f"ctp-{src}"
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    p = _producer(bs, f"ctp-{src}")
    try:
        c.subscribe([src])
        copied = 0
        deadline = time.monotonic() + 60
        rounds = 0
        while copied < 40:
            assert time.monotonic() < deadline, f"copied {copied} of 40"
            msgs = [m for m in c.consume(10, 0.5) if m.error() is None]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, b"out-" + m.value())
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
            # every other round is aborted and redone: its output and offsets must vanish
            if rounds % 2 == 1:
                p.flush(30)
                p.abort_transaction(30)
                for m in _firsts(msgs):
                    c.seek(ck.TopicPartition(m.topic(), m.partition(), m.offset()))
            else:
                p.commit_transaction(30)
                copied += len(msgs)
            rounds += 1
        committed = c.committed([ck.TopicPartition(src, 0), ck.TopicPartition(src, 1)], 10)
    finally:
        c.close()
    assert {(tp.partition, tp.offset) for tp in committed} == {(0, 20), (1, 20)}
    out = _read(bs, dst, "read_committed")
    assert sorted(out) == sorted(b"out-%d" % i for i in range(40))  # each input once, none of the aborted


def _firsts(msgs: list[Any]) -> list[Any]:
    first: dict[tuple[str, int], Any] = {}
    for m in msgs:
        first.setdefault((m.topic(), m.partition()), m)
    return list(first.values())


def test_a_zombie_producer_is_fenced(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = _topic(bs)
    txn_id = f"z-{topic}"
    old = _producer(bs, txn_id)
    old.begin_transaction()
    old.produce(topic, b"zombie-open")
    old.flush(30)
    new = _producer(bs, txn_id)  # InitProducerId aborts the old one's open transaction first
    new.begin_transaction()
    new.produce(topic, b"new")
    new.commit_transaction(30)
    old.produce(topic, b"zombie-more")
    with pytest.raises(ck.KafkaException) as info:
        old.commit_transaction(10)
    assert info.value.args[0].code() == ck.KafkaError._FENCED and info.value.args[0].fatal()
    assert _read(bs, topic, "read_committed") == [b"new"]


def test_an_open_transaction_past_its_timeout_is_aborted(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = _topic(bs)
    p = _producer(bs, f"slow-{topic}", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce(topic, b"never")
    p.flush(30)
    plain = ck.Producer({"bootstrap.servers": bs})
    plain.produce(topic, b"after")  # held back from read_committed readers by the open transaction
    plain.flush(30)
    # the coordinator aborts it: read_committed readers get past it without any commit
    deadline = time.monotonic() + 30
    while _read(bs, topic, "read_committed") != [b"after"]:
        assert time.monotonic() < deadline, "the timed-out transaction was never aborted"
        time.sleep(0.3)
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(10)  # its epoch was bumped: fenced (as Kafka answers EndTxn)


def test_a_restart_keeps_open_transactions_and_the_aborted_index(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    try:
        bs = b.bootstrap
        topic = _topic(bs)
        p = _producer(bs, "restart-1", **{"transaction.timeout.ms": 60000})
        p.begin_transaction()
        p.produce(topic, b"aborted")
        p.flush(30)
        p.abort_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"open")
        p.flush(30)
        plain = ck.Producer({"bootstrap.servers": bs})
        plain.produce(topic, b"plain")
        plain.flush(30)
        assert _read(bs, topic, "read_committed") == []  # held at the open transaction
        assert b.stop() == 0
        b.start()
        bs = b.bootstrap
        assert _read(bs, topic, "read_committed") == [], "the open transaction still holds the LSO"
        p2 = _producer(bs, "restart-1")  # the new instance aborts the open transaction
        p2.begin_transaction()
        p2.produce(topic, b"done")
        p2.commit_transaction(30)
        assert _read(bs, topic, "read_committed") == [b"plain", b"done"]
        assert _read(bs, topic, "read_uncommitted") == [b"aborted", b"open", b"plain", b"done"]
        txnindex = list((tmp_path / "data").glob(f"{topic}-0/*.txnindex"))
        assert len(txnindex) == 1 and txnindex[0].stat().st_size == 2 * 34  # two aborted transactions
    finally:
        b.stop()


def test_describe_and_list_transactions_and_producers(broker: BrokerProcess) -> None:
    from odradek.protocol.messages.describe_producers import DescribeProducersRequest as DP
    from odradek.protocol.messages.describe_transactions import DescribeTransactionsRequest as DT
    from odradek.protocol.messages.list_transactions import ListTransactionsRequest as LT
    from odradek.transport import BrokerConnection

    bs = broker.bootstrap
    topic = _topic(bs)
    txn_id = f"d-{topic}"
    p = _producer(bs, txn_id)
    p.begin_transaction()
    p.produce(topic, b"x")
    p.flush(30)
    conn = BrokerConnection(broker.host, broker.port, client_id="test", timeout=30)
    try:
        [st] = conn.request(DT(transactional_ids=[txn_id]), 0).transaction_states
        assert (st.error_code, st.transaction_state) == (0, "Ongoing")
        assert [(t.topic, t.partitions) for t in st.topics] == [(topic, [0])]
        assert st.producer_id >= 0 and st.transaction_start_time_ms > 0
        listed = conn.request(LT(state_filters=["Ongoing"]), 1).transaction_states
        assert (txn_id, st.producer_id) in {(s.transactional_id, s.producer_id) for s in listed}
        [tr] = conn.request(DP(topics=[DP.TopicRequest(name=topic, partition_indexes=[0])]), 0).topics
        [ps] = tr.partitions[0].active_producers
        assert (ps.producer_id, ps.current_txn_start_offset) == (st.producer_id, 0)
        p.commit_transaction(30)
        deadline = time.monotonic() + 10
        while conn.request(DT(transactional_ids=[txn_id]), 0).transaction_states[0].transaction_state != "CompleteCommit":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        [tr] = conn.request(DP(topics=[DP.TopicRequest(name=topic, partition_indexes=[0])]), 0).topics
        assert tr.partitions[0].active_producers[0].current_txn_start_offset == -1
        [unknown] = conn.request(DT(transactional_ids=["nobody"]), 0).transaction_states
        assert unknown.error_code != 0
    finally:
        conn.close()


def test_odradeks_consumers_read_committed(broker: BrokerProcess) -> None:
    from odradek.client import Consumer, SimpleConsumer

    bs = broker.bootstrap
    topic = _topic(bs)
    p = _producer(bs, f"o-{topic}")
    for commit in (False, True, False, True):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"%s-%d" % (b"c" if commit else b"a", i))
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    committed = [b"c-0", b"c-1", b"c-2"] * 2
    with SimpleConsumer(bootstrap_servers=bs, isolation_level="read_committed") as simple:
        got, offset = [], 0
        for _ in range(20):
            fetched = simple.fetch(topic, 0, offset)
            got += [r.value for r in fetched]
            if fetched.next_offset == offset:
                break
            offset = fetched.next_offset
    assert got == committed
    with Consumer(bootstrap_servers=bs, group_id=f"g-{topic}", isolation_level="read_committed",
                  auto_offset_reset="earliest") as c:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < len(committed) and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.5)]
    assert got == committed


def test_a_killed_consume_transform_produce_loop_yields_each_record_once(broker: BrokerProcess) -> None:
    """SIGKILLed at random points 20 times and restarted: the output holds every input record
    exactly once (read_committed) and the committed offsets are the input's end."""
    import random
    import signal
    import subprocess
    import sys

    bs = broker.bootstrap
    src, dst = _topic(bs, 2), _topic(bs)
    plain = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5})
    total = 3000
    for i in range(total):
        plain.produce(src, b"%d" % i, partition=i % 2)
    plain.flush(30)
    child = [sys.executable, str(Path(__file__).with_name("ctp_child.py")), bs, src, dst]
    rng = random.Random(7)
    for _round in range(20):
        proc = subprocess.Popen(child, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(rng.uniform(0.3, 1.5))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    assert _read(bs, dst, "read_committed"), "the killed runs committed nothing"
    done = subprocess.run(child, capture_output=True, timeout=180)  # the last run finishes the input
    assert done.returncode == 0, done.stderr[-2000:]
    out = _read(bs, dst, "read_committed")
    assert len(out) == total and set(out) == {b"out-%d" % i for i in range(total)}, (len(out), len(set(out)))
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": f"ctp-{src}"})
    try:
        committed = c.committed([ck.TopicPartition(src, 0), ck.TopicPartition(src, 1)], 10)
    finally:
        c.close()
    assert {(tp.partition, tp.offset) for tp in committed} == {(0, total // 2), (1, total // 2)}


def test_transactions_cli_lists_and_describes(broker: BrokerProcess) -> None:
    import json
    import subprocess
    import sys

    bs = broker.bootstrap
    topic = _topic(bs)
    txn_id = f"cli-{topic}"
    p = _producer(bs, txn_id)
    p.begin_transaction()
    p.produce(topic, b"x")
    p.flush(30)

    def cli(*args: str) -> Any:
        r = subprocess.run([sys.executable, "-m", "odradek", "transactions", "--bootstrap-server", bs, *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    listed = json.loads(cli("list", "--state", "Ongoing", "--output", "json"))
    [mine] = [t for t in listed if t["transactional_id"] == txn_id]
    assert mine["state"] == "Ongoing" and mine["producer_id"] >= 0
    assert all(t["state"] == "Ongoing" for t in listed)
    [d] = json.loads(cli("describe", "--transactional-id", txn_id, "--output", "json"))
    assert (d["state"], d["partitions"], d["coordinator"]) == ("Ongoing", [f"{topic}-0"], 0)
    p.commit_transaction(30)
    deadline = time.monotonic() + 10
    while "CompleteCommit" not in cli("describe", "--transactional-id", txn_id):
        assert time.monotonic() < deadline
        time.sleep(0.2)


def _txn_produce_request(topic: str, txn_id: str, pid: int, epoch: int, value: bytes) -> Any:
    from odradek.records import BatchBuilder
    from odradek.testing import produce_request

    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    b.append(int(time.time() * 1000), None, value)
    return produce_request(topic, bytes(b.build()), acks=-1, transactional_id=txn_id)


def test_a_batch_outside_any_transaction_is_refused_by_verification(broker: BrokerProcess) -> None:
    """KIP-890: a transactional batch for a partition its producer never added to a transaction
    (a late write of an aborted transaction, or a client bug) would open a transaction no
    coordinator knows and hang the partition's LSO; the leader asks the coordinator first."""
    from odradek.client import Producer
    from odradek.errors import ErrorCode
    from odradek.testing import WireClient

    bs = broker.bootstrap
    topic = _topic(bs)
    txn_id = f"verify-{topic}"
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    try:
        p.init_transactions(30)
        pid, epoch = p._core.producer_id, p._core.producer_epoch
        w = WireClient(broker.host, broker.port, "kip890-test")
        try:
            part = w.request(_txn_produce_request(topic, txn_id, pid, epoch, b"stray"), 9).responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.INVALID_TXN_STATE and part.base_offset == -1
            # an older epoch than the coordinator's: fenced, as the partition itself would say
            part = w.request(_txn_produce_request(topic, txn_id, pid, epoch - 1, b"zombie"), 9).responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        finally:
            w.close()
        # nothing was appended, nothing hangs: a plain record is readable by read_committed at once
        plain = ck.Producer({"bootstrap.servers": bs})
        plain.produce(topic, b"plain")
        plain.flush(30)
        assert _read(bs, topic, "read_uncommitted") == [b"plain"]
        assert _read(bs, topic, "read_committed") == [b"plain"]
        # and a real transaction (AddPartitionsToTxn first) passes verification
        p.begin_transaction()
        p.send(topic, b"in-txn", partition=0)
        p.commit_transaction(30)
        assert _read(bs, topic, "read_committed") == [b"plain", b"in-txn"]
    finally:
        p.close()
