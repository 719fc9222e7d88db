"""``odradek share-groups`` against a running broker, with confluent-kafka's ShareConsumer as the
group's member: list, describe (members, start offsets, lag; --output json), reset-offsets (a
dry run unless --execute; refused while the group has members) and delete (refused while the
group has members, with Kafka's NON_EMPTY_GROUP)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from odradek.testing import BrokerProcess

T = 30.0
OVERRIDES = {"group.share.heartbeat.interval.ms": 1000, "group.share.min.heartbeat.interval.ms": 1000}


def _cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "share-groups", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True, text=True, timeout=60,
    )


def _json(broker: BrokerProcess, *args: str) -> Any:
    out = _cli(broker, *args, "--output", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_share_groups_cli(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", overrides=OVERRIDES) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("jobs", 1, 1)]).values():
            f.result(10)
        res = ConfigResource(ResourceType.GROUP, "workers", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(10)
        p = ck.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(20):
            p.produce("jobs", value=b"job-%d" % i)
        assert p.flush(10) == 0
        c = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "workers"})
        c.subscribe(["jobs"])
        seen = 0
        deadline = time.monotonic() + T
        try:
            while seen < 20 and time.monotonic() < deadline:
                seen += sum(1 for m in c.poll(0.5) if m.error() is None)
            assert seen == 20
            # the records are accepted (implicit mode) with the next poll; wait for the start offset
            while True:
                c.poll(0.2)
                doc = _json(broker, "describe", "workers")
                if doc["offsets"] and doc["offsets"][0]["start_offset"] == 20 and doc["members"]:
                    break
                assert time.monotonic() < deadline, doc
            assert doc["state"] == "Stable"
            [member] = doc["members"]
            assert member["assignment"] == [{"topic": "jobs", "partition": 0}]
            assert [(o["topic"], o["partition"], o["start_offset"], o["lag"]) for o in doc["offsets"]] == [
                ("jobs", 0, 20, 0)]
            # the table
            out = _cli(broker, "describe", "workers")
            assert out.returncode == 0, out.stderr
            rows = {r[1]: r for r in _rows(out.stdout) if r[0] == "workers"}
            assert rows["jobs"][2:5] == ["0", "20", "0"]
            assert rows["jobs"][5] == member["member_id"]
            assert member["member_id"] in out.stdout
            listed = _json(broker, "list")
            assert {"group_id": "workers", "state": "Stable", "members": 1} in listed
            # reset and delete are refused while the consumer is in the group
            refused = _cli(broker, "reset-offsets", "workers", "--topic", "jobs", "--to-earliest", "--execute")
            assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stdout, refused
            refused = _cli(broker, "delete", "workers")
            assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stdout, refused
        finally:
            c.close()
        deadline = time.monotonic() + T
        while _json(broker, "describe", "workers")["members"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # a dry run changes nothing
        dry = _cli(broker, "reset-offsets", "workers", "--topic", "jobs:0", "--to-offset", "5")
        assert dry.returncode == 0, dry.stderr
        assert ["workers", "jobs", "0", "5"] in _rows(dry.stdout) and "dry run" in dry.stdout
        assert _json(broker, "describe", "workers")["offsets"][0]["start_offset"] == 20
        done = _cli(broker, "reset-offsets", "workers", "--topic", "jobs:0", "--to-offset", "5", "--execute")
        assert done.returncode == 0, done.stderr
        after = _json(broker, "describe", "workers")["offsets"]
        assert after[0]["start_offset"] == 5 and after[0]["lag"] == 15
        # a consumer of the group gets 5-19 again
        c = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "workers"})
        c.subscribe(["jobs"])
        got: list[bytes] = []
        deadline = time.monotonic() + T
        try:
            while len(got) < 15 and time.monotonic() < deadline:
                got += [m.value() for m in c.poll(0.5) if m.error() is None]
        finally:
            c.close()
        assert sorted(got) == sorted(b"job-%d" % i for i in range(5, 20))
        deadline = time.monotonic() + T
        while _json(broker, "describe", "workers")["members"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        gone = _cli(broker, "delete", "workers")
        assert gone.returncode == 0, (gone.stdout, gone.stderr)
        assert "successful" in gone.stdout
        missing = _cli(broker, "describe", "workers")
        assert missing.returncode == 1 and "does not exist" in missing.stdout
        assert _json(broker, "list") == []
