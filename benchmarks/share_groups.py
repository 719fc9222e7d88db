"""Share groups (KIP-932) against a classic consumer group, same broker, same run.

Run: ``python benchmarks/share_groups.py [--quick]``.  Prints one JSON object.

One ``odradek serve`` broker on 127.0.0.1 (data in a temporary directory).  confluent-kafka writes
``records`` x 100-byte values round-robin over the 4 partitions of one topic.  Then, alternating and
rotating the order from repeat to repeat, each in a fresh child process:

* ``share``: 4 confluent-kafka ``ShareConsumer`` threads of a new share group
  (``share.auto.offset.reset=earliest``, implicit acknowledgement: each poll accepts the records of
  the one before, a last ``commit_sync`` the rest) read the topic until every record was delivered;
* ``classic``: 4 confluent-kafka ``Consumer`` threads of a new classic group (range assignor, one
  partition each, ``enable.auto.commit=false``; ``group.initial.rebalance.delay.ms`` at Kafka's 3 s,
  so that the first generation has all four) read it the same way.

The rate is the records received in the window that opens once every one of the four workers has
its first records (all joined and assigned, so no join or rebalance falls in it, for either kind)
and closes with the last record, over its length (``subscribe_to_last_s`` includes the joins); an unmeasured share run and classic run
on a small topic first create ``__share_group_state`` and ``__consumer_offsets``; ``ratio`` is share / classic of the medians (target >= 0.7).  The broker's CPU
time over each window gives ``broker_cpu_us_per_record`` (for share: per acknowledged record, the
acknowledgements included).

``redelivery``: a consumer holds records without acknowledging them (explicit mode) while another
polls; the lock (``share.record.lock.duration.ms=1000``, the group's config; the broker's minimum
lowered to allow it) expires and the other receives them.  The latency is the time from the lock's
end (first delivery + lock duration) to the second delivery, p50 and p99 over the samples.

``--max-record-locks N`` sets the broker's ``group.share.partition.max.record.locks`` (Kafka's
range, 100 to 10000; default 2000, the in-flight records of a share partition): the figure with
the default is the one the target is about, a tuned one is reported as such (``max_record_locks``).

The machine is a shared 2-core VM: the broker, the consumers and librdkafka's threads share both
cores; figures move by 10-20 % between runs (provisional).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

import confluent_kafka as ck
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

try:
    from benchmarks._proc import cpu_seconds
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import cpu_seconds

FULL = {"records": 1_000_000, "repeats": 3, "redeliveries": 20}
QUICK = {"records": 40_000, "repeats": 2, "redeliveries": 8}
PARTITIONS = 4
CONSUMERS = 4
VALUE_BYTES = 100
LOCK_MS = 1000
TARGET_RATIO = 0.7
CHILD_TIMEOUT = 600


def _set_group(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values():
        fut.result(30)


# ------------------------------------------------------------------------------------------------
# children


def _consume(kind: str, bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    group = f"{kind}-{os.getpid()}-{time.monotonic_ns()}"
    if kind == "share":
        _set_group(bootstrap, group, **{"share.auto.offset.reset": "earliest"})
    lock = threading.Lock()
    state = {"count": 0, "first": 0.0, "last": 0.0}
    #: (time, records) of every non-empty call, and each worker's first record's time
    calls: list[tuple[float, int]] = []
    firsts: list[float] = []
    done = threading.Event()

    def worker() -> None:
        if kind == "share":
            c: Any = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        else:
            c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "partition.assignment.strategy": "range",
                             "fetch.queue.backoff.ms": 10})
        c.subscribe([topic])
        deadline = time.monotonic() + CHILD_TIMEOUT - 60
        seen_any = False
        try:
            while not done.is_set() and time.monotonic() < deadline:
                if kind == "share":
                    msgs = list(c.poll(0.5))
                else:
                    msgs = c.consume(num_messages=10000, timeout=0.5)
                got = 0
                for m in msgs:
                    if m.error() is None:
                        m.value()
                        got += 1
                if got:
                    now = time.monotonic()
                    with lock:
                        if not seen_any:
                            firsts.append(now)
                            seen_any = True
                        calls.append((now, got))
                        if not state["count"]:
                            state["first"] = now
                        state["count"] += got
                        state["last"] = now
                        if state["count"] >= n:
                            done.set()
        finally:
            if kind == "share":
                c.commit_sync(30)
            c.close()

    threads = [threading.Thread(target=worker) for _ in range(CONSUMERS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the window opens once every worker has its first records (all joined and assigned: no
    # rebalance in it) and closes with the last record
    opened = max(firsts) if len(firsts) == CONSUMERS else state["first"]
    in_window = sum(n for t, n in calls if t > opened)
    window = state["last"] - opened
    return {"records": state["count"], "window_records": in_window, "window_s": window,
            "rate": in_window / window if window > 0 else 0.0,
            "subscribe_to_last_s": state["last"] - started, "workers_with_records": len(firsts)}


def _redelivery(bootstrap: str, topic: str, samples: int) -> dict[str, Any]:
    group = f"redelivery-{os.getpid()}"
    _set_group(bootstrap, group, **{"share.auto.offset.reset": "latest", "share.record.lock.duration.ms": str(LOCK_MS)})
    holder = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    other = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    other.subscribe([topic])
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    latencies: list[float] = []
    # both members joined and fetching before the first sample
    end = time.monotonic() + 6
    while time.monotonic() < end:
        for c in (holder, other):
            for m in c.poll(0.2):
                c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
    for i in range(samples):
        value = b"lock-%d" % i
        producer.produce(topic, value=value, partition=0)
        producer.flush(10)
        held_at = None
        deadline = time.monotonic() + 20
        while held_at is None and time.monotonic() < deadline:
            for m in holder.poll(0.05):
                if m.error() is None and m.value() == value:
                    held_at = time.monotonic()
        if held_at is None:
            continue
        got_at = None
        while got_at is None and time.monotonic() < deadline:
            for m in other.poll(0.02):
                if m.error() is None:
                    if m.value() == value:
                        got_at = time.monotonic()
                    other.acknowledge(m, ck.AcknowledgeType.ACCEPT)
        other.commit_sync(10)
        if got_at is not None:
            latencies.append((got_at - held_at) * 1000 - LOCK_MS)
        # the holder lets go of its expired hold before the next sample
        holder.close()
        holder = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                   "share.acknowledgement.mode": "explicit"})
        holder.subscribe([topic])
        time.sleep(0.5)
    holder.close()
    other.close()
    latencies.sort()
    return {
        "samples": len(latencies),
        "after_lock_ms_p50": round(statistics.median(latencies), 1) if latencies else None,
        "after_lock_ms_p99": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1) if latencies else None,
        "lock_ms": LOCK_MS,
    }


def child(kind: str, bootstrap: str, topic: str, n: int) -> None:
    if kind == "redelivery":
        print(json.dumps(_redelivery(bootstrap, topic, n)))
    else:
        print(json.dumps(_consume(kind, bootstrap, topic, n)))


# ------------------------------------------------------------------------------------------------
# parent


def run_child(kind: str, bootstrap: str, topic: str, n: int, broker_pid: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, bootstrap, topic, str(n)]
    before = cpu_seconds(broker_pid)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    broker_cpu = cpu_seconds(broker_pid) - before
    if r.returncode != 0:
        raise SystemExit(f"{kind} failed ({r.returncode}): {r.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    result["broker_cpu_s"] = broker_cpu
    return result


def fill_topic(bootstrap: str, topic: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1048576})
    value = b"x" * VALUE_BYTES
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.0005)
    if p.flush(120):
        raise SystemExit("could not write the benchmark's records")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer records and repeats")
    ap.add_argument("--max-record-locks", type=int, default=None, metavar="N",
                    help="group.share.partition.max.record.locks for the broker (100-10000; default: 2000)")
    ap.add_argument("--child", nargs=4, metavar=("KIND", "BOOTSTRAP", "TOPIC", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, bootstrap, topic, n = args.child
        child(kind, bootstrap, topic, int(n))
        return
    plan = QUICK if args.quick else FULL
    n = plan["records"]
    with tempfile.TemporaryDirectory() as tmp:
        overrides: dict[str, Any] = {
            "group.initial.rebalance.delay.ms": 3000, "group.share.min.record.lock.duration.ms": LOCK_MS,
        }
        if args.max_record_locks is not None:
            overrides["group.share.partition.max.record.locks"] = args.max_record_locks
        broker = BrokerProcess(Path(tmp) / "data", overrides=overrides)
        broker.start()
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            fill_topic(broker.bootstrap, "bench", n)
            # a first share group creates __share_group_state, a first classic group __consumer_offsets
            fill_topic(broker.bootstrap, "warm", 2000)
            for kind in ("share", "classic"):
                run_child(kind, broker.bootstrap, "warm", 2000, pid)
            runs: dict[str, list[dict[str, Any]]] = {"share": [], "classic": []}
            for r in range(plan["repeats"]):
                for kind in (("share", "classic") if r % 2 == 0 else ("classic", "share")):
                    runs[kind].append(run_child(kind, broker.bootstrap, "bench", n, pid))
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("locks", num_partitions=1, replication_factor=1)])["locks"].result(30)
            redelivery = run_child("redelivery", broker.bootstrap, "locks", plan["redeliveries"], pid)
        finally:
            broker.stop()

    def med(kind: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[kind])

    share_rate, classic_rate = med("share", "rate"), med("classic", "rate")
    out = {
        "benchmark": "share_groups",
        "records": n,
        "consumers": CONSUMERS,
        "partitions": PARTITIONS,
        "share_records_per_s": round(share_rate),
        "classic_records_per_s": round(classic_rate),
        "ratio": round(share_rate / classic_rate, 3) if classic_rate else None,
        "target_ratio": TARGET_RATIO,
        "max_record_locks": args.max_record_locks if args.max_record_locks is not None else "default (2000)",
        "broker_cpu_us_per_record": {
            "share": round(statistics.median(x["broker_cpu_s"] / max(x["records"], 1) for x in runs["share"]) * 1e6, 2),
            "classic": round(statistics.median(x["broker_cpu_s"] / max(x["records"], 1) for x in runs["classic"]) * 1e6, 2),
        },
        "redelivery": {k: v for k, v in redelivery.items() if k != "broker_cpu_s"},
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "provisional": "a shared 2-core machine: figures move between runs",
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
