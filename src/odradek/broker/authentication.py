"""Who a connection is: the listener's security protocol, TLS client certificates and the SASL
exchange (SaslHandshake, then SaslAuthenticate) that must come before any other API.

A :class:`ListenerSecurity` is built once per listener from the configuration (its enabled
mechanisms, PLAIN users from its JAAS config, where SCRAM credentials come from, the principal
mapping of certificates); each connection gets a :class:`Session`:

* PLAINTEXT: ``User:ANONYMOUS``, authenticated at once;
* SSL: the client certificate's subject (mapped by ``ssl.principal.mapping.rules``), or
  ANONYMOUS without one;
* SASL_PLAINTEXT / SASL_SSL: nothing but ApiVersions, SaslHandshake and SaslAuthenticate until
  the mechanism (``odradek.security``) has established the user, in frames of at most
  ``sasl.server.max.receive.size`` bytes.

A failed authentication (wrong credentials, a malformed token, a mechanism the listener does
not enable, a SASL request out of turn, a frame above the limit) is, as in Kafka, answered only
``connection.failed.authentication.delay.ms`` after it was evaluated: the connection is muted
meanwhile (nothing more is read from it, nothing it pipelined is evaluated), then the answer
(SASL_AUTHENTICATION_FAILED with the mechanism's message, UNSUPPORTED_SASL_MECHANISM with the
list, ILLEGAL_SASL_STATE) goes out and the connection closes (the same delay later: a client reading
the answer and the end of the stream together may lose the answer).  A client guessing passwords gets
one guess per connection and delay.  The "Failed authentication" lines are rate-limited per
listener (:class:`FailureLog`); the first failure of every client address is always logged.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek._scheduler import LoopScheduler, Scheduler
from odradek.broker.kerberos import GssapiServer, KerberosShortNamer, acceptor_credentials
from odradek.config import ConfigError, Listener
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
from odradek.settings import SaslSettings, Settings

__all__ = ["SUPPORTED_MECHANISMS", "FailureLog", "ListenerSecurity", "SaslOutcome", "Session"]

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

    def __init__(
        self, settings: Settings, listener: Listener, scram_lookup: ScramLookup, timers: Scheduler | None = None
    ) -> None:
        """``settings``: the broker's; this listener's view of them is read (its
        ``listener.name.<listener>[.<mechanism>].*`` settings over the broker's). ``timers``: the
        broker's scheduler (the failure log's windows, session lifetimes and token expiries are
        on its clock)."""
        self.listener = listener.name
        self.timers: Scheduler = timers or LoopScheduler()
        self.protocol = listener.security_protocol
        self.tls = self.protocol in TLS_PROTOCOLS
        self.sasl = self.protocol in SASL_PROTOCOLS
        mine = settings.for_listener(listener.name)
        self.mapper = SslPrincipalMapper(mine.ssl.principal_mapping_rules)
        self.failure_delay_s = max(0, mine.security.connection_failed_authentication_delay_ms) / 1000
        #: the largest frame accepted before authentication (SASL listeners)
        self.max_receive_size = mine.sasl.server_max_receive_size
        if self.max_receive_size < 0:
            raise ConfigError(f"listener {listener}: sasl.server.max.receive.size={self.max_receive_size} is negative")
        self.failures = FailureLog(listener.name, timers=self.timers)
        self.reauth_ms = mine.security.connections_max_reauth_ms
        self._scram_lookup = scram_lookup
        self.mechanisms: list[str] = []
        self._plain_users: dict[str, str] = {}
        if not self.sasl:
            return
        enabled = ",".join(mine.sasl.enabled_mechanisms)
        self.mechanisms = [m.upper() for m in mine.sasl.enabled_mechanisms]
        unsupported = [m for m in self.mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not self.mechanisms:
            raise ConfigError(
                f"listener {listener}: sasl.enabled.mechanisms={enabled or '(none)'}: "
                f"{', '.join(unsupported) or 'no mechanism'} not supported here (supported: {', '.join(SUPPORTED_MECHANISMS)})"
            )
        self._plain_callback: Callable[[str, str], bool] | None = None
        if "PLAIN" in self.mechanisms:
            plain = settings.for_listener(listener.name, "PLAIN").sasl
            handler, jaas = plain.server_callback_handler_class, plain.jaas_config
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
            self._oauth = _oauth_validator(
                settings.for_listener(listener.name, "OAUTHBEARER").sasl, listener, self.timers.clock.now_ms
            )
        self._kerberos: tuple[Any, KerberosShortNamer] | None = None
        if "GSSAPI" in self.mechanisms:
            self._kerberos = _kerberos(settings.for_listener(listener.name, "GSSAPI").sasl, listener)

    def check_plain(self, user: str, password: str) -> bool:
        """Whether ``user`` and ``password`` are a SASL/PLAIN user of this listener (False when it
        does not enable PLAIN): the schema registry's HTTP Basic authentication."""
        if "PLAIN" not in self.mechanisms:
            return False
        verify = self._plain_callback or plain_verifier(self._plain_users)
        return bool(verify(user, password))

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
    """A SASL request's answer, and whether it fails the authentication (then it is sent only
    after the failed-authentication delay, and the connection closes after it)."""

    error_code: int = 0
    message: str | None = None
    data: bytes = b""
    failed: bool = False
    #: the exchange completed with this answer (the session lifetime goes with it)
    completed: bool = False


#: "Failed authentication" lines per listener in one window (beyond: counted, reported at its end)
FAILURE_LINES_PER_WINDOW = 10
FAILURE_WINDOW_SECONDS = 10.0
#: client addresses whose first failure is remembered as logged (the oldest are forgotten)
FAILURE_HOSTS = 4096


class FailureLog:
    """The "Failed authentication" lines of one listener, rate-limited: at most ``lines`` in each
    ``window_s`` window, beyond which failures are counted and the count is reported in one line
    when the window ends ("N more failed authentications ... were not logged").  The first
    failure of a client address is always logged, whatever the rate (``max_hosts`` addresses
    remembered), so a new source of failures is never hidden behind a flood from another."""

    def __init__(
        self,
        listener: str,
        *,
        lines: int = FAILURE_LINES_PER_WINDOW,
        window_s: float = FAILURE_WINDOW_SECONDS,
        max_hosts: int = FAILURE_HOSTS,
        timers: Scheduler | None = None,
    ) -> None:
        self.listener = listener
        self.lines = lines
        self.window_s = window_s
        self.max_hosts = max_hosts
        self.timers: Scheduler = timers or LoopScheduler()
        self._hosts: OrderedDict[str, None] = OrderedDict()
        self._start = float("-inf")
        self._logged = 0
        self._suppressed = 0
        #: failures seen in all (logged or not): the metrics count them too
        self.total = 0

    def failed(self, client: str, phase: str, reason: str) -> None:
        """One failed ``phase`` ("authentication", "re-authentication") of ``client``."""
        self.total += 1
        now = self.timers.clock.monotonic_ms() / 1000.0
        if now >= self._start + self.window_s:
            self._report()
            self._start = now
            self._logged = 0
        hosts = self._hosts
        first = client not in hosts
        if first:
            hosts[client] = None
            if len(hosts) > self.max_hosts:
                hosts.popitem(last=False)
        else:
            hosts.move_to_end(client)
        if first or self._logged < self.lines:
            self._logged += 1
            log.info("Failed %s with %s on listener %s (%s)", phase, client, self.listener, reason)
            return
        self._suppressed += 1
        if self._suppressed == 1:  # report the count when the window ends, even if no failure follows
            try:
                self.timers.call_later((self._start + self.window_s - now) * 1000.0, self._expire, self._start)
            except RuntimeError:  # no event loop: reported with the next failure after the window
                return

    def _expire(self, start: float) -> None:
        if start == self._start:
            self._report()

    def _report(self) -> None:
        if self._suppressed:
            log.info(
                "%d more failed authentications on listener %s in the last %gs were not logged",
                self._suppressed, self.listener, self.window_s,
            )
            self._suppressed = 0


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
        #: when the authenticated session ends (ms of the monotonic clock), None: never; and its length as
        #: told to the client (SaslAuthenticate's session_lifetime_ms)
        self.expires_at: float | None = None
        self.lifetime_ms = 0
        #: set when the authentication failed: the answer being made is held back this many
        #: seconds (``connection.failed.authentication.delay.ms``), then the connection closes;
        #: the connection takes this and clears it
        self.close_after: float | None = None
        #: a SaslHandshake v0 succeeded: the tokens come without Kafka framing from now on (the
        #: connection takes this and clears it)
        self.raw_tokens = False
        #: the client software's name and version from ApiVersions v3+ (KIP-511; client-metrics
        #: subscriptions match on them)
        self.client_software = ("", "")
        #: the client's source port (what client-metrics subscriptions match client_source_port on)
        self.client_port = ""

    @property
    def principal(self) -> KafkaPrincipal:
        return self._principal

    @principal.setter
    def principal(self, value: KafkaPrincipal) -> None:
        self._principal = value
        self.principal_name = str(value)

    @property
    def max_receive_size(self) -> int | None:
        """The largest frame the connection may send now: ``sasl.server.max.receive.size``
        until it has authenticated on a SASL listener, else None (``socket.request.max.bytes``)."""
        return None if self.authenticated else self.security.max_receive_size

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be handled now (before SASL authentication only
        ApiVersions 18, SaslHandshake 17 and SaslAuthenticate 36)."""
        return self.authenticated or api_key in (17, 18, 36)

    def expired(self, now: float) -> bool:
        """The authenticated session has ended and no re-authentication is under way."""
        return self.expires_at is not None and now >= self.expires_at and self._server is None

    def handshake(self, mechanism: str, version: int = 1, client: str = "?") -> SaslOutcome:
        out = self._handshake(mechanism, version, client)
        if out.failed:
            self._fail()
        return out

    def authenticate(self, token: bytes, client: str) -> SaslOutcome:
        out = self._authenticate(token, client)
        if out.failed:
            self._fail()
        return out

    def invalid_receive(self, size: int, client: str) -> None:
        """The client sent a size prefix above ``sasl.server.max.receive.size`` before it
        authenticated: the authentication fails (Kafka's InvalidReceiveException); nothing is
        answered, the connection closes after the failed-authentication delay."""
        self.security.failures.failed(
            client, self._phase(),
            f"Failing SASL authentication due to invalid receive size: a frame of {size} bytes is larger "
            f"than sasl.server.max.receive.size={self.security.max_receive_size}",
        )
        self._fail()

    def _fail(self) -> None:
        self._server = None
        self.close_after = self.security.failure_delay_s

    def _phase(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    def _handshake(self, mechanism: str, version: int, client: str) -> SaslOutcome:
        sec = self.security
        if not sec.sasl:
            return SaslOutcome(ErrorCode.ILLEGAL_SASL_STATE, "SASL is not enabled on this listener")
        if self._server is not None:
            sec.failures.failed(client, self._phase(), "Unexpected SaslHandshake during the SASL exchange")
            return SaslOutcome(ErrorCode.ILLEGAL_SASL_STATE, "unexpected SaslHandshake", failed=True)
        if self.authenticated:
            # KIP-368 re-authentication: v1 only, and the mechanism cannot change
            if version < 1 or mechanism != self.mechanism:
                self._reauthenticating = True
                message = f"re-authentication must use SaslHandshake v1 and mechanism {self.mechanism}"
                sec.failures.failed(client, "re-authentication", message)
                return SaslOutcome(ErrorCode.ILLEGAL_SASL_STATE, message, failed=True)
            self._reauthenticating = True
        elif mechanism not in sec.mechanisms:
            sec.failures.failed(
                client, "authentication",
                f"Unsupported SASL mechanism {mechanism[:64]!r} (enabled: {', '.join(sec.mechanisms)})",
            )
            return SaslOutcome(ErrorCode.UNSUPPORTED_SASL_MECHANISM, None, failed=True)
        self.mechanism = mechanism
        self._server = sec.server(mechanism)
        return SaslOutcome()

    def _authenticate(self, token: bytes, client: str) -> SaslOutcome:
        server = self._server
        sec = self.security
        if server is None:
            if self.authenticated:
                return SaslOutcome(
                    ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication"
                )
            sec.failures.failed(client, "authentication", "SaslAuthenticate request received before SaslHandshake")
            return SaslOutcome(
                ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received before SaslHandshake", failed=True
            )
        phase = self._phase()
        try:
            reply = server.evaluate(token)
        except AuthenticationFailed as exc:
            sec.failures.failed(client, phase, str(exc))
            # as Kafka: PLAIN and OAUTHBEARER say why; SCRAM and GSSAPI failures get one generic
            # message (the reason - an unknown user, say - stays in the broker's log)
            message = str(exc) if self.mechanism in _EXPLAINED else self._generic(phase)
            return SaslOutcome(ErrorCode.SASL_AUTHENTICATION_FAILED, message, failed=True)
        except Exception:
            # a mechanism must refuse bad tokens with AuthenticationFailed: this is a bug, but the
            # client gets an authentication failure (not UNKNOWN_SERVER_ERROR) all the same
            log.exception("the %s mechanism failed on a token from %s on listener %s", self.mechanism, client,
                          sec.listener)
            sec.failures.failed(client, phase, "the mechanism could not evaluate the token")
            return SaslOutcome(ErrorCode.SASL_AUTHENTICATION_FAILED, self._generic(phase), failed=True)
        if server.complete:
            assert server.principal is not None
            self._server = None
            if self._reauthenticating and server.principal != self.principal:
                sec.failures.failed(client, phase, f"{self.principal} cannot become {server.principal}")
                return SaslOutcome(
                    ErrorCode.SASL_AUTHENTICATION_FAILED, "Cannot change principals during re-authentication", failed=True,
                )
            log.debug("%s %sauthenticated as %s with %s on listener %s", client,
                      "re-" if self._reauthenticating else "", server.principal, self.mechanism, sec.listener)
            self.principal = server.principal
            self.authenticated = True
            self._reauthenticating = False
            lifetime = sec.reauth_ms
            token_expires = getattr(server, "expires_ms", None)
            if lifetime > 0 and token_expires is not None:  # KIP-368: not beyond the token's life
                lifetime = max(0, min(lifetime, token_expires - sec.timers.clock.now_ms()))
            self.lifetime_ms = lifetime
            self.expires_at = sec.timers.clock.monotonic_ms() + lifetime if lifetime > 0 else None
            return SaslOutcome(data=reply, completed=True)
        return SaslOutcome(data=reply)

    def _generic(self, phase: str) -> str:
        return f"Authentication failed during {phase} due to invalid credentials with SASL mechanism {self.mechanism}"


def _oauth_validator(
    sasl: SaslSettings, listener: Listener, wall_ms: Callable[[], int]
) -> UnsecuredValidator | JwksValidator:
    """The listener's OAUTHBEARER validator (``sasl``: the listener's settings for the mechanism;
    ``wall_ms``: the broker's wall clock): signed tokens against a JWKS when
    ``sasl.oauthbearer.jwks.endpoint.url`` is set (a file path, file: or http(s): URL, read at
    start), else Kafka's unsecured validator with the options of the mechanism's JAAS config."""
    url = sasl.oauthbearer_jwks_endpoint_url
    if url:
        text = str(url)
        try:
            if text.startswith(("http://", "https://")):
                import urllib.request  # only here: with http.client and email, 5 ms of every start-up

                with urllib.request.urlopen(text, timeout=10) as resp:
                    data = resp.read()
            else:
                data = Path(text.removeprefix("file://").removeprefix("file:")).read_bytes()
            keys = parse_jwks(data)
        except (OSError, TokenError, ValueError) as exc:
            raise ConfigError(f"listener {listener}: sasl.oauthbearer.jwks.endpoint.url {text}: {exc}") from None
        if not keys:
            raise ConfigError(f"listener {listener}: the JWKS at {text} has no RSA signing key")
        return JwksValidator(
            keys, wall_ms, audience=list(sasl.oauthbearer_expected_audience), issuer=sasl.oauthbearer_expected_issuer,
            principal_claim=sasl.oauthbearer_sub_claim_name or "sub",
            scope_claim=sasl.oauthbearer_scope_claim_name or "scope",
            clock_skew_ms=sasl.oauthbearer_clock_skew_seconds * 1000,
        )
    options: dict[str, str] = {}
    jaas = sasl.jaas_config
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
        wall_ms,
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


def _kerberos(sasl: SaslSettings, listener: Listener) -> tuple[Any, KerberosShortNamer]:
    """The listener's GSSAPI acceptor (``sasl``: the listener's settings for the mechanism): the
    service key named by its Krb5LoginModule JAAS entry."""
    service = sasl.kerberos_service_name
    if not service:
        raise ConfigError(f"listener {listener} enables GSSAPI: set sasl.kerberos.service.name (e.g. kafka)")
    jaas = sasl.jaas_config
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
    rules = ",".join(sasl.kerberos_principal_to_local_rules) or "DEFAULT"
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
