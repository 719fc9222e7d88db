"""``odradek certs dev DIR``: a throwaway certificate authority and certificates for trying TLS
on one machine (made with the ``openssl`` command line), and the settings that use them.

::

    odradek certs dev ./tls                  # CA, broker keystore for localhost/127.0.0.1, client alice
    odradek certs dev ./tls --host kafka.example.test --client alice --client bob

Writes ``ca.pem`` (the truststore for clients and brokers), ``broker-keystore.pem`` (the broker's
key and certificate chain: ``ssl.keystore.location``), and for each client ``<name>.pem`` and
``<name>.key`` (mTLS: their principal is ``User:CN=<name>``), then prints a ``server.properties``
fragment and client settings.  For development only: the keys are not encrypted and the CA's
key stays in DIR.
"""

from __future__ import annotations

import argparse
import ipaddress
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "make_ca", "make_signed", "run"]


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed (apt-get install openssl)")
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {r.stderr.strip()}")


def _key(cwd: Path, name: str) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", name, cwd=cwd)
    (cwd / name).chmod(0o600)


def make_ca(directory: Path, name: str, subject: str) -> Path:
    """A self-signed CA: ``<name>.key`` and ``<name>.pem`` in ``directory``."""
    _key(directory, f"{name}.key")
    _openssl(
        "req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.pem", "-days", "30", "-subj", subject,
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )
    return directory / f"{name}.pem"


def make_signed(directory: Path, name: str, subject: str, ca: str, extensions: str) -> tuple[Path, Path]:
    """A key and a certificate signed by the CA ``ca`` (made by :func:`make_ca` in ``directory``)."""
    _key(directory, f"{name}.key")
    _openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-out", f"{name}.pem", "-days", "30", "-extfile", f"{name}.ext",
        cwd=directory,
    )
    (directory / f"{name}.csr").unlink()
    (directory / f"{name}.ext").unlink()
    return directory / f"{name}.key", directory / f"{name}.pem"


def _san(hosts: list[str]) -> str:
    names = []
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            names.append(f"IP:{h}")
        except ValueError:
            names.append(f"DNS:{h}")
    return ",".join(names)


def add_parser(sub: Any) -> None:
    """Add the ``odradek certs`` subcommand (development TLS certificates: a CA, broker and client keys and
    stores) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser("certs", help="make development TLS certificates", description=__doc__.split("\n\n")[0])
    csub = p.add_subparsers(dest="certs_command", required=True, metavar="COMMAND")
    dev = csub.add_parser("dev", help="a throwaway CA, a broker keystore and client certificates")
    dev.add_argument("directory", metavar="DIR")
    dev.add_argument("--host", action="append", help="a name or address the broker is reached at (default localhost, 127.0.0.1)")
    dev.add_argument("--client", action="append", help="a client certificate to make (default alice)")


def run(args: argparse.Namespace) -> int:
    """Run ``odradek certs`` for the parsed ``args``; writes the files into the directory given and returns 0,
    or 1 with the error on stderr."""
    d = Path(args.directory)
    hosts = args.host or ["localhost", "127.0.0.1"]
    clients = args.client or ["alice"]
    try:
        d.mkdir(parents=True, exist_ok=True)
        ca = make_ca(d, "ca", "/CN=Odradek development CA")
        key, cert = make_signed(d, "broker", f"/CN={hosts[0]}", "ca",
                                f"subjectAltName={_san(hosts)}\nextendedKeyUsage=serverAuth,clientAuth\n")
        keystore = d / "broker-keystore.pem"
        keystore.write_text(key.read_text() + cert.read_text())
        keystore.chmod(0o600)
        for name in clients:
            make_signed(d, name, f"/CN={name}", "ca", "extendedKeyUsage=clientAuth\n")
    except (OSError, RuntimeError) as exc:
        print(f"odradek certs: {exc}", file=sys.stderr)
        return 1
    host, first = hosts[0], clients[0]
    print(f"""Made in {d.resolve()}: ca.pem, broker-keystore.pem, {', '.join(c + '.pem/.key' for c in clients)}

# server.properties
listeners=PLAINTEXT://127.0.0.1:9092,SSL://{host}:9093
ssl.keystore.location={keystore.resolve()}
ssl.truststore.location={ca.resolve()}
ssl.client.auth=requested

# confluent-kafka / kcat (-X key=value)
security.protocol=SSL
ssl.ca.location={ca.resolve()}
ssl.certificate.location={(d / (first + '.pem')).resolve()}
ssl.key.location={(d / (first + '.key')).resolve()}

# Odradek's client takes the same settings, or Kafka's: ssl.truststore.location={ca.resolve()}""")
    return 0
