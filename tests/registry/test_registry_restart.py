"""A registry restarted from ``_schemas`` alone: every schema under its id and version, soft
deletes, configs and modes as they were; new schemas get ids after the old ones; after a clean
stop and after a crash (SIGKILL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.testing import BrokerProcess
from tests.registry.conftest import avro_user, call


def snapshot(url: str) -> dict[str, object]:
    subjects = call("GET", f"{url}/subjects?deleted=true").json
    out: dict[str, object] = {"subjects": subjects}
    for s in subjects:
        versions = call("GET", f"{url}/subjects/{s}/versions?deleted=true").json
        out[s] = [call("GET", f"{url}/subjects/{s}/versions/{v}?deleted=true").json for v in versions]
        out[s + "/live"] = call("GET", f"{url}/subjects/{s}/versions").json if call(
            "GET", f"{url}/subjects/{s}/versions").status == 200 else None
        out[s + "/config"] = call("GET", f"{url}/config/{s}").body
        out[s + "/mode"] = call("GET", f"{url}/mode/{s}").body
    out["config"] = call("GET", f"{url}/config").json
    return out


@pytest.mark.parametrize("how", ["clean", "crash"])
def test_restart_rebuilds_every_schema_with_its_id(tmp_path: Path, how: str) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={"schema.registry.listeners": "http://127.0.0.1:0"})
    broker.start()
    try:
        url = broker.registry_url
        assert url is not None
        ids = []
        for i in range(4):
            answer = call("POST", f"{url}/subjects/a-value/versions",
                          {"schema": avro_user({"name": f"f{i}", "type": "int", "default": i})})
            ids.append(answer.json["id"])
        ids.append(call("POST", f"{url}/subjects/b-value/versions", {"schema": avro_user()}).json["id"])
        call("DELETE", f"{url}/subjects/a-value/versions/2")
        call("PUT", f"{url}/config/b-value", {"compatibility": "NONE"})
        call("PUT", f"{url}/mode/b-value", {"mode": "READONLY"})
        call("PUT", f"{url}/config", {"compatibility": "FULL"})
        proto = call("POST", f"{url}/subjects/p-value/versions",
                     {"schema": 'syntax = "proto3";\nmessage P { int32 a = 1; }\n', "schemaType": "PROTOBUF"}).json["id"]
        before = snapshot(url)
        if how == "crash":
            broker.kill()
        else:
            broker.stop()
        broker.start()
        url = broker.registry_url
        assert url is not None
        assert snapshot(url) == before
        assert call("GET", f"{url}/schemas/ids/{proto}?format=serialized").status == 200
        new = call("POST", f"{url}/subjects/c-value/versions", {"schema": avro_user(name="New")}).json["id"]
        assert new > max([*ids, proto])
        assert json.loads(call("GET", f"{url}/schemas/ids/{ids[0]}").json["schema"])["fields"][1]["name"] == "f0"
    finally:
        broker.stop()
