"""The replica manager: partitions this broker hosts, appends with acks, fetches up to the HW.

Each hosted partition wraps a storage :class:`~odradek.storage.Log` with the replication state
Kafka keeps beside it: leader epoch, ISR, the high watermark (smallest log end offset in the ISR)
and the followers' log end offsets.  With one replica the ISR is the leader alone and the HW
follows every append; the cluster adds followers to the same structures.

Delayed operations (Kafka's purgatory) are futures: a produce with ``acks=all`` waits until the
HW passes its last offset, a fetch with ``min_bytes`` waits until enough data is visible or
``max_wait_ms`` passes.  Disk flushes run in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.cluster.metadata import PartitionState
from odradek.errors import ErrorCode, KafkaError
from odradek.storage import AppendInfo, Log, LogConfig, LogManager, ReadResult

__all__ = ["Partition", "ReplicaManager"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    log: Log
    state: PartitionState
    broker_id: int
    follower_leo: dict[int, int] = field(default_factory=dict)
    hw_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    data_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    flushing: asyncio.Future[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def update_high_watermark(self) -> bool:
        """HW = the smallest log end offset in the ISR; wakes waiters when it moves."""
        leo = self.log.log_end_offset
        isr = self.state.isr
        if len(isr) == 1 and isr[0] == self.broker_id:
            new_hw = leo  # the leader alone is in sync
        else:
            new_hw = min([leo] + [self.follower_leo.get(r, 0) for r in isr if r != self.broker_id])
        if new_hw <= self.log.high_watermark:
            return False
        self.log.high_watermark = new_hw
        still = []
        for offset, fut in self.hw_waiters:
            if offset <= new_hw:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((offset, fut))
        self.hw_waiters = still
        for fut in self.data_waiters:
            if not fut.done():
                fut.set_result(None)
        self.data_waiters = []
        return True

    def wait_for_hw(self, offset: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.high_watermark >= offset:
            fut.set_result(None)
        else:
            self.hw_waiters.append((offset, fut))
        return fut

    def wait_for_data(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.data_waiters.append(fut)
        return fut

    def fail_waiters(self, code: ErrorCode) -> None:
        for _offset, fut in self.hw_waiters:
            if not fut.done():
                fut.set_exception(KafkaError(code))
        self.hw_waiters = []
        for fut in self.data_waiters:
            if not fut.done():
                fut.set_result(None)
        self.data_waiters = []


class ReplicaManager:
    def __init__(self, broker_id: int, logs: LogManager, topic_config: Callable[[str], LogConfig]) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.topic_config = topic_config
        self.partitions: dict[tuple[str, int], Partition] = {}

    # -- partition lifecycle -------------------------------------------------------------------
    def become_leader(self, state: PartitionState, topic_id: object = None) -> Partition:
        key = (state.topic, state.partition)
        p = self.partitions.get(key)
        cfg = self.topic_config(state.topic)
        if p is None:
            lg = self.logs.get_or_create(state.topic, state.partition, cfg, topic_id=topic_id)  # type: ignore[arg-type]
            p = Partition(state.topic, state.partition, lg, state, self.broker_id)
            p.log.high_watermark = min(max(p.log.high_watermark, 0), p.log.log_end_offset)
            self.partitions[key] = p
        else:
            p.state = state
            p.log.update_config(cfg)
        if p.is_leader:
            p.log.epochs.assign(state.leader_epoch, p.log.log_end_offset)
            p.update_high_watermark()
        return p

    def remove_partition(self, topic: str, partition: int, delete: bool) -> None:
        p = self.partitions.pop((topic, partition), None)
        if p is not None:
            p.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if delete:
            self.logs.delete(topic, partition)

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def leader_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not hosted here")
        if not p.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} is led by {p.state.leader}")
        return p

    # -- produce ---------------------------------------------------------------------------------
    def append(self, p: Partition, records: bytes | bytearray | memoryview, acks: int) -> AppendInfo:
        """Append as leader (synchronously; page-cache write).  Raises KafkaError subclasses."""
        if acks == -1:
            min_isr = p.log.config.min_insync_replicas
            if len(p.state.isr) < min_isr:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"ISR {list(p.state.isr)} is smaller than min.insync.replicas={min_isr}",
                )
        info = p.log.append(records, leader_epoch=p.leader_epoch)
        p.update_high_watermark()
        return info

    async def wait_durable(self, p: Partition) -> None:
        """Flush in a worker thread if the log's flush.messages says so."""
        lg = p.log
        if lg.log_end_offset - lg.recovery_point < lg.config.flush_messages:
            return
        if p.flushing is not None and not p.flushing.done():
            await asyncio.shield(p.flushing)
            if lg.log_end_offset - lg.recovery_point < lg.config.flush_messages:
                return
        fut = asyncio.ensure_future(asyncio.to_thread(lg.flush))
        p.flushing = fut  # type: ignore[assignment]
        await asyncio.shield(fut)

    # -- fetch -----------------------------------------------------------------------------------
    def read(
        self,
        p: Partition,
        offset: int,
        max_bytes: int,
        *,
        isolation_committed: bool,
        replica_id: int,
        min_one: bool,
    ) -> ReadResult:
        limit = None if replica_id >= 0 else p.log.high_watermark
        return p.log.read(offset, max_bytes, limit, min_one_message=min_one)
