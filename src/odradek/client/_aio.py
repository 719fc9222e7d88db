"""Asyncio connections to brokers, pipelined, over the sans-I/O codec of :mod:`odradek.protocol`,
and the cluster view clients share: bootstrap, metadata cache and refresh, one connection per
broker.

A connection frames its requests and responses itself (4-byte size, then the request or
response with its header) on an :class:`asyncio.BufferedProtocol`: a large response is read by
the socket straight into one buffer of its size and decoded from there, so a fetch response's
records (views of that buffer) are never copied on their way in.

The sync clients run these on an event loop in a background thread; the async clients use the
caller's loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from odradek._timeouts import wait_for
from odradek.client._network import (
    _SMALL_FRAME,
    CLIENT_MAX_VERSIONS,
    FRAMES,
    negotiate_version,
    parse_bootstrap,
)
from odradek.client._security import ClientSecurity
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey, ClientConnection, Message, ProtocolError
from odradek.protocol.connection import DEFAULT_MAX_FRAME_SIZE, FrameReader
from odradek.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse
from odradek.security import sasl_exchange

__all__ = ["AsyncBrokerConnection", "AsyncCluster", "PartitionInfo", "TopicInfo"]

log = logging.getLogger(__name__)

#: Frames of this size or more are read into a buffer of their own, as the blocking connection
#: does; smaller ones (size prefixes, small responses) through a receive buffer twice as large.
_SCRATCH = _SMALL_FRAME


class _FrameStream(asyncio.BufferedProtocol):
    """The socket side of a connection: reads size-prefixed frames and hands each payload to
    ``on_frame`` (a buffer of its own: ``bytearray`` or ``memoryview``); flow control for
    writes (:meth:`drain`).

    A :class:`FrameReader` says where the bytes go: a frame of :data:`_SCRATCH` bytes or more is
    read by the transport straight into a buffer of its size (``recv_into``), so a fetch response
    of many megabytes is never copied or regrown on its way in.  Those buffers are reused once
    nothing refers to them any more (the decoded response and every view of it gone, see
    :data:`FRAMES`): a fresh one is page-faulted in as it fills, which costs more than reading
    the response."""

    def __init__(self, conn: AsyncBrokerConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self._reader = FrameReader(conn.max_frame_size, receive_size=2 * _SCRATCH + 8, large=_SCRATCH, buffers=FRAMES)
        self._paused = False
        self._lost = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # duck-typed: uvloop's transports are not subclasses of asyncio.Transport
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        conn = self.conn
        reader = self._reader
        try:
            reader.filled(nbytes)
            while (payload := reader.next_frame()) is not None:
                conn._on_frame(payload)
                if conn.closed:
                    return
        except ProtocolError as exc:
            conn._fail(ConnectionError(str(exc)))

    def eof_received(self) -> bool:
        self.conn._fail(ConnectionError(f"broker {self.conn.node_id} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake(ConnectionError("connection lost"))
        reason = f": {exc}" if exc is not None else ""
        self.conn._fail(ConnectionError(f"connection to broker {self.conn.node_id} lost{reason}"))

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake(None)

    def _wake(self, exc: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                if exc is None:
                    w.set_result(None)
                else:
                    w.set_exception(exc)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._lost:
            raise ConnectionError("connection lost")
        if not self._paused:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter


#: errors of a connection's authentication: no retry, on this broker or another, can fix them
_AUTHENTICATION_ERRORS = frozenset({ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.UNSUPPORTED_SASL_MECHANISM})


class AsyncBrokerConnection:
    """One socket to one broker; requests are pipelined and answered in order."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        client_id: str,
        request_timeout_ms: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self.node_id = node_id
        self.security = security
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = request_timeout_ms / 1000
        self.max_frame_size = DEFAULT_MAX_FRAME_SIZE
        self.versions: dict[int, tuple[int, int]] = {}
        self._stream: _FrameStream | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._codec = ClientConnection(client_id=client_id)  # correlation ids, requests in flight
        self.closed = False
        self.error: BaseException | None = None

    async def connect(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            tls = self.security.tls if self.security is not None else None
            _transport, stream = await wait_for(
                loop.create_connection(
                    lambda: _FrameStream(self), self.host, self.port, ssl=tls, server_hostname=self.host if tls else None
                ),
                timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._stream = stream
        if self.closed:  # closed while connecting
            stream.transport.close()  # type: ignore[union-attr]
            raise ConnectionError(f"connection to broker {self.node_id} is closed")
        resp: ApiVersionsResponse = await self.request(
            ApiVersionsRequest(client_software_name="odradek", client_software_version="0.1.0"),
            CLIENT_MAX_VERSIONS[ApiKey.API_VERSIONS],
        )
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = await self.request(ApiVersionsRequest(), 0)
        if resp.error_code:
            raise KafkaError(resp.error_code, "ApiVersions failed")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        steps = sasl_exchange(self.security.sasl_client() if self.security else None, self.version_for)
        try:
            step = next(steps)
            while True:
                step = steps.send(await self.request(*step))
        except StopIteration:
            pass

    def version_for(self, cls: type[Message], maximum: int | None = None) -> int:
        return negotiate_version(self.versions, cls, maximum, f"broker {self.node_id}")

    def send(self, message: Message, version: int | None = None, expect_response: bool = True) -> asyncio.Future[Any]:
        """Write a request now; the future completes with its response (or None without one)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)  # a caller that timed out must not leave it unread
        stream = self._stream
        if self.closed or stream is None or stream.transport is None:
            fut.set_exception(ConnectionError(f"connection to broker {self.node_id} is closed"))
            return fut
        v = self.version_for(type(message)) if version is None else version
        cid, data = self._codec.send_request(message, v, expect_response)
        stream.transport.write(data)
        if expect_response:
            self._pending[cid] = fut
        else:
            fut.set_result(None)
        return fut

    async def request(self, message: Message, version: int | None = None, timeout: float | None = None) -> Any:
        fut = self.send(message, version)
        try:
            return await wait_for(asyncio.shield(fut), self.timeout if timeout is None else timeout)
        except TimeoutError as exc:
            self._fail(TimeoutError(f"request to broker {self.node_id} timed out"))
            raise TimeoutError(f"no response from broker {self.node_id} ({self.host}:{self.port})") from exc

    async def drain(self) -> None:
        if self._stream is not None and not self.closed:
            await self._stream.drain()

    def _on_frame(self, payload: bytearray | memoryview) -> None:
        """One response frame (without its size): decode it and complete its request."""
        if self.closed:
            return
        try:
            event = self._codec.receive_frame(payload)
        except ProtocolError as exc:
            self._fail(ConnectionError(str(exc)))
            return
        fut = self._pending.pop(event.correlation_id, None)
        if fut is not None and not fut.done():
            fut.set_result(event.response)

    def _fail(self, exc: BaseException) -> None:
        if self.closed:
            return
        self.closed = True
        self.error = exc
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self._pending.clear()
        if self._stream is not None and self._stream.transport is not None:
            self._stream.transport.close()

    async def close(self) -> None:
        self._fail(ConnectionError("connection closed"))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


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
    topic_id: Any
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    internal: bool = False
    error_code: int = 0


class AsyncCluster:
    """Bootstrap, metadata and connections, shared by a client's parts."""

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
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.connect_timeout = socket_connection_setup_timeout_ms / 1000
        self.allow_auto_create = allow_auto_create_topics
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        self._conns: dict[int, AsyncBrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future[AsyncBrokerConnection]] = {}
        self._bootstrap_conn: AsyncBrokerConnection | None = None
        self._opened: list[AsyncBrokerConnection] = []
        self._last_refresh = 0.0
        self._refreshing: asyncio.Future[None] | None = None
        self.wanted_topics: set[str] = set()

    # -- connections ---------------------------------------------------------------------------
    async def _open(self, node_id: int, host: str, port: int) -> AsyncBrokerConnection:
        conn = AsyncBrokerConnection(
            node_id, host, port, client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
            security=self.security,
        )
        self._opened.append(conn)
        try:
            await conn.connect(self.connect_timeout)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def any_connection(self) -> AsyncBrokerConnection:
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        errors = []
        addresses = list(self.brokers.values()) or list(self.bootstrap)
        random.shuffle(addresses)
        for host, port in addresses + [a for a in self.bootstrap if a not in addresses]:
            try:
                self._bootstrap_conn = await self._open(-1, host, port)
                return self._bootstrap_conn
            except KafkaError as exc:
                if exc.code in _AUTHENTICATION_ERRORS:
                    raise  # another broker would say the same: the credentials are wrong
                errors.append(str(exc))
            except (ConnectionError, TimeoutError) as exc:
                errors.append(str(exc))
        raise ConnectionError("no broker reachable: " + "; ".join(errors))

    async def connection(self, node_id: int) -> AsyncBrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        if node_id not in self.brokers:
            await self.refresh()
        if node_id not in self.brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the metadata")
        host, port = self.brokers[node_id]
        fut: asyncio.Future[AsyncBrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = fut
        try:
            conn = await self._open(node_id, host, port)
            self._conns[node_id] = conn
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            self._connecting.pop(node_id, None)

    # -- metadata ------------------------------------------------------------------------------
    def metadata_stale(self) -> bool:
        return (time.monotonic() - self._last_refresh) * 1000 >= self.metadata_max_age_ms

    async def refresh(self, topics: Iterable[str] | None = None, *, all_topics: bool = False) -> MetadataResponse:
        """Fetch metadata for ``topics`` (plus every topic already wanted), or all topics."""
        if topics is not None:
            self.wanted_topics.update(topics)
        conn = await self.any_connection()
        names = None if all_topics else sorted(self.wanted_topics)
        req = MetadataRequest(
            topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=self.allow_auto_create,
        )
        v = conn.version_for(MetadataRequest)
        if v == 0 and names == []:
            v = 1  # v0 reads an empty list as "all topics"
        resp: MetadataResponse = await conn.request(req, v)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
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
        for node_id in list(self._conns):
            if node_id not in self.brokers:
                gone = self._conns.pop(node_id)
                await gone.close()
                self._opened.remove(gone)
        return resp

    async def topic(self, name: str, *, wait_ms: int | None = None) -> TopicInfo:
        """Metadata of ``name``, refreshing (and retrying while it is being created) as needed."""
        deadline = time.monotonic() + (self.request_timeout_ms if wait_ms is None else wait_ms) / 1000
        last: KafkaError | None = None
        while True:
            info = self.topics.get(name)
            if info is not None and info.partitions and not self.metadata_stale():
                return info
            resp = await self.refresh([name])
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
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    def leader(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        if info is None or partition not in info.partitions:
            return -1
        return info.partitions[partition].leader

    async def close(self) -> None:
        for conn in self._opened:
            await conn.close()
        self._opened.clear()
        self._conns.clear()
        self._bootstrap_conn = None
