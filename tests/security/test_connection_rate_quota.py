"""KIP-612: an IP's ``connection_creation_rate`` quota closes the connections beyond it at once;
other addresses are not held."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from odradek.client import Admin
from odradek.protocol import NEED_DATA, ClientConnection, ResponseReceived
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.testing import BrokerProcess


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


def test_ip_connection_creation_rate(tmp_path: Path) -> None:
    b = BrokerProcess(
        tmp_path / "data", overrides={"quota.window.num": 2, "quota.window.size.seconds": 1}, log_level="INFO"
    ).start()
    try:
        with Admin(bootstrap_servers=b.bootstrap) as a:
            a.alter_client_quotas([({"ip": "127.0.0.1"}, {"connection_creation_rate": 3.0})], timeout=30)
        limited = [_served(b.port, "127.0.0.1") for _ in range(20)]
        other = [_served(b.port, "127.0.0.2") for _ in range(20)]
        # a few pass (the first window's worth), then connections from 127.0.0.1 are closed
        assert limited[0] and not all(limited), limited
        assert all(other), other  # no quota for 127.0.0.2
        line = b.wait_for_log("Rejected connection from /127.0.0.1", "connection_creation_rate")
        assert "quota of 3/s" in line
        # removing the quota applies at once (the admin client comes from 127.0.0.1 too: after the
        # sample windows have passed)
        time.sleep(2.5)
        with Admin(bootstrap_servers=b.bootstrap) as a:
            a.alter_client_quotas([({"ip": "127.0.0.1"}, {"connection_creation_rate": None})], timeout=30)
        assert all(_served(b.port, "127.0.0.1") for _ in range(10))
    finally:
        b.stop()
