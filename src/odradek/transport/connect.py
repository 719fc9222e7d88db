"""Where a connection's bytes go: a TCP socket (TLS when the listener asks for it), or an
in-process peer.

This module is the only place on the client side that opens sockets (an import contract and an
architecture test say so).  :func:`open_stream` gives an asyncio connection its transport,
:func:`open_socket` a blocking connection its socket.

An :class:`Endpoint` registered for a ``(host, port)`` with :func:`add_endpoint` answers instead
of the network: connections to that address go to it through in-memory pipes.  This is how
:class:`odradek.testing.MockCluster` puts scripted brokers under the real client stack.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from odradek._timeouts import wait_for

__all__ = ["BlockingStream", "Endpoint", "add_endpoint", "open_socket", "open_stream", "remove_endpoint"]

P = TypeVar("P", bound=asyncio.BufferedProtocol)


class BlockingStream(Protocol):
    """What a blocking connection uses of its socket."""

    def settimeout(self, value: float | None, /) -> None: ...

    def sendall(self, data: bytes, /) -> None: ...

    def recv_into(self, buffer: memoryview, /) -> int: ...

    def close(self) -> None: ...


class Endpoint(Protocol):
    """An in-process peer that stands in for a listener at some ``(host, port)``."""

    def connect(self, protocol: asyncio.BufferedProtocol) -> None:
        """A new asyncio connection: call ``protocol.connection_made`` with a transport that
        carries the bytes, on the running loop; raise ``ConnectionRefusedError`` to refuse it."""

    def connect_blocking(self) -> BlockingStream:
        """A new blocking connection's stream (``ConnectionRefusedError`` to refuse it)."""


_endpoints: dict[tuple[str, int], Endpoint] = {}
_lock = threading.Lock()


def add_endpoint(host: str, port: int, endpoint: Endpoint) -> None:
    """Send connections to ``host:port`` to ``endpoint`` until :func:`remove_endpoint`."""
    with _lock:
        if (host, port) in _endpoints:
            raise ValueError(f"{host}:{port} already has an endpoint")
        _endpoints[(host, port)] = endpoint


def remove_endpoint(host: str, port: int) -> None:
    with _lock:
        _endpoints.pop((host, port), None)


async def open_stream(
    host: str, port: int, factory: Callable[[], P], *, tls: ssl.SSLContext | None, timeout: float
) -> P:
    """Connect ``factory()``'s protocol to ``host:port`` (within ``timeout`` s); OSError or
    TimeoutError when that fails."""
    endpoint = _endpoints.get((host, port))
    if endpoint is not None:
        protocol = factory()
        endpoint.connect(protocol)
        return protocol
    loop = asyncio.get_running_loop()
    _transport, protocol = await wait_for(
        loop.create_connection(factory, host, port, ssl=tls, server_hostname=host if tls else None), timeout
    )
    return protocol


def open_socket(host: str, port: int, *, tls: ssl.SSLContext | None, timeout: float) -> BlockingStream:
    """A blocking socket connected to ``host:port`` (Nagle off; TLS when ``tls``), its timeout
    set to ``timeout``; OSError when that fails."""
    endpoint = _endpoints.get((host, port))
    if endpoint is not None:
        stream = endpoint.connect_blocking()
        stream.settimeout(timeout)
        return stream
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is not None:
        try:
            sock = tls.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    return sock
