"""ZooKeeperServer: Debian's ZooKeeper as a child process, with restarts on the same port and data."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

from odradek.coordination import zkserver
from odradek.coordination.zkserver import (
    NOT_INSTALLED,
    ZooKeeperError,
    ZooKeeperServer,
    process_alive,
    zookeeper_available,
)

from .conftest import kazoo_client, require_zookeeper, wait_for

ZKFactory = Callable[..., ZooKeeperServer]


@pytest.fixture
def clients() -> Iterator[list[KazooClient]]:
    """kazoo clients to stop and close at teardown."""
    made: list[KazooClient] = []
    yield made
    for c in made:
        c.stop()
        c.close()


def connect(clients: list[KazooClient], zk: ZooKeeperServer, session_timeout: float = 10.0) -> KazooClient:
    client = kazoo_client(zk.connect, session_timeout=session_timeout)
    clients.append(client)
    return client


def test_zookeeper_is_installed() -> None:
    assert zookeeper_available() is None


def test_start_on_ephemeral_port(zookeeper_factory: ZKFactory, clients: list[KazooClient]) -> None:
    zk = zookeeper_factory()
    assert 0 < zk.port < 65536
    assert zk.connect == f"127.0.0.1:{zk.port}"
    assert zk.running() and zk.pid is not None and process_alive(zk.pid)
    assert zk.pid_path.read_text().strip() == str(zk.pid)
    assert zk.mode == "standalone" == zk.server_mode()
    assert zk.four_letter("ruok") == "imok"
    assert "Mode: standalone" in zk.four_letter("srvr")
    cfg = zk.config_path.read_text().splitlines()
    assert f"clientPort={zk.port}" in cfg
    assert "admin.enableServer=false" in cfg
    assert any(line.startswith("4lw.commands.whitelist=") for line in cfg)
    assert not any(line.startswith("forceSync") for line in cfg)  # durable unless asked otherwise
    assert zk.log_path.exists() and zk.server_log_path.exists()

    client = connect(clients, zk)
    client.create("/odradek-test/hello", b"world", makepath=True)
    data, stat = client.get("/odradek-test/hello")
    assert data == b"world" and stat.ephemeralOwner == 0
    assert client.get_children("/odradek-test") == ["hello"]


def test_extra_config(zookeeper_factory: ZKFactory, clients: list[KazooClient]) -> None:
    zk = zookeeper_factory(extra_config={"forceSync": "no", "maxClientCnxns": "100"})
    cfg = zk.config_path.read_text().splitlines()
    assert "forceSync=no" in cfg
    assert "maxClientCnxns=100" in cfg and "maxClientCnxns=0" not in cfg
    assert connect(clients, zk).create("/x", b"1") == "/x"


def test_restart_on_same_port_keeps_persistent_znodes(zookeeper_factory: ZKFactory, clients: list[KazooClient]) -> None:
    zk = zookeeper_factory()
    port = zk.port
    client = connect(clients, zk)
    client.create("/persistent", b"survives")
    client.stop()

    zk.stop()
    assert not zk.running()
    zk.start()
    assert zk.port == port
    assert connect(clients, zk).get("/persistent")[0] == b"survives"

    # a crash (SIGKILL) loses nothing either: the transaction log is fsynced (forceSync defaults to yes)
    connect(clients, zk).create("/after-restart", b"2")
    zk.kill()
    zk.restart()
    assert zk.port == port
    client = connect(clients, zk)
    assert client.get("/persistent")[0] == b"survives"
    assert client.get("/after-restart")[0] == b"2"


def test_ephemeral_znode_goes_when_its_session_expires_after_a_restart(
    zookeeper_factory: ZKFactory, clients: list[KazooClient]
) -> None:
    zk = zookeeper_factory()
    owner = connect(clients, zk, session_timeout=4.0)
    owner.create("/eph", b"mine", ephemeral=True)
    assert owner.exists("/eph") is not None

    zk.stop()
    owner.stop()  # while ZooKeeper is down: the session is not closed, only abandoned
    zk.start()

    observer = connect(clients, zk)
    # ZooKeeper reloads sessions at startup and restarts their timeouts: the znode is still there...
    assert observer.exists("/eph") is not None
    # ...until the session, with no client heartbeating, expires (4 s timeout, 2 s ticks)
    wait_for(lambda: observer.exists("/eph") is None, 20.0, "the ephemeral znode to go")


def test_restart_keeps_the_session_of_a_client_that_reconnects(
    zookeeper_factory: ZKFactory, clients: list[KazooClient]
) -> None:
    """Why restarting ZooKeeper does not expire a broker's session (freeze the broker instead).

    ZooKeeper reloads the session at startup and gives it a whole timeout from then on, so a client that
    reconnects within that timeout keeps it. (This failed once in CI, with ZooKeeper's NIO connection
    factory: the client's reconnection hung for its whole session timeout, 4 s; see the next test.)
    """
    zk = zookeeper_factory()
    client = connect(clients, zk, session_timeout=10.0)
    states: list[str] = []
    client.add_listener(states.append)
    session_id = client.client_id[0]
    client.create("/eph", b"mine", ephemeral=True)

    began = time.monotonic()
    zk.restart()
    up = time.monotonic()
    wait_for(lambda: client.state == KazooState.CONNECTED and states, 30.0, "kazoo to reconnect")
    timing = f"restart took {up - began:.1f} s, reconnecting {time.monotonic() - up:.1f} s more"
    assert KazooState.LOST not in states, f"{states}; {timing}"
    assert client.client_id[0] == session_id
    assert client.exists("/eph") is not None


def test_connections_during_a_restart_are_answered_or_closed(zookeeper_factory: ZKFactory) -> None:
    """No connection made while ZooKeeper starts is left open without an answer.

    With ZooKeeper 3.8's default NIO connection factory, a connection accepted before the database is
    loaded is refused with an exception whose clean-up throws (ZOOKEEPER-5051) and never closes the
    socket: the client waits for its handshake timeout (for kazoo and the Java client, the whole session
    timeout) and its session expires although it reconnected in time. Here clients hammer the port while
    the server restarts; every handshake must get an answer or a closed connection within 5 s.
    """
    zk = zookeeper_factory()
    assert f"-Dzookeeper.serverCnxnFactory={zkserver._NETTY_FACTORY}" in zk.command()
    body = struct.pack(">iqiqi", 0, 0, 10000, 0, 16) + bytes(16) + b"\0"  # ConnectRequest, new session
    request = struct.pack(">i", len(body)) + body
    outcomes: list[str] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            with socket.socket() as s:
                s.settimeout(5.0)
                try:
                    s.connect((zk.host, zk.port))
                except OSError:  # refused: not listening yet
                    time.sleep(0.002)
                    continue
                try:
                    s.sendall(request)
                    outcomes.append("answered" if s.recv(64) else "closed")
                except TimeoutError:
                    outcomes.append("no answer in 5 s")
                except OSError:
                    outcomes.append("reset")

    for _ in range(3):
        zk.stop()
        stop.clear()
        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            zk.start()
            time.sleep(0.3)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
    counts = {o: outcomes.count(o) for o in set(outcomes)}
    assert counts.get("answered", 0) > 0, counts
    assert "no answer in 5 s" not in counts, counts


def test_stop_ends_the_process(zookeeper_factory: ZKFactory) -> None:
    zk = zookeeper_factory()
    pid = zk.pid
    assert pid is not None
    zk.stop()
    assert not process_alive(pid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped, not a zombie
    assert not zk.pid_path.exists()
    assert zk.pid is None and not zk.running()
    assert zk.four_letter("ruok") == ""
    zk.stop()  # idempotent


def test_kill_ends_the_process(zookeeper_factory: ZKFactory) -> None:
    zk = zookeeper_factory()
    pid = zk.pid
    assert pid is not None
    zk.kill()
    assert not process_alive(pid)
    assert not zk.running()


def test_stop_through_the_pid_file(zookeeper_factory: ZKFactory) -> None:
    """Another ZooKeeperServer object for the same directory (as `odradek cluster down` makes) stops it."""
    zk = zookeeper_factory()
    pid = zk.pid
    assert pid is not None
    other = ZooKeeperServer(zk.data_dir, port=zk.port)
    assert other.running() and other.pid == pid
    other.stop()
    assert not process_alive(pid)
    assert not zk.running()


def test_never_signals_a_process_that_is_not_its_zookeeper(tmp_path: Path) -> None:
    require_zookeeper()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        zk = ZooKeeperServer(tmp_path / "zk", port=2181)
        zk.data_dir.mkdir()
        zk.pid_path.write_text(f"{sleeper.pid}\n")
        assert not zk.running()
        with pytest.raises(ZooKeeperError, match="not this directory's ZooKeeper"):
            zk.stop()
        assert sleeper.poll() is None
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait(10)


def test_port_zero_retries_when_the_port_is_taken(
    zookeeper_factory: ZKFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real = zkserver.restartable_port
        ports = iter([busy])
        monkeypatch.setattr(zkserver, "restartable_port", lambda host: next(ports, None) or real(host))
        zk = zookeeper_factory()
        assert zk.port != busy
        assert zk.four_letter("ruok") == "imok"


def test_fixed_port_taken_fails_clearly(tmp_path: Path) -> None:
    require_zookeeper()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        zk = ZooKeeperServer(tmp_path / "zk", port=taken.getsockname()[1])
        with pytest.raises(ZooKeeperError, match="Address already in use"):
            zk.start(timeout=30)
        assert not zk.running()


def test_context_manager(tmp_path: Path, clients: list[KazooClient]) -> None:
    require_zookeeper()
    with ZooKeeperServer(tmp_path / "zk") as zk:
        pid = zk.pid
        assert pid is not None
        assert connect(clients, zk).create("/in-context", b"") == "/in-context"
    assert not process_alive(pid)


def test_not_installed_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZK_JAR", str(tmp_path / "no-such.jar"))
    message = zookeeper_available()
    assert message is not None and message.startswith(NOT_INSTALLED)
    assert "apt-get install -y zookeeper" in message
    with pytest.raises(ZooKeeperError, match="ZooKeeper is not installed"):
        ZooKeeperServer(tmp_path / "zk").start()
