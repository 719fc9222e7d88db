"""Connection quotas: per address (with overrides), per broker and listener, and the creation
rate - each as Kafka applies it, while connected clients carry on."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.testing import BrokerProcess, FakeScheduler, running_broker

TIMEOUT = 30.0
# ApiVersions v0, correlation id 1, client id "t"
API_VERSIONS = struct.pack(">ihhih", 11, 18, 0, 1, 1) + b"t"


def _connect(b: BrokerProcess, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", b.port), timeout=TIMEOUT, source_address=(source, 0))
    return s


def _answered(s: socket.socket, timeout: float = TIMEOUT) -> bool:
    """Send ApiVersions; True when an answer comes, False when the broker closed the connection."""
    s.settimeout(timeout)
    try:
        s.sendall(API_VERSIONS)
        return len(s.recv(4)) == 4
    except (ConnectionResetError, BrokenPipeError):
        return False


@pytest.fixture
def broker_with(tmp_path: Path) -> Iterator[object]:
    started: list[BrokerProcess] = []

    def start(**overrides: object) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"b{len(started)}", overrides=overrides, log_level="INFO").start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


def test_the_connection_beyond_an_addresss_limit_is_closed_and_overrides_lift_it(broker_with) -> None:  # type: ignore[no-untyped-def]
    b = broker_with(**{"max.connections.per.ip": 2, "max.connections.per.ip.overrides": "127.0.0.2:4"})
    mine = [_connect(b) for _ in range(2)]
    assert all(_answered(s) for s in mine)
    extra = _connect(b)
    assert not _answered(extra)  # closed at once
    b.wait_for_log("Rejected connection from /127.0.0.1", "maximum of 2 connections")
    # another address, with an override: four connections, the fifth is refused
    listed = [_connect(b, "127.0.0.2") for _ in range(4)]
    assert all(_answered(s) for s in listed)
    assert not _answered(_connect(b, "127.0.0.2"))
    # the connections already in carry on, and a closed one frees its place
    assert all(_answered(s) for s in mine + listed)
    mine[0].close()
    deadline = time.monotonic() + TIMEOUT
    while True:  # the broker counts the close when it sees it
        again = _connect(b)
        if _answered(again):
            break
        assert time.monotonic() < deadline, "the freed place was not given back"
        time.sleep(0.05)
    for s in [*mine, *listed, extra, again]:
        s.close()


def test_max_connections_makes_new_clients_wait_until_one_leaves(broker_with) -> None:  # type: ignore[no-untyped-def]
    b = broker_with(**{"max.connections": 3})
    first = [_connect(b) for _ in range(3)]
    assert all(_answered(s) for s in first)
    waiting = _connect(b)  # the kernel completes the handshake; the broker does not accept it yet
    waiting.sendall(API_VERSIONS)
    waiting.settimeout(1.0)
    with pytest.raises(TimeoutError):
        waiting.recv(4)
    b.wait_for_log("stops accepting", "max.connections 3")
    assert all(_answered(s) for s in first)  # the connected ones are served meanwhile
    first[0].close()
    waiting.settimeout(TIMEOUT)
    assert len(waiting.recv(4)) == 4  # accepted once a place is free, and answered
    for s in [*first, waiting]:
        s.close()


def test_the_creation_rate_spreads_a_connect_storm_and_connected_clients_carry_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """16 connections at ``max.connection.creation.rate=5`` are let in five a second, on a broker
    in this process on fake time: each second's worth exactly when the test moves the clock past
    it, while the connected client is answered throughout."""
    caplog.set_level(logging.INFO, logger="odradek.connections")
    fake = FakeScheduler()

    async def answered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(API_VERSIONS)
        return len(await reader.readexactly(4)) == 4

    async def until(what: str, check: Callable[[], bool]) -> None:
        for _ in range(2000):  # real time: the broker's own I/O, not its timers
            if check():
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"never: {what}")

    async def main() -> None:
        overrides = {"max.connection.creation.rate": 5}
        async with running_broker(tmp_path / "data", overrides=overrides, timers=fake) as broker:
            host, port = broker.bound["PLAINTEXT"]
            old = await asyncio.open_connection(host, port)
            assert await asyncio.wait_for(answered(*old), TIMEOUT)
            # the accept loop takes the next connection's place in the rate before it comes (so
            # 1 + 5 are let in in the first window); then the rate window is clear
            await fake.advance(0)
            await fake.advance(1000)
            start = fake.clock.monotonic_ms()
            storm = [await asyncio.open_connection(host, port) for _ in range(16)]
            answers = [asyncio.ensure_future(answered(*c)) for c in storm]
            # an established client is answered while the storm is still being let in
            assert await asyncio.wait_for(answered(*old), TIMEOUT)
            let_in = []
            for window, expected in enumerate((6, 11, 16)):
                await until(f"{expected} of the storm answered", lambda n=expected: sum(a.done() for a in answers) >= n)
                let_in.append(fake.clock.monotonic_ms() - start)
                if expected < 16:  # the accept loop waits for the next window (one line each time)
                    await until("the accept loop waits", lambda n=window: caplog.text.count("rate reached") > n)
                    assert broker.connection_quotas.by_listener["PLAINTEXT"] == 1 + expected
                    await fake.advance(999)
                    assert broker.connection_quotas.by_listener["PLAINTEXT"] == 1 + expected
                    await fake.advance(1)
            assert all(a.result() for a in answers)
            # 16 connections at 5 per second take at least 2 s to be let in (exactly the windows'
            # worth here), and the old client was not held behind them
            assert let_in == [0, 1000, 2000]
            assert let_in[-1] >= 2000
            assert "max.connection.creation.rate reached" in caplog.text
            for _reader, writer in [old, *storm]:
                writer.close()

    asyncio.run(asyncio.wait_for(main(), 120))
