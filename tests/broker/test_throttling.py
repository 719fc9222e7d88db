"""A connection's Throttle on fake time: the mute after a request over its quota, the response of
a client from before KIP-219 held back for the throttle time, and nothing resumed on a closing
connection.  (The quotas themselves are stubbed: one that throttles every request by 100 ms.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from odradek.broker.throttling import Throttle
from odradek.protocol import ApiKey, RequestReceived
from odradek.protocol.messages import RequestHeader
from odradek.testing import FakeScheduler

THROTTLE_MS = 100


class _Quotas:
    """Client quotas where a request_percentage quota applies and every request is over it."""

    active = True

    def __init__(self) -> None:
        self.request = SimpleNamespace(index=True)
        self.produce = SimpleNamespace(index=False)
        self.fetch = SimpleNamespace(index=False)
        self.charged: list[tuple[str, str]] = []

    def record(self, kind: Any, user: str, client_id: str, value: float, now: float) -> int:
        self.charged.append((user, client_id))
        return THROTTLE_MS


class _Conn:
    def send_response_parts(self, header: RequestHeader, response: Any) -> list[Any]:
        return [b"response %d" % header.correlation_id]

    def no_response_parts(self, header: RequestHeader) -> list[Any]:
        return []


class _Connection:
    """What the throttle tells its connection."""

    def __init__(self) -> None:
        self.paused = 0
        self.resumed: list[list[Any]] = []
        self.closing = False


def _throttle() -> tuple[Throttle, _Connection, FakeScheduler, _Quotas]:
    timers = FakeScheduler()
    quotas = _Quotas()
    c = _Connection()
    throttle = Throttle(
        quotas, None, _Conn(), timers,  # type: ignore[arg-type]
        pause=lambda: setattr(c, "paused", c.paused + 1), resume=c.resumed.append, closing=lambda: c.closing,
    )
    return throttle, c, timers, quotas


def _request(version: int, cid: int) -> tuple[RequestReceived, RequestHeader]:
    header = RequestHeader(api_key=ApiKey.METADATA, api_version=version, correlation_id=cid, client_id="app")
    return RequestReceived(header, SimpleNamespace(), 10), header


def test_a_throttled_kip219_client_gets_its_answer_with_the_throttle_time_and_is_muted_after_it() -> None:
    throttle, c, timers, quotas = _throttle()
    ev, header = _request(6, 1)  # Metadata v6: the client backs off by itself
    throttle.start(ev)
    assert throttle.charging
    response = SimpleNamespace(throttle_time_ms=0)
    assert throttle.charged_parts(header, response, "alice") == [b"response 1"]
    assert not throttle.charging
    assert quotas.charged == [("alice", "app")]
    assert response.throttle_time_ms == THROTTLE_MS
    assert throttle.muted and c.paused == 1
    timers.tick(THROTTLE_MS - 1)
    assert throttle.muted and c.resumed == []
    timers.tick(1)
    assert not throttle.muted and c.resumed == [[]]


def test_an_old_clients_answer_is_held_back_for_the_throttle_time() -> None:
    throttle, c, timers, _quotas = _throttle()
    ev, header = _request(5, 7)  # Metadata v5: from before KIP-219
    throttle.start(ev)
    assert throttle.charged_parts(header, SimpleNamespace(throttle_time_ms=0), "alice") == []
    timers.tick(THROTTLE_MS // 2)
    # a second throttled answer while muted: held back too, and the mute is longer (one pause)
    ev, header = _request(5, 8)
    throttle.start(ev)
    assert throttle.charged_parts(header, SimpleNamespace(throttle_time_ms=0), "alice") == []
    timers.tick(THROTTLE_MS // 2)
    assert throttle.muted and c.resumed == [] and c.paused == 1
    timers.tick(THROTTLE_MS // 2)
    assert not throttle.muted and c.resumed == [[b"response 7", b"response 8"]]


def test_a_mute_ending_on_a_closing_connection_resumes_nothing() -> None:
    throttle, c, timers, _quotas = _throttle()
    ev, header = _request(5, 1)
    throttle.start(ev)
    throttle.charged_parts(header, SimpleNamespace(throttle_time_ms=0), "alice")
    c.closing = True
    timers.tick(THROTTLE_MS * 10)
    assert c.resumed == [] and timers.pending() == 0


def test_exempt_requests_are_not_charged() -> None:
    throttle, _c, _timers, _quotas = _throttle()
    header = RequestHeader(api_key=ApiKey.SASL_AUTHENTICATE, api_version=2, correlation_id=1, client_id="app")
    throttle.start(RequestReceived(header, SimpleNamespace(), 10))
    assert not throttle.charging
