"""Who a connection is: the listener's security protocol, TLS client certificates and the SASL
exchange (SaslHandshake, then SaslAuthenticate) that must come before any other API.

A :class:`ListenerSecurity` is built once per listener from the configuration (its enabled
mechanisms, PLAIN users from its JAAS config, where SCRAM credentials come from, the principal
mapping of certificates); each connection gets a :class:`Session`:

* PLAINTEXT: ``User:ANONYMOUS``, authenticated at once;
* SSL: the client certificate's subject (mapped by ``ssl.principal.mapping.rules``), or
  ANONYMOUS without one;
* SASL_PLAINTEXT / SASL_SSL: nothing but ApiVersions, SaslHandshake and SaslAuthenticate until
  the mechanism (``odradek.security``) has established the user.  A failed authentication is
  answered SASL_AUTHENTICATION_FAILED with the mechanism's message and the connection closes
  ``connection.failed.authentication.delay.ms`` later; a handshake naming a mechanism the
  listener does not enable gets UNSUPPORTED_SASL_MECHANISM and the list, and the connection
  closes (Kafka's behaviour).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.broker.kerberos import GssapiServer, KerberosShortNamer, acceptor_credentials
from odradek.config import BrokerConfig, ConfigError, Listener
from odradek.errors import ErrorCode
from odradek.security import (
    ANONYMOUS,
    AuthenticationFailed,
    CertificateError,
    JwksValidator,
    KafkaPrincipal,
    OAuthBearerServer,
    PlainServer,
    SaslServer,
    ScramCredential,
    ScramServer,
    SslPrincipalMapper,
    TokenError,
    UnsecuredValidator,
    parse_jaas,
    parse_jwks,
    plain_verifier,
    subject_name,
)

__all__ = ["SUPPORTED_MECHANISMS", "ListenerSecurity", "SaslOutcome", "Session"]

log = logging.getLogger("odradek.authentication")

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
#: mechanisms whose failures tell the client why (Kafka's SaslAuthenticationException)
_EXPLAINED = frozenset({"PLAIN", "OAUTHBEARER"})
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

#: ``lookup(user, mechanism)``: the stored SCRAM credential, or None
ScramLookup = Callable[[str, str], "ScramCredential | None"]


class ListenerSecurity:
    """What one listener asks of its connections."""

    def __init__(self, config: BrokerConfig, listener: Listener, scram_lookup: ScramLookup) -> None:
        self.listener = listener.name
        self.protocol = listener.security_protocol
        self.tls = self.protocol in TLS_PROTOCOLS
        self.sasl = self.protocol in SASL_PROTOCOLS
        self.mapper = SslPrincipalMapper(str(config.for_listener(listener.name, "ssl.principal.mapping.rules")))
        self.failure_delay_s = int(config.for_listener(listener.name, "connection.failed.authentication.delay.ms")) / 1000
        self.reauth_ms = int(config.for_listener(listener.name, "connections.max.reauth.ms") or 0)
        self._scram_lookup = scram_lookup
        self.mechanisms: list[str] = []
        self._plain_users: dict[str, str] = {}
        if not self.sasl:
            return
        enabled = str(config.for_listener(listener.name, "sasl.enabled.mechanisms") or "")
        self.mechanisms = [m.strip().upper() for m in enabled.split(",") if m.strip()]
        unsupported = [m for m in self.mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not self.mechanisms:
            raise ConfigError(
                f"listener {listener}: sasl.enabled.mechanisms={enabled or '(none)'}: "
                f"{', '.join(unsupported) or 'no mechanism'} not supported here (supported: {', '.join(SUPPORTED_MECHANISMS)})"
            )
        self._plain_callback: Callable[[str, str], bool] | None = None
        if "PLAIN" in self.mechanisms:
            handler = config.for_listener(listener.name, "sasl.server.callback.handler.class", "PLAIN")
            jaas = config.for_listener(listener.name, "sasl.jaas.config", "PLAIN")
            if handler:
                self._plain_callback = _callback(str(handler), listener)
            elif not jaas:
                raise ConfigError(
                    f"listener {listener} enables PLAIN but has no users: set "
                    f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config to "
                    f'{_PLAIN_MODULE} required user_<name>="<password>" ...;'
                )
            try:
                module, options = parse_jaas(str(jaas)) if jaas else (_PLAIN_MODULE, {})
            except ValueError as exc:
                raise ConfigError(f"listener {listener}: {exc}") from None
            if module != _PLAIN_MODULE:
                raise ConfigError(f"listener {listener}: the PLAIN JAAS config names {module}, not {_PLAIN_MODULE}")
            self._plain_users = {k[len("user_") :]: v for k, v in options.items() if k.startswith("user_")}
        self._oauth: UnsecuredValidator | JwksValidator | None = None
        if "OAUTHBEARER" in self.mechanisms:
            self._oauth = _oauth_validator(config, listener)
        self._kerberos: tuple[Any, KerberosShortNamer] | None = None
        if "GSSAPI" in self.mechanisms:
            self._kerberos = _kerberos(config, listener)

    def session(self, peer_certificate: bytes | None) -> Session:
        """A new connection's session; ``peer_certificate`` is the client's DER certificate (TLS)."""
        principal = ANONYMOUS
        if peer_certificate is not None:
            try:
                principal = KafkaPrincipal.user(self.mapper.name(subject_name(peer_certificate)))
            except (CertificateError, ValueError) as exc:
                log.info("listener %s: the client certificate gives no principal (%s): ANONYMOUS", self.listener, exc)
        return Session(self, principal)

    def server(self, mechanism: str) -> SaslServer:
        if mechanism == "PLAIN":
            return PlainServer(self._plain_callback or plain_verifier(self._plain_users))
        if mechanism == "OAUTHBEARER":
            assert self._oauth is not None
            return OAuthBearerServer(self._oauth)
        if mechanism == "GSSAPI":
            assert self._kerberos is not None
            return GssapiServer(*self._kerberos)
        return ScramServer(mechanism, lambda user: self._scram_lookup(user, mechanism))


@dataclass(slots=True)
class SaslOutcome:
    """A SASL request's answer, and whether the connection closes after it (at once, or after
    the failed-authentication delay)."""

    error_code: int = 0
    message: str | None = None
    data: bytes = b""
    close: bool = False
    delay_close: bool = False
    #: the exchange completed with this answer (the session lifetime goes with it)
    completed: bool = False


class Session:
    """One connection's identity, and its SASL exchange while it (re-)authenticates.

    With ``connections.max.reauth.ms`` (KIP-368) an authenticated session lasts that long: the
    client re-authenticates on the same connection (SaslHandshake v1 and SaslAuthenticate again,
    same mechanism, same principal) before it ends, or the connection closes at its next
    request after the end."""

    def __init__(self, security: ListenerSecurity, principal: KafkaPrincipal) -> None:
        self.security = security
        #: the principal as ACLs name it ("User:alice"), kept with it (see ``principal``)
        self.principal_name = str(principal)
        self._principal = principal
        self.authenticated = not security.sasl
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        self._reauthenticating = False
        #: when the authenticated session ends (time.monotonic), None: never; and its length as
        #: told to the client (SaslAuthenticate's session_lifetime_ms)
        self.expires_at: float | None = None
        self.lifetime_ms = 0
        #: set when the connection must close after the response it is answering: in how many seconds
        self.close_after: float | None = None
        #: a SaslHandshake v0 succeeded: the tokens come without Kafka framing from now on (the
        #: connection takes this and clears it)
        self.raw_tokens = False


    @property
    def principal(self) -> KafkaPrincipal:
        return self._principal

    @principal.setter
    def principal(self, value: KafkaPrincipal) -> None:
        self._principal = value
        self.principal_name = str(value)
    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be handled now (before SASL authentication only
        ApiVersions 18, SaslHandshake 17 and SaslAuthenticate 36)."""
        return self.authenticated or api_key in (17, 18, 36)

    def expired(self, now: float) -> bool:
        """The authenticated session has ended and no re-authentication is under way."""
        return self.expires_at is not None and now >= self.expires_at and self._server is None

    def handshake(self, mechanism: str, version: int = 1) -> SaslOutcome:
        out = self._handshake(mechanism, version)
        if out.close:
            self.close_after = 0.0
        return out

    def authenticate(self, token: bytes, client: str) -> SaslOutcome:
        out = self._authenticate(token, client)
        if out.close:
            self.close_after = 0.0
        elif out.delay_close:
            self.close_after = self.security.failure_delay_s
        return out

    def _handshake(self, mechanism: str, version: int) -> SaslOutcome:
        sec = self.security
        if not sec.sasl:
            return SaslOutcome(ErrorCode.ILLEGAL_SASL_STATE, "SASL is not enabled on this listener")
        if self._server is not None:
            return SaslOutcome(ErrorCode.ILLEGAL_SASL_STATE, "unexpected SaslHandshake", close=True)
        if self.authenticated:
            # KIP-368 re-authentication: v1 only, and the mechanism cannot change
            if version < 1 or mechanism != self.mechanism:
                return SaslOutcome(
                    ErrorCode.ILLEGAL_SASL_STATE,
                    f"re-authentication must use SaslHandshake v1 and mechanism {self.mechanism}",
                    close=True,
                )
            self._reauthenticating = True
        elif mechanism not in sec.mechanisms:
            log.info("listener %s: a client asked for SASL mechanism %r (enabled: %s)", sec.listener, mechanism,
                     ", ".join(sec.mechanisms))
            return SaslOutcome(ErrorCode.UNSUPPORTED_SASL_MECHANISM, None, close=True)
        self.mechanism = mechanism
        self._server = sec.server(mechanism)
        return SaslOutcome()

    def _authenticate(self, token: bytes, client: str) -> SaslOutcome:
        server = self._server
        if server is None:
            state = "after successful authentication" if self.authenticated else "before SaslHandshake"
            return SaslOutcome(
                ErrorCode.ILLEGAL_SASL_STATE, f"SaslAuthenticate request received {state}", close=not self.authenticated
            )
        try:
            reply = server.evaluate(token)
        except AuthenticationFailed as exc:
            self._server = None
            phase = "re-authentication" if self._reauthenticating else "authentication"
            log.info("Failed %s with %s on listener %s (%s)", phase, client, self.security.listener, exc)
            # as Kafka: PLAIN and OAUTHBEARER say why; SCRAM and GSSAPI failures get one generic
            # message (the reason - an unknown user, say - stays in the broker's log)
            message = str(exc) if self.mechanism in _EXPLAINED else (
                f"Authentication failed during {phase} due to invalid credentials with SASL mechanism {self.mechanism}"
            )
            return SaslOutcome(ErrorCode.SASL_AUTHENTICATION_FAILED, message, delay_close=True)
        if server.complete:
            assert server.principal is not None
            self._server = None
            if self._reauthenticating and server.principal != self.principal:
                log.info("Failed re-authentication with %s on listener %s: %s cannot become %s", client,
                         self.security.listener, self.principal, server.principal)
                return SaslOutcome(
                    ErrorCode.SASL_AUTHENTICATION_FAILED,
                    "Cannot change principals during re-authentication", delay_close=True,
                )
            log.debug("%s %sauthenticated as %s with %s on listener %s", client,
                      "re-" if self._reauthenticating else "", server.principal, self.mechanism, self.security.listener)
            self.principal = server.principal
            self.authenticated = True
            self._reauthenticating = False
            lifetime = self.security.reauth_ms
            token_expires = getattr(server, "expires_ms", None)
            if lifetime > 0 and token_expires is not None:  # KIP-368: not beyond the token's life
                lifetime = max(0, min(lifetime, token_expires - int(time.time() * 1000)))
            self.lifetime_ms = lifetime
            self.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
            return SaslOutcome(data=reply, completed=True)
        return SaslOutcome(data=reply)


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _oauth_validator(config: BrokerConfig, listener: Listener) -> UnsecuredValidator | JwksValidator:
    """The listener's OAUTHBEARER validator: signed tokens against a JWKS when
    ``sasl.oauthbearer.jwks.endpoint.url`` is set (a file path, file: or http(s): URL, read at
    start), else Kafka's unsecured validator with the options of the mechanism's JAAS config."""
    def get(name: str) -> Any:
        return config.for_listener(listener.name, name, "OAUTHBEARER")

    url = get("sasl.oauthbearer.jwks.endpoint.url")
    if url:
        text = str(url)
        try:
            if text.startswith(("http://", "https://")):
                with urllib.request.urlopen(text, timeout=10) as resp:
                    data = resp.read()
            else:
                data = Path(text.removeprefix("file://").removeprefix("file:")).read_bytes()
            keys = parse_jwks(data)
        except (OSError, TokenError, ValueError) as exc:
            raise ConfigError(f"listener {listener}: sasl.oauthbearer.jwks.endpoint.url {text}: {exc}") from None
        if not keys:
            raise ConfigError(f"listener {listener}: the JWKS at {text} has no RSA signing key")
        audience = [a for a in str(get("sasl.oauthbearer.expected.audience") or "").split(",") if a]
        return JwksValidator(
            keys, _wall_ms, audience=audience, issuer=get("sasl.oauthbearer.expected.issuer"),
            principal_claim=str(get("sasl.oauthbearer.sub.claim.name") or "sub"),
            scope_claim=str(get("sasl.oauthbearer.scope.claim.name") or "scope"),
            clock_skew_ms=int(get("sasl.oauthbearer.clock.skew.seconds")) * 1000,
        )
    options: dict[str, str] = {}
    jaas = get("sasl.jaas.config")
    if jaas:
        try:
            _module, options = parse_jaas(str(jaas))
        except ValueError as exc:
            raise ConfigError(f"listener {listener}: {exc}") from None
    log.warning(
        "listener %s accepts unsecured OAUTHBEARER tokens (anyone can make one): for development only; "
        "set sasl.oauthbearer.jwks.endpoint.url to check signed tokens", listener,
    )
    return UnsecuredValidator(
        _wall_ms,
        principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "sub"),
        scope_claim=options.get("unsecuredValidatorScopeClaimName", "scope"),
        required_scope=options.get("unsecuredValidatorRequiredScope", "").replace(",", " ").split(),
        clock_skew_ms=int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0),
    )


def _default_realm() -> str:
    """``default_realm`` of the Kerberos configuration (KRB5_CONFIG, else /etc/krb5.conf)."""
    path = os.environ.get("KRB5_CONFIG", "/etc/krb5.conf").split(":")[0]
    try:
        text = Path(path).read_text()
    except OSError:
        return ""
    m = re.search(r"^\s*default_realm\s*=\s*(\S+)", text, re.M)
    return m.group(1) if m else ""


def _kerberos(config: BrokerConfig, listener: Listener) -> tuple[Any, KerberosShortNamer]:
    """The listener's GSSAPI acceptor: the service key named by its Krb5LoginModule JAAS entry."""
    service = config.for_listener(listener.name, "sasl.kerberos.service.name", "GSSAPI")
    if not service:
        raise ConfigError(f"listener {listener} enables GSSAPI: set sasl.kerberos.service.name (e.g. kafka)")
    jaas = config.for_listener(listener.name, "sasl.jaas.config", "GSSAPI")
    options: dict[str, str] = {}
    if jaas:
        try:
            _module, options = parse_jaas(str(jaas))
        except ValueError as exc:
            raise ConfigError(f"listener {listener}: {exc}") from None
    principal = options.get("principal")
    if principal and principal.split("/")[0].split("@")[0] != str(service):
        raise ConfigError(
            f"listener {listener}: the GSSAPI principal {principal} is not of the service {service} "
            "(sasl.kerberos.service.name)"
        )
    credentials = acceptor_credentials(options.get("keyTab"), principal)
    realm = _default_realm() or (principal.rpartition("@")[2] if principal and "@" in principal else "")
    rules = str(config.for_listener(listener.name, "sasl.kerberos.principal.to.local.rules", "GSSAPI") or "DEFAULT")
    return credentials, KerberosShortNamer(rules, realm)


def _callback(spec: str, listener: Listener) -> Callable[[str, str], bool]:
    """PLAIN's pluggable check (``sasl.server.callback.handler.class``): ``module:function``, a
    Python callable ``(username, password) -> bool`` importable by the broker.  (Kafka's Java
    class names cannot run here: they are refused with this advice.)"""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"listener {listener}: sasl.server.callback.handler.class={spec}: give a Python callable as "
            "module:function, taking (username, password) and returning whether they are right"
        )
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"listener {listener}: sasl.server.callback.handler.class={spec}: {exc}") from None
    if not callable(fn):
        raise ConfigError(f"listener {listener}: sasl.server.callback.handler.class={spec} is not callable")

    def verify(username: str, password: str) -> bool:
        try:
            return bool(fn(username, password))
        except Exception:  # a failing check refuses; the broker carries on
            log.exception("the PLAIN callback %s failed for user %s", spec, username)
            return False

    return verify
