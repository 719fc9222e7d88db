"""Share groups (KIP-932) on the group coordinator's runtime: ShareGroupHeartbeat,
ShareGroupDescribe, and what ListGroups/DeleteGroups see of them.

The rules are :mod:`odradek.cluster.share_group`'s; the share groups of a ``__consumer_offsets``
partition live in its :class:`GroupShard` (``shard.share``) beside its classic and consumer
groups, and a group id is one kind of group only (a share heartbeat to a classic or consumer
group is GROUP_ID_NOT_FOUND, a JoinGroup or ConsumerGroupHeartbeat to a share group is refused).
A deadline timer on the runtime's clock removes members whose session ended.

**State is in memory only.**  Kafka writes share groups to ``__consumer_offsets``
(ShareGroupMetadata, ShareGroupMemberMetadata, ShareGroupPartitionMetadata, target assignment
records); Odradek does not yet: when the coordinator moves or restarts, its share groups are gone,
a member heartbeating with its epoch is answered UNKNOWN_MEMBER_ID and joins again with epoch 0
(what Kafka's clients do), and the group is made again by its first member.

What the share-partition leaders (ShareFetch/ShareAcknowledge) may ask, through
:class:`ShareGroupService`: :meth:`~ShareGroupService.is_member`,
:meth:`~ShareGroupService.assignment`, and :meth:`~ShareGroupService.on_member_removed` to hear of
members that left or were removed.  These see only the groups this broker coordinates: a
partition leader that is not the group's coordinator learns nothing from them (Kafka's leader does
not ask the coordinator either: it trusts the share session's member id and releases a member's
records when its session closes or their locks expire).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

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

    def on_member_removed(self, callback: MemberRemoved) -> None:
        """Call ``callback(group id, member id)`` whenever a member of a share group coordinated
        here leaves (epoch -1), its session expires, or its group is unloaded.  A local
        convenience: a partition leader on another broker hears nothing."""
        self._listeners.append(callback)

    def _removed(self, removed: Iterable[tuple[str, str]], why: str) -> None:
        for gid, mid in removed:
            log.info("share group %s: member %s %s", gid, mid, why)
            for cb in list(self._listeners):
                try:
                    cb(gid, mid)
                except Exception:
                    log.exception("a share-group member listener failed")

    def unloaded(self, shard: GroupShard) -> None:
        """The shard's groups are no longer coordinated here: their members count as removed."""
        gone = [(g.group_id, m) for g in shard.share.groups.values() for m in g.members]
        shard.share.groups.clear()
        self._removed(gone, "is no longer coordinated here")

    # ------------------------------------------------------------------------------------------
    # ShareGroupHeartbeat / ShareGroupDescribe / DeleteGroups

    async def heartbeat(self, shard_of: Callable[[str], GroupShard], req: ShareHeartbeat) -> ShareHeartbeatResult:
        validate_share_heartbeat(req)
        shard = shard_of(req.group_id)
        result = shard.share.heartbeat(self.now(), req, self.image, lambda gid: other_type(shard, gid))
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

    def delete(self, shard: GroupShard, group_id: str) -> ErrorCode:
        try:
            shard.share.delete(group_id)
        except KafkaError as exc:
            return exc.code
        log.info("share group %s deleted", group_id)
        return ErrorCode.NONE

    # ------------------------------------------------------------------------------------------
    # timers

    def _next_deadline(self) -> int | None:
        found = [d for s in self.runtime.shards() if (d := s.share.next_deadline()) is not None]
        return min(found) if found else None

    async def _tick(self, now: int) -> None:
        image = self.image
        for shard in self.runtime.shards():
            removed = shard.share.tick(now, image)
            self._removed(removed, "was removed: its session timed out")
