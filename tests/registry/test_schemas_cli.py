"""``odradek schemas``: list, get, register, check, delete, config and mode, with JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cli.__main__ import main
from tests.registry.conftest import avro_user, unique


def cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["schemas", *args, "--registry", url])
    out, err = capsys.readouterr()
    return code, out, err


def test_register_get_list_check_delete(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subject = unique("cli")
    v1 = tmp_path / "user.avsc"
    v1.write_text(avro_user())
    code, out, _ = cli(capsys, url, "register", subject, "--schema-file", str(v1), "--output", "json")
    assert code == 0
    schema_id = json.loads(out)["id"]
    code, out, _ = cli(capsys, url, "list", "--output", "json")
    assert code == 0 and subject in json.loads(out)
    code, out, _ = cli(capsys, url, "list")
    assert code == 0 and subject in out and "SUBJECT" in out
    code, out, _ = cli(capsys, url, "get", subject, "--output", "json")
    got = json.loads(out)
    assert (got["subject"], got["version"], got["id"]) == (subject, 1, schema_id)
    code, out, _ = cli(capsys, url, "get", "--id", str(schema_id))
    assert code == 0 and '"name": "User"' in out
    # compatible: exit 0; incompatible: exit 1 with the reasons
    ok = tmp_path / "ok.avsc"
    ok.write_text(avro_user({"name": "age", "type": "int", "default": 0}))
    bad = tmp_path / "bad.avsc"
    bad.write_text(avro_user({"name": "age", "type": "int"}))
    assert cli(capsys, url, "check", subject, "--schema-file", str(ok))[:2] == (0, "compatible\n")
    code, out, _ = cli(capsys, url, "check", subject, "--schema-file", str(bad), "--output", "json")
    assert code == 1 and json.loads(out)["is_compatible"] is False
    code, _, err = cli(capsys, url, "register", subject, "--schema-file", str(bad))
    assert code == 1 and "error code 409" in err
    code, out, _ = cli(capsys, url, "delete", subject, "--output", "json")
    assert code == 0 and json.loads(out) == [1]
    code, out, _ = cli(capsys, url, "delete", subject, "--permanent", "--output", "json")
    assert code == 0 and json.loads(out) == [1]
    code, _, err = cli(capsys, url, "get", subject)
    assert code == 1 and "40401" in err


def test_config_and_mode(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    subject = unique("cli")
    assert cli(capsys, url, "config", subject, "--set", "full", "--output", "json")[:2] == (
        0, json.dumps({"compatibility": "FULL"}, indent=2) + "\n")
    assert cli(capsys, url, "config", subject)[1] == f"{subject}: FULL\n"
    assert cli(capsys, url, "config", subject, "--delete")[0] == 0
    assert cli(capsys, url, "mode", subject, "--set", "readonly")[1] == f"{subject}: READONLY\n"
    assert cli(capsys, url, "mode", subject, "--output", "json")[1] == json.dumps({"mode": "READONLY"}, indent=2) + "\n"
    assert cli(capsys, url, "mode", subject, "--delete")[0] == 0
    code, _, err = cli(capsys, url, "config", subject, "--set", "sideways")
    assert code == 1 and "42203" in err


def test_an_unreachable_registry_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "http://127.0.0.1:1", "list")
    assert code == 1 and "cannot reach the schema registry" in err
