"""The group coordinator's state machine (Kafka's classic rebalance protocol), pure logic.

A group moves through the states the seeds describe::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
      ^                 ^      ^                                      |  leader's SyncGroup
      |                 |      +---- member change / failure ---------+
      |                 |                                             v
      +-- last member --+--------- join / leave / session expiry -- Stable
    Dead: deleted (or unloaded); answers as if the group did not exist.

The edges are data (:data:`GROUP_TRANSITIONS`, Kafka's valid previous states); every change goes
through :meth:`GroupCoordinatorState._transition`, which refuses any other (IllegalTransition).

Members join (the first becomes leader), the coordinator picks the protocol all members support,
completes the join when every known member has rejoined or the rebalance timeout passes, hands the
leader every member's metadata, and delivers the leader's assignment to each member on SyncGroup.
Heartbeats keep members alive; a member whose session times out is removed and the group
rebalances.  Static members (``group.instance.id``) keep their identity across restarts; a second
member using the same instance id fences the first.

Nothing here does I/O or reads a clock: every call takes ``now`` (ms), and results that must be
sent later (join and sync responses owed to other members, records to write to
``__consumer_offsets``) come back as effects for the broker to carry out.  The broker calls
:meth:`GroupCoordinatorState.tick` when :meth:`next_deadline` arrives.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from odradek.cluster.transitions import TransitionTable
from odradek.errors import ErrorCode

__all__ = [
    "GROUP_TRANSITIONS",
    "Effect",
    "Group",
    "GroupCoordinatorState",
    "GroupLimits",
    "GroupState",
    "JoinResult",
    "Member",
    "OffsetAndMetadata",
    "StoreGroup",
    "StoreOffsets",
    "SyncResult",
]

UNKNOWN_MEMBER_ID = ""


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_G = GroupState
#: Kafka's valid previous states of each group state (``ClassicGroupState``): a group's state
#: changes only along these edges (:meth:`GroupCoordinatorState._transition`)
GROUP_TRANSITIONS = TransitionTable[GroupState]("group", {
    _G.EMPTY: {_G.PREPARING_REBALANCE},
    _G.PREPARING_REBALANCE: {_G.EMPTY, _G.STABLE, _G.COMPLETING_REBALANCE},
    _G.COMPLETING_REBALANCE: {_G.PREPARING_REBALANCE},
    _G.STABLE: {_G.COMPLETING_REBALANCE},
    _G.DEAD: {_G.EMPTY, _G.PREPARING_REBALANCE, _G.COMPLETING_REBALANCE, _G.STABLE, _G.DEAD},
})


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: bool = False
    join_version: int = 0
    awaiting_sync: bool = False
    heartbeat_deadline: int = 0

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass(slots=True)
class Group:
    group_id: str
    #: read through ``state``; changed only by the coordinator state's transition (the table)
    _state: GroupState = field(default=GroupState.EMPTY, init=False)
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    rebalance_deadline: int = 0
    initial_delay_ms: int = 0
    initial_delay_until: int = 0
    initial_joined: int = 0
    rebalance_started: int = 0
    state_timestamp: int = -1

    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def is_empty(self) -> bool:
        return not self.members

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def supports(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        if self.is_empty:
            return bool(protocol_type) and bool(list(protocols))
        names = set(protocols)
        return protocol_type == self.protocol_type and bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        candidates = self._candidates()
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            for name, _meta in m.protocols:
                if name in candidates:
                    if name not in votes:
                        votes[name] = 0
                        order.append(name)
                    votes[name] += 1
                    break
        return max(order, key=lambda n: (votes[n], -order.index(n)))

    def subscribed_topics(self) -> set[str] | None:
        """Topics in the members' consumer-protocol subscriptions (None when unknown)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from odradek.cluster.assignment import decode_subscription_topics

        topics: set[str] = set()
        for m in self.members.values():
            found = decode_subscription_topics(m.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics


def _same_subscription(g: Group, before: list[tuple[str, bytes]], after: list[tuple[str, bytes]]) -> bool:
    """Whether a rejoining static member asks for what it had: the same protocols and, for the
    consumer protocol, the same topics (its metadata also carries its generation and owned
    partitions, which change on every restart and must not cause a rebalance)."""
    if [n for n, _ in before] != [n for n, _ in after]:
        return False
    if g.protocol_type != "consumer" or g.protocol_name is None:
        return before == after
    from odradek.cluster.assignment import decode_subscription_topics

    old = dict(before).get(g.protocol_name, b"")
    new = dict(after).get(g.protocol_name, b"")
    return decode_subscription_topics(old) == decode_subscription_topics(new)


# ------------------------------------------------------------------------------------------------
# results and effects


@dataclass(slots=True)
class JoinResult:
    member_id: str
    error: ErrorCode = ErrorCode.NONE
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # only for the leader


@dataclass(slots=True)
class SyncResult:
    member_id: str
    error: ErrorCode = ErrorCode.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class StoreGroup:
    """Write the group's metadata record (or its tombstone when ``group`` is None)."""

    group_id: str
    group: Group | None


@dataclass(slots=True)
class StoreOffsets:
    """Write offset commit records (``None`` values are tombstones)."""

    group_id: str
    offsets: dict[tuple[str, int], OffsetAndMetadata | None]


Effect = JoinResult | SyncResult | StoreGroup | StoreOffsets


@dataclass(frozen=True, slots=True)
class GroupLimits:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2147483647
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000


class GroupCoordinatorState:
    """Every group this coordinator owns, with their offsets."""

    def __init__(self, limits: GroupLimits | None = None) -> None:
        self.limits = limits or GroupLimits()
        self.groups: dict[str, Group] = {}
        #: rebalances that ended with the group stable (a CompletingRebalance -> Stable transition)
        self.completed_rebalances = 0

    # -- helpers ---------------------------------------------------------------------------------
    def _group(self, group_id: str) -> Group | None:
        g = self.groups.get(group_id)
        return None if g is None or g.state is GroupState.DEAD else g

    def _transition(self, g: Group, state: GroupState, now: int) -> None:
        """The one place a group's state changes: along :data:`GROUP_TRANSITIONS` only
        (IllegalTransition otherwise, the group unchanged)."""
        GROUP_TRANSITIONS.check(g.state, state, f"group {g.group_id}")
        if state is GroupState.STABLE and g.state is GroupState.COMPLETING_REBALANCE:
            self.completed_rebalances += 1
        g._state = state
        g.state_timestamp = now

    def _heartbeat(self, m: Member, now: int) -> None:
        m.heartbeat_deadline = now + m.session_timeout_ms

    @staticmethod
    def _member_error(g: Group, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateCurrentMember: with an instance id, fencing is checked first (a member
        id that the instance id no longer maps to is FENCED_INSTANCE_ID even once that member is
        gone from the group), an unknown instance id is UNKNOWN_MEMBER_ID; without one, the member
        id must be in the group."""
        if group_instance_id is not None:
            current = g.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # -- JoinGroup --------------------------------------------------------------------------------
    def join(
        self,
        now: int,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        version: int,
    ) -> tuple[JoinResult | None, list[Effect], str]:
        """Handle a JoinGroup; returns (immediate response or None if it is deferred, effects,
        the member id whose response is owed)."""
        lim = self.limits
        if not group_id:
            return JoinResult(member_id, ErrorCode.INVALID_GROUP_ID), [], member_id
        if not lim.min_session_timeout_ms <= session_timeout_ms <= lim.max_session_timeout_ms:
            return JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT), [], member_id
        if version == 0:
            rebalance_timeout_ms = session_timeout_ms
        g = self._group(group_id)
        if g is None:
            if member_id != UNKNOWN_MEMBER_ID:
                return JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID), [], member_id
            g = self.groups[group_id] = Group(group_id, state_timestamp=now)
        if not g.supports(protocol_type, [n for n, _ in protocols]):
            return JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL), [], member_id
        effects: list[Effect] = []
        if member_id == UNKNOWN_MEMBER_ID:
            new_id = f"{client_id}-{uuid.uuid4()}"
            if group_instance_id is not None and group_instance_id in g.static_members:
                result, effects = self._static_rejoin(g, now, new_id, group_instance_id, protocols,
                                                      session_timeout_ms, rebalance_timeout_ms, client_id,
                                                      client_host, version)
                return result, effects, new_id
            if len(g.members) + len(g.pending_members) >= lim.max_size:
                return JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED), [], UNKNOWN_MEMBER_ID
            if version >= 4 and group_instance_id is None:
                # KIP-394: the member must come back with the id it is given
                g.pending_members[new_id] = now + session_timeout_ms
                return JoinResult(new_id, ErrorCode.MEMBER_ID_REQUIRED), [], new_id
            member = Member(new_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                            session_timeout_ms, protocol_type, list(protocols))
            self._add_member(g, member, version, now, effects)
            return None, effects, new_id
        # a known member id
        if member_id in g.pending_members and group_instance_id is None:
            del g.pending_members[member_id]
            if len(g.members) >= lim.max_size:
                return JoinResult(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED), [], member_id
            member = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                            session_timeout_ms, protocol_type, list(protocols))
            self._add_member(g, member, version, now, effects)
            return None, effects, member_id
        error = self._member_error(g, member_id, group_instance_id)
        if error is not None:
            return JoinResult(member_id, error), [], member_id
        m = g.members[member_id]
        m.join_version = version
        changed = m.protocols != list(protocols)
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        if g.state is GroupState.PREPARING_REBALANCE:
            m.protocols = list(protocols)
            m.awaiting_join = True
            self._heartbeat(m, now)
            self._try_complete_join(g, now, effects)
            return None, effects, member_id
        if g.state is GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_result(g, m), [], member_id
        if g.state is GroupState.STABLE and not changed and member_id != g.leader_id:
            return self._join_result(g, m), [], member_id
        m.protocols = list(protocols)
        m.awaiting_join = True
        self._prepare_rebalance(g, now, effects)
        self._try_complete_join(g, now, effects)
        return None, effects, member_id

    def _static_rejoin(self, g: Group, now: int, new_id: str, instance_id: str, protocols: list[tuple[str, bytes]],
                       session_timeout_ms: int, rebalance_timeout_ms: int, client_id: str, client_host: str,
                       version: int) -> tuple[JoinResult | None, list[Effect]]:
        """A static member came back with a new member id: it replaces (fences) the old one."""
        effects: list[Effect] = []
        old_id = g.static_members[instance_id]
        old = g.members.pop(old_id, None)
        if old is not None and old.awaiting_join:
            effects.append(JoinResult(old_id, ErrorCode.FENCED_INSTANCE_ID))
        if old is not None and old.awaiting_sync:
            effects.append(SyncResult(old_id, ErrorCode.FENCED_INSTANCE_ID))
        m = Member(new_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                   old.protocol_type if old else (g.protocol_type or ""), list(protocols))
        m.assignment = old.assignment if old else b""
        m.join_version = version
        g.members[new_id] = m
        g.static_members[instance_id] = new_id
        if g.leader_id == old_id:
            g.leader_id = new_id
        self._heartbeat(m, now)
        unchanged = old is not None and _same_subscription(g, old.protocols, m.protocols)
        if g.state is GroupState.STABLE and unchanged:
            # no rebalance: the replacement carries on with the current assignment
            effects.append(StoreGroup(g.group_id, g))
            return self._join_result(g, m), effects
        m.awaiting_join = True
        if g.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, now, effects)
        self._try_complete_join(g, now, effects)
        return None, effects

    def _add_member(self, g: Group, m: Member, version: int, now: int, effects: list[Effect]) -> None:
        m.join_version = version
        m.awaiting_join = True
        if not g.members:
            g.protocol_type = m.protocol_type
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = m.member_id
        if g.leader_id is None or g.leader_id not in g.members:
            g.leader_id = m.member_id
        self._heartbeat(m, now)
        if g.state is GroupState.PREPARING_REBALANCE:
            g.initial_joined += 1
        else:
            self._prepare_rebalance(g, now, effects)
        self._try_complete_join(g, now, effects)

    def _prepare_rebalance(self, g: Group, now: int, effects: list[Effect]) -> None:
        if g.state is GroupState.COMPLETING_REBALANCE:
            for m in g.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    # kept alive while it waited: its session restarts with the answer (as Kafka's
                    # propagateAssignment does), so it has time to rejoin
                    self._heartbeat(m, now)
                    effects.append(SyncResult(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
                m.assignment = b""
        was_empty = g.state is GroupState.EMPTY
        self._transition(g, GroupState.PREPARING_REBALANCE, now)
        max_timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_started = now
        g.rebalance_deadline = now + max_timeout
        if was_empty and self.limits.initial_rebalance_delay_ms > 0:
            g.initial_delay_ms = self.limits.initial_rebalance_delay_ms
            g.initial_delay_until = now + min(g.initial_delay_ms, max_timeout)
            g.initial_joined = 0
        else:
            g.initial_delay_until = 0

    def _try_complete_join(self, g: Group, now: int, effects: list[Effect]) -> None:
        if g.state is not GroupState.PREPARING_REBALANCE:
            return
        if g.initial_delay_until:
            return  # the initial delay decides (tick)
        if g.all_joined():
            self._complete_join(g, now, effects)

    def _complete_join(self, g: Group, now: int, effects: list[Effect]) -> None:
        g.initial_delay_until = 0
        for mid in [mid for mid, m in g.members.items() if not m.awaiting_join]:
            self._remove_member(g, mid)
        g.pending_members.clear()
        g.generation_id += 1
        if g.is_empty:
            g.protocol_name = None
            g.leader_id = None
            self._transition(g, GroupState.EMPTY, now)
            effects.append(StoreGroup(g.group_id, g))
            return
        g.protocol_name = g.select_protocol()
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        self._transition(g, GroupState.COMPLETING_REBALANCE, now)
        for m in g.members.values():
            if m.awaiting_join:
                m.awaiting_join = False
                effects.append(self._join_result(g, m))
            self._heartbeat(m, now)

    def _join_result(self, g: Group, m: Member) -> JoinResult:
        assert g.protocol_name is not None
        members: list[tuple[str, str | None, bytes]] = []
        if m.member_id == g.leader_id:
            members = [(x.member_id, x.group_instance_id, x.metadata(g.protocol_name)) for x in g.members.values()]
        return JoinResult(
            m.member_id, ErrorCode.NONE, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id or "", members
        )

    def _remove_member(self, g: Group, member_id: str) -> Member | None:
        m = g.members.pop(member_id, None)
        if m is not None and m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == member_id:
            del g.static_members[m.group_instance_id]
        if g.leader_id == member_id:
            g.leader_id = next(iter(g.members), None)
        return m

    def _member_left(self, g: Group, member_id: str, now: int, effects: list[Effect]) -> None:
        """A member is gone (left, expired, fenced): rebalance or finish the pending one."""
        m = self._remove_member(g, member_id)
        if m is not None and m.awaiting_join:
            effects.append(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
        if m is not None and m.awaiting_sync:
            effects.append(SyncResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g, now, effects)
            g.initial_delay_until = 0
            if g.is_empty:
                self._complete_join(g, now, effects)
            else:
                self._try_complete_join(g, now, effects)
        elif g.state is GroupState.PREPARING_REBALANCE:
            if g.is_empty and not g.pending_members:
                self._complete_join(g, now, effects)
            else:
                self._try_complete_join(g, now, effects)

    # -- SyncGroup --------------------------------------------------------------------------------
    def sync(
        self,
        now: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> tuple[SyncResult | None, list[Effect]]:
        g = self._group(group_id)
        if g is None:
            return SyncResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID), []
        error = self._member_error(g, member_id, group_instance_id)
        if error is not None:
            return SyncResult(member_id, error), []
        m = g.members[member_id]
        if generation_id != g.generation_id:
            return SyncResult(member_id, ErrorCode.ILLEGAL_GENERATION), []
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and protocol_name != g.protocol_name
        ):
            return SyncResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL), []
        if g.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(member_id, ErrorCode.REBALANCE_IN_PROGRESS), []
        self._heartbeat(m, now)
        if g.state is GroupState.STABLE:
            return SyncResult(member_id, ErrorCode.NONE, g.protocol_type, g.protocol_name, m.assignment), []
        if g.state is not GroupState.COMPLETING_REBALANCE:
            return SyncResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID), []
        m.awaiting_sync = True
        effects: list[Effect] = []
        if member_id == g.leader_id:
            given = dict(assignments)
            for mid, member in g.members.items():
                member.assignment = given.get(mid, b"")
            self._transition(g, GroupState.STABLE, now)
            effects.append(StoreGroup(g.group_id, g))
            for member in g.members.values():
                if member.awaiting_sync:
                    member.awaiting_sync = False
                    self._heartbeat(member, now)  # its session starts again with the answer
                    effects.append(SyncResult(member.member_id, ErrorCode.NONE, g.protocol_type, g.protocol_name,
                                              member.assignment))
        return None, effects

    # -- Heartbeat / LeaveGroup -------------------------------------------------------------------
    def heartbeat(self, now: int, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> ErrorCode:
        g = self._group(group_id)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        error = self._member_error(g, member_id, group_instance_id)
        if error is not None:
            return error
        m = g.members[member_id]
        if generation_id != g.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if g.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._heartbeat(m, now)
        if g.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, now: int, *, group_id: str, members: list[tuple[str, str | None]]) -> tuple[
        list[ErrorCode], list[Effect]
    ]:
        """LeaveGroup for ``(member id, instance id)`` pairs; an empty member id with an instance
        id removes that static member."""
        g = self._group(group_id)
        if g is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID for _ in members], []
        errors: list[ErrorCode] = []
        effects: list[Effect] = []
        for member_id, instance_id in members:
            if instance_id is not None:
                known = g.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id not in (UNKNOWN_MEMBER_ID, known):
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in g.pending_members:
                del g.pending_members[member_id]
                errors.append(ErrorCode.NONE)
                self._try_complete_join(g, now, effects)
                continue
            if member_id not in g.members:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self._member_left(g, member_id, now, effects)
            errors.append(ErrorCode.NONE)
        return errors, effects

    # -- time -------------------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        deadlines: list[int] = []
        for g in self.groups.values():
            if g.state is GroupState.DEAD:
                continue
            if g.state is GroupState.PREPARING_REBALANCE:
                deadlines.append(g.initial_delay_until or g.rebalance_deadline)
            for m in g.members.values():
                # as in tick: members awaiting a join, or a sync while the leader assigns, stay alive
                if not m.awaiting_join and not (m.awaiting_sync and g.state is GroupState.COMPLETING_REBALANCE):
                    deadlines.append(m.heartbeat_deadline)
            deadlines.extend(g.pending_members.values())
        return min(deadlines) if deadlines else None

    def tick(self, now: int) -> list[Effect]:
        """Expire sessions and pending members, finish delayed and timed-out joins."""
        effects: list[Effect] = []
        for g in list(self.groups.values()):
            if g.state is GroupState.DEAD:
                continue
            for mid, deadline in list(g.pending_members.items()):
                if deadline <= now:
                    del g.pending_members[mid]
                    self._try_complete_join(g, now, effects)
            for mid, m in list(g.members.items()):
                if m.awaiting_join or (m.awaiting_sync and g.state is GroupState.COMPLETING_REBALANCE):
                    continue
                if m.heartbeat_deadline <= now:
                    self._member_left(g, mid, now, effects)
            if g.state is GroupState.PREPARING_REBALANCE:
                if g.initial_delay_until and now >= g.initial_delay_until:
                    remaining = g.rebalance_deadline - now
                    if g.initial_joined > 0 and remaining > 0:
                        # members kept arriving: wait another delay, within the rebalance timeout
                        g.initial_joined = 0
                        g.initial_delay_until = now + min(g.initial_delay_ms, remaining)
                    else:
                        g.initial_delay_until = 0
                        if g.all_joined() or now >= g.rebalance_deadline:
                            self._complete_join(g, now, effects)
                elif not g.initial_delay_until and now >= g.rebalance_deadline:
                    self._complete_join(g, now, effects)
        return effects

    # -- offsets ----------------------------------------------------------------------------------
    def commit_check(self, *, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None, transactional: bool = False) -> ErrorCode:
        """Whether an OffsetCommit (or, ``transactional``, a TxnOffsetCommit) may proceed: Kafka's
        generation and membership checks.  The member, the generation and the instance id are
        checked when any of them is given; a commit without them is a standalone consumer's (or
        an admin's), accepted while the group is empty, and always for a TxnOffsetCommit (v0-2
        have no such fields, and Java's ``sendOffsetsToTransaction(offsets, groupId)`` sends none),
        which is also not refused during a rebalance."""
        g = self._group(group_id)
        if g is None:
            return ErrorCode.NONE if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if generation_id < 0 and g.state is GroupState.EMPTY:
            return ErrorCode.NONE  # a standalone consumer's commit
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self._member_error(g, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != g.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional:
            return ErrorCode.UNKNOWN_MEMBER_ID  # no member named while the group has members
        if not transactional and g.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def prepare_commit(self, now: int, *, group_id: str, generation_id: int, member_id: str,
                       group_instance_id: str | None,
                       offsets: dict[tuple[str, int], OffsetAndMetadata],
                       transactional: bool = False) -> tuple[
        ErrorCode, dict[tuple[str, int], ErrorCode], StoreOffsets | None
    ]:
        """Validate a commit; returns (group error, per-partition errors, the write to make).
        The offsets enter the cache only through :meth:`apply_commit` once the write succeeded."""
        error = self.commit_check(group_id=group_id, generation_id=generation_id, member_id=member_id,
                                  group_instance_id=group_instance_id, transactional=transactional)
        if error is not ErrorCode.NONE:
            return error, {}, None
        g = self._group(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id, state_timestamp=now)
        else:
            m = g.members.get(member_id)
            if m is not None:
                self._heartbeat(m, now)
        per: dict[tuple[str, int], ErrorCode] = {}
        write: dict[tuple[str, int], OffsetAndMetadata | None] = {}
        for tp, om in offsets.items():
            if len(om.metadata.encode()) > self.limits.offset_metadata_max_bytes:
                per[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                per[tp] = ErrorCode.NONE
                write[tp] = om
        return ErrorCode.NONE, per, StoreOffsets(group_id, write) if write else None

    def apply_commit(self, store: StoreOffsets) -> None:
        g = self.groups.get(store.group_id)
        if g is None or g.state is GroupState.DEAD:
            if all(om is None for om in store.offsets.values()):
                return  # tombstones of a deleted or expired group must not bring it back
            g = self.groups[store.group_id] = Group(store.group_id)
        for tp, om in store.offsets.items():
            if om is None:
                g.offsets.pop(tp, None)
            else:
                g.offsets[tp] = om

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> dict[
        tuple[str, int], OffsetAndMetadata | None
    ]:
        g = self._group(group_id)
        stored = g.offsets if g is not None else {}
        if partitions is None:
            return dict(stored)
        return {tp: stored.get(tp) for tp in partitions}

    def expire_offsets(self, now: int, keep: Callable[[str], bool] | None = None) -> list[Effect]:
        """Offsets of groups without members expire ``offsets.retention.minutes`` after their
        commit (or explicit expire timestamp); tombstones are written for them.  ``keep``: groups
        whose offsets are kept whatever (consumer groups with members, whose offsets are here)."""
        effects: list[Effect] = []
        retention = self.limits.offsets_retention_ms
        for g in list(self.groups.values()):
            if g.state is GroupState.DEAD or g.members or (keep is not None and keep(g.group_id)):
                continue
            base = max(g.state_timestamp, 0)
            expired = {
                tp: None
                for tp, om in g.offsets.items()
                if (om.expire_timestamp >= 0 and now >= om.expire_timestamp)
                or (om.expire_timestamp < 0 and now - max(om.commit_timestamp, base) >= retention)
            }
            if expired:
                for tp in expired:
                    del g.offsets[tp]
                effects.append(StoreOffsets(g.group_id, dict(expired)))
            if not g.offsets and g.state is GroupState.EMPTY and g.generation_id >= 0 and not g.pending_members:
                self._transition(g, GroupState.DEAD, now)
                effects.append(StoreGroup(g.group_id, None))
                del self.groups[g.group_id]
        return effects

    def delete_offsets(self, now: int, group_id: str, partitions: list[tuple[str, int]]) -> tuple[
        ErrorCode, dict[tuple[str, int], ErrorCode], StoreOffsets | None
    ]:
        g = self._group(group_id)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}, None
        if g.state is not GroupState.EMPTY and g.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, {}, None
        subscribed = g.subscribed_topics() if g.members else set()
        per: dict[tuple[str, int], ErrorCode] = {}
        tombstones: dict[tuple[str, int], OffsetAndMetadata | None] = {}
        for tp in partitions:
            if subscribed is not None and tp[0] in subscribed:
                per[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                per[tp] = ErrorCode.NONE
                if tp in g.offsets:
                    tombstones[tp] = None
        return ErrorCode.NONE, per, StoreOffsets(group_id, tombstones) if tombstones else None

    # -- groups -----------------------------------------------------------------------------------
    def delete_group(self, now: int, group_id: str) -> tuple[ErrorCode, list[Effect]]:
        g = self._group(group_id)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if g.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP, []
        effects: list[Effect] = []
        if g.offsets:
            effects.append(StoreOffsets(group_id, dict.fromkeys(g.offsets)))
        effects.append(StoreGroup(group_id, None))
        self._transition(g, GroupState.DEAD, now)
        del self.groups[group_id]
        return ErrorCode.NONE, effects

    def describe(self, group_id: str) -> Group | None:
        return self._group(group_id)

    def list_groups(self, states: set[str] | None = None) -> list[Group]:
        return [
            g
            for g in self.groups.values()
            if g.state is not GroupState.DEAD and (not states or g.state.value in states)
        ]

    # -- loading from __consumer_offsets ----------------------------------------------------------
    def load_group(self, group: Group, now: int) -> None:
        """A group read back from its metadata record: Stable with members, else Empty (Kafka's
        loadGroup: a state restored, not a transition); members get a fresh session."""
        group._state = GroupState.STABLE if group.members else GroupState.EMPTY
        existing = self.groups.get(group.group_id)
        if existing is not None:
            group.offsets = existing.offsets
        for m in group.members.values():
            self._heartbeat(m, now)
        self.groups[group.group_id] = group

    def load_offset(self, group_id: str, tp: tuple[str, int], om: OffsetAndMetadata | None) -> None:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        if om is None:
            g.offsets.pop(tp, None)
        else:
            g.offsets[tp] = om

    def unload_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # -- the consumer protocol (KIP-848) taking a group over, and giving it back ------------------
    def hand_over(self, group_id: str) -> None:
        """The group became a consumer group: its classic state goes, its offsets stay here
        (an Empty group holding them, as for a standalone consumer's)."""
        g = self.groups.get(group_id)
        if g is None:
            return
        kept = Group(group_id, state_timestamp=g.state_timestamp)
        kept.offsets = g.offsets
        self.groups[group_id] = kept

    def rebalance(self, now: int, group_id: str, reason: str) -> list[Effect]:
        """Start a rebalance of a Stable group (one converted back from the consumer protocol
        after a member left): its members are asked to join again."""
        g = self._group(group_id)
        effects: list[Effect] = []
        if g is None or g.state is not GroupState.STABLE:
            return effects
        self._prepare_rebalance(g, now, effects)
        self._try_complete_join(g, now, effects)
        return effects
