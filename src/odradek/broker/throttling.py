"""A connection's client quotas (KIP-13, KIP-124, KIP-219): :class:`Throttle`.

Every request a client sends is charged to its quotas (the principal's and the client id's, in
:class:`~odradek.broker.quotas.QuotaManager`): a produce request by its size, a consumer's fetch by
its response's size, every request by the time its handler held the event loop
(``request_percentage``).  Over a quota, the response says ``throttle_time_ms`` and the connection
is muted that long after it — it reads and handles nothing (KIP-219); a client of an API version
from before KIP-219 does not back off by itself, so its response is held back that long instead.
The SASL exchange and the requests between brokers are never charged.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

from odradek._scheduler import Scheduler
from odradek.broker.quotas import QuotaManager
from odradek.metrics import BrokerMetrics
from odradek.protocol import ApiKey, RequestReceived, ServerConnection
from odradek.protocol._api import response_header_version
from odradek.protocol.messages import RequestHeader

__all__ = ["Throttle"]

_i32 = struct.Struct(">i")
# APIs never charged to client quotas: the SASL exchange, and requests between brokers
_EXEMPT_APIS = frozenset({17, 36, 4, 5, 6, 7, 27})
# the first version of each API whose clients back off by themselves on throttle_time_ms
# (KIP-219): older versions get their response late instead
_KIP219_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6, ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2, ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2,
}


class Throttle:
    """Owns one connection's standing with the client quotas: what the request being handled is
    charged (one request at a time per connection) and the connection's mute — whether it is
    muted, until when, and the responses held back till then.

    The connection calls :meth:`start` when a request's handling begins, :meth:`waits` when its
    handler has to wait, and :meth:`charged_parts` to encode the response while :attr:`charging`.
    It is told through ``pause`` when a mute begins (stop reading and handling requests) and
    through ``resume`` with the held-back responses when the mute ends; ``closing`` says the
    connection is closing (a mute that ends then does nothing).  Mutes end on ``timers``."""

    __slots__ = (
        "_clock", "_closing", "_conn", "_delayed", "_metrics", "_mute_until", "_pause", "_quotas", "_resume",
        "_timers", "charge", "muted",
    )

    def __init__(
        self,
        quotas: QuotaManager,
        metrics: BrokerMetrics | None,
        conn: ServerConnection,
        timers: Scheduler,
        *,
        pause: Callable[[], None],
        resume: Callable[[list[Any]], None],
        closing: Callable[[], bool],
    ) -> None:
        self._quotas = quotas
        self._metrics = metrics
        self._conn = conn
        self._timers = timers
        self._clock = timers.clock
        self._pause = pause
        self._resume = resume
        self._closing = closing
        #: what the request being handled is charged (None: nothing, or no quota configured);
        #: not None is :attr:`charging` (the connection reads it per request: no property call)
        self.charge: _Charge | None = None
        # a throttled connection is muted (reads and handles nothing) until _mute_until, and a
        # response to an old request version waits in _delayed till then
        self.muted = False
        self._mute_until = 0.0
        self._delayed: list[Any] = []

    @property
    def charging(self) -> bool:
        """Whether the request being handled is charged to the quotas (its response is encoded
        by :meth:`charged_parts`)."""
        return self.charge is not None

    def start(self, ev: RequestReceived) -> None:
        """A request's handling begins: what it is charged, when any quota is configured (it
        does nothing while none is: the connection need not call it then)."""
        if self._quotas.active:
            self.charge = _charge_for(ev)

    def waits(self) -> None:
        """The request's handler waits: the time it held the event loop so far is what it costs
        (request quotas count handler time, not time spent waiting)."""
        charge = self.charge
        if charge is not None and charge.cpu is None:
            charge.cpu = time.perf_counter() - charge.t0

    def charged_parts(self, header: RequestHeader, response: Any, user: str) -> list[Any]:
        """Encode a response after charging the request to the quotas of ``user`` and the
        request's client id: produce by request size, a consumer's fetch by response size, every
        request by handler time (request_percentage).  Over a quota, the response says
        ``throttle_time_ms`` and the connection is muted that long after it (KIP-219); an old
        request version's response is held back that long instead (then nothing is returned)."""
        charge = self.charge
        self.charge = None
        quotas = self._quotas
        assert charge is not None
        now = float(self._clock.monotonic_ms())
        client_id = header.client_id or ""
        throttle = 0
        if quotas.request.index:
            cpu = charge.cpu if charge.cpu is not None else time.perf_counter() - charge.t0
            throttle = quotas.record(quotas.request, user, client_id, cpu * 100.0, now)
        if charge.produce:
            throttle = max(throttle, quotas.record(quotas.produce, user, client_id, charge.produce, now))
        if throttle and response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle)
        if response is None:
            parts = self._conn.no_response_parts(header)
        else:
            parts = self._conn.send_response_parts(header, response)
        if charge.fetch and parts:
            size = 0
            for p in parts:
                size += len(p) if isinstance(p, bytes) else p.length
            fetch_throttle = quotas.record(quotas.fetch, user, client_id, size, now)
            if fetch_throttle > throttle:
                throttle = fetch_throttle
                if header.api_version >= 1:  # throttle_time_ms: the body's first field, fixed size
                    at = 8 + (response_header_version(header.api_key, header.api_version) >= 1)
                    first = parts[0]
                    assert isinstance(first, bytes)
                    parts[0] = first[:at] + _i32.pack(throttle) + first[at + 4 :]
        if throttle > 0:
            if self._metrics is not None:
                self._metrics.throttle(header.api_key, throttle)
            if header.api_version < _KIP219_VERSIONS.get(header.api_key, 0):
                # a client from before KIP-219 does not back off by itself: answer late
                self._mute(throttle, parts)
                return []
            self._mute(throttle, None)
        return parts

    def _mute(self, ms: int, delayed: list[Any] | None) -> None:
        """Read and handle nothing on this connection for ``ms`` (then write ``delayed``)."""
        if delayed:
            self._delayed.extend(delayed)
        until = self._clock.monotonic_ms() + ms
        self._mute_until = max(self._mute_until, until)
        if not self.muted:
            self.muted = True
            self._pause()
            self._timers.call_later(ms, self._unmute)

    def _unmute(self) -> None:
        if self._closing():
            return
        remaining = self._mute_until - self._clock.monotonic_ms()
        if remaining >= 1:
            self._timers.call_later(remaining, self._unmute)
            return
        self.muted = False
        delayed, self._delayed = self._delayed, []
        self._resume(delayed)


class _Charge:
    """What a request is charged to client quotas: its size when it is a produce request, whether
    its response size counts (a consumer's fetch), when its handler started and the time it held
    the event loop (when it had to wait; else measured at the response)."""

    __slots__ = ("cpu", "fetch", "produce", "t0")

    def __init__(self, produce: int, fetch: bool) -> None:
        self.produce = produce
        self.fetch = fetch
        self.t0 = time.perf_counter()
        self.cpu: float | None = None


def _charge_for(ev: RequestReceived) -> _Charge | None:
    """What client quotas charge a request (None: it is exempt, as replication is)."""
    header = ev.header
    api = header.api_key
    if api == ApiKey.PRODUCE:
        return _Charge(ev.size, False)
    if api == ApiKey.FETCH:
        msg = ev.message
        replica_id = msg.replica_state.replica_id if header.api_version >= 15 else msg.replica_id
        return None if replica_id >= 0 else _Charge(0, True)
    if api in _EXEMPT_APIS:
        return None
    return _Charge(0, False)
