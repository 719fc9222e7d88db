"""Bad input on some connections never disturbs a well-behaved client on others."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.protocol import ClientConnection, RequestHeader, encode_request
from odradek.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.testing import BrokerProcess

MAX_REQUEST = 1_000_000


def _connect(broker: BrokerProcess) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=5)
    s.settimeout(5)
    return s


def _closed_by_peer(s: socket.socket, timeout: float = 5.0) -> bool:
    """True when the broker closed the connection (EOF or reset) within ``timeout``."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _attack_garbage(broker: BrokerProcess, rng: random.Random) -> None:
    s = _connect(broker)
    body = rng.randbytes(rng.randint(0, 300))
    s.sendall(_frame(body))
    assert _closed_by_peer(s), "garbage request did not close its connection"


def _attack_oversized(broker: BrokerProcess, rng: random.Random) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", MAX_REQUEST + rng.randint(1, 2**30)) + b"x" * 100)
    assert _closed_by_peer(s), "oversized length prefix did not close its connection"


def _attack_negative(broker: BrokerProcess, rng: random.Random) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", -rng.randint(1, 2**31)))
    assert _closed_by_peer(s)


def _attack_truncated(broker: BrokerProcess, rng: random.Random) -> None:
    s = _connect(broker)
    req = encode_request(
        RequestHeader(api_key=3, api_version=9, correlation_id=1, client_id="t"), MetadataRequest(topics=None)
    )
    cut = rng.randint(1, len(req) - 1)
    # a frame whose size is right but whose body is a prefix of a real request
    s.sendall(_frame(req[:cut]))
    assert _closed_by_peer(s)


def _attack_truncated_then_hang_up(broker: BrokerProcess, rng: random.Random) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", 500) + b"\x00" * rng.randint(0, 400))
    s.close()


def _attack_unknown_key(broker: BrokerProcess, rng: random.Random) -> None:
    s = _connect(broker)
    s.sendall(_frame(struct.pack(">hhi", rng.choice([999, 1000, -5, 32000]), 0, 7) + b"\x00\x01c"))
    assert _closed_by_peer(s)


def _attack_unsupported_version(broker: BrokerProcess, rng: random.Random) -> None:
    s = _connect(broker)
    s.sendall(_frame(struct.pack(">hhi", 3, 99, 7) + b"\x00\x01c"))  # Metadata v99
    assert _closed_by_peer(s)


def _api_versions_with_unknown_version(broker: BrokerProcess) -> None:
    """Kafka answers ApiVersions it cannot parse with a v0 body, error 35 and the full list."""
    s = _connect(broker)
    s.sendall(_frame(struct.pack(">hhi", 18, 42, 77) + b"\x00\x01c" + b"\x00" * 3))
    size = struct.unpack(">i", s.recv(4))[0]
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    correlation_id = struct.unpack(">i", body[:4])[0]
    resp = ApiVersionsResponse.decode(body[4:], 0)
    assert correlation_id == 77
    assert resp.error_code == 35
    keys = {k.api_key for k in resp.api_keys}
    assert {0, 1, 3, 18}.issubset(keys)
    s.close()


ATTACKS = [
    _attack_garbage,
    _attack_oversized,
    _attack_negative,
    _attack_truncated,
    _attack_truncated_then_hang_up,
    _attack_unknown_key,
    _attack_unsupported_version,
]


def test_bad_clients_do_not_disturb_good_ones(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={"socket.request.max.bytes": MAX_REQUEST}).start()
    try:
        topic = "steady"
        produced: list[bytes] = []
        errors: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2})

            def done(err: object, msg: object) -> None:
                if err is not None:
                    errors.append(str(err))

            i = 0
            while not stop.is_set():
                value = f"record-{i}".encode()
                p.produce(topic, value=value, on_delivery=done)
                produced.append(value)
                p.poll(0)
                i += 1
                time.sleep(0.002)
            assert p.flush(30) == 0

        t = threading.Thread(target=produce)
        t.start()
        rng = random.Random(1234)
        deadline = time.monotonic() + 60
        rounds = 0
        while rounds < 60 and time.monotonic() < deadline:
            ATTACKS[rounds % len(ATTACKS)](broker, rng)
            rounds += 1
        _api_versions_with_unknown_version(broker)
        # a client that opens many connections and sends nothing
        idle = [_connect(broker) for _ in range(50)]
        for s in idle:
            s.close()
        stop.set()
        t.join(60)
        assert not t.is_alive()
        assert broker.running(), "the broker died"
        assert errors == []
        assert rounds == 60

        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(produced) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == produced
    finally:
        broker.stop()


def test_a_slow_reader_does_not_block_others(tmp_path: Path) -> None:
    """Pipelined requests from a client that never reads: the broker stops reading from it
    (backpressure) and keeps serving a second client."""
    with BrokerProcess(tmp_path / "data") as broker:
        hog = _connect(broker)
        conn = ClientConnection(client_id="hog")
        payload = b"".join(conn.send_request(ApiVersionsRequest(), 0)[1] for _ in range(2000))
        hog.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 10
        while sent < len(payload) and time.monotonic() < deadline:
            try:
                sent += hog.send(payload[sent:])
            except BlockingIOError:
                time.sleep(0.01)
        # a normal client still gets answers
        s = _connect(broker)
        good = ClientConnection(client_id="good")
        s.sendall(good.send_request(ApiVersionsRequest(), 0)[1])
        good.receive_data(s.recv(65536))
        ev = good.next_event()
        assert getattr(ev, "response", None) is not None
        s.close()
        hog.close()
        assert broker.running()


@pytest.mark.parametrize("connections", [1000])
def test_many_concurrent_connections(tmp_path: Path, connections: int) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        socks = []
        try:
            for _ in range(connections):
                socks.append(_connect(broker))
            req = ClientConnection(client_id="many")
            for s in socks:
                s.sendall(req.send_request(ApiVersionsRequest(), 0)[1])
            answered = 0
            for s in socks:
                size = struct.unpack(">i", s.recv(4))[0]
                assert size > 0
                answered += 1
            assert answered == connections
            assert broker.running()
        finally:
            for s in socks:
                s.close()
