"""``odradek cluster rolling-restart`` under an ``acks=all`` producer: at full speed and at a gentle
rate, every broker is restarted in turn, no acknowledged record is lost, no partition is ever
offline (ZooKeeper sampled every 50 ms throughout), and the longest stall between two
acknowledgements is reported.  Also: it refuses to start on an unhealthy cluster, and
``wait-healthy`` waits for one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.cli.cluster import read_status

from .conftest import kazoo_client, require_zookeeper
from .test_cluster_cli import kill_leftovers, odradek

pytestmark = pytest.mark.slow

TOPIC = "rolling"
PRODUCER = Path(__file__).parent / "jobs" / "acks_all_producer.py"


def _up(cluster_dir: Path) -> dict[str, Any]:
    up = odradek(
        "cluster", "up", "--brokers", 3, "--dir", cluster_dir, "--zookeeper-port", 0, "--base-port", 0,
        "--override", "zookeeper.session.timeout.ms=6000", "--override", "group.initial.rebalance.delay.ms=0",
        "--log-level", "WARNING", "--timeout", 60,
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    state: dict[str, Any] = json.loads((cluster_dir / "cluster.json").read_text())
    return state


def _bootstrap(state: dict[str, Any]) -> str:
    return ",".join(f"{b['host']}:{b['port']}" for b in state["brokers"])


class OfflineWatch:
    """Samples the cluster state in ZooKeeper every 50 ms; records any sample with an offline partition."""

    def __init__(self, connect: str) -> None:
        self.client = kazoo_client(connect)
        self.offline: list[tuple[float, list[str]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                status = read_status(self.client)
            except Exception:
                continue  # a moment of ZooKeeper connection loss: next sample
            self.samples += 1
            down = [f"{p['topic']}-{p['partition']}" for p in status["partitions"] if p["offline"]]
            if down:
                self.offline.append((time.monotonic(), down))
            self._stop.wait(0.05)

    def __enter__(self) -> OfflineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.stop()
        self.client.close()


def _consume_values(bootstrap: str, expected: int) -> set[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(6)])
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                if m.error() is None:
                    seen.add(int(m.value()))
    finally:
        c.close()
    return seen


@pytest.mark.parametrize("rate", [0, 300], ids=["full-speed", "gentle"])
def test_a_rolling_restart_under_acks_all_load_loses_nothing_and_takes_nothing_offline(
    rate: int, tmp_path: Path
) -> None:
    require_zookeeper()
    cluster_dir = tmp_path / "cluster"
    try:
        state = _up(cluster_dir)
        bootstrap = _bootstrap(state)
        created = odradek("topics", "create", TOPIC, "-b", bootstrap, "--partitions", 6, "--replication-factor", 3,
                          "--config", "min.insync.replicas=2")
        assert created.returncode == 0, created.stderr
        healthy = odradek("cluster", "wait-healthy", "--dir", cluster_dir, "--timeout", 60, "--brokers", "1,2,3")
        assert healthy.returncode == 0, healthy.stderr
        pids_before = {b["id"]: b["pid"] for b in json.loads((cluster_dir / "cluster.json").read_text())["brokers"]}
        stop, out = tmp_path / "stop", tmp_path / "producer.json"
        producer = subprocess.Popen(
            [sys.executable, str(PRODUCER), bootstrap, TOPIC, str(stop), str(out), str(rate)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=(tmp_path / "producer.err").open("wb"),
        )
        try:
            with OfflineWatch(state["zookeeper"]["connect"]) as watch:
                time.sleep(2)  # the producer at its pace before the first broker goes
                rolled = odradek("cluster", "rolling-restart", "--dir", cluster_dir, "--output", "json",
                                 "--isr-timeout", 120, timeout=600)
                time.sleep(1)
            stop.touch()
            producer.wait(180)
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait(10)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        summary = json.loads(rolled.stdout)
        controller_at_start = summary["brokers"][-1]["broker"]
        assert sorted(s["broker"] for s in summary["brokers"]) == [1, 2, 3]
        assert "controller " + str(controller_at_start) + " last" in rolled.stderr
        pids_after = {b["id"]: b["pid"] for b in json.loads((cluster_dir / "cluster.json").read_text())["brokers"]}
        assert all(pids_after[i] != pids_before[i] for i in (1, 2, 3)), (pids_before, pids_after)
        assert watch.samples > 20
        assert not watch.offline, f"partitions offline during the rolling restart: {watch.offline[:5]}"

        result = json.loads(out.read_text())
        assert result["unflushed"] == 0 and result["error_count"] == 0, result["errors"]
        acked = set(result["acked"])
        assert len(acked) == len(result["acked"])  # idempotence: no value acknowledged twice
        seen = _consume_values(bootstrap, len(acked))
        lost = acked - seen
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:10]}"
        print(f"\nrolling restart ({'full speed' if rate == 0 else f'{rate}/s'}): {len(acked)} records acknowledged "
              f"in {result['seconds']} s, longest write stall {result['longest_gap_s']} s, steps {summary['brokers']}")
    finally:
        kill_leftovers(cluster_dir)


def test_a_rolling_restart_refuses_an_unhealthy_cluster(tmp_path: Path) -> None:
    require_zookeeper()
    cluster_dir = tmp_path / "cluster"
    try:
        state = _up(cluster_dir)
        bootstrap = _bootstrap(state)
        created = odradek("topics", "create", TOPIC, "-b", bootstrap, "--partitions", 2, "--replication-factor", 3)
        assert created.returncode == 0, created.stderr
        assert odradek("cluster", "wait-healthy", "--dir", cluster_dir, "--timeout", 60).returncode == 0
        assert odradek("cluster", "stop-broker", 3, "--dir", cluster_dir).returncode == 0
        pids = {b["id"]: b["pid"] for b in json.loads((cluster_dir / "cluster.json").read_text())["brokers"]}
        refused = odradek("cluster", "rolling-restart", "--dir", cluster_dir, "--isr-timeout", 1)
        assert refused.returncode == 1
        assert "not healthy" in refused.stderr and "under-replicated" in refused.stderr, refused.stderr
        after = {b["id"]: b["pid"] for b in json.loads((cluster_dir / "cluster.json").read_text())["brokers"]}
        assert after == pids  # nothing was restarted
        waited = odradek("cluster", "wait-healthy", "--dir", cluster_dir, "--timeout", 1)
        assert waited.returncode == 1 and "under-replicated" in waited.stderr
        assert odradek("cluster", "start-broker", 3, "--dir", cluster_dir).returncode == 0
        waited = odradek("cluster", "wait-healthy", "--dir", cluster_dir, "--timeout", 60, "--brokers", "1,2,3")
        assert waited.returncode == 0, waited.stderr
        assert "healthy" in waited.stdout
    finally:
        kill_leftovers(cluster_dir)
