"""Admin and AsyncAdmin: topics, partitions, configs, offsets, records and the cluster.

``AsyncAdmin`` does the work on the caller's event loop; ``Admin`` runs one on an event loop in a
background thread and offers the same operations as blocking calls.  Both are configured like the
other clients (Kafka's names as a dict, or keyword arguments with underscores)::

    with Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        admin.create_topics([NewTopic("orders", num_partitions=3, configs={"retention.ms": 86400000})])
        admin.describe_topics(["orders"])["orders"].partitions[0].leader

Every operation takes ``timeout`` in seconds (default ``default.api.timeout.ms``); within it,
retriable errors (connection failures, NOT_CONTROLLER, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
...) are retried with backoff (``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``) after
fresh metadata.  As in Kafka's Java admin client, UNKNOWN_TOPIC_OR_PARTITION is final for admin
operations: the topic is absent from the metadata the operation just fetched.  Failures raise
:class:`~odradek.errors.KafkaError` with Kafka's code; an operation on several items that fails
for some raises :class:`AdminError` (a ``KafkaError`` with the code of the first failure) holding
every item's error and the results of the items that succeeded.

Routing follows Kafka: topic creation, deletion and partition changes go to the controller; a
broker's configs go to that broker, topic configs to any broker; offsets and record deletion to
each partition's leader.  Consumer-group operations go to each group's coordinator, found with
FindCoordinator and found again after COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or
NOT_COORDINATOR; listing groups asks every broker and merges the answers.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from odradek.client._aio import AsyncBrokerConnection, AsyncCluster
from odradek.client._config import ADMIN_DEFAULTS, merge_config
from odradek.client.errors import worse_error
from odradek.cluster.assignment import decode_assignment
from odradek.config import TYPE_CODES, ConfigSource
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from odradek.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from odradek.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from odradek.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from odradek.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from odradek.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from odradek.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from odradek.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from odradek.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from odradek.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from odradek.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse
from odradek.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from odradek.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse

__all__ = [
    "Admin",
    "AdminError",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AsyncAdmin",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "CreateTopicResult",
    "GroupDescription",
    "GroupListing",
    "ListOffsetsResultInfo",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "PartitionDescription",
    "PartitionLag",
    "TopicDescription",
    "TopicListing",
]

log = logging.getLogger(__name__)

K = TypeVar("K")
T = TypeVar("T")
TopicPartition = tuple[str, int]

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


class ConfigResourceType(enum.IntEnum):
    """Kafka's config resource types (DescribeConfigs / AlterConfigs ``resource_type``)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def parse(cls, value: ConfigResourceType | str | int) -> ConfigResourceType:
        if isinstance(value, str):
            try:
                return cls[value.strip().upper().replace("-", "_")]
            except KeyError:
                raise ValueError(f"unknown config resource type {value!r}") from None
        return cls(int(value))


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3

    @classmethod
    def parse(cls, value: AlterConfigOpType | str | int) -> AlterConfigOpType:
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ValueError(f"unknown config operation {value!r}") from None
        return cls(int(value))


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A topic (``ConfigResource("topic", "orders")``) or a broker (``ConfigResource("broker", "0")``).

    A broker resource named ``""`` is the cluster-wide default broker config."""

    type: ConfigResourceType
    name: str

    def __init__(self, type: ConfigResourceType | str | int, name: str | int) -> None:
        object.__setattr__(self, "type", ConfigResourceType.parse(type))
        object.__setattr__(self, "name", str(name))

    def __str__(self) -> str:
        return f"{self.type.name.lower()} '{self.name}'"


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One change of IncrementalAlterConfigs: ``AlterConfigOp("retention.ms", "1000")`` sets,
    ``AlterConfigOp.delete("retention.ms")`` removes the override, APPEND / SUBTRACT change a
    list config (``cleanup.policy``) by the comma-separated items of ``value``."""

    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET

    def __init__(self, name: str, value: Any = None, op: AlterConfigOpType | str | int = AlterConfigOpType.SET) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", _config_text(value))
        object.__setattr__(self, "op", AlterConfigOpType.parse(op))

    @classmethod
    def set(cls, name: str, value: Any) -> AlterConfigOp:
        return cls(name, value, AlterConfigOpType.SET)

    @classmethod
    def delete(cls, name: str) -> AlterConfigOp:
        return cls(name, None, AlterConfigOpType.DELETE)

    @classmethod
    def append(cls, name: str, value: Any) -> AlterConfigOp:
        return cls(name, value, AlterConfigOpType.APPEND)

    @classmethod
    def subtract(cls, name: str, value: Any) -> AlterConfigOp:
        return cls(name, value, AlterConfigOpType.SUBTRACT)


@dataclass(slots=True)
class NewTopic:
    """A topic to create.  -1 partitions or replication factor means the broker's default
    (``num.partitions``, ``default.replication.factor``).  ``assignments`` places each partition's
    replicas explicitly: ``{0: [1, 2], 1: [2, 3]}`` or ``[[1, 2], [2, 3]]``."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, Any] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | Sequence[Sequence[int]] | None = None


@dataclass(slots=True)
class NewPartitions:
    """The new total partition count of a topic, optionally with the replicas of each new one."""

    total_count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    host: str
    port: int
    rack: str | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (id: {self.id}{'' if self.rack is None else f' rack: {self.rack}'})"


@dataclass(slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller: Node | None
    brokers: list[Node]

    @property
    def controller_id(self) -> int:
        return -1 if self.controller is None else self.controller.id


@dataclass(slots=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID | None
    internal: bool


@dataclass(slots=True)
class PartitionDescription:
    partition: int
    leader: int  # broker id, -1 when there is none
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    error: KafkaError | None = None  # e.g. LEADER_NOT_AVAILABLE while a leader is being elected


@dataclass(slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: list[PartitionDescription]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)
    type: str | None = None  # "int", "long", "list", ... (DescribeConfigs v3+)
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclass(slots=True)
class CreateTopicResult:
    name: str
    topic_id: uuid.UUID | None
    num_partitions: int  # -1 when the broker did not say (CreateTopics before v5)
    replication_factor: int
    configs: dict[str, ConfigEntry] = field(default_factory=dict)


class ListOffsetsResultInfo(NamedTuple):
    offset: int  # -1 when no record has the timestamp asked for (or a later one)
    timestamp: int  # -1 unless asked by timestamp or max_timestamp
    leader_epoch: int


class OffsetAndMetadata(NamedTuple):
    """A consumer group's committed position in one partition."""

    offset: int  # the next record the group will read
    metadata: str = ""
    leader_epoch: int = -1  # the leader epoch of the committed record, -1 when unknown


@dataclass(slots=True)
class GroupListing:
    group_id: str
    protocol_type: str  # "consumer" for consumer groups; "" for groups that only commit offsets
    state: str | None  # "Stable", "Empty", "PreparingRebalance", ...; None before ListGroups v4

    @property
    def is_simple_consumer_group(self) -> bool:
        """A group without members' protocol: its offsets are committed by assign()-ing consumers."""
        return self.protocol_type == ""


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None  # static membership (DescribeGroups v4+)
    client_id: str
    host: str  # the member's address as the coordinator sees it ("/127.0.0.1")
    assignment: list[TopicPartition]  # decoded when the group uses the consumer protocol and is Stable


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    state: str  # "Stable", "Empty", ...; "Dead" for a group that does not exist
    protocol_type: str  # "consumer", or "" for a group that only commits offsets
    protocol: str  # the partition assignor chosen ("range", "cooperative-sticky", ...)
    members: list[MemberDescription]
    coordinator: Node | None

    @property
    def is_simple_consumer_group(self) -> bool:
        return self.protocol_type == ""


@dataclass(slots=True)
class PartitionLag:
    """How far a group is behind in one partition (see :meth:`AsyncAdmin.group_lag`)."""

    committed_offset: int | None  # None when the group has committed nothing for the partition
    log_end_offset: int | None  # the high watermark (or last stable offset); None if the partition is gone
    lag: int | None  # log_end_offset - committed_offset (at least 0); None unless both are known
    member: MemberDescription | None  # the member the partition is assigned to, if any


class AdminError(KafkaError):
    """An operation on several items failed for some of them.

    It carries the code and message of the first failure; ``errors`` maps every failed item to
    its :class:`KafkaError` and ``results`` holds what the operation returned for the others."""

    def __init__(self, errors: Mapping[Any, KafkaError], results: Mapping[Any, Any] | None = None) -> None:
        self.errors: dict[Any, KafkaError] = dict(errors)
        self.results: dict[Any, Any] = dict(results or {})
        first = next(iter(self.errors.values()))
        message = first.message or first.code.name
        if len(self.errors) > 1:
            message += f" (and {len(self.errors) - 1} more failed: " + ", ".join(
                f"{_item(k)}: {e.code.name}" for k, e in list(self.errors.items())[1:]
            ) + ")"
        super().__init__(first.code, message)


def _item(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{key[0]}-{key[1]}"
    return str(key)


def _config_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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


class AsyncAdmin:
    """The asyncio admin client.  ``async with AsyncAdmin(bootstrap_servers=...) as admin: ...``"""

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
        self._closed = True
        await self._cluster.close()

    async def __aenter__(self) -> AsyncAdmin:
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
        return await asyncio.wait_for(aw, max(dl.remaining(), 0.001))

    async def _request(self, conn: AsyncBrokerConnection, message: Any, version: int, dl: _Deadline) -> Any:
        return await conn.request(message, version, timeout=max(min(self._request_timeout, dl.remaining()), 0.001))

    async def _metadata(self, topics: Iterable[str] | None, dl: _Deadline) -> MetadataResponse:
        """Fresh metadata for ``topics`` (None: every topic); updates the cluster's broker list.

        Admin asks Metadata directly instead of going through the cluster's cache of wanted
        topics: it never auto-creates and never keeps topics it was asked about."""
        cluster = self._cluster
        conn = await self._bounded(cluster.any_connection(), dl)
        names = None if topics is None else sorted(set(topics))
        req = MetadataRequest(
            topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=False,
        )
        v = conn.version_for(MetadataRequest)
        if names is not None:
            v = max(v, 1)  # v0 reads an empty list as "all topics"
        resp: MetadataResponse = await self._request(conn, req, v, dl)
        cluster.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        cluster.cluster_id = resp.cluster_id
        cluster.controller_id = resp.controller_id
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
    async def describe_cluster(self, *, timeout: float | None = None) -> ClusterDescription:
        """The cluster id, the controller and the brokers."""
        dl = self._deadline(timeout)
        state: _Pending[str, ClusterDescription] = _Pending({"cluster": None}, lambda _k: "describe cluster")

        async def attempt() -> None:
            conn = await self._node(None, dl)
            try:
                v = conn.version_for(DescribeClusterRequest)
            except KafkaError:
                md = await self._metadata([], dl)  # a broker without DescribeCluster
                brokers = [Node(b.node_id, b.host, b.port, b.rack) for b in md.brokers]
                state.done("cluster", _cluster(md.cluster_id, md.controller_id, brokers))
                return
            resp: DescribeClusterResponse = await self._request(conn, DescribeClusterRequest(endpoint_type=1), v, dl)
            if resp.error_code:
                state.fail("cluster", resp.error_code, resp.error_message)
                return
            brokers = [Node(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers]
            self._cluster.brokers = {b.id: (b.host, b.port) for b in brokers}
            self._cluster.controller_id = resp.controller_id
            state.done("cluster", _cluster(resp.cluster_id, resp.controller_id, brokers))

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return state.results["cluster"]

    # -- topics --------------------------------------------------------------------------------
    async def list_topics(self, include_internal: bool = False, *, timeout: float | None = None) -> dict[str, TopicListing]:
        """Every topic (internal ones such as ``__consumer_offsets`` only when asked), by name."""
        dl = self._deadline(timeout)
        state: _Pending[str, dict[str, TopicListing]] = _Pending({"topics": None}, lambda _k: "list topics")

        async def attempt() -> None:
            md = await self._metadata(None, dl)
            out = {}
            for t in sorted(md.topics, key=lambda t: t.name or ""):
                if t.name is None or (t.is_internal and not include_internal):
                    continue
                out[t.name] = TopicListing(t.name, _topic_id(t.topic_id), t.is_internal)
            state.done("topics", out)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return state.results["topics"]

    async def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions (leader, replicas, ISR), topic id and internal flag of each topic
        (of every topic when ``names`` is None)."""
        dl = self._deadline(timeout)
        wanted = None if names is None else list(dict.fromkeys([names] if isinstance(names, str) else names))
        state: _Pending[str, TopicDescription] = _Pending({n: None for n in wanted or ()}, lambda n: f"topic '{n}'")
        if wanted is None:
            state.todo["*"] = None

        async def attempt() -> None:
            asked = list(state.todo)
            md = await self._metadata(None if wanted is None else asked, dl)
            state.todo.pop("*", None)
            seen = {t.name for t in md.topics if t.name is not None}
            for t in md.topics:
                if t.name is None:
                    continue
                if t.error_code:
                    if t.name in state.todo:
                        msg = "does not exist" if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None
                        state.fail(t.name, t.error_code, msg)
                    continue
                if wanted is not None and t.name not in state.todo:
                    continue
                parts = [
                    PartitionDescription(
                        p.partition_index,
                        p.leader_id,
                        p.leader_epoch,
                        list(p.replica_nodes),
                        list(p.isr_nodes),
                        list(p.offline_replicas),
                        _error(p.error_code, f"partition {t.name}-{p.partition_index}") if p.error_code else None,
                    )
                    for p in sorted(t.partitions, key=lambda p: p.partition_index)
                ]
                state.done(t.name, TopicDescription(t.name, _topic_id(t.topic_id), t.is_internal, parts))
            for name in asked:  # not in the response at all
                if name in state.todo and name not in seen:
                    state.fail(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist")

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        if wanted is None:
            return dict(sorted(state.results.items()))
        return {n: state.results[n] for n in wanted}

    async def create_topics(
        self, new_topics: Iterable[NewTopic], *, validate_only: bool = False, timeout: float | None = None
    ) -> dict[str, CreateTopicResult]:
        """Create topics; returns each topic's id, partition count, replication factor and
        configs (as far as the broker reports them).  ``validate_only`` checks without creating."""
        dl = self._deadline(timeout)
        topics = {t.name: t for t in new_topics}
        state: _Pending[str, CreateTopicResult] = _Pending(topics, lambda n: f"create topic '{n}'")
        Q = CreateTopicsRequest

        def creatable(t: NewTopic) -> CreateTopicsRequest.CreatableTopic:
            assignments = []
            if t.assignments is not None:
                items = t.assignments.items() if isinstance(t.assignments, Mapping) else enumerate(t.assignments)
                assignments = [Q.CreatableReplicaAssignment(partition_index=int(p), broker_ids=[int(b) for b in r]) for p, r in items]
            return Q.CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=assignments,
                configs=[Q.CreatableTopicConfig(name=k, value=_config_text(v)) for k, v in t.configs.items()],
            )

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            if validate_only and v < 1:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot validate topics (CreateTopics v0)")
            asked = list(state.todo)
            req = Q(topics=[creatable(state.todo[n]) for n in asked], timeout_ms=dl.remaining_ms(), validate_only=validate_only)
            resp: CreateTopicsResponse = await self._request(conn, req, v, dl)
            state.unanswered(asked, {r.name for r in resp.topics})
            for r in resp.topics:
                if r.name not in state.todo:
                    continue
                if r.error_code:
                    state.fail(r.name, r.error_code, r.error_message)
                    continue
                asked = state.todo[r.name]
                configs = {
                    c.name: ConfigEntry(
                        c.name, c.value, _source(c.config_source), c.read_only, c.is_sensitive
                    )
                    for c in (r.configs or [])
                }
                tid = _topic_id(r.topic_id)
                state.done(
                    r.name,
                    CreateTopicResult(
                        r.name,
                        tid,
                        r.num_partitions if v >= 5 else asked.num_partitions,
                        r.replication_factor if v >= 5 else asked.replication_factor,
                        configs,
                    ),
                )

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {n: state.results[n] for n in topics}

    async def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> None:
        """Delete topics (with their data)."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys([names] if isinstance(names, str) else names))
        state: _Pending[str, None] = _Pending({n: None for n in wanted}, lambda n: f"delete topic '{n}'")
        Q = DeleteTopicsRequest

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            todo = list(state.todo)
            if v >= 6:
                req = Q(topics=[Q.DeleteTopicState(name=n) for n in todo], timeout_ms=dl.remaining_ms())
            else:
                req = Q(topic_names=todo, timeout_ms=dl.remaining_ms())
            resp: DeleteTopicsResponse = await self._request(conn, req, v, dl)
            state.unanswered(todo, {r.name for r in resp.responses if r.name is not None})
            for r in resp.responses:
                if r.name not in state.todo:
                    continue
                if r.error_code:
                    msg = r.error_message
                    if r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not msg:
                        msg = "the topic does not exist"
                    state.fail(r.name, r.error_code, msg)
                else:
                    state.done(r.name, None)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def create_partitions(
        self,
        new_partitions: Mapping[str, int | NewPartitions],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Raise topics' partition counts: ``{"orders": 6}`` (the new total, not the increase)."""
        dl = self._deadline(timeout)
        wanted = {t: (n if isinstance(n, NewPartitions) else NewPartitions(int(n))) for t, n in new_partitions.items()}
        state: _Pending[str, None] = _Pending(wanted, lambda n: f"create partitions of '{n}'")
        Q = CreatePartitionsRequest

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            asked = list(state.todo)
            req = Q(
                topics=[
                    Q.CreatePartitionsTopic(
                        name=name,
                        count=np.total_count,
                        assignments=None
                        if np.assignments is None
                        else [Q.CreatePartitionsAssignment(broker_ids=[int(b) for b in a]) for a in np.assignments],
                    )
                    for name, np in state.todo.items()
                ],
                timeout_ms=dl.remaining_ms(),
                validate_only=validate_only,
            )
            resp: CreatePartitionsResponse = await self._request(conn, req, v, dl)
            state.unanswered(asked, {r.name for r in resp.results})
            for r in resp.results:
                if r.name not in state.todo:
                    continue
                if r.error_code:
                    state.fail(r.name, r.error_code, r.error_message)
                else:
                    state.done(r.name, None)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    # -- configs -------------------------------------------------------------------------------
    @staticmethod
    def _config_target(resource: ConfigResource) -> int | None:
        """The broker a resource's configs are asked of: the broker itself, else any broker."""
        if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and resource.name.isdigit():
            return int(resource.name)
        return None

    def _by_target(self, resources: Iterable[ConfigResource]) -> dict[int | None, list[ConfigResource]]:
        groups: dict[int | None, list[ConfigResource]] = {}
        for r in resources:
            groups.setdefault(self._config_target(r), []).append(r)
        return groups

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        keys: Iterable[str] | None = None,
        include_synonyms: bool = True,
        include_documentation: bool = False,
        timeout: float | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource (only ``keys`` when given), with its value, source,
        read-only flag and synonyms (where the value comes from, in order of precedence)."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys(resources))
        state: _Pending[ConfigResource, dict[str, ConfigEntry]] = _Pending(
            {r: None for r in wanted}, lambda r: f"describe configs of {r}"
        )
        key_list = None if keys is None else list(keys)
        Q = DescribeConfigsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[ConfigResource]) -> None:
            v = conn.version_for(Q)
            req = Q(
                resources=[Q.DescribeConfigsResource(resource_type=int(r.type), resource_name=r.name, configuration_keys=key_list) for r in batch],
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
            resp: DescribeConfigsResponse = await self._request(conn, req, v, dl)
            state.unanswered(batch, {ConfigResource(res.resource_type, res.resource_name) for res in resp.results})
            for res in resp.results:
                key = ConfigResource(res.resource_type, res.resource_name)
                if key not in state.todo:
                    continue
                if res.error_code:
                    state.fail(key, res.error_code, res.error_message)
                    continue
                entries = {}
                for c in res.configs:
                    if v == 0:
                        source = ConfigSource.DEFAULT_CONFIG if c.is_default else (
                            ConfigSource.DYNAMIC_TOPIC_CONFIG if key.type == ConfigResourceType.TOPIC else ConfigSource.STATIC_BROKER_CONFIG
                        )
                    else:
                        source = _source(c.config_source)
                    entries[c.name] = ConfigEntry(
                        c.name,
                        c.value,
                        source,
                        c.read_only,
                        c.is_sensitive,
                        [ConfigSynonym(s.name, s.value, _source(s.source)) for s in (c.synonyms or [])],
                        _TYPE_NAMES.get(c.config_type) if v >= 3 else None,
                        c.documentation if v >= 3 else None,
                    )
                state.done(key, entries)

        async def attempt() -> None:
            await self._per_node(state, self._by_target(state.todo), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {r: state.results[r] for r in wanted}

    async def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Replace each resource's whole set of overrides by ``configs`` (AlterConfigs): names
        left out go back to their defaults.  Prefer :meth:`incremental_alter_configs`."""
        dl = self._deadline(timeout)
        state: _Pending[ConfigResource, None] = _Pending(dict(configs), lambda r: f"alter configs of {r}")
        Q = AlterConfigsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[ConfigResource]) -> None:
            v = conn.version_for(Q)
            req = Q(
                resources=[
                    Q.AlterConfigsResource(
                        resource_type=int(r.type),
                        resource_name=r.name,
                        configs=[Q.AlterableConfig(name=k, value=_config_text(val)) for k, val in state.todo[r].items()],
                    )
                    for r in batch
                ],
                validate_only=validate_only,
            )
            resp: AlterConfigsResponse = await self._request(conn, req, v, dl)
            self._altered(state, batch, resp.responses)

        async def attempt() -> None:
            await self._per_node(state, self._by_target(state.todo), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp] | Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Change configs one by one: ``{ConfigResource("topic", "t"): [AlterConfigOp("retention.ms",
        "1000"), AlterConfigOp.delete("segment.ms")]}``.  A mapping ``{name: value}`` is
        shorthand for SET (and DELETE where the value is None)."""
        dl = self._deadline(timeout)
        ops: dict[ConfigResource, list[AlterConfigOp]] = {}
        for resource, change in changes.items():
            if isinstance(change, Mapping):
                ops[resource] = [
                    AlterConfigOp.delete(k) if val is None else AlterConfigOp.set(k, val) for k, val in change.items()
                ]
            else:
                ops[resource] = list(change)
        state: _Pending[ConfigResource, None] = _Pending(ops, lambda r: f"alter configs of {r}")
        Q = IncrementalAlterConfigsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[ConfigResource]) -> None:
            v = conn.version_for(Q)
            req = Q(
                resources=[
                    Q.AlterConfigsResource(
                        resource_type=int(r.type),
                        resource_name=r.name,
                        configs=[
                            Q.AlterableConfig(name=op.name, config_operation=int(op.op), value=op.value)
                            for op in state.todo[r]
                        ],
                    )
                    for r in batch
                ],
                validate_only=validate_only,
            )
            resp: IncrementalAlterConfigsResponse = await self._request(conn, req, v, dl)
            self._altered(state, batch, resp.responses)

        async def attempt() -> None:
            await self._per_node(state, self._by_target(state.todo), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    @staticmethod
    def _altered(state: _Pending[ConfigResource, None], batch: list[ConfigResource], responses: Sequence[Any]) -> None:
        state.unanswered(batch, {ConfigResource(res.resource_type, res.resource_name) for res in responses})
        for res in responses:
            key = ConfigResource(res.resource_type, res.resource_name)
            if key not in state.todo:
                continue
            if res.error_code:
                state.fail(key, res.error_code, res.error_message)
            else:
                state.done(key, None)

    # -- offsets and records -------------------------------------------------------------------
    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout: float | None = None,
    ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets of partitions: ``"earliest"`` (log start), ``"latest"`` (the high watermark, or
        the last stable offset with ``read_committed``), ``"max_timestamp"`` (the record with the
        largest timestamp) or a timestamp in ms (the first offset whose timestamp is at or after
        it; offset -1 when there is none).  Returns ``(offset, timestamp, leader_epoch)`` each."""
        dl = self._deadline(timeout)
        wanted: dict[TopicPartition, int] = {}
        for (topic, partition), spec in specs.items():
            if isinstance(spec, str):
                if spec.lower() not in _OFFSET_SPECS:
                    raise ValueError(f"offset spec must be earliest, latest, max_timestamp or a timestamp, not {spec!r}")
                wanted[(topic, int(partition))] = _OFFSET_SPECS[spec.lower()]
            else:
                wanted[(topic, int(partition))] = int(spec)
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, not {isolation_level!r}")
        isolation = 1 if isolation_level == "read_committed" else 0
        state: _Pending[TopicPartition, ListOffsetsResultInfo] = _Pending(wanted, lambda tp: f"list offsets of {tp[0]}-{tp[1]}")
        Q = ListOffsetsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            if v < 1:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker only has ListOffsets v0")
            if v < 7 and any(state.todo[tp] == MAX_TIMESTAMP for tp in batch):
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot look up max_timestamp (ListOffsets < v7)")
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                by_topic.setdefault(topic, []).append(
                    Q.ListOffsetsPartition(partition_index=partition, timestamp=state.todo[(topic, partition)])
                )
            req = Q(
                replica_id=-1,
                isolation_level=isolation,
                topics=[Q.ListOffsetsTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
                timeout_ms=dl.remaining_ms(),
            )
            resp: ListOffsetsResponse = await self._request(conn, req, v, dl)
            state.unanswered(batch, {(t.name, p.partition_index) for t in resp.topics for p in t.partitions})
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in state.todo:
                        continue
                    if p.error_code:
                        state.fail(tp, p.error_code)
                    else:
                        state.done(tp, ListOffsetsResultInfo(p.offset, p.timestamp, p.leader_epoch if v >= 4 else -1))

        async def attempt() -> None:
            await self._per_node(state, await self._leaders(state, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {tp: state.results[tp] for tp in wanted}

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """Delete the records of each partition before an offset (-1: up to the high watermark);
        returns each partition's new low watermark (its log start offset)."""
        dl = self._deadline(timeout)
        wanted = {(t, int(p)): int(o) for (t, p), o in before.items()}
        state: _Pending[TopicPartition, int] = _Pending(wanted, lambda tp: f"delete records of {tp[0]}-{tp[1]}")
        Q = DeleteRecordsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                by_topic.setdefault(topic, []).append(
                    Q.DeleteRecordsPartition(partition_index=partition, offset=state.todo[(topic, partition)])
                )
            req = Q(
                topics=[Q.DeleteRecordsTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
                timeout_ms=dl.remaining_ms(),
            )
            resp: DeleteRecordsResponse = await self._request(conn, req, v, dl)
            state.unanswered(batch, {(t.name, p.partition_index) for t in resp.topics for p in t.partitions})
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in state.todo:
                        continue
                    if p.error_code:
                        msg = None
                        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                            msg = f"offset {state.todo[tp]} is beyond the high watermark"
                        state.fail(tp, p.error_code, msg)
                    else:
                        state.done(tp, p.low_watermark)

        async def attempt() -> None:
            await self._per_node(state, await self._leaders(state, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {tp: state.results[tp] for tp in wanted}

    # -- groups --------------------------------------------------------------------------------
    async def _find_coordinators(self, groups: list[str], dl: _Deadline) -> dict[str, Node | KafkaError]:
        """Each group's coordinator (or the error finding it), asked of any broker: one
        FindCoordinator for all of them from v4, one per group before."""
        conn = await self._node(None, dl)
        Q = FindCoordinatorRequest
        v = conn.version_for(Q)
        answers: list[tuple[str, int, str | None, int, str, int]] = []
        if v >= 4:
            resp: FindCoordinatorResponse = await self._request(conn, Q(key_type=0, coordinator_keys=groups), v, dl)
            answers = [(c.key, c.error_code, c.error_message, c.node_id, c.host, c.port) for c in resp.coordinators]
        else:
            resps: list[FindCoordinatorResponse] = await asyncio.gather(
                *(self._request(conn, Q(key=g, key_type=0), v, dl) for g in groups)
            )
            answers = [
                (g, r.error_code, r.error_message if v >= 1 else None, r.node_id, r.host, r.port)
                for g, r in zip(groups, resps)
            ]
        found: dict[str, Node | KafkaError] = {}
        for key, code, message, node_id, host, port in answers:
            if key not in groups:
                continue
            if code:
                found[key] = _error(code, f"find the coordinator of group '{key}'", message)
            else:
                # the coordinator is a broker of the metadata; remember its address in case the
                # cached broker list is older than the answer
                self._cluster.brokers.setdefault(node_id, (host, port))
                found[key] = Node(node_id, host, port)
        for g in groups:
            if g not in found:
                found[g] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"find the coordinator of group '{g}': no answer")
        return found

    async def _coordinators(
        self,
        state: _Pending[K, T],
        group_of: Callable[[K], str],
        dl: _Deadline,
        nodes: dict[str, Node] | None = None,
    ) -> dict[int | None, list[K]]:
        """Group the pending items by the coordinator of their group; items whose coordinator
        cannot be found get that error (retried when retriable: the next attempt finds again).
        ``nodes`` receives each group's coordinator."""
        groups = sorted({group_of(k) for k in state.todo})
        found = await self._find_coordinators(groups, dl) if groups else {}
        by_node: dict[int | None, list[K]] = {}
        for key in list(state.todo):
            c = found[group_of(key)]
            if isinstance(c, KafkaError):
                state.failed(key, c)
                continue
            if nodes is not None:
                nodes[group_of(key)] = c
            by_node.setdefault(c.id, []).append(key)
        return by_node

    async def list_groups(
        self, states: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> list[GroupListing]:
        """Every group of the cluster (only those in ``states``, e.g. ``["Stable", "Empty"]``, when
        given), sorted by id: ListGroups is asked of every broker and the answers merged.  A broker
        that keeps failing makes this raise :class:`AdminError` keyed by broker id, whose
        ``results`` hold the other brokers' listings."""
        dl = self._deadline(timeout)
        wanted = None
        if states is not None:
            names = [states] if isinstance(states, str) else list(states)
            wanted = [_GROUP_STATES.get(s.lower().replace("_", "").replace("-", ""), s) for s in names]
        everyone = -1  # until the metadata names the brokers
        state: _Pending[int, list[GroupListing]] = _Pending(
            {everyone: None}, lambda n: "list groups" if n == everyone else f"list groups on broker {n}"
        )
        Q = ListGroupsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[int]) -> None:
            v = conn.version_for(Q, maximum=4)  # v5's type filter is not needed
            if wanted and v < 4:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot filter groups by state (ListGroups < v4)")
            resp: ListGroupsResponse = await self._request(conn, Q(states_filter=wanted or []), v, dl)
            for node in batch:
                if resp.error_code:
                    state.fail(node, resp.error_code)
                else:
                    state.done(
                        node,
                        [GroupListing(g.group_id, g.protocol_type, g.group_state if v >= 4 else None) for g in resp.groups],
                    )

        async def attempt() -> None:
            if everyone in state.todo:
                md = await self._metadata([], dl)
                state.todo.pop(everyone)
                state.last.pop(everyone, None)
                for b in md.brokers:
                    state.todo[b.node_id] = None
            await self._per_node(state, {n: [n] for n in state.todo}, send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        merged: dict[str, GroupListing] = {}
        for node in sorted(state.results):
            for g in state.results[node]:
                merged.setdefault(g.group_id, g)
        return [merged[g] for g in sorted(merged)]

    async def describe_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        """State, protocol type, assignor, coordinator and members of each group; a member's
        ``assignment`` is the list of its ``(topic, partition)`` (decoded from the consumer
        protocol; empty while the group rebalances).  As in Kafka, a group that does not exist is
        described as ``Dead`` with no members.  For committed offsets see
        :meth:`list_group_offsets`, for the lag :meth:`group_lag`."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys([group_ids] if isinstance(group_ids, str) else group_ids))
        state: _Pending[str, GroupDescription] = _Pending({g: None for g in wanted}, lambda g: f"describe group '{g}'")
        coordinators: dict[str, Node] = {}
        Q = DescribeGroupsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            v = conn.version_for(Q)
            resp: DescribeGroupsResponse = await self._request(conn, Q(groups=batch), v, dl)
            state.unanswered(batch, {g.group_id for g in resp.groups})
            for g in resp.groups:
                if g.group_id not in state.todo:
                    continue
                if g.error_code:
                    state.fail(g.group_id, g.error_code, _GROUP_MESSAGES.get(ErrorCode.of(g.error_code)))
                else:
                    state.done(g.group_id, _group_description(g, coordinators.get(g.group_id)))

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda g: g, dl, coordinators), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {g: state.results[g] for g in wanted}

    async def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets: of every partition it committed (``partitions`` None),
        or of the partitions given; partitions without a committed offset are left out.  Each is
        ``(offset, metadata, leader_epoch)``.  ``require_stable`` waits for pending transactional
        commits (OffsetFetch v7+)."""
        dl = self._deadline(timeout)
        parts = None if partitions is None else list(dict.fromkeys((t, int(p)) for t, p in partitions))
        state: _Pending[str, dict[TopicPartition, OffsetAndMetadata]] = _Pending(
            {group_id: None}, lambda g: f"fetch the offsets of group '{g}'"
        )
        partition_errors: dict[TopicPartition, KafkaError] = {}
        Q = OffsetFetchRequest

        async def send(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            v = conn.version_for(Q)
            if parts is None and v < 2:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot list all of a group's offsets (OffsetFetch < v2)")
            if require_stable and v < 7:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot wait for stable offsets (OffsetFetch < v7)")
            by_topic: dict[str, list[int]] = {}
            for t, p in parts or ():
                by_topic.setdefault(t, []).append(p)
            if v >= 8:
                topics8 = None if parts is None else [Q.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
                req = Q(groups=[Q.OffsetFetchRequestGroup(group_id=group_id, topics=topics8)], require_stable=require_stable)
            else:
                topics = None if parts is None else [Q.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
                req = Q(group_id=group_id, topics=topics, require_stable=require_stable)
            resp: OffsetFetchResponse = await self._request(conn, req, v, dl)
            answered: list[tuple[str, Any]]
            if v >= 8:
                g = next((g for g in resp.groups if g.group_id == group_id), None)
                if g is None:
                    state.fail(group_id, ErrorCode.UNKNOWN_SERVER_ERROR, "no result in the response")
                    return
                code = g.error_code
                answered = [(t.name, p) for t in g.topics for p in t.partitions]
            else:
                code = resp.error_code if v >= 2 else 0
                answered = [(t.name, p) for t in resp.topics for p in t.partitions]
            if code:
                state.fail(group_id, code, _GROUP_MESSAGES.get(ErrorCode.of(code)))
                return
            offsets: dict[TopicPartition, OffsetAndMetadata] = {}
            errors: dict[TopicPartition, KafkaError] = {}
            for topic, p in answered:
                tp = (topic, p.partition_index)
                if p.error_code:
                    exc = _error(p.error_code, f"fetch the offset of {topic}-{p.partition_index} for group '{group_id}'")
                    if _retriable(exc):  # e.g. the coordinator moved, or an unstable commit
                        state.failed(group_id, exc)
                        return
                    errors[tp] = exc
                elif p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch if v >= 5 else -1
                    offsets[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", epoch)
            partition_errors.clear()
            partition_errors.update(errors)
            state.done(group_id, dict(sorted(offsets.items())))

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda g: g, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        result = state.results[group_id]
        _check(partition_errors, result)
        return result

    async def group_lag(
        self, group_id: str, *, isolation_level: str = "read_uncommitted", timeout: float | None = None
    ) -> dict[TopicPartition, PartitionLag]:
        """How far the group is behind, per partition, like ``kafka-consumer-groups --describe``:
        every partition the group has committed or has assigned to a member, with its committed
        offset, its log end offset (the high watermark; the last stable offset with
        ``read_committed``) and the lag, log end minus committed (at least 0), and the member
        that owns it.  It describes the group, fetches its offsets (:meth:`list_group_offsets`)
        and the log ends (:meth:`list_offsets`) within one ``timeout``."""
        dl = self._deadline(timeout)
        described, committed = await asyncio.gather(
            self.describe_groups([group_id], timeout=_rest(dl)),
            self.list_group_offsets(group_id, timeout=_rest(dl)),
        )
        owners: dict[TopicPartition, MemberDescription] = {}
        for m in described[group_id].members:
            for tp in m.assignment:
                owners[tp] = m
        keys = sorted(set(committed) | set(owners))
        if not keys:
            return {}
        try:
            ends = await self.list_offsets({tp: "latest" for tp in keys}, isolation_level=isolation_level, timeout=_rest(dl))
        except AdminError as exc:
            # committed offsets can outlive their topic: those partitions have no log end
            if any(e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for e in exc.errors.values()):
                raise
            ends = exc.results
        out: dict[TopicPartition, PartitionLag] = {}
        for tp in keys:
            cur = committed[tp].offset if tp in committed else None
            end = ends[tp].offset if tp in ends else None
            lag = None if cur is None or end is None else max(end - cur, 0)
            out[tp] = PartitionLag(cur, end, lag, owners.get(tp))
        return out

    async def delete_groups(self, group_ids: Iterable[str], *, timeout: float | None = None) -> None:
        """Delete groups with their committed offsets.  Only a group without members can be
        deleted: an active one fails with NON_EMPTY_GROUP, an unknown one with
        GROUP_ID_NOT_FOUND (several groups: :class:`AdminError` keyed by group id)."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys([group_ids] if isinstance(group_ids, str) else group_ids))
        state: _Pending[str, None] = _Pending({g: None for g in wanted}, lambda g: f"delete group '{g}'")
        Q = DeleteGroupsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            v = conn.version_for(Q)
            resp: DeleteGroupsResponse = await self._request(conn, Q(groups_names=batch), v, dl)
            state.unanswered(batch, {r.group_id for r in resp.results})
            for r in resp.results:
                if r.group_id not in state.todo:
                    continue
                if r.error_code:
                    state.fail(r.group_id, r.error_code, _GROUP_MESSAGES.get(ErrorCode.of(r.error_code)))
                else:
                    state.done(r.group_id, None)

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda g: g, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout: float | None = None,
    ) -> None:
        """Set the group's committed offsets: ``{("orders", 0): 42}`` (or an
        :class:`OffsetAndMetadata` to also set metadata and leader epoch).  Committed as an admin
        (generation -1, no member id), which the coordinator accepts only while the group has no
        members: an active group fails with UNKNOWN_MEMBER_ID ("the group has active members").
        A group that does not exist is created (Empty) with these offsets."""
        dl = self._deadline(timeout)
        wanted: dict[TopicPartition, OffsetAndMetadata] = {}
        for (topic, partition), o in offsets.items():
            wanted[(topic, int(partition))] = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
        state: _Pending[TopicPartition, None] = _Pending(
            wanted, lambda tp: f"alter the offset of {tp[0]}-{tp[1]} for group '{group_id}'"
        )
        Q = OffsetCommitRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                om = state.todo[(topic, partition)]
                by_topic.setdefault(topic, []).append(
                    Q.OffsetCommitRequestPartition(
                        partition_index=partition,
                        committed_offset=om.offset,
                        committed_leader_epoch=om.leader_epoch,
                        committed_metadata=om.metadata,
                    )
                )
            req = Q(
                group_id=group_id,
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[Q.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            )
            resp: OffsetCommitResponse = await self._request(conn, req, v, dl)
            _settle_partitions(state, batch, resp.topics)

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda _tp: group_id, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def delete_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> None:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete).  Refused with
        GROUP_SUBSCRIBED_TO_TOPIC for the topics an active consumer group is subscribed to (other
        topics' offsets can go), with GROUP_ID_NOT_FOUND when the group does not exist."""
        dl = self._deadline(timeout)
        wanted = {(t, int(p)): None for t, p in partitions}
        state: _Pending[TopicPartition, None] = _Pending(
            wanted, lambda tp: f"delete the offset of {tp[0]}-{tp[1]} for group '{group_id}'"
        )
        Q = OffsetDeleteRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                by_topic.setdefault(topic, []).append(Q.OffsetDeleteRequestPartition(partition_index=partition))
            req = Q(group_id=group_id, topics=[Q.OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
            resp: OffsetDeleteResponse = await self._request(conn, req, v, dl)
            if resp.error_code:
                for tp in batch:
                    state.fail(tp, resp.error_code, _partition_message(resp.error_code, tp))
                return
            _settle_partitions(state, batch, resp.topics)

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda _tp: group_id, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)


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


class Admin:
    """The blocking admin client: an :class:`AsyncAdmin` on an event loop in a background thread.

    ``Admin({"bootstrap.servers": "127.0.0.1:9092"})`` or ``Admin(bootstrap_servers=...)``; the
    operations and their arguments are those of :class:`AsyncAdmin`.  Thread-safe.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._async = AsyncAdmin(config, **kwargs)
        self.config = self._async.config
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="odradek-admin", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the admin client is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()
            raise

    def describe_cluster(self, *, timeout: float | None = None) -> ClusterDescription:
        return self._call(self._async.describe_cluster(timeout=timeout))

    def list_topics(self, include_internal: bool = False, *, timeout: float | None = None) -> dict[str, TopicListing]:
        return self._call(self._async.list_topics(include_internal, timeout=timeout))

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        return self._call(self._async.describe_topics(names, timeout=timeout))

    def create_topics(
        self, new_topics: Iterable[NewTopic], *, validate_only: bool = False, timeout: float | None = None
    ) -> dict[str, CreateTopicResult]:
        return self._call(self._async.create_topics(new_topics, validate_only=validate_only, timeout=timeout))

    def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> None:
        self._call(self._async.delete_topics(names, timeout=timeout))

    def create_partitions(
        self,
        new_partitions: Mapping[str, int | NewPartitions],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.create_partitions(new_partitions, validate_only=validate_only, timeout=timeout))

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        keys: Iterable[str] | None = None,
        include_synonyms: bool = True,
        include_documentation: bool = False,
        timeout: float | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        return self._call(
            self._async.describe_configs(
                resources,
                keys=keys,
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
                timeout=timeout,
            )
        )

    def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.alter_configs(configs, validate_only=validate_only, timeout=timeout))

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp] | Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.incremental_alter_configs(changes, validate_only=validate_only, timeout=timeout))

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout: float | None = None,
    ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        return self._call(self._async.list_offsets(specs, isolation_level=isolation_level, timeout=timeout))

    def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return self._call(self._async.delete_records(before, timeout=timeout))

    def list_groups(self, states: Iterable[str] | None = None, *, timeout: float | None = None) -> list[GroupListing]:
        return self._call(self._async.list_groups(states, timeout=timeout))

    def describe_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        return self._call(self._async.describe_groups(group_ids, timeout=timeout))

    def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._call(
            self._async.list_group_offsets(group_id, partitions, require_stable=require_stable, timeout=timeout)
        )

    def group_lag(
        self, group_id: str, *, isolation_level: str = "read_uncommitted", timeout: float | None = None
    ) -> dict[TopicPartition, PartitionLag]:
        return self._call(self._async.group_lag(group_id, isolation_level=isolation_level, timeout=timeout))

    def delete_groups(self, group_ids: Iterable[str], *, timeout: float | None = None) -> None:
        self._call(self._async.delete_groups(group_ids, timeout=timeout))

    def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.alter_group_offsets(group_id, offsets, timeout=timeout))

    def delete_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> None:
        self._call(self._async.delete_group_offsets(group_id, partitions, timeout=timeout))

    def close(self) -> None:
        if self._closed:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._async.close(), self._loop).result(10)
        except Exception:  # closing anyway
            log.debug("admin close failed", exc_info=True)
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


for _name in (
    "describe_cluster",
    "list_topics",
    "describe_topics",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "list_offsets",
    "delete_records",
    "list_groups",
    "describe_groups",
    "list_group_offsets",
    "group_lag",
    "delete_groups",
    "alter_group_offsets",
    "delete_group_offsets",
):
    getattr(Admin, _name).__doc__ = getattr(AsyncAdmin, _name).__doc__
del _name
