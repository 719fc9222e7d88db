"""Benchmark of Odradek's Python client against confluent-kafka (librdkafka), both talking to
the same ``odradek serve`` broker in the same run.

Run: ``python benchmarks/client.py [--quick]`` (or ``python -m benchmarks.client``). Prints one
JSON object (~1 min; ``--quick`` ~10 s). One broker process on 127.0.0.1 (data in a temporary
directory, default flush policy) serves the whole run; every measurement runs in a fresh child
process, one at a time, in an order that alternates and rotates from repeat to repeat. Figures
are medians over the repeats; ratios are Odradek / confluent-kafka of the medians of this run.

* ``produce`` - ``records`` x 100-byte values, no key, no headers, to a fresh 1-partition topic
  per run, with the same settings for every client: ``acks=1, linger.ms=5,
  batch.size=1048576, compression.type=none, enable.idempotence=false`` (idempotence off for
  both: librdkafka's default, and acks=1 rules it out in Odradek). Window: the first
  ``send()`` / ``produce()`` to the last acknowledgement (the last record's delivery report).
  Before the window each producer is connected and has sent one record (acknowledged).

  - ``odradek_sync``: :class:`odradek.client.Producer` - ``send()`` per record (each returns a
    future of the record's metadata); ``on_delivery`` on the last record marks the end.
  - ``odradek_async``: :class:`odradek.client.AsyncProducer` - ``await send()`` per record on
    the default asyncio loop, then ``await`` of the last future.
  - ``confluent_kafka``: ``produce()`` per record with a delivery report for every record (a
    Python ``on_delivery`` callback, as ``benchmarks/broker.py`` does: the way a
    confluent-kafka application learns the outcome of each record, which Odradek's futures
    give), ``poll(0)`` every 10,000 records and ``poll()`` on ``BufferError``.
  - ``confluent_kafka_last_report_only``: the same without per-record callbacks: only the last
    record asks for a delivery report (the least Python work confluent-kafka can do).

  - ``odradek_sync_pure``: ``odradek_sync`` with the compiled record code off
    (``ODRADEK_PURE_PYTHON=1``; see :mod:`odradek.records.speedups`).

  Ratios are given against both; the target (>= 1.0) applies to ``odradek_sync`` against
  ``confluent_kafka``, and ``ratios_vs_last_report_only`` says how far the other reference is.
* ``consume`` - the low-level consumer: read the ``records`` back from offset 0 of one
  partition (written once, before the repeats, by confluent-kafka with the produce settings),
  building every field of every record (topic, partition, offset, timestamp, key, value,
  headers) and reading them: :class:`odradek.client.SimpleConsumer` ``fetch()`` in a loop vs
  confluent-kafka's ``Consumer`` with ``assign()`` and ``consume(num_messages=10000)`` (no
  group, ``enable.auto.commit=false``; ``fetch.queue.backoff.ms=10``, as in
  ``benchmarks/broker.py``). Both fetch with ``max.partition.fetch.bytes=1048576`` (both
  defaults) and ``fetch.max.wait.ms=500``. Window: first record in hand to the last; the
  rate counts the records delivered after the first chunk (both clients return records in
  chunks, so the first chunk's work falls before the window for both).  Target >= 1.5;
  ``odradek_simple_consumer_pure`` is the same with the compiled record code off.

Every child also reports its CPU time (user+system of the whole process, librdkafka's threads
included) per record. The machine is a shared 2-core VM: the broker, the client and
librdkafka's threads share both cores, so every figure includes the broker's work; single
figures move by 10-20 % between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
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
FULL = {"records": 1_000_000, "repeats": 5}
QUICK = {"records": 200_000, "repeats": 2}
TARGETS = {"produce_ratio": 1.0, "consume_ratio": 1.5}  # issue 19: sync Producer, SimpleConsumer
PRODUCE_SETTINGS: dict[str, Any] = {
    "acks": 1,
    "linger.ms": 5,
    "batch.size": 1048576,
    "compression.type": "none",
    "enable.idempotence": False,
}
FETCH_SETTINGS: dict[str, Any] = {"max.partition.fetch.bytes": 1048576, "fetch.max.wait.ms": 500}
# the same two settings under librdkafka's names
CK_FETCH_SETTINGS: dict[str, Any] = {"max.partition.fetch.bytes": 1048576, "fetch.wait.max.ms": 500}
PRODUCERS = [
    "odradek_sync",
    "confluent_kafka",
    "odradek_async",
    "confluent_kafka_last_report_only",
    "odradek_sync_pure",
]
CONSUMERS = ["odradek_simple_consumer", "confluent_kafka", "odradek_simple_consumer_pure"]
#: ``*_pure``: the same measurement with the compiled record code off (ODRADEK_PURE_PYTHON=1)
PURE = "_pure"
CHILD_TIMEOUT = 600


# ------------------------------------------------------------------------------------------------
# children: one measurement each, result as one JSON line on stdout


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def produce_odradek_sync(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    from odradek.client import Producer

    value = b"x" * VALUE_BYTES
    end: list[float] = []
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCE_SETTINGS})
    p.send(topic, value).result(30)  # connected, metadata known: outside the window
    send = p.send
    c0, t0 = _cpu(), time.perf_counter()
    for _ in range(n - 1):
        send(topic, value)
    send(topic, value, on_delivery=lambda err, md: end.append(time.perf_counter()))
    p.flush(120)
    c1 = _cpu()
    p.close()
    if not end:
        raise SystemExit("odradek producer: the last record was not acknowledged")
    return {"seconds": end[0] - t0, "cpu_s": c1 - c0}


def produce_odradek_async(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    from odradek.client import AsyncProducer

    value = b"x" * VALUE_BYTES

    async def main() -> dict[str, Any]:
        p = AsyncProducer({"bootstrap.servers": bootstrap, **PRODUCE_SETTINGS})
        await p.start()
        await (await p.send(topic, value))  # connected, metadata known: outside the window
        send = p.send
        c0, t0 = _cpu(), time.perf_counter()
        for _ in range(n - 1):
            await send(topic, value)
        await (await send(topic, value))
        t1, c1 = time.perf_counter(), _cpu()
        await p.close()
        return {"seconds": t1 - t0, "cpu_s": c1 - c0}

    return asyncio.run(main())


def produce_confluent(bootstrap: str, topic: str, n: int, every_report: bool) -> dict[str, Any]:
    value = b"x" * VALUE_BYTES
    state = {"acked": 0, "errors": 0, "end": 0.0}

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
        state["acked"] += 1
        if state["acked"] == n:
            state["end"] = time.perf_counter()

    def last(err: Any, _msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
        state["end"] = time.perf_counter()

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, **PRODUCE_SETTINGS}
    p = ck.Producer(config)
    p.produce(topic, value)  # connected, metadata known: outside the window
    p.flush(30)
    produce, poll = p.produce, p.poll
    c0, t0 = _cpu(), time.perf_counter()
    for i in range(n - 1):
        while True:
            try:
                if every_report:
                    produce(topic, value, on_delivery=report)
                else:
                    produce(topic, value)
                break
            except BufferError:
                poll(0.0005)
        if i % 10000 == 9999:
            poll(0)
    while True:
        try:
            produce(topic, value, on_delivery=report if every_report else last)
            break
        except BufferError:
            poll(0.0005)
    deadline = time.monotonic() + 120
    while not state["end"] and time.monotonic() < deadline:
        p.flush(1.0)
    c1 = _cpu()
    if not state["end"] or state["errors"]:
        raise SystemExit(f"confluent-kafka producer: {state}")
    return {"seconds": state["end"] - t0, "cpu_s": c1 - c0}


def consume_odradek(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    from odradek.client import SimpleConsumer

    c = SimpleConsumer({"bootstrap.servers": bootstrap, **FETCH_SETTINGS})
    c.partitions_for(topic)  # connected, metadata known: outside the window
    offset, got, first_chunk = 0, 0, 0
    t_first = 0.0
    checksum = 0
    c0 = _cpu()
    while got < n:
        records = c.fetch(topic, 0, offset)
        for r in records:
            # every field of every record, read
            _t, _p, o, _ts, _tt, _k, v, _h = r
            checksum += o + len(v)
        got += len(records)
        offset = records.next_offset
        if records and not t_first:
            t_first, first_chunk = time.perf_counter(), len(records)
    t_last, c1 = time.perf_counter(), _cpu()
    c.close()
    return {
        "seconds": t_last - t_first,
        "records_in_window": got - first_chunk,
        "cpu_s": c1 - c0,
        "checksum": checksum,
    }


def consume_confluent(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.queue.backoff.ms": 10,
            **CK_FETCH_SETTINGS,
        }
    )
    c.list_topics(topic, timeout=30)  # connected, metadata known: outside the window
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got, first_chunk = 0, 0
    t_first = 0.0
    checksum = 0
    consume = c.consume
    c0 = _cpu()
    while got < n:
        msgs = consume(num_messages=10000, timeout=1.0)
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
        "cpu_s": c1 - c0,
        "checksum": checksum,
    }


def child(kind: str, bootstrap: str, topic: str, n: int) -> None:
    runners = {
        "produce:odradek_sync": lambda: produce_odradek_sync(bootstrap, topic, n),
        "produce:odradek_async": lambda: produce_odradek_async(bootstrap, topic, n),
        "produce:confluent_kafka": lambda: produce_confluent(bootstrap, topic, n, every_report=True),
        "produce:confluent_kafka_last_report_only": lambda: produce_confluent(
            bootstrap, topic, n, every_report=False
        ),
        "consume:odradek_simple_consumer": lambda: consume_odradek(bootstrap, topic, n),
        "consume:confluent_kafka": lambda: consume_confluent(bootstrap, topic, n),
    }
    print(json.dumps(runners[kind]()))


# ------------------------------------------------------------------------------------------------
# parent


def run_child(kind: str, bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("ODRADEK_PURE_PYTHON", None)
    if kind.endswith(PURE):
        kind = kind[: -len(PURE)]
        env["ODRADEK_PURE_PYTHON"] = "1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, bootstrap, topic, str(n)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{kind} failed ({r.returncode}): {r.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def create_topic(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while (
        topic not in admin.list_topics(topic, timeout=10).topics
        or not admin.list_topics(topic, timeout=10).topics[topic].partitions
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"topic {topic} not in metadata")
        time.sleep(0.05)  # poll interval, bounded by the deadline above


def delete_topic(admin: AdminClient, topic: str) -> None:
    with contextlib.suppress(Exception):
        admin.delete_topics([topic])[topic].result(30)


def fill_topic(bootstrap: str, topic: str, n: int) -> None:
    """Write the consume benchmark's records (with confluent-kafka, the produce settings)."""
    p = ck.Producer({"bootstrap.servers": bootstrap, **PRODUCE_SETTINGS})
    value = b"x" * VALUE_BYTES
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.0005)
        if i % 10000 == 9999:
            p.poll(0)
    if p.flush(120):
        raise SystemExit("could not write the consume benchmark's records")


def rotated(items: list[str], k: int) -> list[str]:
    k %= len(items)
    return items[k:] + items[:k]


def summary(samples: list[float], digits: int = 0) -> dict[str, Any]:
    return {
        "median": round(statistics.median(samples), digits),
        "samples": [round(s, digits) for s in samples],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer records and repeats")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--child", nargs=4, metavar=("KIND", "BOOTSTRAP", "TOPIC", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, bootstrap, topic, n = args.child
        child(kind, bootstrap, topic, int(n))
        return
    plan = dict(QUICK if args.quick else FULL)
    if args.records:
        plan["records"] = args.records
    if args.repeats:
        plan["repeats"] = args.repeats
    n, repeats = plan["records"], plan["repeats"]

    import odradek

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="odradek-bench-client-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        try:
            bootstrap = broker.bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            produce_runs: dict[str, list[dict[str, Any]]] = {k: [] for k in PRODUCERS}
            consume_runs: dict[str, list[dict[str, Any]]] = {k: [] for k in CONSUMERS}
            for rep in range(repeats):
                for kind in rotated(PRODUCERS, rep):
                    topic = f"produce-{kind}-{rep}-{uuid.uuid4().hex[:6]}"
                    create_topic(admin, topic)
                    produce_runs[kind].append(run_child(f"produce:{kind}", bootstrap, topic, n))
                    delete_topic(admin, topic)
            consume_topic = f"consume-{uuid.uuid4().hex[:6]}"
            create_topic(admin, consume_topic)
            fill_topic(bootstrap, consume_topic, n)
            for rep in range(repeats):
                for kind in rotated(CONSUMERS, rep):
                    consume_runs[kind].append(run_child(f"consume:{kind}", bootstrap, consume_topic, n))
            delete_topic(admin, consume_topic)
        finally:
            broker.stop()

    def produce_side(kind: str) -> dict[str, Any]:
        runs = produce_runs[kind]
        rates = [n / r["seconds"] for r in runs]
        return {
            "records_per_s": summary(rates),
            "mb_per_s": round(statistics.median(rates) * VALUE_BYTES / 1e6, 1),
            "cpu_us_per_record": round(statistics.median(r["cpu_s"] for r in runs) / n * 1e6, 2),
        }

    def consume_side(kind: str) -> dict[str, Any]:
        runs = consume_runs[kind]
        rates = [r["records_in_window"] / r["seconds"] for r in runs]
        sums = {r["checksum"] for r in runs}
        return {
            "records_per_s": summary(rates),
            "cpu_us_per_record": round(statistics.median(r["cpu_s"] for r in runs) / n * 1e6, 2),
            "checksums_agree": len(sums) == 1,
        }

    prod = {k: produce_side(k) for k in PRODUCERS}
    cons = {k: consume_side(k) for k in CONSUMERS}

    def ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
        return round(a["records_per_s"]["median"] / b["records_per_s"]["median"], 3)

    produce_ratios = {
        "sync_vs_confluent_kafka": ratio(prod["odradek_sync"], prod["confluent_kafka"]),
        "async_vs_confluent_kafka": ratio(prod["odradek_async"], prod["confluent_kafka"]),
    }
    produce_ratios_ro = {
        "sync_vs_confluent_kafka_last_report_only": ratio(
            prod["odradek_sync"], prod["confluent_kafka_last_report_only"]
        ),
        "async_vs_confluent_kafka_last_report_only": ratio(
            prod["odradek_async"], prod["confluent_kafka_last_report_only"]
        ),
    }
    produce_ratios["sync_pure_python_vs_confluent_kafka"] = ratio(prod["odradek_sync_pure"], prod["confluent_kafka"])
    produce_ratios["sync_compiled_vs_pure_python"] = ratio(prod["odradek_sync"], prod["odradek_sync_pure"])
    consume_ratio = ratio(cons["odradek_simple_consumer"], cons["confluent_kafka"])
    consume_pure_ratio = ratio(cons["odradek_simple_consumer_pure"], cons["confluent_kafka"])
    from odradek.records import speedups
    result = {
        "benchmark": "client",
        "odradek_version": getattr(odradek, "__version__", "?"),
        "confluent_kafka_version": ck.__version__,
        "librdkafka_version": ck.libversion()[0],
        "python": platform.python_version(),
        "record_code": speedups.implementation() + " (the *_pure runs: pure-python)",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "plan": {**plan, "value_bytes": VALUE_BYTES, "quick": args.quick},
        "broker": "one `odradek serve` process on 127.0.0.1 (ephemeral port), data dir on local disk, default flush policy",
        "order": "every measurement in a fresh child process, one at a time; order rotated each repeat",
        "produce": {
            "settings": PRODUCE_SETTINGS,
            "idempotence": "off for both",
            "topic": "fresh 1-partition topic per run, records without key (one partition)",
            "window": "first send()/produce() to the last record's acknowledgement",
            **prod,
            "ratios": produce_ratios,
            "ratios_vs_last_report_only": produce_ratios_ro,
            "target": TARGETS["produce_ratio"],
            "target_met": produce_ratios["sync_vs_confluent_kafka"] >= TARGETS["produce_ratio"],
        },
        "consume": {
            "settings": {"odradek": FETCH_SETTINGS, "confluent_kafka": CK_FETCH_SETTINGS},
            "window": "first record in hand to the last; rate = records after the first chunk / window",
            "decoded": "topic, partition, offset, timestamp, key, value, headers of every record, each read",
            **cons,
            "ratio": consume_ratio,
            "ratio_pure_python": consume_pure_ratio,
            "compiled_vs_pure_python": ratio(cons["odradek_simple_consumer"], cons["odradek_simple_consumer_pure"]),
            "target": TARGETS["consume_ratio"],
            "target_met": consume_ratio >= TARGETS["consume_ratio"],
        },
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
