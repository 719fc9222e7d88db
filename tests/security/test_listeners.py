"""Listeners with TLS and SASL, through librdkafka (confluent-kafka): every protocol carries
records both ways, every wrong credential gets Kafka's error, and the broker keeps serving."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from odradek.errors import ErrorCode
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest
from odradek.testing import BrokerProcess, WireClient
from tests.security.conftest import tls_client
from tests.security.pki import Pki

TIMEOUT = 30.0


def _round_trip(conf: dict[str, Any], n: int = 20) -> list[bytes]:
    """Produce ``n`` records to a new topic and read them back with a group consumer."""
    topic = f"sec-{uuid.uuid4().hex[:10]}"
    errors: list[Any] = []
    p = ck.Producer({**conf, "message.timeout.ms": int(TIMEOUT * 1000)})
    for i in range(n):
        p.produce(topic, b"v%d" % i, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(TIMEOUT) == 0
    assert errors == [None] * n
    c = ck.Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < n:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {n}"
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    assert got == [b"v%d" % i for i in range(n)]
    return got


def _auth_error(conf: dict[str, Any]) -> ck.KafkaError:
    """The first error librdkafka reports for a client that cannot get in."""
    seen: list[ck.KafkaError] = []
    p = ck.Producer({**conf, "error_cb": seen.append, "message.timeout.ms": 3000})
    p.produce("never", b"x")
    deadline = time.monotonic() + TIMEOUT
    while not seen and time.monotonic() < deadline:
        p.poll(0.1)
    p.purge()
    p.flush(1)
    assert seen, "the client saw no error"
    return seen[0]


def _sasl(broker: BrokerProcess, listener: str, mechanism: str, user: str, password: str, pki: Pki) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap_of(listener),
        "security.protocol": listener if listener in ("SASL_PLAINTEXT", "SASL_SSL") else "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if listener == "SASL_SSL":
        conf.update(tls_client(pki))
    return conf


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _wait_for_log(broker: BrokerProcess, *parts: str) -> str:
    return broker.wait_for_log(*parts)


# -- TLS ------------------------------------------------------------------------------------------


def test_ssl_carries_records_and_the_client_checks_the_brokers_name(secure_broker: BrokerProcess, pki: Pki) -> None:
    _round_trip({"bootstrap.servers": secure_broker.bootstrap_of("SSL"), "security.protocol": "SSL", **tls_client(pki)})
    line = _wait_for_log(secure_broker, "principal=User:ANONYMOUS listener=SSL")
    assert "PRODUCE" in line or "METADATA" in line or "API_VERSIONS" in line


def test_mtls_names_the_client_by_its_certificate(secure_broker: BrokerProcess, pki: Pki) -> None:
    conf = {
        "bootstrap.servers": secure_broker.bootstrap_of("MTLS"),
        "security.protocol": "SSL",
        **tls_client(pki, cert=pki.client_cert, key=pki.client_key),
    }
    _round_trip(conf)
    _wait_for_log(secure_broker, f"principal=User:{Pki.ALICE} listener=MTLS")


def test_a_client_without_a_trusted_certificate_is_refused_and_others_carry_on(
    secure_broker: BrokerProcess, pki: Pki
) -> None:
    base = {"bootstrap.servers": secure_broker.bootstrap_of("MTLS"), "security.protocol": "SSL"}
    # with TLS 1.3 the client learns of the refusal as a reset right after its handshake
    refused = (ck.KafkaError._SSL, ck.KafkaError._TRANSPORT, ck.KafkaError._AUTHENTICATION, ck.KafkaError._ALL_BROKERS_DOWN)
    err = _auth_error({**base, **tls_client(pki, cert=pki.stranger_cert, key=pki.stranger_key)})
    assert err.code() in refused, err
    err = _auth_error({**base, **tls_client(pki)})  # no certificate at all where one is required
    assert err.code() in refused, err
    _wait_for_log(secure_broker, "Failed authentication with /127.0.0.1 on listener MTLS (SSL handshake failed")
    _round_trip({**base, **tls_client(pki, cert=pki.client_cert, key=pki.client_key)})


def test_plaintext_bytes_on_a_tls_port_close_that_connection_only(secure_broker: BrokerProcess, pki: Pki) -> None:
    host, port = secure_broker.endpoints["SSL"]
    # a Kafka ApiVersions v0 request in clear text
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        s.settimeout(TIMEOUT)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    # whatever came back is a TLS alert, never a Kafka response
    assert not data or data[0] in (0x15, 0x16), data[:16]
    _wait_for_log(secure_broker, "on listener SSL (SSL handshake failed")
    _round_trip({"bootstrap.servers": secure_broker.bootstrap_of("SSL"), "security.protocol": "SSL", **tls_client(pki)})


def test_a_client_that_stalls_in_the_handshake_does_not_hold_up_others(
    secure_broker: BrokerProcess, pki: Pki
) -> None:
    host, port = secure_broker.endpoints["SSL"]
    stalled = [socket.create_connection((host, port), timeout=TIMEOUT) for _ in range(5)]
    try:
        _round_trip({"bootstrap.servers": secure_broker.bootstrap_of("SSL"), "security.protocol": "SSL", **tls_client(pki)})
    finally:
        for s in stalled:
            s.close()


# -- SASL -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_plain_users_from_the_listeners_jaas_config(secure_broker: BrokerProcess, pki: Pki, listener: str) -> None:
    _round_trip(_sasl(secure_broker, listener, "PLAIN", "alice", "alice-secret", pki))
    _wait_for_log(secure_broker, f"principal=User:alice listener={listener}")


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret")], ids=["wrong-password", "unknown-user"]
)
def test_plain_refuses_with_kafkas_error_and_the_broker_carries_on(
    secure_broker: BrokerProcess, pki: Pki, user: str, password: str
) -> None:
    err = _auth_error(_sasl(secure_broker, "SASL_PLAINTEXT", "PLAIN", user, password, pki))
    assert err.code() == ck.KafkaError._AUTHENTICATION, err
    assert "Invalid username or password" in err.str(), err.str()
    _wait_for_log(secure_broker, "Failed authentication with 127.0.0.1 on listener SASL_PLAINTEXT")
    _round_trip(_sasl(secure_broker, "SASL_PLAINTEXT", "PLAIN", "admin", "admin-secret", pki))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_scram_users_made_and_removed_through_the_admin_api(
    secure_broker: BrokerProcess, pki: Pki, mechanism: str, listener: str
) -> None:
    admin = _admin(secure_broker)
    user = f"u{uuid.uuid4().hex[:8]}"
    mech = ScramMechanism.SCRAM_SHA_256 if mechanism == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512
    for f in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 8192), b"pa ss,w=rd")]
    ).values():
        assert f.result(TIMEOUT) is None
    described = admin.describe_user_scram_credentials([user])[user].result(TIMEOUT)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(mech, 8192)]
    _round_trip(_sasl(secure_broker, listener, mechanism, user, "pa ss,w=rd", pki))
    err = _auth_error(_sasl(secure_broker, listener, mechanism, user, "wrong", pki))
    # Kafka's words for SCRAM: the reason is not told (it stays in the broker's log)
    assert err.code() == ck.KafkaError._AUTHENTICATION, err
    assert f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}" in err.str()
    secure_broker.wait_for_log("Failed authentication with 127.0.0.1", "Invalid user credentials")
    # removed: the next connection is refused
    for f in admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, mech)]).values():
        assert f.result(TIMEOUT) is None
    err = _auth_error(_sasl(secure_broker, listener, mechanism, user, "pa ss,w=rd", pki))
    assert err.code() == ck.KafkaError._AUTHENTICATION, err


def test_scram_admin_errors_as_kafka_answers_them(secure_broker: BrokerProcess) -> None:
    admin = _admin(secure_broker)
    low = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("weak", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"x")]
    )["weak"]
    with pytest.raises(ck.KafkaException) as info:
        low.result(TIMEOUT)
    assert info.value.args[0].code() == ck.KafkaError.UNACCEPTABLE_CREDENTIAL
    gone = admin.alter_user_scram_credentials([UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_512)])
    with pytest.raises(ck.KafkaException) as info:
        gone["nobody"].result(TIMEOUT)
    assert info.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(ck.KafkaException) as info:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(TIMEOUT)
    assert info.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND


def test_nothing_but_the_sasl_exchange_before_authentication(secure_broker: BrokerProcess, pki: Pki) -> None:
    """A Metadata request on a SASL listener before authenticating closes that connection."""
    host, port = secure_broker.endpoints["SASL_PLAINTEXT"]
    body = struct.pack(">hhih", 3, 0, 7, 4) + b"test" + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        s.settimeout(TIMEOUT)
        assert s.recv(4096) == b""  # closed, nothing answered
    _wait_for_log(secure_broker, "METADATA request on listener SASL_PLAINTEXT before SASL authentication")


def test_sasl_state_errors_on_the_wire(secure_broker: BrokerProcess) -> None:
    """A mechanism the listener does not enable: UNSUPPORTED_SASL_MECHANISM with the list, then
    the connection closes; SaslAuthenticate before any handshake: ILLEGAL_SASL_STATE and closed;
    on a listener without SASL the exchange is refused as illegal, the connection stays."""
    host, port = secure_broker.endpoints["SASL_PLAINTEXT"]
    c = WireClient(host, port)
    try:
        r = c.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert r.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
        with pytest.raises(ConnectionError):
            c.request(ApiVersionsRequest(), 0)
    finally:
        c.close()
    c = WireClient(host, port)
    try:
        r = c.request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 1)
        assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE
        with pytest.raises(ConnectionError):
            c.request(ApiVersionsRequest(), 0)
    finally:
        c.close()
    # the exchange itself, by hand: PLAIN, then a Metadata request is served
    c = WireClient(host, port)
    try:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        r = c.request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 2)
        assert r.error_code == 0 and r.session_lifetime_ms == 0
        assert c.request(MetadataRequest(topics=[]), 1).brokers
        r = c.request(SaslAuthenticateRequest(auth_bytes=b"again"), 2)
        assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE
    finally:
        c.close()
    c = WireClient(*secure_broker.endpoints["PLAINTEXT"])
    try:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert c.request(ApiVersionsRequest(), 0).error_code == 0
    finally:
        c.close()


def test_secrets_are_not_described_or_logged(secure_broker: BrokerProcess) -> None:
    admin = _admin(secure_broker)
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([res])[res].result(TIMEOUT)
    for name in ("ssl.keystore.password", "ssl.key.password", "sasl.jaas.config"):
        assert configs[name].is_sensitive and configs[name].value is None, name
    assert not any("alice-secret" in line or "pa ss,w=rd" in line for line in secure_broker.stderr_lines)


def test_misconfigured_listeners_stop_the_start_with_the_setting_named(tmp_path: Any, pki: Pki) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"ssl.keystore.location": tmp_path / "missing.pem"}, r"ssl\.keystore\.location"),
        ({"ssl.keystore.location": pki.broker_keystore, "ssl.keystore.type": "JKS"}, "JKS"),
        ({"ssl.keystore.location": pki.broker_keystore, "ssl.enabled.protocols": "SSLv3"}, r"ssl\.enabled\.protocols"),
    ]
    for overrides, says in cases:
        b = BrokerProcess(tmp_path / uuid.uuid4().hex, listeners="SSL://127.0.0.1:0", overrides=overrides)
        with pytest.raises(RuntimeError, match=says):
            b.start(timeout=20)
    b = BrokerProcess(
        tmp_path / "sasl", listeners="SASL_PLAINTEXT://127.0.0.1:0", overrides={"sasl.enabled.mechanisms": "PLAIN"}
    )
    with pytest.raises(RuntimeError, match=r"plain\.sasl\.jaas\.config"):
        b.start(timeout=20)


def _raw_token(c: WireClient, token: bytes) -> bytes:
    """Send a SASL token without Kafka framing (after SaslHandshake v0); the answer likewise."""
    c.sock.sendall(struct.pack(">i", len(token)) + token)
    head = b""
    while len(head) < 4:
        chunk = c.sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    (n,) = struct.unpack(">i", head)
    body = b""
    while len(body) < n:
        chunk = c.sock.recv(n - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return body


def test_sasl_handshake_v0_takes_unframed_tokens(secure_broker: BrokerProcess) -> None:
    """Old clients: SaslHandshake v0, then the mechanism's tokens as bare size-prefixed frames;
    SCRAM's two rounds, then Kafka requests again.  A wrong password closes the connection."""
    from odradek.security import ScramClient

    admin = _admin(secure_broker)
    for f in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("v0user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"v0pw")]
    ).values():
        assert f.result(TIMEOUT) is None
    host, port = secure_broker.endpoints["SASL_PLAINTEXT"]
    c = WireClient(host, port)
    try:
        assert c.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 0).error_code == 0
        scram = ScramClient("SCRAM-SHA-256", "v0user", "v0pw")
        final = scram.evaluate(_raw_token(c, scram.first()))
        assert final is not None
        assert scram.evaluate(_raw_token(c, final)) is None and scram.complete
        assert c.request(MetadataRequest(topics=[]), 1).brokers  # framed requests again
    finally:
        c.close()
    c = WireClient(host, port)
    try:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        with pytest.raises(ConnectionError):
            _raw_token(c, b"\x00alice\x00wrong")
    finally:
        c.close()
    c = WireClient(host, port)
    try:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        assert _raw_token(c, b"\x00alice\x00alice-secret") == b""
        assert c.request(MetadataRequest(topics=[]), 1).brokers
    finally:
        c.close()


def test_sessions_end_after_connections_max_reauth_ms_unless_renewed(tmp_path: Any, pki: Pki) -> None:
    """KIP-368: the session lifetime goes back in SaslAuthenticate; librdkafka re-authenticates
    on the same connection while producing; a client that does not is closed at its next
    request after the session ended."""
    from tests.security.conftest import secure_overrides

    b = BrokerProcess(
        tmp_path / "reauth",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        overrides={**secure_overrides(pki), "connections.max.reauth.ms": 1500,
                   "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"},
        log_level="INFO,odradek.authentication=DEBUG",
    ).start()
    try:
        host, port = b.endpoints["SASL_PLAINTEXT"]
        c = WireClient(host, port)
        try:
            assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
            r = c.request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 2)
            assert r.error_code == 0 and r.session_lifetime_ms == 1500
            assert c.request(MetadataRequest(topics=[]), 1).brokers
            # re-authenticating as someone else is refused
            assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
            r = c.request(SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00admin-secret"), 2)
            assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "principals" in (r.error_message or "")
        finally:
            c.close()
        c = WireClient(host, port)
        try:
            assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
            assert c.request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 2).error_code == 0
            time.sleep(1.6)  # past the session's end: the next request closes the connection
            with pytest.raises(ConnectionError):
                c.request(MetadataRequest(topics=[]), 1)
        finally:
            c.close()
        b.wait_for_log("its SASL session expired")
        # librdkafka re-authenticates by itself and its records keep flowing across sessions
        conf = {
            "bootstrap.servers": b.bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        p = ck.Producer({**conf, "linger.ms": 5})
        errors: list[Any] = []
        deadline = time.monotonic() + 4.0
        n = 0
        while time.monotonic() < deadline:
            p.produce("reauth", b"%d" % n, on_delivery=lambda err, _m: errors.append(err))
            n += 1
            p.poll(0.05)
        assert p.flush(TIMEOUT) == 0
        assert errors == [None] * n
        b.wait_for_log("re-authenticated as User:alice")
    finally:
        b.stop()


def test_sighup_reloads_certificates_without_a_restart(tmp_path: Any, pki: Pki) -> None:
    """New connections get the new certificate after SIGHUP; a keystore that does not load
    leaves the listener serving the old one (and says so)."""
    import os
    import shutil
    import signal
    import ssl as ssl_module

    from odradek.cli.certs import make_signed

    keystore = tmp_path / "keystore.pem"
    shutil.copy(pki.broker_keystore, keystore)
    b = BrokerProcess(
        tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        overrides={"ssl.keystore.location": keystore}, log_level="INFO",
    ).start()
    try:
        host, port = b.endpoints["SSL"]
        ctx = ssl_module.create_default_context(cafile=str(pki.ca))

        def served() -> bytes:
            with socket.create_connection((host, port), timeout=TIMEOUT) as raw, ctx.wrap_socket(
                raw, server_hostname="localhost"
            ) as tls:
                der = tls.getpeercert(binary_form=True)
                assert der is not None
                return der

        first = served()
        key, cert = make_signed(pki.ca.parent, "renewed", "/CN=localhost/O=renewed", "ca",
                                "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        keystore.write_text(key.read_text() + cert.read_text())
        os.kill(b.pid, signal.SIGHUP)
        b.wait_for_log("listener SSL: TLS keystore and truststore reloaded")
        second = served()
        assert second != first and second == ssl_module.PEM_cert_to_DER_cert(cert.read_text())
        keystore.write_text("not a certificate")
        os.kill(b.pid, signal.SIGHUP)
        b.wait_for_log("listener SSL keeps its TLS certificates")
        assert served() == second
    finally:
        b.stop()


def test_pkcs12_keystores_and_truststores(tmp_path: Any, pki: Pki) -> None:
    """A PKCS12 keystore (with its password) and truststore, read through the cryptography package."""
    import subprocess

    p12 = tmp_path / "broker.p12"
    subprocess.run(
        ["openssl", "pkcs12", "-export", "-inkey", str(pki.broker_key), "-in", str(pki.broker_cert),
         "-certfile", str(pki.ca), "-out", str(p12), "-passout", "pass:store-pw"],
        check=True, capture_output=True, timeout=60,
    )
    trust = tmp_path / "trust.p12"
    subprocess.run(
        ["openssl", "pkcs12", "-export", "-nokeys", "-in", str(pki.ca), "-out", str(trust), "-passout", "pass:trust-pw"],
        check=True, capture_output=True, timeout=60,
    )
    b = BrokerProcess(
        tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        overrides={
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": p12, "ssl.keystore.password": "store-pw",
            "ssl.truststore.type": "PKCS12", "ssl.truststore.location": trust, "ssl.truststore.password": "trust-pw",
            "ssl.client.auth": "required",
            "group.initial.rebalance.delay.ms": 0,  # a group's first join is not held back 3 s
        },
        log_level="INFO,odradek.access=DEBUG",
    ).start()
    try:
        _round_trip({
            "bootstrap.servers": b.bootstrap_of("SSL"), "security.protocol": "SSL",
            **tls_client(pki, cert=pki.client_cert, key=pki.client_key),
        })
        b.wait_for_log(f"principal=User:{Pki.ALICE} listener=SSL")
    finally:
        b.stop()
    wrong = BrokerProcess(
        tmp_path / "data2", listeners="SSL://127.0.0.1:0",
        overrides={"ssl.keystore.type": "PKCS12", "ssl.keystore.location": p12, "ssl.keystore.password": "nope"},
    )
    with pytest.raises(RuntimeError, match="is the password right"):
        wrong.start(timeout=20)


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_oauthbearer_unsecured_tokens_from_librdkafka(secure_broker: BrokerProcess, pki: Pki, listener: str) -> None:
    conf: dict[str, Any] = {
        "bootstrap.servers": secure_broker.bootstrap_of(listener),
        "security.protocol": listener,
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=oscar",
    }
    if listener == "SASL_SSL":
        conf.update(tls_client(pki))
    _round_trip(conf)
    _wait_for_log(secure_broker, f"principal=User:oscar listener={listener}")


def test_plain_with_a_pluggable_check(tmp_path: Any, pki: Pki) -> None:
    """``sasl.server.callback.handler.class=module:function`` decides PLAIN logins instead of the
    JAAS users; a check that raises refuses (and is logged), the broker carries on."""
    b = BrokerProcess(
        tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class": "tests.security.plain_check:check",
            "group.initial.rebalance.delay.ms": 0,  # a group's first join is not held back 3 s
        },
        log_level="INFO,odradek.access=DEBUG",
    ).start()
    try:
        _round_trip(_sasl(b, "SASL_PLAINTEXT", "PLAIN", "hanna", "annah!", pki))
        b.wait_for_log("principal=User:hanna listener=SASL_PLAINTEXT")
        err = _auth_error(_sasl(b, "SASL_PLAINTEXT", "PLAIN", "hanna", "wrong", pki))
        assert err.code() == ck.KafkaError._AUTHENTICATION
        err = _auth_error(_sasl(b, "SASL_PLAINTEXT", "PLAIN", "broken", "x", pki))
        assert err.code() == ck.KafkaError._AUTHENTICATION
        b.wait_for_log("the PLAIN callback tests.security.plain_check:check failed for user broken")
        _round_trip(_sasl(b, "SASL_PLAINTEXT", "PLAIN", "otto", "otto!", pki))
    finally:
        b.stop()


def test_plaintext_only_beyond_loopback_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    """(Tested on the function: a test binds nothing but loopback.)"""
    from odradek.broker.app import _warn_plaintext_beyond_loopback
    from odradek.config import Listener

    with caplog.at_level("WARNING", logger="odradek.broker.app"):
        _warn_plaintext_beyond_loopback([Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)])
        assert not caplog.records
        _warn_plaintext_beyond_loopback([Listener("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092)])
        assert "in clear text without authentication" in caplog.text
        caplog.clear()
        _warn_plaintext_beyond_loopback(
            [Listener("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092), Listener("SASL_SSL", "SASL_SSL", "0.0.0.0", 9093)]
        )
        assert not caplog.records
