"""Certificate subjects as Kafka names them, and ssl.principal.mapping.rules."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from odradek.config import ConfigError
from odradek.security import CertificateError, KafkaPrincipal, SslPrincipalMapper, subject_name


def _cert(tmp_path: Path, subj: str) -> bytes:
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
         "-days", "1", "-subj", subj, "-multivalue-rdn", "-utf8"],
        check=True, capture_output=True, timeout=60,
    )
    return ssl.PEM_cert_to_DER_cert(crt.read_text())


@pytest.mark.parametrize(
    ("subj", "name"),
    [
        ("/C=US/O=Example/OU=eng/CN=alice", "CN=alice,OU=eng,O=Example,C=US"),
        ("/DC=org/DC=example/UID=bob/CN=Bob, Jr.", "CN=Bob\\, Jr.,UID=bob,DC=example,DC=org"),
        ("/O=a\\+b/CN=#x <y>;", "CN=\\#x \\<y\\>\\;,O=a\\+b"),
        # a multi-valued RDN in its encoded order (DER sorts the SET: the shorter element first)
        ("/CN=carol+OU=ops", "OU=ops+CN=carol"),
        ("/CN=d\u00e9j\u00e0", "CN=d\u00e9j\u00e0"),
        # not a keyword of RFC 2253: the OID and the hex of the DER value, as Java writes it
        ("/emailAddress=a@b.c/CN=x", "CN=x,1.2.840.113549.1.9.1=#16056140622e63"),
    ],
)
def test_subjects_read_as_javas_rfc2253_names(tmp_path: Path, subj: str, name: str) -> None:
    assert subject_name(_cert(tmp_path, subj)) == name


def test_damaged_certificates_raise() -> None:
    for junk in (b"", b"\x30\x05\x30", b"\x30\x84\xff\xff\xff\xff", b"\x02\x01\x00"):
        with pytest.raises(CertificateError):
            subject_name(junk)


def test_mapping_rules_as_kafka_applies_them() -> None:
    rules = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT"
    )
    assert rules.name("CN=kafka-svc,OU=ServiceUsers,O=Unknown") == "kafka-svc"
    assert rules.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US") == "duke@javasoft"
    assert rules.name("OU=x,cn=alice.b,O=y") == "ALICE.B"
    assert rules.name("O=nothing") == "O=nothing"
    assert SslPrincipalMapper("RULE:^CN=(a.*)$/$1/").name("CN=abc") == "abc"
    with pytest.raises(ValueError, match=r"no ssl\.principal\.mapping\.rules rule"):
        SslPrincipalMapper("RULE:^CN=(a.*)$/$1/").name("CN=b")
    with pytest.raises(ConfigError):
        SslPrincipalMapper("RULE:nonsense")


def test_principals_print_and_parse_as_kafka() -> None:
    p = KafkaPrincipal.parse("User:CN=a:b,O=c")
    assert p == KafkaPrincipal("User", "CN=a:b,O=c") and str(p) == "User:CN=a:b,O=c"
    with pytest.raises(ValueError):
        KafkaPrincipal.parse("alice")
