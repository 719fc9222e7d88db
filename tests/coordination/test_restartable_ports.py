"""Test servers start on ports they can have again after a restart.

A broker or ZooKeeper that a test stops and starts again comes back on the same port. A port
from bind(0) lies in the kernel's ephemeral range, where, while the server is down, any outgoing
connection can get it as its local port: the restart then failed with "Address already in use"
(tests/cluster/test_secure_cluster.py with four test workers). The ports are now chosen outside
that range, and a first start retries on another port when someone else binds the chosen one.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from odradek import testing
from odradek.coordination import zkserver
from odradek.coordination.zkserver import restartable_port


def test_restartable_ports_are_free_and_outside_the_ephemeral_range() -> None:
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [restartable_port("127.0.0.1") for _ in range(50)]
    inside = [p for p in ports if low <= p <= high]
    assert not inside, f"ports {inside} are in the ephemeral range {low}-{high}"
    for port in ports[:10]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when chosen (nobody else picks these)


def test_a_broker_whose_chosen_port_is_taken_starts_on_another_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", restartable_port("127.0.0.1")))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy])
        monkeypatch.setattr(testing, "restartable_port", lambda host: next(picks, None) or zkserver.restartable_port(host))
        broker = testing.BrokerProcess(tmp_path / "data").start(timeout=60)
        try:
            port = broker.port
            assert port != busy
            broker.stop()
            broker.start(timeout=60)  # a restart: the same port
            assert broker.port == port
        finally:
            broker.stop()
