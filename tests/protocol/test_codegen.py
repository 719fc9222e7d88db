"""The committed generated code is current, and --check notices when it is not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference"
#: the default inputs: Kafka 3.x's definitions, then Kafka 4.x's merged into them
DEFS = [
    str(REFERENCE / version / kind)
    for version in ("kafka-protocol", "kafka-protocol-4x")
    for kind in ("messages", "coordinator-records")
]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.codegen", *args], cwd=ROOT, capture_output=True, text=True)


def test_committed_output_is_current() -> None:
    result = _run("--check")
    assert result.returncode == 0, result.stderr


def test_check_fails_on_stale_output(tmp_path: Path) -> None:
    out = tmp_path / "messages"
    shutil.copytree(ROOT / "src" / "odradek" / "protocol" / "messages", out)
    assert _run(*DEFS, "--out", str(out), "--check").returncode == 0
    target = out / "produce.py"
    target.write_text(target.read_text().replace("(0, 13)", "(0, 14)"))
    result = _run(*DEFS, "--out", str(out), "--check")
    assert result.returncode == 1
    assert "produce.py" in result.stderr


def test_output_carries_no_prose_from_the_definitions() -> None:
    text = (ROOT / "src" / "odradek" / "protocol" / "messages" / "produce.py").read_text()
    assert "The transactional ID" not in text
    assert "Licensed to the Apache" not in text


def test_check_fails_on_a_stale_codec_module(tmp_path: Path) -> None:
    out = tmp_path / "messages"
    shutil.copytree(ROOT / "src" / "odradek" / "protocol" / "messages", out)
    target = out / "_codecs" / "fetch.py"
    target.write_text(target.read_text().replace("pos += 4", "pos += 5", 1))
    result = _run(*DEFS, "--out", str(out), "--check")
    assert result.returncode == 1
    assert "_codecs/fetch.py" in result.stderr


def test_the_protocol_package_compiles_no_code_at_run_time() -> None:
    # the codecs are checked-in source: nothing in the package builds code with exec/compile/eval
    package = ROOT / "src" / "odradek" / "protocol"
    offenders = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if any(call in p.read_text() for call in ("exec(", "compile(", "eval("))
    ]
    assert not offenders


def test_every_codec_version_has_a_function_and_identical_versions_share_one() -> None:
    from odradek.protocol.messages.fetch import FetchRequest, FetchResponse

    for cls in (FetchRequest, FetchResponse):
        lo, hi = cls.VALID_VERSIONS
        assert {v: cls.encoder(v) for v in range(lo, hi + 1)}.keys() == set(range(lo, hi + 1))
        assert all(callable(cls.decoder(v)) for v in range(lo, hi + 1))
    # FetchRequest v0-2 have the same layout: one function serves them
    assert FetchRequest.encoder(0) is FetchRequest.encoder(2)
    assert FetchRequest.encoder(2) is not FetchRequest.encoder(3)


def test_kafka_4_definitions_merge_into_earlier_ones_and_removed_apis_stay(tmp_path: Path) -> None:
    out = tmp_path / "messages"
    result = _run(*DEFS, "--out", str(out))
    assert result.returncode == 0, result.stderr
    produce = (out / "produce.py").read_text()
    assert "ProduceRequest.VALID_VERSIONS = (0, 13)" in produce  # Kafka 3's v0-2 and Kafka 4's v13
    # StopReplica is "validVersions": "none" in Kafka 4: the 3.x definition stays
    assert "StopReplicaRequest.VALID_VERSIONS = (0, 4)" in (out / "stop_replica.py").read_text()
    assert (out / "_codecs" / "stop_replica.py").is_file()
    # the default inputs are these
    assert _run("--out", str(out), "--check").returncode == 0
