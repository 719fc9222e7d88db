"""Broker-to-broker connections: the controller's channel to each broker, followers' fetchers.

Every broker in a cluster runs this version of Odradek, so requests use the versions the
sans-I/O codec knows (no ApiVersions round trip).  A :class:`BrokerChannel` connects lazily,
pipelines requests and fails every pending one when the connection breaks; callers retry.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from odradek.protocol import ConnectionClosed, Message, ProtocolError, ResponseReceived
from odradek.protocol.connection import NEED_DATA, ClientConnection

__all__ = ["BrokerChannel"]


class BrokerChannel:
    def __init__(self, host: str, port: int, *, client_id: str, timeout: float = 30.0) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = timeout
        self.conn: ClientConnection | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._connecting: asyncio.Lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _connect(self) -> None:
        async with self._connecting:
            if self.connected:
                return
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout)
            self.conn = ClientConnection(client_id=self.client_id)
            self._writer = writer
            self._reader = asyncio.get_running_loop().create_task(self._read(reader, self.conn))

    async def request(self, message: Message, version: int, timeout: float | None = None) -> Any:
        """Send one request and wait for its response; raises ConnectionError / TimeoutError."""
        try:
            if not self.connected:
                await self._connect()
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        assert self.conn is not None and self._writer is not None
        cid, data = self.conn.send_request(message, version)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        self._writer.write(data)
        try:
            return await asyncio.wait_for(fut, self.timeout if timeout is None else timeout)
        except TimeoutError:
            self._fail(ConnectionError(f"request to {self.host}:{self.port} timed out"))
            raise

    async def _read(self, reader: asyncio.StreamReader, conn: ClientConnection) -> None:
        try:
            while True:
                data = await reader.read(1 << 20)
                conn.receive_data(data)
                while True:
                    ev = conn.next_event()
                    if ev is NEED_DATA:
                        break
                    if isinstance(ev, ConnectionClosed):
                        raise ConnectionError(f"{self.host}:{self.port} closed the connection")
                    assert isinstance(ev, ResponseReceived)
                    fut = self._pending.pop(ev.correlation_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(ev.response)
        except asyncio.CancelledError:
            self._fail(ConnectionError("channel closed"))
            raise
        except (OSError, ConnectionError, ProtocolError) as exc:
            self._fail(exc if isinstance(exc, ConnectionError) else ConnectionError(str(exc)))

    def _fail(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def close(self) -> None:
        self._fail(ConnectionError("channel closed"))
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
