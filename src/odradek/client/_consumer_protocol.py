"""Client side of KIP-848's consumer group protocol (``group.protocol=consumer``).

The broker assigns: a member only heartbeats (ConsumerGroupHeartbeat) and reconciles what it owns
with the target assignment the answers carry, as Kafka's consumer does:

- the member id is the client's (a UUID), the member epoch the broker's; the first heartbeat goes
  at epoch 0, the last at -1 (-2 for a static member, which keeps its place for its session);
- a heartbeat is full (instance id, rack, rebalance timeout, subscription, assignor, owned
  partitions) when joining and after any error, otherwise it carries only what changed since the
  last one the broker answered;
- a new target is reconciled in order: the partitions that leave are revoked first (the consumer
  commits them when it auto-commits, then calls ``on_partitions_revoked``), then the new ones are
  assigned (``on_partitions_assigned``), and the next heartbeat, sent at once, reports the owned
  partitions: the broker hands a partition to another member only after that acknowledgement;
- FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the partitions are lost (given up without a commit)
  and the member joins again at epoch 0;
- subscriptions are topic names, or a regular expression the broker evaluates (RE2/J syntax);
- OffsetCommit (v9) and OffsetFetch (v9) carry the member id and epoch.

``ConsumerProtocolMembership`` offers what the consumer uses of the classic ``GroupMembership``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

from odradek.client._membership import CommitFailed
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from odradek.protocol.messages.offset_commit import OffsetCommitRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest
from odradek.transport import GROUP, AsyncBrokerConnection, AsyncCluster

__all__ = ["LEAVE_EPOCH", "LEAVE_STATIC_EPOCH", "ConsumerProtocolMembership"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2

_COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
_FENCED = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}


class ConsumerProtocolMembership:
    """A member of a KIP-848 consumer group (``group.protocol=consumer``): heartbeats with
    ConsumerGroupHeartbeat and reconciles its partitions with the broker's target assignment (see the
    module docstring)."""

    #: what the consumer asks of a membership: the broker assigns, no member leads, and the member
    #: keeps consuming what it owns while its assignment changes (as a cooperative member does)
    cooperative = True
    leader = False
    server_side = True

    def __init__(
        self,
        cluster: AsyncCluster,
        *,
        group_id: str,
        group_instance_id: str | None,
        rebalance_timeout_ms: int,
        remote_assignor: str | None,
        rack_id: str | None,
        retry_backoff_ms: int,
        on_assign: Callable[[list[TopicPartition], list[TopicPartition]], Awaitable[None]],
    ) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.remote_assignor = remote_assignor
        self.rack_id = rack_id
        self.retry_backoff = retry_backoff_ms / 1000
        self.on_assign = on_assign
        self.protocol = "consumer"
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.heartbeat_interval = 3.0  # until the broker says
        self.assigned: list[TopicPartition] = []
        self.subscription: set[str] = set()
        self.regex: str | None = None
        self.needs_rejoin = True
        self.joining = False
        self.fatal: KafkaError | None = None
        self.coordinator: AsyncBrokerConnection | None = None
        #: what the broker acknowledged of our last heartbeat (None: send it again)
        self._full = True
        self._sent_names: list[str] | None = None
        self._sent_regex: str | None = None
        self._sent_owned: list[TopicPartition] | None = None
        self._target: dict[str, list[int]] | None = None  # by topic id (str), not reconciled yet
        self._resolved: dict[str, str] = {}  # topic id -> name
        self._ids: dict[str, uuid.UUID] = {}  # name -> topic id, of the topics assigned
        self._reconcile: asyncio.Task[None] | None = None
        self._hb_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._leaving = False
        self._closing = False  # stop_reconciling(): the assignment stays as it is until leave()
        self._fences = 0  # bumped when the member loses its partitions: a reconciliation stops
        #: heartbeat answers so far (0: the broker may not know the member: leave() sends nothing)
        self.heartbeats = 0
        #: when the consumer's poll() was last called; ``stale``: the member left for not polling
        self.last_poll = time.monotonic()
        self.stale = False

    @property
    def generation(self) -> int:
        """The member epoch while the member is in the group, else -1 (commits need it)."""
        return self.member_epoch if self.member_epoch > 0 else -1

    # -- coordinator ---------------------------------------------------------------------------
    async def coordinator_connection(self, deadline: float) -> AsyncBrokerConnection:
        """The connection to the group's coordinator, found again (FindCoordinator) when it is closed."""
        if self.coordinator is not None and not self.coordinator.closed:
            return self.coordinator
        self.coordinator = await self.cluster.coordinator(self.group_id, GROUP, deadline=deadline)
        return self.coordinator

    def _coordinator_lost(self) -> None:
        self.coordinator = None

    # -- joining -------------------------------------------------------------------------------
    async def ensure_active(self, partition_counts: Callable[[set[str]], Awaitable[Mapping[str, int]]], deadline: float) -> bool:
        """Start heartbeating (or send the changed subscription at once); the assignment arrives
        through the heartbeats' answers."""
        del partition_counts, deadline  # the broker assigns
        if self.fatal is not None:
            raise self.fatal
        self.needs_rejoin = False
        self._leaving = False
        if self._hb_task is None or self._hb_task.done():
            self._hb_task = asyncio.get_running_loop().create_task(self._heartbeats())
        self._wake.set()
        return False

    def _names(self) -> list[str] | None:
        return None if self.regex is not None else sorted(self.subscription)

    def _request(self, v: int) -> ConsumerGroupHeartbeatRequest:
        full = self._full or self.member_epoch == 0
        names, owned = self._names(), sorted(self.assigned)
        # the ids of the assigned topics as the assignment named them (the metadata may be
        # incomplete or newer), else from the metadata
        ids = {t: info.topic_id for t, info in self.cluster.topics.items()}
        ids.update(self._ids)
        topic_partitions = None
        if full or owned != self._sent_owned:
            by_topic: dict[str, list[int]] = {}
            for t, p in owned:
                by_topic.setdefault(t, []).append(p)
            topic_partitions = [
                ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=ids[t], partitions=ps)
                for t, ps in sorted(by_topic.items()) if t in ids
            ]
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=self.group_instance_id if full else None,
            rack_id=self.rack_id if full else None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=names if full or names != self._sent_names else None,
            subscribed_topic_regex=self.regex if self.regex is not None and (full or self.regex != self._sent_regex) else None,
            server_assignor=self.remote_assignor if full else None,
            topic_partitions=topic_partitions,
        )

    def polled(self) -> None:
        """The consumer's poll() was called: the poll timer starts again, and a member that left
        for missing it (``max.poll.interval.ms``) joins again."""
        self.last_poll = time.monotonic()
        if self.stale:
            self.stale = False
            self._full = True
            self._wake.set()

    async def _heartbeats(self) -> None:
        while not self._leaving and self.fatal is None:
            self._wake.clear()
            if not self.stale and self.member_epoch > 0 and time.monotonic() - self.last_poll > self.rebalance_timeout_ms / 1000:
                # as Kafka's consumer: poll() not called within max.poll.interval.ms, the member
                # leaves (epoch -1, static members too) and its partitions are lost; the next
                # poll() joins again
                log.warning("member %s of group %s: no poll() for max.poll.interval.ms (%d ms): it leaves the group",
                            self.member_id, self.group_id, self.rebalance_timeout_ms)
                self.stale = True
                await self._send_leave(LEAVE_EPOCH)
                await self._lose()
                continue
            if self.stale:
                await self._wake.wait()
                continue
            wait = await self._heartbeat_once()
            if self._leaving:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)

    async def _heartbeat_once(self) -> float:
        """One heartbeat and its answer; returns how long to wait before the next one."""
        names, regex, owned, epoch, fences = self._names(), self.regex, sorted(self.assigned), self.member_epoch, self._fences
        try:
            conn = await self.coordinator_connection(time.monotonic() + self.heartbeat_interval + 5)
            v = conn.version_for(ConsumerGroupHeartbeatRequest)
            req = self._request(v)
            resp: ConsumerGroupHeartbeatResponse = await conn.request(req, v)
        except (ConnectionError, TimeoutError, KafkaError) as exc:
            log.debug("heartbeat failed: %s", exc)
            self._coordinator_lost()
            self._full = True
            return self.retry_backoff
        self.heartbeats += 1
        err = ErrorCode.of(resp.error_code)
        if err is ErrorCode.NONE:
            if self._leaving or fences != self._fences:
                return self.heartbeat_interval
            self._full = False
            self._sent_names, self._sent_regex, self._sent_owned = names, regex, owned
            if resp.member_id:
                self.member_id = resp.member_id
            if resp.member_epoch != epoch:
                log.debug("member %s of %s: epoch %d -> %d", self.member_id, self.group_id, epoch, resp.member_epoch)
            self.member_epoch = resp.member_epoch
            if resp.heartbeat_interval_ms > 0:
                self.heartbeat_interval = resp.heartbeat_interval_ms / 1000
            if resp.assignment is not None:
                self._target = {str(tp.topic_id): sorted(tp.partitions) for tp in resp.assignment.topic_partitions}
                self._start_reconcile()
            return self.heartbeat_interval
        self._full = True
        message = resp.error_message or err.name
        if err in _FENCED:
            log.info("member %s of group %s: %s; its partitions are lost, it joins again", self.member_id, self.group_id, message)
            await self._lose()
            return 0.0
        if err in _COORDINATOR_ERRORS:
            self._coordinator_lost()
            return self.retry_backoff
        if err.retriable:
            return self.retry_backoff
        # FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION,
        # GROUP_MAX_SIZE_REACHED, authorization, INVALID_REQUEST...: fatal, as in Kafka's consumer
        self.fatal = KafkaError(err, f"group {self.group_id}: {message}")
        self.needs_rejoin = True  # the consumer's next poll() raises it (ensure_active)
        log.error("member %s of group %s stops heartbeating: %s", self.member_id, self.group_id, message)
        return self.retry_backoff

    async def _lose(self) -> None:
        """Fenced: the partitions are given up without a commit; join again at epoch 0."""
        self._fences += 1
        self.member_epoch = 0
        self._target = None
        if self._reconcile is not None and not self._reconcile.done():
            self._reconcile.cancel()
        lost, self.assigned = list(self.assigned), []
        if lost:
            await self.on_assign([], lost)

    # -- reconciliation ------------------------------------------------------------------------
    async def stop_reconciling(self) -> None:
        """The consumer is closing: from here on no partition is taken or given up by a new target
        (the consumer gives what it owns up through the listener, then leaves).  Heartbeats go on,
        so that the closing commit carries the current member epoch.  Without this, a target that
        came while the closing commit was under way handed partitions to the listener after the
        consumer had listed what to revoke: they were never revoked, and the member left holding
        them as far as its listener knew."""
        self._closing = True
        task, self._reconcile = self._reconcile, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=self.heartbeat_interval + 1)

    def _start_reconcile(self) -> None:
        if self._closing:
            return
        if self._reconcile is None or self._reconcile.done():
            self._reconcile = asyncio.get_running_loop().create_task(self._reconcile_loop())

    async def _names_of(self, target: Mapping[str, list[int]]) -> dict[str, list[int]]:
        unknown = [tid for tid in target if tid not in self._resolved]
        if unknown:
            with contextlib.suppress(KafkaError, ConnectionError, TimeoutError):
                await self.cluster.refresh(all_topics=True)
            for topic, info in self.cluster.topics.items():
                self._resolved[str(info.topic_id)] = topic
        out = {}
        for tid, parts in target.items():
            name = self._resolved.get(tid)
            if name is None:
                log.warning("group %s assigned partitions of topic id %s, unknown in the metadata", self.group_id, tid)
                continue
            out[name] = parts
            self._ids[name] = uuid.UUID(tid)
        return out

    async def _reconcile_loop(self) -> None:
        while self._target is not None and not self._leaving and not self._closing:
            target, self._target, fences = self._target, None, self._fences
            wanted = {(t, p) for t, ps in (await self._names_of(target)).items() for p in ps}
            if fences != self._fences:
                continue
            owned = set(self.assigned)
            revoked, added = sorted(owned - wanted), sorted(wanted - owned)
            if revoked or added:
                log.debug("member %s of %s at epoch %d: revoking %s, then assigning %s", self.member_id, self.group_id,
                          self.member_epoch, revoked, added)
            if revoked:
                # revoke first (the consumer commits them when it auto-commits): the broker gives
                # them to others only after the heartbeat that no longer reports them
                await self.on_assign([], revoked)
                if fences != self._fences:
                    continue
                self.assigned = sorted(set(self.assigned) - set(revoked))
            if added:
                self.assigned = sorted(set(self.assigned) | set(added))
                await self.on_assign(added, [])
            if revoked or added:
                self._wake.set()  # acknowledge at once

    # -- offsets -------------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, tuple[int, int, str]], deadline: float) -> None:
        """OffsetCommit v9 with the member id and epoch; STALE_MEMBER_EPOCH (the epoch moved
        meanwhile) retries with the new one."""
        while True:
            conn = await self.coordinator_connection(deadline)
            v = conn.version_for(OffsetCommitRequest)
            by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
            for (t, p), (off, epoch, meta) in offsets.items():
                by_topic.setdefault(t, []).append(
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=off, committed_leader_epoch=epoch, committed_metadata=meta,
                    )
                )
            req = OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation,
                member_id=self.member_id if self.member_epoch > 0 else "",
                group_instance_id=self.group_instance_id,
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
            log.debug("member %s epoch %d committed %s: %s", self.member_id, req.generation_id_or_member_epoch,
                      sorted(offsets.items()), sorted(e.name for e in errors) or "ok")
            if not errors:
                return
            if errors & _COORDINATOR_ERRORS:
                self._coordinator_lost()
            elif ErrorCode.STALE_MEMBER_EPOCH in errors and self.member_epoch > 0:
                pass  # retried with the epoch the heartbeats bring
            elif errors & (_FENCED | {ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.ILLEGAL_GENERATION}):
                err = next(iter(errors))
                raise CommitFailed(err, "the commit failed: this member is no longer in the group at that epoch")
            elif not all(e.retriable for e in errors):
                raise KafkaError(next(iter(errors)), "offset commit failed")
            if time.monotonic() > deadline:
                raise KafkaError(next(iter(errors)), "offset commit timed out")
            await asyncio.sleep(self.retry_backoff)

    async def fetch_committed(self, partitions: Sequence[TopicPartition], deadline: float) -> dict[TopicPartition, tuple[int, int, str]]:
        """OffsetFetch v9 with the member id and epoch (anonymously before joining)."""
        while True:
            conn = await self.coordinator_connection(deadline)
            v = conn.version_for(OffsetFetchRequest)
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            member = self.member_epoch > 0
            if v >= 8:
                req = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=self.group_id,
                    member_id=self.member_id if member and v >= 9 else None,
                    member_epoch=self.member_epoch if member and v >= 9 else -1,
                    topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                )], require_stable=False)
            else:
                req = OffsetFetchRequest(
                    group_id=self.group_id,
                    topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                )
            try:
                resp = await conn.request(req, v)
            except (ConnectionError, TimeoutError):
                self._coordinator_lost()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)
                continue
            if v >= 8:
                (group,) = resp.groups
                err, topics = ErrorCode.of(group.error_code), group.topics
            else:
                err, topics = ErrorCode.of(resp.error_code), resp.topics
            if err is ErrorCode.NONE:
                out = {}
                for t in topics:
                    for p in t.partitions:
                        if p.error_code == 0 and p.committed_offset >= 0:
                            out[(t.name, p.partition_index)] = (p.committed_offset, p.committed_leader_epoch, p.metadata or "")
                log.debug("member %s committed offsets of %s: %s", self.member_id, sorted(partitions), sorted(out.items()))
                return out
            if err in _COORDINATOR_ERRORS:
                self._coordinator_lost()
            elif err in (ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                pass  # the heartbeats bring the epoch (or rejoin): ask again
            elif not err.retriable:
                raise KafkaError(err, "fetching committed offsets")
            if time.monotonic() > deadline:
                raise KafkaError(err, "fetching committed offsets timed out")
            await asyncio.sleep(self.retry_backoff)

    # -- leaving -------------------------------------------------------------------------------
    async def leave(self) -> None:
        """Stop heartbeating and leave: epoch -1, or -2 for a static member (its partitions stay
        its own for the session timeout, for the instance that comes back)."""
        self._leaving = True
        self._wake.set()
        for task in (self._hb_task, self._reconcile):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=self.heartbeat_interval + 1)
        self._hb_task = self._reconcile = None
        if not self.stale and (self.member_epoch > 0 or (self.member_epoch == 0 and self.heartbeats)):
            await self._send_leave(LEAVE_STATIC_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH)
        self.stale = False
        self.member_epoch = 0
        self.heartbeats = 0  # (a second leave() sends nothing)
        self._full = True
        self.assigned = []

    async def _send_leave(self, epoch: int) -> None:
        try:
            conn = await self.coordinator_connection(time.monotonic() + 5)
            v = conn.version_for(ConsumerGroupHeartbeatRequest)
            req = ConsumerGroupHeartbeatRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=epoch, instance_id=self.group_instance_id,
            )
            await conn.request(req, v, timeout=5)
        except (ConnectionError, TimeoutError, KafkaError) as exc:
            log.debug("leave failed: %s", exc)
