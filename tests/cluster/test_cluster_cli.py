"""``odradek cluster up / status / down``: a 3-broker cluster as detached processes, end to end.

Needs ``odradek serve --zookeeper`` (brokers registering in ZooKeeper, a controller, replication).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from odradek.coordination.zkserver import ZooKeeperServer, process_alive

from .conftest import require_zookeeper, wait_for

pytestmark = pytest.mark.slow

TOPIC = "replicated"


def odradek(*args: object, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_range(n: int) -> int:
    """A base port such that base..base+n-1 are free, below Linux's ephemeral range (32768+)."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - n)
        if all(_bindable(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no {n} consecutive free ports")


def _ours(pid: int, needle: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return needle in f.read().decode("utf-8", "replace")
    except OSError:
        return False


def kill_leftovers(cluster_dir: Path) -> None:
    """After a failed test: SIGKILL what cluster.json lists, if it still is ours (checked in /proc)."""
    try:
        state = json.loads((cluster_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        state = {}
    for b in state.get("brokers", []):
        pid = b.get("pid")
        if isinstance(pid, int) and process_alive(pid) and _ours(pid, str(b.get("data_dir"))):
            os.kill(pid, signal.SIGKILL)
    zk = ZooKeeperServer(cluster_dir / "zookeeper", port=int(state.get("zookeeper", {}).get("port", 0)))
    if zk.running():
        zk.kill()


def test_cluster_up_status_down(tmp_path: Path) -> None:
    require_zookeeper()
    cluster_dir = tmp_path / "cluster"
    zk_port, base = free_port(), free_port_range(3)
    bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
    try:
        up = odradek(
            "cluster", "up", "--brokers", 3, "--dir", cluster_dir, "--zookeeper-port", zk_port,
            "--base-port", base, "--override", "zookeeper.session.timeout.ms=6000", "--timeout", 60,
        )  # fmt: skip
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"bootstrap servers: {bootstrap}" in up.stdout
        # `up` returns once every broker names the controller: a librdkafka admin client used at
        # once finds it (it would otherwise wait a metadata refresh for it)
        from confluent_kafka.admin import AdminClient

        for port in (base, base + 1, base + 2):
            md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
            assert md.controller_id in (1, 2, 3) and sorted(md.brokers) == [1, 2, 3], port
        state = json.loads((cluster_dir / "cluster.json").read_text())
        assert state["zookeeper"]["port"] == zk_port
        assert [(b["id"], b["port"]) for b in state["brokers"]] == [(1, base), (2, base + 1), (3, base + 2)]
        pids = [b["pid"] for b in state["brokers"]] + [state["zookeeper"]["pid"]]
        assert all(process_alive(pid) for pid in pids)

        def status() -> dict[str, Any]:
            result = odradek("cluster", "status", "--dir", cluster_dir, "--json", timeout=60)
            assert result.returncode == 0, result.stderr
            return dict(json.loads(result.stdout))

        def three_brokers_and_a_controller() -> dict[str, Any] | None:
            s = status()
            return s if len(s["brokers"]) == 3 and s["controller"] in (1, 2, 3) else None

        s = wait_for(three_brokers_and_a_controller, 60, "3 registered brokers and a controller")
        assert sorted(b["id"] for b in s["brokers"]) == [1, 2, 3]
        assert sorted(b["port"] for b in s["brokers"]) == [base, base + 1, base + 2]
        assert all(f"PLAINTEXT://127.0.0.1:{b['port']}" in b["endpoints"] for b in s["brokers"])
        text = odradek("cluster", "status", "--dir", cluster_dir).stdout
        assert "Brokers (3 registered)" in text and f"Controller: broker {s['controller']}" in text

        created = odradek(
            "topics", "create", TOPIC, "--bootstrap-server", bootstrap, "--replication-factor", 3, "--partitions", 2
        )
        assert created.returncode == 0, created.stdout + created.stderr

        def fully_replicated() -> dict[str, Any] | None:
            s = status()
            parts = [p for p in s["partitions"] if p["topic"] == TOPIC]
            ok = len(parts) == 2 and all(
                sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3] and p["leader"] in (1, 2, 3)
                for p in parts
            )
            return s if ok and s["under_replicated"] == 0 and s["offline"] == 0 else None

        s = wait_for(fully_replicated, 60, f"both partitions of {TOPIC} with 3 replicas in ISR")
        assert sorted(p["partition"] for p in s["partitions"] if p["topic"] == TOPIC) == [0, 1]
        text = odradek("cluster", "status", "--dir", cluster_dir).stdout
        assert "Under-replicated partitions: 0" in text
        assert sum(1 for line in text.splitlines() if line.startswith(TOPIC + " ")) == 2

        down = odradek("cluster", "down", "--dir", cluster_dir, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "ZooKeeper: stopped" in down.stdout
        assert not any(process_alive(pid) for pid in pids)
        assert not (cluster_dir / "cluster.json").exists()
        assert odradek("cluster", "status", "--dir", cluster_dir).returncode == 1
    finally:
        kill_leftovers(cluster_dir)


def test_status_and_down_need_a_cluster(tmp_path: Path) -> None:
    """Cheap checks that need no broker."""
    down = odradek("cluster", "down", "--dir", tmp_path / "nothing")
    assert down.returncode == 1 and "no cluster" in down.stderr
    status = odradek("cluster", "status", "--dir", tmp_path / "nothing")
    assert status.returncode == 1 and "no cluster" in status.stderr


def test_up_without_zookeeper_installed_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "cluster", "up", "--brokers", "1", "--dir", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ZK_JAR": str(tmp_path / "no-such.jar")},
    )
    assert result.returncode == 2
    assert "ZooKeeper is not installed: run `apt-get install -y zookeeper` (Debian package)" in result.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()


def test_cluster_up_with_sasl_ssl(tmp_path: Path) -> None:
    """``odradek cluster up --security sasl_ssl``: brokers replicate over SASL_SSL (SCRAM-SHA-512) and
    a client with the written settings produces and reads a replicated topic; no password is on a
    command line or in cluster.json."""
    import time

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.config import read_properties

    require_zookeeper()
    cluster_dir = tmp_path / "cluster"
    try:
        up = odradek(
            "cluster", "up", "--brokers", 2, "--dir", cluster_dir, "--zookeeper-port", 0, "--base-port", 0,
            "--security", "sasl_ssl", "--timeout", 60,
        )  # fmt: skip
        assert up.returncode == 0, up.stdout + up.stderr
        props = read_properties(cluster_dir / "client-sasl-ssl.properties")
        assert (cluster_dir / "client-sasl-ssl.properties").stat().st_mode & 0o077 == 0
        conf = {k: v for k, v in props.items() if k != "ssl.truststore.location"}
        admin = AdminClient(conf)
        topic = "secured"
        for f in admin.create_topics([NewTopic(topic, 1, 2)]).values():
            f.result(60)
        p = ck.Producer({**conf, "acks": "all"})
        for i in range(50):
            p.produce(topic, b"%d" % i)
        assert p.flush(60) == 0
        c = ck.Consumer({**conf, "group.id": "g", "enable.auto.commit": False})
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])  # two brokers: no group coordinator (RF 3)
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 50 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert sorted(got) == sorted(b"%d" % i for i in range(50))
        state_text = (cluster_dir / "cluster.json").read_text()
        assert props["sasl.password"] not in state_text
        for b in json.loads(state_text)["brokers"]:
            with open(f"/proc/{b['pid']}/cmdline", "rb") as f:
                assert b"password" not in f.read()
    finally:
        down = odradek("cluster", "down", "--dir", cluster_dir, "--timeout", 30)
        if down.returncode != 0:
            kill_leftovers(cluster_dir)
