"""Share groups (KIP-932): the membership rules of Kafka's group coordinator for them, without I/O.

A share group's members heartbeat (ShareGroupHeartbeat v1) with a member id they chose (a UUID),
epoch 0 to join (with the topics they subscribe to), -1 to leave, else the epoch the coordinator
gave them.  The coordinator keeps, per group:

* the **group epoch**, bumped whenever the membership, a subscription or the subscribed topics'
  partition counts change;
* the **target assignment** of every member, computed by the *simple* assignor (below) for the
  group epoch that moved, and its **assignment epoch**;
* each member's **member epoch** and assignment: a share group has no revocation step, so a member
  takes its target (and the assignment epoch as its epoch) at its next heartbeat.

A member's epoch is checked as Kafka's ShareGroup does: a greater epoch, or a smaller one that is
not its previous epoch (a response that may have been lost), is FENCED_MEMBER_EPOCH; an unknown
member id with an epoch other than 0 is UNKNOWN_MEMBER_ID.  A member that does not heartbeat within
its session timeout is removed (:meth:`ShareGroups.tick`).  The group is ``Empty`` without members,
else ``Stable``.

The simple assignor (Kafka's SimpleAssignor for share groups): every partition of every subscribed
topic is assigned; a topic's partitions are dealt round robin over the members subscribed to it
(sorted by member id), and when a topic has fewer partitions than subscribers each subscriber gets
one partition (member *i* gets partition *i* mod the partition count), so several members share a
partition and every member gets at least one partition of each topic it subscribes to that has any.

What this module decides is applied by :mod:`odradek.broker.coordinators.share_groups`; the state
is in the memory of the group coordinator's shard only (see that module).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.cluster.metadata import MetadataImage

__all__ = [
    "ASSIGNOR",
    "LEAVE_EPOCH",
    "ShareGroup",
    "ShareGroupConfig",
    "ShareGroups",
    "ShareHeartbeat",
    "ShareHeartbeatResult",
    "ShareMember",
    "simple_assign",
    "validate_share_heartbeat",
]

ASSIGNOR = "simple"
LEAVE_EPOCH = -1

#: topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 200


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    """A ShareGroupHeartbeat as the coordinator reads it."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: the member's assignment when it joined or it changed (None: unchanged)
    assignment: Assignment | None
    #: members this heartbeat removed (a leave): (group id, member id)
    removed: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    #: when its session ends (coordinator clock, ms)
    deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    #: member id -> its target assignment at ``assignment_epoch``
    target: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    #: subscribed topic name -> (topic id, partition count), as the group epoch last saw them
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def _is_uuid(text: str) -> bool:
    """A UUID as Kafka's clients write one: Kafka's own form (22 characters of URL-safe base64, as
    librdkafka and the Java client send) or the hex form."""
    if len(text) == 22:
        try:
            return len(base64.urlsafe_b64decode(text + "==")) == 16
        except (ValueError, binascii.Error):
            return False
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def validate_share_heartbeat(req: ShareHeartbeat) -> None:
    """Kafka's checks of a ShareGroupHeartbeat before it reaches a group (INVALID_REQUEST)."""
    if not req.group_id.strip():
        raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise KafkaError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    if not req.member_id.strip():
        raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if not _is_uuid(req.member_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"MemberId {req.member_id} is not a valid UUID.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_EPOCH:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")


def simple_assign(
    subscriptions: Mapping[str, Iterable[str]], topics: Mapping[str, tuple[uuid.UUID, int]]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The simple assignor: member id -> topic id -> partitions (see the module docstring).
    ``topics``: the subscribed topics that exist, name -> (id, partition count)."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    start = 0  # where each topic's deal starts, so that single-partition topics spread
    for name in sorted(topics):
        tid, count = topics[name]
        subscribers = sorted(m for m, names in subscriptions.items() if name in set(names))
        if not subscribers or count <= 0:
            continue
        n = len(subscribers)
        if count >= n:
            for p in range(count):
                out[subscribers[(p + start) % n]].setdefault(tid, set()).add(p)
        else:
            for i, m in enumerate(subscribers):
                out[m].setdefault(tid, set()).add((i + start) % count)
        start += count
    return {m: {t: frozenset(ps) for t, ps in parts.items()} for m, parts in out.items()}


def _subscription_metadata(names: Iterable[str], image: MetadataImage) -> dict[str, tuple[uuid.UUID, int]]:
    found = {}
    for name in names:
        t = image.topics.get(name)
        if t is not None:
            found[name] = (t.topic_id, len(t.partitions))
    return found


class ShareGroups:
    """The share groups of one group-coordinator shard (``other_type``: the type of a group of
    another kind with this id, ``classic`` or ``consumer``, else None)."""

    def __init__(self, config: ShareGroupConfig | None = None) -> None:
        self.config = config or ShareGroupConfig()
        self.groups: dict[str, ShareGroup] = {}

    def has(self, group_id: str) -> bool:
        return group_id in self.groups

    def group(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def list_groups(self, states: set[str] | None = None) -> list[ShareGroup]:
        return [g for g in self.groups.values() if not states or g.state.lower() in states]

    # ------------------------------------------------------------------------------------------

    def heartbeat(self, now_ms: int, req: ShareHeartbeat, image: MetadataImage,
                  other_type: Callable[[str], str | None]) -> ShareHeartbeatResult:
        """One ShareGroupHeartbeat (validated by :func:`validate_share_heartbeat`)."""
        gid, mid, epoch = req.group_id, req.member_id, req.member_epoch
        group = self.groups.get(gid)
        if group is None:
            kind = other_type(gid)
            if kind is not None:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
            if epoch != 0:
                if epoch == LEAVE_EPOCH:
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
        if epoch == LEAVE_EPOCH:
            assert group is not None
            if mid not in group.members:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            self._remove(group, mid, image)
            return ShareHeartbeatResult(mid, LEAVE_EPOCH, self.config.heartbeat_interval_ms, None, ((gid, mid),))
        member = None if group is None else group.members.get(mid)
        if member is None:
            if epoch != 0:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            if group is not None and len(group.members) >= self.config.max_size:
                raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The share group has reached its maximum capacity of {self.config.max_size} members.")
        elif epoch != 0 and (epoch > member.member_epoch
                             or (epoch < member.member_epoch and epoch != member.previous_epoch)):
            raise KafkaError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a {'greater' if epoch > member.member_epoch else 'smaller'} "
                f"member epoch ({epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                "The member must abandon all its partitions and rejoin.",
            )
        if group is None:
            group = self.groups[gid] = ShareGroup(gid)
        changed = False
        if member is None:
            member = group.members[mid] = ShareMember(mid)
            changed = True
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changed = True
        before = dict(member.assigned)
        self._refresh(group, image, bump=changed)
        self._reconcile(group, member)
        member.deadline_ms = now_ms + self.config.session_timeout_ms
        assignment = member.assigned if epoch == 0 or member.assigned != before else None
        return ShareHeartbeatResult(mid, member.member_epoch, self.config.heartbeat_interval_ms,
                                    None if assignment is None else dict(assignment))

    def _refresh(self, group: ShareGroup, image: MetadataImage, *, bump: bool) -> None:
        """Bump the group epoch when the membership or subscriptions changed (``bump``) or the
        subscribed topics did (created, deleted, partitions added); then compute the target
        assignment for the new epoch."""
        metadata = _subscription_metadata(group.subscribed_topics(), image)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            group.target = simple_assign(
                {m.member_id: m.subscribed_topic_names for m in group.members.values()}, metadata)
            group.assignment_epoch = group.group_epoch

    @staticmethod
    def _reconcile(group: ShareGroup, member: ShareMember) -> None:
        """A share group member takes its target at once (there is nothing to revoke)."""
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        member.assigned = dict(group.target.get(member.member_id, {}))

    def _remove(self, group: ShareGroup, member_id: str, image: MetadataImage) -> None:
        del group.members[member_id]
        group.target.pop(member_id, None)
        self._refresh(group, image, bump=True)

    # ------------------------------------------------------------------------------------------

    def refresh_metadata(self, image: MetadataImage) -> None:
        """Topics changed: the groups whose subscribed topics did move to a new epoch."""
        for group in self.groups.values():
            if group.members:
                self._refresh(group, image, bump=False)

    def next_deadline(self) -> int | None:
        found = [m.deadline_ms for g in self.groups.values() for m in g.members.values()]
        return min(found) if found else None

    def tick(self, now_ms: int, image: MetadataImage) -> list[tuple[str, str]]:
        """Remove the members whose session ended; returns them as (group id, member id)."""
        removed = []
        for group in self.groups.values():
            for mid in [m.member_id for m in group.members.values() if m.deadline_ms <= now_ms]:
                self._remove(group, mid, image)
                removed.append((group.group_id, mid))
        return removed

    def delete(self, group_id: str) -> None:
        """DeleteGroups: GROUP_ID_NOT_FOUND unknown, NON_EMPTY_GROUP with members."""
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Group {group_id} is not empty.")
        del self.groups[group_id]
