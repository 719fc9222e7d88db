"""Client side of a share group's membership (KIP-932): ShareGroupHeartbeat v1 to the group coordinator.

The broker assigns, and a share group's partitions are shared, so there is nothing to revoke or
acknowledge: the member heartbeats and takes the assignment the answers carry.

- the member id is the client's (a UUID string), the member epoch the broker's: the first
  heartbeat goes at epoch 0 with the subscribed topic names (and the rack), later ones carry the
  names only when they changed, the last one goes at epoch -1 (leave);
- heartbeats every ``HeartbeatIntervalMs`` the broker answers with;
- an answer's ``Assignment`` (by topic id) replaces the member's partitions;
- FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the assignment is dropped and the member joins again
  at epoch 0; coordinator errors find the coordinator again; other non-retriable errors
  (authorization, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_VERSION...) are kept in ``fatal`` for the
  consumer's next poll to raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from odradek.transport import GROUP, AsyncBrokerConnection, AsyncCluster

__all__ = ["LEAVE_EPOCH", "ShareMembership"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

LEAVE_EPOCH = -1
_COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
_FENCED = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}


class ShareMembership:
    """A member of a share group: heartbeats in a task on the event loop, ``assigned`` follows the
    broker's answers and ``on_assignment(partitions)`` is called when it changes."""

    def __init__(
        self,
        cluster: AsyncCluster,
        *,
        group_id: str,
        rack_id: str | None,
        retry_backoff_ms: int,
        on_assignment: Callable[[set[TopicPartition]], None],
    ) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.rack_id = rack_id
        self.retry_backoff = retry_backoff_ms / 1000
        self.on_assignment = on_assignment
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        #: Kafka's group.share.heartbeat.interval.ms default, until the broker says
        self.heartbeat_interval = 5.0
        self.subscription: list[str] = []
        self.assigned: set[TopicPartition] = set()
        self.fatal: KafkaError | None = None
        self.coordinator: AsyncBrokerConnection | None = None
        self._sent_names: list[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._leaving = False
        #: heartbeat answers so far since joining (0: leave() sends nothing)
        self.heartbeats = 0

    @property
    def active(self) -> bool:
        """Whether the member heartbeats."""
        return self._task is not None and not self._task.done()

    def subscribe(self, topics: list[str]) -> None:
        """Heartbeat for ``topics`` (the change goes out at once when heartbeating)."""
        self.subscription = sorted(set(topics))
        self._wake.set()

    def start(self) -> None:
        """Start heartbeating (join at epoch 0) unless it already does; raises the fatal error of an
        earlier heartbeat."""
        if self.fatal is not None:
            raise self.fatal
        self._leaving = False
        if not self.active:
            self._task = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        while not self._leaving and self.fatal is None:
            self._wake.clear()
            wait = await self._heartbeat_once()
            if self._leaving:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)

    async def _connection(self, deadline: float) -> AsyncBrokerConnection:
        if self.coordinator is not None and not self.coordinator.closed:
            return self.coordinator
        self.coordinator = await self.cluster.coordinator(self.group_id, GROUP, deadline=deadline)
        return self.coordinator

    def request(self) -> ShareGroupHeartbeatRequest:
        """The next heartbeat: full when joining, else the topic names only when they changed."""
        joining = self.member_epoch == 0
        names = self.subscription
        return ShareGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            rack_id=self.rack_id if joining else None,
            subscribed_topic_names=list(names) if joining or names != self._sent_names else None,
        )

    async def _heartbeat_once(self) -> float:
        """One heartbeat and its answer; how long to wait before the next one."""
        req = self.request()
        try:
            conn = await self._connection(time.monotonic() + self.heartbeat_interval + 5)
            v = conn.version_for(ShareGroupHeartbeatRequest, maximum=1)
            resp: ShareGroupHeartbeatResponse = await conn.request(req, v)
        except KafkaError as exc:
            if exc.code is ErrorCode.UNSUPPORTED_VERSION or not exc.code.retriable:
                self.fatal = exc
                log.error("share group %s: %s", self.group_id, exc)
            self.coordinator = None
            return self.retry_backoff
        except (ConnectionError, TimeoutError) as exc:
            log.debug("share heartbeat failed: %s", exc)
            self.coordinator = None
            return self.retry_backoff
        if self._leaving:
            return 0.0
        err = ErrorCode.of(resp.error_code)
        if err is ErrorCode.NONE:
            self.heartbeats += 1
            if req.subscribed_topic_names is not None:
                self._sent_names = list(req.subscribed_topic_names)
            if resp.member_id:
                self.member_id = resp.member_id
            if resp.member_epoch != self.member_epoch:
                log.debug("share member %s of %s: epoch %d -> %d", self.member_id, self.group_id, self.member_epoch,
                          resp.member_epoch)
            self.member_epoch = resp.member_epoch
            if resp.heartbeat_interval_ms > 0:
                self.heartbeat_interval = resp.heartbeat_interval_ms / 1000
            if resp.assignment is not None:
                await self._assign({str(tp.topic_id): list(tp.partitions) for tp in resp.assignment.topic_partitions})
            return self.heartbeat_interval
        message = resp.error_message or err.name
        if err in _FENCED:
            log.info("share member %s of group %s: %s; it joins again", self.member_id, self.group_id, message)
            self._reset()
            return 0.0
        if err in _COORDINATOR_ERRORS:
            self.coordinator = None
            return self.retry_backoff
        if err.retriable:
            return self.retry_backoff
        self.fatal = KafkaError(err, f"share group {self.group_id}: {message}")
        log.error("share member %s of group %s stops heartbeating: %s", self.member_id, self.group_id, message)
        return self.retry_backoff

    def _reset(self) -> None:
        self.member_epoch = 0
        self._sent_names = None
        self.heartbeats = 0
        if self.assigned:
            self.assigned = set()
            self.on_assignment(set())

    async def _assign(self, by_id: dict[str, list[int]]) -> None:
        names = {str(info.topic_id): t for t, info in self.cluster.topics.items()}
        if any(tid not in names for tid in by_id):
            with contextlib.suppress(KafkaError, ConnectionError, TimeoutError):
                await self.cluster.refresh(self.subscription)
            names = {str(info.topic_id): t for t, info in self.cluster.topics.items()}
        assigned: set[TopicPartition] = set()
        for tid, parts in by_id.items():
            name = names.get(tid)
            if name is None:
                log.warning("share group %s assigned partitions of topic id %s, unknown in the metadata", self.group_id, tid)
                continue
            assigned.update((name, p) for p in parts)
        if assigned != self.assigned:
            log.debug("share member %s of %s: assigned %s", self.member_id, self.group_id, sorted(assigned))
            self.assigned = assigned
            self.on_assignment(set(assigned))

    async def leave(self) -> None:
        """Stop heartbeating and leave the group (epoch -1); the assignment is dropped."""
        self._leaving = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=5)
        if self.heartbeats and self.member_epoch > 0:
            try:
                conn = await self._connection(time.monotonic() + 5)
                v = conn.version_for(ShareGroupHeartbeatRequest, maximum=1)
                await conn.request(ShareGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                                              member_epoch=LEAVE_EPOCH), v, timeout=5)
            except (ConnectionError, TimeoutError, KafkaError) as exc:
                log.debug("share group leave failed: %s", exc)
        self.member_epoch = 0
        self.heartbeats = 0
        self._sent_names = None
        if self.assigned:
            self.assigned = set()
            self.on_assignment(set())
