"""TLS for SSL and SASL_SSL listeners: an ``ssl.SSLContext`` from Kafka's ``ssl.*`` configs.

Every setting is read as the listener sees it (``listener.name.<l>.ssl.keystore.location``
before ``ssl.keystore.location``).  Keystores: PEM (a file holding the private key and the
certificate chain, or both given inline with ``ssl.keystore.key`` /
``ssl.keystore.certificate.chain``; an encrypted key takes ``ssl.key.password``); PKCS12 when
the ``cryptography`` package is installed.  Java's JKS cannot be read here: the error says how
to convert it.  Truststores: PEM files or ``ssl.truststore.certificates``.
``ssl.client.auth``: ``none``, ``requested`` (a certificate is asked for and checked when
sent) or ``required`` (mTLS).  ``ssl.enabled.protocols`` bounds the TLS versions;
``ssl.cipher.suites`` takes Kafka's (IANA) names or OpenSSL's.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from odradek.config import ConfigError
from odradek.settings import Settings

__all__ = ["client_context", "server_context"]

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}

# Kafka (Java) names TLS 1.2 cipher suites as IANA does; OpenSSL has its own names
_IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
}
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}


def _is_pem(path: Path) -> bool:
    with path.open("rb") as f:
        return b"-----BEGIN" in f.read(4096)


@contextlib.contextmanager
def _pem_files(*texts: str) -> Iterator[list[str]]:
    """Inline PEM text in private temporary files (``ssl`` loads keys from files only),
    removed at once."""
    with tempfile.TemporaryDirectory(prefix="odradek-tls-") as d:
        paths = []
        for i, text in enumerate(texts):
            p = os.path.join(d, f"{i}.pem")
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            paths.append(p)
        yield paths


def _pkcs12_to_pem(path: Path, password: str | None, what: str) -> tuple[str, str | None]:
    """``(certificates PEM, key PEM or None)`` of a PKCS12 file, through ``cryptography``."""
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise ConfigError(
            f"{what} {path} is PKCS12, which needs the cryptography package (pip install cryptography), "
            f"or convert it to PEM: openssl pkcs12 -in {path} -out {path.with_suffix('.pem')} -nodes"
        ) from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            path.read_bytes(), password.encode() if password else None
        )
    except ValueError as exc:
        raise ConfigError(f"{what} {path}: cannot read it as PKCS12 ({exc}); is the password right?") from None
    certs = "".join(c.public_bytes(Encoding.PEM).decode() for c in ([cert] if cert else []) + list(extra or []))
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode() if key else None
    return certs, key_pem


def _store_type(declared: Any, path: Path, what: str) -> str:
    kind = str(declared).upper() if declared else ("PEM" if _is_pem(path) else "PKCS12")
    if kind == "JKS":
        raise ConfigError(
            f"{what} {path} is a Java KeyStore (JKS), which only Java reads; convert it: keytool "
            f"-importkeystore -srckeystore {path} -destkeystore {path.with_suffix('.p12')} -deststoretype PKCS12, "
            "then openssl pkcs12 -nodes to PEM"
        )
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"{what} type {declared} is not supported (PEM or PKCS12)")
    return kind


def server_context(settings: Settings, listener: str) -> ssl.SSLContext:
    """The TLS context of ``listener`` (raises ConfigError naming the setting at fault)."""
    tls = settings.for_listener(listener).ssl
    where = f"listener {listener}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    protocols = list(tls.enabled_protocols)
    unknown = [p for p in protocols if p not in _VERSIONS]
    if unknown or not protocols:
        raise ConfigError(f"{where}: ssl.enabled.protocols {protocols} (valid: {', '.join(_VERSIONS)})")
    versions = sorted(_VERSIONS[p] for p in protocols)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    # keystore
    key_password = tls.key_password
    chain, inline_key = tls.keystore_certificate_chain, tls.keystore_key
    location = tls.keystore_location
    try:
        if chain and inline_key:
            with _pem_files(chain, inline_key) as (cert_file, key_file):
                ctx.load_cert_chain(cert_file, key_file, password=key_password)
        elif location:
            path = Path(location)
            if not path.is_file():
                raise ConfigError(f"{where}: ssl.keystore.location {path} is not a file")
            if _store_type(tls.keystore_type, path, "ssl.keystore.location") == "PEM":
                ctx.load_cert_chain(str(path), password=key_password or tls.keystore_password)
            else:
                certs, key = _pkcs12_to_pem(path, tls.keystore_password, "ssl.keystore.location")
                if key is None:
                    raise ConfigError(f"{where}: ssl.keystore.location {path} holds no private key")
                with _pem_files(certs, key) as (cert_file, key_file):
                    ctx.load_cert_chain(cert_file, key_file)
        else:
            raise ConfigError(
                f"{where} needs a keystore: ssl.keystore.location (PEM: private key and certificate chain) "
                "or ssl.keystore.certificate.chain with ssl.keystore.key"
            )
    except ssl.SSLError as exc:
        raise ConfigError(f"{where}: cannot load the keystore: {exc.reason or exc} (wrong ssl.key.password?)") from None
    # truststore: whom client certificates may come from
    certificates, trust = tls.truststore_certificates, tls.truststore_location
    try:
        if certificates:
            ctx.load_verify_locations(cadata=certificates)
        if trust:
            tpath = Path(trust)
            if not tpath.is_file():
                raise ConfigError(f"{where}: ssl.truststore.location {tpath} is not a file")
            if _store_type(tls.truststore_type, tpath, "ssl.truststore.location") == "PEM":
                ctx.load_verify_locations(cafile=str(tpath))
            else:
                ctx.load_verify_locations(cadata=_pkcs12_to_pem(tpath, tls.truststore_password, "ssl.truststore")[0])
    except ssl.SSLError as exc:
        raise ConfigError(f"{where}: cannot load the truststore: {exc.reason or exc}") from None
    auth = tls.client_auth.lower()
    ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL}.get(auth, ssl.CERT_NONE)
    if ctx.verify_mode != ssl.CERT_NONE and not (certificates or trust):
        raise ConfigError(f"{where}: ssl.client.auth={auth} needs ssl.truststore.location to check client certificates")
    suites = list(tls.cipher_suites)
    tls12 = [_IANA_TO_OPENSSL.get(s, s) for s in suites if s not in _TLS13_SUITES]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(f"{where}: ssl.cipher.suites {suites}: none of them is known to OpenSSL") from None
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ctx


def client_context(settings: Settings, listener: str) -> ssl.SSLContext:
    """The TLS context of this broker's connections to other brokers' ``listener``: it trusts
    the listener's truststore (the system's CAs without one), checks host names when
    ``ssl.endpoint.identification.algorithm=https``, and presents the broker's own keystore
    (for listeners that ask for client certificates)."""
    tls = settings.for_listener(listener).ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    protocols = sorted(_VERSIONS[p] for p in tls.enabled_protocols if p in _VERSIONS)
    if protocols:
        ctx.minimum_version, ctx.maximum_version = protocols[0], protocols[-1]
    trust, certificates = tls.truststore_location, tls.truststore_certificates
    try:
        if certificates:
            ctx.load_verify_locations(cadata=certificates)
        if trust:
            if _store_type(tls.truststore_type, Path(trust), "ssl.truststore.location") == "PEM":
                ctx.load_verify_locations(cafile=str(trust))
            else:
                ctx.load_verify_locations(cadata=_pkcs12_to_pem(Path(trust), tls.truststore_password, "ssl.truststore")[0])
        if not (trust or certificates):
            ctx.load_default_certs()
        location = tls.keystore_location
        if location and _store_type(tls.keystore_type, Path(location), "ssl.keystore.location") == "PEM":
            ctx.load_cert_chain(str(location), password=tls.key_password or tls.keystore_password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"inter-broker listener {listener}: cannot load the TLS files: {exc}") from None
    ctx.check_hostname = tls.endpoint_identification_algorithm.lower() == "https"
    return ctx
