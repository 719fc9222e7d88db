"""Broker-to-broker connections: the controller's channel to each broker, followers' fetchers.

Every broker in a cluster runs this version of Odradek, so requests use the versions the
sans-I/O codec knows (no ApiVersions round trip).  A :class:`BrokerChannel` connects lazily,
pipelines requests and fails every pending one when the connection breaks; callers retry.

Responses are received as the broker receives requests (``asyncio.BufferedProtocol``): a large
one (a follower's fetch of megabytes) straight into a buffer of its own, reused once its records
are appended, so the kernel's copy is the only one; streams copied every byte three more times.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek._timeouts import wait_for
from odradek.errors import KafkaError
from odradek.protocol import ConnectionClosed, Message, ProtocolError, ResponseReceived
from odradek.protocol.connection import NEED_DATA, ClientConnection, FrameBuffers
from odradek.security import PlainClient, ScramClient, sasl_exchange

__all__ = ["BrokerChannel", "ChannelSecurity"]

#: the versions of the SASL exchange between brokers (every broker runs this version)
_SASL_VERSIONS = {17: 1, 36: 2}
#: responses of this size or more go straight into a buffer of their own (from the spares every
#: channel of this broker's event loop shares)
_RECEIVE_SIZE = 256 * 1024
_LARGE_FRAME = 64 * 1024
_FRAME_BUFFERS = FrameBuffers(32 << 20)


@dataclass(frozen=True)
class ChannelSecurity:
    """How brokers reach each other: the inter-broker listener's TLS and SASL."""

    tls: ssl.SSLContext | None = None
    #: a fresh SASL mechanism for each connection (None: no SASL)
    sasl: Callable[[], PlainClient | ScramClient] | None = None


class BrokerChannel:
    def __init__(
        self, host: str, port: int, *, client_id: str, timeout: float = 30.0, security: ChannelSecurity | None = None
    ) -> None:
        self.host, self.port = host, port
        self.security = security
        self.client_id = client_id
        self.timeout = timeout
        self.conn: ClientConnection | None = None
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._ready = False

    @property
    def connected(self) -> bool:
        """Connected and, on a SASL listener, authenticated: requests may go."""
        return self._ready and self._transport is not None and not self._transport.is_closing()

    async def _connect(self) -> None:
        async with self._connecting:
            if self.connected:
                return
            self._ready = False
            sec = self.security
            tls = sec.tls if sec is not None else None
            conn = ClientConnection(
                client_id=self.client_id, receive_size=_RECEIVE_SIZE, large=_LARGE_FRAME, buffers=_FRAME_BUFFERS
            )
            transport, _protocol = await wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: _Receiver(self, conn), self.host, self.port, ssl=tls,
                    server_hostname=self.host if tls else None,
                ),
                self.timeout,
            )
            self.conn = conn
            self._transport = transport
            if sec is not None and sec.sasl is not None:
                steps = sasl_exchange(sec.sasl(), lambda cls: _SASL_VERSIONS[cls.API_KEY])
                try:
                    step = next(steps)
                    while True:
                        step = steps.send(await self._send(*step))
                except StopIteration:
                    pass
                except KafkaError as exc:
                    self._fail(ConnectionError(f"authentication with {self.host}:{self.port} failed: {exc}"))
                    raise ConnectionError(f"authentication with {self.host}:{self.port} failed: {exc}") from exc
            self._ready = True

    async def request(self, message: Message, version: int, timeout: float | None = None) -> Any:
        """Send one request and wait for its response; raises ConnectionError / TimeoutError."""
        try:
            if not self.connected:
                await self._connect()
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return await self._send(message, version, timeout)

    async def _send(self, message: Message, version: int, timeout: float | None = None) -> Any:
        if self.conn is None or self._transport is None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        cid, data = self.conn.send_request(message, version)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        self._transport.write(data)
        try:
            return await wait_for(fut, self.timeout if timeout is None else timeout)
        except TimeoutError:
            self._fail(ConnectionError(f"request to {self.host}:{self.port} timed out"))
            raise

    def _received(self, conn: ClientConnection) -> None:
        """Answer the requests whose responses are complete (from :class:`_Receiver`)."""
        if conn is not self.conn:  # a connection given up on
            return
        while True:
            ev = conn.next_event()
            if ev is NEED_DATA:
                return
            if isinstance(ev, ConnectionClosed):
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            assert isinstance(ev, ResponseReceived)
            fut = self._pending.pop(ev.correlation_id, None)
            if fut is not None and not fut.done():
                fut.set_result(ev.response)

    def _fail(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self.conn = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    async def close(self) -> None:
        self._fail(ConnectionError("channel closed"))


class _Receiver(asyncio.BufferedProtocol):
    """A channel's connection: bytes go where its :class:`ClientConnection` says (see
    :meth:`FrameReader.buffer`), and every complete response answers its request."""

    def __init__(self, channel: BrokerChannel, conn: ClientConnection) -> None:
        self.channel = channel
        self.conn = conn

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self.conn.filled(nbytes)
            self.channel._received(self.conn)
        except (ConnectionError, ProtocolError) as exc:
            self._lost(exc)

    def eof_received(self) -> bool | None:
        self.conn.receive_data(b"")
        try:
            self.channel._received(self.conn)
        except (ConnectionError, ProtocolError) as exc:
            self._lost(exc)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc or ConnectionError(f"{self.channel.host}:{self.channel.port} closed the connection"))

    def _lost(self, exc: BaseException) -> None:
        channel = self.channel
        if channel.conn is self.conn:
            channel._fail(exc if isinstance(exc, ConnectionError) else ConnectionError(str(exc)))
