"""Malformed SASL tokens, generated: every mechanism (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with
the unsecured and the JWKS validator) refuses them with an authentication failure - never an
exception of another kind - and a broker answers each SASL_AUTHENTICATION_FAILED (no
UNKNOWN_SERVER_ERROR, no traceback in its log) while it keeps serving a good client.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.security import (
    AuthenticationFailed,
    JwksValidator,
    OAuthBearerServer,
    PlainServer,
    SaslServer,
    ScramClient,
    ScramCredential,
    ScramServer,
    TokenError,
    UnsecuredValidator,
    oauthbearer,
    plain_verifier,
)
from odradek.security.oauthbearer import client_message, unsecured_token
from odradek.testing import BrokerProcess, WireClient

NOW = 1_800_000_000_000
MAX_JSON_DEPTH = getattr(oauthbearer, "MAX_JSON_DEPTH", 32)
CRED = {m: ScramCredential.from_password(m, "right", 4096, b"salt" * 4) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
_N = 0xC7F1_5A3B_0E5D_9F27_2B11_6D4F_85A3_C0E9_1F77_3D2B_A5C1_E3F9_0B6D_4A87_2C5E_9F13  # any odd modulus: no signature verifies
JWKS_KEYS = {"k1": (_N, 65537)}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _servers() -> dict[str, Callable[[], SaslServer]]:
    return {
        "PLAIN": lambda: PlainServer(plain_verifier({"alice": "right"})),
        "SCRAM-SHA-256": lambda: ScramServer("SCRAM-SHA-256", CRED.get),
        "SCRAM-SHA-512": lambda: ScramServer("SCRAM-SHA-512", CRED.get),
        "OAUTHBEARER-unsecured": lambda: OAuthBearerServer(UnsecuredValidator(lambda: NOW)),
        "OAUTHBEARER-jwks": lambda: OAuthBearerServer(JwksValidator(JWKS_KEYS, lambda: NOW)),
    }


def _refused_or_challenged(server: SaslServer, tokens: list[bytes]) -> None:
    """Feed ``tokens`` in turn: each is answered with bytes or refused with AuthenticationFailed;
    nothing else escapes, and an OAUTHBEARER error challenge ends in a failure at the next step."""
    for token in tokens:
        try:
            reply = server.evaluate(token)
        except AuthenticationFailed as exc:
            assert str(exc)
            return
        assert isinstance(reply, bytes)
        if server.complete:
            return
        if isinstance(server, OAuthBearerServer) and reply:
            assert json.loads(reply) == {"status": "invalid_token"}
            with pytest.raises(AuthenticationFailed):
                server.evaluate(b"\x01")
            return


# -- any bytes, any mechanism ---------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", list(_servers()))
@given(tokens=st.lists(st.binary(max_size=300), min_size=1, max_size=3))
def test_random_bytes_are_refused_by_every_mechanism(mechanism: str, tokens: list[bytes]) -> None:
    server = _servers()[mechanism]()
    _refused_or_challenged(server, tokens)
    assert not server.complete


def _scram_texts() -> st.SearchStrategy[bytes]:
    """SCRAM-shaped messages: the attribute syntax, with hostile values."""
    value = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
    attr = st.tuples(st.sampled_from("nrcpsiamev=,"), value).map(lambda kv: f"{kv[0]}={kv[1]}")
    gs2 = st.sampled_from(["n,,", "y,,", "p=tls,,", "n,a=alice,", "n,a=x=2Cy,", "", "n,"])
    return st.builds(lambda g, attrs: (g + ",".join(attrs)).encode(), gs2, st.lists(attr, max_size=6))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@given(first=_scram_texts(), final=_scram_texts(), good_first=st.booleans())
def test_scram_shaped_messages_are_refused(mechanism: str, first: bytes, final: bytes, good_first: bool) -> None:
    server = ScramServer(mechanism, CRED.get)
    if good_first:  # a real client-first, then a forged client-final
        first = ScramClient(mechanism, "alice", "wrong").first().replace(b"n=alice", b"n=" + b"alice"[: len(final) % 6])
    _refused_or_challenged(server, [first, final])
    assert not server.complete


def _plain_texts() -> st.SearchStrategy[bytes]:
    part = st.one_of(st.binary(max_size=30), st.text(max_size=30).map(str.encode))
    return st.lists(part, max_size=5).map(b"\x00".join)


@given(token=_plain_texts())
def test_plain_shaped_messages_are_refused_unless_right(token: bytes) -> None:
    server = PlainServer(plain_verifier({"alice": "right"}))
    try:
        server.evaluate(token)
    except AuthenticationFailed:
        return
    assert token.split(b"\x00")[1:] == [b"alice", b"right"] and server.principal is not None


# -- OAUTHBEARER: hostile JSON in well-formed tokens -----------------------------------------------

_NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=10**18, max_value=10**4000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "9" * 5000]),
)
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.text(max_size=20), _NUMBERS),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)


def _encode(value: Any) -> str:
    """JSON text with numbers as the strategy made them (raw strings such as ``1e400`` unquoted)."""
    if isinstance(value, str) and (value in ("NaN", "Infinity", "-Infinity") or value[:1].isdigit() or value[:2] == "-1"):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: "Infinity", -math.inf: "-Infinity"}.get(value, "NaN")
    if isinstance(value, list):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_encode(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _claims() -> st.SearchStrategy[str]:
    claim = st.sampled_from(["exp", "iat", "nbf", "sub", "scope", "aud", "iss"])
    return st.dictionaries(claim, _JSON, max_size=7).map(_encode)


def _deep(depth: int, kind: str) -> str:
    return '{"sub":"a","exp":1e12,"x":' + kind[0] * depth + "1" + kind[1] * depth + "}"


def _token(header: str, claims: str, signature: str) -> str:
    return f"{_b64url(header.encode())}.{_b64url(claims.encode())}.{signature}"


@pytest.mark.parametrize("validator", ["unsecured", "jwks"])
@given(
    claims=st.one_of(
        _claims(),
        st.integers(min_value=MAX_JSON_DEPTH, max_value=100_000).map(lambda d: _deep(d, "[]")),
        st.integers(min_value=MAX_JSON_DEPTH, max_value=100_000).map(lambda d: _deep(d, ["{\"a\":", "}"])),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    ),
    header=st.one_of(st.just('{"alg":"none"}'), st.just('{"alg":"RS256","kid":"k1"}'), _JSON.map(_encode)),
    signature=st.sampled_from(["", "AAAA", "!!", "a.b"]),
)
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_hostile_claims_are_token_errors(validator: str, claims: str, header: str, signature: str) -> None:
    v = UnsecuredValidator(lambda: NOW) if validator == "unsecured" else JwksValidator(JWKS_KEYS, lambda: NOW)
    token = _token(header, claims, signature)
    try:
        valid = v.validate(token)
    except TokenError:
        pass
    else:
        assert validator == "unsecured" and isinstance(valid.expires_ms, int) and valid.principal.strip()
    _refused_or_challenged(OAuthBearerServer(v), [client_message(token)])


@pytest.mark.parametrize(
    ("exp", "why"),
    [
        ("Infinity", "not a JSON number"),
        ("NaN", "not a JSON number"),
        ("-Infinity", "not a JSON number"),
        ("1e400", "within range"),
        ("1" + "0" * 30, "within range"),
        ('"soon"', "not a number"),
        ("true", "not a number"),
    ],
)
def test_exp_out_of_range_is_an_invalid_token(exp: str, why: str) -> None:
    """The issue's findings: each was UNKNOWN_SERVER_ERROR and a traceback."""
    token = _token('{"alg":"none"}', '{"sub":"alice","exp":' + exp + "}", "")
    with pytest.raises(TokenError, match=why):
        UnsecuredValidator(lambda: NOW).validate(token)
    server = OAuthBearerServer(UnsecuredValidator(lambda: NOW))
    assert json.loads(server.evaluate(client_message(token))) == {"status": "invalid_token"}
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"\x01")


def test_deep_nesting_and_other_types_are_invalid_tokens() -> None:
    v = UnsecuredValidator(lambda: NOW)
    for claims in (_deep(100_000, "[]"), _deep(2000, ['{"a":', "}"]), '{"sub":["alice"],"exp":1e12}',
                   '{"sub":"alice","exp":1e12,"scope":[1,2]}'):
        with pytest.raises(TokenError):
            v.validate(_token('{"alg":"none"}', claims, ""))
    with pytest.raises(TokenError, match="algorithm"):
        JwksValidator(JWKS_KEYS, lambda: NOW).validate(_token('{"alg":["RS256"]}', '{"sub":"a","exp":1e12}', "AAAA"))
    with pytest.raises(TokenError, match="base64url"):
        v.validate("é.e30.")
    # a good token still validates
    assert v.validate(unsecured_token("alice", 60, NOW)).principal == "alice"


# -- through a broker --------------------------------------------------------------------------------

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Failures answered at once (a delay of 0), so that many can be tried."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("tokens") / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": 0,
        },
        log_level="INFO",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _exchange(broker: BrokerProcess, mechanism: str, tokens: list[bytes]) -> list[int]:
    """The error codes of the SaslAuthenticate answers, until the connection closes."""
    from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest

    c = WireClient(*broker.endpoints["SASL_PLAINTEXT"], timeout=30)
    codes: list[int] = []
    try:
        assert c.request(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == 0
        for token in tokens:
            try:
                r = c.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            except (ConnectionError, OSError):
                break
            codes.append(r.error_code)
            if r.error_code:
                break
    finally:
        c.close()
    return codes


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
@given(tokens=st.lists(st.one_of(st.binary(max_size=200), _claims().map(
    lambda c: client_message(_token('{"alg":"none"}', c, "")))), min_size=1, max_size=3))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_a_broker_answers_malformed_tokens_with_authentication_failures(
    broker: BrokerProcess, mechanism: str, tokens: list[bytes]
) -> None:
    codes = _exchange(broker, mechanism, [*tokens, b"\x01"])
    assert codes, "the broker answered nothing"
    assert set(codes) <= {0, ErrorCode.SASL_AUTHENTICATION_FAILED}, codes
    assert codes[-1] == ErrorCode.SASL_AUTHENTICATION_FAILED, codes


def test_the_broker_logged_no_traceback_and_serves_a_good_client(broker: BrokerProcess) -> None:
    codes = _exchange(broker, "OAUTHBEARER", [client_message(_token('{"alg":"none"}', '{"sub":"a","exp":1e400}', ""))])
    assert codes == [0]  # the error challenge; the client's \x01 would end it
    codes = _exchange(broker, "PLAIN", [b"\x00alice\x00alice-secret"])
    assert codes == [0]
    text = "\n".join(broker.stderr_lines)
    assert "Traceback" not in text and "UNKNOWN_SERVER_ERROR" not in text and "error handling" not in text
