"""A SASL listener under attack from unauthenticated connections, with real sockets and clients.

* 20 connections each declaring a 100 MB frame, and sending as much of it as the broker takes:
  the broker's RSS grows by less than 20 MB (the frames are refused on their size prefix,
  ``sasl.server.max.receive.size``), and every one of them is closed.
* Guesses pipelined on one connection: one is evaluated and answered, the rest never are.
* confluent-kafka (PLAIN, SCRAM-SHA-256, OAUTHBEARER), kafka-python and aiokafka with wrong
  credentials get their authentication error, while a good producer on other connections of the
  same listener loses nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.errors import ErrorCode
from odradek.protocol import ClientConnection
from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from odradek.testing import BrokerProcess, wait_for

TIMEOUT = 30.0
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
#: the memory bound of the done-when: 20 connections x a declared 100 MB frame
RSS_GROWTH_BOUND_KB = 20 * 1024
#: what each hostile connection tries to send of its declared frame (the old broker took it all)
HOSTILE_BYTES = 8 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("preauth") / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        },
        log_level="INFO",
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_of("PLAINTEXT")})
        for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("scrammy", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"right")]
        ).values():
            f.result(TIMEOUT)
        yield b
    finally:
        b.stop()


def _proc_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _good(broker: BrokerProcess) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }


def test_twenty_unauthenticated_100mb_frames_leave_the_rss_growth_under_20mb(broker: BrokerProcess) -> None:
    host, port = broker.endpoints["SASL_PLAINTEXT"]
    # a good client first, so that what it costs is in the baseline
    p = ck.Producer({**_good(broker), "message.timeout.ms": int(TIMEOUT * 1000)})
    p.produce("preauth-warm", b"x")
    assert p.flush(TIMEOUT) == 0
    base = _proc_kb(broker.pid, "VmRSS")
    with open(f"/proc/{broker.pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS: the peak from here on
    chunk = os.urandom(1 << 16)
    socks = [socket.create_connection((host, port), timeout=TIMEOUT) for _ in range(20)]
    try:
        for s in socks:
            s.sendall(struct.pack(">i", 100 << 20))  # a frame of 100 MB declared...
            s.setblocking(False)
        sent = [0] * len(socks)
        closed: set[int] = set()
        peak = base
        deadline = time.monotonic() + 60
        while len(closed) < len(socks) and time.monotonic() < deadline:
            progress = False
            for i, s in enumerate(socks):
                if i in closed:
                    continue
                try:
                    if s.recv(1 << 16) == b"":
                        closed.add(i)
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(i)
                    continue
                if sent[i] >= HOSTILE_BYTES:
                    continue
                try:  # ... and as much of it as the broker will take
                    n = s.send(chunk)
                    sent[i] += n
                    progress = progress or n > 0
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(i)
            peak = max(peak, _proc_kb(broker.pid, "VmRSS"))
            stalled = not progress and all(i in closed or sent[i] >= HOSTILE_BYTES for i in range(len(socks)))
            if stalled and time.monotonic() > deadline - 50:  # all sent, and 10 s for the broker's verdict
                break
            time.sleep(0.005)
        peak = max(peak, _proc_kb(broker.pid, "VmHWM"))
    finally:
        for s in socks:
            s.close()
    growth = peak - base
    print(f"\nRSS before {base} kB, peak during the 20 connections {peak} kB: growth {growth} kB; "
          f"bytes the clients got to send: {sum(sent)}")
    assert growth < RSS_GROWTH_BOUND_KB, f"RSS grew by {growth} kB"
    assert closed == set(range(len(socks))), f"{len(socks) - len(closed)} hostile connections were left open"
    broker.wait_for_log("Failing SASL authentication due to invalid receive size")
    # the broker serves good clients as before
    p.produce("preauth-warm", b"y")
    assert p.flush(TIMEOUT) == 0


def _read_all(s: socket.socket) -> bytes:
    data = b""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(1 << 16)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def test_pipelined_guesses_get_one_answer_then_the_connection_closes(broker: BrokerProcess) -> None:
    host, port = broker.endpoints["SASL_PLAINTEXT"]
    client = ClientConnection("guesser")
    stream = b"".join(
        client.send_request(SaslHandshakeRequest(mechanism="PLAIN"), 1)[1]
        + client.send_request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00guess-%d" % i), 2)[1]
        for i in range(200)
    )
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(stream)
        client.receive_data(_read_all(s))
    answers = []
    while hasattr(ev := client.next_event(), "response"):
        answers.append(ev.response)  # type: ignore[union-attr]
    assert [type(a) for a in answers] == [SaslHandshakeResponse, SaslAuthenticateResponse], (
        f"{len(answers)} answers to 200 pipelined guesses"
    )
    assert answers[1].error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


class _GoodProducer(threading.Thread):
    """Produces over SASL/PLAIN the whole time, counting delivery failures."""

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(daemon=True)
        self.producer = ck.Producer({**_good(broker), "linger.ms": 5, "message.timeout.ms": int(TIMEOUT * 1000)})
        self.stop = threading.Event()
        self.sent = 0
        self.failed: list[Any] = []
        self.delivered = 0

    def _report(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed.append(err)

    def run(self) -> None:
        while not self.stop.is_set():
            self.producer.produce("preauth-good", b"%d" % self.sent, on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0.01)
        self.producer.flush(TIMEOUT)


def _auth_error(conf: dict[str, Any]) -> ck.KafkaError:
    seen: list[ck.KafkaError] = []
    p = ck.Producer({**conf, "error_cb": seen.append, "message.timeout.ms": 5000})
    p.produce("never", b"x")
    deadline = time.monotonic() + TIMEOUT
    while not any(e.code() == ck.KafkaError._AUTHENTICATION for e in seen) and time.monotonic() < deadline:
        p.poll(0.1)
    p.purge()
    p.flush(1)
    errors = [e for e in seen if e.code() == ck.KafkaError._AUTHENTICATION]
    assert errors, f"no authentication error, saw {seen}"
    return errors[0]


def test_wrong_credentials_from_librdkafka_fail_and_good_clients_carry_on(broker: BrokerProcess) -> None:
    good = _GoodProducer(broker)
    good.start()
    try:
        base = {"bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT"}
        err = _auth_error({**base, "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "nope"})
        assert "Invalid username or password" in err.str(), err.str()
        err = _auth_error({**base, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "scrammy", "sasl.password": "nope"})
        assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in err.str(), err.str()
        # a malformed bearer token: not base64url JSON
        err = _auth_error({**base, "sasl.mechanism": "OAUTHBEARER",
                           "oauth_cb": lambda _c: ("bm90.anNvbg.", time.time() + 3600)})
        assert "SASL" in err.str() or "uthentication" in err.str(), err.str()
        wait_for(lambda: good.delivered > 50, TIMEOUT, "the good producer's deliveries")
    finally:
        good.stop.set()
        good.join(TIMEOUT)
    assert good.failed == [] and good.delivered == good.sent


def test_wrong_passwords_from_kafka_python_and_aiokafka(broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    """Both Python clients report the broker's SASL_AUTHENTICATION_FAILED and its message (they
    read the answer before the connection closes), then give up bootstrapping."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    caplog.set_level(logging.WARNING)
    bootstrap = broker.bootstrap_of("SASL_PLAINTEXT")
    sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice"}
    with pytest.raises(Exception, match="bootstrap"):
        # (kafka-python retries the bootstrap for bootstrap_timeout_ms, 30 s by default)
        KafkaProducer(bootstrap_servers=bootstrap, sasl_plain_password="nope", max_block_ms=3000,
                      bootstrap_timeout_ms=3000, **sasl)
    kp = [r.getMessage() for r in caplog.records if r.name.startswith("kafka.")]
    assert any("SaslAuthenticationFailedError" in m and "Invalid username or password" in m for m in kp), kp
    caplog.clear()

    async def aio() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, sasl_plain_password="nope", request_timeout_ms=5000, **sasl)
        try:
            with pytest.raises(Exception, match="bootstrap"):
                await p.start()
        finally:
            await p.stop()

    asyncio.run(aio())
    aio_lines = [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")]
    assert any("SaslAuthenticationFailed" in m and "Invalid username or password" in m for m in aio_lines), aio_lines
    # the right password over the same client works
    ok = KafkaProducer(bootstrap_servers=bootstrap, sasl_plain_password="alice-secret", max_block_ms=10000, **sasl)
    try:
        ok.send(f"preauth-kp-{uuid.uuid4().hex[:6]}", b"v").get(TIMEOUT)
    finally:
        ok.close()
