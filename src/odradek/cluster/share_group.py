"""Share groups (KIP-932): the membership rules of Kafka's group coordinator for them, without I/O.

A share group's members heartbeat (ShareGroupHeartbeat v1) with a member id they chose (a random
UUID; any non-blank string to the coordinator), epoch 0 to join (with the topics they subscribe
to), -1 to leave, else the epoch the coordinator gave them.  The coordinator keeps, per group:

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

The simple assignor (as Kafka's SimpleAssignor for share groups: balance first, then
stickiness), topic by topic over the members subscribed to it: every partition is assigned; with
more members than partitions each partition is shared by the members over the partitions rounded
up; the members' partition counts differ by one at most and each gets at least one; what a member
had in the previous target it keeps where that balance allows.

What this module decides is applied by :mod:`odradek.broker.coordinators.share_groups`; the state
is in the memory of the group coordinator's shard only (see that module).
"""

from __future__ import annotations

import hashlib
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
    "metadata_hash",
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
    #: a hash of the subscribed topics' names, ids and partition counts as the group epoch last
    #: saw them (0: none); a change bumps the group epoch
    metadata_hash: int = 0

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


_JAVA_TRIMMED = "".join(chr(c) for c in range(0x21))


def validate_share_heartbeat(req: ShareHeartbeat) -> None:
    """Kafka's checks of a ShareGroupHeartbeat before it reaches a group (INVALID_REQUEST), in
    Kafka's order.  The member id is any non-blank string, as Kafka takes it (Kafka's clients
    send a random Uuid in its base64 form, librdkafka too)."""
    def blank(value: str | None) -> bool:
        """Java's ``value.trim().isEmpty()``: trim drops every character up to U+0020."""
        return value is not None and not value.strip(_JAVA_TRIMMED)

    if blank(req.member_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if blank(req.group_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if blank(req.rack_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_EPOCH:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")


def simple_assign(
    subscriptions: Mapping[str, Iterable[str]],
    topics: Mapping[str, tuple[uuid.UUID, int]],
    current: Mapping[str, Mapping[uuid.UUID, frozenset[int]]] | None = None,
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The simple assignor: member id -> topic id -> partitions (see the module docstring).
    ``topics``: the subscribed topics that exist, name -> (id, partition count); ``current``: the
    previous target assignment, kept where the balance allows."""
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in subscriptions}
    for name in sorted(topics):
        tid, count = topics[name]
        subscribers = sorted(m for m, names in subscriptions.items() if name in set(names))
        if not subscribers or count <= 0:
            continue
        held = {m: (current or {}).get(m, {}).get(tid, frozenset()) for m in subscribers}
        for m, parts in _share_topic(subscribers, count, held).items():
            if parts:
                out[m][tid] = frozenset(parts)
    return out


def _share_topic(members: list[str], count: int, held: Mapping[str, frozenset[int]]) -> dict[str, set[int]]:
    """One topic's partitions over its subscribers (sorted): each partition to ``sharing`` members
    (one when the partitions are as many as the members, else the members over the partitions
    rounded up); the ``sharing * count`` places dealt so that the members' counts differ by one at
    most; what a member ``held`` kept first."""
    n = len(members)
    sharing = -(-n // count)
    base, extra = divmod(sharing * count, n)
    # the members with more to keep take the larger counts
    by_keep = sorted(members, key=lambda m: (-len({p for p in held[m] if p < count}), m))
    want = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_keep)}
    owners: dict[int, set[str]] = {p: set() for p in range(count)}
    got: dict[str, set[int]] = {m: set() for m in members}
    for m in members:
        for p in sorted(held[m]):
            if p < count and len(got[m]) < want[m] and len(owners[p]) < sharing:
                got[m].add(p)
                owners[p].add(m)
    for _round in range(sharing):
        for p in sorted(range(count), key=lambda p: (len(owners[p]), p)):
            if len(owners[p]) >= sharing:
                continue
            free = [m for m in members if len(got[m]) < want[m] and m not in owners[p]]
            if free:
                m = min(free, key=lambda m: (len(got[m]), m))
                got[m].add(p)
                owners[p].add(m)
    # what the deal could not place (a partition wanting a member that all have it already)
    for m in members:
        if not got[m]:
            p = min(range(count), key=lambda p: (len(owners[p]), p))
            got[m].add(p)
            owners[p].add(m)
    for p in range(count):
        if not owners[p]:
            m = min(members, key=lambda m: (len(got[m]), m))
            got[m].add(p)
            owners[p].add(m)
    return got


def _subscription_metadata(names: Iterable[str], image: MetadataImage) -> dict[str, tuple[uuid.UUID, int]]:
    found = {}
    for name in names:
        t = image.topics.get(name)
        if t is not None:
            found[name] = (t.topic_id, len(t.partitions))
    return found


def metadata_hash(metadata: Mapping[str, tuple[uuid.UUID, int]]) -> int:
    """A signed 64-bit hash of subscribed topics (0: none), kept in the group's epoch record."""
    if not metadata:
        return 0
    text = "\0".join(f"{name}\1{tid}\1{count}" for name, (tid, count) in sorted(metadata.items()))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True) or 1


class ShareGroups:
    """The share groups of one group-coordinator shard (``other_type``: the type of a group of
    another kind with this id, ``classic`` or ``consumer``, else None)."""

    def __init__(self, config: ShareGroupConfig | None = None) -> None:
        self.config = config or ShareGroupConfig()
        self.groups: dict[str, ShareGroup] = {}
        #: a group's own session timeout and heartbeat interval (its GROUP configs
        #: ``share.session.timeout.ms``, ``share.heartbeat.interval.ms``; None: the broker's)
        self.group_timeouts: Callable[[str], tuple[int | None, int | None]] | None = None

    def _session_ms(self, group_id: str) -> int:
        own = self.group_timeouts(group_id)[0] if self.group_timeouts is not None else None
        return self.config.session_timeout_ms if own is None else own

    def _interval_ms(self, group_id: str) -> int:
        own = self.group_timeouts(group_id)[1] if self.group_timeouts is not None else None
        return self.config.heartbeat_interval_ms if own is None else own

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
            return ShareHeartbeatResult(mid, LEAVE_EPOCH, self._interval_ms(gid), None, ((gid, mid),))
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
        member.deadline_ms = now_ms + self._session_ms(gid)
        assignment = member.assigned if epoch == 0 or member.assigned != before else None
        return ShareHeartbeatResult(mid, member.member_epoch, self._interval_ms(gid),
                                    None if assignment is None else dict(assignment))

    def _refresh(self, group: ShareGroup, image: MetadataImage, *, bump: bool) -> None:
        """Bump the group epoch when the membership or subscriptions changed (``bump``) or the
        subscribed topics did (created, deleted, partitions added); then compute the target
        assignment for the new epoch."""
        metadata = _subscription_metadata(group.subscribed_topics(), image)
        digest = metadata_hash(metadata)
        if digest != group.metadata_hash:
            group.metadata_hash = digest
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            group.target = simple_assign(
                {m.member_id: m.subscribed_topic_names for m in group.members.values()}, metadata, group.target)
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

    def loaded(self, now_ms: int) -> None:
        """After loading the groups from their records: every member gets a fresh session."""
        for group in self.groups.values():
            for m in group.members.values():
                m.deadline_ms = now_ms + self._session_ms(group.group_id)

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
