"""kcat, kafka-python and aiokafka over every security protocol: each produces records and reads
them back over SSL, mTLS, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256) and SASL_SSL (SCRAM-SHA-512),
and a wrong password gets that client's authentication error (librdkafka, kafka-python and
aiokafka each have their own SASL code)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.security.oauthbearer import unsecured_token
from odradek.testing import BrokerProcess
from tests.security.pki import Pki

TIMEOUT = 30.0
#: mode -> (listener, SASL mechanism or None, client certificate?)
MODES: dict[str, tuple[str, str | None, bool]] = {
    "ssl": ("SSL", None, False),
    "mtls": ("MTLS", None, True),
    **{
        f"{'sasl-ssl' if listener == 'SASL_SSL' else 'sasl'}-{mech.lower()}": (listener, mech, False)
        for listener in ("SASL_PLAINTEXT", "SASL_SSL")
        for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    },
}
USERS = {
    "PLAIN": ("alice", "alice-secret"),
    "SCRAM-SHA-256": ("carol", "carol-256"),
    "SCRAM-SHA-512": ("dave", "dave-512"),
    "OAUTHBEARER": ("olga", ""),  # an unsecured token (the broker's development validator)
}


def _token(principal: str) -> str:
    return unsecured_token(principal, 600, int(time.time() * 1000))


def _check_principal(broker: BrokerProcess, mode: str) -> None:
    """The broker names the client as it should (its access log, at DEBUG)."""
    listener, mechanism, cert = MODES[mode]
    principal = f"User:{Pki.ALICE}" if cert else f"User:{USERS[mechanism][0]}" if mechanism else "User:ANONYMOUS"
    broker.wait_for_log(f"principal={principal} listener={listener}")


@pytest.fixture(scope="module")
def broker(secure_broker: BrokerProcess) -> BrokerProcess:
    admin = AdminClient({"bootstrap.servers": secure_broker.bootstrap})
    ups = [
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-256"),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-512"),
    ]
    for f in admin.alter_user_scram_credentials(ups).values():
        assert f.result(TIMEOUT) is None
    return secure_broker


def _protocol(listener: str) -> str:
    return {"MTLS": "SSL"}.get(listener, listener)


# -- kcat -----------------------------------------------------------------------------------------


def _kcat_conf(broker: BrokerProcess, pki: Pki, mode: str, password: str | None = None) -> list[str]:
    listener, mechanism, cert = MODES[mode]
    conf = {"security.protocol": _protocol(listener), "socket.timeout.ms": "10000"}
    if "SSL" in _protocol(listener):
        conf["ssl.ca.location"] = str(pki.ca)
    if cert:
        conf.update({"ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)})
    if mechanism == "OAUTHBEARER":
        conf.update({"sasl.mechanism": mechanism, "enable.sasl.oauthbearer.unsecure.jwt": "true",
                     "sasl.oauthbearer.config": f"principal={USERS[mechanism][0]}"})
    elif mechanism:
        user, pw = USERS[mechanism]
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password or pw})
    args = ["-b", broker.bootstrap_of(listener)]
    for k, v in conf.items():
        args += ["-X", f"{k}={v}"]
    return args


@pytest.mark.parametrize("mode", list(MODES))
def test_kcat(kcat: str, broker: BrokerProcess, pki: Pki, mode: str) -> None:
    topic = f"kcat-{mode}-{uuid.uuid4().hex[:6]}"
    conf = _kcat_conf(broker, pki, mode)
    lines = b"".join(b"r%d\n" % i for i in range(10))
    p = subprocess.run([kcat, *conf, "-P", "-t", topic], input=lines, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    c = subprocess.run([kcat, *conf, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True, timeout=60)
    assert c.returncode == 0, c.stderr.decode()
    assert c.stdout.split() == [b"r%d" % i for i in range(10)]
    _check_principal(broker, mode)


def test_kcat_wrong_password(kcat: str, broker: BrokerProcess, pki: Pki) -> None:
    conf = _kcat_conf(broker, pki, "sasl-scram-sha-256", password="wrong")
    r = subprocess.run([kcat, *conf, "-L", "-m", "5"], capture_output=True, timeout=60)
    assert r.returncode != 0
    assert b"due to invalid credentials with SASL mechanism SCRAM-SHA-256" in r.stderr, r.stderr.decode()


# -- kafka-python ---------------------------------------------------------------------------------


def _kafka_python_conf(broker: BrokerProcess, pki: Pki, mode: str, password: str | None = None) -> dict[str, Any]:
    listener, mechanism, cert = MODES[mode]
    conf: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap_of(listener),
        "security_protocol": _protocol(listener),
        "request_timeout_ms": 15000,
    }
    if "SSL" in _protocol(listener):
        conf.update({"ssl_cafile": str(pki.ca), "ssl_check_hostname": True})
    if cert:
        conf.update({"ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key)})
    if mechanism == "OAUTHBEARER":
        from kafka.net.sasl.oauth import AbstractTokenProvider

        class Tokens(AbstractTokenProvider):  # type: ignore[misc]
            def token(self) -> str:
                return _token(USERS["OAUTHBEARER"][0])

        conf.update({"sasl_mechanism": mechanism, "sasl_oauth_token_provider": Tokens()})
    elif mechanism:
        user, pw = USERS[mechanism]
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password or pw})
    return conf


@pytest.mark.parametrize("mode", list(MODES))
def test_kafka_python(broker: BrokerProcess, pki: Pki, mode: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"kp-{mode}-{uuid.uuid4().hex[:6]}"
    conf = _kafka_python_conf(broker, pki, mode)
    p = KafkaProducer(**conf)
    try:
        for i in range(10):
            p.send(topic, b"r%d" % i)
        p.flush(TIMEOUT)
    finally:
        p.close(TIMEOUT)
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000, group_id=topic, **conf)
    try:
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == 10:
                break
    finally:
        c.close()
    assert got == [b"r%d" % i for i in range(10)]
    _check_principal(broker, mode)


def test_kafka_python_wrong_password(broker: BrokerProcess, pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError):
        KafkaProducer(
            **_kafka_python_conf(broker, pki, "sasl-plain", password="wrong"), max_block_ms=3000, bootstrap_timeout_ms=3000
        )
    # kafka-python retries the bootstrap until bootstrap_timeout_ms (30 s by default), logging each
    # refusal with the broker's words
    assert "SaslAuthenticationFailedError" in caplog.text and "Invalid username or password" in caplog.text


# -- aiokafka -------------------------------------------------------------------------------------


def _aiokafka_conf(broker: BrokerProcess, pki: Pki, mode: str, password: str | None = None) -> dict[str, Any]:
    listener, mechanism, cert = MODES[mode]
    conf: dict[str, Any] = {"bootstrap_servers": broker.bootstrap_of(listener), "security_protocol": _protocol(listener)}
    if "SSL" in _protocol(listener):
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        if cert:
            ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        conf["ssl_context"] = ctx
    if mechanism == "OAUTHBEARER":
        from aiokafka.abc import AbstractTokenProvider

        class Tokens(AbstractTokenProvider):  # type: ignore[misc]
            async def token(self) -> str:
                return _token(USERS["OAUTHBEARER"][0])

        conf.update({"sasl_mechanism": mechanism, "sasl_oauth_token_provider": Tokens()})
    elif mechanism:
        user, pw = USERS[mechanism]
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password or pw})
    return conf


@pytest.mark.parametrize("mode", list(MODES))
def test_aiokafka(broker: BrokerProcess, pki: Pki, mode: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = f"aio-{mode}-{uuid.uuid4().hex[:6]}"

    async def main() -> list[bytes]:
        conf = _aiokafka_conf(broker, pki, mode)
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait(topic, b"r%d" % i)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", group_id=topic, **_aiokafka_conf(broker, pki, mode))
        await c.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(TIMEOUT):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 10:
                        break
        finally:
            await c.stop()
        return got

    assert asyncio.run(main()) == [b"r%d" % i for i in range(10)]
    _check_principal(broker, mode)


def test_aiokafka_wrong_password(broker: BrokerProcess, pki: Pki) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError, KafkaError

    async def main() -> None:
        p = AIOKafkaProducer(**_aiokafka_conf(broker, pki, "sasl-ssl-scram-sha-512", password="wrong"))
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises((KafkaError, KafkaConnectionError)) as info:
        asyncio.run(main())
    assert "uthentication" in repr(info.value) or "credentials" in repr(info.value) or isinstance(
        info.value, KafkaConnectionError
    ), repr(info.value)


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed (apt-get install kcat)")
    return path
