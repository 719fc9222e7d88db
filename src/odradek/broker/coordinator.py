"""The group coordinator: runs :mod:`odradek.cluster.group` and carries out its effects.

Groups live in ``__consumer_offsets`` (compacted, ``offsets.topic.num.partitions`` partitions,
created on the first FindCoordinator).  A group belongs to partition
``abs(javaHash(group id)) % partitions`` and is served by that partition's leader.  Its
metadata and committed offsets are records in Kafka's formats (key/value versions from the
coordinator record definitions); when this broker becomes leader of an offsets partition it reads
the partition back into the in-memory cache, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile.

Commits are written with ``offsets.commit.required.acks`` within ``offsets.commit.timeout.ms``
and enter the cache only once the write completed; append errors are translated as Kafka does
(NOT_LEADER -> NOT_COORDINATOR, timeouts -> REQUEST_TIMED_OUT, ...).  Deferred JoinGroup and
SyncGroup responses are futures completed from the state machine's effects; a timer task calls
``tick`` at the next deadline (session expiry, rebalance timeout, initial delay).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import TYPE_CHECKING

from odradek._timeouts import wait_for
from odradek.broker.logdirs import is_io_error
from odradek.broker.replica import Partition
from odradek.broker.topics import OFFSETS_TOPIC
from odradek.cluster.assignment import partition_for
from odradek.cluster.group import (
    Effect,
    Group,
    GroupCoordinatorState,
    GroupLimits,
    JoinResult,
    Member,
    OffsetAndMetadata,
    StoreGroup,
    StoreOffsets,
    SyncResult,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics
from odradek.protocol.messages.coordinator import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from odradek.records import (
    Batch,
    BatchBuilder,
    ControlRecordType,
    RecordsError,
    parse_control_key,
    read_batches,
)
from odradek.storage import StorageError

if TYPE_CHECKING:
    from odradek._clock import Clock
    from odradek.broker.replica import ReplicaManager
    from odradek.broker.replication import Replication
    from odradek.broker.topics import TopicService
    from odradek.cluster.metadata import MetadataImage
    from odradek.config import BrokerConfig

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator"]

log = logging.getLogger(__name__)

_version = struct.Struct(">h")
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

# append errors seen while writing to __consumer_offsets, as the coordinator reports them
_COMMIT_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def _key(version: int, body: bytes) -> bytes:
    return _version.pack(version) + body


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _key(OFFSET_KEY_VERSION, OffsetCommitKey(group=group_id, topic=topic, partition=partition).encode(OFFSET_KEY_VERSION))


def offset_value(om: OffsetAndMetadata) -> bytes:
    value = OffsetCommitValue(
        offset=om.offset,
        leader_epoch=om.leader_epoch,
        metadata=om.metadata,
        commit_timestamp=om.commit_timestamp,
    )
    if om.expire_timestamp >= 0:
        value.expire_timestamp = om.expire_timestamp
        return _key(1, value.encode(1))
    return _key(OFFSET_VALUE_VERSION, value.encode(OFFSET_VALUE_VERSION))


def group_key(group_id: str) -> bytes:
    return _key(GROUP_KEY_VERSION, GroupMetadataKey(group=group_id).encode(GROUP_KEY_VERSION))


def group_value(g: Group) -> bytes:
    V = GroupMetadataValue
    value = V(
        protocol_type=g.protocol_type or "",
        generation=g.generation_id,
        protocol=g.protocol_name,
        leader=g.leader_id,
        current_state_timestamp=g.state_timestamp,
        members=[
            V.MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(g.protocol_name) if g.protocol_name else b"",
                assignment=m.assignment,
            )
            for m in g.members.values()
        ],
    )
    return _key(GROUP_VALUE_VERSION, value.encode(GROUP_VALUE_VERSION))


class GroupCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        replicas: ReplicaManager,
        topics: TopicService,
        replication: Replication,
    ) -> None:
        cfg = config
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.topics = topics
        self.replication = replication
        self.partitions = int(cfg.get("offsets.topic.num.partitions"))
        self.state = GroupCoordinatorState(
            GroupLimits(
                min_session_timeout_ms=int(cfg.get("group.min.session.timeout.ms")),
                max_session_timeout_ms=int(cfg.get("group.max.session.timeout.ms")),
                max_size=int(cfg.get("group.max.size")),
                initial_rebalance_delay_ms=int(cfg.get("group.initial.rebalance.delay.ms")),
                offset_metadata_max_bytes=int(cfg.get("offset.metadata.max.bytes")),
                offsets_retention_ms=int(cfg.get("offsets.retention.minutes")) * 60000,
            )
        )
        self.loaded: set[int] = set()
        self.loading: set[int] = set()
        self._join_waiters: dict[str, asyncio.Future[JoinResult]] = {}
        self._sync_waiters: dict[str, asyncio.Future[SyncResult]] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._create_lock = asyncio.Lock()
        #: transactional offset commits waiting for their transaction's marker:
        #: producer id -> group -> offsets (TxnOffsetCommit, KIP-98)
        self.txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata | None]]] = {}
        #: the broker's metric counters (set by the broker; None: off)
        self.metrics: BrokerMetrics | None = None

    # ------------------------------------------------------------------------------------------
    # lifecycle

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._timer(), name="group-timer"))
        interval = int(self.config.get("offsets.retention.check.interval.ms"))
        self._tasks.append(loop.create_task(self._expire_loop(interval), name="offsets-expiry"))
        self.on_image()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        waiters: list[asyncio.Future[JoinResult] | asyncio.Future[SyncResult]] = [
            *self._join_waiters.values(),
            *self._sync_waiters.values(),
        ]
        for fut in waiters:
            if not fut.done():
                fut.cancel()

    def now(self) -> int:
        return self.clock.now_ms()

    def on_hosting_changed(self, image: MetadataImage | None) -> None:
        """The partitions this broker hosts may have changed (``image``: after a metadata image,
        which skips the walk until ``__consumer_offsets`` exists)."""
        if image is None or self.loaded or OFFSETS_TOPIC in image.topics:
            self.on_image()

    def on_image(self) -> None:
        """Load offsets partitions this broker now leads; unload those it lost (called after
        every metadata image and every LeaderAndIsr)."""
        led = {
            idx
            for (topic, idx), part in list(self.replicas.partitions.items())
            if topic == OFFSETS_TOPIC and part.is_leader
        }
        for p in sorted(self.loaded - led):
            self._unload(p)
        for p in sorted(led - self.loaded - self.loading):
            self.loading.add(p)
            asyncio.get_running_loop().create_task(self._load(p))

    def _unload(self, partition: int) -> None:
        self.loaded.discard(partition)
        for gid in [g for g in self.state.groups if self.partition_for(g) == partition]:
            self.state.unload_group(gid)
        for pid in list(self.txn_offsets):
            groups = self.txn_offsets[pid]
            for gid in [g for g in groups if self.partition_for(g) == partition]:
                del groups[gid]
            if not groups:
                del self.txn_offsets[pid]

    async def _load(self, partition: int) -> None:
        try:
            p = self.replicas.get(OFFSETS_TOPIC, partition)
            if p is not None:
                self._replay(p)
            self.loaded.add(partition)
        except (RecordsError, StorageError, KafkaError):
            log.exception("could not load %s-%d", OFFSETS_TOPIC, partition)
        finally:
            self.loading.discard(partition)
        self._wake.set()

    def _replay(self, p: Partition) -> None:
        lg = p.log
        offset = lg.log_start_offset
        now = self.now()
        groups: dict[str, Group | None] = {}
        # offsets a transaction committed: applied at its COMMIT marker, dropped at ABORT
        pending: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        while offset < lg.log_end_offset:
            result = lg.read(offset, 1 << 20)
            data = result.to_bytes()
            if not data:
                break
            last = offset
            for batch in read_batches(data):
                if batch.is_control:
                    last = batch.last_offset
                    held = pending.pop(batch.producer_id, [])
                    if _is_commit(batch):
                        for key, value in held:
                            self._apply_record(key, value, groups)
                    continue
                if batch.is_transactional:
                    pending.setdefault(batch.producer_id, []).extend((r.key, r.value) for r in batch.records)
                    last = batch.last_offset
                    continue
                for rec in batch.records:
                    self._apply_record(rec.key, rec.value, groups)
                last = batch.last_offset
            if last < offset:
                break
            offset = last + 1
        for gid, g in groups.items():
            if g is None:
                # deleted; offsets committed after the deletion (a standalone consumer's) keep the
                # group alive as an Empty group, as Kafka loads groups that only store offsets
                kept = self.state.groups.get(gid)
                if kept is None or not kept.offsets:
                    self.state.unload_group(gid)
            else:
                self.state.load_group(g, now)
        # transactions still open: their offsets wait for the marker, as after a TxnOffsetCommit
        for pid, held in pending.items():
            for key, value in held:
                decoded = _offset_record(key, value)
                if decoded is not None:
                    gid, tp, om = decoded
                    self.txn_offsets.setdefault(pid, {}).setdefault(gid, {})[tp] = om

    def _apply_record(self, key: bytes | None, value: bytes | None, groups: dict[str, Group | None]) -> None:
        if key is None or len(key) < 2:
            return
        (version,) = _version.unpack_from(key, 0)
        if version in (0, 1):
            k = OffsetCommitKey.decode_from(key, 2, version)[0]
            tp = (k.topic, k.partition)
            if value is None:
                self.state.load_offset(k.group, tp, None)
                return
            (vv,) = _version.unpack_from(value, 0)
            v = OffsetCommitValue.decode_from(value, 2, min(vv, OffsetCommitValue.VALID_VERSIONS[1]))[0]
            self.state.load_offset(
                k.group,
                tp,
                OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp if vv == 1 else -1),
            )
        elif version == 2:
            gk = GroupMetadataKey.decode_from(key, 2, version)[0]
            if value is None:
                groups[gk.group] = None
                return
            (vv,) = _version.unpack_from(value, 0)
            gv = GroupMetadataValue.decode_from(value, 2, min(vv, GroupMetadataValue.VALID_VERSIONS[1]))[0]
            g = Group(gk.group, generation_id=gv.generation, protocol_type=gv.protocol_type or None,
                      protocol_name=gv.protocol, leader_id=gv.leader, state_timestamp=gv.current_state_timestamp)
            for mm in gv.members:
                m = Member(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                           mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout,
                           mm.session_timeout, gv.protocol_type, [(gv.protocol or "", mm.subscription)],
                           assignment=mm.assignment)
                g.members[m.member_id] = m
                if m.group_instance_id is not None:
                    g.static_members[m.group_instance_id] = m.member_id
            groups[gk.group] = g

    # ------------------------------------------------------------------------------------------
    # routing

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (Kafka does it on the first FindCoordinator)."""
        if OFFSETS_TOPIC in self.topics.image.topics:
            return
        async with self._create_lock:
            if OFFSETS_TOPIC in self.topics.image.topics:
                return
            try:
                await self.topics.create_internal(
                    OFFSETS_TOPIC, self.partitions, self.replication.offsets_replication_factor()
                )
            except KafkaError as exc:
                if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                    return
                if exc.code in (ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.KAFKA_STORAGE_ERROR):
                    # like Kafka: no group coordination until enough brokers are alive, or while
                    # the offsets topic cannot be written (a full or failed log dir)
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message) from exc
                raise
            except (OSError, StorageError) as exc:
                if not is_io_error(exc):
                    raise
                failure = self.replicas.log_dirs.fail(None, exc, f"creating {OFFSETS_TOPIC}")
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, failure.message) from exc

    def check_storage(self, partition: int) -> None:
        """COORDINATOR_NOT_AVAILABLE while the offsets partition's log dir is offline (Kafka
        moves the coordinator away from a failed dir; a single broker has nowhere to move it).
        A full dir still coordinates: its groups are served from memory, and only the writes
        (commits, rebalances) answer errors until space is freed."""
        local = self.replicas.get(OFFSETS_TOPIC, partition)
        failures = self.replicas.log_dirs
        if local is not None and failures.offline(local.log_dir):
            raise KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the log dir of {OFFSETS_TOPIC}-{partition} is offline"
            )

    def check(self, group_id: str) -> None:
        """Raise unless this broker serves ``group_id`` right now."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "empty group id")
        topic = self.topics.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet")
        p = self.partition_for(group_id)
        local = self.replicas.get(OFFSETS_TOPIC, p)
        if local is None:
            try:
                local = self.replication.rehost(OFFSETS_TOPIC, p)  # its log could not be created before
            except KafkaError as exc:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message) from exc
        if local is None or not local.is_leader:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"group {group_id} is coordinated by another broker")
        if self.replicas.log_dirs.offline(local.log_dir):
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"the log dir of {OFFSETS_TOPIC}-{p} is offline")
        if p in self.loading or p not in self.loaded:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{OFFSETS_TOPIC}-{p} is loading")

    # ------------------------------------------------------------------------------------------
    # group operations

    async def join(self, **kwargs: object) -> JoinResult:
        result, effects, member_id = self.state.join(self.now(), **kwargs)  # type: ignore[arg-type]
        fut: asyncio.Future[JoinResult] | None = None
        if result is None:
            old = self._join_waiters.get(member_id)
            if old is not None and not old.done():
                old.set_result(JoinResult(member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            fut = self._join_waiters[member_id] = asyncio.get_running_loop().create_future()
        await self._apply(effects)
        self._wake.set()
        if result is not None:
            return result
        assert fut is not None
        return await fut

    async def sync(self, **kwargs: object) -> SyncResult:
        result, effects = self.state.sync(self.now(), **kwargs)  # type: ignore[arg-type]
        member_id = str(kwargs["member_id"])
        fut: asyncio.Future[SyncResult] | None = None
        if result is None:
            fut = self._sync_waiters[member_id] = asyncio.get_running_loop().create_future()
        await self._apply(effects)
        self._wake.set()
        if result is not None:
            return result
        assert fut is not None
        return await fut

    def heartbeat(self, **kwargs: object) -> ErrorCode:
        code = self.state.heartbeat(self.now(), **kwargs)  # type: ignore[arg-type]
        self._wake.set()
        return code

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        errors, effects = self.state.leave(self.now(), group_id=group_id, members=members)
        await self._apply(effects)
        self._wake.set()
        return errors

    async def commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        error, per, store = self.state.prepare_commit(
            self.now(),
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            offsets=offsets,
        )
        if error is not ErrorCode.NONE or store is None:
            return error, per
        try:
            await self._write(group_id, self._offset_records(store))
        except KafkaError as exc:
            code = _COMMIT_ERRORS.get(exc.code, exc.code)
            return ErrorCode.NONE, {tp: code if e is ErrorCode.NONE else e for tp, e in per.items()}
        self.state.apply_commit(store)
        if self.metrics is not None:
            self.metrics.offset_commits += len(offsets)
        return ErrorCode.NONE, per

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        result = {}
        for gid in group_ids:
            try:
                self.check(gid)
            except KafkaError as exc:
                result[gid] = exc.code
                continue
            code, effects = self.state.delete_group(self.now(), gid)
            try:
                await self._apply(effects)
            except KafkaError as exc:
                code = _COMMIT_ERRORS.get(exc.code, exc.code)
            result[gid] = code
        return result

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[
        ErrorCode, dict[tuple[str, int], ErrorCode]
    ]:
        error, per, store = self.state.delete_offsets(self.now(), group_id, partitions)
        if store is not None:
            await self._write(group_id, self._offset_records(store))
            self.state.apply_commit(store)
        return error, per

    # ------------------------------------------------------------------------------------------
    # transactional offsets

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """TxnOffsetCommit: validated like a commit (KIP-447: the group's generation and member,
        when given), written as part of the producer's transaction, visible at its COMMIT marker."""
        error, per, store = self.state.prepare_commit(
            self.now(), group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, offsets=offsets, transactional=True,
        )
        if error is not ErrorCode.NONE or store is None:
            return error, per
        try:
            await self._write(group_id, self._offset_records(store), producer=(producer_id, producer_epoch))
        except KafkaError as exc:
            code = _COMMIT_ERRORS.get(exc.code, exc.code)
            return ErrorCode.NONE, {tp: code if e is ErrorCode.NONE else e for tp, e in per.items()}
        self.txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(store.offsets)
        return ErrorCode.NONE, per

    def complete_txn(self, producer_id: int, partition: int, commit: bool) -> None:
        """A transaction's marker reached offsets partition ``partition``: its offsets of the
        groups stored there become the committed ones (COMMIT) or are dropped (ABORT)."""
        groups = self.txn_offsets.get(producer_id)
        if not groups:
            return
        for gid in [g for g in groups if self.partition_for(g) == partition]:
            offsets = groups.pop(gid)
            if commit:
                self.state.apply_commit(StoreOffsets(gid, offsets))
        if not groups:
            del self.txn_offsets[producer_id]

    def pending_txn_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> bool:
        """Whether a transaction not yet decided committed offsets of these partitions
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT then, KIP-447)."""
        for groups in self.txn_offsets.values():
            offsets = groups.get(group_id)
            if offsets and (partitions is None or any(tp in offsets for tp in partitions)):
                return True
        return False

    # ------------------------------------------------------------------------------------------
    # effects

    def _offset_records(self, store: StoreOffsets) -> list[tuple[bytes, bytes | None]]:
        return [
            (offset_key(store.group_id, tp[0], tp[1]), None if om is None else offset_value(om))
            for tp, om in store.offsets.items()
        ]

    async def _apply(self, effects: list[Effect]) -> None:
        """Writes first (a completed rebalance is durable before members hear of it), then the
        responses owed to other members."""
        failure: ErrorCode | None = None
        for e in effects:
            if not isinstance(e, (StoreGroup, StoreOffsets)):
                continue
            try:
                if isinstance(e, StoreGroup):
                    value = None if e.group is None else group_value(e.group)
                    await self._write(e.group_id, [(group_key(e.group_id), value)])
                else:
                    # the state machine already applied these (expiry, deletion): only write
                    await self._write(e.group_id, self._offset_records(e))
            except KafkaError as exc:
                log.warning("could not write group %s: %s", e.group_id, exc)
                failure = _COMMIT_ERRORS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR)
        for e in effects:
            if isinstance(e, JoinResult):
                fut = self._join_waiters.pop(e.member_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(e)
            elif isinstance(e, SyncResult):
                if failure is not None and e.error is ErrorCode.NONE:
                    e = SyncResult(e.member_id, failure)
                sfut = self._sync_waiters.pop(e.member_id, None)
                if sfut is not None and not sfut.done():
                    sfut.set_result(e)

    async def _write(
        self, group_id: str, records: list[tuple[bytes, bytes | None]], *, producer: tuple[int, int] | None = None
    ) -> None:
        """Append records to the group's offsets partition and wait for the configured acks
        (``producer``: the id and epoch of the transaction the records are part of)."""
        partition = self.partition_for(group_id)
        p = self.replicas.leader_partition(OFFSETS_TOPIC, partition)
        if producer is None:
            builder = BatchBuilder()
        else:
            builder = BatchBuilder(producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)
        now = self.now()
        for key, value in records:
            builder.append(now, key, value)
        acks = int(self.config.get("offsets.commit.required.acks"))
        info = self.replicas.append(p, bytearray(builder.build()), acks)
        timeout = int(self.config.get("offsets.commit.timeout.ms")) / 1000
        await self.replicas.wait_durable(p)
        if acks == -1:
            try:
                await wait_for(p.wait_for_hw(info.last_offset + 1), timeout)
            except TimeoutError as exc:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "offsets write timed out") from exc

    # ------------------------------------------------------------------------------------------
    # timers

    async def _timer(self) -> None:
        while True:
            deadline = self.state.next_deadline()
            now = self.now()
            wait = 1.0 if deadline is None else max(0.0, min(1.0, (deadline - now) / 1000))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await wait_for(self._wake.wait(), wait)
            effects = self.state.tick(self.now())
            if effects:
                try:
                    await self._apply(effects)
                except Exception:
                    log.exception("group timer effects failed")

    async def _expire_loop(self, interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            effects = self.state.expire_offsets(self.now())
            if effects:
                try:
                    await self._apply(effects)
                except Exception:
                    log.exception("offset expiration failed")


def _is_commit(batch: Batch) -> bool:
    records = batch.records
    if not records or records[0].key is None or len(records[0].key) < 4:
        return False
    return parse_control_key(records[0].key)[1] == int(ControlRecordType.COMMIT)


def _offset_record(key: bytes | None, value: bytes | None) -> tuple[str, tuple[str, int], OffsetAndMetadata | None] | None:
    """(group, partition, offset or None for a tombstone) of an offset commit record."""
    if key is None or len(key) < 2:
        return None
    (version,) = _version.unpack_from(key, 0)
    if version not in (0, 1):
        return None
    k = OffsetCommitKey.decode_from(key, 2, version)[0]
    if value is None:
        return k.group, (k.topic, k.partition), None
    (vv,) = _version.unpack_from(value, 0)
    v = OffsetCommitValue.decode_from(value, 2, min(vv, OffsetCommitValue.VALID_VERSIONS[1]))[0]
    om = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp if vv == 1 else -1)
    return k.group, (k.topic, k.partition), om
