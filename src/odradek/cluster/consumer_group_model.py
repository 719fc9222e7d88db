"""The data of KIP-848 consumer groups (the protocol is described in
:mod:`odradek.cluster.consumer_group`): the member and group states with their transition
tables, the members and what they subscribe to, the records a group's state is kept in, the
requests and results of its operations, the ``group.consumer.*`` settings, the topics as a group
sees them, and one group (:class:`ConsumerGroup`: its members, target assignment, partition owners
and timers).  Values only: the operations are :class:`odradek.cluster.consumer_group.ConsumerGroups`'
and its collaborators'."""

from __future__ import annotations

import dataclasses
import enum
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.cluster.transitions import TransitionTable
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.cluster.group import Group, JoinResult, SyncResult
    from odradek.cluster.metadata import MetadataImage

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: the embedded protocol type of consumers in classic groups
CONSUMER_PROTOCOL = "consumer"
INT_MAX = 2147483647
#: a member waiting for partitions to be released heartbeats this many times as often
UNRELEASED_HEARTBEAT_DIVISOR = 10

Assignment = Mapping[uuid.UUID, frozenset[int]]
#: no partitions
EMPTY: Assignment = {}


# ------------------------------------------------------------------------------------------------
# states


class MemberState(enum.IntEnum):
    """A member's reconciliation state (Kafka's MemberState; the values are those its records
    carry)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


_M = MemberState
#: the member states each state may be entered from (:func:`reconcile` changes them only so)
MEMBER_TRANSITIONS = TransitionTable[MemberState]("consumer group member", {
    _M.STABLE: {_M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS, _M.UNKNOWN},
    _M.UNREVOKED_PARTITIONS: {_M.STABLE, _M.UNRELEASED_PARTITIONS, _M.UNKNOWN},
    _M.UNRELEASED_PARTITIONS: {_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNKNOWN},
    _M.UNKNOWN: set(),
})


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


_S = ConsumerGroupState
#: the group states each state may be entered from, after an operation (Dead stands for a group
#: not there: created by its first member or by a conversion, deleted or converted back; loading
#: restores a state instead, which is not a transition)
CONSUMER_GROUP_TRANSITIONS = TransitionTable[ConsumerGroupState]("consumer group", {
    _S.EMPTY: {_S.ASSIGNING, _S.RECONCILING, _S.STABLE},
    _S.ASSIGNING: {_S.RECONCILING, _S.STABLE},
    _S.RECONCILING: {_S.EMPTY, _S.ASSIGNING, _S.STABLE, _S.DEAD},
    _S.STABLE: {_S.EMPTY, _S.ASSIGNING, _S.RECONCILING, _S.DEAD},
    _S.DEAD: {_S.EMPTY, _S.ASSIGNING, _S.RECONCILING, _S.STABLE},
})


# ------------------------------------------------------------------------------------------------
# values


@dataclass(frozen=True, slots=True)
class ClassicProtocols:
    """What a member using the classic protocol joined with (JoinGroup)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    def metadata(self, name: str | None = None) -> bytes:
        for n, meta in self.protocols:
            if name is None or n == name:
                return meta
        return b""


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """A member of a consumer group: its subscription (ConsumerGroupMemberMetadata) and its
    current assignment (ConsumerGroupCurrentMemberAssignment).  Immutable: changes make a new one."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    #: set for a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat)
    classic: ClassicProtocols | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    @property
    def uses_classic(self) -> bool:
        return self.classic is not None

    def reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def with_epoch(self, epoch: int, **changes: object) -> ConsumerMember:
        """Kafka's updateMemberEpoch: the current epoch becomes the previous one."""
        return dataclasses.replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)  # type: ignore[arg-type]

    def subscription(self) -> tuple[object, ...]:
        """The fields the member's subscription record carries."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the group saw it (ConsumerGroupPartitionMetadata)."""

    topic_id: uuid.UUID
    name: str
    partitions: int
    #: the racks of each partition's replicas, where known
    racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """The topics a subscribed regular expression matched (ConsumerGroupRegularExpression)."""

    topics: frozenset[str]
    version: int
    timestamp: int


# ------------------------------------------------------------------------------------------------
# records (Kafka's record types; a value of None is the record's tombstone)


@dataclass(frozen=True, slots=True)
class GroupEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class SubscriptionMetadataRecord:
    group_id: str
    topics: tuple[TopicMetadata, ...] | None


@dataclass(frozen=True, slots=True)
class MemberSubscriptionRecord:
    group_id: str
    member_id: str
    member: ConsumerMember | None


@dataclass(frozen=True, slots=True)
class TargetEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class TargetMemberRecord:
    group_id: str
    member_id: str
    assignment: Assignment | None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentRecord:
    group_id: str
    member_id: str
    member: ConsumerMember | None


@dataclass(frozen=True, slots=True)
class RegexRecord:
    group_id: str
    regex: str
    resolved: ResolvedRegex | None


@dataclass(frozen=True, slots=True)
class ClassicGroupRecord:
    """A classic group's metadata (GroupMetadata): written when a group converts to the classic
    protocol, its tombstone when a classic group converts to a consumer group."""

    group_id: str
    group: Group | None


Record = (
    GroupEpochRecord | SubscriptionMetadataRecord | MemberSubscriptionRecord | TargetEpochRecord
    | TargetMemberRecord | CurrentAssignmentRecord | RegexRecord | ClassicGroupRecord
)


# ------------------------------------------------------------------------------------------------
# requests and results


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: the partitions the member owns (None: unchanged since the last heartbeat)
    owned: Mapping[uuid.UUID, frozenset[int]] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(slots=True)
class HeartbeatResponse:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: the member's whole assignment (None: unchanged)
    assignment: Assignment | None = None


@dataclass(slots=True)
class Outcome:
    """What an operation decided: its answer, the records it applied (to be written in this
    order), and the answers owed to classic members waiting on a converted group."""

    response: object = None
    records: list[Record] = field(default_factory=list)
    classic_effects: list[JoinResult | SyncResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The broker's ``group.consumer.*`` settings."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = INT_MAX
    #: the server-side assignors, the first the default
    assignors: tuple[str, ...] = ("uniform", "range")
    #: ``disabled``, ``upgrade``, ``downgrade`` or ``bidirectional``
    migration_policy: str = "bidirectional"
    classic_max_size: int = INT_MAX
    classic_min_session_timeout_ms: int = 6000
    classic_max_session_timeout_ms: int = 1800000

    @property
    def upgrade(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")


# ------------------------------------------------------------------------------------------------
# topics


class TopicsView:
    """The topics of a metadata image as a consumer group sees them (ids, partition counts, the
    racks of each partition's replicas)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._by_id = {t.topic_id: t for t in image.topics.values()}
        self._metadata: dict[str, TopicMetadata | None] = {}
        names = sorted(image.topics)
        #: changes when topics appear or go (regular expressions are resolved again then)
        self.version = zlib.crc32("\0".join(names).encode()) | (len(names) << 32)

    def names(self) -> Iterable[str]:
        return self.image.topics.keys()

    def id_of(self, name: str) -> uuid.UUID | None:
        t = self.image.topics.get(name)
        return None if t is None else t.topic_id

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        t = self._by_id.get(topic_id)
        return None if t is None else t.name

    def metadata(self, name: str) -> TopicMetadata | None:
        """The topic as a subscription sees it (computed once per image: every heartbeat asks)."""
        if name not in self._metadata:
            self._metadata[name] = self._compute_metadata(name)
        return self._metadata[name]

    def _compute_metadata(self, name: str) -> TopicMetadata | None:
        t = self.image.topics.get(name)
        if t is None:
            return None
        brokers = self.image.brokers
        racks: list[tuple[int, tuple[str, ...]]] = []
        for p, state in sorted(t.partitions.items()):
            names = sorted({r for b in state.replicas if (info := brokers.get(b)) is not None and (r := info.rack)})
            if names:
                racks.append((p, tuple(names)))
        return TopicMetadata(t.topic_id, t.name, t.partition_count, tuple(racks))

    def partitions_of(self, topic_id: uuid.UUID) -> int:
        t = self._by_id.get(topic_id)
        return -1 if t is None else t.partition_count

    def by_name(self, assignment: Assignment) -> dict[str, list[int]]:
        """An assignment by topic name (topics no longer in the image are left out)."""
        out: dict[str, list[int]] = {}
        for tid, parts in assignment.items():
            name = self.name_of(tid)
            if name is not None:
                out[name] = sorted(parts)
        return out


# ------------------------------------------------------------------------------------------------
# assignment helpers


def freeze(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def is_subset(owned: Mapping[uuid.UUID, frozenset[int]] | None, of: Assignment) -> bool:
    if owned is None:
        return False
    return all(not ps or ps <= of.get(t, frozenset()) for t, ps in owned.items())


def owns_any(owned: Mapping[uuid.UUID, frozenset[int]] | None, pending: Assignment) -> bool:
    """Kafka's ownsRevokedPartitions: whether the member still reports one of ``pending`` (not
    knowing what it owns counts as owning)."""
    if owned is None:
        return True
    return any(ps & pending.get(t, frozenset()) for t, ps in owned.items())


def count(assignment: Assignment) -> int:
    return sum(len(ps) for ps in assignment.values())

# ------------------------------------------------------------------------------------------------
# a group


@dataclass(eq=False)
class ConsumerGroup:
    """One consumer group: its hard state (rebuilt from its records) and its timers."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    #: instance id -> member id
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    resolved: dict[str, ResolvedRegex] = field(default_factory=dict)
    #: every owned partition (assigned, or pending revocation) -> (its owner, the owner's epoch)
    owners: dict[tuple[uuid.UUID, int], tuple[str, int]] = field(default_factory=dict)
    #: read through ``state``; changed after each operation along the transition table
    _state: ConsumerGroupState = ConsumerGroupState.EMPTY
    state_timestamp: int = -1
    # -- timers (soft state) --
    session_deadline: dict[str, int] = field(default_factory=dict)
    #: member id -> (the epoch it must leave, the deadline)
    rebalance_deadline: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: classic members: must join again (JoinGroup) by / must sync by
    join_deadline: dict[str, int] = field(default_factory=dict)
    sync_deadline: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        return self._state

    def computed_state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        found = self.owners.get((topic_id, partition))
        return -1 if found is None else found[1]

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        mid = self.static_members.get(instance_id)
        return None if mid is None else self.members.get(mid)

    def target_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        found = self.target.get(member_id)
        if found is None and instance_id is not None:
            previous = self.static_members.get(instance_id)
            if previous is not None:
                found = self.target.get(previous)
        return found if found is not None else EMPTY

    def num_classic(self, except_member: str | None = None) -> int:
        return sum(1 for mid, m in self.members.items() if m.uses_classic and mid != except_member)

    def regex_subscribers(self, regex: str) -> int:
        return sum(1 for m in self.members.values() if m.subscribed_topic_regex == regex)

    def subscribed_regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def supports_classic(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every
        member using the classic protocol supports."""
        if protocol_type != CONSUMER_PROTOCOL:
            return False
        names = set(names)
        classic = [m for m in self.members.values() if m.classic is not None]
        if not classic:
            return bool(names)
        return any(all(any(n == p for p, _ in m.classic.protocols) for m in classic if m.classic) for n in names)

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for tid, parts in self.target.get(member.member_id, EMPTY).items():
            mine = member.assigned.get(tid, frozenset())
            if any(p not in mine and self.owner_epoch(tid, p) != -1 for p in parts):
                return True
        return False

    def heartbeat_timers(self, now: int, member_id: str, session_timeout_ms: int) -> None:
        """After a member's heartbeat: its session starts again; a revocation it must make has
        its rebalance timeout (consumer protocol; classic members have join and sync timeouts)."""
        m = self.members.get(member_id)
        if m is None:
            return
        self.session_deadline[member_id] = now + session_timeout_ms
        if m.uses_classic:
            return
        if m.state is MemberState.UNREVOKED_PARTITIONS:
            epoch_deadline = self.rebalance_deadline.get(member_id)
            if epoch_deadline is None or epoch_deadline[0] != m.member_epoch:
                self.rebalance_deadline[member_id] = (m.member_epoch, now + max(m.rebalance_timeout_ms, 0))
        else:
            self.rebalance_deadline.pop(member_id, None)

    # -- replay helpers -------------------------------------------------------------------------
    def _set_member(self, new: ConsumerMember) -> None:
        old = self.members.get(new.member_id)
        if old is not None:
            self._release(old)
        self.members[new.member_id] = new
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id
        self._claim(new)

    def _remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._release(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        for timers in (self.session_deadline, self.rebalance_deadline, self.join_deadline, self.sync_deadline):
            timers.pop(member_id, None)

    def _release(self, m: ConsumerMember) -> None:
        for part in (m.assigned, m.pending_revocation):
            for tid, ps in part.items():
                for p in ps:
                    if self.owners.get((tid, p), ("", 0))[0] == m.member_id:
                        del self.owners[(tid, p)]

    def _claim(self, m: ConsumerMember) -> None:
        for part in (m.assigned, m.pending_revocation):
            for tid, ps in part.items():
                for p in ps:
                    self.owners[(tid, p)] = (m.member_id, m.member_epoch)


def compile_regex(regex: str) -> Callable[[str], bool]:
    """A matcher of whole topic names for a regular expression in RE2 syntax (Kafka's RE2/J:
    no back-references or look-around; linear time whatever the input).  Raises KafkaError
    INVALID_REGULAR_EXPRESSION for an expression RE2 refuses."""
    import re2  # type: ignore[import-untyped]  # google-re2: linear time, the syntax of Kafka's RE2/J

    try:
        options = re2.Options()
        options.log_errors = False
        pattern = re2.compile(regex, options)
    except Exception as exc:  # re2.error: the expression does not parse
        raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                         f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}") from None

    def matches(name: str) -> bool:
        return pattern.fullmatch(name) is not None

    return matches
