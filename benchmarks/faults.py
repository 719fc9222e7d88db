"""Benchmark of fault scripting for application tests (issue 44): what a test pays for a test broker.

Run: ``python benchmarks/faults.py [--quick]`` (or ``python -m benchmarks.faults``).  Prints one JSON
object (~15 s; ``--quick`` fewer rounds).

Figures:

- ``startup``: a single test broker (``odradek serve --test-mode``, the pytest plugin's
  ``odradek_broker``) from the process's start to its ready line (``BrokerProcess.ready_seconds``),
  and to its first Metadata answer to a real client (confluent-kafka ``list_topics``): median and
  all of 5 fresh starts, each in an empty data directory;
- ``per_test``: what the plugin adds to a test that scripts faults, on one running broker: the
  reset at the test's start, arming one fault and clearing it (``faults.fail(...)`` then
  ``fault.clear()``), and the three together; median and p90 over ``rounds`` rounds, in ms;
- ``reference``: a testcontainers Kafka container's start, **not measured here** (no Docker on
  this machine): the 10-20 s the issue cites as the published figure; ``startup_vs_testcontainers``
  is the median start over the low end of that range.

The machine is a shared 2-core VM: the figures are provisional.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from odradek.testing import BrokerProcess

#: a testcontainers Kafka container's start, seconds: the range the issue cites (published, not measured)
TESTCONTAINERS_KAFKA_START = (10.0, 20.0)


def _startup(base: Path, starts: int) -> dict[str, object]:
    from confluent_kafka.admin import AdminClient

    ready, first_answer = [], []
    for i in range(starts):
        t0 = time.monotonic()
        with BrokerProcess(base / f"start-{i}", test_mode=True, overrides={"metrics.port": -1}) as broker:
            ready.append(broker.ready_seconds)
            AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
            first_answer.append(time.monotonic() - t0)
    return {
        "ready_seconds_median": round(statistics.median(ready), 3),
        "ready_seconds": [round(x, 3) for x in ready],
        "first_answer_seconds_median": round(statistics.median(first_answer), 3),
        "first_answer_seconds": [round(x, 3) for x in first_answer],
    }


def _per_test(base: Path, rounds: int) -> dict[str, object]:
    times: dict[str, list[float]] = {"reset_ms": [], "arm_ms": [], "clear_ms": [], "total_ms": []}
    with BrokerProcess(base / "per-test", test_mode=True, overrides={"metrics.port": -1}) as broker:
        faults = broker.faults
        for _ in range(rounds):
            t0 = time.perf_counter()
            faults.reset()
            t1 = time.perf_counter()
            fault = faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=3, topic="orders")
            t2 = time.perf_counter()
            fault.clear()
            t3 = time.perf_counter()
            faults.history.clear()
            times["reset_ms"].append((t1 - t0) * 1000)
            times["arm_ms"].append((t2 - t1) * 1000)
            times["clear_ms"].append((t3 - t2) * 1000)
            times["total_ms"].append((t3 - t0) * 1000)
    out: dict[str, object] = {"rounds": rounds}
    for name, values in times.items():
        ordered = sorted(values)
        out[name] = {"median": round(statistics.median(values), 3), "p90": round(ordered[int(len(ordered) * 0.9)], 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="odradek-bench-faults-") as tmp:
        base = Path(tmp)
        startup = _startup(base, 5)
        per_test = _per_test(base, 50 if args.quick else 500)
    median = float(startup["ready_seconds_median"])  # type: ignore[arg-type]
    print(json.dumps({
        "benchmark": "faults",
        "startup": startup,
        "per_test": per_test,
        "reference": {
            "testcontainers_kafka_start_seconds": list(TESTCONTAINERS_KAFKA_START),
            "source": "published figure cited by issue 44 (Docker and 10-20 s per Kafka container); not measured here",
        },
        "startup_vs_testcontainers": round(median / TESTCONTAINERS_KAFKA_START[0], 4),
        "note": "shared 2-core VM: provisional figures",
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
