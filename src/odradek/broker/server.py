"""The network layer: one ``asyncio.BufferedProtocol`` per connection.

Bytes land in a page-aligned receive buffer owned by the connection (``mmap``), are framed and
decoded by the sans-I/O :class:`~odradek.protocol.ServerConnection`, and requests are handled one
at a time per connection in arrival order, as Kafka does — pipelined requests queue up and their
responses leave in order.  A frame above ``socket.request.max.bytes`` or that cannot be decoded
closes that connection only.  When the peer stops reading (the transport's write buffer passes
its high-water mark) the connection stops reading and handling requests until it drains.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from odradek.broker.dispatch import HANDLERS, RequestContext, supported_versions
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import (
    NEED_DATA,
    ApiKey,
    BadRequest,
    ConnectionClosed,
    ProtocolError,
    RequestReceived,
    ServerConnection,
    UnsupportedVersion,
)
from odradek.protocol.messages import RequestHeader, response_class
from odradek.protocol.messages.api_versions import ApiVersionsResponse

if TYPE_CHECKING:
    from odradek.broker.app import Broker

__all__ = ["KafkaConnection", "api_versions_response"]

log = logging.getLogger(__name__)
access = logging.getLogger("odradek.access")

_RECV_BUFFER = 256 * 1024
_OUT_BUFFER = 1 << 20


def api_versions_response(error_code: int = 0) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in supported_versions().items()
        ],
    )


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker, listener: str) -> None:
        self.broker = broker
        self.listener = listener
        self.conn = ServerConnection(max_frame_size=broker.config.get("socket.request.max.bytes"))
        self.transport: asyncio.Transport | None = None
        self._mem = mmap.mmap(-1, _RECV_BUFFER)
        self._view = memoryview(self._mem)
        self._out: mmap.mmap | None = None
        self._queue: deque[RequestReceived | BadRequest] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._closing = False
        self._reading_paused = False
        self.peer = "?"
        self.last_active = time.monotonic()

    # -- asyncio protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.broker.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            self.conn.receive_data(self._view[:nbytes])
            self._pump()
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()

    def eof_received(self) -> bool | None:
        self.conn.receive_data(b"")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self.broker.connections.discard(self)
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
        self._queue.clear()
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()
        self._pause_reading()

    def resume_writing(self) -> None:
        self._writable.set()
        self._maybe_resume_reading()

    # -- flow ----------------------------------------------------------------------------------
    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self._closing:
            self._reading_paused = True
            self.transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._reading_paused
            and self._writable.is_set()
            and len(self._queue) < self.broker.max_queued
            and self.transport is not None
            and not self._closing
        ):
            self._reading_paused = False
            self.transport.resume_reading()

    def _pump(self) -> None:
        while True:
            ev = self.conn.next_event()
            if ev is NEED_DATA:
                break
            if isinstance(ev, ConnectionClosed):
                if not self._queue and self._worker is None:
                    self.close()
                break
            assert isinstance(ev, (RequestReceived, BadRequest))
            self._queue.append(ev)
        if len(self._queue) >= self.broker.max_queued:
            self._pause_reading()
        if self._queue and (self._worker is None or self._worker.done()):
            self._worker = asyncio.get_running_loop().create_task(self._work())

    def close(self) -> None:
        if not self._closing and self.transport is not None:
            self._closing = True
            self.transport.close()

    # -- request handling ----------------------------------------------------------------------
    async def _work(self) -> None:
        try:
            while self._queue and not self._closing:
                ev = self._queue.popleft()
                self._maybe_resume_reading()
                if isinstance(ev, BadRequest):
                    bad = self._bad_request(ev)
                    parts: list[Any] | None = None if bad is None else [bad]
                else:
                    parts = await self._handle(ev)
                if parts is None:  # connection must close
                    self.close()
                    return
                if parts and self.transport is not None and not self._closing:
                    self._write(parts)
                    if not self._writable.is_set():
                        await self._writable.wait()
            if self.conn.in_flight == 0 and self.conn.peer_closed:
                self.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection %s failed", self.peer)
            self.close()

    def _write(self, parts: list[Any]) -> None:
        """Write responses; file regions are read straight into one page-aligned buffer (no
        Python bytes objects for record data) and the whole buffer goes out in one write."""
        assert self.transport is not None
        if all(type(p) is bytes for p in parts):
            self.transport.write(parts[0] if len(parts) == 1 else b"".join(parts))
            return
        total = sum(len(p) if type(p) is bytes else p.length for p in parts)
        out = self._out
        if out is None or len(out) < total:
            out = mmap.mmap(-1, max(_OUT_BUFFER, (total + _OUT_BUFFER - 1) // _OUT_BUFFER * _OUT_BUFFER))
        view = memoryview(out)
        pos = 0
        for p in parts:
            if type(p) is bytes:
                n = len(p)
                view[pos : pos + n] = p
            else:
                n = p.length
                got = os.preadv(p.fd, [view[pos : pos + n]], p.position)
                if got != n:
                    raise OSError(f"short read of a log segment ({got} of {n} bytes)")
            pos += n
        self.transport.write(view[:total])
        # reuse the buffer only if the transport sent everything (it may keep a reference)
        self._out = out if self.transport.get_write_buffer_size() == 0 else None

    def _bad_request(self, ev: BadRequest) -> bytes | None:
        header = ev.header
        if header is not None and header.api_key == ApiKey.API_VERSIONS and isinstance(ev.error, UnsupportedVersion):
            # Kafka answers an ApiVersions request it cannot parse with a v0 body and error 35
            v0 = RequestHeader(
                api_key=header.api_key, api_version=0, correlation_id=header.correlation_id, client_id=None
            )
            return self.conn.send_response(v0, api_versions_response(ErrorCode.UNSUPPORTED_VERSION))
        log.info("closing connection from %s after a request it could not decode: %s", self.peer, ev.error)
        return None

    async def _handle(self, ev: RequestReceived) -> list[Any] | None:
        header = ev.header
        entry = HANDLERS.get(header.api_key)
        if entry is None or not entry.min_version <= header.api_version <= entry.max_version:
            if header.api_key == ApiKey.API_VERSIONS:
                v0 = RequestHeader(
                    api_key=header.api_key, api_version=0, correlation_id=header.correlation_id, client_id=None
                )
                return [self.conn.send_response(v0, api_versions_response(ErrorCode.UNSUPPORTED_VERSION))]
            log.info(
                "closing connection from %s: unsupported API %s v%s", self.peer, header.api_key, header.api_version
            )
            return None
        ctx = RequestContext(self.broker, header, self.peer.rsplit(":", 1)[0], self.listener)
        try:
            response = await entry.handler(ctx, ev.message)
        except KafkaError as exc:
            response = _error_response(header, exc.code)
            if response is None:
                log.info("closing connection from %s: %s", self.peer, exc)
                return None
        except Exception:
            log.exception("error handling %s v%s from %s", ApiKey(header.api_key).name, header.api_version, self.peer)
            response = _error_response(header, ErrorCode.UNKNOWN_SERVER_ERROR)
            if response is None:
                return None
        if access.isEnabledFor(logging.DEBUG):
            access.debug("%s %s v%d cid=%d", self.peer, ApiKey(header.api_key).name, header.api_version, header.correlation_id)
        if response is None:
            return self.conn.no_response_parts(header)
        return self.conn.send_response_parts(header, response)


def _error_response(header: RequestHeader, code: ErrorCode) -> Any:
    """A response carrying ``code`` in its top-level error field, if the API has one."""
    cls = response_class(header.api_key)
    attrs = {f.attr for f in cls._fields_ if f.versions is not None and f.versions[0] <= header.api_version <= f.versions[1]}
    if "error_code" not in attrs:
        return None
    resp = cls()
    resp.error_code = int(code)  # type: ignore[attr-defined]
    return resp
