"""Transactions v2 (KIP-890 part 2) on the wire, as a Kafka 4.x producer drives them once the
broker finalizes transaction.version 2:

- Produce v12 to a partition not yet in the transaction adds it (no AddPartitionsToTxn), through
  the transaction coordinator; a batch of an older epoch is refused INVALID_PRODUCER_EPOCH;
- EndTxn v5 bumps the producer epoch on every commit and abort and answers the new one; a retry
  (one epoch below) gets the same answer and writes nothing; a zombie's EndTxn is fenced; an abort
  of a transaction that added no partition is allowed (from a completed state) and bumps the epoch;
- TxnOffsetCommit v5 adds the group's offsets partition itself (no AddOffsetsToTxn), and the
  offsets are committed with the transaction;
- read_committed consumers see the committed transactions only;
- the transaction log holds TransactionLogValue v1 records with ClientTransactionVersion 2 and the
  previous producer id;
- transactions v1 clients (librdkafka, aiokafka) still work on the same broker.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.errors import ErrorCode
from odradek.protocol.messages.coordinator import TransactionLogValue
from odradek.protocol.messages.describe_transactions import DescribeTransactionsRequest
from odradek.protocol.messages.end_txn import EndTxnRequest
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest
from odradek.protocol.messages.produce import ProduceRequest
from odradek.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess, WireClient, wait_for

T = 30.0
OVERRIDES = {
    "transaction.state.log.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("txn-v2") / "data", overrides=OVERRIDES) as b:
        yield b


@pytest.fixture
def wire(broker: BrokerProcess) -> Iterator[WireClient]:
    w = WireClient(broker.host, broker.port, "tv2-test")
    try:
        yield w
    finally:
        w.close()


def _topic(broker: BrokerProcess, partitions: int = 2) -> str:
    name = f"tv2-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(T)
    return name


def _init(wire: WireClient, txn_id: str) -> tuple[int, int]:
    def init() -> tuple[int, int] | None:
        if wire.request(FindCoordinatorRequest(key=txn_id, key_type=1), 3).error_code:
            return None
        r = wire.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60000), 5)
        return (int(r.producer_id), int(r.producer_epoch)) if r.error_code == 0 else None

    return wait_for(init, T, f"InitProducerId of {txn_id}")


def _produce(
    wire: WireClient, topic: str, partition: int, txn_id: str, pid: int, epoch: int, seq: int, value: bytes,
    version: int = 12,
) -> Any:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    b.append(int(time.time() * 1000), None, value)
    req = ProduceRequest(transactional_id=txn_id, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=bytes(b.build()))
        ])
    ])
    return wire.request(req, version).responses[0].partition_responses[0]


def _end(wire: WireClient, txn_id: str, pid: int, epoch: int, commit: bool) -> Any:
    return wire.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit), 5)


def _end_retried(wire: WireClient, txn_id: str, pid: int, epoch: int, commit: bool) -> Any:
    def ended() -> Any:
        r = _end(wire, txn_id, pid, epoch, commit)
        return None if r.error_code == ErrorCode.CONCURRENT_TRANSACTIONS else r

    return wait_for(ended, T, f"EndTxn of {txn_id} past CONCURRENT_TRANSACTIONS")


def _state(wire: WireClient, txn_id: str) -> Any:
    [state] = wire.request(DescribeTransactionsRequest(transactional_ids=[txn_id]), 0).transaction_states
    return state


def _complete(wire: WireClient, txn_id: str, state: str) -> None:
    wait_for(lambda: _state(wire, txn_id).transaction_state == state, T, f"{txn_id} to be {state}")


def _read_committed(broker: BrokerProcess, topic: str, partitions: int = 2) -> list[bytes]:
    c = ck.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
        "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.partition.eof": True,
        "enable.auto.commit": False,
    })
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + T
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"no end of {topic}: {got}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                continue
            got.append(m.value())
        return sorted(got)
    finally:
        c.close()


def test_produce_v12_adds_partitions_and_end_txn_v5_bumps_the_epoch(broker: BrokerProcess, wire: WireClient) -> None:
    topic = _topic(broker)
    txn_id = f"tv2-{topic}"
    pid, e = _init(wire, txn_id)

    # no AddPartitionsToTxn: the first write to each partition adds it
    for partition in (0, 1):
        r = _produce(wire, topic, partition, txn_id, pid, e, 0, f"c{partition}".encode())
        assert (r.error_code, r.base_offset) == (0, 0), r
    st = _state(wire, txn_id)
    assert st.transaction_state == "Ongoing"
    assert sorted(p for t in st.topics for p in t.partitions) == [0, 1]
    r = _produce(wire, topic, 0, txn_id, pid, e, 1, b"c0-again")
    assert r.error_code == 0

    r = _end(wire, txn_id, pid, e, commit=True)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, e + 1)
    # a retry of that end (the client did not get the answer): the same answer, nothing written;
    # while the markers are being written it is CONCURRENT_TRANSACTIONS, as in Kafka, which the
    # client retries
    r = _end_retried(wire, txn_id, pid, e, commit=True)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, e + 1)
    _complete(wire, txn_id, "CompleteCommit")
    # the same epoch again is a new end, of no transaction: committing nothing is invalid
    assert _end(wire, txn_id, pid, e + 1, commit=True).error_code == ErrorCode.INVALID_TXN_STATE
    assert _read_committed(broker, topic) == [b"c0", b"c0-again", b"c1"]

    # the next transaction goes on with the new epoch, sequences from 0; aborted, it is not read
    r = _produce(wire, topic, 1, txn_id, pid, e + 1, 0, b"aborted")
    assert r.error_code == 0, r
    r = _end(wire, txn_id, pid, e + 1, commit=False)
    assert (r.error_code, r.producer_epoch) == (0, e + 2)
    _complete(wire, txn_id, "CompleteAbort")
    # an abort with no partition added at all is allowed (v2) and bumps the epoch too
    r = _end(wire, txn_id, pid, e + 2, commit=False)
    assert (r.error_code, r.producer_epoch) == (0, e + 3)
    _complete(wire, txn_id, "CompleteAbort")
    assert _read_committed(broker, topic) == [b"c0", b"c0-again", b"c1"]

    # a zombie of an older epoch: its batch and its end are fenced
    r = _produce(wire, topic, 0, txn_id, pid, e + 1, 5, b"zombie")
    assert r.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _end(wire, txn_id, pid, e, commit=True).error_code == ErrorCode.PRODUCER_FENCED


def test_txn_offset_commit_v5_adds_the_group_itself(broker: BrokerProcess, wire: WireClient) -> None:
    topic = _topic(broker, 1)
    txn_id, group = f"tv2-offsets-{topic}", f"g-{topic}"
    pid, e = _init(wire, txn_id)
    assert _produce(wire, topic, 0, txn_id, pid, e, 0, b"v").error_code == 0
    Q = TxnOffsetCommitRequest

    def commit() -> bool:
        # a client finds the group's coordinator first (which creates __consumer_offsets)
        if wire.request(FindCoordinatorRequest(key=group, key_type=0), 3).error_code:
            return False
        r = wire.request(Q(transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=e, topics=[
            Q.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                Q.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=42, committed_metadata="m")
            ])
        ]), 5)
        code = r.topics[0].partitions[0].error_code
        assert code in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.NOT_COORDINATOR), code
        return code == 0

    wait_for(commit, T, "the transactional offset commit")
    st = _state(wire, txn_id)
    assert st.transaction_state == "Ongoing"
    r = _end(wire, txn_id, pid, e, commit=True)
    assert (r.error_code, r.producer_epoch) == (0, e + 1)

    def committed() -> int:
        R = OffsetFetchRequest
        resp = wire.request(R(group_id=group, topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])],
                              require_stable=True), 7)
        return int(resp.topics[0].partitions[0].committed_offset)

    wait_for(lambda: committed() == 42, T, "the committed offset")


def test_the_transaction_log_holds_v1_records_with_the_client_version(broker: BrokerProcess, wire: WireClient) -> None:
    topic = _topic(broker, 1)
    txn_id = f"tv2-log-{topic}"
    pid, e = _init(wire, txn_id)
    assert _produce(wire, topic, 0, txn_id, pid, e, 0, b"x").error_code == 0
    assert _end(wire, txn_id, pid, e, commit=True).error_code == 0
    _complete(wire, txn_id, "CompleteCommit")
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"log-{topic}", "enable.auto.commit": False,
                     "enable.partition.eof": True})
    values = []
    try:
        c.assign([ck.TopicPartition("__transaction_state", 0, 0)])
        deadline = time.monotonic() + T
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                break
            key = m.key()
            if key is not None and txn_id.encode() in key and m.value() is not None:
                values.append(m.value())
    finally:
        c.close()
    decoded = []
    for v in values:
        (version,) = struct.unpack_from(">h", v)
        assert version == 1
        decoded.append(TransactionLogValue.decode(v[2:], 1))
    # Ongoing (added by the produce), PrepareCommit (epoch bumped), CompleteCommit
    assert [(d.transaction_status, d.producer_epoch, d.client_transaction_version) for d in decoded[-3:]] == [
        (1, e, 2), (2, e + 1, 2), (4, e + 1, 2),
    ]
    assert decoded[-2].previous_producer_id == pid and decoded[-2].next_producer_id == -1


def test_transactions_v1_clients_still_work_on_the_same_broker(broker: BrokerProcess) -> None:
    topic = _topic(broker, 1)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"v1-{topic}"})
    p.init_transactions(T)
    p.begin_transaction()
    p.produce(topic, b"librdkafka")
    p.commit_transaction(T)
    p.begin_transaction()
    p.produce(topic, b"librdkafka-aborted")
    p.abort_transaction(T)

    async def aiokafka_txn() -> None:
        from aiokafka import AIOKafkaProducer

        prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"aio-{topic}")
        await prod.start()
        try:
            async with prod.transaction():
                await prod.send_and_wait(topic, b"aiokafka")
        finally:
            await prod.stop()

    asyncio.run(aiokafka_txn())
    assert _read_committed(broker, topic, 1) == [b"aiokafka", b"librdkafka"]


def test_the_broker_advertises_what_a_v2_producer_needs(broker: BrokerProcess, wire: WireClient) -> None:
    from odradek.protocol.messages.api_versions import ApiVersionsRequest

    r = wire.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4)
    keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert keys[0][1] >= 12 and keys[26][1] >= 5 and keys[28][1] >= 5
    assert {f.name: f.max_version_level for f in r.finalized_features}["transaction.version"] == 2
