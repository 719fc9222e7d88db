"""Throwaway certificates for the TLS tests, made with the openssl command line
(through ``odradek certs``' helpers).

:func:`make_pki` writes a test CA, a broker certificate for ``localhost`` / ``127.0.0.1``
(its key and chain in one PEM file: the broker's ``ssl.keystore.location``), client
certificates signed by the CA (``alice`` with a full subject, for mTLS principals) and one
signed by another CA (a client the broker must not trust).  EC keys: fast to make.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from odradek.cli.certs import make_ca, make_signed

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    ca: Path  #: the CA certificate (the clients' and the broker's truststore)
    broker_keystore: Path  #: the broker's key and certificate chain
    broker_key: Path
    broker_cert: Path
    client_key: Path  #: alice: /C=US/O=Example/OU=eng/CN=alice
    client_cert: Path
    stranger_key: Path  #: signed by a CA nobody trusts
    stranger_cert: Path

    ALICE = "CN=alice,OU=eng,O=Example,C=US"


def make_pki(directory: Path) -> Pki:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    make_ca(d, "ca", "/CN=Odradek Test CA")
    make_ca(d, "other-ca", "/CN=Nobody's CA")
    make_signed(d, "broker", "/CN=localhost", "ca",
                "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    make_signed(d, "alice", "/C=US/O=Example/OU=eng/CN=alice", "ca", "extendedKeyUsage=clientAuth\n")
    make_signed(d, "stranger", "/CN=stranger", "other-ca", "extendedKeyUsage=clientAuth\n")
    keystore = d / "broker-keystore.pem"
    keystore.write_text((d / "broker.key").read_text() + (d / "broker.pem").read_text())
    return Pki(
        ca=d / "ca.pem",
        broker_keystore=keystore,
        broker_key=d / "broker.key",
        broker_cert=d / "broker.pem",
        client_key=d / "alice.key",
        client_cert=d / "alice.pem",
        stranger_key=d / "stranger.key",
        stranger_cert=d / "stranger.pem",
    )
