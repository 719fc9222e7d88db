"""Listening sockets (``odradek.transport.listen``): a port another process takes between our bind and
our listen — two brokers starting at once, both wanting the embedded default ``/metrics`` port — is
``OSError(EADDRINUSE)`` on both event loops.  (``asyncio.start_server`` on uvloop instead closed
the server without a word and left ``server.sockets == [None]``: a test broker died at start-up
with "'NoneType' object has no attribute 'getsockname'".)"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.testing import running_broker
from odradek.transport.listen import TcpServer, bind_sockets

uvloop = pytest.importorskip("uvloop")

LOOPS = ["asyncio", "uvloop"]
_Socket = socket.socket


def _run(loop: str, main: Callable[[], Awaitable[Any]]) -> Any:
    if loop == "uvloop":
        return uvloop.run(main())
    return asyncio.run(main())  # type: ignore[arg-type]


@pytest.fixture
def raced(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[int]]:
    """Ports (added by the test) that someone else starts listening on right after our socket binds
    one: what a second process does in the window between bind() and listen()."""
    ports: set[int] = set()
    holders: list[socket.socket] = []

    class RacedSocket(_Socket):
        def bind(self, address: Any) -> None:
            super().bind(address)
            port = self.getsockname()[1]
            if port in ports and self.family == socket.AF_INET:
                holder = _Socket(socket.AF_INET, socket.SOCK_STREAM)
                holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                holder.bind(("127.0.0.1", port))
                holder.listen()
                holders.append(holder)

    monkeypatch.setattr(socket, "socket", RacedSocket)
    yield ports
    for holder in holders:
        holder.close()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.readline())
    await writer.drain()
    writer.close()


def _free_port() -> int:
    with _Socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("loop", LOOPS)
def test_a_port_taken_between_bind_and_listen_is_eaddrinuse(loop: str, raced: set[int]) -> None:
    port = _free_port()
    raced.add(port)

    async def main() -> None:
        with pytest.raises(OSError) as info:
            await TcpServer.start(_echo, "127.0.0.1", port)
        assert info.value.errno == errno.EADDRINUSE
        with pytest.raises(OSError) as info:
            await bind_sockets("127.0.0.1", port)
        assert info.value.errno == errno.EADDRINUSE

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_server_serves_on_the_port_it_reports(loop: str) -> None:
    async def main() -> None:
        server = await TcpServer.start(_echo, "127.0.0.1", 0)
        try:
            host, port = server.address
            assert host == "127.0.0.1" and port > 0
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"ping\n")
            assert await reader.readline() == b"ping\n"
            writer.close()
        finally:
            server.close()
            await server.wait_closed()
        with pytest.raises(OSError):
            await asyncio.open_connection(host, port)

    _run(loop, main)


def test_the_embedded_broker_serves_metrics_elsewhere_when_its_default_port_is_raced(
    tmp_path: Path, raced: set[int]
) -> None:
    """The embedded broker's ``/metrics`` defaults to 9404 and moves to a free port when that one is
    taken; taken in the bind-listen window, too, on the loop ``odradek serve`` runs."""
    from odradek.broker.app import DEFAULT_METRICS_PORT

    raced.add(DEFAULT_METRICS_PORT)

    async def main() -> str | None:
        async with running_broker(tmp_path / "data") as broker:
            return broker.metrics_url

    url = uvloop.run(main())
    assert url is not None and url.startswith("http://127.0.0.1:")
    assert not url.endswith(f":{DEFAULT_METRICS_PORT}/metrics")
