"""``odradek certs dev``: the files it makes and the settings it prints give a working TLS broker
and client (mTLS principal ``User:CN=<client>``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import confluent_kafka as ck

from odradek.testing import BrokerProcess


def test_dev_certificates_work_as_printed(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    r = subprocess.run([sys.executable, "-m", "odradek", "certs", "dev", str(d), "--client", "bob"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    printed = dict(
        line.split("=", 1) for line in r.stdout.splitlines() if "=" in line and not line.startswith(("#", "listeners"))
    )
    assert (d / "ca.pem").exists() and (d / "bob.key").stat().st_mode & 0o077 == 0
    b = BrokerProcess(
        tmp_path / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        overrides={
            "ssl.keystore.location": printed["ssl.keystore.location"],
            "ssl.truststore.location": printed["ssl.truststore.location"],
            "ssl.client.auth": "required",
        },
        log_level="INFO,odradek.access=DEBUG",
    ).start()
    try:
        conf = {
            "bootstrap.servers": b.bootstrap_of("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": printed["ssl.ca.location"],
            "ssl.certificate.location": printed["ssl.certificate.location"],
            "ssl.key.location": printed["ssl.key.location"],
        }
        p = ck.Producer(conf)
        p.produce("dev-tls", b"x")
        assert p.flush(30) == 0
        b.wait_for_log("principal=User:CN=bob listener=SSL")
    finally:
        b.stop()
