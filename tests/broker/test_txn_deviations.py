"""Transactions as Kafka answers old request versions and offsets sent without a member:

- KIP-588: a fenced producer is told PRODUCER_FENCED (90) only by the versions defined after it
  (AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2+, InitProducerId v4+); earlier ones get
  INVALID_PRODUCER_EPOCH (47), which their clients take for fatal.  librdkafka (AddOffsetsToTxn
  v0) took 90 for an abortable error, aiokafka (AddPartitionsToTxn v0) did not know it at all.
- TxnOffsetCommit v0-1 gets COORDINATOR_NOT_AVAILABLE where a newer one gets
  COORDINATOR_LOAD_IN_PROGRESS (clients before Kafka 2.0 failed on it, KAFKA-7296).
- TxnOffsetCommit is verified with the transaction coordinator (KIP-890), as Kafka verifies it:
  a fenced producer's offsets are refused.
- TxnOffsetCommit checks the member, the generation and the instance id only when it is given
  any of them: v0-2 cannot give them, and Java's ``sendOffsetsToTransaction(offsets, groupId)``
  gives none at any version, while the group has active members.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.errors import ErrorCode
from odradek.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from odradek.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from odradek.protocol.messages.describe_transactions import DescribeTransactionsRequest
from odradek.protocol.messages.end_txn import EndTxnRequest
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest
from odradek.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from odradek.testing import BrokerProcess, WireClient, wait_for
from tests.broker.inprocess import running_broker
from tests.groups.wire_group import (
    WireMember,
    all_stable,
    coordinator_loaded,
    fetch_offsets,
    find_coordinator,
)

T = 30.0
OVERRIDES: dict[str, object] = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("txn-deviations") / "data", overrides=OVERRIDES) as b:
        yield b


@pytest.fixture
def wire(broker: BrokerProcess) -> Iterator[WireClient]:
    w = WireClient(broker.host, broker.port)
    try:
        yield w
    finally:
        w.close()


def _topic(broker: BrokerProcess, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=T)[name].result(T)
    wait_for(lambda: name in admin.list_topics(timeout=T).topics, T, f"topic {name}")
    return name


def _init(wire: WireClient, txn_id: str, timeout_ms: int = 60000) -> tuple[int, int]:
    """InitProducerId of ``txn_id`` (retried while its coordinator is not ready)."""

    def init() -> tuple[int, int] | None:
        if wire.request(FindCoordinatorRequest(key=txn_id, key_type=1), 1).error_code:
            return None
        r = wire.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=timeout_ms), 1)
        return (int(r.producer_id), int(r.producer_epoch)) if r.error_code == 0 else None

    return wait_for(init, T, f"InitProducerId of {txn_id}")


def _txn_state(wire: WireClient, txn_id: str) -> str:
    [state] = wire.request(DescribeTransactionsRequest(transactional_ids=[txn_id]), 0).transaction_states
    return str(state.transaction_state)


# -- KIP-588 ---------------------------------------------------------------------------------------


def test_a_fenced_producer_is_told_in_the_codes_its_version_knows(broker: BrokerProcess, wire: WireClient) -> None:
    topic = _topic(broker)
    txn = f"fenced-{topic}"
    pid, stale = _init(wire, txn)
    _init(wire, txn)
    _init(wire, txn)  # the stale epoch is neither the current one nor the one before it

    def expected(version: int, first_knowing: int) -> ErrorCode:
        return ErrorCode.INVALID_PRODUCER_EPOCH if version < first_knowing else ErrorCode.PRODUCER_FENCED

    for v in range(4):
        r = wire.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=stale,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
        ), v)
        [t] = r.results_by_topic_v3_and_below
        assert [p.partition_error_code for p in t.results_by_partition] == [expected(v, 2)], f"AddPartitionsToTxn v{v}"
    for v in range(5):
        r = wire.request(AddOffsetsToTxnRequest(
            transactional_id=txn, producer_id=pid, producer_epoch=stale, group_id="g"
        ), v)
        assert r.error_code == expected(v, 2), f"AddOffsetsToTxn v{v}"
    for v in range(6):
        r = wire.request(EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=stale, committed=True), v)
        assert r.error_code == expected(v, 2), f"EndTxn v{v}"
    for v in (3, 4):
        r = wire.request(InitProducerIdRequest(
            transactional_id=txn, transaction_timeout_ms=60000, producer_id=pid, producer_epoch=stale
        ), v)
        assert r.error_code == expected(v, 4), f"InitProducerId v{v}"


def _wait_aborted(broker: BrokerProcess, txn_id: str) -> None:
    w = WireClient(broker.host, broker.port)
    try:
        wait_for(lambda: _txn_state(w, txn_id) == "CompleteAbort", T, f"the coordinator to abort {txn_id}")
    finally:
        w.close()


def test_librdkafka_fenced_after_its_transaction_timed_out_fails_fatally(broker: BrokerProcess) -> None:
    """The outside finding: AddOffsetsToTxn v0 of a producer whose transaction the coordinator
    aborted for its timeout (bumping the epoch)."""
    topic = _topic(broker)
    txn = f"slow-{topic}"
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn, "transaction.timeout.ms": 1000})
    p.init_transactions(T)
    p.begin_transaction()
    p.produce(topic, b"never", partition=0)
    p.flush(T)
    _wait_aborted(broker, txn)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}"})
    try:
        with pytest.raises(ck.KafkaException) as failed:
            p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 1)], c.consumer_group_metadata(), T)
    finally:
        c.close()
    error = failed.value.args[0]
    assert error.fatal() and not error.txn_requires_abort(), error
    assert error.code() == ck.KafkaError._FENCED, error


def test_aiokafka_fenced_after_its_transaction_timed_out_is_told_fenced(broker: BrokerProcess) -> None:
    """aiokafka adds a partition with AddPartitionsToTxn v0 and knows code 47, not 90."""
    topic = _topic(broker)
    txn = f"slow-aio-{topic}"

    async def scenario() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=txn, transaction_timeout_ms=1000)
        await p.start()
        try:
            await p.begin_transaction()
            await p.send_and_wait(topic, b"first", partition=0)
            await asyncio.to_thread(_wait_aborted, broker, txn)
            with pytest.raises(ProducerFenced):
                await p.send_and_wait(topic, b"second", partition=1)
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))


# -- TxnOffsetCommit ------------------------------------------------------------------------------


def _txn_commit(wire: WireClient, txn: str, pid: int, epoch: int, group: str, topic: str, offset: int,
                version: int, **member: Any) -> ErrorCode:
    R = TxnOffsetCommitRequest
    r = wire.request(R(
        transactional_id=txn, group_id=group, producer_id=pid, producer_epoch=epoch, topics=[
            R.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                R.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata="")
            ])
        ], **member,
    ), version)
    [t] = r.topics
    [part] = t.partitions
    return ErrorCode(part.error_code)


def _in_transaction(wire: WireClient, txn: str, group: str) -> tuple[int, int]:
    pid, epoch = _init(wire, txn)
    r = wire.request(AddOffsetsToTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, group_id=group), 0)
    assert r.error_code == 0, r.error_code
    return pid, epoch


def _end(wire: WireClient, txn: str, pid: int, epoch: int, commit: bool) -> None:
    def ended() -> bool:
        r = wire.request(EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit), 1)
        assert r.error_code in (0, ErrorCode.CONCURRENT_TRANSACTIONS), r.error_code
        return r.error_code == 0

    wait_for(ended, T, f"EndTxn of {txn}")


def test_txn_offset_commit_checks_the_member_only_when_one_is_given(broker: BrokerProcess, wire: WireClient) -> None:
    topic = _topic(broker, 1)
    group = f"g-{topic}"
    find_coordinator(wire, group)  # the first one creates __consumer_offsets
    wait_for(lambda: coordinator_loaded(wire, group), T, "the coordinator to load its offsets partition")
    member = WireMember(broker.host, broker.port, group, topic, 1, "active", session_timeout_ms=6000)
    member.start()
    try:
        wait_for(lambda: all_stable([member]), T, "the group's member to be stable")
        generation = member.generation
        # every version without member and generation (v0-2 have no such fields): accepted
        for version in range(5):
            txn = f"anon-{version}-{topic}"
            pid, epoch = _in_transaction(wire, txn, group)
            assert _txn_commit(wire, txn, pid, epoch, group, topic, 10 + version, version) is ErrorCode.NONE, version
            _end(wire, txn, pid, epoch, commit=True)
            wait_for(lambda v=version: fetch_offsets(wire, group, topic, [0]) == {0: 10 + v}, T, f"the v{version} offset")
        # when a member or a generation is given, both are checked (v3+)
        txn = f"named-{topic}"
        pid, epoch = _in_transaction(wire, txn, group)
        assert _txn_commit(wire, txn, pid, epoch, group, topic, 50, 3,
                           member_id="nobody", generation_id_or_member_epoch=generation) is ErrorCode.UNKNOWN_MEMBER_ID
        assert _txn_commit(wire, txn, pid, epoch, group, topic, 50, 3,
                           member_id="", generation_id_or_member_epoch=generation) is ErrorCode.UNKNOWN_MEMBER_ID
        assert _txn_commit(wire, txn, pid, epoch, group, topic, 50, 3,
                           member_id=member.member_id, generation_id_or_member_epoch=generation + 7) is ErrorCode.ILLEGAL_GENERATION
        assert _txn_commit(wire, txn, pid, epoch, group, topic, 50, 3,
                           member_id=member.member_id, generation_id_or_member_epoch=generation) is ErrorCode.NONE
        _end(wire, txn, pid, epoch, commit=True)
        wait_for(lambda: fetch_offsets(wire, group, topic, [0]) == {0: 50}, T, "the member's offset")
        assert not member.errors, member.errors
    finally:
        member.stop.set()
        member.close()


def test_txn_offset_commit_is_verified_with_the_transaction_coordinator(
    broker: BrokerProcess, wire: WireClient
) -> None:
    """KIP-890: offsets of a fenced producer, or of one that never added the group's offsets
    partition to its transaction, are refused; they were written in a transaction no marker would
    end, and the group's offsets were unstable for good."""
    topic = _topic(broker, 1)
    group = f"g-{topic}"
    find_coordinator(wire, group)
    wait_for(lambda: coordinator_loaded(wire, group), T, "the coordinator to load its offsets partition")
    txn = f"zombie-{topic}"
    pid, epoch = _init(wire, txn, timeout_ms=1000)
    r = wire.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
    ), 1)
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    # never AddOffsetsToTxn: its offsets are not part of its transaction
    for version in (0, 3):
        assert _txn_commit(wire, txn, pid, epoch, group, topic, 5, version) is ErrorCode.INVALID_TXN_STATE
    wait_for(lambda: _txn_state(wire, txn) == "CompleteAbort", T, f"the coordinator to abort {txn}")
    # fenced by the abort of its timed-out transaction
    for version in (0, 3):
        assert _txn_commit(wire, txn, pid, epoch, group, topic, 6, version) is ErrorCode.INVALID_PRODUCER_EPOCH
    R = OffsetFetchRequest
    r = wire.request(R(groups=[R.OffsetFetchRequestGroup(group_id=group, topics=[
        R.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])
    ])], require_stable=True), 8)
    [g] = r.groups
    assert g.error_code == 0 and [(p.committed_offset, p.error_code) for p in g.topics[0].partitions] == [(-1, 0)]


def test_aiokafka_sends_offsets_to_a_transaction_while_the_group_has_members(broker: BrokerProcess) -> None:
    """aiokafka's ``send_offsets_to_transaction(offsets, group_id)`` (TxnOffsetCommit v0) for a
    group a consumer is a member of: the offsets are committed with the transaction."""
    source, sink = _topic(broker, 1), _topic(broker, 1)
    group = f"g-{source}"

    async def scenario() -> None:
        consumer = AIOKafkaConsumer(source, bootstrap_servers=broker.bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            deadline = time.monotonic() + T
            while not consumer.assignment():  # an active member, with its partition
                assert time.monotonic() < deadline, "the consumer was never assigned its partition"
                await consumer.getmany(timeout_ms=200)
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"aio-{source}")
            await producer.start()
            try:
                async with producer.transaction():
                    await producer.send_and_wait(sink, b"out")
                    await producer.send_offsets_to_transaction({TopicPartition(source, 0): 3}, group)
            finally:
                await producer.stop()
            deadline = time.monotonic() + T
            while await consumer.committed(TopicPartition(source, 0)) != 3:
                assert time.monotonic() < deadline, "the transaction's offset was never committed"
                await asyncio.sleep(0.1)
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(scenario(), 90))


def test_txn_offset_commit_before_v2_is_not_told_the_coordinator_is_loading(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path / "data", overrides=dict(OVERRIDES)) as b:
            port = b.bound["PLAINTEXT"][1]
            w = await asyncio.to_thread(WireClient, "127.0.0.1", port)
            try:
                await b.groups.ensure_topic()
                for _ in range(500):
                    if 0 in b.groups.runtime.loaded():
                        break
                    await asyncio.sleep(0.01)
                b.groups.runtime.loading.add(0)  # as while it replays its partition after a leader change
                codes = {}
                for version in range(5):
                    codes[version] = await asyncio.to_thread(
                        _txn_commit, w, "loading", 1, 0, "g", "__consumer_offsets", 0, version
                    )
            finally:
                w.close()
        assert codes == {
            0: ErrorCode.COORDINATOR_NOT_AVAILABLE,
            1: ErrorCode.COORDINATOR_NOT_AVAILABLE,
            2: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            3: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            4: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        }

    asyncio.run(scenario())
