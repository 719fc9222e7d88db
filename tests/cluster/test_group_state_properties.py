"""Property tests of the group coordinator's state machine (:mod:`odradek.cluster.group`).

A hypothesis rule-based machine plays several clients of one group against
``GroupCoordinatorState`` directly: it joins (new dynamic members, KIP-394 member-id round trips,
rejoins with and without a protocol change, static members including two processes sharing one
``group.instance.id``), syncs (leader and followers, right and wrong generations), heartbeats,
leaves, crashes (stops talking), commits offsets with right and wrong generations, deletes the
group, expires offsets and advances the clock through ``tick``.  Like the broker, it keeps one
outstanding JoinGroup/SyncGroup response per member id and answers it from the effects.

After every step it checks the invariants of Kafka's classic protocol:

* every successful JoinResult/SyncResult refers to the current generation at the moment it is
  delivered (at most one generation at a time), and a Sync assignment is the one the leader of
  that generation chose for that member;
* only current members commit (a non-member or a stale generation fails, except generation -1 on
  an Empty group) and successful commits are what OffsetFetch returns;
* a Stable group's assignment map covers exactly its members; member ids are unique; the leader
  is a member whenever there are members; ``group.max.size`` holds;
* state changes only along Kafka's edges, generations never go back;
* time always moves the group on: after ``tick(now)`` the next deadline lies in the future, and
  once every client stops, ticking to the deadlines empties the group and answers every request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from odradek.cluster.group import (
    Effect,
    Group,
    GroupCoordinatorState,
    GroupLimits,
    GroupState,
    JoinResult,
    OffsetAndMetadata,
    StoreGroup,
    StoreOffsets,
    SyncResult,
)
from odradek.errors import ErrorCode

GID = "g"
TP = ("t", 0)
S = GroupState

ALLOWED = {
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
} | {(s, S.DEAD) for s in S if s is not S.DEAD}

# protocol sets a client may announce: same protocol with other metadata (a subscription change),
# a superset, a protocol nobody else supports, and another protocol type
PROTOCOLS: dict[str, tuple[str, list[tuple[str, bytes]]]] = {
    "r1": ("consumer", [("range", b"sub-1")]),
    "r2": ("consumer", [("range", b"sub-2")]),
    "both": ("consumer", [("roundrobin", b"sub-1"), ("range", b"sub-1")]),
    "rr": ("consumer", [("roundrobin", b"sub-1")]),
    "connect": ("connect", [("default", b"worker")]),
}

# clients 0-2 are dynamic; 3 and 5 are two processes configured with the same instance id
INSTANCE_IDS: list[str | None] = [None, None, None, "static-a", "static-b", "static-a"]


class RecordingState(GroupCoordinatorState):
    """The real state machine, recording every state change it makes."""

    def __init__(self, limits: GroupLimits) -> None:
        super().__init__(limits)
        self.transitions: list[tuple[GroupState, GroupState]] = []

    def _transition(self, g: Group, state: GroupState, now: int) -> None:
        self.transitions.append((g.state, state))
        super()._transition(g, state, now)


@dataclass
class Client:
    idx: int
    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    waiting: str | None = None  # "join" | "sync": an outstanding deferred request
    leader: bool = False
    join_members: list[str] = field(default_factory=list)
    sync_generation: int = -1
    assignment: bytes | None = None
    needs_join: bool = True
    protocols: str = "r1"

    def reset(self) -> None:
        self.member_id, self.generation, self.leader, self.join_members = "", -1, False, []
        self.assignment = None
        self.needs_join = True


def expected_assignment(member_id: str, generation: int) -> bytes:
    return f"{member_id}@{generation}".encode()


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        self.clients = [Client(i, iid) for i, iid in enumerate(INSTANCE_IDS)]
        self.waiting: dict[str, Client] = {}  # member id -> client waiting for its response
        self.abandoned: set[str] = set()  # member ids whose outstanding response nobody reads
        self.fenced: set[str] = set()  # member ids replaced by another process's static rejoin
        self.stale: set[str] = set()  # member ids of an earlier incarnation of the group
        self.lineage: dict[str, set[str]] = {}  # instance id -> member ids it has had
        self.assigned: dict[str, bytes] = {}  # the current generation's assignment (from the leader)
        self.last_generation = 0
        self.committed: OffsetAndMetadata | None = None
        self.next_offset = 0
        self.state = RecordingState(GroupLimits())

    @initialize(
        delay=st.sampled_from([0, 0, 300, 3000]),
        max_size=st.sampled_from([2, 4, 1000]),
    )
    def setup(self, delay: int, max_size: int) -> None:
        self.max_size = max_size
        self.state = RecordingState(
            GroupLimits(
                min_session_timeout_ms=1000,
                max_session_timeout_ms=30000,
                max_size=max_size,
                initial_rebalance_delay_ms=delay,
                offsets_retention_ms=60_000,
            )
        )

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def group(self) -> Group | None:
        return self.state.groups.get(GID)

    def deliver(self, effects: list[Effect], immediate: JoinResult | SyncResult | None = None,
                requester: Client | None = None) -> None:
        """Carry out effects as the broker does (offset writes reach the cache), then hand every
        response to the client waiting for it and check it against the group at this moment."""
        for e in effects:
            if isinstance(e, StoreOffsets):
                self.state.apply_commit(e)
            elif isinstance(e, StoreGroup):
                assert e.group_id == GID
        for e in effects:
            if isinstance(e, (JoinResult, SyncResult)):
                self._answer(e, None)
        if immediate is not None:
            self._answer(immediate, requester)

    def _answer(self, r: JoinResult | SyncResult, requester: Client | None) -> None:
        kind = "join" if isinstance(r, JoinResult) else "sync"
        if requester is None:
            client = self.waiting.pop(r.member_id, None)
            if client is None:
                assert r.member_id in self.abandoned, f"{kind} response {r} owed to nobody"
                self._check_result(r, None)
                return
            assert client.waiting == kind, f"{kind} response {r} to a client waiting for {client.waiting}"
            client.waiting = None
        else:
            client = requester
        self._check_result(r, client)
        if isinstance(r, JoinResult):
            self._on_join(r, client)
        else:
            self._on_sync(r, client)

    def _check_result(self, r: JoinResult | SyncResult, client: Client | None) -> None:
        if r.error is not ErrorCode.NONE:
            return
        g = self.group
        assert g is not None, f"success {r} for a group that does not exist"
        assert r.member_id in g.members, f"success {r} for a non-member"
        assert g.members[r.member_id].heartbeat_deadline > self.now, f"{r} to a member whose session is over"
        if isinstance(r, JoinResult):
            assert g.state in (S.COMPLETING_REBALANCE, S.STABLE), (r, g.state)
            assert r.generation_id == g.generation_id, f"join result of generation {r.generation_id}, group at {g.generation_id}"
            assert r.leader == g.leader_id
            assert r.protocol_name == g.protocol_name
            assert r.protocol_name is not None
            for m in g.members.values():
                assert r.protocol_name in {n for n, _ in m.protocols}, "selected protocol unsupported by a member"
            if r.member_id == r.leader:
                assert sorted(mid for mid, _iid, _meta in r.members) == sorted(g.members)
            else:
                assert r.members == []
        else:
            assert g.state is S.STABLE, (r, g.state)
            if client is not None:
                assert client.sync_generation == g.generation_id, (
                    f"sync answered for generation {client.sync_generation}, group at {g.generation_id}"
                )
            assert r.assignment == g.members[r.member_id].assignment
            assert r.assignment == self.assigned.get(r.member_id), (r.assignment, self.assigned)

    def _on_join(self, r: JoinResult, c: Client) -> None:
        if r.error is ErrorCode.NONE:
            c.member_id, c.generation = r.member_id, r.generation_id
            c.leader = r.leader == r.member_id
            c.join_members = [mid for mid, _iid, _meta in r.members]
            c.assignment = None
            c.needs_join = False
            if c.instance_id is not None:
                self.lineage.setdefault(c.instance_id, set()).add(r.member_id)
        elif r.error is ErrorCode.MEMBER_ID_REQUIRED:
            g = self.group
            assert g is not None and r.member_id in g.pending_members
            c.member_id = r.member_id
        elif r.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID,
                         ErrorCode.GROUP_MAX_SIZE_REACHED):
            c.reset()
        else:
            # INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS: try again with the usual protocols
            c.needs_join, c.protocols = True, "r1"

    def _on_sync(self, r: SyncResult, c: Client) -> None:
        if r.error is ErrorCode.NONE:
            c.assignment = r.assignment
        elif r.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            c.reset()
        else:
            c.needs_join = True

    def wait_for(self, client: Client, kind: str, member_id: str) -> None:
        assert member_id not in self.waiting, f"two outstanding responses for {member_id}"
        client.waiting = kind
        self.waiting[member_id] = client

    def abandon(self, c: Client) -> None:
        if c.waiting is not None:
            for mid, w in list(self.waiting.items()):
                if w is c:
                    del self.waiting[mid]
                    self.abandoned.add(mid)
            c.waiting = None

    def is_current(self, member_id: str, instance_id: str | None, generation: int) -> bool:
        g = self.group
        return (
            g is not None
            and member_id in g.members
            and generation == g.generation_id
            and (instance_id is None or g.static_members.get(instance_id) == member_id)
        )

    def tick(self, now: int) -> None:
        self.now = now
        self.deliver(self.state.tick(now))
        deadline = self.state.next_deadline()
        assert deadline is None or deadline > now, f"after tick({now}) the next deadline {deadline} is already due"

    # -- rules -----------------------------------------------------------------------------------
    @rule(
        i=st.integers(0, len(INSTANCE_IDS) - 1),
        protocols=st.sampled_from(sorted(PROTOCOLS)),
        version=st.integers(0, 9),
        session=st.sampled_from([1000, 3000, 10000]),
        rebalance=st.sampled_from([1000, 5000, 20000]),
    )
    def join(self, i: int, protocols: str, version: int, session: int, rebalance: int) -> None:
        c = self.clients[i]
        if c.waiting is not None:
            return
        if c.instance_id is not None:
            version = max(version, 5)  # group.instance.id needs JoinGroup v5
        c.protocols = protocols
        ptype, protos = PROTOCOLS[protocols]
        g = self.group
        before_static = dict(g.static_members) if g is not None else {}
        before_state = g.state if g is not None else None
        before_generation = g.generation_id if g is not None else 0
        known = g.members.get(c.member_id) if g is not None and c.member_id else None
        changed = known is not None and known.protocols != protos
        known_leader = known is not None and g is not None and g.leader_id == known.member_id
        result, effects, owed = self.state.join(
            self.now,
            group_id=GID,
            member_id=c.member_id,
            group_instance_id=c.instance_id,
            protocol_type=ptype,
            protocols=list(protos),
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            client_id=f"client-{i}",
            client_host="/127.0.0.1",
            version=version,
        )
        g = self.group
        if c.instance_id is not None and g is not None:
            old = before_static.get(c.instance_id)
            new = g.static_members.get(c.instance_id)
            if old is not None and new is not None and old != new:
                # another process's static member was replaced: it is fenced from now on
                self.fenced.add(old)
                if old in self.assigned and g.state is S.STABLE:
                    self.assigned[new] = self.assigned.pop(old)
        inconsistent = result is not None and result.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if known is not None and before_state is S.STABLE and c.instance_id is None and g is not None and not inconsistent:
            rebalanced = g.state is not S.STABLE or g.generation_id > before_generation
            if changed or known_leader:
                # new metadata, or the leader rejoining (it may reassign): a rebalance
                assert result is None and rebalanced, "a changed or leader rejoin in Stable did not rebalance"
            else:
                # a follower rejoining unchanged just gets the current generation again
                assert result is not None and result.error is ErrorCode.NONE and not rebalanced
                assert result.generation_id == before_generation
        if (not c.member_id and c.instance_id is None and version >= 4 and result is not None
                and not inconsistent and result.error is not ErrorCode.GROUP_MAX_SIZE_REACHED):
            assert result.error is ErrorCode.MEMBER_ID_REQUIRED, result  # KIP-394
        if result is None:
            self.wait_for(c, "join", owed)
            self.deliver(effects)
        else:
            assert result.member_id == owed
            self.deliver(effects, result, c)

    def natural_step(self, c: Client) -> None:
        """What a well-behaved client does next: (re)join, sync, or heartbeat."""
        if c.waiting is not None:
            return
        if not c.member_id or c.needs_join:
            self.join(c.idx, c.protocols, 5, 3000, 5000)
        elif c.assignment is None:
            self.sync(c.idx, 0, False)
        else:
            self.heartbeat(c.idx, 0)

    @rule(i=st.integers(0, len(INSTANCE_IDS) - 1))
    def client_step(self, i: int) -> None:
        self.natural_step(self.clients[i])

    @rule(who=st.sets(st.integers(0, len(INSTANCE_IDS) - 1), min_size=1))
    def round_of_steps(self, who: set[int]) -> None:
        for i in sorted(who):
            self.natural_step(self.clients[i])

    @rule(
        i=st.integers(0, len(INSTANCE_IDS) - 1),
        delta=st.sampled_from([0, 0, 0, -1, 1]),
        follower_assigns=st.booleans(),
    )
    def sync(self, i: int, delta: int, follower_assigns: bool) -> None:
        c = self.clients[i]
        if c.waiting is not None or not c.member_id:
            return
        generation = c.generation + delta
        if c.leader:
            assignments = [(mid, expected_assignment(mid, generation)) for mid in c.join_members]
        elif follower_assigns:
            # a follower's assignments must be ignored
            assignments = [(c.member_id, b"not-from-the-leader")]
        else:
            assignments = []
        g = self.group
        was_completing = g is not None and g.state is S.COMPLETING_REBALANCE
        result, effects = self.state.sync(
            self.now,
            group_id=GID,
            generation_id=generation,
            member_id=c.member_id,
            group_instance_id=c.instance_id,
            protocol_type=None,
            protocol_name=None,
            assignments=assignments,
        )
        g = self.group
        if was_completing and g is not None and g.state is S.STABLE:
            # the leader's sync completed the rebalance: its assignment covers exactly the members
            assert c.leader and c.member_id == g.leader_id and generation == g.generation_id
            assert sorted(c.join_members) == sorted(g.members), "members changed within a generation"
            self.assigned = {mid: expected_assignment(mid, generation) for mid in c.join_members}
        c.sync_generation = generation
        if result is None:
            self.wait_for(c, "sync", c.member_id)
            self.deliver(effects)
        else:
            self.deliver(effects, result, c)

    @rule(i=st.integers(0, len(INSTANCE_IDS) - 1), delta=st.sampled_from([0, 0, -1, 1]))
    def heartbeat(self, i: int, delta: int) -> None:
        c = self.clients[i]
        if c.waiting is not None or not c.member_id:
            return
        generation = c.generation + delta
        current = self.is_current(c.member_id, c.instance_id, generation)
        g = self.group
        state = g.state if g is not None else None
        code = self.state.heartbeat(
            self.now, group_id=GID, member_id=c.member_id, group_instance_id=c.instance_id,
            generation_id=generation,
        )
        if code is ErrorCode.NONE:
            assert current and state in (S.STABLE, S.COMPLETING_REBALANCE), (code, state)
        if current and state in (S.STABLE, S.COMPLETING_REBALANCE):
            assert code is ErrorCode.NONE, f"a current member's heartbeat in {state} failed with {code}"
        if current and state is S.PREPARING_REBALANCE:
            assert code is ErrorCode.REBALANCE_IN_PROGRESS
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            c.reset()
        elif code is not ErrorCode.NONE:
            c.needs_join = True

    @rule(i=st.integers(0, len(INSTANCE_IDS) - 1), by_instance=st.booleans())
    def leave(self, i: int, by_instance: bool) -> None:
        c = self.clients[i]
        if not c.member_id and c.instance_id is None:
            return
        self.abandon(c)
        member_id = "" if by_instance and c.instance_id is not None else c.member_id
        errors, effects = self.state.leave(self.now, group_id=GID, members=[(member_id, c.instance_id)])
        self.deliver(effects)
        g = self.group
        if errors == [ErrorCode.NONE] and g is not None and member_id:
            assert member_id not in g.members and member_id not in g.pending_members
        c.reset()

    @rule(i=st.integers(0, len(INSTANCE_IDS) - 1))
    def crash(self, i: int) -> None:
        """The client process dies: it stops sending anything; its session runs out."""
        c = self.clients[i]
        self.abandon(c)
        c.reset()

    @rule(
        i=st.integers(0, len(INSTANCE_IDS) - 1),
        how=st.sampled_from(["own", "own", "standalone", "stale", "future", "anonymous"]),
    )
    def commit(self, i: int, how: str) -> None:
        c = self.clients[i]
        member_id, instance_id, generation = c.member_id, c.instance_id, c.generation
        if how == "standalone":
            member_id, instance_id, generation = "", None, -1
        elif how == "stale":
            generation -= 1
        elif how == "future":
            generation += 1
        elif how == "anonymous":
            member_id, instance_id = "", None
        g = self.group
        empty_or_absent = g is None or g.state is S.EMPTY
        current = self.is_current(member_id, instance_id, generation)
        self.next_offset += 1
        om = OffsetAndMetadata(self.next_offset, -1, f"commit {self.next_offset}", self.now)
        error, per, store = self.state.prepare_commit(
            self.now, group_id=GID, generation_id=generation, member_id=member_id,
            group_instance_id=instance_id, offsets={TP: om},
        )
        if error is ErrorCode.NONE:
            assert (generation < 0 and empty_or_absent) or current, (
                f"commit by {member_id!r} gen {generation} accepted (group {g and g.state}, "
                f"gen {g and g.generation_id}, members {g and list(g.members)})"
            )
            assert per == {TP: ErrorCode.NONE} and store is not None
            self.state.apply_commit(store)
            self.committed = om
        else:
            assert store is None
            if member_id and generation >= 0 and not current:
                assert error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                                 ErrorCode.FENCED_INSTANCE_ID), error
        fetched = self.state.fetch_offsets(GID, [TP])[TP]
        assert fetched == self.committed, (fetched, self.committed)

    @rule(ms=st.sampled_from([1, 100, 299, 500, 1000, 2500, 5000, 12000]))
    def advance(self, ms: int) -> None:
        self.tick(self.now + ms)

    @rule()
    def advance_to_next_deadline(self) -> None:
        deadline = self.state.next_deadline()
        if deadline is not None:
            self.tick(max(deadline, self.now))

    @rule()
    def delete_group(self) -> None:
        g = self.group
        state = g.state if g is not None else None
        code, effects = self.state.delete_group(self.now, GID)
        self.deliver(effects)
        if code is ErrorCode.NONE:
            assert state is S.EMPTY
            assert self.state.describe(GID) is None, "a deleted group is still described"
            assert all(x.group_id != GID for x in self.state.list_groups()), "a deleted group is still listed"
            assert self.state.fetch_offsets(GID, [TP]) == {TP: None}
            self.committed = None
            self.last_generation = 0
        else:
            assert state is not S.EMPTY or g is None, (code, state)

    @rule(ms=st.sampled_from([0, 30_000, 61_000]))
    def expire_offsets(self, ms: int) -> None:
        self.tick(self.now + ms)  # the broker's timer keeps ticking meanwhile
        g = self.group
        had_members = g is not None and bool(g.members)
        self.deliver(self.state.expire_offsets(self.now))
        after = self.state.fetch_offsets(GID, [TP])[TP]
        if had_members:
            assert after == self.committed, "offsets of a group with members expired"
        elif after is None:
            self.committed = None
        if self.group is None:
            self.last_generation = 0
            assert all(x.group_id != GID for x in self.state.list_groups())

    @rule()
    def everyone_stops(self) -> None:
        """Every client stops talking; time alone must empty the group and answer every request."""
        for _ in range(200):
            deadline = self.state.next_deadline()
            if deadline is None:
                break
            self.tick(max(deadline, self.now))
        else:
            raise AssertionError("the group never settled")
        g = self.group
        if g is not None:
            assert g.state is S.EMPTY and not g.members and not g.pending_members, (g.state, list(g.members))
        assert not self.waiting, f"requests never answered: {sorted(self.waiting)}"
        for c in self.clients:
            c.reset()

    # -- invariants ------------------------------------------------------------------------------
    @invariant()
    def transitions_follow_kafka(self) -> None:
        for edge in self.state.transitions:
            assert edge in ALLOWED, f"illegal transition {edge[0].value} -> {edge[1].value}"
        self.state.transitions.clear()

    @invariant()
    def group_is_consistent(self) -> None:
        g = self.group
        if g is None:
            # the group is gone (deleted, or expired without offsets): a new one starts again at
            # generation 0, so what clients still hold belongs to the old incarnation
            self.last_generation = 0
            self.stale.update(c.member_id for c in self.clients if c.member_id)
            return
        assert g.state is not S.DEAD, "a Dead group stayed in the cache"
        assert g.generation_id >= self.last_generation, "generation went back"
        self.last_generation = g.generation_id
        # unique member ids
        assert all(mid == m.member_id for mid, m in g.members.items())
        assert not set(g.members) & set(g.pending_members)
        assert len(set(g.static_members.values())) == len(g.static_members)
        for iid, mid in g.static_members.items():
            assert mid in g.members and g.members[mid].group_instance_id == iid
        for m in g.members.values():
            if m.group_instance_id is not None:
                assert g.static_members.get(m.group_instance_id) == m.member_id
        assert len(g.members) <= self.max_size
        # leader
        if g.members:
            assert g.leader_id in g.members, f"leader {g.leader_id} is not a member"
        # states
        if g.state is S.EMPTY:
            assert not g.members
        elif g.state in (S.COMPLETING_REBALANCE, S.STABLE):
            assert g.members and g.protocol_name is not None
        elif g.state is S.PREPARING_REBALANCE:
            # with nobody left to wait for, only the initial delay may still be running
            assert g.members or g.pending_members or g.initial_delay_until > self.now, (
                "an empty group is stuck in PreparingRebalance"
            )
        for m in g.members.values():
            if m.awaiting_join:
                assert g.state is S.PREPARING_REBALANCE
            if m.awaiting_sync:
                assert g.state is S.COMPLETING_REBALANCE
        if g.state is S.STABLE:
            assert sorted(self.assigned) == sorted(g.members), (
                f"stable assignment covers {sorted(self.assigned)}, members {sorted(g.members)}"
            )
            for mid, m in g.members.items():
                assert m.assignment == self.assigned[mid]
        # something will move a group that has work pending
        if g.state is S.PREPARING_REBALANCE or any(not m.awaiting_join for m in g.members.values()):
            assert self.state.next_deadline() is not None

    @invariant()
    def clients_agree_on_one_generation(self) -> None:
        g = self.group
        seen: dict[str, int] = {}
        for c in self.clients:
            if c.member_id and c.member_id not in self.abandoned:
                assert c.member_id not in seen, f"clients {seen[c.member_id]} and {c.idx} share {c.member_id}"
                seen[c.member_id] = c.idx
            if g is None or not c.member_id or c.member_id in self.fenced or c.member_id in self.stale:
                continue
            if g.state in (S.COMPLETING_REBALANCE, S.STABLE) and c.generation == g.generation_id:
                assert c.member_id in g.members, (
                    f"client {c.idx} holds generation {c.generation} as {c.member_id} but is no member"
                )
            if c.assignment is not None and c.generation == g.generation_id and g.state is S.STABLE:
                assert c.assignment == self.assigned.get(c.member_id)

    def teardown(self) -> None:
        self.everyone_stops()


TestGroupMachine = GroupMachine.TestCase
# An example of this machine costs about a millisecond, so it runs ten times the profile's
# max_examples (ci: 200, dev: 1000), still bounded by the profile.
_profile = settings()  # the loaded profile (tests/conftest.py)
TestGroupMachine.settings = settings(_profile, max_examples=10 * _profile.max_examples, stateful_step_count=60)


# ------------------------------------------------------------------------------------------------
# regressions found by the machine above, as plain examples


def _limits(**kw: int) -> GroupLimits:
    base = {"min_session_timeout_ms": 1000, "initial_rebalance_delay_ms": 0}
    base.update(kw)
    return GroupLimits(**base)


def _join(state: GroupCoordinatorState, now: int, member_id: str = "", session: int = 1000,
          version: int = 3, instance_id: str | None = None) -> tuple[JoinResult | None, list[Effect], str]:
    return state.join(
        now, group_id=GID, member_id=member_id, group_instance_id=instance_id, protocol_type="consumer",
        protocols=[("range", b"")], session_timeout_ms=session, rebalance_timeout_ms=5000,
        client_id="c", client_host="/127.0.0.1", version=version,
    )


def test_deleted_group_is_not_recreated_by_its_own_tombstones() -> None:
    """DeleteGroups writes offset tombstones; carrying them out must not bring the group back."""
    state = GroupCoordinatorState(_limits())
    _err, _per, store = state.prepare_commit(0, group_id=GID, generation_id=-1, member_id="",
                                             group_instance_id=None,
                                             offsets={TP: OffsetAndMetadata(5, -1, "", 0)})
    assert store is not None
    state.apply_commit(store)
    code, effects = state.delete_group(1, GID)
    assert code is ErrorCode.NONE
    for e in effects:
        if isinstance(e, StoreOffsets):
            state.apply_commit(e)  # what the broker does once the tombstones are written
    assert state.describe(GID) is None
    assert state.list_groups() == []


@pytest.mark.parametrize("leader_session", [1000, 10000])
def test_no_deadline_in_the_past_while_followers_wait_for_the_leader(leader_session: int) -> None:
    """A follower waiting in SyncGroup is kept alive; its passed heartbeat deadline must not be
    reported as the next deadline, or the broker's timer spins until the leader syncs or expires."""
    state = GroupCoordinatorState(_limits())
    now = 0
    r1, _e, leader = _join(state, now, session=leader_session)
    assert r1 is None
    r2, effects, follower = _join(state, now, session=1000)
    assert r2 is None
    # both rejoin for the rebalance that the second member started
    _r, effects, _ = _join(state, now, member_id=leader, session=leader_session)
    joins = {e.member_id: e for e in effects if isinstance(e, JoinResult)}
    g = state.groups[GID]
    assert g.state is S.COMPLETING_REBALANCE and set(joins) == {leader, follower}
    result, _ = state.sync(now, group_id=GID, generation_id=g.generation_id, member_id=follower,
                           group_instance_id=None, protocol_type=None, protocol_name=None, assignments=[])
    assert result is None  # waits for the leader
    for now in range(500, min(leader_session, 5000), 500):
        state.tick(now)
        deadline = state.next_deadline()
        assert deadline is None or deadline > now, (now, deadline)
    assert follower in g.members
    if leader_session > 1000:
        # the leader syncs after the follower's session timeout: the follower, kept alive while it
        # waited, gets its assignment with a fresh session instead of expiring at the next tick
        result, effects = state.sync(now, group_id=GID, generation_id=g.generation_id, member_id=leader,
                                     group_instance_id=None, protocol_type=None, protocol_name=None,
                                     assignments=[(leader, b"L"), (follower, b"F")])
        assert g.state is S.STABLE
        assert result is None  # the leader's answer is an effect too
        assert sorted((e.member_id, e.error, e.assignment) for e in effects if isinstance(e, SyncResult)) == sorted(
            [(leader, ErrorCode.NONE, b"L"), (follower, ErrorCode.NONE, b"F")]
        )
        state.tick(now + 1)
        assert g.state is S.STABLE and set(g.members) == {leader, follower}
