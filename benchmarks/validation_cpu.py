"""Broker CPU per million records produced, before and after reading every record on append
(issue 39: a v2 batch's records checked against its header, as Kafka's LogValidator does), in
the same run.

Run: ``.venv/bin/python benchmarks/validation_cpu.py [--quick] [--baseline REV]`` (or ``python -m
benchmarks.validation_cpu``). Prints one JSON object (~4 min; ``--quick`` ~1 min). Needs git, gcc
and Debian's ``librdkafka-dev`` (the compiled load generator, ``odradek.cli._loadgen``).

"Before" is the real old code: the baseline revision (``--baseline``; by default the parent of
the commit that added ``src/odradek/records/check.py``) is extracted with ``git archive`` into a
temporary directory and its C extension (``odradek.records._speedups``) compiled in place there;
"after" is this checkout (``src/``, its extension as built). Each run starts a fresh broker
(``odradek serve`` on an empty data directory, default settings) with ``PYTHONPATH`` pointing at
one of the two trees, creates a topic of 1 or 16 partitions, warms it up with a few records, then
the load generator produces ``records`` x 100 B values (text-like, so that lz4 compresses them),
one producer, acks=1, linger.ms=5, batch.size=1048576, round-robin over the partitions, with
compression ``none`` or ``lz4``. Broker CPU is the broker process's user + system time (all
threads, ``benchmarks._proc.cpu_seconds``) over the produce, per million records. Runs alternate
before/after (the order flips every repeat); figures are medians over the repeats, and
``ratio`` = after / before of this run's medians. Target: ratio <= 1.15 for uncompressed batches
(``met``); the lz4 figures are reported (decompressing a batch to read its records is paid per
batch there, as in Kafka). Both brokers must report the compiled record code in use
(``compiled``): a baseline whose extension did not build would measure the pure-Python decoder.
The machine is a shared 2-core VM: broker and load generator share both cores; single figures
move by 10-20 % between runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

try:
    from benchmarks._proc import cpu_seconds
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import cpu_seconds
    from odradek.testing import BrokerProcess

from odradek.cli import _loadgen

ROOT = Path(__file__).resolve().parents[1]

TARGET_RATIO = 1.15
VALUE_BYTES = 100
PRODUCER = {"linger.ms": 5, "batch.size": 1048576}
FULL = {"records": 1_000_000, "repeats": 3, "warmup": 20_000}
QUICK = {"records": 200_000, "repeats": 1, "warmup": 10_000}
CHECK_FILE = "src/odradek/records/check.py"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def default_baseline() -> str:
    """The parent of the commit that added the record check (the code before issue 39's validation)."""
    added = git("log", "--diff-filter=A", "--format=%H", "--", CHECK_FILE).splitlines()
    if not added:
        raise SystemExit(f"no commit adds {CHECK_FILE}: give --baseline REV")
    return git("rev-parse", f"{added[-1]}^")


def extract(rev: str, into: Path) -> Path:
    """``rev``'s tree (``git archive``) in ``into``, its C extension compiled in place; its ``src``."""
    data = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    build_extension(into)
    return into / "src"


def build_extension(tree: Path) -> None:
    """Compile ``odradek.records._speedups`` in place, as ``setup.py build_ext --inplace`` would."""
    source = tree / "src" / "odradek" / "records" / "_speedups.c"
    target = source.with_name("_speedups" + str(sysconfig.get_config_var("EXT_SUFFIX")))
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise SystemExit("no C compiler to build the baseline's extension")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(target)],
        check=True,
    )


def implementation(src: Path) -> str:
    """Which record code a broker running from ``src`` uses ("compiled" or "pure-python")."""
    out = subprocess.run(
        [sys.executable, "-c", "from odradek.records import speedups; print(speedups.implementation())"],
        env={**os.environ, "PYTHONPATH": str(src)}, check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def one_run(src: Path, scratch: Path, partitions: int, codec: str, records: int, warmup: int) -> dict[str, float]:
    """A fresh broker from ``src``; the broker's CPU over one load generator produce."""
    data_dir = Path(tempfile.mkdtemp(dir=scratch))
    broker = BrokerProcess(data_dir, env={"PYTHONPATH": str(src)})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("bench", partitions, 1)])["bench"].result(timeout=30)
        common: dict[str, Any] = {"record_size": VALUE_BYTES, "acks": 1, "compression": codec, "config": PRODUCER}
        if warmup:
            _loadgen.run_produce(broker.bootstrap, "bench", warmup, partitions=partitions, **common)
        c0 = cpu_seconds(broker.pid)
        r = _loadgen.run_produce(broker.bootstrap, "bench", records, partitions=partitions, **common)
        cpu = cpu_seconds(broker.pid) - c0
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return {"broker_cpu_s_per_million": cpu / records * 1e6, "records_per_s": float(r["records_per_s"])}


def summary(runs: dict[str, list[dict[str, float]]], codec: str) -> dict[str, Any]:
    med = {
        side: {k: statistics.median(x[k] for x in rs) for k in ("broker_cpu_s_per_million", "records_per_s")}
        for side, rs in runs.items()
    }
    ratio = med["after"]["broker_cpu_s_per_million"] / med["before"]["broker_cpu_s_per_million"]
    out: dict[str, Any] = {
        side: {
            "broker_cpu_s_per_million": round(m["broker_cpu_s_per_million"], 3),
            "records_per_s": round(m["records_per_s"]),
            "runs": [round(x["broker_cpu_s_per_million"], 3) for x in runs[side]],
        }
        for side, m in med.items()
    }
    out["ratio"] = round(ratio, 3)
    out["records_per_s_ratio"] = round(med["after"]["records_per_s"] / med["before"]["records_per_s"], 3)
    if codec == "none":
        out["target"] = TARGET_RATIO
        out["met"] = ratio <= TARGET_RATIO
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, one repeat (~1 min)")
    parser.add_argument("--baseline", help="the revision measured as 'before' (default: see the module docstring)")
    parser.add_argument("--partitions", default="1,16", help="comma-separated partition counts")
    parser.add_argument("--codecs", default="none,lz4", help="comma-separated compression types")
    parser.add_argument("--records", type=int, help="records per run")
    parser.add_argument("--repeats", type=int, help="runs per side and case")
    args = parser.parse_args()
    plan = dict(QUICK if args.quick else FULL)
    if args.records:
        plan["records"] = args.records
    if args.repeats:
        plan["repeats"] = args.repeats
    _loadgen.binary()  # built before anything is measured
    rev = args.baseline or default_baseline()
    scratch = Path(tempfile.mkdtemp(prefix="odradek-validation-cpu-"))
    try:
        trees = {"before": extract(rev, scratch / "baseline"), "after": ROOT / "src"}
        impl = {side: implementation(src) for side, src in trees.items()}
        if set(impl.values()) != {"compiled"}:
            raise SystemExit(f"both brokers must run the compiled record code: {impl}")
        result: dict[str, Any] = {
            "benchmark": "validation_cpu",
            "python": platform.python_version(),
            "baseline": {"rev": git("rev-parse", rev), "record_code": impl["before"]},
            "current": {"rev": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--", "src")),
                        "record_code": impl["after"]},
            "workload": {**plan, "value_bytes": VALUE_BYTES, "producer": {**PRODUCER, "acks": 1}, "clients": 1},
            "quick": args.quick,
            "cases": {},
        }
        started = time.monotonic()
        for codec in args.codecs.split(","):
            for partitions in map(int, args.partitions.split(",")):
                runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
                for repeat in range(plan["repeats"]):
                    order = ("before", "after") if repeat % 2 == 0 else ("after", "before")
                    for side in order:
                        runs[side].append(
                            one_run(trees[side], scratch, partitions, codec, plan["records"], plan["warmup"])
                        )
                result["cases"][f"{codec}/{partitions}_partitions"] = summary(runs, codec)
        none = [c for k, c in result["cases"].items() if k.startswith("none/")]
        result["uncompressed_met"] = bool(none) and all(c["met"] for c in none)
        result["seconds"] = round(time.monotonic() - started, 1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
