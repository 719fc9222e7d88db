"""A failover that makes this broker the leader of many partitions writes their leader-epoch
checkpoints (a file write and an fsync each, ~3 ms) on a worker thread, not on the event loop
one partition at a time; and the epochs it writes start at each log's end offset, as they did.

In process: a ``ClusterReplication`` over real logs, whose LeaderAndIsr handling is called the way
the controller's request reaches it (no ZooKeeper is involved in applying one)."""

from __future__ import annotations

import asyncio
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.replica import ReplicaManager
from odradek.broker.replication import ClusterReplication
from odradek.cluster.metadata import PartitionState
from odradek.config import BrokerConfig
from odradek.records import BatchBuilder
from odradek.settings import settings_from
from odradek.storage import LogConfig, LogManager
from odradek.storage import epoch as epoch_module
from odradek.storage.checkpoint import read_epochs

PARTITIONS = 40


def _state(partition: int, leader: int, epoch: int) -> Any:
    """One partition of a LeaderAndIsr request, as the handler passes it on."""
    return types.SimpleNamespace(
        topic_name="t", partition_index=partition, replicas=[1, 2], isr=[1, 2], leader=leader,
        leader_epoch=epoch, partition_epoch=epoch,
    )


def _replication(tmp_path: Path) -> tuple[ClusterReplication, ReplicaManager]:
    """Broker 2 following broker 1 on every partition of ``t`` at epoch 3, with partition p
    holding p records (leader epoch 3 in their batches)."""
    rm = ReplicaManager(2, LogManager([tmp_path]), lambda _t: LogConfig.from_dict({}))
    for p in range(PARTITIONS):
        part = rm.make_follower(PartitionState("t", p, (1, 2), (1, 2), 1, 3, 3), None)
        part.log.start_epoch(3)
        for i in range(p):
            b = BatchBuilder()
            b.append(1_700_000_000_000 + i, None, b"v")
            data = bytearray(b.build())
            data[0:8] = i.to_bytes(8, "big")  # the leader's offset
            data[12:16] = (3).to_bytes(4, "big")  # and its epoch
            part.log.append_as_follower(bytes(data))

    async def load_config(_name: str) -> None:
        return None

    topics = types.SimpleNamespace(load_config=load_config, log_config=lambda _name: LogConfig.from_dict({}))
    replication = ClusterReplication(
        2, settings_from(BrokerConfig({})), topics, rm, types.SimpleNamespace(),  # type: ignore[arg-type]
        types.SimpleNamespace(now_ms=lambda: 10), cluster_id="c", inter_broker_listener=None,
        fetcher_settings=BrokerConfig({}),
    )
    return replication, rm


def test_a_failover_writes_the_new_epochs_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replication, rm = _replication(tmp_path)
    writers: list[threading.Thread] = []
    real = epoch_module.write_epochs

    def write(path: Path, epochs: Any) -> None:
        writers.append(threading.current_thread())
        real(path, epochs)

    monkeypatch.setattr(epoch_module, "write_epochs", write)

    async def failover() -> tuple[dict[Any, int], threading.Thread]:
        results = await replication.apply_leader_and_isr([_state(p, 2, 4) for p in range(PARTITIONS)], {}, {})
        return results, threading.current_thread()

    results, loop_thread = asyncio.run(failover())
    assert set(results.values()) == {0}
    assert len(writers) == PARTITIONS  # one checkpoint write per partition, none repeated
    assert loop_thread not in writers, "a leader-epoch checkpoint was written on the event loop"
    for p in range(PARTITIONS):
        part = rm.get("t", p)
        assert part is not None and part.is_leader and part.leader_epoch == 4
        # epoch 4 starts at the log end offset: p records of epoch 3 before it
        assert part.log.epochs.entries == ([(3, 0), (4, p)] if p else [(4, 0)])
        assert read_epochs(part.log.epochs.path) == part.log.epochs.entries


def test_a_leader_that_stays_leader_starts_its_new_epoch_where_it_appends(tmp_path: Path) -> None:
    """Leader to leader (a new epoch while this broker keeps appending) stays on the event loop:
    producers may append meanwhile, and the epoch must start after their records."""
    replication, rm = _replication(tmp_path)

    async def run() -> None:
        await replication.apply_leader_and_isr([_state(5, 2, 4)], {}, {})
        part = rm.get("t", 5)
        assert part is not None
        b = BatchBuilder()
        b.append(1_700_000_000_000, None, b"new")
        rm.append(part, bytearray(b.build()), 1)
        await replication.apply_leader_and_isr([_state(5, 2, 5)], {}, {})
        assert part.log.epochs.entries == [(3, 0), (4, 5), (5, 6)]

    asyncio.run(run())
