"""A client's view of the cluster: bootstrap, metadata cache and refresh, one connection per broker.

:class:`ClusterView` holds the state and writes every operation once, as a procedure
(:mod:`odradek.transport._ops`): connecting to any broker (known brokers in random order, then the
bootstrap servers; wrong credentials are not tried elsewhere), connecting to one broker (metadata
first if it is not known), metadata requests and refreshes (the topics cache, the brokers, the
controller; connections to brokers that left are closed), waiting for a topic to exist, the
leader of a partition and a coordinator (:mod:`odradek.transport.coordinator`).

Two faces run them: :class:`AsyncCluster` on the caller's event loop (the asyncio clients; the
blocking clients run those on a loop thread of their own), :class:`Cluster` in the caller's
thread on blocking sockets (the CLI, the Spark executors' direct read).  Their methods have the
same names and meanings.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse

from ._ops import Call, Close, Connect, Open, Procedure, Sleep, drive, drive_blocking
from .aio import AsyncBrokerConnection
from .blocking import BrokerConnection
from .coordinator import GROUP, CoordinatorAnswer, coordinator, find_coordinators
from .session import Security, Session, parse_bootstrap

__all__ = ["AsyncCluster", "Cluster", "ClusterView", "PartitionInfo", "TopicInfo"]

C = TypeVar("C", bound=Session)
R = TypeVar("R")

#: errors of a connection's authentication: no retry, on this broker or another, can fix them
_AUTHENTICATION_ERRORS = frozenset({ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.UNSUPPORTED_SASL_MECHANISM})


@dataclass(slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error_code: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    internal: bool = False
    error_code: int = 0


class ClusterView(Generic[C]):
    """Bootstrap servers, what the last metadata said, the connections; the procedures both
    faces run (see the module docstring).  ``C`` is the face's connection class."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str,
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        socket_connection_setup_timeout_ms: int = 10000,
        allow_auto_create_topics: bool = True,
        security: Security | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.connect_timeout = socket_connection_setup_timeout_ms / 1000
        self.allow_auto_create = allow_auto_create_topics
        #: node id -> (host, port), from the last metadata (and coordinator answers)
        self.brokers: dict[int, tuple[str, int]] = {}
        #: the topics of the last refreshes (those without errors)
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        #: topics every refresh asks about
        self.wanted_topics: set[str] = set()
        self._conns: dict[int, C] = {}
        self._bootstrap_conn: C | None = None
        self._opened: list[C] = []
        #: connections being opened, by node id (the asyncio face opens one for all who ask)
        self._connecting: dict[int, asyncio.Future[C]] = {}
        self._last_refresh = 0.0

    # -- state ---------------------------------------------------------------------------------
    def metadata_stale(self) -> bool:
        """Whether the cached metadata is older than ``metadata.max.age.ms`` (the next lookup refreshes it)."""
        return (time.monotonic() - self._last_refresh) * 1000 >= self.metadata_max_age_ms

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader in the cached metadata (-1: unknown)."""
        info = self.topics.get(topic)
        if info is None or partition not in info.partitions:
            return -1
        return info.partitions[partition].leader

    def _live(self, node_id: int) -> C | None:
        conn = self._conns.get(node_id)
        return conn if conn is not None and not conn.closed else None

    def _live_any(self) -> C | None:
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        return None

    def _forget(self) -> list[C]:
        """Every connection, forgotten (for the face to close)."""
        opened, self._opened = self._opened, []
        self._conns.clear()
        self._bootstrap_conn = None
        return opened

    # -- procedures ----------------------------------------------------------------------------
    def _any_connection(self) -> Procedure[C]:
        conn = self._live_any()
        if conn is not None:
            return conn
        errors = []
        addresses = list(self.brokers.values()) or list(self.bootstrap)
        random.shuffle(addresses)
        for host, port in addresses + [a for a in self.bootstrap if a not in addresses]:
            try:
                opened: C = yield Open(-1, host, port)
            except KafkaError as exc:
                if exc.code in _AUTHENTICATION_ERRORS:
                    raise  # another broker would say the same: the credentials are wrong
                errors.append(str(exc))
                continue
            except (ConnectionError, TimeoutError) as exc:
                errors.append(str(exc))
                continue
            self._bootstrap_conn = opened
            return opened
        raise ConnectionError("no broker reachable: " + "; ".join(errors))

    def _connection(self, node_id: int) -> Procedure[C]:
        conn = self._live(node_id)
        if conn is not None:
            return conn
        if node_id not in self.brokers:
            yield from self._refresh(None, False)
        if node_id not in self.brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the metadata")
        host, port = self.brokers[node_id]
        opened: C = yield Open(node_id, host, port)
        self._conns[node_id] = opened
        return opened

    def _metadata(
        self, topics: Iterable[str] | None, allow_auto_create: bool, timeout: float | None = None
    ) -> Procedure[MetadataResponse]:
        """A Metadata request for ``topics`` (None: every topic) to any broker; the broker list,
        cluster id and controller are taken from the answer, the topics cache is left alone."""
        conn = yield Connect(None)
        names = None if topics is None else list(topics)
        req = MetadataRequest(
            topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=allow_auto_create,
        )
        v = conn.version_for(MetadataRequest)
        if v == 0 and names == []:
            v = 1  # v0 reads an empty list as "all topics"
        resp: MetadataResponse = yield Call(req, v, timeout, conn)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        return resp

    def _refresh(self, topics: Iterable[str] | None, all_topics: bool) -> Procedure[MetadataResponse]:
        if topics is not None:
            self.wanted_topics.update(topics)
        names = None if all_topics else sorted(self.wanted_topics)
        resp = yield from self._metadata(names, self.allow_auto_create)
        for t in resp.topics:
            if t.name is None:
                continue
            info = TopicInfo(t.name, t.topic_id, internal=t.is_internal, error_code=t.error_code)
            for p in t.partitions:
                info.partitions[p.partition_index] = PartitionInfo(
                    p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes), p.error_code
                )
            if t.error_code == 0:
                self.topics[t.name] = info
            else:
                self.topics.pop(t.name, None)
        self._last_refresh = time.monotonic()
        gone = [self._conns.pop(n) for n in list(self._conns) if n not in self.brokers]
        for conn in gone:
            if conn in self._opened:  # close() may have emptied the list meanwhile
                self._opened.remove(conn)
        if gone:
            yield Close(tuple(gone))
        return resp

    def _topic(self, name: str, wait_ms: int | None) -> Procedure[TopicInfo]:
        deadline = time.monotonic() + (self.request_timeout_ms if wait_ms is None else wait_ms) / 1000
        last: KafkaError | None = None
        while True:
            info = self.topics.get(name)
            if info is not None and info.partitions and not self.metadata_stale():
                return info
            resp = yield from self._refresh([name], False)
            for t in resp.topics:
                if t.name == name and t.error_code:
                    err = ErrorCode.of(t.error_code)
                    last = KafkaError(err, f"topic {name}")
                    if not err.retriable:
                        raise last
            info = self.topics.get(name)
            if info is not None and info.partitions:
                return info
            if time.monotonic() >= deadline:
                raise last or KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} not found")
            yield Sleep(self.retry_backoff_ms / 1000)

    def _leader_connection(self, topic: str, partition: int) -> Procedure[C]:
        md = yield from self._metadata([topic], False)
        for t in md.topics:
            if t.name != topic:
                continue
            if t.error_code:
                raise KafkaError(t.error_code, f"topic {topic}")
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.leader_id < 0:
                        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition}")
                    conn: C = yield Connect(p.leader_id)
                    return conn
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")


class AsyncCluster(ClusterView[AsyncBrokerConnection]):
    """The cluster view on the caller's event loop, shared by a client's parts."""

    async def run(self, proc: Procedure[R]) -> R:
        """Run a procedure with this cluster's connections."""
        return await drive(proc, cluster=self)

    async def open(self, node_id: int, host: str, port: int) -> AsyncBrokerConnection:
        """A new connection, its handshake done (closed again if that fails)."""
        conn = AsyncBrokerConnection(
            node_id, host, port, client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
            security=self.security,
        )
        self._opened.append(conn)
        try:
            await conn.connect(self.connect_timeout)
        except BaseException:
            await conn.close()
            if conn in self._opened:  # close() may have emptied the list meanwhile
                self._opened.remove(conn)
            raise
        return conn

    async def any_connection(self) -> AsyncBrokerConnection:
        """A connection to any broker."""
        conn = self._live_any()
        if conn is not None:
            return conn
        return await self.run(self._any_connection())

    async def connection(self, node_id: int) -> AsyncBrokerConnection:
        """The connection to broker ``node_id`` (one at a time is opened, however many ask)."""
        conn = self._live(node_id)
        if conn is not None:
            return conn
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[AsyncBrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = fut
        try:
            conn = await self.run(self._connection(node_id))
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            self._connecting.pop(node_id, None)

    async def refresh(self, topics: Iterable[str] | None = None, *, all_topics: bool = False) -> MetadataResponse:
        """Fetch metadata for ``topics`` (plus every topic already wanted), or all topics."""
        return await self.run(self._refresh(topics, all_topics))

    async def metadata(
        self, topics: Iterable[str] | None, *, allow_auto_create: bool = False, timeout: float | None = None
    ) -> MetadataResponse:
        """One Metadata request for ``topics`` (None: all), outside the topics cache."""
        return await self.run(self._metadata(topics, allow_auto_create, timeout))

    async def topic(self, name: str, *, wait_ms: int | None = None) -> TopicInfo:
        """Metadata of ``name``, refreshing (and retrying while it is being created) as needed."""
        info = self.topics.get(name)
        if info is not None and info.partitions and not self.metadata_stale():
            return info
        return await self.run(self._topic(name, wait_ms))

    async def leader_connection(self, topic: str, partition: int) -> AsyncBrokerConnection:
        """The connection to the partition's leader, from fresh metadata."""
        return await self.run(self._leader_connection(topic, partition))

    async def coordinator(
        self, key: str, key_type: int = GROUP, *, deadline: float | None = None, what: str | None = None
    ) -> AsyncBrokerConnection:
        """The connection to the coordinator of ``key`` (see :func:`~odradek.transport.coordinator.coordinator`);
        ``deadline`` in ``time.monotonic()`` seconds, by default the request timeout from now."""
        if deadline is None:
            deadline = time.monotonic() + self.request_timeout_ms / 1000
        return await self.run(coordinator(self, key, key_type, deadline=deadline, what=what))

    async def find_coordinators(
        self, conn: AsyncBrokerConnection, keys: Sequence[str], key_type: int = GROUP, timeout: float | None = None
    ) -> list[CoordinatorAnswer]:
        """``conn``'s broker's answers about the coordinators of ``keys`` (one attempt)."""
        return await self.run(find_coordinators(conn, keys, key_type, timeout))

    async def close(self) -> None:
        """Close every connection this view opened."""
        for conn in self._forget():
            await conn.close()


class Cluster(ClusterView[BrokerConnection]):
    """The cluster view on blocking sockets, in the caller's thread (several threads may share it:
    one operation runs at a time).  ``timeout`` (seconds) bounds connecting and each request."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "odradek",
        timeout: float = 30.0,
        security: Security | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("request_timeout_ms", int(timeout * 1000))
        kwargs.setdefault("socket_connection_setup_timeout_ms", int(timeout * 1000))
        kwargs.setdefault("allow_auto_create_topics", False)
        super().__init__(bootstrap_servers, client_id=client_id, security=security, **kwargs)
        self.timeout = timeout
        self._lock = threading.RLock()

    def run(self, proc: Procedure[R]) -> R:
        """Run a procedure with this cluster's connections."""
        with self._lock:
            return drive_blocking(proc, cluster=self)

    def open(self, node_id: int, host: str, port: int) -> BrokerConnection:
        """A new connection to ``host``:``port`` (broker ``node_id``, -1 for a bootstrap server), its
        handshake done; closed with the cluster."""
        conn = BrokerConnection(
            host, port, client_id=self.client_id, timeout=self.request_timeout_ms / 1000, security=self.security,
            node_id=node_id, connect_timeout=self.connect_timeout,
        )
        self._opened.append(conn)
        return conn

    def any_connection(self) -> BrokerConnection:
        """A connection to any broker: one already open, else the first of the known brokers
        (tried in random order) and the bootstrap servers that answers; ConnectionError when none does."""
        with self._lock:
            return self._live_any() or self.run(self._any_connection())

    def connection(self, node_id: int) -> BrokerConnection:
        """The connection to broker ``node_id``, opened if needed; KafkaError BROKER_NOT_AVAILABLE if fresh
        metadata does not list it."""
        with self._lock:
            return self._live(node_id) or self.run(self._connection(node_id))

    def refresh(self, topics: Iterable[str] | None = None, *, all_topics: bool = False) -> MetadataResponse:
        """Fetch metadata for ``topics`` (plus every topic already wanted), or all topics, and update the
        cache."""
        return self.run(self._refresh(topics, all_topics))

    def metadata(
        self, topics: Iterable[str] | None = None, allow_auto_create: bool = False, *, timeout: float | None = None
    ) -> MetadataResponse:
        """One Metadata request for ``topics`` (None: every topic) to any broker, returned as is; the broker
        list, cluster id and controller are taken from it, the topic cache is left alone."""
        return self.run(self._metadata(topics, allow_auto_create, timeout))

    def topic(self, name: str, *, wait_ms: int | None = None) -> TopicInfo:
        """Metadata of ``name``, refreshing (and retrying while it is being created, up to ``wait_ms``) as
        needed; KafkaError UNKNOWN_TOPIC_OR_PARTITION if it does not appear."""
        return self.run(self._topic(name, wait_ms))

    def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        """The connection to the partition's leader, from fresh metadata; KafkaError LEADER_NOT_AVAILABLE or
        UNKNOWN_TOPIC_OR_PARTITION when there is none."""
        return self.run(self._leader_connection(topic, partition))

    def coordinator(
        self, key: str, key_type: int = GROUP, *, deadline: float | None = None, what: str | None = None
    ) -> BrokerConnection:
        """The connection to the coordinator of ``key`` (a group id, or a transactional id with
        ``key_type``), asked with FindCoordinator until ``deadline`` (``time.monotonic()`` seconds, default
        the request timeout from now); a non-retriable answer raises its KafkaError at once, running out
        of time COORDINATOR_NOT_AVAILABLE."""
        if deadline is None:
            deadline = time.monotonic() + self.request_timeout_ms / 1000
        return self.run(coordinator(self, key, key_type, deadline=deadline, what=what))

    def find_coordinators(
        self, conn: BrokerConnection, keys: Sequence[str], key_type: int = GROUP, timeout: float | None = None
    ) -> list[CoordinatorAnswer]:
        """``conn``'s broker's answers about the coordinators of ``keys`` (one FindCoordinator attempt)."""
        return self.run(find_coordinators(conn, keys, key_type, timeout))

    # the names this face had before the transport layer (odradek.client.Cluster)
    def any(self) -> BrokerConnection:
        """:meth:`any_connection` (this face's name before the transport layer)."""
        return self.any_connection()

    def node(self, node_id: int) -> BrokerConnection:
        """:meth:`connection` (this face's name before the transport layer)."""
        return self.connection(node_id)

    def leader_of(self, topic: str, partition: int) -> BrokerConnection:
        """:meth:`leader_connection` (this face's name before the transport layer)."""
        return self.leader_connection(topic, partition)

    def close(self) -> None:
        """Close every connection this cluster opened; it opens new ones if used again."""
        with self._lock:
            for conn in self._forget():
                conn.close()
