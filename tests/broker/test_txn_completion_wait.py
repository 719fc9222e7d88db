"""A producer's next AddPartitionsToTxn waits for the markers of its previous transaction
instead of answering CONCURRENT_TRANSACTIONS at once (clients back off ~20 ms on that answer),
and still answers it when the markers take longer than the coordinator waits."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.app import Broker
from odradek.broker.coordinators import transactions as txn_coordinator
from odradek.broker.topics import TRANSACTION_TOPIC
from odradek.client import Admin, NewTopic
from odradek.cluster.transactions import TxnState
from odradek.errors import ErrorCode, KafkaError
from tests.broker.inprocess import hosted, running_broker

TOPIC = "orders"
TXN = "completion-wait"


async def _ready(broker: Broker) -> None:
    bootstrap = f"127.0.0.1:{broker.bound['PLAINTEXT'][1]}"

    def create() -> None:
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1)])

    await asyncio.to_thread(create)
    await hosted(broker, TOPIC)
    coordinator = broker.txns
    await coordinator.ensure_topic()
    for _ in range(500):  # the coordinator loads its partitions once it leads them
        try:
            coordinator.check(TXN)
            return
        except KafkaError:
            await asyncio.sleep(0.01)
    raise AssertionError("the transaction coordinator never serves the id")


def _gate_markers(broker: Broker) -> asyncio.Event:
    """Markers wait for the returned event before they are written."""
    coordinator = broker.txns
    write = coordinator.local_markers
    gate = asyncio.Event()

    async def gated(*args: Any) -> Any:
        await gate.wait()
        return await write(*args)

    coordinator.local_markers = gated
    return gate


async def _committing(broker: Broker) -> tuple[int, int, asyncio.Event]:
    """A transaction of TXN on TOPIC-0 whose EndTxn(commit) was answered while its markers wait
    for the returned event: (producer id, epoch, the event)."""
    coordinator = broker.txns
    pid, epoch = await coordinator.init_producer_id(TXN, 60_000)
    await coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)])
    gate = _gate_markers(broker)
    await coordinator.end_txn(TXN, pid, epoch, commit=True)
    assert coordinator.metadata(TXN).state is TxnState.PREPARE_COMMIT
    return pid, epoch, gate


def test_add_partitions_waits_for_the_previous_transaction_to_complete(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await _ready(broker)
            coordinator = broker.txns
            pid, epoch, gate = await _committing(broker)
            nxt = asyncio.ensure_future(coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)]))
            await asyncio.sleep(0.2)
            assert not nxt.done(), "answered while the markers were still unwritten"
            gate.set()
            await asyncio.wait_for(nxt, 10)  # no CONCURRENT_TRANSACTIONS
            meta = coordinator.metadata(TXN)
            assert meta.state is TxnState.ONGOING and meta.partitions == {(TOPIC, 0)}

    asyncio.run(scenario())


def test_markers_slower_than_the_wait_still_get_concurrent_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(txn_coordinator, "COMPLETION_WAIT_S", 0.1)

    async def scenario() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await _ready(broker)
            coordinator = broker.txns
            pid, epoch, gate = await _committing(broker)
            with pytest.raises(KafkaError) as caught:
                await asyncio.wait_for(coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)]), 10)
            assert caught.value.code is ErrorCode.CONCURRENT_TRANSACTIONS
            # the waiter gave up; the completion did not: once the markers go out it finishes
            gate.set()
            for _ in range(500):
                if coordinator.metadata(TXN).state is TxnState.COMPLETE_COMMIT:
                    break
                await asyncio.sleep(0.01)
            assert coordinator.metadata(TXN).state is TxnState.COMPLETE_COMMIT
            await coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)])
            assert coordinator.metadata(TXN).state is TxnState.ONGOING

    asyncio.run(scenario())


def test_a_request_waiting_for_the_markers_is_told_not_coordinator_when_the_partition_moves(tmp_path: Path) -> None:
    """The transaction log partition moves away while AddPartitionsToTxn waits for the previous
    transaction's markers: the producer is told NOT_COORDINATOR (it finds the new coordinator),
    not INVALID_PRODUCER_ID_MAPPING (fatal for it) from the state this broker just dropped."""

    async def scenario() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await _ready(broker)
            coordinator = broker.txns
            pid, epoch, _gate = await _committing(broker)
            nxt = asyncio.ensure_future(coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)]))
            await asyncio.sleep(0)  # it runs up to its wait for the markers
            assert not nxt.done()
            p = broker.replicas.get(TRANSACTION_TOPIC, coordinator.partition_for(TXN))
            assert p is not None
            me = broker.broker_id
            broker.replicas.make_follower(dataclasses.replace(
                p.state, replicas=(me, me + 1), isr=(me, me + 1), leader=me + 1, leader_epoch=p.state.leader_epoch + 1,
            ), None)
            coordinator.on_hosting_changed(None)
            with pytest.raises(KafkaError) as caught:
                await asyncio.wait_for(nxt, 10)
            assert caught.value.code is ErrorCode.NOT_COORDINATOR

    asyncio.run(scenario())
