"""Client side of Kafka's classic group protocol: the member's view of its consumer group.

``GroupMembership`` finds the coordinator, joins (answering MEMBER_ID_REQUIRED), runs the
assignor when it is the leader, syncs, heartbeats, commits and fetches offsets, and leaves.  It
reports assignment changes through callbacks and never touches fetching; the consumer owns
positions and records.  Eager assignors (``range``, ``roundrobin``) give up every partition before
rejoining; ``cooperative-sticky`` only those that move.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from odradek.cluster.assignment import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from odradek.cluster.assignors import ASSIGNORS, Subscription
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.data import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from odradek.protocol.messages.heartbeat import HeartbeatRequest
from odradek.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from odradek.protocol.messages.leave_group import LeaveGroupRequest
from odradek.protocol.messages.offset_commit import OffsetCommitRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest
from odradek.protocol.messages.sync_group import SyncGroupRequest
from odradek.transport import GROUP, AsyncBrokerConnection, AsyncCluster

__all__ = ["CommitFailed", "GroupMembership"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
_REJOIN_ERRORS = {ErrorCode.REBALANCE_IN_PROGRESS}
_RESET_ERRORS = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION}


class CommitFailed(KafkaError):
    """A commit the group no longer accepts (the member was kicked out or a rebalance started)."""


class GroupMembership:
    """A member of a classic consumer group: joins, syncs (running the assignor when it leads), heartbeats,
    commits and fetches offsets, and leaves (see the module docstring)."""

    def __init__(
        self,
        cluster: AsyncCluster,
        *,
        group_id: str,
        group_instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        assignors: Sequence[str],
        retry_backoff_ms: int,
        on_assign: Callable[[list[TopicPartition], list[TopicPartition]], Awaitable[None]],
    ) -> None:
        for name in assignors:
            if name not in ASSIGNORS:
                raise ValueError(f"unknown partition.assignment.strategy {name!r} (known: {', '.join(ASSIGNORS)})")
        self.cluster = cluster
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.assignors = list(assignors)
        # Kafka's rule: the cooperative protocol only when every configured assignor supports it
        # ("range,cooperative-sticky" is eager), since the group may pick any of them
        self.cooperative = bool(assignors) and all(a == "cooperative-sticky" for a in assignors)
        self.retry_backoff = retry_backoff_ms / 1000
        self.on_assign = on_assign
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader = False
        self.assigned: list[TopicPartition] = []
        self.subscription: set[str] = set()
        self.needs_rejoin = True
        self.coordinator: AsyncBrokerConnection | None = None
        self._hb_task: asyncio.Task[None] | None = None
        self.fatal: KafkaError | None = None
        self.joining = False  # a JoinGroup/SyncGroup exchange is under way
        self._leaving = False

    # -- coordinator ---------------------------------------------------------------------------
    async def coordinator_connection(self, deadline: float) -> AsyncBrokerConnection:
        """The group coordinator's connection, found again (until ``deadline``) when it is lost."""
        if self.coordinator is not None and not self.coordinator.closed:
            return self.coordinator
        self.coordinator = await self.cluster.coordinator(self.group_id, GROUP, deadline=deadline)
        return self.coordinator

    def _coordinator_lost(self) -> None:
        self.coordinator = None

    def _reset(self, err: ErrorCode, sent_generation: int) -> None:
        """The coordinator no longer knows our generation (or member id): rejoin.  Kafka's rules:
        ILLEGAL_GENERATION keeps the member id, UNKNOWN_MEMBER_ID drops it; and an answer to a
        request sent under an older generation than ours changes nothing (a commit queued behind
        our own JoinGroup comes back ILLEGAL_GENERATION once that join has completed)."""
        if sent_generation != self.generation:
            return
        if err is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.generation = -1
        self.needs_rejoin = True

    # -- join / sync ---------------------------------------------------------------------------
    def _metadata(self, assignor: str) -> bytes:
        sub = ConsumerProtocolSubscription(
            topics=sorted(self.subscription),
            owned_partitions=[
                ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=sorted(p for tt, p in self.assigned if tt == t))
                for t in sorted({t for t, _ in self.assigned})
            ],
            generation_id=self.generation,
        )
        return encode_subscription(sub, 2)

    async def ensure_active(self, partition_counts: Callable[[set[str]], Awaitable[Mapping[str, int]]], deadline: float) -> bool:
        """Join and sync if needed; returns True when a new assignment was applied."""
        if self.fatal is not None:
            raise self.fatal
        if not self.needs_rejoin:
            return False
        while True:
            try:
                if await self._join_and_sync(partition_counts, deadline):
                    return True
            except (ConnectionError, TimeoutError) as exc:
                log.debug("join failed: %s", exc)
                self._coordinator_lost()
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(self.retry_backoff)

    async def _join_and_sync(self, partition_counts: Callable[[set[str]], Awaitable[Mapping[str, int]]], deadline: float) -> bool:
        conn = await self.coordinator_connection(deadline)
        if self.assigned and (not self.cooperative or self.generation < 0):
            # eager protocol: give everything up before rejoining; cooperative members do the same
            # when they lost their membership (the partitions may belong to others by now)
            await self.on_assign([], list(self.assigned))
            self.assigned = []
        elif self.assigned:
            # cooperative: keep what we own, except partitions of topics no longer subscribed
            dropped = [tp for tp in self.assigned if tp[0] not in self.subscription]
            if dropped:
                self.assigned = [tp for tp in self.assigned if tp[0] in self.subscription]
                await self.on_assign([], dropped)
        self.joining = True
        try:
            return await self._exchange(conn, partition_counts)
        finally:
            self.joining = False

    async def _exchange(self, conn: AsyncBrokerConnection, partition_counts: Callable[[set[str]], Awaitable[Mapping[str, int]]]) -> bool:
        """JoinGroup, the assignment if we lead, SyncGroup; requests on the coordinator connection
        are answered in order, so nothing else should be sent there meanwhile (see ``joining``)."""
        v = conn.version_for(JoinGroupRequest)
        req = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id if v >= 5 else None,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=a, metadata=self._metadata(a)) for a in self.assignors],
        )
        resp = await conn.request(req, v, timeout=self.rebalance_timeout_ms / 1000 + 10)
        err = ErrorCode.of(resp.error_code)
        if err is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            return False
        if err in _RESET_ERRORS:
            self._reset(err, self.generation)
            return False
        if err in _COORDINATOR_ERRORS:
            self._coordinator_lost()
            return False
        if err is ErrorCode.FENCED_INSTANCE_ID:
            self.fatal = KafkaError(err, f"group.instance.id {self.group_instance_id} is used by another member")
            raise self.fatal
        if err is not ErrorCode.NONE:
            if err.retriable or err in _REJOIN_ERRORS:
                return False
            raise KafkaError(err, f"joining group {self.group_id}")
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        self.protocol = resp.protocol_name
        self.leader = resp.leader == resp.member_id
        assignments: list[SyncGroupRequest.SyncGroupRequestAssignment] = []
        if self.leader:
            assignments = await self._assign(resp.members, partition_counts)
        sv = conn.version_for(SyncGroupRequest)
        sreq = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id if sv >= 3 else None,
            protocol_type="consumer" if sv >= 5 else None,
            protocol_name=self.protocol if sv >= 5 else None,
            assignments=assignments,
        )
        sresp = await conn.request(sreq, sv, timeout=self.rebalance_timeout_ms / 1000 + 10)
        self.joining = False  # commits may go out again (e.g. from the revocation below)
        serr = ErrorCode.of(sresp.error_code)
        if serr in _RESET_ERRORS:
            self._reset(serr, self.generation)
            return False
        if serr in _COORDINATOR_ERRORS:
            self._coordinator_lost()
            return False
        if serr is ErrorCode.FENCED_INSTANCE_ID:
            self.fatal = KafkaError(serr, f"group.instance.id {self.group_instance_id} is used by another member")
            raise self.fatal
        if serr is not ErrorCode.NONE:
            return False
        decoded = decode_assignment(sresp.assignment) if sresp.assignment else None
        new: list[TopicPartition] = []
        if decoded is not None:
            new = sorted((tp.topic, p) for tp in decoded.assigned_partitions for p in tp.partitions)
        old = set(self.assigned)
        revoked = sorted(old - set(new))
        added = sorted(set(new) - old)
        self.assigned = new
        self.needs_rejoin = False
        if self.cooperative and revoked:
            self.needs_rejoin = True  # partitions we gave up go to others in the next round
        self._start_heartbeats()  # before the callbacks: they may wait for the consumer's next poll
        await self.on_assign(added, revoked)
        return True

    async def _assign(
        self,
        members: Sequence[JoinGroupResponse.JoinGroupResponseMember],
        partition_counts: Callable[[set[str]], Awaitable[Mapping[str, int]]],
    ) -> list[SyncGroupRequest.SyncGroupRequestAssignment]:
        subs: dict[str, Subscription] = {}
        for m in members:
            sub = decode_subscription(m.metadata)
            if sub is None:
                continue
            owned = [(tp.topic, p) for tp in sub.owned_partitions for p in tp.partitions]
            subs[m.member_id] = Subscription(list(sub.topics), owned, sub.generation_id, m.group_instance_id)
        topics = {t for s in subs.values() for t in s.topics}
        counts = await partition_counts(topics)
        assignor = ASSIGNORS[self.protocol or self.assignors[0]]
        plan = assignor(subs, counts)
        out = []
        for member_id, tps in plan.items():
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            a = ConsumerProtocolAssignment(
                assigned_partitions=[
                    ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())
                ]
            )
            out.append(SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=encode_assignment(a, 0)))
        return out

    # -- heartbeats ----------------------------------------------------------------------------
    def _start_heartbeats(self) -> None:
        self._leaving = False
        if self._hb_task is None or self._hb_task.done():
            self._hb_task = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        while not self._leaving:
            await asyncio.sleep(self.heartbeat_interval)
            if self._leaving:
                return
            # keep heartbeating while a rejoin is pending but not yet sent (the consumer rejoins on
            # its next poll), as Kafka's clients do, or the session could expire meanwhile
            if self.joining or self.generation < 0:
                continue
            sent_generation = self.generation
            try:
                conn = await self.coordinator_connection(time.monotonic() + self.session_timeout_ms / 1000)
                v = conn.version_for(HeartbeatRequest)
                resp = await conn.request(
                    HeartbeatRequest(
                        group_id=self.group_id,
                        generation_id=self.generation,
                        member_id=self.member_id,
                        group_instance_id=self.group_instance_id if v >= 3 else None,
                    ),
                    v,
                )
            except (ConnectionError, TimeoutError, KafkaError) as exc:
                log.debug("heartbeat failed: %s", exc)
                self._coordinator_lost()
                continue
            err = ErrorCode.of(resp.error_code)
            if err is ErrorCode.NONE:
                continue
            if err in _REJOIN_ERRORS:
                self.needs_rejoin = True
            elif err in _RESET_ERRORS:
                self._reset(err, sent_generation)
            elif err in _COORDINATOR_ERRORS:
                self._coordinator_lost()
            elif err is ErrorCode.FENCED_INSTANCE_ID:
                self.fatal = KafkaError(err, f"group.instance.id {self.group_instance_id} is used by another member")
                return

    # -- offsets -------------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, tuple[int, int, str]], deadline: float) -> None:
        """Commit ``{(topic, partition): (offset, leader epoch, metadata)}``."""
        while True:
            conn = await self.coordinator_connection(deadline)
            v = conn.version_for(OffsetCommitRequest, maximum=8)
            by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
            for (t, p), (off, epoch, meta) in offsets.items():
                by_topic.setdefault(t, []).append(
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=off, committed_leader_epoch=epoch if v >= 6 else -1,
                        committed_metadata=meta,
                    )
                )
            sent_generation = self.generation
            req = OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id if v >= 7 else None,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            )
            try:
                resp = await conn.request(req, v)
            except (ConnectionError, TimeoutError):
                self._coordinator_lost()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)
                continue
            errors = {ErrorCode.of(p.error_code) for t in resp.topics for p in t.partitions} - {ErrorCode.NONE}
            if not errors:
                return
            if errors & _COORDINATOR_ERRORS or ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in errors:
                self._coordinator_lost()
            elif errors & (_RESET_ERRORS | _REJOIN_ERRORS | {ErrorCode.FENCED_INSTANCE_ID}):
                if sent_generation == self.generation:
                    self.needs_rejoin = True
                for reset in sorted(errors & _RESET_ERRORS, reverse=True):  # UNKNOWN_MEMBER_ID first
                    self._reset(reset, sent_generation)
                err = next(iter(errors))
                raise CommitFailed(err, "the commit failed: the group rebalanced or this member was removed")
            elif not all(e.retriable for e in errors):
                err = next(iter(errors))
                raise KafkaError(err, "offset commit failed")
            if time.monotonic() > deadline:
                raise KafkaError(next(iter(errors)), "offset commit timed out")
            await asyncio.sleep(self.retry_backoff)

    async def fetch_committed(self, partitions: Sequence[TopicPartition], deadline: float) -> dict[TopicPartition, tuple[int, int, str]]:
        """The group's committed (offset, leader epoch, metadata) of ``partitions`` (OffsetFetch), retried on
        the coordinator's retriable errors until ``deadline``; a partition without a commit is absent."""
        while True:
            conn = await self.coordinator_connection(deadline)
            v = conn.version_for(OffsetFetchRequest, maximum=7)
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            req = OffsetFetchRequest(
                group_id=self.group_id,
                topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                require_stable=False,
            )
            try:
                resp = await conn.request(req, v)
            except (ConnectionError, TimeoutError):
                self._coordinator_lost()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)
                continue
            err = ErrorCode.of(resp.error_code) if v >= 2 else ErrorCode.NONE
            if err is ErrorCode.NONE:
                out = {}
                for t in resp.topics:
                    for p in t.partitions:
                        if p.error_code == 0 and p.committed_offset >= 0:
                            out[(t.name, p.partition_index)] = (p.committed_offset, p.committed_leader_epoch, p.metadata or "")
                return out
            if err in _COORDINATOR_ERRORS or err is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                self._coordinator_lost()
            elif not err.retriable:
                raise KafkaError(err, "fetching committed offsets")
            if time.monotonic() > deadline:
                raise KafkaError(err, "fetching committed offsets timed out")
            await asyncio.sleep(self.retry_backoff)

    async def leave(self) -> None:
        """Stop heartbeating and leave the group (LeaveGroup; a static member keeps its place until its
        session times out)."""
        self._leaving = True
        if self._hb_task is not None:
            # Python 3.11's wait_for (inside a request) can swallow a cancellation that arrives as
            # its response does: the loop also checks ``_leaving``, and we do not wait for ever
            self._hb_task.cancel()
            await asyncio.wait({self._hb_task}, timeout=self.heartbeat_interval + 1)
            self._hb_task = None
        if not self.member_id or self.group_instance_id is not None:
            return  # static members keep their place: the session timeout removes them
        try:
            conn = await self.coordinator_connection(time.monotonic() + 5)
            v = conn.version_for(LeaveGroupRequest)
            if v >= 3:
                req = LeaveGroupRequest(
                    group_id=self.group_id,
                    members=[LeaveGroupRequest.MemberIdentity(member_id=self.member_id, group_instance_id=None)],
                )
            else:
                req = LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id)
            await conn.request(req, v, timeout=5)
        except (ConnectionError, TimeoutError, KafkaError) as exc:
            log.debug("leave failed: %s", exc)
        self.member_id, self.generation = "", -1
        self.assigned = []
