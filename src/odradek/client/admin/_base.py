"""What every admin operation shares: configuration, connections, deadlines, retries and routing."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, Self, TypeVar

from odradek._timeouts import wait_for
from odradek.client._config import ADMIN_DEFAULTS, merge_config
from odradek.client._security import ClientSecurity
from odradek.client.admin.types import (
    AdminError,
    ClusterDescription,
    GroupDescription,
    MemberDescription,
    Node,
    TopicPartition,
)
from odradek.client.errors import worse_error
from odradek.cluster.assignment import decode_assignment
from odradek.config import TYPE_CODES, ConfigSource
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.consumer_group_describe import ConsumerGroupDescribeResponse
from odradek.protocol.messages.describe_groups import DescribeGroupsResponse
from odradek.protocol.messages.metadata import MetadataResponse
from odradek.transport import AsyncBrokerConnection, AsyncCluster

log = logging.getLogger("odradek.client.admin")

K = TypeVar("K")
T = TypeVar("T")

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
_OFFSET_SPECS = {"earliest": EARLIEST, "latest": LATEST, "max_timestamp": MAX_TIMESTAMP}
_TYPE_NAMES = {code: name for name, code in TYPE_CODES.items()}
# retriable in Kafka's table, but final for an admin operation that has just fetched metadata
_FINAL_FOR_ADMIN = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})
# errors after which the metadata (controller, leaders) must be fetched again
_REFRESH = frozenset(
    {
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)
# the classic group states (and KIP-848's), by lower-case name without separators
_GROUP_STATES = {
    s.lower(): s
    for s in ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
}
# what the coordinator's group errors mean for an admin operation
_GROUP_MESSAGES = {
    ErrorCode.NON_EMPTY_GROUP: "the group has active members",
    ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "the group's members are subscribed to the topic",
    ErrorCode.UNKNOWN_MEMBER_ID: "the group has active members (only an Empty group's offsets can be altered)",
    ErrorCode.ILLEGAL_GENERATION: "the group has active members (only an Empty group's offsets can be altered)",
    ErrorCode.REBALANCE_IN_PROGRESS: "the group is rebalancing (only an Empty group's offsets can be altered)",
    ErrorCode.INVALID_GROUP_ID: "invalid group id",
}


# ---------------------------------------------------------------------------------------------
# what goes in and what comes out




def _error(code: int, what: str, server_message: str | None = None) -> KafkaError:
    err = ErrorCode.of(int(code))
    return KafkaError(err, f"{what}: {server_message}" if server_message else what)


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, KafkaError):
        return exc.code.retriable and exc.code not in _FINAL_FOR_ADMIN
    return isinstance(exc, (ConnectionError, TimeoutError, OSError))


def _check(errors: dict[Any, KafkaError], results: dict[Any, Any]) -> None:
    if errors:
        raise AdminError(errors, results)


# ---------------------------------------------------------------------------------------------
# retries


class _Deadline:
    def __init__(self, timeout: float, backoff_ms: int, backoff_max_ms: int) -> None:
        self.timeout = timeout
        self.end = time.monotonic() + timeout
        self.backoff_s = max(backoff_ms, 1) / 1000
        self.backoff_max_s = max(backoff_max_ms, backoff_ms, 1) / 1000

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def remaining_ms(self) -> int:
        return max(int(self.remaining() * 1000), 1)

    async def backoff(self) -> None:
        await asyncio.sleep(max(0.0, min(self.backoff_s, self.remaining())))
        self.backoff_s = min(self.backoff_s * 2, self.backoff_max_s)


class _Pending(Generic[K, T]):
    """The state of an operation on several items: done results, final errors, what is left."""

    def __init__(self, items: Mapping[K, Any], what: Callable[[K], str]) -> None:
        self.todo: dict[K, Any] = dict(items)
        self.results: dict[K, T] = {}
        self.errors: dict[K, KafkaError] = {}
        self.last: dict[K, BaseException] = {}
        self.what = what
        self.refresh = False

    def done(self, key: K, result: T) -> None:
        self.todo.pop(key, None)
        self.last.pop(key, None)
        self.results[key] = result

    def fail(self, key: K, code: int, server_message: str | None = None) -> None:
        """Record an error code for ``key``: final unless retriable (then it is retried)."""
        exc = _error(code, self.what(key), server_message)
        self.failed(key, exc)

    def failed(self, key: K, exc: BaseException) -> None:
        if _retriable(exc):
            self.last[key] = worse_error(self.last.get(key), exc)
            if isinstance(exc, KafkaError) and exc.code in _REFRESH:
                self.refresh = True
            if not isinstance(exc, KafkaError):
                self.refresh = True
            return
        self.todo.pop(key, None)
        self.last.pop(key, None)
        self.errors[key] = exc if isinstance(exc, KafkaError) else KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))

    def unanswered(self, asked: Iterable[K], seen: set[K]) -> None:
        """Items a response left out: a broker bug, final."""
        for key in asked:
            if key in self.todo and key not in seen:
                self.fail(key, ErrorCode.UNKNOWN_SERVER_ERROR, "no result in the response")

    def give_up(self, timeout: float) -> None:
        for key in list(self.todo):
            last = self.last.get(key)
            if isinstance(last, KafkaError):
                exc = KafkaError(last.code, f"{last.message or self.what(key)} (still failing after {timeout:g} s)")
            else:
                why = f": {str(last) or type(last).__name__}" if last is not None else ""
                exc = KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{self.what(key)}: timed out after {timeout:g} s{why}")
            self.errors[key] = exc
        self.todo.clear()


# ---------------------------------------------------------------------------------------------
# the asyncio client



class AdminBase:
    """Configuration, connections, deadlines and the routing every admin operation shares."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = merge_config(ADMIN_DEFAULTS, config, kwargs)
        c = self.config
        self._cluster = AsyncCluster(
            c["bootstrap.servers"],
            client_id=c["client.id"],
            request_timeout_ms=int(c["request.timeout.ms"]),
            metadata_max_age_ms=int(c["metadata.max.age.ms"]),
            retry_backoff_ms=int(c["retry.backoff.ms"]),
            socket_connection_setup_timeout_ms=int(c["socket.connection.setup.timeout.ms"]),
            allow_auto_create_topics=False,
            security=ClientSecurity.from_config(c),
        )
        self._default_timeout = int(c["default.api.timeout.ms"]) / 1000
        self._request_timeout = int(c["request.timeout.ms"]) / 1000
        self._backoff_ms = int(c["retry.backoff.ms"])
        self._backoff_max_ms = int(c["retry.backoff.max.ms"])
        self._controller_stale = True
        self._closed = False

    async def start(self) -> None:
        """Nothing to do: connections open on first use (kept for symmetry with the other clients)."""

    async def close(self) -> None:
        """Close the connections to every broker; the client is not usable afterwards."""
        self._closed = True
        await self._cluster.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ------------------------------------------------------------------------------
    def _deadline(self, timeout: float | None) -> _Deadline:
        if self._closed:
            raise RuntimeError("the admin client is closed")
        return _Deadline(self._default_timeout if timeout is None else timeout, self._backoff_ms, self._backoff_max_ms)

    async def _bounded(self, aw: Awaitable[T], dl: _Deadline) -> T:
        """Await ``aw`` (connecting, a request) for at most the operation's remaining time."""
        return await wait_for(aw, max(dl.remaining(), 0.001))

    async def _request(self, conn: AsyncBrokerConnection, message: Any, version: int, dl: _Deadline) -> Any:
        return await conn.request(message, version, timeout=self._request_time(dl))

    def _request_time(self, dl: _Deadline) -> float:
        """How long one request may take: the request timeout, within the operation's time."""
        return max(min(self._request_timeout, dl.remaining()), 0.001)

    async def _metadata(self, topics: Iterable[str] | None, dl: _Deadline) -> MetadataResponse:
        """Fresh metadata for ``topics`` (None: every topic); updates the cluster's broker list.

        Admin asks Metadata directly instead of going through the cluster's cache of wanted
        topics: it never auto-creates and never keeps topics it was asked about."""
        names = None if topics is None else sorted(set(topics))
        metadata = self._cluster.metadata(names, allow_auto_create=False, timeout=self._request_time(dl))
        resp = await self._bounded(metadata, dl)
        self._controller_stale = False
        return resp

    async def _controller(self, dl: _Deadline) -> AsyncBrokerConnection:
        cluster = self._cluster
        if self._controller_stale or cluster.controller_id < 0:
            await self._metadata([], dl)
        cid = cluster.controller_id
        if cid >= 0 and cid in cluster.brokers:
            return await self._bounded(cluster.connection(cid), dl)
        return await self._bounded(cluster.any_connection(), dl)

    async def _node(self, node_id: int | None, dl: _Deadline) -> AsyncBrokerConnection:
        if node_id is None:
            return await self._bounded(self._cluster.any_connection(), dl)
        return await self._bounded(self._cluster.connection(node_id), dl)

    async def _drive(self, state: _Pending[K, T], dl: _Deadline, attempt: Callable[[], Awaitable[None]]) -> None:
        """Run ``attempt`` until every item has a result or a final error, or time is up."""
        while state.todo:
            try:
                await attempt()
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                for key in list(state.todo):
                    state.failed(key, exc)
            if not state.todo:
                return
            if state.refresh:
                self._controller_stale = True
                state.refresh = False
            if dl.expired():
                state.give_up(dl.timeout)
                return
            log.debug("admin: retrying %d item(s): %s", len(state.todo), list(state.last.values())[:1])
            await dl.backoff()

    async def _leaders(
        self, state: _Pending[TopicPartition, T], dl: _Deadline
    ) -> dict[int | None, list[TopicPartition]]:
        """Group the pending partitions by leader; record errors of the ones that have none."""
        md = await self._metadata({t for t, _ in state.todo}, dl)
        topics = {t.name: t for t in md.topics}
        by_leader: dict[int | None, list[TopicPartition]] = {}
        for tp in list(state.todo):
            t = topics.get(tp[0])
            if t is None or t.error_code:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if t is None else t.error_code
                state.fail(tp, code, f"topic '{tp[0]}' does not exist" if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None)
                continue
            part = next((p for p in t.partitions if p.partition_index == tp[1]), None)
            if part is None:
                state.fail(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{tp[0]}' has no partition {tp[1]}")
            elif part.leader_id < 0:
                state.fail(tp, ErrorCode.LEADER_NOT_AVAILABLE, "no leader")
            else:
                by_leader.setdefault(part.leader_id, []).append(tp)
        return by_leader

    async def _per_node(
        self,
        state: _Pending[K, T],
        groups: Mapping[int | None, list[K]],
        send: Callable[[AsyncBrokerConnection, list[K]], Awaitable[None]],
        dl: _Deadline,
    ) -> None:
        """Send one request per broker, concurrently; a broker that fails fails its items only."""

        async def one(node: int | None, keys: list[K]) -> None:
            try:
                conn = await self._node(node, dl)
                await send(conn, keys)
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                for key in keys:
                    if key in state.todo:
                        state.failed(key, exc)

        await asyncio.gather(*(one(node, keys) for node, keys in groups.items()))

    # -- cluster -------------------------------------------------------------------------------


def _settle_partitions(state: _Pending[TopicPartition, None], batch: list[TopicPartition], topics: Any) -> None:
    """Per-partition results of an offsets request (``topics[].partitions[].error_code``)."""
    state.unanswered(batch, {(t.name, p.partition_index) for t in topics for p in t.partitions})
    for t in topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if tp not in state.todo:
                continue
            if p.error_code:
                state.fail(tp, p.error_code, _partition_message(p.error_code, tp))
            else:
                state.done(tp, None)


def _rest(dl: _Deadline) -> float:
    """The time left of an operation, for the operations it is made of."""
    return max(dl.remaining(), 0.001)


def _partition_message(code: int, tp: TopicPartition) -> str | None:
    err = ErrorCode.of(code)
    if err == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"topic '{tp[0]}' has no partition {tp[1]}"
    if err == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC:
        return f"the group's members are subscribed to '{tp[0]}'"
    return _GROUP_MESSAGES.get(err)


def _group_description(g: DescribeGroupsResponse.DescribedGroup, coordinator: Node | None) -> GroupDescription:
    members = []
    for m in g.members:
        assignment: list[TopicPartition] = []
        if g.protocol_type == "consumer" and m.member_assignment:
            decoded = decode_assignment(m.member_assignment)
            if decoded is not None:
                assignment = sorted((tp.topic, p) for tp in decoded.assigned_partitions for p in tp.partitions)
        members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment))
    return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members, coordinator)


def _consumer_group_description(
    g: ConsumerGroupDescribeResponse.DescribedGroup, coordinator: Node | None
) -> GroupDescription:
    """A KIP-848 consumer group (ConsumerGroupDescribe): its members' epochs, their partitions and
    their target partitions."""

    def parts(a: ConsumerGroupDescribeResponse.Assignment) -> list[TopicPartition]:
        return sorted((tp.topic_name, p) for tp in a.topic_partitions for p in tp.partitions)

    members = [
        MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host, parts(m.assignment),
                          m.member_epoch, parts(m.target_assignment))
        for m in g.members
    ]
    return GroupDescription(g.group_id, g.group_state, "consumer", g.assignor_name, members, coordinator,
                            "consumer", g.group_epoch, g.assignment_epoch)


def _cluster(cluster_id: str | None, controller_id: int, brokers: list[Node]) -> ClusterDescription:
    controller = next((b for b in brokers if b.id == controller_id), None)
    return ClusterDescription(cluster_id, controller, brokers)


def _topic_id(value: Any) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID) and value.int != 0:
        return value
    return None


def _source(code: int) -> ConfigSource:
    try:
        return ConfigSource(code)
    except ValueError:
        return ConfigSource.UNKNOWN


# ---------------------------------------------------------------------------------------------
# the blocking client


