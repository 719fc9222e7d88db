"""A small asyncio HTTP/1.1 server: one request per connection, GET and POST, form bodies.

Enough for the console's pages and JSON endpoints, behind nothing but a browser on the operator's
machine: request line and headers are bounded (``MAX_HEAD``), bodies too (``MAX_BODY``), and
every response closes its connection, so no keep-alive state has to be managed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from odradek._timeouts import wait_for
from odradek.errors import OdradekError
from odradek.transport.listen import TcpServer

__all__ = ["MAX_BODY", "MAX_HEAD", "HttpError", "HttpServer", "Request", "Response"]

log = logging.getLogger("odradek.console")

MAX_HEAD = 16 * 1024
MAX_BODY = 1024 * 1024
READ_TIMEOUT = 30.0


class HttpError(OdradekError):
    """A page's answer is an error page with this HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes = b""
    form: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        """A query or form field (the form wins), stripped."""
        return (self.form.get(name) or self.query.get(name) or default).strip()


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def html(cls, text: str, status: int = 200) -> Response:
        return cls(status, text.encode())

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(data).encode(), "application/json")

    @classmethod
    def text(cls, text: str, status: int = 200) -> Response:
        return cls(status, text.encode(), "text/plain; charset=utf-8")

    @classmethod
    def redirect(cls, location: str) -> Response:
        return cls(303, b"", "text/plain; charset=utf-8", {"Location": location})

    def encode(self) -> bytes:
        try:
            reason = HTTPStatus(self.status).phrase
        except ValueError:
            reason = "Unknown"
        head = [
            f"HTTP/1.1 {self.status} {reason}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
            "X-Frame-Options: DENY",
            "Referrer-Policy: same-origin",
            "Content-Security-Policy: default-src 'self'; img-src 'self' data:; style-src 'self'; "
            "script-src 'self'; frame-ancestors 'none'; form-action 'self'",
        ]
        head += [f"{k}: {v}" for k, v in self.headers.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + self.body


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _single(values: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[-1] for k, v in values.items()}


async def _read_request(reader: asyncio.StreamReader) -> Request:
    try:
        head = await wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
    except asyncio.LimitOverrunError:
        raise _BadRequest(431, "request head too large") from None
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError("connection closed mid-request") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, "malformed request line")
    method, target, _version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequest(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    url = urlsplit(target)
    request = Request(method.upper(), url.path or "/", _single(parse_qs(url.query)), headers)
    if "transfer-encoding" in headers:
        raise _BadRequest(411, "chunked bodies are not accepted")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise _BadRequest(400, "bad Content-Length") from None
    if length < 0 or length > MAX_BODY:
        raise _BadRequest(413, "request body too large")
    if length:
        try:
            request.body = await wait_for(reader.readexactly(length), READ_TIMEOUT)
        except asyncio.IncompleteReadError as exc:
            raise ConnectionError("connection closed mid-body") from exc
    if request.body and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        request.form = _single(parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True))
    return request


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer:
    """Serves ``handler`` on ``host:port`` (0: an ephemeral port, see :attr:`port`)."""

    def __init__(self, handler: Handler, host: str, port: int) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._server: TcpServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await TcpServer.start(self._serve, self.host, self.port, limit=MAX_HEAD)
        self.port = self._server.address[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await wait_for(self._server.wait_closed(), 5)
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                request = await _read_request(reader)
            except _BadRequest as exc:
                response = Response.text(str(exc) + "\n", exc.status)
            except (ConnectionError, TimeoutError):
                return
            else:
                try:
                    response = await self.handler(request)
                except Exception:
                    log.exception("console: %s %s failed", request.method, request.path)
                    response = Response.text("internal error\n", 500)
                if request.method == "HEAD":
                    response = Response(response.status, b"", response.content_type, response.headers)
            writer.write(response.encode())
            with contextlib.suppress(ConnectionError, TimeoutError):
                await wait_for(writer.drain(), READ_TIMEOUT)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await wait_for(writer.wait_closed(), 5)
            if task is not None:
                self._tasks.discard(task)
