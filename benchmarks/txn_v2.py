"""Benchmark of transactional produce with the Kafka 4 Java client: transactions v2 (KIP-890 part 2)
against transactions v1 and against idempotent produce, on the same ``odradek serve`` broker in
the same run.

Run: ``python benchmarks/txn_v2.py [--quick] [--records N]`` (or ``python -m benchmarks.txn_v2``).
Prints one JSON object (~1.5 min; ``--quick`` ~40 s).  ``--records`` changes the transaction size
(default 1,000): the smaller the transactions, the larger the share of v1's extra round trip.

It needs the real Apache Kafka Java client, built from source outside the repository, with its
scenario drivers: ``/work/java-kafka/run.sh`` (or ``--run PATH``, or ``$ODRADEK_JAVA_KAFKA_RUN``).
Without it the benchmark prints ``{"benchmark": "txn_v2", "error": ...}`` and exits with status 2.

Each trial is one JVM running ``TxnProducerScenario --mode throughput``: transactions of 1,000
records of 100 bytes to one partition (``linger.ms`` 5), the first two transactions excluded from
the figure, records/s over the rest.  Three kinds of trial:

- ``v2``: the broker finalizes ``transaction.version`` 2 (its default), so the 4.x client uses
  transactions v2: partitions added implicitly by Produce v12, one EndTxn v5 per transaction;
- ``v1``: the same client after ``odradek features downgrade --feature transaction.version=1``:
  it falls back to AddPartitionsToTxn before the first send of each transaction and EndTxn v4;
- ``idempotent``: the same client without a ``transactional.id`` (``enable.idempotence``), each
  batch of 1,000 sends ended by ``flush()`` (the driver's ``--idempotent``): the reference for the
  ratios.

The trials rotate (v2, v1, idempotent; then v1, idempotent, v2; ...), the feature level set
before each transactional trial; every trial checks from the client's ``init`` line that it used
the version meant.  Figures are medians; ``v2_over_idempotent`` is the target ratio (>= 0.6),
``v2_over_v1`` the gain of transactions v2.

The machine is a shared 2-core VM and the figures move between runs: provisional.
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
from pathlib import Path
from typing import Any

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

from confluent_kafka.admin import AdminClient, NewTopic

DEFAULT_RUN = "/work/java-kafka/run.sh"
FULL = {"repeats": 3, "transactions": 32}
QUICK = {"repeats": 2, "transactions": 12}
RECORDS = 1000
VALUE_SIZE = 100
WARMUP = 2
TARGET_RATIO = 0.6
KINDS = ("v2", "v1", "idempotent")


def _fail(message: str) -> int:
    print(json.dumps({"benchmark": "txn_v2", "error": message}))
    return 2


def _set_transaction_version(bootstrap: str, level: int) -> None:
    verb = "downgrade" if level < 2 else "upgrade"
    subprocess.run(
        [sys.executable, "-m", "odradek", "features", verb, "-b", bootstrap, "--feature", f"transaction.version={level}"],
        check=True, capture_output=True, text=True, timeout=60,
    )


def trial(run: str, bootstrap: str, topic: str, kind: str, transactions: int, records: int) -> dict[str, Any]:
    cmd = [run, "TxnProducerScenario", "--bootstrap", bootstrap, "--topic", topic, "--mode", "throughput",
           "--transactions", str(transactions), "--records", str(records), "--warmup-txns", str(WARMUP),
           "--value-size", str(VALUE_SIZE), "--partition", "0", "--quiet-txns", "--telemetry", "off"]
    if kind == "idempotent":
        cmd.append("--idempotent")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    by = {e["event"]: e for e in events}
    if p.returncode != 0 or "throughput" not in by:
        raise RuntimeError(f"{kind} trial failed (exit {p.returncode}): {events[-3:]} {p.stderr[-1500:]}")
    if kind != "idempotent":
        used_v2 = by["init"].get("transaction_v2")
        if used_v2 is not (kind == "v2"):
            raise RuntimeError(f"{kind} trial: the client says transaction_v2={used_v2}")
    if by["summary"]["failed"]:
        raise RuntimeError(f"{kind} trial: failed transactions: {by['summary']}")
    return {**by["throughput"], "client_version": by["start"].get("client_version", "4.x")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=RECORDS, help="records per transaction (default %(default)s)")
    ap.add_argument("--transactions", type=int, help="transactions per trial (default 32; --quick 12)")
    ap.add_argument("--run", default=os.environ.get("ODRADEK_JAVA_KAFKA_RUN", DEFAULT_RUN),
                    help="the Java scenario drivers' run.sh (default %(default)s)")
    args = ap.parse_args(argv)
    if not Path(args.run).is_file():
        return _fail(f"the Kafka Java client's drivers are not here: {args.run} (build them outside the repo; see --help)")
    plan = dict(QUICK if args.quick else FULL)
    if args.transactions:
        plan["transactions"] = max(args.transactions, WARMUP + 1)
    overrides = {
        "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
    }
    rates: dict[str, list[float]] = {k: [] for k in KINDS}
    commit_p50: dict[str, list[float]] = {k: [] for k in KINDS}
    client = ""
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp), overrides=overrides) as broker:
        topic = "txn-v2-bench"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        del admin
        level = 2
        for i in range(plan["repeats"]):
            order = KINDS[i % 3:] + KINDS[:i % 3]
            for kind in order:
                want = 1 if kind == "v1" else 2
                if kind != "idempotent" and want != level:
                    _set_transaction_version(broker.bootstrap, want)
                    level = want
                t = trial(args.run, broker.bootstrap, topic, kind, plan["transactions"], args.records)
                rates[kind].append(float(t["records_per_s"]))
                client = f"kafka-clients (Java) {t['client_version']}"
                commit_p50[kind].append(float(t["commit_ms"]["p50"]) if t.get("commit_ms") else 0.0)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(json.dumps({
        "benchmark": "txn_v2",
        "workload": f"transactions of {args.records} records of {VALUE_SIZE} bytes to one partition, linger.ms 5, "
                    f"{plan['transactions'] - WARMUP} measured per trial",
        "repeats": plan["repeats"],
        "records_per_s": {k: round(v) for k, v in med.items()},
        "trials_records_per_s": {k: [round(x) for x in v] for k, v in rates.items()},
        "end_ms_p50": {k: round(statistics.median(v), 2) for k, v in commit_p50.items()},
        "v2_over_idempotent": round(med["v2"] / med["idempotent"], 3),
        "v1_over_idempotent": round(med["v1"] / med["idempotent"], 3),
        "v2_over_v1": round(med["v2"] / med["v1"], 3),
        "target_ratio": TARGET_RATIO,
        "reference": "the same Java client, idempotent (flush() per transaction's worth of records), same broker, same run",
        "client": client,
        "python": platform.python_version(),
        "provisional": "a shared 2-core machine: figures move between runs",
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
