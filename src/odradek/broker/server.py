"""The network layer: one ``asyncio.BufferedProtocol`` per connection.

Bytes land in a page-aligned receive buffer of the connection's (``mmap``), or a large request
straight in a buffer of its own, are framed and decoded by the sans-I/O
:class:`~odradek.protocol.ServerConnection`, and requests are handled one
at a time per connection in arrival order, as Kafka does — pipelined requests queue up and their
responses leave in order.  A frame above ``socket.request.max.bytes`` or that cannot be decoded
closes that connection only.  When the peer stops reading (the transport's write buffer passes
its high-water mark) the connection stops reading and handling requests until it drains.

On a SASL listener a connection that has not authenticated may send frames of at most
``sasl.server.max.receive.size`` bytes: a larger size prefix fails the authentication before any
buffer is made for it.  A failed authentication mutes the connection (nothing more is read from
it, nothing it pipelined is handled), holds its answer back for
``connection.failed.authentication.delay.ms``, then sends it and closes the connection the same
delay later (Kafka's ``DelayedResponseAuthenticationException``): see
:mod:`odradek.broker.authentication` and :mod:`odradek.broker.auth_gate`.

Handlers run as soon as their request is decoded, inside the protocol callback: one that answers
without waiting (produce with acks=0/1, a fetch with data ready) costs no task, and responses
made ready by one read leave in one write.  A handler that waits continues in a task (coroutine
handlers) or through its own callbacks (a :class:`~odradek.broker.dispatch.Deferred`, the fetch
long poll), and the requests behind it wait their turn.

The connection keeps the order of requests and responses, the queue, the flow control and the
request handling; its collaborators own the rest: :class:`~odradek.broker.auth_gate.AuthenticationGate`
(the receive limit before authentication, the SASL v0 tokens, the failed-authentication mute),
:class:`~odradek.broker.throttling.Throttle` (the client-quota charge and the throttle's mute) and
:class:`~odradek.broker.responses.ResponseWriter` (sendfile, the page-aligned response buffers).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from functools import partial
from typing import TYPE_CHECKING, Any

from odradek._scheduler import LoopScheduler, Scheduler
from odradek.broker.advertised import RESTRICTED_APIS, api_versions_response, served
from odradek.broker.auth_gate import AuthenticationGate
from odradek.broker.authentication import ListenerSecurity, Session
from odradek.broker.dispatch import HANDLERS, Deferred, RequestContext
from odradek.broker.logdirs import is_io_error
from odradek.broker.responses import ResponseWriter
from odradek.broker.throttling import Throttle
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import FETCH_FOLLOWER, BrokerMetrics
from odradek.protocol import (
    NEED_DATA,
    ApiKey,
    BadRequest,
    ConnectionClosed,
    InvalidFrame,
    Message,
    ProtocolError,
    RequestReceived,
    RequestTooLarge,
    SaslTokenReceived,
    ServerConnection,
    TopicLimit,
    UnsupportedVersion,
    error_response,
)
from odradek.protocol.connection import FrameBuffers
from odradek.protocol.messages import RequestHeader

if TYPE_CHECKING:
    from odradek.broker.ports import Ports

__all__ = ["KafkaConnection", "api_versions_response"]

log = logging.getLogger(__name__)
access = logging.getLogger("odradek.access")

_RECV_BUFFER = 256 * 1024
# requests of this size or more (produce requests of big batches) are read straight into a buffer
# of their own, from the spares all connections share (one event loop), not copied out of the
# receive buffer: the kernel's copy is the only one
_LARGE_FRAME = 64 * 1024
_FRAME_BUFFERS = FrameBuffers(32 << 20)
# responses handled together go out in one write, up to this many parts at a time
_MAX_COALESCED = 64
# one connection's queued requests are handled in one callback for at most this long (then the
# rest continue in a later callback, after other connections' events): pipelined heavy requests
# (whole-cluster Metadata...) on one connection cannot hold the event loop for long
_RUN_BUDGET = 0.005
# metrics, per request: plain ints and a local clock (no enum or module attribute lookups)
_FETCH = int(ApiKey.FETCH)
_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)
_perf_counter = time.perf_counter


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection: owns its receive side, the queue of its decoded requests, their
    handling in order and the flow control (pausing when the peer stops reading); its
    authentication gate, throttle and response writer own the rest (see the module's text)."""

    def __init__(
        self,
        ports: Ports,
        listener: str,
        connections: set[KafkaConnection],
        max_queued: int,
        security: ListenerSecurity,
        *,
        on_close: Callable[[], None] | None = None,
        timers: Scheduler | None = None,
    ) -> None:
        """A connection on ``listener``, registered in ``connections`` while open; at most
        ``max_queued`` of its requests wait to be handled (``queued.max.requests``);
        ``security`` says who it is and what it must do first (TLS, SASL).  ``timers`` (the
        broker's; the event loop's by default) schedules the delayed answer of a failed
        authentication and the end of a quota's mute, on its clock."""
        self.ports = ports
        self.listener = listener
        self.security = security
        self.session: Session = security.session(None)
        self._on_close = on_close  # the connection quotas' release: called once, when the connection is lost
        self.connections = connections
        self.max_queued = max_queued
        settings = ports.connection.settings
        self.conn = ServerConnection(
            max_frame_size=settings.socket.request_max_bytes,
            check=TopicLimit(settings.server.request_max_topics),
            receive_size=_RECV_BUFFER,
            large=_LARGE_FRAME,
            buffers=_FRAME_BUFFERS,
        )
        timers = timers or LoopScheduler()  # shared with the collaborators below
        self._clock = timers.clock
        # the receive limit before SASL authentication, and the mute of a failed authentication
        self._auth = AuthenticationGate(
            self.conn, self.session, listener, ports.connection.metrics, timers,
            stop=self._stop_for_failed_authentication, is_open=lambda: not self._closing and self.transport is not None,
            write=self._write, close=self.close,
        )
        self.transport: asyncio.Transport | None = None
        self._writer = ResponseWriter(self.close)
        self._queue: deque[RequestReceived | BadRequest | SaslTokenReceived] = deque()
        # what the connection waits for: the task that carries on while a handler waits or the
        # peer is not reading, or a handler's Deferred; None while requests are handled
        # synchronously (see _run)
        self._worker: asyncio.Task[None] | _Waiting | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._closing = False
        self._reading_paused = False
        self._write_paused = False  # the transport's buffer is above its high-water mark
        self._run_scheduled = False
        self.peer = "?"
        self.client_host = "?"
        self.last_active = self._clock.monotonic_ms()
        # client quotas (None: off): the charge of the request being handled, and the mute of a
        # throttled connection (it reads and handles nothing)
        quotas = ports.connection.quotas
        self._throttle: Throttle | None = None if quotas is None else Throttle(
            quotas, ports.connection.metrics, self.conn, timers,
            pause=self._throttled, resume=self._unthrottled, closing=lambda: self._closing,
        )
        # whether any quota is configured is read per request, from the manager (it changes with
        # the quota configs): no charge is started, nor looked at, while none is
        self._quotas = quotas
        # metrics (None: off): the request being handled — its metric key (the API key, or
        # FETCH_FOLLOWER) and when its handling began (one request at a time per connection)
        self._metrics = ports.connection.metrics
        self._req_key = 0
        self._req_t0 = 0.0
        # fault scripting (None: not a test broker), and the client id of the last request (for it)
        self._faults = getattr(ports.connection, "faults", None)
        self.client_id: str | None = None

    # -- asyncio protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = self.peer.rsplit(":", 1)[0]
        self.connections.add(self)
        if self._metrics is not None:
            self._metrics.count(self._metrics.connections_created, self.listener)
        if self.security.tls:
            tls = transport.get_extra_info("ssl_object")
            certificate = tls.getpeercert(binary_form=True) if tls is not None else None
            self.session = self.security.session(certificate)
        elif hasattr(os, "sendfile"):
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.fileno() >= 0:
                self._writer.use_socket(sock)  # sendfile: plaintext connections only
        self.session.client_port = str(peer[1]) if peer else ""

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._clock.monotonic_ms()
        try:
            self.conn.filled(nbytes)
            self._pump()
        except ProtocolError as exc:
            if self._auth.pre_auth and isinstance(exc, InvalidFrame):
                # Kafka's InvalidReceiveException before authentication: the authentication fails
                self._auth.invalid_receive(self.session, exc, self.client_host, self.peer)
                return
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()

    def eof_received(self) -> bool | None:
        self.conn.receive_data(b"")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()
        closed = self.ports.connection.closed
        if closed is not None:  # its share sessions end with it: their records go back to the others
            closed(self.session)
        self.connections.discard(self)
        if self._metrics is not None:
            self._metrics.count(self._metrics.connections_closed, self.listener)
        worker = self._worker
        if isinstance(worker, _Waiting):
            self._worker = None
            assert worker.deferred is not None
            worker.deferred.cancel()
        elif worker is not None and not worker.done():
            worker.cancel()
        self._queue.clear()
        self._writable.set()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._writable.clear()
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._throttle is None or not self._throttle.muted:
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
            and len(self._queue) < self.max_queued
            and self.transport is not None
            and not self._closing
            and not self._auth.failed
        ):
            self._reading_paused = False
            self.transport.resume_reading()

    def _pump(self) -> None:
        if self._auth.failed:  # muted: whatever else arrived is never looked at
            return
        queue = self._queue
        next_event = self.conn.next_event
        while True:
            ev = next_event()
            if ev is NEED_DATA:
                break
            if isinstance(ev, ConnectionClosed):
                if not queue and self._worker is None:
                    self.close()
                break
            assert isinstance(ev, (RequestReceived, BadRequest, SaslTokenReceived))
            queue.append(ev)
        if len(queue) >= self.max_queued:
            self._pause_reading()
        if queue and self._worker is None:
            self._run()

    def close(self) -> None:
        if not self._closing and self.transport is not None:
            self._closing = True
            self.transport.close()

    # -- request handling ----------------------------------------------------------------------
    def _run(self) -> None:
        """Handle the queued requests in order, right here while their handlers complete without
        waiting (no task per request); responses that become ready together leave in one write.
        The first handler that must wait (long-poll fetch, acks=all, a flush, a coordinator...)
        or a peer that stopped reading hands the rest of the queue to a task (:meth:`_work`)."""
        queue = self._queue
        out: list[Any] = []
        deadline = time.monotonic() + _RUN_BUDGET
        try:
            while queue and not self._closing:
                if not self._writable.is_set():  # the peer is not reading: wait in a task
                    if out:
                        self._write(out)
                    self._worker = asyncio.get_running_loop().create_task(self._work(None))
                    return
                ev = queue.popleft()
                if self._reading_paused:
                    self._maybe_resume_reading()
                if type(ev) is RequestReceived:
                    result = self._start(ev)
                elif type(ev) is SaslTokenReceived:
                    result = self._auth.sasl_token(self.session, ev, self.client_host)
                else:
                    bad = self._bad_request(ev)  # type: ignore[arg-type]
                    result = None if bad is None else [bad]
                if self.session.close_after is not None and not isinstance(result, _Waiting):
                    # the authentication failed: answer late, nothing more from this connection
                    if out:
                        self._write(out)
                    self._auth.fail(self.session, result, self.peer)
                    return
                if result is None:  # connection must close
                    if out:
                        self._write(out)
                    self.close()
                    return
                if not isinstance(result, list):  # the handler waits; the rest of the queue too
                    if out:
                        self._write(out)
                    if not self._closing:
                        if result.deferred is not None:  # its callbacks carry on (_deferred_done)
                            self._worker = result
                            result.deferred.start(partial(self._deferred_done, result))
                        else:
                            self._worker = asyncio.get_running_loop().create_task(self._work(result))
                    return
                if result:
                    out += result
                    # a response with file regions (fetch data) goes out at once
                    if len(result) > 1 or len(out) >= _MAX_COALESCED:
                        self._write(out)
                        out = []
                if queue and time.monotonic() > deadline:  # the rest after other connections' turn
                    if out:
                        self._write(out)
                    self._run_soon()
                    return
            if out:
                self._write(out)
            if not queue and self.conn.in_flight == 0 and self.conn.peer_closed:
                self.close()
        except Exception:
            log.exception("connection %s failed", self.peer)
            self.close()

    def _run_soon(self) -> None:
        if not self._run_scheduled:
            self._run_scheduled = True
            asyncio.get_running_loop().call_soon(self._run_later)

    def _run_later(self) -> None:
        self._run_scheduled = False
        if self._queue and self._worker is None and not self._closing:
            self._run()

    async def _work(self, waiting: _Waiting | None) -> None:
        """Carry on from a handler that had to wait (``waiting``), then with the queue."""
        try:
            if waiting is not None:
                parts = await self._finish(waiting)
                if not self._respond_parts(parts):
                    return
            while not self._writable.is_set() and not self._closing:
                await self._writable.wait()
            deadline = time.monotonic() + _RUN_BUDGET
            while self._queue and not self._closing:
                if time.monotonic() > deadline:  # let other connections in
                    await asyncio.sleep(0)
                    deadline = time.monotonic() + _RUN_BUDGET
                    if self._closing:
                        break
                ev = self._queue.popleft()
                self._maybe_resume_reading()
                if type(ev) is RequestReceived:
                    result = self._start(ev)
                    if isinstance(result, _Waiting):
                        result = await self._finish(result)
                elif type(ev) is SaslTokenReceived:
                    result = self._auth.sasl_token(self.session, ev, self.client_host)
                else:
                    bad = self._bad_request(ev)  # type: ignore[arg-type]
                    result = None if bad is None else [bad]
                if self.session.close_after is not None:
                    self._auth.fail(self.session, result, self.peer)
                    return
                if not self._respond_parts(result):
                    return
                if not self._writable.is_set():
                    await self._writable.wait()
            if self.conn.in_flight == 0 and self.conn.peer_closed:
                self.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection %s failed", self.peer)
            self.close()
        finally:
            self._worker = None  # this task (a connection has one worker at a time)
        # requests that arrived while the last one completed (nothing else runs them)
        if self._queue and not self._closing and self._worker is None:
            self._run()

    def _deferred_done(self, waiting: _Waiting, response: Message | None, exc: BaseException | None) -> None:
        """A Deferred that :meth:`_run` left waiting completed: answer, then go on with the queue."""
        if self._worker is not waiting:  # the connection was lost meanwhile
            return
        self._worker = None
        parts: list[Any] | None
        try:
            if exc is None:
                parts = self._response_parts(waiting.header, response)
            elif isinstance(exc, Exception):
                parts = self._failed(waiting.header, waiting.request, exc)
            else:
                raise exc
            if not self._respond_parts(parts):
                return
        except Exception:
            log.exception("connection %s failed", self.peer)
            self.close()
            return
        if self._queue and not self._closing:
            self._run()
        elif self.conn.in_flight == 0 and self.conn.peer_closed:
            self.close()

    def _respond_parts(self, parts: list[Any] | None) -> bool:
        """Write a response's parts; False when the connection must close (and is closed)."""
        if parts is None:
            self.close()
            return False
        if parts and self.transport is not None and not self._closing:
            self._write(parts)
        return True

    def _write(self, parts: list[Any]) -> None:
        """Write responses (see :class:`~odradek.broker.responses.ResponseWriter`)."""
        transport = self.transport
        assert transport is not None
        if not self._closing:
            self._writer.write(transport, parts)

    def _bad_request(self, ev: BadRequest) -> bytes | None:
        header = ev.header
        if header is not None and header.api_key == ApiKey.API_VERSIONS and isinstance(ev.error, UnsupportedVersion):
            # Kafka answers an ApiVersions request it cannot parse with a v0 body and error 35
            v0 = RequestHeader(
                api_key=header.api_key, api_version=0, correlation_id=header.correlation_id, client_id=None
            )
            return self.conn.send_response(
                v0, api_versions_response(ErrorCode.UNSUPPORTED_VERSION, self.ports.features, self.listener)
            )
        if isinstance(ev.error, RequestTooLarge):
            log.warning("closing connection from %s: %s", self.peer, ev.error)
        else:
            log.info("closing connection from %s after a request it could not decode: %s", self.peer, ev.error)
        return None

    def _start(self, ev: RequestReceived) -> list[Any] | _Waiting | None:
        """Run a request's handler up to its first wait.  Returns the response's parts ready to
        write (in order with earlier responses), ``None`` when the connection must close, or a
        :class:`_Waiting` for :meth:`_finish` when the handler waits for something."""
        header = ev.header
        entry = HANDLERS.get(header.api_key)
        if (
            entry is None or not entry.min_version <= header.api_version <= entry.max_version
            or (header.api_key in RESTRICTED_APIS and not served(self.ports.features, self.listener, header.api_key))
        ):
            if header.api_key == ApiKey.API_VERSIONS:
                v0 = RequestHeader(
                    api_key=header.api_key, api_version=0, correlation_id=header.correlation_id, client_id=None
                )
                return [self.conn.send_response(
                    v0, api_versions_response(ErrorCode.UNSUPPORTED_VERSION, self.ports.features, self.listener)
                )]
            log.info(
                "closing connection from %s: unsupported API %s v%s", self.peer, header.api_key, header.api_version
            )
            return None
        session = self.session
        if (
            session.expires_at is not None and session.expired(self._clock.monotonic_ms())
            and header.api_key not in (17, 36)
        ):
            log.info(
                "closing connection from %s on listener %s: its SASL session expired (connections.max.reauth.ms) "
                "and the client did not re-authenticate", self.peer, self.listener,
            )
            return None
        if not self.session.allows(header.api_key):
            log.info(
                "closing connection from %s: %s request on listener %s before SASL authentication",
                self.peer, _api_name(header.api_key), self.listener,
            )
            return None
        wait: Awaitable[None] | None = None
        faults = self._faults
        if faults is not None:  # a test broker: the request-dispatch boundary of fault scripting
            verdict = faults.gate(
                self, header.api_key, header.api_version, header.client_id, header.correlation_id, ev.message
            )
            if verdict is not None:
                if verdict.error is not None:  # answered without running the handler: nothing written
                    return self._failed(header, ev.message, verdict.error)
                if verdict.close:
                    return None
                wait = verdict.wait
        quotas = self._quotas
        if quotas is not None and quotas.active:
            assert self._throttle is not None
            self._throttle.start(ev)
        if self._metrics is not None:
            key = header.api_key
            if key == _FETCH:
                msg = ev.message
                if (msg.replica_state.replica_id if header.api_version >= 15 else msg.replica_id) >= 0:
                    key = FETCH_FOLLOWER
            self._req_key = key
            self._req_t0 = _perf_counter()
        ctx = RequestContext(self.ports, header, self.client_host, self.listener, self.session)
        if wait is not None:  # a delayed or held request: its handler runs after the wait
            coro = _handle_after(wait, entry.handler, entry.sync, ctx, ev.message)
        elif entry.sync:
            try:
                result = entry.handler(ctx, ev.message)
            except Exception as exc:
                return self._failed(header, ev.message, exc)
            if self.session.raw_tokens or self._auth.pre_auth:  # the SASL exchange went on
                self._auth.handled(self.session)
            if result is None or isinstance(result, Message):
                return self._response_parts(header, result)
            if isinstance(result, Deferred):
                return self._waits(_Waiting(header, ev.message, None, result))
            coro = result  # the handler must wait: its coroutine goes on below
        else:
            coro = entry.handler(ctx, ev.message)
        # drive the handler's coroutine by hand: most requests never wait (a coordinator answer
        # at hand, a fetch with data ready...), and then no task is created for them
        try:
            first = coro.send(None)
        except StopIteration as stop:
            return self._response_parts(header, stop.value)
        except Exception as exc:
            return self._failed(header, ev.message, exc)
        return self._waits(_Waiting(header, ev.message, _Resumed(coro, first)))

    def _waits(self, waiting: _Waiting) -> _Waiting:
        """A handler waits: the time it held the event loop so far is what it costs (request
        quotas count handler time, not time spent waiting)."""
        if self._throttle is not None:
            self._throttle.waits()
        return waiting

    async def _finish(self, waiting: _Waiting) -> list[Any] | None:
        """The rest of a handler that waited, as :meth:`_start` would have answered."""
        try:
            if waiting.deferred is not None:
                response = await _wait_deferred(waiting.deferred)
            else:
                assert waiting.rest is not None
                response = await waiting.rest
        except Exception as exc:
            return self._failed(waiting.header, waiting.request, exc)
        return self._response_parts(waiting.header, response)

    def _failed(self, header: RequestHeader, request: Message, exc: Exception) -> list[Any] | None:
        """The answer to a request whose handler raised: Kafka's error answer built from the
        request (every topic, partition, resource or group it named, with the error code; the
        top-level error code where the response has one).  ``None`` (close) only where Kafka
        sends no answer: a Produce request with acks=0."""
        if not isinstance(exc, KafkaError) and is_io_error(exc):
            # an I/O error no handler translated: the log dirs' failure channel logs it (once)
            # and the request gets KAFKA_STORAGE_ERROR, not a traceback per request
            exc = self.ports.connection.log_dirs.fail(None, exc, f"handling {ApiKey(header.api_key).name}")
        if isinstance(exc, KafkaError):
            code, message = exc.code, exc.message or None
        else:
            log.error(
                "error handling %s v%s from %s",
                ApiKey(header.api_key).name,
                header.api_version,
                self.peer,
                exc_info=exc,
            )
            code, message = ErrorCode.UNKNOWN_SERVER_ERROR, None
        response = error_response(header, request, code, message)
        if response is None:
            log.info("closing connection from %s: %s", self.peer, exc)
            return None
        return self._response_parts(header, response)

    def _response_parts(self, header: RequestHeader, response: Any) -> list[Any]:
        if access.isEnabledFor(logging.DEBUG):
            access.debug(
                "%s %s v%d cid=%d principal=%s listener=%s", self.peer, _api_name(header.api_key), header.api_version,
                header.correlation_id, self.session.principal, self.listener,
            )
        throttle = self._throttle
        if throttle is not None and throttle.charge is not None:
            parts = throttle.charged_parts(header, response, self.session.principal.name)
        elif response is None:
            parts = self.conn.no_response_parts(header)
        else:
            parts = self.conn.send_response_parts(header, response)
        m = self._metrics
        if m is not None:
            self._count_request(m, header, response)
        return parts

    def _count_request(self, m: BrokerMetrics, header: RequestHeader, response: Any) -> None:
        """Metrics of one answered request: its count and time, its top-level error, and for
        SaslAuthenticate whether the client authenticated."""
        api = header.api_key
        t0 = self._req_t0
        if t0:
            self._req_t0 = 0.0
            m.request_done(self._req_key, header.api_version, (_perf_counter() - t0) * 1000.0)
        else:
            m.request_done(api, header.api_version, 0.0)
        code = getattr(response, "error_code", 0) if response is not None else 0
        if code:
            m.response_error(api, code)
        if api == _SASL_AUTHENTICATE:
            m.count(m.auth_failures if code else m.auth_successes, self.listener)

    # -- authentication: see odradek.broker.auth_gate ------------------------------------------
    def _stop_for_failed_authentication(self) -> None:
        """Nothing more is read from this connection, nothing it already sent is handled."""
        self._queue.clear()
        self._pause_reading()

    # -- client quotas (KIP-13, KIP-124, KIP-219): see odradek.broker.throttling ------------------
    def _throttled(self) -> None:
        """Over a quota: read and handle nothing until :meth:`_unthrottled`."""
        self._writable.clear()
        self._pause_reading()

    def _unthrottled(self, delayed: list[Any]) -> None:
        """The throttle ended: write the responses it held back, go on reading and handling."""
        if delayed and self.transport is not None:
            self._write(delayed)
        if not self._write_paused:
            self._writable.set()
            self._maybe_resume_reading()


class _Resumed:
    """The rest of a coroutine that was started by hand (``coro.send(None)``) and yielded
    ``first``: awaiting this in a task continues it exactly as if the task had started it — the
    yielded futures go to the task, cancellation and exceptions go back into the coroutine."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self.coro, self.first
        self.first = None
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


class _Waiting:
    """A request whose handler waits: for the rest of its coroutine, or for its Deferred."""

    __slots__ = ("deferred", "header", "request", "rest")

    def __init__(
        self, header: RequestHeader, request: Message, rest: _Resumed | None, deferred: Deferred | None = None
    ) -> None:
        self.header = header
        self.request = request  # for the error answer, should the handler raise
        self.rest = rest
        self.deferred = deferred


async def _handle_after(
    wait: Awaitable[None], handler: Callable[[RequestContext, Any], Any], sync: bool, ctx: RequestContext, request: Any
) -> Message | None:
    """Run a handler once ``wait`` is over (a scripted delay or hold of a test broker)."""
    await wait
    result = handler(ctx, request)
    if not sync:
        return await result
    if result is None or isinstance(result, Message):
        return result
    if isinstance(result, Deferred):
        return await _wait_deferred(result)
    return await result


async def _wait_deferred(deferred: Deferred) -> Message | None:
    """Await a Deferred (when a task already waits on the connection's behalf)."""
    fut: asyncio.Future[Message | None] = asyncio.get_running_loop().create_future()

    def done(response: Message | None, exc: BaseException | None) -> None:
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(response)

    deferred.start(done)
    try:
        return await fut
    except asyncio.CancelledError:
        if not fut.done() or fut.cancelled():
            deferred.cancel()
        raise


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"
