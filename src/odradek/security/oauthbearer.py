r"""SASL/OAUTHBEARER (RFC 7628, KIP-255) on the broker's side, and JSON Web Token validation.

The client's one message carries a bearer token (``n,,\x01auth=Bearer <token>\x01\x01``).
Two validators, as in Kafka:

* :class:`UnsecuredValidator` - Kafka's development validator
  (``OAuthBearerUnsecuredValidatorCallbackHandler``): an unsigned JWS (``alg: none``) whose
  ``exp`` has not passed and whose principal claim (``sub``) names the user; optional required
  scope.  Never for production: anyone can make such a token.
* :class:`JwksValidator` - signed tokens (RS256/RS384/RS512) checked against the public keys of
  a JSON Web Key Set (``sasl.oauthbearer.jwks.endpoint.url``), with the expected audience and
  issuer, ``exp``/``nbf`` within the clock skew (KIP-768's validator).

A refused token gets RFC 7628's error challenge (``{"status":"invalid_token"}``); after the
client's ``\x01`` the exchange fails with the reason (SASL_AUTHENTICATION_FAILED).  Whatever the
token holds - bad base64url, bytes that are not UTF-8 JSON, JSON nested deeper than
:data:`MAX_JSON_DEPTH`, ``NaN``/``Infinity``, numbers out of range (``1e400``), claims of the
wrong type - it is refused this way, never with an exception of another kind.  Numeric date
claims (``exp``, ``iat``, ``nbf``) are finite seconds whose milliseconds fit a Java long, as
Kafka's validators read them; ``sub`` (the principal claim) is a non-blank string; the scope
claim a string or a list of strings.  RSA
signatures are checked here with Python's integers (PKCS #1 v1.5: the signature raised to the
key's exponent must be the padded digest), so no cryptography package is needed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from odradek.errors import OdradekError

from .principal import KafkaPrincipal
from .sasl import AuthenticationFailed, SaslServer

__all__ = [
    "JwksValidator",
    "OAuthBearerServer",
    "TokenError",
    "UnsecuredValidator",
    "ValidToken",
    "client_message",
    "parse_jwks",
    "unsecured_token",
]


class TokenError(OdradekError, ValueError):
    """A token that does not validate; ``str(exc)`` says why."""


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal: str
    expires_ms: int  # when the token expires (ms since the epoch)
    scope: tuple[str, ...] = ()


#: the deepest nesting of arrays and objects a token's JSON may have (claims are flat: an object
#: of strings, numbers and lists of strings)
MAX_JSON_DEPTH = 32
#: the largest magnitude of a numeric date claim: its milliseconds fit a Java long, as in Kafka
MAX_CLAIM_SECONDS = 9223372036854775807 // 1000
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def _b64url(text: str) -> bytes:
    if not _BASE64URL.fullmatch(text):
        raise TokenError("a token part is not base64url")
    try:
        return base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except (ValueError, TypeError):
        raise TokenError("a token part is not base64url") from None


def _refuse_constant(name: str) -> NoReturn:
    raise TokenError(f"{name} is not a JSON number")


def _json_depth(text: str) -> int:
    """How deeply arrays and objects nest in ``text`` (brackets inside strings do not count)."""
    depth = deepest = 0
    for c in _JSON_STRING.sub("", text):
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


# Any: the values of a JWT's JSON, of whatever type its issuer wrote (checked where read)
def _json_part(text: str, what: str) -> dict[str, Any]:
    raw = _b64url(text)
    try:
        doc = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TokenError(f"the token's {what} is not UTF-8") from None
    openers = doc.count("[") + doc.count("{")
    if openers > MAX_JSON_DEPTH and (openers > 1000 or _json_depth(doc) > MAX_JSON_DEPTH):
        raise TokenError(f"the token's {what} nests JSON deeper than {MAX_JSON_DEPTH}")
    try:
        value = json.loads(doc, parse_constant=_refuse_constant)
    except TokenError as exc:
        raise TokenError(f"the token's {what} is not JSON: {exc}") from None
    except (ValueError, RecursionError):
        raise TokenError(f"the token's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenError(f"the token's {what} is not a JSON object")
    return value


def _number(claims: Mapping[str, Any], name: str, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise TokenError(f"the token has no {name!r} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenError(f"the token's {name!r} claim is not a number")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_CLAIM_SECONDS:
        raise TokenError(f"the token's {name!r} claim is not a number within range")
    return float(value)


def _scope(claims: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = claims.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TokenError(f"the token's {name!r} claim is neither a string nor a list of strings")


def _times(claims: Mapping[str, Any], now_ms: int, skew_ms: int) -> int:
    exp = _number(claims, "exp", True)
    assert exp is not None
    if exp * 1000 + skew_ms <= now_ms:
        raise TokenError("the token expired")
    nbf = _number(claims, "nbf", False)
    if nbf is not None and nbf * 1000 - skew_ms > now_ms:
        raise TokenError("the token is not valid yet (nbf)")
    iat = _number(claims, "iat", False)
    if iat is not None and iat * 1000 - skew_ms > now_ms:
        raise TokenError("the token was issued in the future (iat)")
    return int(exp * 1000)


def _principal(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if value is not None and not isinstance(value, str):
        raise TokenError(f"the token's principal claim {name!r} is not a string")
    if value is None or not value.strip():
        raise TokenError(f"the token has no principal claim {name!r}")
    return value


class UnsecuredValidator:
    """Kafka's unsecured validator (development only)."""

    def __init__(
        self,
        now_ms: Callable[[], int],
        principal_claim: str = "sub",
        scope_claim: str = "scope",
        required_scope: Sequence[str] = (),
        clock_skew_ms: int = 0,
    ) -> None:
        self.now_ms = now_ms
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.required_scope = tuple(required_scope)
        self.clock_skew_ms = clock_skew_ms

    def validate(self, token: str) -> ValidToken:
        parts = token.split(".")
        if len(parts) != 3 or parts[2] != "":
            raise TokenError("an unsecured token is header.payload. with an empty signature")
        header = _json_part(parts[0], "header")
        if header.get("alg") != "none":
            raise TokenError("an unsecured token has alg \"none\"")
        claims = _json_part(parts[1], "claims")
        expires = _times(claims, self.now_ms(), self.clock_skew_ms)
        scope = _scope(claims, self.scope_claim)
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise TokenError(f"the token's scope lacks {', '.join(missing)}")
        return ValidToken(_principal(claims, self.principal_claim), expires, scope)


# -- RS256 and friends -------------------------------------------------------------------------

_HASHES = {"RS256": ("sha256", "3031300d060960864801650304020105000420"),
           "RS384": ("sha384", "3041300d060960864801650304020205000430"),
           "RS512": ("sha512", "3051300d060960864801650304020305000440")}


def _rsa_pkcs1_verify(n: int, e: int, message: bytes, signature: bytes, alg: str) -> bool:
    hash_name, digest_info = _HASHES[alg]
    k = (n.bit_length() + 7) // 8
    if len(signature) != k:
        return False
    s = int.from_bytes(signature, "big")
    if s >= n:
        return False
    em = pow(s, e, n).to_bytes(k, "big")
    t = bytes.fromhex(digest_info) + hashlib.new(hash_name, message).digest()
    if k < len(t) + 11:
        return False
    expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return hmac.compare_digest(em, expected)


def parse_jwks(data: bytes | str) -> dict[str, tuple[int, int]]:
    """The RSA signing keys of a JSON Web Key Set: ``{kid: (modulus, exponent)}``."""
    try:
        doc = json.loads(data)
    except ValueError:
        raise TokenError("the JWKS is not JSON") from None
    keys: dict[str, tuple[int, int]] = {}
    for jwk in doc.get("keys", []) if isinstance(doc, dict) else []:
        if not isinstance(jwk, dict) or jwk.get("kty") != "RSA" or jwk.get("use", "sig") != "sig":
            continue
        try:
            n = int.from_bytes(_b64url(str(jwk["n"])), "big")
            e = int.from_bytes(_b64url(str(jwk["e"])), "big")
        except (KeyError, TokenError):
            continue
        keys[str(jwk.get("kid", ""))] = (n, e)
    return keys


class JwksValidator:
    """Signed JWTs against a JWKS's RSA keys (KIP-768)."""

    def __init__(
        self,
        keys: Mapping[str, tuple[int, int]],
        now_ms: Callable[[], int],
        *,
        audience: Sequence[str] = (),
        issuer: str | None = None,
        principal_claim: str = "sub",
        scope_claim: str = "scope",
        clock_skew_ms: int = 30000,
    ) -> None:
        self.keys = dict(keys)
        self.now_ms = now_ms
        self.audience = tuple(audience)
        self.issuer = issuer
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.clock_skew_ms = clock_skew_ms

    def validate(self, token: str) -> ValidToken:
        parts = token.split(".")
        if len(parts) != 3 or not parts[2]:
            raise TokenError("a signed token is header.payload.signature")
        header = _json_part(parts[0], "header")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in _HASHES:
            raise TokenError(f"signature algorithm {str(alg)[:32]!r} is not accepted (RS256, RS384, RS512)")
        kid = header.get("kid", "")
        if not isinstance(kid, str):
            raise TokenError("the token's key id (kid) is not a string")
        key = self.keys.get(kid) or (next(iter(self.keys.values())) if not kid and len(self.keys) == 1 else None)
        if key is None:
            raise TokenError(f"no key {kid!r} in the JWKS")
        if not _rsa_pkcs1_verify(key[0], key[1], f"{parts[0]}.{parts[1]}".encode(), _b64url(parts[2]), alg):
            raise TokenError("the token's signature is not valid")
        claims = _json_part(parts[1], "claims")
        expires = _times(claims, self.now_ms(), self.clock_skew_ms)
        if self.issuer is not None and claims.get("iss") != self.issuer:
            raise TokenError("the token's issuer is not the expected one")
        if self.audience:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(a in self.audience for a in auds):
                raise TokenError("the token's audience is not an expected one")
        return ValidToken(_principal(claims, self.principal_claim), expires, _scope(claims, self.scope_claim))


# -- the SASL mechanism ---------------------------------------------------------------------------


class OAuthBearerServer(SaslServer):
    """OAUTHBEARER: one client message with the token; ``validator.validate(token)`` decides."""

    mechanism = "OAUTHBEARER"

    def __init__(self, validator: UnsecuredValidator | JwksValidator) -> None:
        super().__init__()
        self._validator = validator
        self._error: str | None = None
        #: when the token expires (ms since the epoch), once authenticated
        self.expires_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self._error is not None:  # the client acknowledged our error challenge (RFC 7628)
            raise AuthenticationFailed(f"Authentication failed: {self._error}")
        if self.complete:
            raise AuthenticationFailed("Authentication failed: OAUTHBEARER takes one message")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: the OAUTHBEARER message is not UTF-8") from None
        fields = text.split("\x01")
        if len(fields) < 3 or fields[-1] != "" or fields[-2] != "" or not fields[0].startswith(("n,", "y,")):
            raise AuthenticationFailed("Authentication failed: invalid OAUTHBEARER client message")
        kv = dict(f.split("=", 1) for f in fields[1:-2] if "=" in f)
        auth = kv.get("auth", "")
        if not auth.startswith("Bearer "):
            raise AuthenticationFailed("Authentication failed: no bearer token in the OAUTHBEARER message")
        try:
            valid = self._validator.validate(auth[len("Bearer ") :].strip())
        except TokenError as exc:
            self._error = str(exc)
            return json.dumps({"status": "invalid_token"}).encode()
        gs2 = fields[0].split(",")
        authzid = gs2[1][2:] if len(gs2) > 1 and gs2[1].startswith("a=") else ""
        if authzid and authzid != valid.principal:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from the token's principal"
            )
        self.complete = True
        self.principal = KafkaPrincipal.user(valid.principal)
        self.expires_ms = valid.expires_ms
        return b""


def client_message(token: str, authzid: str = "") -> bytes:
    """The client's OAUTHBEARER message for ``token``."""
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def unsecured_token(principal: str, lifetime_s: float, now_ms: int, scope: Sequence[str] = ()) -> str:
    """An unsigned JWS for the unsecured validator (development only)."""

    def enc(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()

    claims: dict[str, Any] = {"sub": principal, "iat": now_ms / 1000, "exp": now_ms / 1000 + lifetime_s}
    if scope:
        claims["scope"] = " ".join(scope)
    return f"{enc({'alg': 'none'})}.{enc(claims)}."
