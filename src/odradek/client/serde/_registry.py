"""Clients of a Confluent-compatible schema registry over HTTP, blocking and asyncio, sharing one
schema cache each.

Every call is written once as a *plan*: a generator that looks in the cache, yields the HTTP
requests it needs and returns the answer; :class:`SchemaRegistryClient` runs plans with blocking
HTTP (``urllib``), :class:`AsyncSchemaRegistryClient` over asyncio streams.  So the cache rules
are the same for both: schemas by id and ids by (subject, schema) are kept for the life of the
client (ids are global and stable); a subject's latest version is asked each time (the
serializers keep what they chose).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from odradek.client._config import ClientConfigError
from odradek.client.serde._wire import SchemaRegistryError
from odradek.transport.http import http_exchange

__all__ = [
    "AsyncSchemaRegistryClient",
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
]

T = TypeVar("T")
MEDIA = "application/vnd.schemaregistry.v1+json"
#: the largest answer read from a registry (a schema with its references)
MAX_ANSWER = 64 * 1024 * 1024


@dataclass(frozen=True)
class SchemaReference:
    """A reference of a schema: ``name`` as the schema names it (an Avro full name, a ``.proto``
    import path, a JSON Schema ``$ref``), the ``subject`` and ``version`` it is registered as."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    """A schema text of a type (``AVRO``, ``JSON``, ``PROTOBUF``) with its references."""

    schema_str: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()

    def body(self) -> dict[str, Any]:
        """The JSON body of a register or look-up request for this schema, as the registry's REST API takes it
        (``schema``, and ``schemaType`` / ``references`` when not plain Avro)."""
        out: dict[str, Any] = {"schema": self.schema_str}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                                 for r in self.references]
        return out


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry has it: its global ``schema_id``, and when known the ``subject``
    and ``version`` it was found under."""

    schema_id: int
    schema: Schema
    subject: str | None = None
    version: int | None = None


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    body: Any = None


Plan = Generator[_Request, Any, T]


def _schema_of(answer: Mapping[str, Any]) -> Schema:
    try:
        refs = tuple(SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
                     for r in answer.get("references") or ())
        return Schema(str(answer["schema"]), str(answer.get("schemaType") or "AVRO"), refs)
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaRegistryError(200, -1, f"the registry's answer is not a schema: {exc}") from exc


def _q(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


@dataclass
class _Cache:
    by_id: dict[int, Schema] = field(default_factory=dict)
    ids: dict[tuple[str, Schema, bool], RegisteredSchema] = field(default_factory=dict)
    versions: dict[tuple[str, int], RegisteredSchema] = field(default_factory=dict)


_CONFIG_KEYS = frozenset({"url", "basic.auth.user.info", "ssl.ca.location", "ssl.certificate.location",
                          "ssl.key.location", "timeout.ms"})


class _Registry:
    """Configuration, cache and plans shared by the blocking and the asyncio client."""

    def __init__(self, config: str | Mapping[str, Any]) -> None:
        conf: dict[str, Any] = {"url": config} if isinstance(config, str) else dict(config)
        unknown = set(conf) - _CONFIG_KEYS
        if unknown:
            raise ClientConfigError(f"unknown schema registry client config {sorted(unknown)}: "
                                    f"known are {sorted(_CONFIG_KEYS)}")
        url = str(conf.get("url") or "")
        split = urllib.parse.urlsplit(url.split(",")[0].strip())
        if split.scheme not in ("http", "https") or not split.hostname:
            raise ClientConfigError(f"the schema registry url must be http(s)://host[:port], not {url!r}")
        self.url = f"{split.scheme}://{split.netloc.rpartition('@')[2]}{split.path.rstrip('/')}"
        self._scheme = split.scheme
        self._host = split.hostname
        self._port = split.port or (443 if split.scheme == "https" else 80)
        self._base_path = split.path.rstrip("/")
        self.timeout = int(conf.get("timeout.ms", 30000)) / 1000
        user_info = conf.get("basic.auth.user.info")
        if user_info is None and split.username is not None:
            user_info = f"{urllib.parse.unquote(split.username)}:{urllib.parse.unquote(split.password or '')}"
        self._headers = {"Accept": MEDIA, "Content-Type": MEDIA}
        if user_info:
            token = base64.b64encode(str(user_info).encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self._ssl: ssl.SSLContext | None = None
        if split.scheme == "https":
            self._ssl = ssl.create_default_context(cafile=conf.get("ssl.ca.location"))
            if conf.get("ssl.certificate.location"):
                self._ssl.load_cert_chain(conf["ssl.certificate.location"], conf.get("ssl.key.location"))
        self._cache = _Cache()
        #: HTTP requests made so far (the cache's effect can be seen)
        self.http_requests = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- plans ---------------------------------------------------------------------------------

    def _get_schema(self, schema_id: int) -> Plan[Schema]:
        cached = self._cache.by_id.get(schema_id)
        if cached is not None:
            return cached
        schema = _schema_of((yield _Request("GET", f"/schemas/ids/{schema_id}")))
        self._cache.by_id[schema_id] = schema
        return schema

    def _register(self, subject: str, schema: Schema, normalize: bool) -> Plan[RegisteredSchema]:
        key = (subject, schema, normalize)
        cached = self._cache.ids.get(key)
        if cached is not None:
            return cached
        query = "?normalize=true" if normalize else ""
        answer = yield _Request("POST", f"/subjects/{_q(subject)}/versions{query}", schema.body())
        reg = RegisteredSchema(int(answer["id"]), schema, subject)
        self._cache.ids[key] = reg
        self._cache.by_id.setdefault(reg.schema_id, schema)
        return reg

    def _lookup(self, subject: str, schema: Schema, normalize: bool) -> Plan[RegisteredSchema]:
        key = (subject, schema, normalize)
        cached = self._cache.ids.get(key)
        if cached is not None and cached.version is not None:
            return cached
        query = "?normalize=true" if normalize else ""
        answer = yield _Request("POST", f"/subjects/{_q(subject)}{query}", schema.body())
        reg = RegisteredSchema(int(answer["id"]), schema, subject, int(answer["version"]))
        self._cache.ids[key] = reg
        self._cache.by_id.setdefault(reg.schema_id, schema)
        return reg

    def _version(self, subject: str, version: int | str) -> Plan[RegisteredSchema]:
        if isinstance(version, int):
            cached = self._cache.versions.get((subject, version))
            if cached is not None:
                return cached
        answer = yield _Request("GET", f"/subjects/{_q(subject)}/versions/{version}")
        reg = RegisteredSchema(int(answer["id"]), _schema_of(answer), subject, int(answer["version"]))
        self._cache.versions[(subject, reg.version or 0)] = reg
        self._cache.by_id.setdefault(reg.schema_id, reg.schema)
        return reg

    # -- HTTP ----------------------------------------------------------------------------------

    def _encode(self, request: _Request) -> bytes | None:
        self.http_requests += 1
        return None if request.body is None else json.dumps(request.body).encode()

    @staticmethod
    def _answer(status: int, body: bytes) -> Any:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        if status >= 400 or parsed is None:
            code, message = -1, body[:200].decode("utf-8", "replace") or f"HTTP {status}"
            if isinstance(parsed, dict):
                try:
                    code = int(parsed.get("error_code", -1))
                except (TypeError, ValueError):
                    code = -1
                message = str(parsed.get("message", message))
            raise SchemaRegistryError(status, code, message)
        return parsed


class SchemaRegistryClient(_Registry):
    """A blocking client of a Confluent-compatible schema registry (Odradek's own, served by the
    broker on ``schema.registry.listeners``, or Confluent's).

    ``SchemaRegistryClient("http://127.0.0.1:8081")`` or a dict with Confluent's client names:
    ``url``, ``basic.auth.user.info`` (``user:password``), ``ssl.ca.location``,
    ``ssl.certificate.location``, ``ssl.key.location``, ``timeout.ms`` (default 30000).
    Errors the registry answers raise :class:`SchemaRegistryError`.  Thread-safe enough to share
    between serializers: the cache is only ever added to.
    """

    def _run(self, plan: Plan[T]) -> T:
        try:
            request = next(plan)
            while True:
                # an error answer is raised inside the plan, which may turn it into its own
                try:
                    answer = self._http(request)
                except SchemaRegistryError as exc:
                    request = plan.throw(exc)
                else:
                    request = plan.send(answer)
        except StopIteration as done:
            return done.value

    def _http(self, request: _Request) -> Any:
        data = self._encode(request)
        req = urllib.request.Request(self.url + request.path, data=data, method=request.method,
                                     headers=self._headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                return self._answer(resp.status, resp.read(MAX_ANSWER))
        except urllib.error.HTTPError as exc:
            return self._answer(exc.code, exc.read(MAX_ANSWER))
        except (urllib.error.URLError, OSError) as exc:
            raise SchemaRegistryError(-1, -1, f"the schema registry at {self.url} could not be reached: {exc}") from exc

    def get_schema(self, schema_id: int) -> Schema:
        """The schema with this global id (``GET /schemas/ids/{id}``), cached."""
        return self._run(self._get_schema(schema_id))

    def register_schema(self, subject: str, schema: Schema, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject`` (or find it there): its id, cached."""
        return self._run(self._register(subject, schema, normalize)).schema_id

    def lookup_schema(self, subject: str, schema: Schema, normalize: bool = False) -> RegisteredSchema:
        """The id and version of ``schema`` under ``subject`` (40403 when it is not there), cached."""
        return self._run(self._lookup(subject, schema, normalize))

    def get_latest_version(self, subject: str) -> RegisteredSchema:
        """The subject's latest version (asked each time)."""
        return self._run(self._version(subject, "latest"))

    def get_version(self, subject: str, version: int) -> RegisteredSchema:
        """One version of a subject, cached."""
        return self._run(self._version(subject, version))


class AsyncSchemaRegistryClient(_Registry):
    """The asyncio twin of :class:`SchemaRegistryClient` (same configuration, same cache rules):
    each HTTP request is one connection over asyncio streams, bounded by ``timeout.ms``."""

    async def _run(self, plan: Plan[T]) -> T:
        try:
            request = next(plan)
            while True:
                # an error answer is raised inside the plan, which may turn it into its own
                try:
                    answer = await self._http(request)
                except SchemaRegistryError as exc:
                    request = plan.throw(exc)
                else:
                    request = plan.send(answer)
        except StopIteration as done:
            return done.value

    async def _http(self, request: _Request) -> Any:
        data = self._encode(request) or b""
        try:
            status, body = await asyncio.wait_for(self._exchange(request, data), self.timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, TimeoutError) as exc:
            raise SchemaRegistryError(-1, -1, f"the schema registry at {self.url} could not be reached: "
                                              f"{type(exc).__name__} {exc}") from exc
        return self._answer(status, body)

    async def _exchange(self, request: _Request, data: bytes) -> tuple[int, bytes]:
        host = self._host if self._port in (80, 443) else f"{self._host}:{self._port}"
        status, _headers, body = await http_exchange(
            self._host, self._port, f"{request.method} {self._base_path}{request.path} HTTP/1.1",
            [("Host", host), *self._headers.items()], data, tls=self._ssl, max_body=MAX_ANSWER)
        return status, body

    async def get_schema(self, schema_id: int) -> Schema:
        """The schema with this global id (``GET /schemas/ids/{id}``), cached."""
        return await self._run(self._get_schema(schema_id))

    async def register_schema(self, subject: str, schema: Schema, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject`` (or find it there): its id, cached."""
        return (await self._run(self._register(subject, schema, normalize))).schema_id

    async def lookup_schema(self, subject: str, schema: Schema, normalize: bool = False) -> RegisteredSchema:
        """The id and version of ``schema`` under ``subject`` (40403 when it is not there), cached."""
        return await self._run(self._lookup(subject, schema, normalize))

    async def get_latest_version(self, subject: str) -> RegisteredSchema:
        """The subject's latest version (asked each time)."""
        return await self._run(self._version(subject, "latest"))

    async def get_version(self, subject: str, version: int) -> RegisteredSchema:
        """One version of a subject, cached."""
        return await self._run(self._version(subject, version))


