"""OAUTHBEARER: the validators on their own, then through a broker with librdkafka and Odradek's
client - unsecured tokens (development) and RS256 tokens checked against a JWKS."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.client import Admin
from odradek.errors import ErrorCode, KafkaError
from odradek.security import (
    AuthenticationFailed,
    JwksValidator,
    OAuthBearerServer,
    TokenError,
    UnsecuredValidator,
    parse_jwks,
)
from odradek.security.oauthbearer import client_message, unsecured_token
from odradek.testing import BrokerProcess
from tests.security.jwt_helpers import Signer, b64url

TIMEOUT = 30.0
NOW = 1_800_000_000_000


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return Signer(tmp_path_factory.mktemp("jwt"))


def test_unsecured_tokens_as_kafkas_unsecured_validator_takes_them() -> None:
    v = UnsecuredValidator(lambda: NOW, required_scope=["write"])
    ok = v.validate(unsecured_token("alice", 60, NOW, ["read", "write"]))
    assert ok.principal == "alice" and ok.expires_ms == NOW + 60_000
    with pytest.raises(TokenError, match="expired"):
        v.validate(unsecured_token("alice", -1, NOW, ["write"]))
    with pytest.raises(TokenError, match="lacks write"):
        v.validate(unsecured_token("alice", 60, NOW, ["read"]))
    header = base64.urlsafe_b64encode(b'{"alg":"HS256"}').rstrip(b"=").decode()
    body = unsecured_token("alice", 60, NOW).split(".")[1]
    with pytest.raises(TokenError, match="alg"):
        v.validate(f"{header}.{body}.")
    no_sub = b64url(json.dumps({"exp": NOW / 1000 + 60}).encode())
    with pytest.raises(TokenError, match="principal"):
        UnsecuredValidator(lambda: NOW).validate(f"{unsecured_token('x', 1, NOW).split('.')[0]}.{no_sub}.")


def test_signed_tokens_against_a_jwks(signer: Signer) -> None:
    keys = parse_jwks(signer.jwks())
    now = int(time.time() * 1000)
    v = JwksValidator(keys, lambda: now, audience=["odradek"], issuer="https://issuer.test")
    assert v.validate(signer.token(signer.claims())).principal == "alice"
    cases = {
        "signature": signer.token(signer.claims())[:-6] + "AAAAAA",
        "expired": signer.token(signer.claims(lifetime=-120)),
        "audience": signer.token(signer.claims(aud="someone-else")),
        "issuer": signer.token(signer.claims(iss="https://evil.test")),
        "no key": signer.token(signer.claims(), kid="unknown"),
    }
    for why, token in cases.items():
        with pytest.raises(TokenError, match=why.split()[0] if why != "no key" else "no key"):
            v.validate(token)
    # the payload changed after signing
    head, _payload, sig = signer.token(signer.claims()).split(".")
    forged = b64url(json.dumps(signer.claims(sub="admin")).encode())
    with pytest.raises(TokenError, match="signature"):
        v.validate(f"{head}.{forged}.{sig}")


def test_the_mechanism_answers_rfc_7628s_error_then_fails() -> None:
    server = OAuthBearerServer(UnsecuredValidator(lambda: NOW))
    challenge = server.evaluate(client_message(unsecured_token("alice", -10, NOW)))
    assert json.loads(challenge) == {"status": "invalid_token"} and not server.complete
    with pytest.raises(AuthenticationFailed, match="expired"):
        server.evaluate(b"\x01")
    good = OAuthBearerServer(UnsecuredValidator(lambda: NOW))
    assert good.evaluate(client_message(unsecured_token("bob", 60, NOW))) == b""
    assert good.complete and str(good.principal) == "User:bob" and good.expires_ms == NOW + 60_000
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        OAuthBearerServer(UnsecuredValidator(lambda: NOW)).evaluate(client_message(unsecured_token("bob", 60, NOW), "eve"))


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory, signer: Signer) -> Iterator[BrokerProcess]:
    d = tmp_path_factory.mktemp("oauth")
    jwks = d / "jwks.json"
    jwks.write_text(signer.jwks())
    b = BrokerProcess(
        d / "data",
        listeners="PLAINTEXT://127.0.0.1:0,UNSECURED://127.0.0.1:0,SIGNED://127.0.0.1:0",
        overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,UNSECURED:SASL_PLAINTEXT,SIGNED:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.signed.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
            "listener.name.signed.sasl.oauthbearer.expected.audience": "odradek",
            "listener.name.signed.sasl.oauthbearer.expected.issuer": "https://issuer.test",
            "connections.max.reauth.ms": 600000,
        },
        log_level="INFO,odradek.access=DEBUG",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _round_trip(conf: dict[str, Any]) -> None:
    topic = f"oauth-{time.monotonic_ns()}"
    p = ck.Producer({**conf, "message.timeout.ms": int(TIMEOUT * 1000)})
    errors: list[Any] = []
    for i in range(5):
        p.produce(topic, b"%d" % i, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(TIMEOUT) == 0 and errors == [None] * 5


def test_librdkafkas_unsecured_tokens(oauth_broker: BrokerProcess) -> None:
    _round_trip({
        "bootstrap.servers": oauth_broker.bootstrap_of("UNSECURED"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=carol",
    })
    oauth_broker.wait_for_log("principal=User:carol listener=UNSECURED")
    oauth_broker.wait_for_log("accepts unsecured OAUTHBEARER tokens")


def test_signed_tokens_from_a_callback_and_refusals(oauth_broker: BrokerProcess, signer: Signer) -> None:
    base = {
        "bootstrap.servers": oauth_broker.bootstrap_of("SIGNED"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
    }

    def good(_config: Any) -> tuple[str, float]:
        return signer.token(signer.claims(sub="dave")), time.time() + 3600

    _round_trip({**base, "oauth_cb": good})
    oauth_broker.wait_for_log("principal=User:dave listener=SIGNED")
    # an unsigned token on the signed listener, an expired one: SASL authentication fails
    for token in (unsecured_token("mallory", 600, int(time.time() * 1000)), signer.token(signer.claims(lifetime=-120))):
        seen: list[ck.KafkaError] = []
        p = ck.Producer({**base, "oauth_cb": lambda _c, t=token: (t, time.time() + 3600), "error_cb": seen.append})
        p.produce("never", b"x")
        deadline = time.monotonic() + TIMEOUT
        while not any(e.code() == ck.KafkaError._AUTHENTICATION for e in seen) and time.monotonic() < deadline:
            p.poll(0.1)
        p.purge()
        assert any(e.code() == ck.KafkaError._AUTHENTICATION for e in seen), seen


def test_odradeks_client_with_a_token_callback_and_unsecured_tokens(oauth_broker: BrokerProcess, signer: Signer) -> None:
    signed = {
        "bootstrap.servers": oauth_broker.bootstrap_of("SIGNED"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _c: (signer.token(signer.claims(sub="erin")), time.time() + 3600),
    }
    with Admin(signed) as admin:
        assert isinstance(admin.list_topics(), dict)
    oauth_broker.wait_for_log("principal=User:erin listener=SIGNED")
    unsecured = {
        "bootstrap.servers": oauth_broker.bootstrap_of("UNSECURED"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.config": "principal=frank",
    }
    with Admin(unsecured) as admin:
        assert isinstance(admin.list_topics(), dict)
    expired = {**signed, "oauth_cb": lambda _c: signer.token(signer.claims(lifetime=-300)), "default.api.timeout.ms": 10000}
    with Admin(expired) as admin, pytest.raises(KafkaError) as info:
        admin.list_topics()
    assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED and "expired" in str(info.value)


def test_jwks_path_is_checked_at_start(tmp_path: Path) -> None:
    b = BrokerProcess(
        tmp_path / "d", listeners="SASL_PLAINTEXT://127.0.0.1:0",
        overrides={"sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.jwks.endpoint.url": str(tmp_path / "none.json")},
    )
    with pytest.raises(RuntimeError, match=r"sasl\.oauthbearer\.jwks\.endpoint\.url"):
        b.start(timeout=20)


def test_a_jwks_served_over_http_is_read_at_start(tmp_path: Path, signer: Signer) -> None:
    """``sasl.oauthbearer.jwks.endpoint.url`` as an http: URL (a loopback server here): read once at
    start, and the signed tokens it verifies are accepted; a URL that answers 404 stops the start."""
    import http.server
    import threading

    served: list[str] = []
    body = signer.jwks().encode()

    class Jwks(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.append(self.path)
            if self.path != "/jwks.json":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        missing = BrokerProcess(
            tmp_path / "m", listeners="SASL_PLAINTEXT://127.0.0.1:0",
            overrides={"sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.jwks.endpoint.url": f"{url}/none"},
        )
        with pytest.raises(RuntimeError, match=r"sasl\.oauthbearer\.jwks\.endpoint\.url .*/none: HTTP Error 404"):
            missing.start(timeout=20)
        b = BrokerProcess(
            tmp_path / "d", listeners="SASL_PLAINTEXT://127.0.0.1:0",
            overrides={"sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.jwks.endpoint.url": f"{url}/jwks.json"},
        ).start()
        try:
            signed = {
                "bootstrap.servers": b.bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _c: (signer.token(signer.claims(sub="gwen")), time.time() + 3600),
            }
            with Admin(signed) as admin:
                assert isinstance(admin.list_topics(), dict)
        finally:
            b.stop()
        assert served == ["/none", "/jwks.json"]
    finally:
        server.shutdown()
        server.server_close()


def test_kafka_python_and_aiokafka_with_signed_tokens(oauth_broker: BrokerProcess, signer: Signer) -> None:
    """Both Python clients' token providers hand the broker an RS256 token it checks against the JWKS."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AioTokens
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider as KpTokens

    class Kp(KpTokens):  # type: ignore[misc]
        def token(self) -> str:
            return signer.token(signer.claims(sub="gina"))

    p = KafkaProducer(
        bootstrap_servers=oauth_broker.bootstrap_of("SIGNED"), security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Kp(),
    )
    try:
        p.send("signed-kp", b"x").get(TIMEOUT)
    finally:
        p.close(TIMEOUT)
    oauth_broker.wait_for_log("principal=User:gina listener=SIGNED")

    class Aio(AioTokens):  # type: ignore[misc]
        async def token(self) -> str:
            return signer.token(signer.claims(sub="hugo"))

    async def main() -> None:
        ap = AIOKafkaProducer(
            bootstrap_servers=oauth_broker.bootstrap_of("SIGNED"), security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Aio(),
        )
        await ap.start()
        try:
            await ap.send_and_wait("signed-aio", b"x")
        finally:
            await ap.stop()

    asyncio.run(main())
    oauth_broker.wait_for_log("principal=User:hugo listener=SIGNED")
