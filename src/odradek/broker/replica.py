"""The replica manager: partitions this broker hosts, appends with acks, fetches up to the HW.

Each hosted partition wraps a storage :class:`~odradek.storage.Log` with the replication state
Kafka keeps beside it: leader epoch, ISR, the high watermark (smallest log end offset in the ISR)
and the followers' log end offsets, by the rules in :mod:`odradek.cluster.isr`.  With one
replica the ISR is the leader alone and the HW follows every append; the cluster adds followers
to the same structures.

Delayed operations (Kafka's purgatory) are futures: a produce with ``acks=all`` waits until the
HW passes its last offset, a fetch with ``min_bytes`` waits until enough data is visible or
``max_wait_ms`` passes.  Disk flushes run in a worker thread, never on the event loop.

I/O errors of a partition's log dir go through one funnel, :class:`LogDirFailureChannel`
(``log_dirs``): appends, flushes and reads raise KAFKA_STORAGE_ERROR for a dir that is full
(writes only) or offline, and the error that made it so is logged once there, not per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from odradek.broker.logdir_moves import ReplicaDirMoves
from odradek.broker.logdirs import LogDirFailureChannel, is_io_error
from odradek.cluster import isr
from odradek.cluster.metadata import PartitionState
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics, timed_ms
from odradek.records import DEFAULT_MAX_DECOMPRESSED_SIZE, BatchHeader
from odradek.storage import AppendInfo, Log, LogConfig, LogManager, ReadResult, StorageError

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
    # replica id -> last time (ms) it was caught up with the leader's log end, and the leader's
    # log end offset at its previous fetch (Kafka's lastCaughtUpTime rule)
    follower_caught_up: dict[int, int] = field(default_factory=dict)
    follower_last_fetch: dict[int, tuple[int, int]] = field(default_factory=dict)
    append_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    isr_pending: bool = False
    hw_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    data_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    flushing: asyncio.Future[None] | None = None

    @property
    def log_dir(self) -> Path:
        """The log dir holding this partition's directory."""
        return self.log.directory.parent

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
        if not self.log.advance_high_watermark(
            isr.high_watermark(self.broker_id, self.log.log_end_offset, self.state.isr, self.follower_leo)
        ):
            return False
        new_hw = self.log.high_watermark
        if self.hw_waiters:
            still = []
            for offset, fut in self.hw_waiters:
                if offset <= new_hw:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    still.append((offset, fut))
            self.hw_waiters = still
        if self.data_waiters:
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

    def wait_for_append(self) -> asyncio.Future[None]:
        """For followers' long polls: wakes on any append, not only when the HW moves."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.append_waiters.append(fut)
        return fut

    def watch(self, fut: asyncio.Future[None], follower: bool) -> None:
        """Wake ``fut`` (set its result) when data becomes visible to consumers (the HW moves)
        or, for a follower (``follower``), on any append; see :meth:`unwatch`."""
        (self.append_waiters if follower else self.data_waiters).append(fut)

    def unwatch(self, fut: asyncio.Future[None], follower: bool) -> None:
        """Forget a future given to :meth:`watch` that is no longer waited for."""
        waiters = self.append_waiters if follower else self.data_waiters
        if fut in waiters:
            waiters.remove(fut)

    def wake_appended(self) -> None:
        if self.append_waiters:
            for fut in self.append_waiters:
                if not fut.done():
                    fut.set_result(None)
            self.append_waiters = []

    # -- followers (leader side) -------------------------------------------------------------
    def record_follower_fetch(self, replica: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched from ``fetch_offset``: its log end offset is that offset; it is
        caught up if it reached the leader's log end, now or as of its previous fetch."""
        leo = self.log.log_end_offset
        self.follower_leo[replica] = fetch_offset
        at = isr.caught_up_at(
            fetch_offset, leo, now_ms, self.follower_last_fetch.get(replica), self.follower_caught_up.get(replica)
        )
        if at is not None:
            self.follower_caught_up[replica] = at
        self.follower_last_fetch[replica] = (now_ms, leo)

    def can_join_isr(self, replica: int) -> bool:
        """Kafka's rule: a follower rejoins once it has everything up to the HW and has reached
        the current leader epoch's start offset."""
        epoch_start = next((start for e, start in self.log.epochs.entries if e == self.leader_epoch), 0)
        return isr.can_join_isr(
            replica, self.state.isr, self.state.replicas, self.follower_leo.get(replica, -1),
            self.log.high_watermark, epoch_start,
        )

    def lagging_followers(self, now_ms: int, max_lag_ms: int) -> list[int]:
        return isr.lagging_followers(self.broker_id, self.state.isr, self.follower_caught_up, now_ms, max_lag_ms)

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
    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        topic_config: Callable[[str], LogConfig],
        log_dirs: LogDirFailureChannel | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.topic_config = topic_config
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: the failure funnel of the log dirs (Kafka's LogDirFailureChannel)
        self.log_dirs = log_dirs if log_dirs is not None else LogDirFailureChannel(logs.dirs)
        #: the broker's metric counters (set by the broker; None: off)
        self.metrics: BrokerMetrics | None = None
        #: moves of replicas between this broker's log dirs (AlterReplicaLogDirs)
        self.dir_moves = ReplicaDirMoves(self)

    # -- partition lifecycle -------------------------------------------------------------------
    def become_leader(self, state: PartitionState, topic_id: object = None) -> Partition:
        p = self._hosted(state, topic_id)
        p.state = state
        if p.is_leader:
            try:
                p.log.start_epoch(state.leader_epoch)
            except (OSError, StorageError) as exc:
                # the epoch is kept in memory; its checkpoint is written with the next epoch
                if not is_io_error(exc):
                    raise
                self.log_dirs.fail(p.log_dir, exc, f"writing the leader epoch checkpoint of {p.topic}-{p.index}")
            p.update_high_watermark()
        return p

    def _hosted(self, state: PartitionState, topic_id: object) -> Partition:
        """The partition, created with its log on first use; its log config brought up to date."""
        key = (state.topic, state.partition)
        p = self.partitions.get(key)
        cfg = self.topic_config(state.topic)
        if p is None:
            try:
                lg = self.logs.get_or_create(
                    state.topic, state.partition, cfg, topic_id=topic_id,  # type: ignore[arg-type]
                    log_dir=self.dir_moves.preferred.pop(key, None),
                )
            except (OSError, StorageError) as exc:
                if not is_io_error(exc):
                    raise
                raise self.log_dirs.fail(
                    None, exc, f"creating the log of {state.topic}-{state.partition}"
                ) from exc
            p = Partition(state.topic, state.partition, lg, state, self.broker_id)
            self.partitions[key] = p
        else:
            p.log.update_config(cfg)
        return p

    def make_leader(self, state: PartitionState, topic_id: object, now_ms: int) -> Partition:
        """LeaderAndIsr made this broker the leader: followers start out unknown but, being in
        the ISR, get a full ``replica.lag.time.max.ms`` to fetch before they are dropped."""
        old = self.partitions.get((state.topic, state.partition))
        new_epoch = old is None or old.state.leader_epoch != state.leader_epoch or not old.is_leader
        p = self.become_leader(state, topic_id)
        if new_epoch:
            p.follower_leo = {}
            p.follower_last_fetch = {}
            p.follower_caught_up = {r: now_ms for r in state.isr}
        p.isr_pending = False
        return p

    def make_follower(self, state: PartitionState, topic_id: object) -> Partition:
        p = self._hosted(state, topic_id)
        p.state = state
        p.follower_leo = {}
        p.follower_caught_up = {}
        p.follower_last_fetch = {}
        p.isr_pending = False
        p.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        p.wake_appended()
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
    def append(
        self,
        p: Partition,
        records: bytes | bytearray | memoryview,
        acks: int,
        validated: tuple[list[BatchHeader], LogConfig] | None = None,
        *,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> AppendInfo:
        """Append as leader (synchronously; page-cache write).  Raises KafkaError subclasses.

        ``validated``: the batch headers that the log's validation (run elsewhere, off the event
        loop) found in ``records`` and the log config it used (see ``Log.append_validated``).
        ``max_decompressed``: see ``Log.append`` (DecompressionBudgetExceeded: nothing written)."""
        if acks == -1:
            min_isr = p.log.config.min_insync_replicas
            if len(p.state.isr) < min_isr:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"ISR {list(p.state.isr)} is smaller than min.insync.replicas={min_isr}",
                )
        failures = self.log_dirs
        if failures.any_failed:
            failures.check_write(p.log_dir, len(records))
        try:
            if validated is None:
                info = p.log.append(records, leader_epoch=p.leader_epoch, max_decompressed=max_decompressed)
            else:
                info = p.log.append_validated(records, validated[0], validated[1], leader_epoch=p.leader_epoch)
        except (OSError, StorageError) as exc:
            if not is_io_error(exc):
                raise
            raise failures.fail(p.log_dir, exc, f"appending to {p.topic}-{p.index}") from exc
        if failures.any_failed:
            failures.wrote(p.log_dir)
        p.update_high_watermark()
        p.wake_appended()
        return info

    def append_marker(
        self, p: Partition, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> AppendInfo:
        """Append a transaction's COMMIT/ABORT marker as leader (WriteTxnMarkers)."""
        failures = self.log_dirs
        if failures.any_failed:
            failures.check_write(p.log_dir, 100)
        try:
            info = p.log.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, leader_epoch=p.leader_epoch)
        except (OSError, StorageError) as exc:
            if not is_io_error(exc):
                raise
            raise failures.fail(p.log_dir, exc, f"appending a marker to {p.topic}-{p.index}") from exc
        if failures.any_failed:
            failures.wrote(p.log_dir)
        p.update_high_watermark()
        p.wake_appended()
        return info

    async def wait_durable(self, p: Partition) -> None:
        """Flush in a worker thread if the log's flush.messages says so."""
        lg = p.log
        if not lg.flush_messages_due():
            return
        if p.flushing is not None and not p.flushing.done():
            await asyncio.shield(p.flushing)
            if not lg.flush_messages_due():
                return
        fut = asyncio.ensure_future(asyncio.to_thread(timed_ms, lg.flush))
        p.flushing = fut  # type: ignore[assignment]
        try:
            ms = await asyncio.shield(fut)
            if self.metrics is not None:
                self.metrics.flush_time.observe(ms)
        except (OSError, StorageError) as exc:
            if not is_io_error(exc):
                raise
            raise self.log_dirs.fail(p.log_dir, exc, f"flushing {p.topic}-{p.index}", sync=True) from exc

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
        max_offset: int | None = None,
    ) -> ReadResult:
        """``max_offset``: read below it too (a cap on the records of a consumer's fetch)."""
        if replica_id >= 0:
            limit = max_offset
        else:  # consumers read below the high watermark, read_committed ones below the LSO
            limit = p.log.last_stable_offset if isolation_committed else p.log.high_watermark
            if max_offset is not None and max_offset < limit:
                limit = max_offset
        failures = self.log_dirs
        if failures.any_failed:
            failures.check_read(p.log_dir)
        try:
            return p.log.read(offset, max_bytes, limit, min_one_message=min_one)
        except OSError as exc:
            raise failures.fail(p.log_dir, exc, f"reading {p.topic}-{p.index}") from exc
