"""Throwaway certificates for the TLS tests, made with the openssl command line.

:func:`make_pki` writes a test CA, a broker certificate for ``localhost`` / ``127.0.0.1``
(its key and chain in one PEM file: the broker's ``ssl.keystore.location``), client
certificates signed by the CA (``alice`` with a full subject, for mTLS principals) and one
signed by another CA (a client the broker must not trust).  EC keys: fast to make.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

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


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key(cwd: Path, name: str) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", name, cwd=cwd)


def _ca(cwd: Path, name: str, subject: str) -> None:
    _key(cwd, f"{name}.key")
    _openssl(
        "req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", subject,
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=cwd,
    )


def _signed(cwd: Path, name: str, subject: str, ca: str, extensions: str) -> None:
    _key(cwd, f"{name}.key")
    _openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd)
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
        cwd=cwd,
    )


def make_pki(directory: Path) -> Pki:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca", "/CN=Odradek Test CA")
    _ca(d, "other-ca", "/CN=Nobody's CA")
    _signed(d, "broker", "/CN=localhost", "ca",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    _signed(d, "alice", "/C=US/O=Example/OU=eng/CN=alice", "ca", "extendedKeyUsage=clientAuth\n")
    _signed(d, "stranger", "/CN=stranger", "other-ca", "extendedKeyUsage=clientAuth\n")
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
