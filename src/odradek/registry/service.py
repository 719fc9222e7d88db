"""The registry service: Confluent's REST API on an HTTP listener, over the broker's ``_schemas``.

Every broker with a registry listener answers every request.  Where the answer comes from:

* **reads** — from this broker's own view of ``_schemas`` (:class:`SchemaStore.sync`), when it
  hosts an in-sync replica of the partition: the view is first brought up to date with every
  record this replica held when the request arrived (its high watermark must reach that log end),
  so that a write acknowledged before the read is seen; a broker without a usable view (no
  replica, out of the ISR, still loading) forwards the read to the writer;
* **writes** (register, delete, config, mode) — by one writer, the broker leading ``_schemas``:
  another broker forwards the request to the writer's registry listener (its URL is in the
  writer's broker registration), with the caller's credentials, and relays the answer; the
  writer takes one write at a time, decides it on its caught-up view, appends the records with
  acks=all and answers once they are committed.  While no writer is known (an election) the
  request is retried until ``schema.registry.timeout.ms``, then answered 50003/50004.

``_schemas`` is created on the first write (``schema.registry.topic.replication.factor``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from odradek._clock import Clock, SystemClock
from odradek.errors import OdradekError
from odradek.registry.core import Plan, RegistryCore, parse_version, valid_subject
from odradek.registry.errors import RestError
from odradek.registry.http import MEDIA_TYPE, HttpServer, Request, Response, forward, json_response
from odradek.registry.metrics import RegistryMetrics
from odradek.registry.security import Caller, RegistrySecurity
from odradek.schemas.store import RegistryState

__all__ = ["RegistryService", "RegistrySettings", "SchemaStore"]

log = logging.getLogger("odradek.registry")
access = logging.getLogger("odradek.registry.access")

#: the header a forwarded request carries (the writer answers it itself, never forwards it on)
FORWARDED = "x-forward"
_ACCEPTED = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json", "application/json",
             "application/octet-stream", "*/*", "application/*")


class SchemaStore(Protocol):
    """What the registry needs of the broker: the ``_schemas`` partition, its view and its writer."""

    def exists(self) -> bool:
        """Whether ``_schemas`` exists (before the first write it does not: the registry is empty)."""
        ...

    async def create(self) -> None:
        """Create ``_schemas`` (RestError 50001 when it cannot be yet)."""
        ...

    async def sync(self, timeout: float) -> RegistryState | None:
        """This broker's view, holding at least every record its replica held when called; None
        when this broker has no usable view (the read goes to the writer)."""
        ...

    def is_writer(self) -> bool:
        """Whether this broker writes ``_schemas`` now (it leads the partition, its view loaded)."""
        ...

    async def append(self, records: list[tuple[bytes, bytes | None]], timeout: float) -> None:
        """Append as the writer; returns once committed (acks=all) and in the view.  Raises
        RestError, or :class:`NotWriter` when leadership moved."""
        ...

    async def writer_url(self) -> str | None:
        """The registry URL of the other broker writing ``_schemas`` (None: none known now)."""
        ...

    def forget_writer(self) -> None:
        """The URL given did not answer: look it up again next time."""
        ...


class NotWriter(OdradekError):
    """This broker stopped writing ``_schemas`` (leadership moved): the write goes to the new one."""


@dataclass(frozen=True)
class RegistrySettings:
    compatibility_level: str = "BACKWARD"
    mode_mutability: bool = True
    max_body: int = 2 << 20
    timeout_s: float = 10.0
    max_record_bytes: int = 1 << 20


_Handler = Callable[["_Call"], Awaitable[Response]]


@dataclass
class _Call:
    request: Request
    caller: Caller
    args: tuple[str, ...]


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    name: str
    write: bool
    endpoint: str


def _route(method: str, path: str, name: str, *, write: bool = False) -> _Route:
    regex = "^" + re.sub(r"\{[a-z]+\}", "([^/]+)", path) + "/?$"
    return _Route(method, re.compile(regex), name, write, path)


_ROUTES = [
    _route("GET", "/", "root"),
    _route("GET", "/schemas/types", "schema_types"),
    _route("GET", "/schemas", "schemas"),
    _route("GET", "/schemas/ids/{id}", "schema_by_id"),
    _route("GET", "/schemas/ids/{id}/schema", "schema_text_by_id"),
    _route("GET", "/schemas/ids/{id}/subjects", "id_subjects"),
    _route("GET", "/schemas/ids/{id}/versions", "id_versions"),
    _route("GET", "/subjects", "subjects"),
    _route("POST", "/subjects/{subject}", "lookup"),
    _route("DELETE", "/subjects/{subject}", "delete_subject", write=True),
    _route("GET", "/subjects/{subject}/versions", "versions"),
    _route("POST", "/subjects/{subject}/versions", "register", write=True),
    _route("GET", "/subjects/{subject}/versions/{version}", "version"),
    _route("DELETE", "/subjects/{subject}/versions/{version}", "delete_version", write=True),
    _route("GET", "/subjects/{subject}/versions/{version}/schema", "version_text"),
    _route("GET", "/subjects/{subject}/versions/{version}/referencedby", "referenced_by"),
    _route("POST", "/compatibility/subjects/{subject}/versions/{version}", "check_version"),
    _route("POST", "/compatibility/subjects/{subject}/versions", "check_subject"),
    _route("GET", "/config", "get_global_config"),
    _route("PUT", "/config", "set_global_config", write=True),
    _route("DELETE", "/config", "delete_global_config", write=True),
    _route("GET", "/config/{subject}", "get_config"),
    _route("PUT", "/config/{subject}", "set_config", write=True),
    _route("DELETE", "/config/{subject}", "delete_config", write=True),
    _route("GET", "/mode", "get_global_mode"),
    _route("PUT", "/mode", "set_global_mode", write=True),
    _route("DELETE", "/mode", "delete_global_mode", write=True),
    _route("GET", "/mode/{subject}", "get_mode"),
    _route("PUT", "/mode/{subject}", "set_mode", write=True),
    _route("DELETE", "/mode/{subject}", "delete_mode", write=True),
    _route("GET", "/contexts", "contexts"),
]


def _int_param(request: Request, name: str, default: int) -> int:
    text = request.param(name, "")
    if text == "":
        return default
    t = text.strip()
    if not t.lstrip("+-").isdigit() or len(t) > 11:
        raise RestError.bad_request(f"query parameter {name}={text!r} is not a number")
    return int(t)


def _page(items: list[Any], request: Request) -> list[Any]:
    offset = max(0, _int_param(request, "offset", 0))
    limit = _int_param(request, "limit", -1)
    items = items[offset:]
    return items if limit < 0 else items[:limit]


def _schema_id(text: str) -> int:
    t = text.strip()
    if not t.lstrip("+-").isdigit() or len(t) > 11:
        raise RestError.not_found()
    return int(t)


def _subject_arg(text: str) -> str:
    return unquote(text)


def _global(subject: str) -> str | None:
    """Confluent names the default context ``:.:``: config and mode on it are the global ones."""
    return None if subject in (":.:", "") else subject


class RegistryService:
    """The REST API over a :class:`SchemaStore` (see the module docstring)."""

    def __init__(
        self,
        settings: RegistrySettings,
        store: SchemaStore,
        security: RegistrySecurity,
        *,
        forward_tls: Any = None,
        metrics: RegistryMetrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        #: the broker's clock: request times and the deadlines of writes and forwarded requests
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.store = store
        self.security = security
        self.forward_tls = forward_tls
        self.metrics = metrics or RegistryMetrics()
        self.core = RegistryCore(settings.compatibility_level, settings.mode_mutability,
                                 lambda: settings.max_record_bytes)
        self._write_lock = asyncio.Lock()
        self.server: HttpServer | None = None
        self.url = ""

    def _now(self) -> float:
        """Seconds of the monotonic clock."""
        return self.clock.monotonic_ms() / 1000

    # -- the listener --------------------------------------------------------------------------

    async def start(self, host: str, port: int, tls: Any = None) -> None:
        self.server = HttpServer(self.handle, max_body=self.settings.max_body, tls=tls)
        await self.server.start(host, port)
        bound_host, bound_port = self.server.address
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"{self.server.scheme}://{shown}:{bound_port}"

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def wait_closed(self) -> None:
        if self.server is not None:
            await self.server.wait_closed()

    # -- requests ------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        started = self._now()
        endpoint = "unknown"
        try:
            response, endpoint = await self._handle(request)
        except RestError as exc:
            response = json_response(exc.status, exc.body())
            if exc.status == 401:
                response.headers.append(("WWW-Authenticate", 'Basic realm="odradek schema registry"'))
        ms = (self._now() - started) * 1000
        self.metrics.done(endpoint, request.method, response.status, ms)
        if access.isEnabledFor(logging.DEBUG):
            access.debug("%s %s %s -> %d in %.1f ms", request.peer, request.method, request.path, response.status, ms)
        return response

    def _content_type(self, request: Request) -> str:
        accept = request.headers.get("accept", "")
        if not accept:
            return MEDIA_TYPE
        types = [part.split(";", 1)[0].strip().lower() for part in accept.split(",")]
        for t in types:
            if t in ("application/vnd.schemaregistry.v1+json", "*/*", "application/*"):
                return MEDIA_TYPE
            if t in ("application/vnd.schemaregistry+json", "application/json"):
                return t
        raise RestError.not_acceptable()

    async def _handle(self, request: Request) -> tuple[Response, str]:
        path = request.path
        matched = [r for r in _ROUTES if r.pattern.match(path)]
        if not matched:
            raise RestError.not_found()
        route = next((r for r in matched if r.method == request.method), None)
        if route is None:
            raise RestError.method_not_allowed()
        content_type = self._content_type(request)
        if request.method in ("POST", "PUT"):
            given = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if given and given not in _ACCEPTED:
                raise RestError.unsupported_media_type()
        match = route.pattern.match(path)
        assert match is not None
        args = tuple(match.groups())
        if route.name == "root":
            return json_response(200, {}), route.endpoint
        caller = await self._authenticate(request)
        call = _Call(request, caller, args)
        handler: _Handler = getattr(self, "_" + route.name)
        response = await handler(call)
        if response.content_type == MEDIA_TYPE and content_type != MEDIA_TYPE:
            response.content_type = content_type
        return response, route.endpoint

    async def _authenticate(self, request: Request) -> Caller:
        try:
            return await self.security.authenticate(request)
        except RestError:
            if request.headers.get("authorization"):
                self.metrics.auth_failures += 1
            raise

    def _body(self, request: Request) -> Any:
        if not request.body.strip():
            raise RestError.unprocessable("the request has no body")
        try:
            return json.loads(request.body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise RestError.bad_request(f"the request body is not JSON: {exc}") from None

    # -- where answers come from ---------------------------------------------------------------

    async def _read_state(self, call: _Call) -> RegistryState | Response:
        """The view to answer a read from, or the writer's answer to it (forwarded)."""
        if not self.store.exists():
            return RegistryState()
        deadline = self._now() + self.settings.timeout_s
        while True:
            state = await self.store.sync(max(0.1, deadline - self._now()) / 2)
            if state is not None:
                return state
            if not self.store.is_writer():
                forwarded = await self._forward(call, deadline)
                if forwarded is not None:
                    return forwarded
            if self._now() >= deadline:
                raise RestError.timeout("the registry's view of _schemas is not loaded yet")
            await asyncio.sleep(0.05)

    async def _write(self, call: _Call, plan: Callable[[RegistryState], Awaitable[Plan]]) -> Response:
        """Run ``plan`` on the writer (here, or forwarded) and answer with its result."""
        deadline = self._now() + self.settings.timeout_s
        if not self.store.exists():
            await self.store.create()
        while True:
            if self.store.is_writer():
                try:
                    async with self._write_lock:
                        state = await self.store.sync(max(0.1, deadline - self._now()))
                        if state is None:
                            raise NotWriter()
                        result = await plan(state)
                        if result.records:
                            await self.store.append(result.records, max(0.1, deadline - self._now()))
                    return json_response(result.status, result.answer)
                except NotWriter:
                    if self._now() >= deadline:
                        raise RestError.unknown_leader("the _schemas writer changed; try again") from None
                    await asyncio.sleep(0.05)
                    continue
            if call.request.headers.get(FORWARDED):
                raise RestError.unknown_leader("this broker does not write _schemas now")
            forwarded = await self._forward(call, deadline)
            if forwarded is not None:
                return forwarded

    async def _forward(self, call: _Call, deadline: float) -> Response | None:
        """Send the request to the writer and relay its answer, retrying while there is none;
        None when this broker became the writer meanwhile."""
        if call.request.headers.get(FORWARDED):
            raise RestError.unknown_leader("this broker does not serve _schemas now")
        last = "no broker writes _schemas now"
        while True:
            if self.store.is_writer():
                return None
            url = await self.store.writer_url()
            if url is not None:
                try:
                    self.metrics.forwarded += 1
                    response = await forward(
                        url, call.request, timeout=max(0.1, deadline - self._now()), tls=self.forward_tls,
                        extra_headers=[("X-Forward", "true")],
                    )
                except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                    last = f"{url} did not answer: {exc or type(exc).__name__}"
                    self.store.forget_writer()
                else:
                    if not _retry(response):
                        return response
                    last = f"{url} answered {response.status}: {response.body[:200]!r}"
            if self._now() >= deadline:
                if url is None:
                    raise RestError.unknown_leader(f"Leader not known: {last}")
                raise RestError.forwarding_failed(f"Error while forwarding the request to the leader: {last}")
            await asyncio.sleep(0.1)

    # -- the endpoints -------------------------------------------------------------------------

    async def _reading(self, call: _Call, answer: Callable[[RegistryState], Awaitable[Any]]) -> Response:
        state = await self._read_state(call)
        if isinstance(state, Response):
            return state
        return json_response(200, await answer(state))

    async def _schema_types(self, call: _Call) -> Response:
        return json_response(200, self.core.schema_types())

    async def _contexts(self, call: _Call) -> Response:
        return json_response(200, ["."])

    async def _subjects(self, call: _Call) -> Response:
        r = call.request

        async def answer(state: RegistryState) -> Any:
            names = self.core.subjects(state, prefix=r.param("subjectPrefix") or None, deleted=r.flag("deleted"),
                                       deleted_only=r.flag("deletedOnly"))
            names = [n for n in names if self.security.may(call.caller, "DESCRIBE", n)]
            return _page(names, r)

        return await self._reading(call, answer)

    async def _schemas(self, call: _Call) -> Response:
        r = call.request

        async def answer(state: RegistryState) -> Any:
            prefix = r.param("subjectPrefix")
            out = []
            for subject in state.subject_names(deleted=r.flag("deleted")):
                if prefix and not subject.startswith(prefix):
                    continue
                if not self.security.may(call.caller, "DESCRIBE", subject):
                    continue
                versions = state.versions(subject, deleted=r.flag("deleted"))
                if r.flag("latestOnly"):
                    versions = versions[-1:]
                out += [await self.core.version_answer(state, sv, "") for sv in versions]
            return _page(out, r)

        return await self._reading(call, answer)

    def _may_see_id(self, call: _Call, state: RegistryState, schema_id: int) -> None:
        if not self.security.authorizing:
            return
        holders = state.subjects_of(schema_id, deleted=True)
        if holders and not any(self.security.may(call.caller, "DESCRIBE", s) for s, _v in holders):
            raise RestError.forbidden(f"User is denied operation Describe on Schema: {schema_id}")

    async def _schema_by_id(self, call: _Call) -> Response:
        schema_id = _schema_id(call.args[0])
        r = call.request

        async def answer(state: RegistryState) -> Any:
            self._may_see_id(call, state, schema_id)
            return await self.core.id_answer(state, schema_id, r.param("format"), r.flag("fetchMaxId"))

        return await self._reading(call, answer)

    async def _schema_text_by_id(self, call: _Call) -> Response:
        schema_id = _schema_id(call.args[0])
        state = await self._read_state(call)
        if isinstance(state, Response):
            return state
        self._may_see_id(call, state, schema_id)
        sv = self.core.schema_by_id(state, schema_id)
        text = await self.core.formatted(state, sv, call.request.param("format"))
        return Response(200, text.encode())

    async def _id_subjects(self, call: _Call) -> Response:
        schema_id = _schema_id(call.args[0])

        async def answer(state: RegistryState) -> Any:
            found = state.subjects_of(schema_id, deleted=call.request.flag("deleted"))
            if not found:
                raise RestError.schema_not_found()
            subjects = sorted({s for s, _v in found if self.security.may(call.caller, "DESCRIBE", s)})
            return _page(subjects, call.request)

        return await self._reading(call, answer)

    async def _id_versions(self, call: _Call) -> Response:
        schema_id = _schema_id(call.args[0])

        async def answer(state: RegistryState) -> Any:
            found = state.subjects_of(schema_id, deleted=call.request.flag("deleted"))
            if not found:
                raise RestError.schema_not_found()
            out = [{"subject": s, "version": v} for s, v in found if self.security.may(call.caller, "DESCRIBE", s)]
            return _page(out, call.request)

        return await self._reading(call, answer)

    async def _versions(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        self.security.require(call.caller, "DESCRIBE", subject)
        r = call.request

        async def answer(state: RegistryState) -> Any:
            found = self.core.versions(state, subject, deleted=r.flag("deleted"), deleted_only=r.flag("deletedOnly"),
                                       deleted_as_negative=r.flag("deletedAsNegative"))
            return _page(found, r)

        return await self._reading(call, answer)

    async def _version(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        version = parse_version(unquote(call.args[1]))
        self.security.require(call.caller, "DESCRIBE", subject)
        r = call.request

        async def answer(state: RegistryState) -> Any:
            sv = self.core.get_version(state, subject, version, deleted=r.flag("deleted"))
            return await self.core.version_answer(state, sv, r.param("format"))

        return await self._reading(call, answer)

    async def _version_text(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        version = parse_version(unquote(call.args[1]))
        self.security.require(call.caller, "DESCRIBE", subject)
        state = await self._read_state(call)
        if isinstance(state, Response):
            return state
        sv = self.core.get_version(state, subject, version, deleted=call.request.flag("deleted"))
        return Response(200, (await self.core.formatted(state, sv, call.request.param("format"))).encode())

    async def _referenced_by(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        version = parse_version(unquote(call.args[1]))
        self.security.require(call.caller, "DESCRIBE", subject)

        async def answer(state: RegistryState) -> Any:
            return _page(self.core.referenced_by(state, subject, version), call.request)

        return await self._reading(call, answer)

    async def _lookup(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        self.security.require(call.caller, "DESCRIBE", subject)
        body = self._body(call.request)
        r = call.request

        async def answer(state: RegistryState) -> Any:
            return await self.core.lookup(state, subject, body, normalize=r.flag("normalize"), deleted=r.flag("deleted"),
                                          fmt=r.param("format"))

        return await self._reading(call, answer)

    async def _check(self, call: _Call, version: int | None) -> Response:
        subject = _subject_arg(call.args[0])
        self.security.require(call.caller, "DESCRIBE", subject)
        body = self._body(call.request)
        r = call.request

        async def answer(state: RegistryState) -> Any:
            return await self.core.check(state, subject, version, body, normalize=r.flag("normalize"),
                                         verbose=r.flag("verbose"))

        return await self._reading(call, answer)

    async def _check_version(self, call: _Call) -> Response:
        return await self._check(call, parse_version(unquote(call.args[1])))

    async def _check_subject(self, call: _Call) -> Response:
        return await self._check(call, None)

    async def _register(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        if not valid_subject(subject):
            raise RestError.invalid_subject(subject)
        self.security.require(call.caller, "WRITE", subject)
        body = self._body(call.request)
        r = call.request
        return await self._write(call, lambda state: self.core.register(
            state, subject, body, normalize=r.flag("normalize"), force=r.flag("force")))

    async def _delete_subject(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        self.security.require(call.caller, "DELETE", subject)
        permanent = call.request.flag("permanent")

        async def plan(state: RegistryState) -> Plan:
            return self.core.delete_subject(state, subject, permanent=permanent)

        return await self._write(call, plan)

    async def _delete_version(self, call: _Call) -> Response:
        subject = _subject_arg(call.args[0])
        version = parse_version(unquote(call.args[1]))
        self.security.require(call.caller, "DELETE", subject)
        permanent = call.request.flag("permanent")

        async def plan(state: RegistryState) -> Plan:
            return self.core.delete_version(state, subject, version, permanent=permanent)

        return await self._write(call, plan)

    # config and mode

    async def _config_get(self, call: _Call, subject: str | None) -> Response:
        self.security.require(call.caller, "DESCRIBE_CONFIGS" if subject is None else "DESCRIBE", subject)

        async def answer(state: RegistryState) -> Any:
            return self.core.get_config(state, subject, default_to_global=call.request.flag("defaultToGlobal"))

        return await self._reading(call, answer)

    async def _config_set(self, call: _Call, subject: str | None) -> Response:
        self.security.require(call.caller, "ALTER_CONFIGS", subject)
        body = self._body(call.request)

        async def plan(state: RegistryState) -> Plan:
            return self.core.set_config(state, subject, body)

        return await self._write(call, plan)

    async def _config_delete(self, call: _Call, subject: str | None) -> Response:
        self.security.require(call.caller, "ALTER_CONFIGS", subject)

        async def plan(state: RegistryState) -> Plan:
            return self.core.delete_config(state, subject)

        return await self._write(call, plan)

    async def _get_global_config(self, call: _Call) -> Response:
        return await self._config_get(call, None)

    async def _set_global_config(self, call: _Call) -> Response:
        return await self._config_set(call, None)

    async def _delete_global_config(self, call: _Call) -> Response:
        return await self._config_delete(call, None)

    async def _get_config(self, call: _Call) -> Response:
        return await self._config_get(call, _global(_subject_arg(call.args[0])))

    async def _set_config(self, call: _Call) -> Response:
        return await self._config_set(call, _global(_subject_arg(call.args[0])))

    async def _delete_config(self, call: _Call) -> Response:
        return await self._config_delete(call, _global(_subject_arg(call.args[0])))

    async def _mode_get(self, call: _Call, subject: str | None) -> Response:
        self.security.require(call.caller, "DESCRIBE_CONFIGS" if subject is None else "DESCRIBE", subject)

        async def answer(state: RegistryState) -> Any:
            return self.core.get_mode(state, subject, default_to_global=call.request.flag("defaultToGlobal"))

        return await self._reading(call, answer)

    async def _mode_set(self, call: _Call, subject: str | None) -> Response:
        self.security.require(call.caller, "ALTER_CONFIGS", subject)
        body = self._body(call.request)
        force = call.request.flag("force")

        async def plan(state: RegistryState) -> Plan:
            return self.core.set_mode(state, subject, body, force=force)

        return await self._write(call, plan)

    async def _mode_delete(self, call: _Call, subject: str | None) -> Response:
        self.security.require(call.caller, "ALTER_CONFIGS", subject)

        async def plan(state: RegistryState) -> Plan:
            return self.core.delete_mode(state, subject)

        return await self._write(call, plan)

    async def _get_global_mode(self, call: _Call) -> Response:
        return await self._mode_get(call, None)

    async def _set_global_mode(self, call: _Call) -> Response:
        return await self._mode_set(call, None)

    async def _delete_global_mode(self, call: _Call) -> Response:
        return await self._mode_delete(call, None)

    async def _get_mode(self, call: _Call) -> Response:
        return await self._mode_get(call, _global(_subject_arg(call.args[0])))

    async def _set_mode(self, call: _Call) -> Response:
        return await self._mode_set(call, _global(_subject_arg(call.args[0])))

    async def _delete_mode(self, call: _Call) -> Response:
        return await self._mode_delete(call, _global(_subject_arg(call.args[0])))


def _retry(response: Response) -> bool:
    """Whether the writer's answer means "not me now" (leadership moved): try again."""
    if response.status != 500:
        return False
    try:
        code = json.loads(response.body).get("error_code")
    except (ValueError, AttributeError):
        return False
    return code == 50004
