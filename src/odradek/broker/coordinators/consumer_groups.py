"""KIP-848 consumer groups on the group coordinator's runtime.

The consumer groups of a ``__consumer_offsets`` partition live in its :class:`GroupShard` beside
the classic groups (:class:`odradek.cluster.consumer_group.ConsumerGroups`, whose classic state is
the shard's), and their records in the same partition (:mod:`.consumer_records`).  This module
carries out what that state machine decides:

* an operation (a ConsumerGroupHeartbeat, a classic member's JoinGroup or LeaveGroup to a consumer
  group, a timer fencing a member, a deletion) changes the shard's state by applying its records,
  then appends them at once (in the order the changes were made) and answers only once they are
  durable and replicated: a failed append has the partition loaded again from its log, and the
  request answered with Kafka's error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE...);
* an answer that writes nothing (a heartbeat with nothing new, ConsumerGroupDescribe, a classic
  member's SyncGroup) waits for the writes before it, so that no member hears of a state that
  could still be lost;
* a deadline timer on the runtime's clock fences members whose session expired, that did not
  revoke within their rebalance timeout, or (classic members) did not join or sync in time;
* the classic members waiting in a group that converts to the consumer protocol are answered
  REBALANCE_IN_PROGRESS; a group converted back rebalances as a classic group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.coordinators.consumer_records import encode_record
from odradek.cluster.consumer_assignors import assignor_name
from odradek.cluster.consumer_group import (
    ClassicGroupRecord,
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResponse,
    Outcome,
    Record,
    validate_heartbeat,
)
from odradek.cluster.group import JoinResult, SyncResult
from odradek.config import ConfigError
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek._clock import Clock
    from odradek.broker.coordinators.groups import GroupShard
    from odradek.broker.coordinators.runtime import CoordinatorRuntime
    from odradek.cluster.group import Effect, Group
    from odradek.cluster.metadata import MetadataImage
    from odradek.settings import GroupSettings

__all__ = ["ConsumerGroupService", "consumer_group_config"]

log = logging.getLogger(__name__)

# append errors as Kafka's group coordinator answers them (appendGroupMetadataErrorToResponseError)
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def consumer_group_config(settings: GroupSettings) -> ConsumerGroupConfig:
    """The ``group.consumer.*`` settings, checked as Kafka checks them at start-up (ConfigError
    naming the settings that disagree)."""
    session, heartbeat = settings.consumer_session_timeout_ms, settings.consumer_heartbeat_interval_ms
    min_s, max_s = settings.consumer_min_session_timeout_ms, settings.consumer_max_session_timeout_ms
    min_h, max_h = settings.consumer_min_heartbeat_interval_ms, settings.consumer_max_heartbeat_interval_ms
    bounded = (("session.timeout.ms", session), ("min.session.timeout.ms", min_s), ("max.session.timeout.ms", max_s),
               ("heartbeat.interval.ms", heartbeat), ("min.heartbeat.interval.ms", min_h),
               ("max.heartbeat.interval.ms", max_h), ("max.size", settings.consumer_max_size))
    for suffix, value in bounded:
        if value < 1:
            raise ConfigError(f"Invalid value {value} for configuration group.consumer.{suffix}: "
                              "Value must be at least 1")
    rules = [
        (max_h >= min_h, "group.consumer.max.heartbeat.interval.ms must be greater than or equal to "
                         "group.consumer.min.heartbeat.interval.ms"),
        (heartbeat >= min_h, "group.consumer.heartbeat.interval.ms must be greater than or equal to "
                             "group.consumer.min.heartbeat.interval.ms"),
        (heartbeat <= max_h, "group.consumer.heartbeat.interval.ms must be less than or equal to "
                             "group.consumer.max.heartbeat.interval.ms"),
        (max_s >= min_s, "group.consumer.max.session.timeout.ms must be greater than or equal to "
                         "group.consumer.min.session.timeout.ms"),
        (session >= min_s, "group.consumer.session.timeout.ms must be greater than or equal to "
                           "group.consumer.min.session.timeout.ms"),
        (session <= max_s, "group.consumer.session.timeout.ms must be less than or equal to "
                           "group.consumer.max.session.timeout.ms"),
        (heartbeat < session, "group.consumer.heartbeat.interval.ms must be less than "
                              "group.consumer.session.timeout.ms"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)
    assignors: list[str] = []
    for item in settings.consumer_assignors:
        known = assignor_name(item)
        if known is None:
            raise ConfigError(f"Invalid value {item} for configuration group.consumer.assignors: Odradek's "
                              "server-side assignors are uniform and range (or Kafka's class names of them)")
        if known not in assignors:
            assignors.append(known)
    if not assignors:
        raise ConfigError("group.consumer.assignors must name at least one assignor (uniform, range)")
    policy = settings.consumer_migration_policy.strip().lower()
    if policy not in _POLICIES:
        raise ConfigError(f"Invalid value {policy} for configuration group.consumer.migration.policy: "
                          f"String must be one of (case insensitive): {', '.join(p.upper() for p in _POLICIES)}")
    return ConsumerGroupConfig(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat,
        max_size=settings.consumer_max_size,
        assignors=tuple(assignors),
        migration_policy=policy,
        classic_max_size=settings.max_size,
        classic_min_session_timeout_ms=settings.min_session_timeout_ms,
        classic_max_session_timeout_ms=settings.max_session_timeout_ms,
    )


def consumer_protocol_enabled(settings: GroupSettings) -> bool:
    """``group.coordinator.rebalance.protocols`` includes ``consumer``."""
    return "consumer" in {p.strip().lower() for p in settings.coordinator_rebalance_protocols}


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    """ConsumerGroupDescribe's view of one group (``group`` None: ``error``)."""

    group_id: str
    error: ErrorCode
    message: str | None
    group: ConsumerGroup | None
    assignor: str


class ConsumerGroupService:
    """The consumer-group operations of the group coordinator (see the module docstring)."""

    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupShard],
        config: ConsumerGroupConfig,
        clock: Clock,
        *,
        enabled: bool,
        encode_classic: Callable[[Group | None, str], tuple[bytes, bytes | None]],
        deliver: Callable[[GroupShard, list[Effect]], object],
    ) -> None:
        self.runtime = runtime
        self.config = config
        self.clock = clock
        self.enabled = enabled
        self._encode_classic = encode_classic
        self._deliver = deliver
        runtime.deadline("consumer-group-timer", self._next_deadline, self._tick)

    @property
    def image(self) -> MetadataImage:
        return self.runtime.topics.image

    def now(self) -> int:
        return self.clock.now_ms()

    # ------------------------------------------------------------------------------------------
    # writing

    def _encode(self, r: Record) -> tuple[bytes, bytes | None]:
        if isinstance(r, ClassicGroupRecord):
            return self._encode_classic(r.group, r.group_id)
        return encode_record(r)

    async def _write(self, shard: GroupShard, outcome: Outcome) -> ErrorCode | None:
        """Append the records an operation applied (none: wait for the writes before it); then
        answer the classic members it concerns.  Returns the error to answer when the append
        failed (the partition is then loaded again from its log)."""
        records = outcome.records
        if not records:
            await self.settled(shard)
            self._answer_classic(shard, outcome)
            return None
        encoded = [self._encode(r) for r in records]
        done = asyncio.get_running_loop().create_future()
        shard.consumer_tail = done
        try:
            await self.runtime.append(shard.partition, encoded)
        except KafkaError as exc:
            code = _APPEND_ERRORS.get(exc.code, exc.code)
            log.warning("could not write the records of consumer group %s (%s): loading %s again",
                        records[0].group_id, exc, shard.partition)
            self.runtime.reload(shard.partition, f"a write of consumer group records failed: {exc}")
            return code
        finally:
            if not done.done():
                done.set_result(None)
        self._answer_classic(shard, outcome)
        self.runtime.wake()
        return None

    def _answer_classic(self, shard: GroupShard, outcome: Outcome) -> None:
        if outcome.classic_effects:
            effects: list[Effect] = list(outcome.classic_effects)
            result = self._deliver(shard, effects)
            if asyncio.iscoroutine(result):
                task = asyncio.ensure_future(result)
                task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    @staticmethod
    async def settled(shard: GroupShard) -> None:
        """Wait until what this partition's consumer groups wrote so far is durable."""
        tail = shard.consumer_tail
        if tail is not None and not tail.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(tail)

    # ------------------------------------------------------------------------------------------
    # ConsumerGroupHeartbeat / ConsumerGroupDescribe

    async def heartbeat(
        self, shard_of: Callable[[str], GroupShard], req: HeartbeatRequest, describable: Callable[[str], bool]
    ) -> HeartbeatResponse:
        if not self.enabled:
            return HeartbeatResponse(ErrorCode.UNSUPPORTED_VERSION, "The consumer group protocol is not enabled "
                                     "on this broker (group.coordinator.rebalance.protocols).")
        try:
            validate_heartbeat(req, self.config.assignors)
            shard = shard_of(req.group_id)
            if shard.share.has(req.group_id):
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
            outcome = shard.consumer.heartbeat(self.now(), req, self.image, describable)
        except KafkaError as exc:
            return HeartbeatResponse(exc.code, exc.message or None)
        error = await self._write(shard, outcome)
        if error is not None:
            return HeartbeatResponse(error)
        response = outcome.response
        assert isinstance(response, HeartbeatResponse)
        return response

    async def describe(self, shard_of: Callable[[str], GroupShard], group_ids: Iterable[str]) -> list[DescribedConsumerGroup]:
        out = []
        for gid in group_ids:
            try:
                if not gid:
                    raise KafkaError(ErrorCode.INVALID_GROUP_ID, "The group id is empty.")
                shard = shard_of(gid)
                await self.settled(shard)
                group = shard.consumer.group(gid)
                if group is None and shard.share.has(gid):
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
                if group is None:
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
            except KafkaError as exc:
                out.append(DescribedConsumerGroup(gid, exc.code, exc.message or None, None, ""))
                continue
            assignor = shard.consumer.preferred_assignor(group.members.values())
            out.append(DescribedConsumerGroup(gid, ErrorCode.NONE, None, group, assignor))
        return out

    # ------------------------------------------------------------------------------------------
    # classic members in consumer groups

    async def classic_join(self, shard: GroupShard, kwargs: dict[str, object]) -> JoinResult:
        member_id = str(kwargs["member_id"])
        session = int(kwargs["session_timeout_ms"])  # type: ignore[call-overload]
        cfg = self.config
        if not cfg.classic_min_session_timeout_ms <= session <= cfg.classic_max_session_timeout_ms:
            return JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT)
        try:
            outcome = shard.consumer.classic_join(self.now(), self.image, **kwargs)  # type: ignore[arg-type]
        except KafkaError as exc:
            return JoinResult(member_id, exc.code)
        error = await self._write(shard, outcome)
        if error is not None:
            return JoinResult(member_id, error)
        result = outcome.response
        assert isinstance(result, JoinResult)
        return result

    async def classic_sync(self, shard: GroupShard, kwargs: dict[str, object]) -> SyncResult:
        member_id = str(kwargs["member_id"])
        await self.settled(shard)
        group = shard.consumer.group(str(kwargs["group_id"]))
        if group is None or not group.members:
            return SyncResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
        try:
            return shard.consumer.classic_sync(
                self.now(), self.image, group_id=str(kwargs["group_id"]), generation_id=int(kwargs["generation_id"]),  # type: ignore[call-overload]
                member_id=member_id, group_instance_id=kwargs.get("group_instance_id"),  # type: ignore[arg-type]
                protocol_type=kwargs.get("protocol_type"), protocol_name=kwargs.get("protocol_name"),  # type: ignore[arg-type]
            )
        except KafkaError as exc:
            return SyncResult(member_id, exc.code)
        finally:
            self.runtime.wake()

    def classic_heartbeat(self, shard: GroupShard, kwargs: dict[str, object]) -> ErrorCode:
        try:
            code = shard.consumer.classic_heartbeat(
                self.now(), group_id=str(kwargs["group_id"]), member_id=str(kwargs["member_id"]),
                group_instance_id=kwargs.get("group_instance_id"),  # type: ignore[arg-type]
                generation_id=int(kwargs["generation_id"]),  # type: ignore[call-overload]
            )
        except KafkaError as exc:
            code = exc.code
        self.runtime.wake()
        return code

    async def classic_leave(self, shard: GroupShard, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        try:
            outcome = shard.consumer.classic_leave(self.now(), self.image, group_id, members)
        except KafkaError as exc:
            return [exc.code for _ in members]
        error = await self._write(shard, outcome)
        if error is not None:
            return [error for _ in members]
        result = outcome.response
        assert isinstance(result, list)
        return result

    async def delete(self, shard: GroupShard, group_id: str) -> ErrorCode:
        """Delete an empty consumer group's records (DeleteGroups, or a classic group taking its
        id); NON_EMPTY_GROUP while it has members."""
        try:
            outcome = shard.consumer.delete(self.now(), group_id)
        except KafkaError as exc:
            return exc.code
        error = await self._write(shard, outcome)
        return ErrorCode.NONE if error is None else error

    # ------------------------------------------------------------------------------------------
    # timers

    def _next_deadline(self) -> int | None:
        found = [d for s in self.runtime.shards() if (d := s.consumer.next_deadline()) is not None]
        return min(found) if found else None

    async def _tick(self, now: int) -> None:
        """Fence the members the timers say; each shard's decisions are written in one append
        made as soon as they are taken (the log keeps the order the state changed in)."""
        image = self.image
        for shard in self.runtime.shards():
            if self.runtime.shard_at(shard.partition) is not shard:
                continue  # unloaded while an earlier shard's write waited
            outcomes = shard.consumer.tick(now, image)
            if not outcomes:
                continue
            merged = Outcome(records=[r for o in outcomes for r in o.records],
                             classic_effects=[e for o in outcomes for e in o.classic_effects])
            try:
                await self._write(shard, merged)
            except Exception:
                log.exception("consumer group timer effects failed")
