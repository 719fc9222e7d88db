"""A pipelined connection to one broker on an asyncio event loop.

The connection frames its requests and responses itself (4-byte size, then the request or
response with its header) on an :class:`asyncio.BufferedProtocol`: a large response is read by
the socket straight into one buffer of its size and decoded from there, so a fetch response's
records (views of that buffer) are never copied on their way in.  Requests are written at once
and answered in the order they were sent; each gets a future.  When the connection breaks or a
request times out, the connection closes and every request still waiting fails: a connection
whose answers cannot be trusted any more is not used again (its owner opens a new one).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from odradek._timeouts import wait_for
from odradek.protocol import Message, ProtocolError
from odradek.protocol.connection import DEFAULT_MAX_FRAME_SIZE, FrameBuffers, FrameReader

from ._buffers import FRAMES, SMALL_FRAME
from ._ops import drive
from .connect import open_stream
from .session import Security, Session

__all__ = ["AsyncBrokerConnection"]


@runtime_checkable
class _Writable(Protocol):
    """What a connection does with its transport (uvloop's transports are not subclasses of
    asyncio.Transport, so they are checked by what they have)."""

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    def close(self) -> None: ...


class _FrameStream(asyncio.BufferedProtocol):
    """The socket side of a connection: reads size-prefixed frames and hands each payload to
    the connection (a buffer of its own: ``bytearray`` or ``memoryview``); flow control for
    writes (:meth:`drain`).

    A :class:`FrameReader` says where the bytes go: a frame of ``large`` bytes or more is read
    by the transport straight into a buffer of its size (``recv_into``), so a fetch response of
    many megabytes is never copied or regrown on its way in.  Those buffers come from the
    connection's spares (see :mod:`odradek.transport._buffers`)."""

    def __init__(self, conn: AsyncBrokerConnection, reader: FrameReader) -> None:
        self.conn = conn
        self.transport: _Writable | None = None
        self._reader = reader
        self._paused = False
        self._lost = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, _Writable)
        self.transport = transport

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
        self.conn._fail(ConnectionError(f"{self.conn.who} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake(ConnectionError("connection lost"))
        reason = f": {exc}" if exc is not None else ""
        self.conn._fail(ConnectionError(f"connection to {self.conn.who} lost{reason}"))

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


class AsyncBrokerConnection(Session):
    """One connection to one broker; requests are pipelined and answered in order.

    ``AsyncBrokerConnection(node_id, host, port, client_id=..., request_timeout_ms=...)``, then
    ``await connect(timeout)`` (which runs the handshake, see :class:`Session`).  ``versions``,
    ``handshake``: see :class:`Session`; ``receive_size``, ``large``, ``buffers``: see
    :class:`~odradek.protocol.connection.FrameReader` (by default large frames use the
    process's shared spares)."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        client_id: str | None,
        request_timeout_ms: int,
        security: Security | None = None,
        versions: Mapping[int, tuple[int, int]] | None = None,
        handshake: bool = True,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        receive_size: int = 2 * SMALL_FRAME + 8,
        large: int = SMALL_FRAME,
        buffers: FrameBuffers = FRAMES,
    ) -> None:
        super().__init__(
            node_id, host, port, client_id=client_id, timeout=request_timeout_ms / 1000, security=security,
            versions=versions, handshake=handshake, max_frame_size=max_frame_size,
        )
        self._reader_args = (receive_size, large, buffers)
        self._stream: _FrameStream | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}

    async def connect(self, timeout: float) -> None:
        """Open the connection (within ``timeout`` s) and run the handshake.  ConnectionError
        when the broker cannot be reached, KafkaError when the handshake fails."""
        receive_size, large, buffers = self._reader_args
        reader = FrameReader(self.max_frame_size, receive_size=receive_size, large=large, buffers=buffers)
        tls = self.security.tls if self.security is not None else None
        try:
            stream = await open_stream(self.host, self.port, lambda: _FrameStream(self, reader), tls=tls, timeout=timeout)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._stream = stream
        if self.closed:  # closed while connecting
            if stream.transport is not None:
                stream.transport.close()
            raise ConnectionError(f"connection to {self.who} is closed")
        await drive(self.handshake(), conn=self)

    def send(self, message: Message, version: int | None = None, expect_response: bool = True) -> asyncio.Future[Any]:
        """Write a request now; the future completes with its response (or None without one)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)  # a caller that timed out must not leave it unread
        stream = self._stream
        if self.closed or stream is None or stream.transport is None:
            fut.set_exception(ConnectionError(f"connection to {self.who} is closed"))
            return fut
        v = self.version_for(type(message)) if version is None else version
        cid, data = self.codec.send_request(message, v, expect_response)
        stream.transport.write(data)
        if expect_response:
            self._pending[cid] = fut
        else:
            fut.set_result(None)
        return fut

    # the response is Any: its class depends on the request's (every request class has one)
    async def request(self, message: Message, version: int | None = None, timeout: float | None = None) -> Any:
        """Send ``message`` and wait up to ``timeout`` s (default: the request timeout) for its
        response.  On a timeout the connection is closed (the answers after this one cannot be
        trusted either) and TimeoutError raised."""
        fut = self.send(message, version)
        try:
            return await wait_for(asyncio.shield(fut), self.timeout if timeout is None else timeout)
        except TimeoutError as exc:
            self._fail(TimeoutError(f"request to {self.who} timed out"))
            raise TimeoutError(f"no response from {self.where}") from exc

    async def drain(self) -> None:
        """Wait until the connection takes more writes (flow control)."""
        if self._stream is not None and not self.closed:
            await self._stream.drain()

    def _on_frame(self, payload: bytearray | memoryview) -> None:
        """One response frame (without its size): decode it and complete its request."""
        if self.closed:
            return
        try:
            event = self.receive_frame(payload)
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
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._stream is not None and self._stream.transport is not None:
            self._stream.transport.close()

    async def close(self) -> None:
        self._fail(ConnectionError("connection closed"))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
