"""Benchmark of topics as Iceberg tables: ingest with the table writer on vs off, on the same
``odradek serve`` broker in the same run.

Run: ``python benchmarks/tables.py [--quick] [--records N] [--latency-samples N] [--no-latency]``
(or ``python -m benchmarks.tables``).  Prints one JSON object.  Needs ``odradek[tables]``
(PyIceberg).

Each trial produces ``--records`` records of 100 bytes (confluent-kafka, ``acks=all``,
``linger.ms`` 5) to a new topic of 2 partitions:

- ``off``: ``odradek.iceberg.mode=off``; the figure is records/s from the first send to the last
  acknowledgement, and the broker's CPU seconds per record over the same window;
- ``on``: ``odradek.iceberg.mode=key_value`` with ``odradek.iceberg.commit.interval.ms=1000``;
  the figure is records/s from the first send until the table (read through PyIceberg) holds
  every record, and the broker's CPU per record over that window (its writer's work included).

A first small ``on`` trial, not counted, imports PyIceberg and creates the catalog.  Trials
alternate (off, on, on, off, ...); figures are medians.

Then, on the same broker, the end-to-end latency: the time from producing one record (its send)
to a PyIceberg scan of the table returning it (polled every 50 ms), at the default commit
interval (``odradek.iceberg.commit.interval.ms`` 60000) and, for reference, at 1000 ms.  Each
sample is its own topic, created ahead so that its writer runs; the record is sent at a random
moment of the interval (the writer's phase is uniform, as for a record arriving at any time) and
the samples of one interval run at once, so the default interval's take about two minutes.
Reported: each sample, p50 and max (expected: about half the interval, then the commit).

The machine is a shared 2-core VM and the figures move between runs: provisional.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

try:
    from benchmarks._proc import cpu_seconds
    from odradek.testing import BrokerProcess
except ImportError:  # run as a script (``python benchmarks/tables.py``), or from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import cpu_seconds
    from odradek.testing import BrokerProcess

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

FULL = {"repeats": 3, "records": 200_000}
QUICK = {"repeats": 1, "records": 50_000}
VALUE = b"x" * 100
PARTITIONS = 2
LATENCY_SAMPLES = 5
#: the commit intervals the latency is measured at: the default, and a short one for reference
LATENCY_INTERVALS_MS = (60000, 1000)
_POLL_S = 0.05


def _create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=configs)]).values():
        f.result(30)


def _produce(bootstrap: str, topic: str, records: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10000,
                     "queue.buffering.max.messages": 1_000_000})
    for i in range(records):
        while True:
            try:
                p.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(300) != 0:
        raise RuntimeError("records not acknowledged")


def _rows(catalog: Any, topic: str) -> int:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        snap = catalog.load_table(("odradek", topic)).current_snapshot()
    except NoSuchTableError:
        return 0
    return int(snap.summary.additional_properties.get("total-records", 0)) if snap is not None else 0


def _catalog(data_dir: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    home = data_dir / "iceberg"
    return SqlCatalog("odradek", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri())


def _wait_rows(data_dir: Path, topic: str, count: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _rows(_catalog(data_dir), topic) >= count:
                return
        except Exception:  # the catalog's database created or busy
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{topic}: the table does not hold {count} records within {timeout} s")


def trial(broker: BrokerProcess, kind: str, n: int, records: int) -> dict[str, float]:
    topic = f"bench-{kind}-{n if n >= 0 else 'warmup'}"
    configs = {"odradek.iceberg.mode": "key_value", "odradek.iceberg.commit.interval.ms": "1000"} if kind == "on" else {}
    _create(broker.bootstrap, topic, configs)
    cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
    _produce(broker.bootstrap, topic, records)
    if kind == "on":
        _wait_rows(broker.data_dir, topic, records)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(broker.pid) - cpu0
    return {"records_per_s": records / elapsed, "broker_cpu_us_per_record": cpu / records * 1e6}


def _offset_in_table(catalog: Any, topic: str, offset: int) -> bool:
    """A PyIceberg scan of the table returns partition 0's record at ``offset``."""
    table = catalog.load_table(("odradek", topic))
    if table.current_snapshot() is None:
        return False
    return bool(table.scan(row_filter=f"partition == 0 and offset == {offset}").to_arrow().num_rows)


def _latency_sample(broker: BrokerProcess, topic: str, delay: float, out: list[float], errors: list[str]) -> None:
    try:
        time.sleep(delay)
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
        placed: list[int | None] = []
        t0 = time.perf_counter()
        p.produce(topic, VALUE, partition=0, on_delivery=lambda err, m: placed.append(m.offset()) if err is None else None)
        if p.flush(60) != 0 or not placed or placed[0] is None:
            raise RuntimeError("the record was not acknowledged")
        catalog = _catalog(broker.data_dir)
        deadline = t0 + 600
        while time.perf_counter() < deadline:
            try:
                if _offset_in_table(catalog, topic, int(placed[0])):
                    out.append(time.perf_counter() - t0)
                    return
            except Exception:  # the catalog's database busy
                pass
            time.sleep(_POLL_S)
        raise RuntimeError(f"{topic}: the record is not in the table within 600 s")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")


def latency(broker: BrokerProcess, interval_ms: int, samples: int) -> dict[str, Any]:
    """Seconds from producing one record to a PyIceberg scan seeing it, ``samples`` times at
    ``odradek.iceberg.commit.interval.ms=interval_ms``."""
    topics = [f"bench-latency-{interval_ms}-{i}" for i in range(samples)]
    for topic in topics:
        _create(broker.bootstrap, topic, {"odradek.iceberg.mode": "key_value",
                                          "odradek.iceberg.commit.interval.ms": str(interval_ms)})
    catalog = _catalog(broker.data_dir)
    for topic in topics:  # each writer has made its table: it is in its interval's sleep
        deadline = time.monotonic() + 120
        while True:
            try:
                catalog.load_table(("odradek", topic))
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic}: no table within 120 s") from None
                time.sleep(_POLL_S)
    rng = random.Random(interval_ms)
    out: list[float] = []
    errors: list[str] = []
    threads = [threading.Thread(target=_latency_sample, args=(broker, t, rng.uniform(0, interval_ms / 1000), out, errors))
               for t in topics]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"latency at {interval_ms} ms: {errors}")
    return {"commit_interval_ms": interval_ms, "samples_s": sorted(round(x, 3) for x in out),
            "p50_s": round(statistics.median(out), 3), "max_s": round(max(out), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, help="records per trial (default 200,000; --quick 50,000)")
    ap.add_argument("--latency-samples", type=int, default=LATENCY_SAMPLES,
                    help=f"records timed from produce to the table per commit interval (default {LATENCY_SAMPLES})")
    ap.add_argument("--no-latency", action="store_true", help="only the ingest trials (the latency takes ~2 minutes)")
    args = ap.parse_args(argv)
    plan = dict(QUICK if args.quick else FULL)
    if args.records:
        plan["records"] = args.records
    try:
        import pyiceberg  # noqa: F401
    except ImportError:
        print(json.dumps({"benchmark": "tables", "error": "needs odradek[tables] (PyIceberg)"}))
        return 2
    results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    lat: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-tables-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": PARTITIONS})
        broker.start()
        try:
            trial(broker, "on", -1, 1000)  # warm-up, not counted: PyIceberg's import, the catalog's creation
            for n in range(plan["repeats"]):
                for kind in ("off", "on") if n % 2 == 0 else ("on", "off"):
                    results[kind].append(trial(broker, kind, n, plan["records"]))
            if not args.no_latency:
                lat = [latency(broker, ms, args.latency_samples) for ms in LATENCY_INTERVALS_MS]
        finally:
            broker.stop()

    def med(kind: str, key: str) -> float:
        return round(statistics.median(r[key] for r in results[kind]), 2)

    out: dict[str, Any] = {
        "benchmark": "tables",
        "records_per_trial": plan["records"],
        "repeats": plan["repeats"],
        "off": {"records_per_s": med("off", "records_per_s"), "broker_cpu_us_per_record": med("off", "broker_cpu_us_per_record")},
        "on": {"table_records_per_s": med("on", "records_per_s"),
               "broker_cpu_us_per_record": med("on", "broker_cpu_us_per_record")},
        "on_over_off": round(med("on", "records_per_s") / med("off", "records_per_s"), 3),
        "trials": results,
        "python": platform.python_version(),
        "provisional": "a shared 2-core VM: re-run on a quiet machine",
    }
    if lat:
        out["produce_to_table_latency"] = lat
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
