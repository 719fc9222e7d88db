"""Authentication hardening on one connection, driven by hand: the receive limit before
authentication (``sasl.server.max.receive.size``), the failed-authentication delay that holds
the answer back with the connection muted, and the rate-limited failure log.

The connection is a real :class:`~odradek.broker.server.KafkaConnection` fed bytes directly,
with a transport that records what is written and a scheduler standing in for the event loop's
clock: whether an answer went out before or after the delay is a fact of that clock, not of
wall time.
"""

from __future__ import annotations

import logging
import struct
from types import SimpleNamespace
from typing import Any

import pytest

import odradek.broker.handlers  # noqa: F401  (registers the API handlers)
from odradek.broker.authentication import ListenerSecurity
from odradek.broker.server import KafkaConnection
from odradek.config import BrokerConfig, Listener
from odradek.errors import ErrorCode
from odradek.protocol import ClientConnection
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from odradek.security import SaslServer
from odradek.settings import settings_from
from odradek.testing import FakeScheduler

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
MAX_FRAME = 100 << 20


class _Transport:
    """Records writes, pauses and the close (what asyncio's transport would do)."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.written += bytes(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default


def _Services() -> Any:
    settings = settings_from(BrokerConfig({"socket.request.max.bytes": MAX_FRAME}))
    connection = SimpleNamespace(settings=settings, quotas=None, metrics=None, log_dirs=None)
    return SimpleNamespace(authorizer=None, connection=connection, features=None)


class _Wire:
    """One connection on a SASL_PLAINTEXT listener with PLAIN, and a client codec for it."""

    def __init__(self, delay_ms: int = 100, max_receive: int | None = None, timers: FakeScheduler | None = None) -> None:
        settings: dict[str, Any] = {
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": delay_ms,
        }
        if max_receive is not None:
            settings["sasl.server.max.receive.size"] = max_receive
        self.security = ListenerSecurity(
            settings_from(BrokerConfig(settings)), Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 0), lambda u, m: None
        )
        self.evaluated: list[bytes] = []  # every token a mechanism was asked to evaluate
        make = self.security.server

        def server(mechanism: str) -> SaslServer:
            inner = make(mechanism)
            evaluate = inner.evaluate

            def counted(token: bytes) -> bytes:
                self.evaluated.append(token)
                return evaluate(token)

            inner.evaluate = counted  # type: ignore[method-assign]
            return inner

        self.security.server = server  # type: ignore[method-assign]
        self.timers = timers or FakeScheduler()
        try:
            self.conn = KafkaConnection(
                _Services(), "SASL_PLAINTEXT", set(), 500, self.security,  # type: ignore[arg-type]
                timers=self.timers,
            )
        except TypeError:  # the code before the delayed answer (wt-base): no scheduler to give
            self.conn = KafkaConnection(_Services(), "SASL_PLAINTEXT", set(), 500, self.security)  # type: ignore[arg-type]
        self.transport = _Transport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.client = ClientConnection("hardening")
        self.sent: list[type] = []

    def request(self, message: Any, version: int) -> bytes:
        self.sent.append(type(message))
        return self.client.send_request(message, version)[1]

    def feed(self, data: bytes) -> None:
        """Bytes from the client, as the event loop hands them over (in receive-buffer pieces)."""
        view = memoryview(data)
        while view and not self.transport.closed and not self.transport.paused:
            buf = self.conn.get_buffer(-1)
            n = min(len(buf), len(view))
            if n == 0:  # the connection's receive buffer is full (it stopped taking frames)
                break
            buf[:n] = view[:n]
            self.conn.buffer_updated(n)
            view = view[n:]

    def responses(self) -> list[Any]:
        self.client.receive_data(bytes(self.transport.written))
        self.transport.written.clear()
        out = []
        while True:
            ev = self.client.next_event()
            if not hasattr(ev, "response"):
                return out
            out.append(ev.response)


@pytest.fixture(autouse=True)
def _no_run_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """No event loop runs here: a connection must not hand its queue to a later callback."""
    import odradek.broker.server

    monkeypatch.setattr(odradek.broker.server, "_RUN_BUDGET", 3600.0)


def _guess(w: _Wire, password: str) -> bytes:
    return w.request(SaslHandshakeRequest(mechanism="PLAIN"), 1) + w.request(
        SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00" + password.encode()), 2
    )


# -- the failed-authentication delay ---------------------------------------------------------------


def test_a_failed_authentication_is_answered_only_after_the_delay_and_nothing_pipelined_is_evaluated() -> None:
    w = _Wire(delay_ms=100)
    # a guesser pipelines three handshake/authenticate pairs, the right password last
    w.feed(_guess(w, "guess-1") + _guess(w, "guess-2") + _guess(w, "alice-secret"))
    assert w.evaluated == [b"\x00alice\x00guess-1"], "a pipelined guess was evaluated after the first failure"
    first = w.responses()
    assert [type(r) for r in first] == [SaslHandshakeResponse], "the failure was answered before the delay"
    assert w.transport.paused and not w.transport.closed
    # the client sends more while muted: none of it is read or evaluated
    w.feed(_guess(w, "alice-secret"))
    w.timers.tick(99)
    assert w.responses() == [] and not w.transport.closed
    w.timers.tick(1)
    (failed,) = w.responses()
    assert isinstance(failed, SaslAuthenticateResponse)
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failed.error_message == "Authentication failed: Invalid username or password"
    # closed the delay after the answer (not with it: kafka-python drops an answer it reads
    # together with the end of the stream)
    assert w.transport.paused and not w.transport.closed
    w.timers.tick(100)
    assert w.transport.closed
    assert w.evaluated == [b"\x00alice\x00guess-1"]
    assert not w.conn.session.authenticated


def test_with_no_delay_the_failure_is_answered_at_once() -> None:
    w = _Wire(delay_ms=0)
    w.feed(_guess(w, "wrong") + _guess(w, "alice-secret"))
    handshake, failed = w.responses()
    assert handshake.error_code == 0 and failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert w.transport.closed and w.timers.pending() == 0
    assert w.evaluated == [b"\x00alice\x00wrong"]


def test_guessing_is_held_to_one_attempt_per_delay() -> None:
    """A client guessing as fast as it can: one guess answered per connection, each answer at
    least the delay after the guess (10 s of the injectable clock: at most 10 per second)."""
    answered = 0
    evaluated = 0
    timers = FakeScheduler()  # one clock for every connection
    clock = 0
    for _connection in range(200):  # bounded: a broker that answers at once never moves the clock
        if clock >= 10_000:
            break
        w = _Wire(delay_ms=100, timers=timers)
        w.feed(b"".join(_guess(w, f"guess-{i}") for i in range(200)))
        for _ in range(100):  # at most a second of the clock per connection (answer, then close)
            if w.transport.closed:
                break
            w.timers.tick(10)
        assert w.transport.closed, "the connection stays open after a failed authentication"
        clock = timers.clock.monotonic_ms()
        evaluated += len(w.evaluated)
        answered += sum(1 for r in w.responses() if isinstance(r, SaslAuthenticateResponse))
    assert clock >= 10_000 and answered == evaluated <= 10 * 10


def test_refusals_of_the_sasl_state_machine_are_delayed_too() -> None:
    """An unsupported mechanism, SaslAuthenticate before the handshake: failed authentications
    (Kafka's UnsupportedSaslMechanismException, IllegalSaslStateException), answered late."""
    w = _Wire()
    w.feed(w.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1) + _guess(w, "alice-secret"))
    assert w.responses() == [] and w.transport.paused
    w.timers.tick(100)
    (r,) = w.responses()
    assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and r.mechanisms == ["PLAIN"]
    w.timers.tick(100)
    assert w.transport.closed and w.evaluated == []
    w = _Wire()
    w.feed(w.request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 2))
    assert w.responses() == []
    w.timers.tick(100)
    (r,) = w.responses()
    w.timers.tick(100)
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE and w.transport.closed


def test_the_right_password_is_answered_at_once_and_lifts_the_limit() -> None:
    w = _Wire(max_receive=4096)
    w.feed(w.request(ApiVersionsRequest(), 3) + _guess(w, "alice-secret"))
    versions, handshake, ok = w.responses()
    assert versions.error_code == 0 and handshake.error_code == 0 and ok.error_code == 0
    assert w.conn.session.authenticated and w.timers.pending() == 0
    # authenticated: frames up to socket.request.max.bytes again
    big = w.request(ApiVersionsRequest(client_software_name="x" * 20_000, client_software_version="1"), 3)
    assert len(big) > 4096
    w.feed(big)
    assert not w.transport.closed
    (again,) = w.responses()
    assert again.error_code == 0 and again.api_keys


# -- the receive limit before authentication -------------------------------------------------------


@pytest.mark.parametrize("stage", ["first frame", "after ApiVersions", "after the handshake", "v0 token"])
def test_a_frame_above_the_limit_before_authentication_fails_it_unread(stage: str) -> None:
    """A size prefix above sasl.server.max.receive.size (100 MB declared): no buffer is made for
    it, the connection is muted and closed after the delay, unanswered."""
    w = _Wire()
    before = b""
    if stage == "after ApiVersions":
        before = w.request(ApiVersionsRequest(), 3)
    elif stage == "after the handshake":
        before = w.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    elif stage == "v0 token":
        before = w.request(SaslHandshakeRequest(mechanism="PLAIN"), 0)
    w.feed(before)
    answered = w.responses()
    assert len(answered) == (1 if before else 0)
    w.feed(struct.pack(">i", 100 << 20) + b"\x00" * 1000)
    reader = w.conn.conn._reader
    assert reader._frame is None, "a buffer was made for the declared frame"
    assert w.transport.paused and not w.transport.closed
    w.feed(b"\x00" * 100_000)  # muted: nothing more is taken
    w.timers.tick(100)
    assert w.transport.closed and w.responses() == [] and w.evaluated == []


def test_a_frame_at_the_limit_is_read() -> None:
    w = _Wire(max_receive=300)
    token = b"\x00alice\x00" + b"x" * 200
    auth = w.request(SaslAuthenticateRequest(auth_bytes=token), 2)
    hs = w.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert len(auth) - 4 <= 300
    w.feed(hs + auth)
    assert w.evaluated == [token]


def test_the_limit_is_per_listener_and_kafkas_default() -> None:
    w = _Wire()
    assert w.security.max_receive_size == 524288
    assert w.conn.conn.max_frame_size == 524288
    plain = ListenerSecurity(settings_from(BrokerConfig({})), Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0), lambda u, m: None)
    conn = KafkaConnection(_Services(), "PLAINTEXT", set(), 500, plain)  # type: ignore[arg-type]
    assert conn.conn.max_frame_size == MAX_FRAME  # no SASL: socket.request.max.bytes from the start


# -- the failure log -------------------------------------------------------------------------------


def test_the_failure_log_is_rate_limited_per_listener_but_names_every_new_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from odradek.broker.authentication import FailureLog

    timers = FakeScheduler()
    failures = FailureLog("SASL_PLAINTEXT", lines=10, window_s=10.0, timers=timers)
    caplog.set_level(logging.INFO, logger="odradek.authentication")
    for i in range(10_000):
        if i % 10 == 0:
            timers.clock.advance(1)  # 10,000 failures in one second from one address
        failures.failed("10.0.0.1", "authentication", "Authentication failed: Invalid username or password")
    failures.failed("10.0.0.2", "authentication", "from a second address")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 11
    assert all(line.startswith("Failed authentication with 10.0.0.1 on listener SASL_PLAINTEXT") for line in lines[:10])
    assert lines[10] == "Failed authentication with 10.0.0.2 on listener SASL_PLAINTEXT (from a second address)"
    caplog.clear()
    # the next window (no event loop, so no timer ended this one): the count of what was not
    # logged comes first
    timers.clock.advance(10_500 - timers.clock.monotonic_ms())
    failures.failed("10.0.0.1", "authentication", "again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "9990 more failed authentications on listener SASL_PLAINTEXT in the last 10s were not logged",
        "Failed authentication with 10.0.0.1 on listener SASL_PLAINTEXT (again)",
    ]
    assert failures.total == 10_002


def test_a_mechanism_that_breaks_on_a_token_fails_the_authentication_not_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in a mechanism (any exception but AuthenticationFailed) is an authentication failure
    for the client, delayed as any other; the traceback goes to the broker's log once."""
    w = _Wire()

    def broken(_mechanism: str) -> SaslServer:
        class Broken(SaslServer):
            def evaluate(self, token: bytes) -> bytes:
                raise OverflowError("cannot convert float infinity to integer")

        return Broken()

    w.security.server = broken  # type: ignore[method-assign]
    w.feed(_guess(w, "x"))
    assert [r.error_code for r in w.responses()] == [0]
    w.timers.tick(100)
    (failed,) = w.responses()
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failed.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"
    )
    assert any("OverflowError" in (r.exc_text or "") or r.exc_info for r in caplog.records)
