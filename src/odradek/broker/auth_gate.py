"""What a connection does around its SASL session: :class:`AuthenticationGate`.

The session (:class:`~odradek.broker.authentication.Session`) runs the exchange itself: the
handshake, the mechanism's tokens, re-authentication (KIP-368), the session's expiry.  Around it,
the connection holds frames to ``sasl.server.max.receive.size`` until the client has
authenticated (a larger size prefix fails the authentication before any buffer is made for it),
answers the unframed tokens that follow a SaslHandshake v0, and, when the authentication fails,
mutes itself — nothing more is read from it, nothing it pipelined is handled — holds the answer
back for ``connection.failed.authentication.delay.ms``, sends it, and closes the same delay later
(Kafka's ``DelayedResponseAuthenticationException``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from odradek._scheduler import Scheduler
from odradek.broker.authentication import Session
from odradek.metrics import BrokerMetrics
from odradek.protocol import InvalidFrame, SaslTokenReceived, ServerConnection
from odradek.protocol.connection import frame

__all__ = ["AuthenticationGate"]

# the connection's log (what operators configure): these are its lines
log = logging.getLogger("odradek.broker.server")


class AuthenticationGate:
    """Owns one connection's authentication state around its session: whether frames are held
    to the pre-authentication receive size (and the connection's own limit, restored once the
    session is authenticated), and whether the authentication failed (:attr:`failed`: the
    connection is muted until its delayed answer is sent and it is closed).

    The connection passes its session to each call (TLS replaces it when the connection is made).
    It is asked to ``stop`` (read and handle nothing more: the authentication failed), whether it
    ``is_open``, to ``write`` the delayed answer and to ``close``; the delays run on ``timers``."""

    __slots__ = (
        "_close", "_conn", "_is_open", "_listener", "_max_frame_size", "_metrics", "_stop", "_timers", "_write",
        "failed", "pre_auth",
    )

    def __init__(
        self,
        conn: ServerConnection,
        session: Session,
        listener: str,
        metrics: BrokerMetrics | None,
        timers: Scheduler,
        *,
        stop: Callable[[], None],
        is_open: Callable[[], bool],
        write: Callable[[list[Any]], None],
        close: Callable[[], None],
    ) -> None:
        self._conn = conn
        self._max_frame_size = conn.max_frame_size  # socket.request.max.bytes
        self._listener = listener
        self._metrics = metrics
        self._timers = timers
        self._stop = stop
        self._is_open = is_open
        self._write = write
        self._close = close
        # before SASL authentication frames are held to sasl.server.max.receive.size
        self.pre_auth = False
        self.limit_receive(session)
        # the authentication failed: muted until the delayed answer is sent and the connection closed
        self.failed = False

    def limit_receive(self, session: Session) -> None:
        """Hold frames to ``sasl.server.max.receive.size`` while the session is not authenticated,
        and back to ``socket.request.max.bytes`` once it is."""
        limit = session.max_receive_size
        pre_auth = limit is not None
        if pre_auth != self.pre_auth:
            self.pre_auth = pre_auth
            self._conn.max_frame_size = self._max_frame_size if limit is None else min(limit, self._max_frame_size)

    def handled(self, session: Session) -> None:
        """A request was handled (SaslHandshake, SaslAuthenticate...): after a SaslHandshake v0
        tokens come unframed; once authenticated, frames may be as large as any request."""
        if session.raw_tokens:  # a SaslHandshake v0 succeeded: tokens come unframed now
            session.raw_tokens = False
            self._conn.raw_tokens = True
        if self.pre_auth and session.authenticated:
            self.limit_receive(session)

    def sasl_token(self, session: Session, ev: SaslTokenReceived, client_host: str) -> list[Any]:
        """A SASL token without Kafka framing (after SaslHandshake v0): the mechanism's answer
        goes back the same way; a failure closes the connection after the failed-authentication
        delay, unanswered (the v0 exchange has no way to say why, as in Kafka)."""
        out = session.authenticate(ev.token, client_host)
        m = self._metrics
        if out.error_code:
            self._count_failure()
            return []
        if session.authenticated:
            if m is not None:
                m.count(m.auth_successes, self._listener)
            self._conn.raw_tokens = False
            self.limit_receive(session)
        return [frame(out.data)]

    def invalid_receive(self, session: Session, exc: InvalidFrame, client_host: str, peer: str) -> None:
        """A frame the connection cannot take before authentication (Kafka's
        InvalidReceiveException): the authentication fails, unanswered."""
        session.invalid_receive(getattr(exc, "size", -1), client_host)
        self._count_failure()
        self.fail(session, None, peer)

    def fail(self, session: Session, parts: list[Any] | None, peer: str) -> None:
        """The authentication failed (the session says how long to hold the answer back): from
        now on nothing is read from the connection and nothing it already sent is handled; the
        answer (``parts``; none for a v0 token or a frame too large) goes out when the delay has
        passed, and the connection closes the same delay after it (a client that reads the
        answer and the end of the stream together may drop the answer: kafka-python does), or
        at once when there is no answer.  With a delay of 0, all at once."""
        delay = session.close_after or 0.0
        session.close_after = None
        self.failed = True
        self._stop()
        if delay <= 0:
            self._answer_and_close(parts, 0.0, peer)
            return
        self._later(delay, self._answer_and_close, parts, delay, peer)

    def _later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        self._timers.call_later(delay * 1000.0, fn, *args)

    def _answer_and_close(self, parts: list[Any] | None, linger: float, peer: str) -> None:
        if not self._is_open():
            return
        try:
            if parts:
                self._write(parts)
                if linger > 0:
                    self._later(linger, self._close)
                    return
        except Exception:
            log.exception("connection %s failed", peer)
        self._close()  # the transport sends what it holds, then closes

    def _count_failure(self) -> None:
        m = self._metrics
        if m is not None:
            m.count(m.auth_failures, self._listener)
