"""Blocking connections to brokers over the sans-I/O :class:`~odradek.protocol.ClientConnection`.

``BrokerConnection`` is one socket: it negotiates versions with ApiVersions (the highest version
both sides support for each API), sends requests and waits for their responses with a timeout.
``Cluster`` knows the bootstrap servers, refreshes metadata, and keeps one connection per broker.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from typing import Any, TypeVar

from odradek.client._security import ClientSecurity
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey, ClientConnection, Message, ProtocolError
from odradek.protocol.connection import DEFAULT_MAX_FRAME_SIZE, FrameBuffers, frame_size_at
from odradek.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse
from odradek.security import sasl_exchange

__all__ = ["BrokerConnection", "Cluster", "negotiate_version", "parse_bootstrap"]

M = TypeVar("M", bound=Message)

#: Frames up to this size are read into a buffer of their own; larger ones into a reused one.
_SMALL_FRAME = 1 << 16
#: At most this many bytes of buffers of large frames are kept for reuse (all connections).
_SPARE_BYTES = 32 << 20


class _SharedFrameBuffers(FrameBuffers):
    """The spares of every connection of the process, behind a lock (Spark tasks read in threads)."""

    __slots__ = ("_lock",)

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self._lock = threading.Lock()

    def get(self, size: int) -> memoryview:
        with self._lock:
            return super().get(size)


#: buffers of large frames, kept for reuse, up to :data:`_SPARE_BYTES` in all: connections come
#: and go, a Spark task opens its own
FRAMES = _SharedFrameBuffers(_SPARE_BYTES)


def _frame_buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes for a large frame: a spare one that nothing refers to
    any more, or a new one (see :class:`FrameBuffers`)."""
    return FRAMES.get(size)


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    result = []
    for item in (s.strip() for s in servers.split(",") if s.strip()):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        result.append((host.strip("[]"), int(port)))
    if not result:
        raise ValueError("no bootstrap servers given")
    return result


#: The highest version of each API this client speaks, where the message classes (generated from
#: Kafka 4.x's definitions) go further: newer versions change what a request means (topic ids in
#: Produce v13, transactions v2 in Produce v12 / EndTxn v5 / TxnOffsetCommit v5, member epochs in
#: OffsetCommit v9+...), which the client does not do.
CLIENT_MAX_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 11,
    ApiKey.FETCH: 17,
    ApiKey.LIST_OFFSETS: 10,
    ApiKey.METADATA: 12,
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    ApiKey.API_VERSIONS: 4,
    ApiKey.INIT_PRODUCER_ID: 5,
    ApiKey.TXN_OFFSET_COMMIT: 4,
    ApiKey.END_TXN: 4,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.DESCRIBE_CLUSTER: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 4,
    ApiKey.LIST_TRANSACTIONS: 1,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
}


def negotiate_version(
    versions: dict[int, tuple[int, int]], cls: type[Message], maximum: int | None, who: str
) -> int:
    """The highest version of ``cls`` both sides support (from the broker's ApiVersions answer),
    capped at ``maximum`` and at :data:`CLIENT_MAX_VERSIONS`; UNSUPPORTED_VERSION when there is none."""
    broker = versions.get(cls.API_KEY)
    if broker is None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"{who} does not support {cls.NAME}")
    lo = max(broker[0], cls.VALID_VERSIONS[0])
    ours = CLIENT_MAX_VERSIONS.get(cls.API_KEY, cls.VALID_VERSIONS[1])
    hi = min(broker[1], ours, maximum if maximum is not None else 1 << 15)
    if lo > hi:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"no {cls.NAME} version in common with {who}")
    return hi


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "odradek",
        timeout: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.timeout = timeout
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = security.tls if security is not None else None
            if tls is not None:
                try:
                    sock = tls.wrap_socket(sock, server_hostname=host)
                except BaseException:
                    sock.close()
                    raise
            self.sock = sock
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        self.conn = ClientConnection(client_id=client_id)
        self.max_frame_size = DEFAULT_MAX_FRAME_SIZE
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()
        steps = sasl_exchange(security.sasl_client() if security else None, self.version_for)
        try:
            step = next(steps)
            while True:
                step = steps.send(self._roundtrip(*step))
        except StopIteration:
            pass
        except BaseException:
            self.close()
            raise

    def _negotiate(self) -> None:
        ours = CLIENT_MAX_VERSIONS[ApiKey.API_VERSIONS]
        resp: ApiVersionsResponse = self._roundtrip(
            ApiVersionsRequest(client_software_name="odradek", client_software_version="0.1.0"), ours
        )
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = self._roundtrip(ApiVersionsRequest(), 0)
        if resp.error_code:
            raise KafkaError(resp.error_code, "ApiVersions failed")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, cls: type[Message], maximum: int | None = None) -> int:
        return negotiate_version(self.versions, cls, maximum, "the broker")

    def request(self, message: Message, version: int | None = None) -> Any:
        """Send ``message`` (at the highest common version unless given) and return the response."""
        v = self.version_for(type(message)) if version is None else version
        return self._roundtrip(message, v)

    def _roundtrip(self, message: Message, version: int) -> Any:
        self.send(message, version)
        return self.receive()

    def send(self, message: Message, version: int | None = None) -> int:
        """Write a request without waiting for its response (see :meth:`receive`); returns its
        correlation id.  Requests are answered in the order they were sent."""
        v = self.version_for(type(message)) if version is None else version
        cid, data = self.conn.send_request(message, v)
        try:
            self.sock.settimeout(self.timeout)
            self.sock.sendall(data)
        except OSError as exc:
            self.close()
            raise ConnectionError(f"connection to {self.host}:{self.port} failed: {exc}") from exc
        return cid

    def receive(self) -> Any:
        """The response to the oldest request sent and not answered yet, waiting up to the
        connection's timeout.  A large response is read straight into a buffer of its size (one
        that no earlier response refers to any more), and its ``records`` are views of it."""
        deadline = time.monotonic() + self.timeout
        try:
            head = bytearray(4)
            self._read_into(memoryview(head), deadline)
            size = frame_size_at(head, 0, self.max_frame_size)
            payload = memoryview(bytearray(size)) if size <= _SMALL_FRAME else _frame_buffer(size)
            self._read_into(payload, deadline)
            return self.conn.receive_frame(payload).response
        except TimeoutError:
            self.close()
            raise TimeoutError(f"no response from {self.host}:{self.port} within {self.timeout:.0f}s") from None
        except ProtocolError as exc:
            self.close()
            raise ConnectionError(f"bad response from {self.host}:{self.port}: {exc}") from exc
        except OSError as exc:
            self.close()
            raise ConnectionError(f"connection to {self.host}:{self.port} failed: {exc}") from exc

    def _read_into(self, view: memoryview, deadline: float) -> None:
        got, n = 0, len(view)
        while got < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            got += k

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Cluster:
    """Bootstrap servers, a metadata cache and one connection per broker (blocking)."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "odradek",
        timeout: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.timeout = timeout
        self.brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, BrokerConnection] = {}
        self._any: BrokerConnection | None = None
        self.cluster_id: str | None = None
        self.controller_id = -1

    def any(self) -> BrokerConnection:
        if self._any is not None:
            return self._any
        errors = []
        for host, port in self.bootstrap:
            try:
                self._any = BrokerConnection(
                    host, port, client_id=self.client_id, timeout=self.timeout, security=self.security
                )
                return self._any
            except (ConnectionError, TimeoutError) as exc:
                errors.append(str(exc))
        raise ConnectionError("no bootstrap server reachable: " + "; ".join(errors))

    def metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False) -> MetadataResponse:
        conn = self.any()
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=allow_auto_create,
        )
        resp: MetadataResponse = conn.request(req)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        return resp

    def node(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        if node_id not in self.brokers:
            self.metadata([])
        if node_id not in self.brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the cluster metadata")
        host, port = self.brokers[node_id]
        conn = self._conns[node_id] = BrokerConnection(
            host, port, client_id=self.client_id, timeout=self.timeout, security=self.security
        )
        return conn

    def leader_of(self, topic: str, partition: int) -> BrokerConnection:
        md = self.metadata([topic])
        for t in md.topics:
            if t.name == topic:
                if t.error_code:
                    raise KafkaError(t.error_code, f"topic {topic}")
                for p in t.partitions:
                    if p.partition_index == partition:
                        return self.node(p.leader_id)
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")

    def coordinator(self, group_id: str, deadline_s: float | None = None) -> BrokerConnection:
        """The group's coordinator, retrying while it is being created or loaded."""
        deadline = time.monotonic() + (self.timeout if deadline_s is None else deadline_s)
        while True:
            conn = self.any()
            v = conn.version_for(FindCoordinatorRequest)
            req = FindCoordinatorRequest(key=group_id, key_type=0) if v < 4 else FindCoordinatorRequest(
                key_type=0, coordinator_keys=[group_id]
            )
            resp: FindCoordinatorResponse = conn.request(req, v)
            if v >= 4:
                c = resp.coordinators[0]
                code, node_id, host, port = c.error_code, c.node_id, c.host, c.port
            else:
                code, node_id, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            if code == 0:
                self.brokers[node_id] = (host, port)
                return self.node(node_id)
            err = ErrorCode.of(code)
            if not err.retriable or time.monotonic() > deadline:
                raise KafkaError(err, f"finding the coordinator of group {group_id}")
            time.sleep(0.1)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        if self._any is not None:
            self._any.close()
        self._conns.clear()
        self._any = None

