"""The fault control endpoint of a test broker: HTTP with JSON bodies on 127.0.0.1, an ephemeral port.

It exists only in test mode (``odradek serve --test-mode``, a hidden option): the broker then says
``fault control at http://127.0.0.1:PORT/faults`` in its ready line.  One request a command::

    POST /faults   {"op": "arm", "faults": [{"kind": "error", "api": "Produce",
                                             "error": "NOT_LEADER_OR_FOLLOWER", "times": 3}]}
    POST /faults   {"op": "clear"}                    (or "id": N, or "kind": "hold")
    POST /faults   {"op": "reset"}                    (clear, and forget what was received)
    POST /faults   {"op": "drop", "client_id": "app"} (close that client's connections)
    POST /faults   {"op": "fence", "transactional_id": "tx-1"}
    POST /faults   {"op": "expire", "group_id": "g", "member_id": null}
    POST /faults   {"op": "state"}                    (the rules, what was injected)
    POST /faults   {"op": "received"}                 (requests per API, produced batches, commits)

Answers are JSON: 200 with the result, 400 ``{"error": "..."}`` for a body that is not a command
(nothing is armed then: a list of faults is armed all or none), 403 for a Host that is not this
loopback endpoint (a web page cannot drive it: DNS rebinding), 415 without
``Content-Type: application/json`` (a web form cannot post it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from odradek._http import BadHttpRequest, parse_request_head
from odradek._timeouts import wait_for
from odradek.broker.faults import FaultInjector
from odradek.cluster.faults import FaultSpecError, parse_rule
from odradek.errors import KafkaError, OdradekError
from odradek.transport.listen import TcpServer

__all__ = ["MAX_BODY", "FaultControlServer", "run_command"]

log = logging.getLogger("odradek.faults")

#: the largest command body accepted
MAX_BODY = 1 << 20
_OPS = ("arm", "clear", "reset", "drop", "fence", "expire", "state", "received")


class CommandError(OdradekError, ValueError):
    pass


def _field(body: dict[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, str) and not value):
        raise CommandError(f"{name}: expected {'a non-empty string' if kind is str else kind.__name__}, got {value!r}")
    return value


async def run_command(faults: FaultInjector, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Carry out one command body: (HTTP status, JSON answer).  A body that is not a command
    changes nothing and gets 400 with what is wrong."""
    try:
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, too deep, a too long number
            raise CommandError(f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise CommandError("a command is a JSON object with an op")
        op = body.get("op")
        if op not in _OPS:
            raise CommandError(f"op: {op!r} is not one of {', '.join(_OPS)}")
        if op == "arm":
            specs = body.get("faults")
            if not isinstance(specs, list) or not specs:
                raise CommandError("arm: faults is a non-empty list of faults")
            for spec in specs:  # all or none
                parse_rule(spec)
            return 200, {"armed": [faults.arm(spec).describe() for spec in specs]}
        if op == "clear":
            rule_id = _field(body, "id", int, required=False)
            kind = _field(body, "kind", str, required=False)
            return 200, {"cleared": faults.clear(rule_id, kind=kind)}
        if op == "reset":
            faults.reset()
            return 200, {}
        if op == "drop":
            return 200, {"closed": faults.drop(_field(body, "client_id", str, required=False))}
        if op == "fence":
            await faults.fence(_field(body, "transactional_id", str))
            return 200, {}
        if op == "expire":
            group = _field(body, "group_id", str)
            return 200, {"expired": await faults.expire_member(group, _field(body, "member_id", str, required=False))}
        if op == "state":
            return 200, faults.describe()
        received = faults.script.received
        return 200, {
            "per_api": dict(received.per_api), "requests": list(received.requests),
            "batches": list(received.batches), "commits": list(received.commits),
        }
    except (CommandError, FaultSpecError) as exc:
        return 400, {"error": str(exc)}
    except KafkaError as exc:
        return 409, {"error": f"{exc.code.name}: {exc.message}"}


class FaultControlServer:
    """The loopback HTTP listener of :func:`run_command`."""

    def __init__(self, faults: FaultInjector) -> None:
        self.faults = faults
        self._server: TcpServer | None = None
        self.address = ("127.0.0.1", 0)

    @property
    def url(self) -> str:
        return f"http://{self.address[0]}:{self.address[1]}/faults"

    async def start(self) -> None:
        self._server = await TcpServer.start(self._serve, "127.0.0.1", 0)
        self.address = self._server.address
        log.info("fault control at %s (test mode)", self.url)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                status, answer = await self._answer(head, reader)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, TimeoutError):
                return
            except Exception:
                log.exception("fault control: a command failed")
                status, answer = 500, {"error": "the command failed: see the broker's log"}
            body = json.dumps(answer).encode()
            reason = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
                      409: "Conflict", 500: "Internal Server Error", 411: "Length Required", 413: "Content Too Large",
                      415: "Unsupported Media Type"}.get(status, "Error")
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode() + body
            )
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()

    async def _answer(self, head: bytes, reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
        try:
            request = parse_request_head(head)
        except BadHttpRequest as exc:
            return 400, {"error": f"bad request: {exc}"}
        host = request.headers.get("host", "")
        port = self.address[1]
        if host not in (f"127.0.0.1:{port}", f"localhost:{port}"):
            return 403, {"error": "Host must be this endpoint's loopback address"}
        if request.path != "/faults":
            return 404, {"error": "not found: POST /faults"}
        if request.method != "POST":
            return 405, {"error": "only POST"}
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return 415, {"error": "Content-Type must be application/json"}
        length_text = request.headers.get("content-length")
        if length_text is None or not length_text.isdigit():
            return 411, {"error": "Content-Length is required"}
        length = int(length_text)
        if length > MAX_BODY:
            return 413, {"error": f"a command is at most {MAX_BODY} bytes"}
        raw = await wait_for(reader.readexactly(length), 10)
        return await run_command(self.faults, raw)
