"""SASL mechanisms as state machines: bytes in, bytes out, no I/O.

A server mechanism takes the client's tokens one at a time (:meth:`SaslServer.evaluate`) and
returns the token to send back; when :attr:`~SaslServer.complete` it has established
:attr:`~SaslServer.principal`.  A wrong password, an unknown user or a malformed token raises
:class:`AuthenticationFailed` with the message the client is told (Kafka's wording: the broker
never says whether the user exists).  Client mechanisms (:class:`PlainClient`,
:class:`ScramClient`) are the other side, used by Odradek's client and the brokers' own
connections.

* PLAIN (RFC 4616): ``authzid NUL authcid NUL password``; the password is checked by a callback
  (the listener's JAAS ``user_<name>="<password>"`` entries by default, see :func:`parse_jaas`).
* SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / 7677), against salted credentials
  (:class:`ScramCredential`, stored as Kafka stores them:
  ``salt=...,stored_key=...,server_key=...,iterations=4096``); no channel binding, as Kafka.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from odradek.errors import OdradekError

from .principal import KafkaPrincipal

__all__ = [
    "SCRAM_MECHANISMS",
    "AuthenticationFailed",
    "OAuthBearerClient",
    "PlainClient",
    "PlainServer",
    "SaslServer",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "parse_jaas",
    "plain_verifier",
]

#: mechanism -> (hashlib name, minimum iterations Kafka accepts)
SCRAM_MECHANISMS: dict[str, tuple[str, int]] = {"SCRAM-SHA-256": ("sha256", 4096), "SCRAM-SHA-512": ("sha512", 4096)}
MAX_SCRAM_ITERATIONS = 16384  # Kafka's upper bound for stored credentials
#: the most iterations a client computes for a server (Kafka stores at most 16384)
MAX_CLIENT_ITERATIONS = 1_000_000


class AuthenticationFailed(OdradekError):
    """Authentication did not succeed; ``str(exc)`` is what the client is told."""


class SaslServer:
    """One authentication exchange on the broker's side."""

    mechanism = ""

    def __init__(self) -> None:
        self.complete = False
        self.principal: KafkaPrincipal | None = None

    def evaluate(self, token: bytes) -> bytes:
        raise NotImplementedError


class PlainServer(SaslServer):
    """PLAIN: ``verify(username, password)`` decides."""

    mechanism = "PLAIN"

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        super().__init__()
        self._verify = verify

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("Authentication failed: PLAIN takes one message")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if not self._verify(username, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.complete = True
        self.principal = KafkaPrincipal.user(username)
        return b""


def plain_verifier(users: Mapping[str, str]) -> Callable[[str, str], bool]:
    """A PLAIN callback over ``{user: password}`` (the JAAS ``user_<name>`` entries)."""

    def verify(username: str, password: str) -> bool:
        expected = users.get(username)
        # compare even for an unknown user: the time taken says nothing about who exists
        ok = hmac.compare_digest((expected or "\x00" + password).encode(), password.encode())
        return expected is not None and ok

    return verify


class PlainClient:
    """The client's side of PLAIN."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self.username, self.password = username, password
        self.complete = False

    def first(self) -> bytes:
        return b"\x00" + self.username.encode() + b"\x00" + self.password.encode()

    def evaluate(self, token: bytes) -> bytes | None:
        self.complete = True
        return None


class OAuthBearerClient:
    """The client's side of OAUTHBEARER: ``token()`` gives the bearer token (a callback, so a
    token is fetched fresh for every connection and re-authentication)."""

    mechanism = "OAUTHBEARER"

    def __init__(self, token: Callable[[], str]) -> None:
        self._token = token
        self.complete = False

    def first(self) -> bytes:
        return f"n,,\x01auth=Bearer {self._token()}\x01\x01".encode()

    def evaluate(self, token: bytes) -> bytes | None:
        if token:  # an error challenge (RFC 7628): acknowledge it; the server then fails
            return b"\x01"
        self.complete = True
        return None


# -- SCRAM ----------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise AuthenticationFailed("Authentication failed: invalid base64 in a SCRAM message") from None


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a SCRAM password (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = 4096, salt: bytes | None = None
    ) -> ScramCredential:
        hash_name = SCRAM_MECHANISMS[mechanism][0]
        salt = secrets.token_bytes(32) if salt is None else salt
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)

    @classmethod
    def from_salted_password(cls, mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
        """From the salted password (AlterUserScramCredentials sends it, not the password)."""
        hash_name = SCRAM_MECHANISMS[mechanism][0]
        client_key = _hmac(hash_name, salted, b"Client Key")
        return cls(
            salt, hashlib.new(hash_name, client_key).digest(), _hmac(hash_name, salted, b"Server Key"), iterations
        )

    def to_text(self) -> str:
        """Kafka's stored form (``/config/users/<user>`` in ZooKeeper)."""
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
            f"server_key={_b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


_SASLNAME = re.compile(r"=(?!2C|3D)")


def _saslname(text: str) -> str:
    if _SASLNAME.search(text):
        raise AuthenticationFailed("Authentication failed: invalid username encoding")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=":
            raise AuthenticationFailed(f"Authentication failed: invalid SCRAM message {message!r}")
        out.setdefault(item[0], item[2:])
    return out


class ScramServer(SaslServer):
    """SCRAM-SHA-256 / -512 against ``lookup(username) -> ScramCredential | None``."""

    def __init__(
        self, mechanism: str, lookup: Callable[[str], ScramCredential | None], server_nonce: str | None = None
    ) -> None:
        super().__init__()
        self._server_nonce = server_nonce  # tests give one (RFC 7677's example); else random
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism}")
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism][0]
        self._lookup = lookup
        self._state = "first"
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._username = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: a SCRAM message is not UTF-8") from None
        if self._state == "first":
            return self._first(message)
        if self._state == "final":
            return self._final(message)
        raise AuthenticationFailed("Authentication failed: the SCRAM exchange is over")

    def _first(self, message: str) -> bytes:
        # gs2-header: "n,," (or "y,,"; "p=" asks for channel binding, which Kafka does not do)
        m = re.match(r"([ny]),(a=[^,]*)?,(.*)", message, re.S)
        if m is None:
            if message.startswith("p="):
                raise AuthenticationFailed("Authentication failed: channel binding is not supported")
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-first message")
        self._gs2 = message[: len(message) - len(m.group(3))]
        bare = m.group(3)
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-first message")
        if "m" in attrs:
            raise AuthenticationFailed("Authentication failed: unsupported SCRAM extension")
        self._username = _saslname(attrs["n"])
        authzid = m.group(2)[2:] if m.group(2) else ""
        if authzid and _saslname(authzid) != self._username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credential = self._lookup(self._username)
        if credential is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        if credential.iterations < SCRAM_MECHANISMS[self.mechanism][1]:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs["r"] + (self._server_nonce or secrets.token_urlsafe(24))
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        self._state = "done"
        proof_at = message.rfind(",p=")
        if proof_at < 0:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-final message")
        without_proof = message[:proof_at]
        attrs = _attributes(without_proof)
        proof = _unb64(message[proof_at + 3 :])
        # Kafka checks that the client's nonce ends with the server's (librdkafka up to 2.x
        # sends the client nonce twice: its own, then the combined one)
        if not attrs.get("r", "").endswith(self._nonce):
            raise AuthenticationFailed("Authentication failed: Invalid client nonce in the final client message.")
        if _unb64(attrs.get("c", "")) != self._gs2.encode():
            raise AuthenticationFailed("Authentication failed: Invalid channel binding in the final client message.")
        cred = self._credential
        assert cred is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._hash, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self.complete = True
        self.principal = KafkaPrincipal.user(self._username)
        server_signature = _hmac(self._hash, cred.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()


class ScramClient:
    """The client's side of SCRAM-SHA-256 / -512."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism}")
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism][0]
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._client_first_bare = f"n={name},r={self._nonce}"
        self._server_signature = b""
        self._state = "first"
        self.complete = False

    def first(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def evaluate(self, token: bytes) -> bytes | None:
        """The next message for the server's ``token``; None when the exchange is complete."""
        message = token.decode("utf-8", "replace")
        if self._state == "first":
            attrs = _attributes(message)
            nonce, salt, count = attrs.get("r", ""), _unb64(attrs.get("s", "")), attrs.get("i", "")
            if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
                raise AuthenticationFailed("the server's SCRAM nonce does not extend ours")
            if not count.isdigit() or len(count) > 9:
                raise AuthenticationFailed(f"the server's SCRAM iteration count {count[:20]!r} is not a number")
            iterations = int(count)
            if iterations < SCRAM_MECHANISMS[self.mechanism][1]:
                raise AuthenticationFailed(f"the server asks for {iterations} SCRAM iterations, fewer than allowed")
            if iterations > MAX_CLIENT_ITERATIONS:
                # a hostile or broken server could make the client hash for minutes
                raise AuthenticationFailed(
                    f"the server asks for {iterations} SCRAM iterations, more than {MAX_CLIENT_ITERATIONS}"
                )
            salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode("utf-8"), salt, iterations)
            client_key = _hmac(self._hash, salted, b"Client Key")
            stored_key = hashlib.new(self._hash, client_key).digest()
            without_proof = f"c=biws,r={nonce}"
            auth_message = f"{self._client_first_bare},{message},{without_proof}".encode()
            signature = _hmac(self._hash, stored_key, auth_message)
            proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
            self._server_signature = _hmac(self._hash, _hmac(self._hash, salted, b"Server Key"), auth_message)
            self._state = "final"
            return f"{without_proof},p={_b64(proof)}".encode()
        if self._state == "final":
            attrs = _attributes(message)
            if "e" in attrs:
                raise AuthenticationFailed(f"the server refused: {attrs['e']}")
            if _unb64(attrs.get("v", "")) != self._server_signature:
                raise AuthenticationFailed("the server's SCRAM signature is wrong (not the server we know)")
            self._state = "done"
            self.complete = True
            return None
        raise AuthenticationFailed("the SCRAM exchange is over")


# -- JAAS ---------------------------------------------------------------------------------------

_JAAS = re.compile(r'\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;\s*$', re.S)
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s";]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``(login module class, options)`` of a ``sasl.jaas.config`` value, e.g.
    ``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
    password="admin-secret" user_alice="alice-secret";``."""
    m = _JAAS.match(text or "")
    if m is None:
        raise ValueError("sasl.jaas.config is not '<LoginModule> required key=\"value\" ... ;'")
    module, rest = m.group(1), m.group(3)
    options: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        if rest[pos:].strip() == "":
            break
        o = _OPTION.match(rest, pos)
        if o is None:
            raise ValueError(f"sasl.jaas.config: cannot read an option at {rest[pos:pos + 20]!r}")
        value = o.group(2) if o.group(2) is not None else o.group(3)
        options[o.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = o.end()
    return module, options
