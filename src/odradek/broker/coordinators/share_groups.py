"""Share groups (KIP-932) on the group coordinator's runtime: ShareGroupHeartbeat,
ShareGroupDescribe, and what ListGroups/DeleteGroups see of them.

The rules are :mod:`odradek.cluster.share_group`'s; the share groups of a ``__consumer_offsets``
partition live in its :class:`GroupShard` (``shard.share``) beside its classic and consumer
groups, and a group id is one kind of group only (a share heartbeat to a classic or consumer
group is GROUP_ID_NOT_FOUND, a JoinGroup or ConsumerGroupHeartbeat to a share group is refused).
A deadline timer on the runtime's clock removes members whose session ended.

An operation changes the shard's state, then appends the records that differ from the group's
records before it (:mod:`.share_records`, Kafka's record types 10-14), and answers once they are
durable; a failed append has the partition loaded again from its log and the request answered
with Kafka's error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE...).  An answer that writes
nothing waits for the writes before it.  So a share group survives a coordinator's move or
restart: its members go on at their epochs (each with a fresh session).

What the share-partition leaders (ShareFetch/ShareAcknowledge) may ask, through
:class:`ShareGroupService`: :meth:`~ShareGroupService.is_member`,
:meth:`~ShareGroupService.assignment`, and :meth:`~ShareGroupService.on_member_removed` to hear of
members that left or were removed.  These see only the groups this broker coordinates: a
partition leader that is not the group's coordinator learns nothing from them (Kafka's leader does
not ask the coordinator either: it trusts the share session's member id and releases a member's
records when its session closes or their locks expire).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.coordinators.consumer_groups import _APPEND_ERRORS
from odradek.broker.coordinators.share_records import changes, group_records
from odradek.cluster.share_group import (
    ShareGroup,
    ShareGroupConfig,
    ShareHeartbeat,
    ShareHeartbeatResult,
    validate_share_heartbeat,
)
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek._clock import Clock
    from odradek.broker.coordinators.groups import GroupShard
    from odradek.broker.coordinators.runtime import CoordinatorRuntime
    from odradek.cluster.metadata import MetadataImage
    from odradek.settings import ShareGroupSettings

__all__ = ["DescribedShareGroup", "MemberRemoved", "ShareGroupService", "share_group_config"]

log = logging.getLogger(__name__)

#: a listener of members leaving a share group: (group id, member id)
MemberRemoved = Callable[[str, str], None]


def share_group_config(settings: ShareGroupSettings) -> ShareGroupConfig:
    """The ``group.share.*`` settings (their ranges are checked when the settings are built)."""
    from odradek.config import ConfigError

    if settings.heartbeat_interval_ms >= settings.session_timeout_ms:
        raise ConfigError("group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms")
    return ShareGroupConfig(
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        max_size=settings.max_size,
    )


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    """ShareGroupDescribe's view of one group (``group`` None: ``error``)."""

    group_id: str
    error: ErrorCode
    message: str | None
    group: ShareGroup | None


def other_type(shard: GroupShard, group_id: str) -> str | None:
    """The kind of the group of another protocol with this id (``consumer``, ``classic``), if any."""
    if shard.consumer.has(group_id):
        return "consumer"
    g = shard.state.describe(group_id)
    if g is not None and g.state.value != "Dead":
        return "classic"
    return None


class ShareGroupService:
    """The share-group operations of the group coordinator (see the module docstring)."""

    def __init__(self, runtime: CoordinatorRuntime[GroupShard], config: ShareGroupConfig, clock: Clock) -> None:
        self.runtime = runtime
        self.config = config
        self.clock = clock
        self._listeners: list[MemberRemoved] = []
        self._deleted: list[Callable[[str], None]] = []
        #: deletes a group's share-partition state (the persister's DeleteShareGroupState, every
        #: share partition of the group) before DeleteGroups deletes the group: its error, if any,
        #: is the group's and the group stays (None: nothing to delete, a broker still starting)
        self.state_deleter: Callable[[str], Awaitable[ErrorCode]] | None = None
        #: see :meth:`set_group_timeouts` (given to every shard made)
        self.group_timeouts: Callable[[str], tuple[int | None, int | None]] | None = None
        runtime.deadline("share-group-timer", self._next_deadline, self._tick)

    @property
    def image(self) -> MetadataImage:
        return self.runtime.topics.image

    def now(self) -> int:
        return self.clock.now_ms()

    # ------------------------------------------------------------------------------------------
    # the narrow view for share-partition leaders (local groups only)

    def _local(self, group_id: str) -> ShareGroup | None:
        if not group_id:
            return None
        shard = self.runtime.shard_at(self.runtime.partition_for(group_id))
        return None if shard is None else shard.share.group(group_id)

    def is_member(self, group_id: str, member_id: str) -> bool:
        """Whether ``member_id`` is a member of share group ``group_id`` coordinated by this
        broker (False also when another broker coordinates the group)."""
        group = self._local(group_id)
        return group is not None and member_id in group.members

    def assignment(self, group_id: str, member_id: str) -> dict[uuid.UUID, frozenset[int]] | None:
        """The partitions (topic id -> partitions) the member was last given; None when it is
        not a member of a share group coordinated here."""
        group = self._local(group_id)
        member = None if group is None else group.members.get(member_id)
        return None if member is None else dict(member.assigned)

    def set_group_timeouts(self, lookup: Callable[[str], tuple[int | None, int | None]]) -> None:
        """Where a group's own ``share.session.timeout.ms`` and ``share.heartbeat.interval.ms``
        (GROUP configs) come from: ``lookup(group id) -> (session ms, interval ms)``, None for
        the broker's ``group.share.*``.  Read at each heartbeat (and at load for the sessions)."""
        self.group_timeouts = lookup
        for shard in self.runtime.shards():
            shard.share.group_timeouts = lookup

    def on_member_removed(self, callback: MemberRemoved) -> None:
        """Call ``callback(group id, member id)`` whenever a member of a share group coordinated
        here leaves (epoch -1) or its session expires, once that is durable.  A local
        convenience: a partition leader on another broker hears nothing, and nothing is said
        when the group's coordination moves to another broker (its members stay members)."""
        self._listeners.append(callback)

    def on_group_deleted(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(group id)`` once a share group coordinated here was deleted
        (DeleteGroups), e.g. to delete its share-partition state."""
        self._deleted.append(callback)

    def _removed(self, removed: Iterable[tuple[str, str]], why: str) -> None:
        for gid, mid in removed:
            log.info("share group %s: member %s %s", gid, mid, why)
            for cb in list(self._listeners):
                try:
                    cb(gid, mid)
                except Exception:
                    log.exception("a share-group member listener failed")

    # ------------------------------------------------------------------------------------------
    # writing

    async def _write(self, shard: GroupShard, records: list[tuple[bytes, bytes | None]], what: str) -> ErrorCode | None:
        """Append the records of a change already applied to the shard (none: wait for the
        writes before).  Returns the error to answer when the append failed."""
        if not records:
            tail = shard.share_tail
            if tail is not None and not tail.done():
                with contextlib.suppress(Exception):
                    await asyncio.shield(tail)
            return None
        done = asyncio.get_running_loop().create_future()
        shard.share_tail = done
        try:
            await self.runtime.append(shard.partition, list(records))
        except KafkaError as exc:
            log.warning("could not write the records of %s (%s): loading %s again", what, exc, shard.partition)
            self.runtime.reload(shard.partition, f"a write of share group records failed: {exc}")
            return _APPEND_ERRORS.get(exc.code, exc.code)
        finally:
            if not done.done():
                done.set_result(None)
        return None

    # ------------------------------------------------------------------------------------------
    # ShareGroupHeartbeat / ShareGroupDescribe / DeleteGroups

    async def heartbeat(self, shard_of: Callable[[str], GroupShard], req: ShareHeartbeat) -> ShareHeartbeatResult:
        validate_share_heartbeat(req)
        shard = shard_of(req.group_id)
        before = group_records(shard.share.group(req.group_id))
        result = shard.share.heartbeat(self.now(), req, self.image, lambda gid: other_type(shard, gid))
        records = changes(before, group_records(shard.share.group(req.group_id)))
        error = await self._write(shard, records, f"share group {req.group_id}")
        if error is not None:
            raise KafkaError(error)
        if req.member_epoch == 0:
            log.info("share group %s: member %s joined or rejoined at epoch %d", req.group_id, req.member_id,
                     result.member_epoch)
        self._removed(result.removed, "left the group")
        self.runtime.wake()
        return result

    async def describe(self, shard_of: Callable[[str], GroupShard], group_ids: Iterable[str]) -> list[DescribedShareGroup]:
        out = []
        for gid in group_ids:
            try:
                if not gid:
                    raise KafkaError(ErrorCode.INVALID_GROUP_ID, "The group id is empty.")
                shard = shard_of(gid)
                group = shard.share.group(gid)
                if group is None:
                    if other_type(shard, gid) is not None:
                        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
            except KafkaError as exc:
                out.append(DescribedShareGroup(gid, exc.code, exc.message or None, None))
                continue
            out.append(DescribedShareGroup(gid, ErrorCode.NONE, None, group))
        return out

    async def delete(self, shard: GroupShard, group_id: str) -> ErrorCode:
        group = shard.share.group(group_id)
        if group is not None and not group.members and self.state_deleter is not None:
            # as Kafka: the group's share-partition state goes first (a group created again under
            # this id starts from share.auto.offset.reset, not from the old start offsets)
            code = await self.state_deleter(group_id)
            if code is not ErrorCode.NONE:
                return code
        before = group_records(shard.share.group(group_id))
        try:
            shard.share.delete(group_id)
        except KafkaError as exc:
            return exc.code
        error = await self._write(shard, changes(before, {}), f"share group {group_id}")
        if error is not None:
            return error
        log.info("share group %s deleted", group_id)
        for cb in list(self._deleted):
            try:
                cb(group_id)
            except Exception:
                log.exception("a share-group deletion listener failed")
        return ErrorCode.NONE

    # ------------------------------------------------------------------------------------------
    # timers

    def _next_deadline(self) -> int | None:
        found = [d for s in self.runtime.shards() if (d := s.share.next_deadline()) is not None]
        return min(found) if found else None

    async def _tick(self, now: int) -> None:
        image = self.image
        for shard in self.runtime.shards():
            if self.runtime.shard_at(shard.partition) is not shard:
                continue  # unloaded while an earlier shard's write waited
            before = {gid: group_records(g) for gid, g in shard.share.groups.items()}
            removed = shard.share.tick(now, image)
            if not removed:
                continue
            records = [r for gid in dict.fromkeys(g for g, _m in removed)
                       for r in changes(before[gid], group_records(shard.share.group(gid)))]
            try:
                error = await self._write(shard, records, "share group session expiries")
            except Exception:
                log.exception("share group timer effects failed")
                continue
            if error is None:
                self._removed(removed, "was removed: its session timed out")
