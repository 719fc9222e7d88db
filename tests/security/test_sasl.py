"""SASL mechanisms (odradek.security.sasl) against the RFCs' examples and each other."""

from __future__ import annotations

import base64

import pytest

from odradek.security import (
    AuthenticationFailed,
    KafkaPrincipal,
    PlainServer,
    ScramClient,
    ScramCredential,
    ScramServer,
    parse_jaas,
    plain_verifier,
)

USERS = {"alice": "alice-secret", "admin": "admin-secret"}


def test_plain_accepts_the_right_password_and_names_the_user() -> None:
    server = PlainServer(plain_verifier(USERS))
    assert server.evaluate(b"\x00alice\x00alice-secret") == b""
    assert server.complete and server.principal == KafkaPrincipal("User", "alice")
    assert str(server.principal) == "User:alice"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00alice\x00wrong", "Invalid username or password"),
        (b"\x00mallory\x00alice-secret", "Invalid username or password"),
        (b"admin\x00alice\x00alice-secret", "authorization id that is different"),
        (b"\x00alice", "expected 3 tokens"),
        (b"\x00\x00x", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"\x00\xff\x00x", "not UTF-8"),
    ],
)
def test_plain_refuses_with_kafkas_messages(token: bytes, message: str) -> None:
    server = PlainServer(plain_verifier(USERS))
    with pytest.raises(AuthenticationFailed, match=message):
        server.evaluate(token)
    assert not server.complete and server.principal is None


def test_scram_sha_256_matches_rfc_7677s_example() -> None:
    """RFC 7677 section 3: user "user", password "pencil"."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pencil", 4096, salt)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == KafkaPrincipal.user("user")
    # and our client computes the RFC's proof
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.evaluate(first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert client.evaluate(final) is None and client.complete


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree_and_a_wrong_password_fails(mechanism: str) -> None:
    creds = {"ali,ce=": ScramCredential.from_password(mechanism, "s3cret")}
    for password, ok in (("s3cret", True), ("S3cret", False)):
        server = ScramServer(mechanism, creds.get)
        client = ScramClient(mechanism, "ali,ce=", password)
        token = server.evaluate(client.first())
        reply = client.evaluate(token)
        assert reply is not None
        if ok:
            assert client.evaluate(server.evaluate(reply)) is None
            assert server.principal == KafkaPrincipal.user("ali,ce=")
        else:
            with pytest.raises(AuthenticationFailed, match="Invalid user credentials"):
                server.evaluate(reply)
            assert not server.complete


def test_scram_refuses_unknown_users_replayed_nonces_and_channel_binding() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    with pytest.raises(AuthenticationFailed, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-256", {}.get).evaluate(b"n,,n=nobody,r=abc")
    with pytest.raises(AuthenticationFailed, match="channel binding"):
        ScramServer("SCRAM-SHA-256", {"u": cred}.get).evaluate(b"p=tls-unique,,n=u,r=abc")
    server = ScramServer("SCRAM-SHA-256", {"u": cred}.get)
    server.evaluate(b"n,,n=u,r=abc")
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.evaluate(b"c=biws,r=abcOTHER,p=" + base64.b64encode(b"x" * 32))
    with pytest.raises(AuthenticationFailed, match="over"):
        server.evaluate(b"anything")
    weak = ScramCredential.from_password("SCRAM-SHA-256", "pw", iterations=1000)
    with pytest.raises(AuthenticationFailed, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-256", {"u": weak}.get).evaluate(b"n,,n=u,r=abc")


def test_scram_credentials_round_trip_kafkas_stored_form() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pw", 8192)
    text = cred.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert ScramCredential.from_text(text) == cred


def test_jaas_config_as_kafka_writes_it() -> None:
    module, options = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n  username="admin"\n'
        '  password="admin-secret" user_admin="admin-secret" user_alice="a\\"b";'
    )
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret", "user_alice": 'a"b'}
    with pytest.raises(ValueError):
        parse_jaas("PlainLoginModule username=x")


@pytest.mark.parametrize(
    ("count", "message"),
    [("abc", "not a number"), ("", "not a number"), ("-5", "not a number"), ("99999999999999", "not a number"),
     ("2000000", "more than"), ("100", "fewer than")],
)
def test_scram_client_refuses_a_hostile_iteration_count(count: str, message: str) -> None:
    """A server cannot make the client fail with a stray exception or hash for minutes."""
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    client.first()
    with pytest.raises(AuthenticationFailed, match=message):
        client.evaluate(f"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={count}".encode())
