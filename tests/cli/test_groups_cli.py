"""``odradek groups`` against a running broker: list, describe with lag, reset-offsets, delete."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess


def _cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "groups", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_groups_cli(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": 0}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("orders", 2, 1)]).values():
            f.result(10)
        p = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(40):
            p.produce("orders", value=b"x", partition=i % 2, timestamp=1_700_000_000_000 + i * 1000)
        assert p.flush(10) == 0
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "billing",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        c.subscribe(["orders"])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 25 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen += 1
                if seen in (5, 25):
                    c.commit(asynchronous=False)
        committed = {
            tp.partition: tp.offset
            for tp in c.committed([TopicPartition("orders", 0), TopicPartition("orders", 1)], 10)
        }
        # while the consumer is a member: describe shows it; reset is refused
        out = _cli(broker, "describe", "billing")
        assert out.returncode == 0, out.stderr
        assert "Stable" in out.stdout
        rows = {(r[1], r[2]): r for r in _rows(out.stdout) if r[0] == "billing"}
        for part in (0, 1):
            r = rows[("orders", str(part))]
            assert r[3] == str(committed[part]) and r[4] == "20" and r[5] == str(20 - committed[part])
            assert r[6] != "-"  # owned by the member
        refused = _cli(broker, "reset-offsets", "billing", "--topic", "orders", "--to-earliest", "--execute")
        assert refused.returncode == 1 and "inactive" in refused.stdout
        c.close()

        listed = _cli(broker, "list")
        assert listed.returncode == 0 and ["billing", "Empty", "consumer"] in _rows(listed.stdout)
        dry = _cli(broker, "reset-offsets", "billing", "--topic", "orders", "--to-offset", "3")
        assert "dry run" in dry.stdout and _cli(broker, "describe", "billing").stdout.count(" 3 ") == 0
        for args, expect in [
            (["--to-earliest"], {0: 0, 1: 0}),
            (["--to-latest"], {0: 20, 1: 20}),
            (["--to-offset", "7"], {0: 7, 1: 7}),
            (["--shift-by", "-2"], {0: 5, 1: 5}),
            (["--shift-by", "100"], {0: 20, 1: 20}),  # clamped to the log end
            (["--to-datetime", "2023-11-14T22:13:30"], {0: 5, 1: 5}),  # 1_700_000_010_000 ms
        ]:
            done = _cli(broker, "reset-offsets", "billing", "--topic", "orders", *args, "--execute")
            assert done.returncode == 0, done.stdout + done.stderr
            desc = {
                (r[1], r[2]): r
                for r in _rows(_cli(broker, "describe", "billing").stdout)
                if r[0] == "billing"
            }
            assert {p: int(desc[("orders", str(p))][3]) for p in (0, 1)} == expect, args
        only_one = _cli(
            broker, "reset-offsets", "billing", "--topic", "orders:1", "--to-offset", "9", "--execute"
        )
        assert only_one.returncode == 0
        desc = {
            (r[1], r[2]): r for r in _rows(_cli(broker, "describe", "billing").stdout) if r[0] == "billing"
        }
        assert desc[("orders", "0")][3] == "5" and desc[("orders", "1")][3] == "9"

        deleted = _cli(broker, "delete", "billing")
        assert deleted.returncode == 0 and "successful" in deleted.stdout
        assert "billing" not in _cli(broker, "list").stdout
        again = _cli(broker, "delete", "billing")
        assert again.returncode == 1 and "does not exist" in again.stdout


def test_unreachable_broker_is_a_one_line_error() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "groups",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--timeout",
            "2",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "odradek groups:" in result.stderr
