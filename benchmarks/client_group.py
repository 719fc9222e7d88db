"""Benchmark of Odradek's group Consumer against confluent-kafka's (librdkafka) group consumer,
both reading from the same ``odradek serve`` broker in the same run.

Run: ``python benchmarks/client_group.py [--quick]`` (or ``python -m benchmarks.client_group``).
Prints one JSON object (~20 s; ``--quick`` ~5 s). One broker process on 127.0.0.1 (data in
a temporary directory, default flush policy) serves the whole run. Before the repeats,
confluent-kafka writes ``records`` x 100-byte values (no key, no headers) round-robin over the
``partitions`` partitions of one topic (``acks=1, linger.ms=5, batch.size=1048576``). Every
measurement then runs in a fresh child process, one at a time, alternating Odradek and
confluent-kafka (the order rotates from repeat to repeat). Figures are medians over the repeats;
``ratio`` is Odradek / confluent-kafka of the medians of this run (target >= 0.5).

Both consumers are group members: a fresh ``group.id`` per run, ``subscribe([topic])``,
``auto.offset.reset=earliest``, ``enable.auto.commit=false`` (no commits in the window), the
``range`` assignor, and the same fetch settings under each client's names:
``max.partition.fetch.bytes=1048576``, ``fetch.max.bytes=52428800``, fetch wait 500 ms,
``fetch.min.bytes=1``. Each takes up to 10,000 records per call: Odradek's
``Consumer.poll(1.0)`` with ``max.poll.records=10000``, confluent-kafka's
``consume(num_messages=10000, timeout=1.0)`` (``fetch.queue.backoff.ms=10``, as in
``benchmarks/broker.py``: librdkafka's default 1000 ms pause once 100,000 records are queued
stalls a broker that outruns the Python loop). Every field of every record is read (topic,
partition, offset, timestamp, key, value, headers).

Window: from the first record in hand to the last; the rate counts the records delivered after
the first call that returned any (so the group join, the first fetch and the first chunk's work
fall before the window for both). ``join_s`` is ``subscribe()`` to the first record, for
information. Each child also reports its CPU time (user+system of the whole process, librdkafka's
threads and Odradek's I/O thread included) per record. With ``--profile``, one more Odradek run
under cProfile prints where its time goes (top functions by own time) in ``profile``.

The machine is a shared 2-core VM: the broker, the client and the clients' I/O threads share
both cores, so every figure includes the broker's work; single figures move by 10-20 % between
runs.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

VALUE_BYTES = 100
FULL = {"records": 1_000_000, "repeats": 3, "partitions": 4}
QUICK = {"records": 200_000, "repeats": 2, "partitions": 4}
TARGET_RATIO = 0.5
BATCH = 10_000
FETCH: dict[str, Any] = {
    "max.partition.fetch.bytes": 1048576,
    "fetch.max.bytes": 52428800,
    "fetch.min.bytes": 1,
}
ODR_FETCH = {**FETCH, "fetch.max.wait.ms": 500}
CK_FETCH = {**FETCH, "fetch.wait.max.ms": 500, "fetch.queue.backoff.ms": 10}
GROUP: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "partition.assignment.strategy": "range",
}
CONSUMERS = ["odradek", "confluent_kafka"]
CHILD_TIMEOUT = 600


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


# ------------------------------------------------------------------------------------------------
# children: one measurement each, result as one JSON line on stdout


def consume_odradek(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    from odradek.client import Consumer

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "max.poll.records": BATCH, **GROUP, **ODR_FETCH}
    )
    got, first_chunk, checksum = 0, 0, 0
    t_first = 0.0
    c0, t_sub = _cpu(), time.perf_counter()
    c.subscribe([topic])
    poll = c.poll
    while got < n:
        records = poll(1.0)
        for r in records:
            # every field of every record, read
            _t, _p, o, _ts, _tt, _k, v, _h = r
            checksum += o + len(v)
        got += len(records)
        if records and not t_first:
            t_first, first_chunk = time.perf_counter(), len(records)
    t_last, c1 = time.perf_counter(), _cpu()
    c.close()
    return {
        "seconds": t_last - t_first,
        "records_in_window": got - first_chunk,
        "join_s": t_first - t_sub,
        "cpu_s": c1 - c0,
        "checksum": checksum,
        "records": got,
    }


def consume_confluent(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.partition.eof": False,
            **GROUP,
            **CK_FETCH,
        }
    )
    got, first_chunk, checksum = 0, 0, 0
    t_first = 0.0
    c0, t_sub = _cpu(), time.perf_counter()
    c.subscribe([topic])
    consume = c.consume
    while got < n:
        msgs = consume(num_messages=BATCH, timeout=1.0)
        for m in msgs:
            if m.error() is not None:
                raise SystemExit(f"confluent-kafka consumer: {m.error()}")
            # every field of every record, read
            m.topic(), m.partition(), m.timestamp(), m.key(), m.headers()
            checksum += m.offset() + len(m.value())
        got += len(msgs)
        if msgs and not t_first:
            t_first, first_chunk = time.perf_counter(), len(msgs)
    t_last, c1 = time.perf_counter(), _cpu()
    c.close()
    return {
        "seconds": t_last - t_first,
        "records_in_window": got - first_chunk,
        "join_s": t_first - t_sub,
        "cpu_s": c1 - c0,
        "checksum": checksum,
        "records": got,
    }


def profile_odradek(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    """The Odradek run under cProfile (all threads' own time is not visible to cProfile: this
    profiles the calling thread and, separately, the consumer's I/O thread)."""
    import threading

    profiles: list[cProfile.Profile] = []

    def profiled_thread_run(self: threading.Thread, _orig: Any = threading.Thread.run) -> None:
        prof = cProfile.Profile()
        profiles.append(prof)
        prof.runcall(_orig, self)

    threading.Thread.run = profiled_thread_run  # type: ignore[method-assign]
    main_prof = cProfile.Profile()
    result = main_prof.runcall(consume_odradek, bootstrap, topic, n)

    def top(profs: list[cProfile.Profile], k: int = 15) -> list[str]:
        out = io.StringIO()
        stats = pstats.Stats(profs[0], stream=out)
        for p in profs[1:]:
            stats.add(p)
        stats.sort_stats("tottime").print_stats(k)
        lines = [ln.rstrip() for ln in out.getvalue().splitlines() if ln.strip()]
        start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
        return lines[start : start + k + 1]

    return {
        "seconds": result["seconds"],
        "caller_thread": top([main_prof]),
        "io_thread": top(profiles) if profiles else [],
    }


def child(kind: str, bootstrap: str, topic: str, n: int) -> None:
    runners = {
        "odradek": consume_odradek,
        "confluent_kafka": consume_confluent,
        "profile": profile_odradek,
    }
    print(json.dumps(runners[kind](bootstrap, topic, n)))


# ------------------------------------------------------------------------------------------------
# parent


def run_child(kind: str, bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, bootstrap, topic, str(n)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    if r.returncode != 0:
        raise SystemExit(f"{kind} failed ({r.returncode}): {r.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def fill_topic(admin: AdminClient, bootstrap: str, topic: str, partitions: int, n: int) -> None:
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1048576})
    value = b"x" * VALUE_BYTES
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.0005)
        if i % 10000 == 9999:
            p.poll(0)
    if p.flush(120):
        raise SystemExit("could not write the benchmark's records")


def summary(samples: list[float], digits: int = 0) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), digits), "samples": [round(s, digits) for s in samples]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer records and repeats")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--profile", action="store_true", help="add a cProfile of one Odradek run")
    ap.add_argument("--child", nargs=4, metavar=("KIND", "BOOTSTRAP", "TOPIC", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, bootstrap, topic, n = args.child
        child(kind, bootstrap, topic, int(n))
        return
    plan = dict(QUICK if args.quick else FULL)
    for key in ("records", "repeats", "partitions"):
        if getattr(args, key):
            plan[key] = getattr(args, key)
    n, repeats, partitions = plan["records"], plan["repeats"], plan["partitions"]

    started = time.monotonic()
    profile: dict[str, Any] | None = None
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in CONSUMERS}
    with tempfile.TemporaryDirectory(prefix="odradek-bench-group-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"group.initial.rebalance.delay.ms": 0})
        broker.start()
        try:
            bootstrap = broker.bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topic = f"group-bench-{uuid.uuid4().hex[:6]}"
            fill_topic(admin, bootstrap, topic, partitions, n)
            for rep in range(repeats):
                order = CONSUMERS[rep % 2 :] + CONSUMERS[: rep % 2]
                for kind in order:
                    runs[kind].append(run_child(kind, bootstrap, topic, n))
            if args.profile:
                profile = run_child("profile", bootstrap, topic, n)
            with contextlib.suppress(Exception):
                admin.delete_topics([topic])[topic].result(30)
        finally:
            broker.stop()

    def side(kind: str) -> dict[str, Any]:
        rs = runs[kind]
        rates = [r["records_in_window"] / r["seconds"] for r in rs]
        return {
            "records_per_s": summary(rates),
            "mb_per_s": round(statistics.median(rates) * VALUE_BYTES / 1e6, 1),
            "cpu_us_per_record": round(statistics.median(r["cpu_s"] for r in rs) / n * 1e6, 2),
            "join_s": round(statistics.median(r["join_s"] for r in rs), 3),
            "all_records": all(r["records"] == n for r in rs),
        }

    sides = {k: side(k) for k in CONSUMERS}
    checksums = {r["checksum"] for k in CONSUMERS for r in runs[k]}
    ratio = round(sides["odradek"]["records_per_s"]["median"] / sides["confluent_kafka"]["records_per_s"]["median"], 3)
    out: dict[str, Any] = {
        "benchmark": "client_group",
        "window": "first record in hand to the last (records after the first chunk)",
        "records": n,
        "value_bytes": VALUE_BYTES,
        "partitions": partitions,
        "repeats": repeats,
        "settings": {"group": GROUP, "odradek": {**ODR_FETCH, "max.poll.records": BATCH}, "confluent_kafka": CK_FETCH},
        "consume": sides,
        "ratio": ratio,
        "target": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
        "checksums_agree": len(checksums) == 1,
        "python": platform.python_version(),
        "librdkafka": ck.libversion()[0],
        "cpus": os.cpu_count(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    if profile is not None:
        out["profile"] = profile
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
