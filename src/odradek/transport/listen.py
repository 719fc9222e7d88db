"""Listening sockets for the broker's servers (its Kafka listeners, ``/metrics``, the schema registry,
fault control) and the console's: bound here, then handed to the event loop.

Why not ``asyncio.start_server(cb, host, port)``: on uvloop (what ``odradek serve`` runs on) a port
another socket starts listening on between the bind and the listen (two processes starting at
once, both wanting the same default port) is not an error of ``start_server``.  libuv defers that
EADDRINUSE to ``listen()``, uvloop answers a failed listen by closing the server without raising,
and the caller then finds ``server.sockets == [None]``.  Binding the sockets ourselves makes a taken port the same
``OSError(EADDRINUSE)`` on every event loop, which the callers turn into a clear message or a retry
on a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["TcpServer", "bind_sockets"]

ConnectedCallback = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def bind_sockets(host: str | None, port: int, *, backlog: int = 100) -> list[socket.socket]:
    """Listening, non-blocking sockets on every address ``host`` resolves to (``None`` or ``""``: all
    of this machine's).  Port 0: one free port, the same on every address.  Raises ``OSError``
    (EADDRINUSE for a taken port) with nothing left open."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    chosen = port
    try:
        for family, type_, proto, _canon, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            sock = socket.socket(family, type_, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
            if chosen:
                addr = (addr[0], chosen, *addr[2:])
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
            chosen = sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"{host!r} resolves to no address to listen on")
    return sockets


class TcpServer:
    """An asyncio stream server on sockets from :func:`bind_sockets` (one ``asyncio.Server`` per
    address).  ``address`` is the first socket's (host, port)."""

    def __init__(self, servers: list[asyncio.Server], address: tuple[str, int]) -> None:
        self._servers = servers
        self.address = address

    @classmethod
    async def start(
        cls, callback: ConnectedCallback, host: str | None, port: int, *, backlog: int = 100, **kwargs: Any
    ) -> TcpServer:
        """Listen on ``host:port`` and serve each connection with ``callback``; ``kwargs`` go to
        ``asyncio.start_server`` (``limit``, ``ssl``, ``ssl_handshake_timeout``)."""
        sockets = await bind_sockets(host, port, backlog=backlog)
        name = sockets[0].getsockname()
        servers: list[asyncio.Server] = []
        try:
            for sock in sockets:
                servers.append(await asyncio.start_server(callback, sock=sock, backlog=backlog, **kwargs))
        except BaseException:
            for server in servers:
                server.close()
            for sock in sockets:
                sock.close()
            raise
        return cls(servers, (name[0], name[1]))

    def close(self) -> None:
        """Stop accepting connections (those open stay open)."""
        for server in self._servers:
            server.close()

    async def wait_closed(self) -> None:
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
