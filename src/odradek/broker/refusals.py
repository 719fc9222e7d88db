"""A log line for every refused request, rate-limited.

Every produce, config change, admin or group request the broker refuses leaves one INFO line on
the ``odradek.refusals`` logger: principal (the connection's: ``User:alice`` after SASL, a
certificate's name over mTLS, ``User:ANONYMOUS`` on PLAINTEXT), client id, client address, API, resource
(topic/partition, config resource and config names, group/member) and the error's name, code
and message::

    Refused PRODUCE from 127.0.0.1 (principal=User:ANONYMOUS, clientId=rdkafka): topic=t partition=0:
    INVALID_RECORD (87) One or more records have been rejected ...

So that a misbehaving client cannot flood the log, at most :data:`LINES_PER_WINDOW` lines are
written per (client address, principal, API, error) in each :data:`WINDOW_SECONDS` window; the refusals
beyond that are counted and reported in one line when the window ends ("suppressed K similar
refusals").  The number of keys kept is bounded too (:data:`MAX_KEYS`; beyond it, refusals from
further addresses share one key).

Produce reports its refusals from its handler, only when a partition is refused (the hot path
does nothing more).  The other APIs in :data:`LOGGED_APIS` are wrapped at registration
(:func:`logged`): after the handler returns, the response's error codes are read (those APIs are
not on a hot path), and a handler that raises a :class:`~odradek.errors.KafkaError` is reported
before the server turns it into an error response.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Protocol

from odradek._scheduler import LoopScheduler, Scheduler
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey, RequestHeader


class _Session(Protocol):
    @property
    def principal_name(self) -> str: ...


class RequestContext(Protocol):
    """What a refusal line names of a request (a dispatch.RequestContext has it)."""

    @property
    def client_host(self) -> str: ...

    @property
    def header(self) -> RequestHeader: ...

    @property
    def session(self) -> _Session: ...


__all__ = ["LOGGED_APIS", "REFUSALS", "RefusalLog", "logged"]

log = logging.getLogger("odradek.refusals")

#: the principal of a connection nobody authenticated (PLAINTEXT)
ANONYMOUS = "User:ANONYMOUS"
LINES_PER_WINDOW = 10
WINDOW_SECONDS = 60.0
MAX_KEYS = 10_000

#: the APIs whose refusals are read from their responses (Produce reports its own)
LOGGED_APIS = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.DELETE_RECORDS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.DELETE_GROUPS,
        ApiKey.OFFSET_DELETE,
    }
)

#: answers that are the group protocol's ordinary flow or a "not here, retry", not a refusal
_NOT_REFUSALS = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.MEMBER_ID_REQUIRED,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
    }
)

# response and request fields that name what a refusal is about, with their labels
_LABELS = {
    "name": "topic",
    "topic_name": "topic",
    "topic": "topic",
    "partition_index": "partition",
    "partition_id": "partition",
    "transactional_id": "transactional-id",
    "index": "partition",
    "group_id": "group",
    "member_id": "member",
    "group_instance_id": "instance",
}
_RESOURCE_TYPES = {2: "topic", 4: "broker", 8: "broker-logger"}
# request fields that say what a whole request is about (the response may not repeat them)
_REQUEST_FIELDS = ("group_id", "member_id", "group_instance_id", "transactional_id")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class _Window:
    __slots__ = ("lines", "start", "suppressed")

    def __init__(self, start: float) -> None:
        self.start = start
        self.lines = 0
        self.suppressed = 0


class RefusalLog:
    """Rate-limited refusal lines, per (client address, API, error); the windows on ``timers``
    (the broker's scheduler: the broker sets the process's :data:`REFUSALS` on its own)."""

    def __init__(
        self,
        lines_per_window: int = LINES_PER_WINDOW,
        window_seconds: float = WINDOW_SECONDS,
        max_keys: int = MAX_KEYS,
        timers: Scheduler | None = None,
    ) -> None:
        self.lines_per_window = lines_per_window
        self.window_seconds = window_seconds
        self.max_keys = max_keys
        self.timers: Scheduler = timers or LoopScheduler()
        self._windows: dict[tuple[str, str, int, str], _Window] = {}

    def refused(
        self, client_host: str, client_id: str | None, api: str, resource: str, code: int, message: str | None,
        *, principal: str = ANONYMOUS,
    ) -> None:
        now = self.timers.clock.monotonic_ms() / 1000.0
        key = (client_host, api, code, principal)
        w = self._windows.get(key)
        if w is not None and now >= w.start + self.window_seconds:
            self._end(key, w)
            w = None
        if w is None:
            if len(self._windows) >= self.max_keys:
                self._prune(now)
                if len(self._windows) >= self.max_keys:
                    key = ("*", api, code, "*")  # too many addresses: they share one budget
                    w = self._windows.get(key)
            if w is None:
                w = self._windows[key] = _Window(now)
        if w.lines < self.lines_per_window:
            w.lines += 1
            log.info(
                "Refused %s from %s (principal=%s, clientId=%s): %s: %s (%d)%s",
                api, client_host, principal, client_id, resource or "-", _error_name(code), code,
                f" {message}" if message else "",
            )
            return
        w.suppressed += 1
        if w.suppressed == 1:
            # the count is reported when the window ends, even if no refusal follows
            try:
                self.timers.call_later((w.start + self.window_seconds - now) * 1000.0, self._expire, key, w)
            except RuntimeError:  # no event loop: reported with the next refusal after the window
                return

    def _expire(self, key: tuple[str, str, int, str], w: _Window) -> None:
        if self._windows.get(key) is w:
            self._end(key, w)

    def _end(self, key: tuple[str, str, int, str], w: _Window) -> None:
        del self._windows[key]
        if w.suppressed:
            host, api, code, principal = key
            who = host if principal in (ANONYMOUS, "*") else f"{host} (principal={principal})"
            log.info(
                "Suppressed %d similar refusals of %s from %s (%s (%d)) in the last %gs",
                w.suppressed, api, who, _error_name(code), code, self.window_seconds,
            )

    def _prune(self, now: float) -> None:
        for key, w in list(self._windows.items()):
            if now >= w.start + self.window_seconds:
                self._end(key, w)


#: the broker process's refusal log
REFUSALS = RefusalLog()


def produce_refused(ctx: RequestContext, topic: str, partition: int, exc: KafkaError) -> None:
    """A refused partition of a Produce request."""
    REFUSALS.refused(
        ctx.client_host, ctx.header.client_id, "PRODUCE", f"topic={topic} partition={partition}",
        int(exc.code), exc.message, principal=_principal(ctx),
    )


def _principal(ctx: RequestContext) -> str:
    """The request's principal as ACLs name it (``User:alice``)."""
    session = getattr(ctx, "session", None)
    return str(getattr(session, "principal_name", ANONYMOUS))


def _label(obj: Any, attrs: tuple[str, ...]) -> list[str]:
    parts = []
    for attr in attrs:
        if attr == "resource_name" and "resource_type" in attrs:
            kind = _RESOURCE_TYPES.get(obj.resource_type, f"resource-type-{obj.resource_type}")
            parts.append(f"{kind}={obj.resource_name}")
            continue
        label = _LABELS.get(attr)
        if label is not None:
            value = getattr(obj, attr, None)
            if value is not None and value != "":
                parts.append(f"{label}={value}")
    return parts


def _walk(obj: Any, context: list[str]) -> Iterator[tuple[list[str], int, str | None]]:
    """(what it is about, error code, message) for every error code in a response."""
    fields = getattr(type(obj), "_fields_", ())
    attrs = tuple(f.attr for f in fields)
    here = context + _label(obj, attrs)
    code = getattr(obj, "error_code", 0) if "error_code" in attrs else 0
    if code:
        yield here, code, getattr(obj, "error_message", None)
    for attr in attrs:
        value = getattr(obj, attr, None)
        if isinstance(value, list) and value and hasattr(type(value[0]), "_fields_"):
            for item in value:
                yield from _walk(item, here)


def _config_names(request: Any) -> dict[tuple[int, str], str]:
    """AlterConfigs / IncrementalAlterConfigs: the config names each resource's change named."""
    names = {}
    for res in getattr(request, "resources", ()):
        names[(res.resource_type, res.resource_name)] = ",".join(c.name for c in res.configs)
    return names


def report_response(ctx: RequestContext, api: ApiKey, request: Any, response: Any) -> None:
    """Log the refusals a response of one of :data:`LOGGED_APIS` carries."""
    if response is None:
        return
    context = _label(request, _REQUEST_FIELDS)
    configs = _config_names(request) if api in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS) else None
    host, client_id, name, principal = ctx.client_host, ctx.header.client_id, api.name, _principal(ctx)
    for where, code, message in _walk(response, context):
        if code in _NOT_REFUSALS:
            continue
        resource = " ".join(where)
        if configs:
            for (rtype, rname), names in configs.items():
                if f"{_RESOURCE_TYPES.get(rtype, '')}={rname}" in where and names:
                    resource += f" configs={names}"
                    break
        REFUSALS.refused(host, client_id, name, resource, code, message, principal=principal)


def report_exception(ctx: RequestContext, api: ApiKey, request: Any, exc: KafkaError) -> None:
    if exc.code in _NOT_REFUSALS:
        return
    resource = " ".join(_label(request, _REQUEST_FIELDS))
    REFUSALS.refused(
        ctx.client_host, ctx.header.client_id, api.name, resource, int(exc.code), exc.message, principal=_principal(ctx)
    )


_Async = Callable[..., Coroutine[Any, Any, Any]]


def logged(api: ApiKey, handler: _Async) -> _Async:
    """Wrap an ``async def`` handler of one of :data:`LOGGED_APIS` so its refusals are logged."""

    @functools.wraps(handler)
    async def wrapper(ctx: RequestContext, request: Any) -> Any:
        try:
            response = await handler(ctx, request)
        except KafkaError as exc:
            report_exception(ctx, api, request, exc)
            raise
        try:
            report_response(ctx, api, request, response)
        except Exception:  # a log line must never cost the client its answer
            log.exception("could not log the refusals of %s", api.name)
        return response

    return wrapper
