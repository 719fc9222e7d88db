"""Benchmark of topics as Iceberg tables: ingest with the table writer on vs off, on the same
``odradek serve`` broker in the same run.

Run: ``python benchmarks/tables.py [--quick] [--records N] [--latency]`` (or ``python -m
benchmarks.tables``).  Prints one JSON object.  Needs ``odradek[tables]`` (PyIceberg).

Each trial produces ``--records`` records of 100 bytes (confluent-kafka, ``acks=all``,
``linger.ms`` 5) to a new topic of 2 partitions:

- ``off``: ``odradek.iceberg.mode=off``; the figure is records/s from the first send to the last
  acknowledgement, and the broker's CPU seconds per record over the same window;
- ``on``: ``odradek.iceberg.mode=key_value`` with ``odradek.iceberg.commit.interval.ms=1000``;
  the figure is records/s from the first send until the table (read through PyIceberg) holds
  every record, and the broker's CPU per record over that window (its writer's work included).

A first small ``on`` trial, not counted, imports PyIceberg and creates the catalog.  Trials
alternate (off, on, on, off, ...); figures are medians.  With ``--latency`` it then
measures, at the default commit interval (60 s), the time from producing one record to seeing
it in the table, a few times (several minutes).

The machine is a shared 2-core VM and the figures move between runs: provisional.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks._proc import cpu_seconds

FULL = {"repeats": 3, "records": 200_000}
QUICK = {"repeats": 1, "records": 50_000}
VALUE = b"x" * 100
PARTITIONS = 2
LATENCY_SAMPLES = 3


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


def latency(broker: BrokerProcess) -> list[float]:
    """Seconds from producing one record to seeing it in the table, at the default commit interval."""
    topic = "bench-latency"
    _create(broker.bootstrap, topic, {"odradek.iceberg.mode": "key_value"})
    out = []
    for i in range(LATENCY_SAMPLES):
        t0 = time.perf_counter()
        _produce(broker.bootstrap, topic, 1)
        _wait_rows(broker.data_dir, topic, i + 1, timeout=300)
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, help="records per trial (default 200,000; --quick 50,000)")
    ap.add_argument("--latency", action="store_true", help="also the produce-to-table latency at the default interval")
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
    lat: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-tables-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": PARTITIONS})
        broker.start()
        try:
            trial(broker, "on", -1, 1000)  # warm-up, not counted: PyIceberg's import, the catalog's creation
            for n in range(plan["repeats"]):
                for kind in ("off", "on") if n % 2 == 0 else ("on", "off"):
                    results[kind].append(trial(broker, kind, n, plan["records"]))
            if args.latency:
                lat = latency(broker)
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
        out["latency_s_at_default_interval"] = [round(x, 2) for x in lat]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
