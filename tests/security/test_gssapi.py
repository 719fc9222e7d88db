"""SASL/GSSAPI against a real MIT KDC started by the test: kcat (librdkafka with Cyrus SASL) and
kafka-python authenticate with Kerberos tickets; the principal is the short name; a client whose
ticket the broker cannot accept is refused; principal-to-local rules apply."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.kerberos import KerberosShortNamer
from odradek.testing import BrokerProcess
from tests.security.kdc import REALM, MitKdc

TIMEOUT = 60.0


def test_principal_to_local_rules() -> None:
    namer = KerberosShortNamer(
        r"RULE:[2:$1@$0](kafka@EXAMPLE\.TEST)s/.*/kafka-broker/, RULE:[1:$1@$0](.*@OTHER\.TEST)s/@.*///L, DEFAULT", REALM
    )
    assert namer.short_name("alice@EXAMPLE.TEST") == "alice"
    assert namer.short_name("kafka/host1@EXAMPLE.TEST") == "kafka-broker"
    assert namer.short_name("BOB@OTHER.TEST") == "bob"
    with pytest.raises(ValueError):
        namer.short_name("carol@FOREIGN.TEST")


def test_the_kdc_moves_to_another_port_when_its_port_is_taken(tmp_path: Path) -> None:
    """The helper's port can be taken between finding it free and the KDC binding it (a CI run
    failed so: "Address already in use"); the KDC then starts on another, and something else
    answering on the first port is not taken for the KDC."""
    k = MitKdc(tmp_path / "kdc")
    first = k.port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        try:
            k.start()
            assert k.port != first and k.proc is not None and k.proc.poll() is None
        finally:
            k.stop()


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MitKdc]:
    k = MitKdc(tmp_path_factory.mktemp("kdc")).start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture(scope="module")
def kerberized(kdc: MitKdc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    keytab = kdc.principal("kafka/localhost")
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        f'keyTab="{keytab}" principal="kafka/localhost@{REALM}";'
    )
    b = BrokerProcess(
        tmp_path_factory.mktemp("gssapi") / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://localhost:0",
        overrides={
            "sasl.enabled.mechanisms": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": jaas,
        },
        env={"KRB5_CONFIG": str(kdc.krb5_conf)},
        log_level="INFO,odradek.access=DEBUG",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _kcat(kdc: MitKdc, broker: BrokerProcess, user: str, keytab: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    cache = kdc.dir / f"{user}-{uuid.uuid4().hex[:6]}.ccache"
    env = {**kdc.env, "KRB5CCNAME": f"FILE:{cache}"}
    cmd = [
        "kcat", "-b", broker.bootstrap_of("SASL_PLAINTEXT"),
        "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=GSSAPI",
        "-X", "sasl.kerberos.service.name=kafka", "-X", f"sasl.kerberos.keytab={keytab}",
        "-X", f"sasl.kerberos.principal={user}@{REALM}", "-X", "socket.timeout.ms=15000", *args,
    ]
    return subprocess.run(cmd, input=stdin, env=env, capture_output=True, timeout=TIMEOUT)


def test_kcat_with_kerberos_tickets(kdc: MitKdc, kerberized: BrokerProcess) -> None:
    keytab = kdc.principal("alice")
    topic = f"krb-{uuid.uuid4().hex[:6]}"
    r = _kcat(kdc, kerberized, "alice", keytab, "-P", "-t", topic, stdin=b"one\ntwo\nthree\n")
    assert r.returncode == 0, r.stderr.decode()
    r = _kcat(kdc, kerberized, "alice", keytab, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.split() == [b"one", b"two", b"three"]
    kerberized.wait_for_log("principal=User:alice listener=SASL_PLAINTEXT")


def test_a_ticket_for_another_service_is_refused(kdc: MitKdc, kerberized: BrokerProcess) -> None:
    keytab = kdc.principal("mallory")
    kdc.principal("other/localhost")
    r = _kcat(kdc, kerberized, "mallory", keytab, "-X", "sasl.kerberos.service.name=other", "-L", "-m", "5")
    assert r.returncode != 0
    kerberized.wait_for_log("Failed authentication", "GSSAPI")
