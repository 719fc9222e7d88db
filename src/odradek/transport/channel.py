"""A connection that opens itself when used: what the broker's controller, replica fetchers,
transaction coordinator and controlled shutdown use to reach other brokers.

A :class:`Channel` opens its :class:`~odradek.transport.AsyncBrokerConnection` on the first
request, and a new one on the first request after the last one broke or timed out (the requests
waiting on it fail, and their callers retry).  Connecting and authenticating failures are raised
as ConnectionError, so a caller tells "cannot reach" from "timed out" and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from odradek.errors import KafkaError
from odradek.protocol import Message
from odradek.protocol.connection import DEFAULT_MAX_FRAME_SIZE, FrameBuffers

from ._buffers import FRAMES, SMALL_FRAME
from .aio import AsyncBrokerConnection
from .session import Security

__all__ = ["Channel"]


class Channel:
    """Requests to one ``host:port``, over a connection opened when needed.

    ``versions`` None: negotiated with ApiVersions on each new connection; given: used as they
    are (no round trip).  ``receive_size``, ``large``, ``buffers``: see
    :class:`~odradek.protocol.connection.FrameReader`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        timeout: float = 30.0,
        security: Security | None = None,
        versions: Mapping[int, tuple[int, int]] | None = None,
        receive_size: int = 2 * SMALL_FRAME + 8,
        large: int = SMALL_FRAME,
        buffers: FrameBuffers = FRAMES,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = timeout
        self.security = security
        self.versions = versions
        self._frames = (receive_size, large, buffers, max_frame_size)
        self.conn: AsyncBrokerConnection | None = None
        self._connecting = asyncio.Lock()

    @property
    def connected(self) -> bool:
        """Connected and, on a SASL listener, authenticated: requests may go."""
        return self.conn is not None and not self.conn.closed

    async def _connect(self) -> AsyncBrokerConnection:
        async with self._connecting:
            conn = self.conn
            if conn is not None and not conn.closed:
                return conn
            receive_size, large, buffers, max_frame_size = self._frames
            conn = AsyncBrokerConnection(
                -1, self.host, self.port, client_id=self.client_id, request_timeout_ms=int(self.timeout * 1000),
                security=self.security, versions=self.versions, receive_size=receive_size, large=large,
                buffers=buffers, max_frame_size=max_frame_size,
            )
            try:
                await conn.connect(self.timeout)
            except KafkaError as exc:
                await conn.close()
                raise ConnectionError(f"authentication with {self.host}:{self.port} failed: {exc}") from exc
            except (TimeoutError, OSError) as exc:
                await conn.close()
                if isinstance(exc, ConnectionError) and str(exc).startswith("cannot connect"):
                    raise
                raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
            self.conn = conn
            return conn

    async def request(self, message: Message, version: int, timeout: float | None = None) -> Any:
        """Send one request and wait for its response (Any: its class depends on the request's);
        raises ConnectionError / TimeoutError."""
        conn = self.conn
        if conn is None or conn.closed:
            conn = await self._connect()
        return await conn.request(message, version, self.timeout if timeout is None else timeout)

    async def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
