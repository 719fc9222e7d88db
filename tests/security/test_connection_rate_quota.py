"""KIP-612: an IP's ``connection_creation_rate`` quota closes the connections beyond it at once;
other addresses are not held."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from odradek.client import Admin
from odradek.protocol import NEED_DATA, ClientConnection, ResponseReceived
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.testing import FakeScheduler, running_broker


def _served(port: int, source: str) -> bool:
    """Whether a new connection from ``source`` is answered (ApiVersions), or closed."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    except OSError:
        return False
    conn = ClientConnection(client_id="rate")
    try:
        _cid, data = conn.send_request(ApiVersionsRequest(), 0)
        sock.sendall(data)
        while True:
            ev = conn.next_event()
            if isinstance(ev, ResponseReceived):
                return True
            assert ev is NEED_DATA
            chunk = sock.recv(65536)
            if not chunk:
                return False
            conn.receive_data(chunk)
    except OSError:
        return False
    finally:
        sock.close()


def test_ip_connection_creation_rate(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On a broker in this process on fake time: the rate's sample windows pass when the test
    moves the clock (the clients, on threads, connect over the loopback as to any broker)."""
    caplog.set_level(logging.INFO, logger="odradek.connections")
    fake = FakeScheduler()

    async def main() -> None:
        overrides = {"quota.window.num": 2, "quota.window.size.seconds": 1}
        async with running_broker(tmp_path / "data", overrides=overrides, timers=fake) as b:
            host, port = b.bound["PLAINTEXT"]
            bootstrap = f"{host}:{port}"

            def alter(rate: float | None) -> None:
                with Admin(bootstrap_servers=bootstrap) as a:
                    a.alter_client_quotas([({"ip": "127.0.0.1"}, {"connection_creation_rate": rate})], timeout=30)

            await asyncio.to_thread(alter, 3.0)
            limited = [await asyncio.to_thread(_served, port, "127.0.0.1") for _ in range(20)]
            other = [await asyncio.to_thread(_served, port, "127.0.0.2") for _ in range(20)]
            # a few pass (the first window's worth), then connections from 127.0.0.1 are closed
            assert limited[0] and not all(limited), limited
            assert all(other), other  # no quota for 127.0.0.2
            lines = [r.getMessage() for r in caplog.records if "Rejected connection from /127.0.0.1" in r.getMessage()]
            assert lines and "connection_creation_rate" in lines[0] and "quota of 3/s" in lines[0]
            # removing the quota applies at once (the admin client comes from 127.0.0.1 too: after
            # the sample windows have passed)
            await fake.advance(2500)
            await asyncio.to_thread(alter, None)
            assert all([await asyncio.to_thread(_served, port, "127.0.0.1") for _ in range(10)])

    asyncio.run(asyncio.wait_for(main(), 120))
