"""The client's side of TLS and SASL: what ``security.protocol``, ``ssl.*`` and ``sasl.*`` ask
of every connection a client opens (a :class:`~odradek.transport.Security` for the transport).

Kafka's Java names (``ssl.truststore.location``, ``ssl.keystore.location`` with a PEM key and
chain, ``ssl.key.password``, ``sasl.jaas.config``) and librdkafka's (``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``sasl.username``, ``sasl.password``)
both work, so configs written for either client carry over.  The broker's certificate is
checked against the truststore (the system's CAs when none is given) and, with
``ssl.endpoint.identification.algorithm=https`` (the default), against the host name.
Mechanisms: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (:mod:`odradek.security`).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.client._config import ClientConfigError
from odradek.security import OAuthBearerClient, PlainClient, ScramClient, parse_jaas, sasl_exchange
from odradek.security.oauthbearer import unsecured_token

__all__ = ["ClientSecurity", "sasl_exchange"]

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class ClientSecurity:
    """TLS context and SASL credentials for a client's connections (None: PLAINTEXT)."""

    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    check_hostname: bool = True
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    token: Callable[[], str] | None = None  # OAUTHBEARER

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ClientSecurity:
        """The security of a client config: ``security.protocol``, the ``ssl.*`` settings (a TLS context, host
        names checked unless ``ssl.endpoint.identification.algorithm`` is empty) and ``sasl.mechanism``
        with its credentials (``sasl.username`` / ``sasl.password`` or ``sasl.jaas.config``);
        ClientConfigError for an invalid one."""
        protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in _PROTOCOLS:
            raise ClientConfigError(f"invalid security.protocol {protocol!r} (one of {', '.join(_PROTOCOLS)})")
        tls = _context(config) if protocol in ("SSL", "SASL_SSL") else None
        # a config given without the client defaults gets Kafka's: host names checked
        check = str(config.get("ssl.endpoint.identification.algorithm", "https") or "").lower() == "https"
        if tls is not None:
            tls.check_hostname = check
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return cls(protocol, tls, check)
        mechanism = str(config.get("sasl.mechanism") or "GSSAPI").upper()
        if mechanism not in _MECHANISMS:
            raise ClientConfigError(
                f"sasl.mechanism {mechanism} is not supported by this client (supported: {', '.join(_MECHANISMS)})"
            )
        if mechanism == "OAUTHBEARER":
            return cls(protocol, tls, check, mechanism, token=_token_source(config))
        username, password = config.get("sasl.username"), config.get("sasl.password")
        jaas = config.get("sasl.jaas.config")
        if jaas:
            try:
                _module, options = parse_jaas(str(jaas))
            except ValueError as exc:
                raise ClientConfigError(str(exc)) from None
            username = options.get("username", username)
            password = options.get("password", password)
        if not username or password is None:
            raise ClientConfigError(
                f"{protocol} with {mechanism} needs a user: sasl.jaas.config with username and password "
                "(or sasl.username and sasl.password)"
            )
        return cls(protocol, tls, check, mechanism, str(username), str(password))

    def sasl_client(self) -> PlainClient | ScramClient | OAuthBearerClient | None:
        """A fresh mechanism for one connection's authentication (None without SASL)."""
        if self.mechanism is None:
            return None
        if self.mechanism == "OAUTHBEARER":
            assert self.token is not None
            return OAuthBearerClient(self.token)
        if self.mechanism == "PLAIN":
            return PlainClient(self.username, self.password)
        return ScramClient(self.mechanism, self.username, self.password)


def _token_source(config: Mapping[str, Any]) -> Callable[[], str]:
    """Where OAUTHBEARER tokens come from: ``oauth_cb`` or an unsecured ``sasl.oauthbearer.config``."""
    callback = config.get("oauth_cb")
    if callback is not None:
        if not callable(callback):
            raise ClientConfigError("oauth_cb must be a callable returning a token")

        def from_callback() -> str:
            got = callback(config.get("sasl.oauthbearer.config"))
            return str(got[0] if isinstance(got, tuple) else got)

        return from_callback
    text = config.get("sasl.oauthbearer.config")
    if not text:
        raise ClientConfigError("OAUTHBEARER needs oauth_cb (a token source) or sasl.oauthbearer.config principal=NAME")
    opts = dict(item.split("=", 1) for item in str(text).split() if "=" in item)
    principal = opts.get("principal")
    if not principal:
        raise ClientConfigError("sasl.oauthbearer.config must name principal=NAME for an unsecured token")
    scope = opts.get("scope", "").split(",") if opts.get("scope") else []
    life = float(opts.get("lifeSeconds", "3600"))
    return lambda: unsecured_token(principal, life, int(time.time() * 1000), scope)


def _context(config: Mapping[str, Any]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    enabled = config.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")
    protocols = [p.strip() for p in str(enabled or "").split(",") if p.strip()]
    versions = sorted(_VERSIONS[p] for p in protocols if p in _VERSIONS)
    if not versions:
        raise ClientConfigError(f"ssl.enabled.protocols {protocols}: none of TLSv1.2, TLSv1.3")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    cafile = config.get("ssl.truststore.location") or config.get("ssl.ca.location")
    cadata = config.get("ssl.truststore.certificates")
    try:
        if cafile or cadata:
            ctx.load_verify_locations(cafile=str(cafile) if cafile else None, cadata=cadata)
        else:
            ctx.load_default_certs()
        key_password = config.get("ssl.key.password")
        keystore = config.get("ssl.keystore.location")
        cert, key = config.get("ssl.certificate.location"), config.get("ssl.key.location")
        if keystore:
            ctx.load_cert_chain(str(keystore), password=key_password)
        elif cert:
            ctx.load_cert_chain(str(cert), str(key) if key else None, password=key_password)
        elif config.get("ssl.keystore.certificate.chain") or config.get("ssl.keystore.key"):
            raise ClientConfigError("inline PEM keystores (ssl.keystore.key) are not supported by this client yet")
    except (OSError, ssl.SSLError) as exc:
        raise ClientConfigError(f"cannot load the TLS files: {exc}") from None
    return ctx
