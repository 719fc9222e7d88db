"""One HTTP/1.1 exchange on a new connection, for the client-side HTTP callers (the schema
registry's clients and the registry's forwarding of a write to its leader).

The transport is the only client-side code that opens connections; this is its HTTP face, kept
small: one request with ``Connection: close``, the answer's status line and headers parsed, the
body read by ``Content-Length``, chunked, or to the end of the stream, each bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable

__all__ = ["HttpAnswer", "http_exchange"]

#: the status code, the headers (lower-case names) and the body of an answer
HttpAnswer = tuple[int, dict[str, str], bytes]


async def http_exchange(
    host: str,
    port: int,
    request_line: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    tls: ssl.SSLContext | None = None,
    max_head: int = 64 * 1024,
    max_body: int = 64 * 1024 * 1024,
) -> HttpAnswer:
    """Send one request (``request_line`` such as ``"GET /subjects HTTP/1.1"``; ``Content-Length``
    and ``Connection: close`` are added) and read the whole answer. Raises ``OSError``,
    ``ValueError`` (not HTTP, or over a limit) or ``asyncio.IncompleteReadError``; the caller
    bounds the time."""
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, limit=max_head, server_hostname=host if tls is not None else None)
    try:
        lines = [request_line, *(f"{k}: {v}" for k, v in headers),
                 f"Content-Length: {len(body)}", "Connection: close"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:100]!r}")
        answer_headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            if name:
                answer_headers[name.strip().lower()] = value.strip()
        if answer_headers.get("transfer-encoding", "").lower() == "chunked":
            data = await _read_chunked(reader, max_body)
        elif "content-length" in answer_headers:
            text = answer_headers["content-length"]
            if not text.isdigit() or int(text) > max_body:
                raise ValueError(f"an answer's Content-Length of {text[:20]!r} (at most {max_body})")
            data = await reader.readexactly(int(text))
        else:
            data = await reader.read(max_body)
        return int(parts[1]), answer_headers, data
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError, asyncio.TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 1)


async def _read_chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    out = bytearray()
    for _ in range(max_body + 1):  # each chunk holds at least one byte
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return bytes(out)
        if size < 0 or len(out) + size > max_body:
            raise ValueError(f"an answer larger than {max_body} bytes")
        out += await reader.readexactly(size)
        await reader.readexactly(2)
    raise ValueError(f"an answer larger than {max_body} bytes")
