"""Benchmark: how long a 3-broker test cluster takes to be ready, fast (in-process) vs ZooKeeper.

Run: ``.venv/bin/python benchmarks/cluster_startup.py [--repeats 5] [--zk-repeats 3] [--brokers 3]``
(or ``python -m benchmarks.cluster_startup``).  Prints one JSON object.  Exit status 0 whatever
the figures (a benchmark reports), 1 when a cluster did not become ready.

"Ready" is what a test needs before its first line: from the start call until

1. every broker is registered and a controller elected (the cluster's own start);
2. a topic of 3 partitions with replication factor 3 is created (confluent-kafka's AdminClient)
   and every partition has a leader and a full ISR (the clients' metadata says so);
3. one record produced with ``acks=all`` (confluent-kafka, librdkafka) is acknowledged.

* ``fast`` - :class:`odradek.testcluster.FastCluster` (what the ``odradek_fast_cluster`` fixture
  starts): the brokers on one event loop in this process, coordinated by the in-process
  ZooKeeper.  One unmeasured warm-up run first (it pays for importing the broker's modules, as
  the first fixture of a test session does: reported as ``first_run_s``), then ``repeats``
  measured runs, each on a fresh cluster in a fresh directory; figures are the median, min and max.
* ``zookeeper`` - :class:`odradek.pytest_plugin.OdradekCluster` (what the ``odradek_cluster``
  fixture starts): Debian's ZooKeeper (a JVM) and 3 ``odradek serve --zookeeper`` processes,
  ``zk_repeats`` measured runs.

Each phase's time is given too (``start_s``: step 1, ``topic_s``: step 2, ``produce_s``: step 3).
Teardown is not measured.  Everything is on 127.0.0.1 with ephemeral ports, in a temporary
directory (under ``$BENCH_DIR``, default /tmp) removed at the end; every process is stopped by PID.
The machine is shared: figures measured while other work runs are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

OVERRIDES: dict[str, Any] = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5}


def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:  # not yet
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _topic_and_produce(bootstrap: str, size: int) -> tuple[float, float]:
    """Create a 3-partition topic of replication factor ``min(3, size)``, wait for full ISRs, then
    produce one record with acks=all: (topic seconds, produce seconds)."""
    rf = min(3, size)
    t0 = time.perf_counter()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"ready-{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(name, 3, rf)], operation_timeout=30).values():
        f.result(30)

    def full() -> bool:
        md = admin.list_topics(name, timeout=5).topics[name]
        return (md.error is None and len(md.partitions) == 3
                and all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()))

    _until(full, 30, f"leaders and full ISRs of {name}")
    t1 = time.perf_counter()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[Any] = []
    producer.produce(name, b"ready", partition=0, on_delivery=lambda err, _m: errors.append(err))
    if producer.flush(30) != 0 or errors != [None]:
        raise RuntimeError(f"the acks=all record was not acknowledged: {errors}")
    return t1 - t0, time.perf_counter() - t1


def fast_run(base: Path, size: int) -> dict[str, float]:
    from odradek.testcluster import FastCluster

    t0 = time.perf_counter()
    cluster = FastCluster(base, size, overrides=OVERRIDES)
    try:
        cluster.start()
        started = time.perf_counter() - t0
        topic_s, produce_s = _topic_and_produce(cluster.bootstrap_servers, size)
        total = time.perf_counter() - t0
    finally:
        cluster.close()
    return {"ready_s": total, "start_s": started, "topic_s": topic_s, "produce_s": produce_s}


def zookeeper_run(base: Path, size: int) -> dict[str, float]:
    from odradek.pytest_plugin import OdradekCluster

    t0 = time.perf_counter()
    cluster = OdradekCluster(base, size, OVERRIDES, "WARNING")
    try:
        cluster.start()
        started = time.perf_counter() - t0
        topic_s, produce_s = _topic_and_produce(cluster.bootstrap_servers, size)
        total = time.perf_counter() - t0
    finally:
        cluster.close()
    return {"ready_s": total, "start_s": started, "topic_s": topic_s, "produce_s": produce_s}


def summarize(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for key in ("ready_s", "start_s", "topic_s", "produce_s"):
        values = [r[key] for r in runs]
        out[key] = {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                    "max": round(max(values), 3)}
    out["ready_s_each"] = [round(r["ready_s"], 3) for r in runs]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5, help="measured runs of the fast cluster (default 5)")
    parser.add_argument("--zk-repeats", type=int, default=3, help="measured runs of the ZooKeeper cluster (0: skip)")
    parser.add_argument("--brokers", type=int, default=3)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"brokers": args.brokers}
    status = 0
    with tempfile.TemporaryDirectory(prefix="odradek-startup-", dir=os.environ.get("BENCH_DIR")) as tmp:
        base = Path(tmp)
        try:
            warm = fast_run(base / "fast-warmup", args.brokers)
            runs = [fast_run(base / f"fast-{i}", args.brokers) for i in range(args.repeats)]
            result["fast"] = {"first_run_s": round(warm["ready_s"], 3), **summarize(runs)}
        except Exception as exc:
            result["fast"] = {"error": repr(exc)}
            status = 1
        if args.zk_repeats > 0:
            try:
                runs = [zookeeper_run(base / f"zk-{i}", args.brokers) for i in range(args.zk_repeats)]
                result["zookeeper"] = summarize(runs)
            except Exception as exc:
                result["zookeeper"] = {"error": repr(exc)}
                status = 1
    if "ready_s" in result.get("fast", {}) and "ready_s" in result.get("zookeeper", {}):
        result["speedup"] = round(result["zookeeper"]["ready_s"]["median"] / result["fast"]["ready_s"]["median"], 1)
    print(json.dumps(result, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
