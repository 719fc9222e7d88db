"""The share coordinator (KIP-932) on the coordinator runtime: keeps share-partition state in
``__share_group_state`` with the rules of :mod:`odradek.cluster.share_state`.

A share-partition (group, topic id, partition) belongs to partition
``abs(javaHash("group:topicId:partition")) % share.coordinator.state.topic.num.partitions`` of
``__share_group_state`` (created on first use, cleanup.policy delete as Kafka creates it) and is
served by that partition's leader.  Each request is planned against the shard's state, its record
appended with acks=all, and replayed into the shard once written: the shard is always the replay
of its partition's log, and one lock per shard keeps the plans in order.

The partition leaders reach it through :mod:`odradek.broker.share_persister`, and other brokers
through the RPCs 83-87 (:mod:`odradek.broker.handlers.share_state`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.coordinators.record_versions import check_value_version
from odradek.broker.coordinators.runtime import (
    CoordinatorPorts,
    CoordinatorRecord,
    CoordinatorRuntime,
    CoordinatorTopic,
)
from odradek.broker.topics import SHARE_STATE_TOPIC
from odradek.cluster.share_state import (
    DEFAULT_SNAPSHOT_EVERY,
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    ShareRecord,
    ShareState,
    ShareStateMap,
    StateBatch,
    coordinator_key,
    decode_record,
    encode_record,
)
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.cluster.metadata import MetadataImage
    from odradek.settings import ShareCoordinatorSettings

__all__ = ["ShareCoordinator", "ShareCoordinatorConfig", "ShareStateShard"]

log = logging.getLogger(__name__)

#: how often the records no share-partition needs any more are deleted (Kafka's
#: share.coordinator.state.topic.prune.interval.ms default)
PRUNE_INTERVAL_MS = 5 * 60 * 1000

# append errors of __share_group_state, as the coordinator answers them (Kafka's mapping)
_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    """The share coordinator's configs (Kafka's ShareCoordinatorConfig), at Kafka's defaults."""

    #: share.coordinator.state.topic.num.partitions
    num_partitions: int = 50
    #: share.coordinator.state.topic.replication.factor (a single node: 1)
    replication_factor: int = 3
    #: share.coordinator.snapshot.update.records.per.snapshot
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    #: share.coordinator.write.timeout.ms
    write_timeout_ms: int = 5000

    @classmethod
    def from_settings(cls, settings: ShareCoordinatorSettings, *, single_node: bool) -> ShareCoordinatorConfig:
        return cls(
            num_partitions=settings.state_topic_num_partitions,
            replication_factor=1 if single_node else settings.state_topic_replication_factor,
            snapshot_every=settings.snapshot_update_records_per_snapshot,
            write_timeout_ms=settings.write_timeout_ms,
        )


class ShareStateShard:
    """The share-partitions of one ``__share_group_state`` partition."""

    def __init__(self, partition: int, snapshot_every: int) -> None:
        self.partition = partition
        self.state = ShareStateMap(snapshot_every=snapshot_every)
        #: the offset of the record each share-partition's state is rebuilt from (its last
        #: snapshot): the records below the least of them are no longer needed
        self.bases: dict[ShareKey, int] = {}
        #: the offset after the last record replayed
        self.end = 0
        #: one plan-append-replay at a time
        self.lock = asyncio.Lock()
        self.live = True
        #: record types met that this version does not read (each said once)
        self._unknown_types: set[int] = set()

    def replay(self, record: CoordinatorRecord) -> None:
        self.end = max(self.end, record.offset + 1)
        key, value = record.key, record.value
        if key is None or len(key) < 2:
            return
        kind = int.from_bytes(key[:2], "big", signed=True)
        if kind not in (SNAPSHOT_TYPE, UPDATE_TYPE):
            if kind not in self._unknown_types:
                # skipped as Kafka does, said once per type and load; the records stay in the log
                self._unknown_types.add(kind)
                log.warning("%s-%d: the record at offset %d has record type %d, which this Odradek does not read: "
                            "records of this type are skipped (they stay in the log)",
                            SHARE_STATE_TOPIC, self.partition, record.offset, kind)
            return
        if value is not None and len(value) >= 2:
            name = "ShareSnapshotValue" if kind == SNAPSHOT_TYPE else "ShareUpdateValue"
            check_value_version(name, int.from_bytes(value[:2], "big", signed=True), (0, 0))
        rec = decode_record(key, value)
        if rec is not None:
            self.apply(rec, record.offset)

    def apply(self, rec: ShareRecord, offset: int) -> None:
        """Replay ``rec``, written at ``offset``."""
        self.end = max(self.end, offset + 1)
        known = rec.key in self.state.states
        self.state.replay(rec)
        if rec.key not in self.state.states:
            self.bases.pop(rec.key, None)
        elif rec.kind == SNAPSHOT_TYPE or not known:
            self.bases[rec.key] = offset

    def prune_offset(self) -> int:
        """Where the partition's log may start: at the oldest record a share-partition still
        needs, or past every record when none has state."""
        return min(self.bases.values(), default=self.end)

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        return None  # the share coordinator writes no transactions

    def loaded(self, now_ms: int) -> None:
        return None

    def unloaded(self) -> None:
        self.live = False


class ShareCoordinator:
    """The share coordinator of this broker: the ``__share_group_state`` partitions it leads."""

    def __init__(self, config: ShareCoordinatorConfig, ports: CoordinatorPorts) -> None:
        self.config = config
        topic = CoordinatorTopic(
            SHARE_STATE_TOPIC, config.num_partitions, lambda: config.replication_factor,
            acks=-1, write_timeout_ms=config.write_timeout_ms,
        )
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
            topic, lambda p: ShareStateShard(p, config.snapshot_every), ports
        )
        self.clock = ports.clock
        self.topics = ports.topics
        self.runtime.every("prune", PRUNE_INTERVAL_MS, self.prune)

    # lifecycle and routing

    def start(self) -> None:
        self.runtime.start()

    async def stop(self) -> None:
        await self.runtime.stop()

    def on_hosting_changed(self, image: MetadataImage | None) -> None:
        self.runtime.on_hosting_changed(image)

    async def ensure_topic(self) -> None:
        await self.runtime.ensure_topic()

    def partition_for(self, key: str) -> int:
        """The ``__share_group_state`` partition of a coordinator key ``group:topicId:partition``."""
        return self.runtime.partition_for(key)

    def partition_of(self, key: ShareKey) -> int:
        return self.runtime.partition_for(coordinator_key(key.group_id, key.topic_id, key.partition))

    def check_storage(self, partition: int) -> None:
        self.runtime.check_storage(partition)

    def _shard(self, key: ShareKey) -> ShareStateShard:
        return self.runtime.shard(coordinator_key(key.group_id, key.topic_id, key.partition), f"share-partition {key}")

    def _check_topic(self, key: ShareKey) -> None:
        info = self.topics.image.topic_by_id(key.topic_id)
        if info is None or not 0 <= key.partition < info.partition_count:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {key.partition} of topic id {key.topic_id}")

    @staticmethod
    def _check_key(key: ShareKey) -> None:
        if not key.group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the group id must be given")
        if key.topic_id == uuid.UUID(int=0):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the topic id must be given")
        if key.partition < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid partition {key.partition}")

    async def _write(self, shard: ShareStateShard, records: Sequence[ShareRecord]) -> None:
        """Append ``records`` and replay them once written (the caller holds the shard's lock)."""
        if not records:
            return
        if not shard.live:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "the share coordinator moved")
        try:
            written = await self.runtime.append(shard.partition, [encode_record(r) for r in records])
        except KafkaError as exc:
            code = _WRITE_ERRORS.get(exc.code, exc.code)
            if exc.code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
                # written locally but perhaps not replicated: the log is the truth, reload it
                self.runtime.reload(shard.partition, f"a write ended with {exc.code.name}")
            raise KafkaError(code, exc.message) from exc
        if shard.live:
            for offset, r in enumerate(records, written.first_offset):
                shard.apply(r, offset)

    async def prune(self) -> None:
        """Move each loaded partition's log start up to the oldest record still needed (Kafka's
        share.coordinator.state.topic.prune.interval.ms: __share_group_state keeps no
        retention of its own)."""
        for shard in self.runtime.shards():
            if not shard.live or self.runtime.leader(shard.partition) is None:
                continue
            target = shard.prune_offset()
            part = self.runtime.leader(shard.partition)
            if part is None or target <= part.log.log_start_offset:
                continue
            try:
                start = await self.runtime.delete_records_before(shard.partition, target)
            except KafkaError as exc:
                log.info("could not prune %s-%d: %s", SHARE_STATE_TOPIC, shard.partition, exc)
                continue
            log.debug("pruned %s-%d up to %d", SHARE_STATE_TOPIC, shard.partition, start)

    # ------------------------------------------------------------------------------------------
    # the operations (one share-partition each; KafkaError with Kafka's code on failure)

    async def initialize(self, key: ShareKey, *, state_epoch: int, start_offset: int) -> None:
        self._check_key(key)
        shard = self._shard(key)
        async with shard.lock:
            rec = shard.state.plan_initialize(key, state_epoch=state_epoch, start_offset=start_offset,
                                              now_ms=self.clock.now_ms())
            await self._write(shard, [rec])

    async def write(
        self, key: ShareKey, *, leader_epoch: int, state_epoch: int, start_offset: int, batches: Sequence[StateBatch]
    ) -> None:
        self._check_key(key)
        shard = self._shard(key)
        self._check_topic(key)
        async with shard.lock:
            rec = shard.state.plan_write(
                key, leader_epoch=leader_epoch, state_epoch=state_epoch, start_offset=start_offset,
                batches=batches, now_ms=self.clock.now_ms(),
            )
            await self._write(shard, [rec])

    async def read(self, key: ShareKey, *, leader_epoch: int) -> ShareState | None:
        """The state (None: never initialized); a newer leader epoch is recorded first."""
        self._check_key(key)
        shard = self._shard(key)
        self._check_topic(key)
        async with shard.lock:
            state, rec = shard.state.read(key, leader_epoch, self.clock.now_ms())
            if rec is not None:
                await self._write(shard, [rec])
            return state

    async def summary(self, key: ShareKey) -> ShareState | None:
        self._check_key(key)
        shard = self._shard(key)
        return shard.state.states.get(key)

    async def delete(self, key: ShareKey) -> None:
        self._check_key(key)
        shard = self._shard(key)
        async with shard.lock:
            await self._write(shard, shard.state.plan_delete(key))
