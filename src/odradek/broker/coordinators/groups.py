"""The group coordinator: Kafka's classic rebalance protocol and KIP-848 consumer groups on the
coordinator runtime.

Groups live in ``__consumer_offsets`` (``offsets.topic.num.partitions`` partitions, created on
the first FindCoordinator); a group belongs to partition ``abs(javaHash(group id)) % partitions``
and is served by its leader.  What this module supplies to the runtime is the record handling
of one partition (:class:`GroupShard`): Kafka's group metadata and offset commit records
(key/value versions from the coordinator record definitions), replayed into the state machine of
:mod:`odradek.cluster.group`.  The state machine decides; this module carries out its effects.

Commits are written with ``offsets.commit.required.acks`` within ``offsets.commit.timeout.ms`` and
enter the state only once the write completed; append errors are answered as Kafka does
(NOT_LEADER -> NOT_COORDINATOR, a too-large commit -> INVALID_COMMIT_OFFSET_SIZE...).  Deferred
JoinGroup and SyncGroup responses are futures completed from the state machine's effects (or
with NOT_COORDINATOR when the partition is unloaded); a deadline timer calls ``tick`` when the
next session expiry, rebalance timeout or initial delay comes, and a periodic one expires offsets
(``offsets.retention.check.interval.ms``).  A transaction's offsets (TxnOffsetCommit) wait for
its marker in the shard, applied or dropped when the marker is written (or read back).

The shard also holds the partition's KIP-848 consumer groups (:mod:`.consumer_groups`, their
records :mod:`.consumer_records`); a group id is either a classic or a consumer group, and the
classic APIs reaching a consumer group (its members that use the classic protocol, commits,
deletion) go to :attr:`GroupCoordinator.consumer`.  Every group's offsets are kept by the classic
state machine.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.coordinators.consumer_groups import (
    ConsumerGroupService,
    consumer_group_config,
    consumer_protocol_enabled,
)
from odradek.broker.coordinators.consumer_records import CONSUMER_GROUP_RECORD_TYPES, decode_record
from odradek.broker.coordinators.record_versions import check_value_version
from odradek.broker.coordinators.runtime import (
    CoordinatorPorts,
    CoordinatorRecord,
    CoordinatorRuntime,
    CoordinatorTopic,
)
from odradek.broker.coordinators.share_groups import ShareGroupService, share_group_config
from odradek.broker.coordinators.share_records import SHARE_GROUP_RECORD_TYPES, ShareRecordLoader
from odradek.broker.topics import OFFSETS_TOPIC
from odradek.cluster.consumer_group import ConsumerGroupConfig, ConsumerGroups
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
from odradek.cluster.share_group import ShareGroupConfig, ShareGroups
from odradek.config import BrokerConfig
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.coordinator import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from odradek.settings import settings_from

if TYPE_CHECKING:
    from odradek.broker.replication import Replication
    from odradek.cluster.metadata import MetadataImage
    from odradek.metrics import BrokerMetrics
    from odradek.settings import GroupSettings, ShareGroupSettings

__all__ = ["GroupCoordinator", "GroupShard", "offsets_topic"]

log = logging.getLogger(__name__)

_version = struct.Struct(">h")
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

TopicPartition = tuple[str, int]

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


def offsets_topic(settings: GroupSettings, replication: Replication) -> CoordinatorTopic:
    """``__consumer_offsets`` as the group coordinator writes it (``offsets.topic.*``,
    ``offsets.commit.*``)."""
    return CoordinatorTopic(
        OFFSETS_TOPIC,
        settings.offsets_topic_num_partitions,
        replication.offsets_replication_factor,
        acks=settings.offsets_commit_required_acks,
        write_timeout_ms=settings.offsets_commit_timeout_ms,
    )


# ------------------------------------------------------------------------------------------------
# records


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


def _offset_records(store: StoreOffsets) -> list[tuple[bytes | None, bytes | None]]:
    return [
        (offset_key(store.group_id, tp[0], tp[1]), None if om is None else offset_value(om))
        for tp, om in store.offsets.items()
    ]


def _classic_record(group: Group | None, group_id: str) -> tuple[bytes, bytes | None]:
    """A classic group's metadata record (a consumer group converted back), or its tombstone."""
    return group_key(group_id), None if group is None else group_value(group)


def _has_members(shard: GroupShard, group_id: str) -> bool:
    group = shard.consumer.group(group_id)
    return group is not None and bool(group.members)


def _not_share(shard: GroupShard, group_id: str) -> None:
    """Offsets are not a share group's (its progress is the share coordinator's): Kafka answers
    GROUP_ID_NOT_FOUND."""
    if shard.share.has(group_id):
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")


def _decode_offset(key: bytes, version: int, value: bytes | None) -> tuple[str, TopicPartition, OffsetAndMetadata | None]:
    k = OffsetCommitKey.decode_from(key, 2, version)[0]
    if value is None:
        return k.group, (k.topic, k.partition), None
    (vv,) = _version.unpack_from(value, 0)
    check_value_version("OffsetCommitValue", vv, OffsetCommitValue.VALID_VERSIONS)
    v = OffsetCommitValue.decode_from(value, 2, vv)[0]
    om = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp if vv == 1 else -1)
    return k.group, (k.topic, k.partition), om


def _decode_group(key: bytes, version: int, value: bytes | None) -> tuple[str, Group | None]:
    gk = GroupMetadataKey.decode_from(key, 2, version)[0]
    if value is None:
        return gk.group, None
    (vv,) = _version.unpack_from(value, 0)
    check_value_version("GroupMetadataValue", vv, GroupMetadataValue.VALID_VERSIONS)
    gv = GroupMetadataValue.decode_from(value, 2, vv)[0]
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
    return gk.group, g


# ------------------------------------------------------------------------------------------------
# one partition's groups


@dataclass(slots=True)
class _Retired:
    """What unloaded shards counted, so that the coordinator's counters never go back."""

    completed_rebalances: int = 0


class GroupShard:
    """The groups of one ``__consumer_offsets`` partition: their state machine, the offsets
    transactions committed that wait for their markers, and the JoinGroup/SyncGroup responses
    owed to members."""

    def __init__(self, partition: int, limits: GroupLimits, retired: _Retired,
                 consumer_config: ConsumerGroupConfig | None = None,
                 share_config: ShareGroupConfig | None = None) -> None:
        self.partition = partition
        self.state = GroupCoordinatorState(limits)
        #: the partition's KIP-848 consumer groups (their offsets are in ``state``)
        self.consumer = ConsumerGroups(self.state, consumer_config)
        #: the partition's share groups (KIP-932; records: .share_records)
        self.share = ShareGroups(share_config)
        #: completes once the last share-group write made here is durable
        self.share_tail: asyncio.Future[None] | None = None
        self._share_records = ShareRecordLoader()
        #: completes once the last consumer-group write made here is durable
        self.consumer_tail: asyncio.Future[None] | None = None
        #: transactional offset commits waiting for their transaction's marker:
        #: producer id -> group -> offsets (TxnOffsetCommit, KIP-98)
        self.txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata | None]]] = {}
        self.join_waiters: dict[str, asyncio.Future[JoinResult]] = {}
        self.sync_waiters: dict[str, asyncio.Future[SyncResult]] = {}
        #: group metadata records met while loading (None: deleted), installed at the end
        self._read_groups: dict[str, Group | None] = {}
        #: record types met that this version does not read (each said once)
        self._unknown_types: set[int] = set()
        self._retired = retired

    # -- the runtime's contract -------------------------------------------------------------------
    def replay(self, record: CoordinatorRecord) -> None:
        key = record.key
        if key is None or len(key) < 2:
            return
        (version,) = _version.unpack_from(key, 0)
        if version in (0, 1):
            gid, tp, om = _decode_offset(key, version, record.value)
            if record.producer_id >= 0:  # a TxnOffsetCommit: counts once its marker commits
                self.txn_offsets.setdefault(record.producer_id, {}).setdefault(gid, {})[tp] = om
            else:
                self.state.load_offset(gid, tp, om)
        elif version == 2:
            gid, group = _decode_group(key, version, record.value)
            self._read_groups[gid] = group
        elif version in CONSUMER_GROUP_RECORD_TYPES:
            found = decode_record(key, record.value)
            if found is not None:
                self.consumer.replay(found)
        elif version in SHARE_GROUP_RECORD_TYPES:
            if record.value is not None and len(record.value) >= 2:
                check_value_version(f"share group record of type {version}", _version.unpack_from(record.value, 0)[0],
                                    (0, 0))
            try:
                self._share_records.replay(key, record.value)
            except Exception as exc:  # one unreadable record must not keep every group of the partition away
                log.warning("share group record at offset %d of __consumer_offsets-%d could not be read and "
                            "is left out: %s", record.offset, self.partition, exc)
        elif version not in self._unknown_types:
            # a record type this version does not read (a group type it does not have, such as
            # streams groups, or a left-over of an aborted upgrade): skipped, as Kafka does,
            # and said once per type and load; the records stay in the log
            self._unknown_types.add(version)
            log.warning("__consumer_offsets-%d: the record at offset %d has record type %d, which this Odradek does "
                        "not read: records of this type are skipped (they stay in the log)",
                        self.partition, record.offset, version)

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self.complete_txn(producer_id, commit)

    def loaded(self, now_ms: int) -> None:
        for gid, g in self._read_groups.items():
            if g is None:
                # deleted; offsets committed after the deletion (a standalone consumer's) keep the
                # group alive as an Empty group, as Kafka loads groups that only store offsets
                kept = self.state.groups.get(gid)
                if kept is None or not kept.offsets:
                    self.state.unload_group(gid)
            else:
                self.state.load_group(g, now_ms)
        self._read_groups = {}
        self.consumer.loaded(now_ms)
        self.share.groups.update(self._share_records.groups())
        self.share.loaded(now_ms)

    def unloaded(self) -> None:
        """Another broker coordinates these groups now: members waiting on a rebalance are told
        NOT_COORDINATOR (they find the new coordinator and join again)."""
        for member_id, fut in self.join_waiters.items():
            if not fut.done():
                fut.set_result(JoinResult(member_id, ErrorCode.NOT_COORDINATOR))
        for member_id, sfut in self.sync_waiters.items():
            if not sfut.done():
                sfut.set_result(SyncResult(member_id, ErrorCode.NOT_COORDINATOR))
        self.join_waiters.clear()
        self.sync_waiters.clear()
        self._retired.completed_rebalances += self.state.completed_rebalances + self.consumer.completed_rebalances
        self.state.completed_rebalances = 0
        self.consumer.completed_rebalances = 0

    # -- transactions -----------------------------------------------------------------------------
    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """A transaction's marker: its offsets become the committed ones (COMMIT) or are dropped."""
        groups = self.txn_offsets.pop(producer_id, None)
        if not groups or not commit:
            return
        for gid, offsets in groups.items():
            self.state.apply_commit(StoreOffsets(gid, offsets))


# ------------------------------------------------------------------------------------------------
# the coordinator


class GroupCoordinator:
    def __init__(self, settings: GroupSettings, ports: CoordinatorPorts,
                 share_settings: ShareGroupSettings | None = None) -> None:
        """``share_settings``: the broker's group.share.* settings (None: their defaults)."""
        self.settings = settings
        self.clock = ports.clock
        self.limits = GroupLimits(
            min_session_timeout_ms=settings.min_session_timeout_ms,
            max_session_timeout_ms=settings.max_session_timeout_ms,
            max_size=settings.max_size,
            initial_rebalance_delay_ms=settings.initial_rebalance_delay_ms,
            offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
            offsets_retention_ms=settings.offsets_retention_ms,
        )
        self._retired = _Retired()
        self.consumer_config = consumer_group_config(settings)
        if share_settings is None:
            share_settings = settings_from(BrokerConfig({})).share_groups
        self.share_config = share_group_config(share_settings)
        self.runtime = CoordinatorRuntime(offsets_topic(settings, ports.replication), self._new_shard, ports)
        self.runtime.deadline("group-timer", self._next_deadline, self._tick)
        self.runtime.every("offsets-expiry", settings.offsets_retention_check_interval_ms, self._expire)
        #: KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe, and the classic
        #: APIs reaching a consumer group)
        self.consumer = ConsumerGroupService(
            self.runtime, self.consumer_config, self.clock, enabled=consumer_protocol_enabled(settings),
            encode_classic=_classic_record, deliver=self._apply,
        )
        #: share groups (KIP-932: ShareGroupHeartbeat, ShareGroupDescribe; membership for ShareFetch)
        self.share = ShareGroupService(self.runtime, self.share_config, self.clock)
        #: the broker's metric counters (set by the broker; None: off)
        self.metrics: BrokerMetrics | None = None

    def _new_shard(self, partition: int) -> GroupShard:
        shard = GroupShard(partition, self.limits, self._retired, self.consumer_config, self.share_config)
        shard.share.group_timeouts = self.share.group_timeouts
        return shard

    def shard(self, group_id: str) -> GroupShard:
        """The shard serving ``group_id`` (the errors of :meth:`check` otherwise)."""
        return self._shard(group_id)

    # ------------------------------------------------------------------------------------------
    # lifecycle and routing

    def start(self) -> None:
        self.runtime.start()

    async def stop(self) -> None:
        await self.runtime.stop()

    def now(self) -> int:
        return self.clock.now_ms()

    def on_hosting_changed(self, image: MetadataImage | None) -> None:
        self.runtime.on_hosting_changed(image)

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (Kafka does it on the first FindCoordinator)."""
        await self.runtime.ensure_topic()

    def check_storage(self, partition: int) -> None:
        self.runtime.check_storage(partition)

    def check(self, group_id: str) -> None:
        """Raise unless this broker serves ``group_id`` right now."""
        self._shard(group_id)

    def _shard(self, group_id: str) -> GroupShard:
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "empty group id")
        return self.runtime.shard(group_id, f"group {group_id}")

    @property
    def loading(self) -> bool:
        """Whether a partition is loading (ListGroups answers COORDINATOR_LOAD_IN_PROGRESS)."""
        return bool(self.runtime.loading)

    # ------------------------------------------------------------------------------------------
    # reading groups

    def describe(self, group_id: str) -> Group | None:
        """A classic group (DescribeGroups): None for a consumer group, as Kafka's DescribeGroups
        does not describe those (ConsumerGroupDescribe does)."""
        shard = self._shard(group_id)
        if shard.consumer.has(group_id) or shard.share.has(group_id):
            return None
        return shard.state.describe(group_id)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, *,
                      member_id: str | None = None, member_epoch: int = -1) -> dict[
        TopicPartition, OffsetAndMetadata | None
    ]:
        """The group's committed offsets; for a consumer group with a member id or epoch given
        (OffsetFetch v9), the member must be the group's at that epoch (UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH)."""
        shard = self._shard(group_id)
        _not_share(shard, group_id)
        if shard.consumer.has(group_id):
            shard.consumer.validate_offset_fetch(group_id, member_id, member_epoch)
        return shard.state.fetch_offsets(group_id, partitions)

    def list_groups(self, states: set[str] | None = None) -> list[Group]:
        """The classic groups of every partition loaded here (``states``: only those in these
        states)."""
        return [g for shard in self.runtime.shards() for g in shard.state.list_groups(states)
                if not shard.consumer.has(g.group_id)]

    def list_all(self, states: set[str] | None = None, types: set[str] | None = None) -> list[
        tuple[str, str, str, str]
    ]:
        """Every group loaded here as ListGroups shows it: ``(group id, protocol type, state,
        type)``, the type ``classic`` or ``consumer``; ``states`` and ``types`` filter (matched
        without regard to case, as Kafka does)."""
        wanted_states = {s.strip().lower() for s in states or ()}
        wanted_types = {t.strip().lower() for t in types or ()}
        out = []
        for shard in self.runtime.shards():
            if not wanted_types or "classic" in wanted_types:
                for g in shard.state.list_groups(None):
                    if shard.consumer.has(g.group_id):
                        continue
                    if not wanted_states or g.state.value.lower() in wanted_states:
                        out.append((g.group_id, g.protocol_type or "", g.state.value, "classic"))
            if not wanted_types or "consumer" in wanted_types:
                for cg in shard.consumer.list_groups(wanted_states or None):
                    out.append((cg.group_id, "consumer", cg.state.value, "consumer"))
            if not wanted_types or "share" in wanted_types:
                for sg in shard.share.list_groups(wanted_states or None):
                    out.append((sg.group_id, "share", sg.state, "share"))
        return out

    def all_groups(self) -> list[Group]:
        """Every group of the loaded partitions, Dead ones too (the metrics' view)."""
        return [g for shard in self.runtime.shards() for g in list(shard.state.groups.values())]

    @property
    def completed_rebalances(self) -> int:
        """Rebalances that ended with the group stable, since the broker started."""
        return self._retired.completed_rebalances + sum(
            s.state.completed_rebalances + s.consumer.completed_rebalances for s in self.runtime.shards()
        )

    # ------------------------------------------------------------------------------------------
    # group operations

    async def join(self, **kwargs: object) -> JoinResult:
        gid = str(kwargs["group_id"])
        shard = self._shard(gid)
        if shard.share.has(gid):  # a share group: not a group the classic protocol may join
            return JoinResult("", ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        consumer_group = shard.consumer.group(gid)
        if consumer_group is not None:
            if consumer_group.members:
                return await self.consumer.classic_join(shard, kwargs)
            # an empty consumer group makes way for a classic one
            code = await self.consumer.delete(shard, gid)
            if code is not ErrorCode.NONE:
                return JoinResult(str(kwargs["member_id"]), code)
            shard = self._shard(gid)
        result, effects, member_id = shard.state.join(self.now(), **kwargs)  # type: ignore[arg-type]
        fut: asyncio.Future[JoinResult] | None = None
        if result is None:
            old = shard.join_waiters.get(member_id)
            if old is not None and not old.done():
                old.set_result(JoinResult(member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            fut = shard.join_waiters[member_id] = asyncio.get_running_loop().create_future()
        await self._apply(shard, effects)
        self.runtime.wake()
        if result is not None:
            return result
        assert fut is not None
        return await fut

    async def sync(self, **kwargs: object) -> SyncResult:
        shard = self._shard(str(kwargs["group_id"]))
        if shard.consumer.has(str(kwargs["group_id"])):
            return await self.consumer.classic_sync(shard, kwargs)
        result, effects = shard.state.sync(self.now(), **kwargs)  # type: ignore[arg-type]
        member_id = str(kwargs["member_id"])
        fut: asyncio.Future[SyncResult] | None = None
        if result is None:
            fut = shard.sync_waiters[member_id] = asyncio.get_running_loop().create_future()
        await self._apply(shard, effects)
        self.runtime.wake()
        if result is not None:
            return result
        assert fut is not None
        return await fut

    def heartbeat(self, **kwargs: object) -> ErrorCode:
        shard = self._shard(str(kwargs["group_id"]))
        if shard.consumer.has(str(kwargs["group_id"])):
            return self.consumer.classic_heartbeat(shard, kwargs)
        code = shard.state.heartbeat(self.now(), **kwargs)  # type: ignore[arg-type]
        self.runtime.wake()
        return code

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        shard = self._shard(group_id)
        if shard.consumer.has(group_id):
            return await self.consumer.classic_leave(shard, group_id, members)
        errors, effects = shard.state.leave(self.now(), group_id=group_id, members=members)
        await self._apply(shard, effects)
        self.runtime.wake()
        return errors

    async def commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        api_version: int = 9,
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetCommit; for a consumer group the generation is the member epoch (STALE_MEMBER_EPOCH
        for another, and members using the consumer protocol must commit with v9+)."""
        shard = self._shard(group_id)
        _not_share(shard, group_id)
        if shard.consumer.has(group_id):
            shard.consumer.validate_offset_commit(group_id, member_id, group_instance_id, generation_id,
                                                  False, api_version)
            generation_id, member_id, group_instance_id = -1, "", None  # checked: stored as the group's
        error, per, store = shard.state.prepare_commit(
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
            await self.runtime.append(shard.partition, _offset_records(store))
        except KafkaError as exc:
            code = _COMMIT_ERRORS.get(exc.code, exc.code)
            return ErrorCode.NONE, {tp: code if e is ErrorCode.NONE else e for tp, e in per.items()}
        shard.state.apply_commit(store)
        if self.metrics is not None:
            self.metrics.offset_commits += len(offsets)
        return ErrorCode.NONE, per

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        result = {}
        for gid in group_ids:
            try:
                shard = self._shard(gid)
            except KafkaError as exc:
                result[gid] = exc.code
                continue
            if shard.share.has(gid):
                code = await self.share.delete(shard, gid)
                if code is not ErrorCode.NONE or shard.state.describe(gid) is None:
                    result[gid] = code
                    continue
            if shard.consumer.has(gid):
                code = await self.consumer.delete(shard, gid)
                if code is not ErrorCode.NONE:
                    result[gid] = code
                    continue
                if shard.state.describe(gid) is None:
                    result[gid] = ErrorCode.NONE  # no offsets to delete
                    continue
            code, effects = shard.state.delete_group(self.now(), gid)
            try:
                await self._apply(shard, effects)
            except KafkaError as exc:
                code = _COMMIT_ERRORS.get(exc.code, exc.code)
            result[gid] = code
        return result

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> tuple[
        ErrorCode, dict[TopicPartition, ErrorCode]
    ]:
        shard = self._shard(group_id)
        _not_share(shard, group_id)
        if shard.consumer.has(group_id):
            # a consumer group: offsets of the topics it subscribes to stay (Kafka's check)
            group = shard.consumer.group(group_id)
            busy = {tp for tp in partitions if group is not None and group.members
                    and shard.consumer.subscribed_to(group_id, tp[0])}
            if shard.state.describe(group_id) is None:
                return ErrorCode.NONE, {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp in busy else ErrorCode.NONE
                                        for tp in partitions}
            error, per, store = shard.state.delete_offsets(self.now(), group_id, [tp for tp in partitions
                                                                                   if tp not in busy])
            per.update(dict.fromkeys(busy, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
        else:
            error, per, store = shard.state.delete_offsets(self.now(), group_id, partitions)
        if store is not None:
            await self.runtime.append(shard.partition, _offset_records(store))
            shard.state.apply_commit(store)
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
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """TxnOffsetCommit: validated like a commit (KIP-447: the group's generation and member,
        when given), written as part of the producer's transaction, visible at its COMMIT marker."""
        shard = self._shard(group_id)
        _not_share(shard, group_id)
        if shard.consumer.has(group_id):
            if generation_id >= 0 or member_id:
                shard.consumer.validate_offset_commit(group_id, member_id, group_instance_id, generation_id,
                                                      True, 9)
            generation_id, member_id, group_instance_id = -1, "", None
        error, per, store = shard.state.prepare_commit(
            self.now(), group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, offsets=offsets, transactional=True,
        )
        if error is not ErrorCode.NONE or store is None:
            return error, per
        try:
            await self.runtime.append(shard.partition, _offset_records(store), producer=(producer_id, producer_epoch))
        except KafkaError as exc:
            code = _COMMIT_ERRORS.get(exc.code, exc.code)
            return ErrorCode.NONE, {tp: code if e is ErrorCode.NONE else e for tp, e in per.items()}
        shard.txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(store.offsets)
        return ErrorCode.NONE, per

    def complete_txn(self, producer_id: int, partition: int, commit: bool) -> None:
        """A transaction's marker reached offsets partition ``partition``: its offsets of the
        groups stored there become the committed ones (COMMIT) or are dropped (ABORT)."""
        shard = self.runtime.shard_at(partition)
        if shard is not None:
            shard.complete_txn(producer_id, commit)

    def pending_txn_offsets(self, group_id: str, partitions: list[TopicPartition] | None) -> bool:
        """Whether a transaction not yet decided committed offsets of these partitions
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT then, KIP-447)."""
        shard = self.runtime.shard_at(self.partition_for(group_id))
        if shard is None:
            return False
        for groups in shard.txn_offsets.values():
            offsets = groups.get(group_id)
            if offsets and (partitions is None or any(tp in offsets for tp in partitions)):
                return True
        return False

    # ------------------------------------------------------------------------------------------
    # effects

    async def _apply(self, shard: GroupShard, effects: list[Effect]) -> None:
        """Writes first (a completed rebalance is durable before members hear of it), then the
        responses owed to other members."""
        failure: ErrorCode | None = None
        for e in effects:
            if not isinstance(e, (StoreGroup, StoreOffsets)):
                continue
            try:
                if isinstance(e, StoreGroup):
                    value = None if e.group is None else group_value(e.group)
                    await self.runtime.append(shard.partition, [(group_key(e.group_id), value)])
                else:
                    # the state machine already applied these (expiry, deletion): only write
                    await self.runtime.append(shard.partition, _offset_records(e))
            except KafkaError as exc:
                log.warning("could not write group %s: %s", e.group_id, exc)
                failure = _COMMIT_ERRORS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR)
        for e in effects:
            if isinstance(e, JoinResult):
                fut = shard.join_waiters.pop(e.member_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(e)
            elif isinstance(e, SyncResult):
                if failure is not None and e.error is ErrorCode.NONE:
                    e = SyncResult(e.member_id, failure)
                sfut = shard.sync_waiters.pop(e.member_id, None)
                if sfut is not None and not sfut.done():
                    sfut.set_result(e)

    # ------------------------------------------------------------------------------------------
    # timers

    def expire_sessions(self, group_id: str, member_id: str | None = None) -> int:
        """Make the session of a member of ``group_id`` (every member: None) due now, classic or
        consumer group (a test broker's fault scripting): the group timer then expires it as when
        its session timeout passes.  The count of sessions made due."""
        count = 0
        for shard in self.runtime.shards():
            g = shard.state.groups.get(group_id)
            if g is not None:
                for mid, m in g.members.items():
                    if member_id is None or mid == member_id:
                        m.heartbeat_deadline = 0
                        count += 1
            cg = shard.consumer.groups.get(group_id)
            if cg is not None:
                for mid in list(cg.session_deadline):
                    if member_id is None or mid == member_id:
                        cg.session_deadline[mid] = 0
                        count += 1
        self.runtime.wake()
        return count

    def _next_deadline(self) -> int | None:
        deadlines = [d for s in self.runtime.shards() if (d := s.state.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    async def _tick(self, now: int) -> None:
        """Session expiry, rebalance timeouts, initial delays (the group timer): every shard
        decides at ``now``, then the effects are carried out."""
        decided = [(shard, shard.state.tick(now)) for shard in self.runtime.shards()]
        for shard, effects in decided:
            if effects:
                try:
                    await self._apply(shard, effects)
                except Exception:
                    log.exception("group timer effects failed")

    async def _expire(self) -> None:
        """Offsets past their retention: tombstones, and groups left without offsets deleted."""
        now = self.now()
        decided = [
            (shard, shard.state.expire_offsets(now, keep=lambda gid, s=shard: _has_members(s, gid)))  # type: ignore[misc]
            for shard in self.runtime.shards()
        ]
        for shard, effects in decided:
            if effects:
                try:
                    await self._apply(shard, effects)
                except Exception:
                    log.exception("offset expiration failed")
        # an empty consumer group whose offsets are all gone is deleted, as Kafka does
        for shard in self.runtime.shards():
            for cg in list(shard.consumer.groups.values()):
                if not cg.members and shard.state.describe(cg.group_id) is None:
                    await self.consumer.delete(shard, cg.group_id)
