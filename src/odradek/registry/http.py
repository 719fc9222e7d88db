"""The registry's HTTP/1.1: a small server for its listener and a small client for forwarding.

The server reads outside bytes, so everything is bounded:

* the request head (request line and headers) is at most :data:`MAX_HEAD` bytes and is parsed
  strictly (:func:`odradek._http.parse_request_head`): anything else is a 400 and the connection
  closes; it must arrive within :data:`HEAD_TIMEOUT_S` of the previous request (keep-alive) or of
  the connection's opening;
* a body must be announced with ``Content-Length`` (one, ASCII digits) and be at most
  ``max_body`` bytes (413 before anything of it is read); ``Transfer-Encoding`` is not
  implemented (501); the body must arrive within :data:`BODY_TIMEOUT_S`;
  ``Expect: 100-continue`` gets its interim answer once the length is accepted;
* at most ``max_connections`` connections at once; those beyond get 503 and are closed;
* a handler that fails unexpectedly answers 500 (error code 50001), logged; the connection and
  the listener go on serving.

Responses carry ``Content-Length``; connections are kept open between requests (HTTP/1.1, or 1.0
with ``Connection: keep-alive``) until the client closes, asks to close, or is idle too long.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from odradek._http import BadHttpRequest, HttpRequest, parse_request_head
from odradek._timeouts import wait_for
from odradek.transport.http import http_exchange
from odradek.transport.listen import TcpServer

__all__ = [
    "MEDIA_TYPE",
    "HttpServer",
    "Request",
    "Response",
    "forward",
    "json_response",
]

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
#: the longest request head accepted
MAX_HEAD = 64 * 1024
HEAD_TIMEOUT_S = 60.0
BODY_TIMEOUT_S = 30.0
WRITE_TIMEOUT_S = 30.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0

_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 406: "Not Acceptable", 408: "Request Timeout", 409: "Conflict",
    411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Entity",
    500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    #: the client's address
    peer: str
    raw_target: str = ""
    version: str = "HTTP/1.1"

    def param(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[0] if values else default

    def flag(self, name: str) -> bool:
        """A boolean query parameter as Jersey reads one: ``true`` in any case, else false."""
        return self.param(name).strip().lower() == "true"


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = MEDIA_TYPE
    headers: list[tuple[str, str]] = field(default_factory=list)


def json_response(status: int, value: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    body = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(status, body, MEDIA_TYPE, headers or [])


def _error(status: int, code: int, message: str) -> Response:
    return json_response(status, {"error_code": code, "message": message})


def _head(status: int, content_type: str, length: int, extra: list[tuple[str, str]], close: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}", f"Content-Type: {content_type}",
             f"Content-Length: {length}"]
    lines += [f"{k}: {v}" for k, v in extra]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _content_length(value: str | None) -> int | None:
    """The declared body length (None: none declared); ValueError when it is not digits."""
    if value is None:
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ValueError(value)
    return int(text)


class HttpServer:
    """An HTTP/1.1 listener calling ``handler`` for each request (see the module docstring)."""

    def __init__(
        self,
        handler: Callable[[Request], Awaitable[Response]],
        *,
        max_body: int,
        max_connections: int = 1024,
        tls: ssl.SSLContext | None = None,
        name: str = "schema registry",
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        self.max_connections = max_connections
        self.tls = tls
        self.name = name
        self._server: TcpServer | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self.address: tuple[str, int] = ("", 0)

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    async def start(self, host: str, port: int) -> None:
        self._server = await TcpServer.start(
            self._serve, host, port, limit=MAX_HEAD, ssl=self.tls,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if self.tls is not None else None,
        )
        self.address = self._server.address

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()

    async def wait_closed(self) -> None:
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer_info = writer.get_extra_info("peername")
        peer = peer_info[0] if isinstance(peer_info, tuple) else str(peer_info)
        try:
            if len(self._connections) > self.max_connections:
                await self._send(writer, _error(503, 503, "too many connections"), close=True)
                return
            await self._connection(reader, writer, peer)
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError, ssl.SSLError, TimeoutError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await wait_for(writer.wait_closed(), 1)

    async def _send(self, writer: asyncio.StreamWriter, response: Response, *, close: bool, head_only: bool = False) -> None:
        head = _head(response.status, response.content_type, len(response.body), response.headers, close)
        writer.write(head if head_only else head + response.body)
        await wait_for(writer.drain(), WRITE_TIMEOUT_S)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        while True:
            try:
                head = await wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except asyncio.IncompleteReadError as exc:
                if exc.partial.strip():
                    await self._send(writer, _error(400, 400, "the request head is incomplete"), close=True)
                return
            except asyncio.LimitOverrunError:
                await self._send(writer, _error(400, 400, f"the request head is longer than {MAX_HEAD} bytes"),
                                 close=True)
                return
            except TimeoutError:
                return
            try:
                http = parse_request_head(head)
            except BadHttpRequest as exc:
                await self._send(writer, _error(400, 400, f"bad request: {exc}"), close=True)
                return
            keep_alive = self._keep_alive(http)
            if "transfer-encoding" in http.headers:
                await self._send(writer, _error(501, 501, "Transfer-Encoding is not supported: send Content-Length"),
                                 close=True)
                return
            try:
                length = _content_length(http.headers.get("content-length"))
            except ValueError:
                await self._send(writer, _error(400, 400, "Content-Length is not a number"), close=True)
                return
            if length is not None and length > self.max_body:
                await self._send(writer, _error(413, 413, f"the request body is larger than {self.max_body} bytes "
                                                          "(schema.registry.request.max.bytes)"), close=True)
                return
            body = b""
            if length:
                if http.headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                try:
                    body = await wait_for(reader.readexactly(length), BODY_TIMEOUT_S)
                except (asyncio.IncompleteReadError, TimeoutError):
                    return
            path, _, query = http.target.partition("?")
            request = Request(
                http.method, path, parse_qs(query, keep_blank_values=True), dict(http.headers), body, peer,
                http.target, http.version,
            )
            try:
                response = await self.handler(request)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: %s %s failed", self.name, http.method, path)
                response = _error(500, 50001, "Internal Server Error")
            await self._send(writer, response, close=not keep_alive, head_only=http.method == "HEAD")
            if not keep_alive:
                return

    @staticmethod
    def _keep_alive(http: HttpRequest) -> bool:
        connection = http.headers.get("connection", "").lower()
        if http.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


# -- the client (forwarding to the writer) -------------------------------------------------------


async def forward(
    url: str,
    request: Request,
    *,
    timeout: float,
    tls: ssl.SSLContext | None,
    extra_headers: list[tuple[str, str]],
    max_response: int = 64 << 20,
) -> Response:
    """Send ``request`` to the registry at ``url`` (``http(s)://host:port``) and return its
    answer; raises OSError/TimeoutError/ValueError when there is none."""
    scheme, _, rest = url.partition("://")
    hostport = rest.rstrip("/")
    host, _, port_text = hostport.rpartition(":")
    host = host.strip("[]")
    port = int(port_text)
    context = tls if scheme == "https" else None
    if scheme == "https" and context is None:
        context = ssl.create_default_context()

    async def exchange() -> Response:
        headers = [(name, request.headers[name]) for name in ("content-type", "accept", "authorization")
                   if name in request.headers]
        status, answer_headers, body = await http_exchange(
            host, port, f"{request.method} {request.raw_target or request.path} HTTP/1.1",
            [("Host", hostport), *headers, *extra_headers], request.body,
            tls=context, max_head=MAX_HEAD, max_body=max_response)
        return Response(status, body, answer_headers.get("content-type", MEDIA_TYPE))

    return await wait_for(exchange(), timeout)
