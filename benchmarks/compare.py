"""Before/after: which figures of a benchmark got worse by more than the noise of their repeats.

Run: ``python benchmarks/compare.py --before b1.json b2.json --after a1.json a2.json [--all]``

Each file is the JSON one whole run of a benchmark printed (``broker.py``, ``scale.py``,
``spark.py``, ...); run the two trees alternately (before, after, after, before) on a quiet
machine.  Every number found at the same place in all the runs is a figure.  Its direction comes
from its name:

* lower is better: CPU, latency, times, memory (``cpu``, ``latency``, ``_ms``, ``_s``,
  ``seconds``, ``rss``, ``p50``/``p99``/``p999``), and a pushdown query's time over a full scan's
  (``pushdown....ratio``);
* higher is better: rates, throughputs, ratios to a peer or to a bound (``per_s``, ``ratio``,
  ``rate``, ``throughput``, ``fraction_of``);
* anything else (counts, settings, workload descriptions) is not compared.

The noise of a figure is the spread of its before runs (largest over smallest).  A figure is
**worse beyond noise** when the after runs' median is worse than the before runs' median by more
than that spread *and* every after run lies outside the before runs' range on the worse side.  One
run a side has no noise to measure: every difference counts, so give at least two a side.

Figures of the peers and of the machine (``tansu``, ``reference``, ``machine``) are the controls:
the code under test did not change them, so a control worse beyond noise says the machine was not
the same for both sides, and the other verdicts of those runs are suspect.

Prints JSON: the figures worse beyond noise, the controls worse beyond noise, and with ``--all``
every figure compared.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

#: not figures: what the run was asked to do, and where it ran (sections), and counts (last names)
SKIP_SECTION = re.compile(r"(^|\.)(workload|config|targets|git_at_start|git_at_end|section_seconds)(\.|$)")
SKIP_LEAF = re.compile(
    r"(^|\.)(records|partitions|repeats|warmup|value_bytes|span_hours|rows|cpus|target[\w%]*)$"
)
CONTROL = re.compile(r"(^|\.)(tansu|reference|machine)(\.|_|$)")
LOWER = re.compile(r"cpu|latency|rss|(^|\.)pushdown\..*ratio")
HIGHER = re.compile(r"per_s|ratio|rate|throughput|fraction_of")
TIME = re.compile(r"_ms(\.|_|$)|seconds|_s(\.|_|$)|(^|[._])p50|(^|[._])p99|(^|[._])p999")


def direction(name: str) -> int:
    """+1 where higher is better, -1 where lower is, 0 for what is not compared."""
    if SKIP_SECTION.search(name) or SKIP_LEAF.search(name):
        return 0
    if LOWER.search(name):
        return -1
    if HIGHER.search(name):
        return 1
    if TIME.search(name):
        return -1
    return 0


def figures(run: Any, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of one run's JSON by dotted path (booleans and lists left out)."""
    out: dict[str, float] = {}
    if isinstance(run, dict):
        for key, value in run.items():
            out.update(figures(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(run, (int, float)) and not isinstance(run, bool):
        out[prefix] = float(run)
    return out


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every figure present in all runs with a direction, before and after, and its verdict."""
    b_runs = [figures(r) for r in before]
    a_runs = [figures(r) for r in after]
    common = set(b_runs[0]).intersection(*b_runs[1:], *a_runs)
    rows = []
    for name in sorted(common):
        sense = direction(name)
        b = [r[name] for r in b_runs]
        a = [r[name] for r in a_runs]
        if not sense or min(b) <= 0 or min(a) <= 0:
            continue
        noise = max(b) / min(b)
        ratio = statistics.median(a) / statistics.median(b)
        if sense > 0:
            worse = ratio < 1 / noise and max(a) < min(b)
        else:
            worse = ratio > noise and min(a) > max(b)
        rows.append(
            {
                "figure": name,
                "better": "higher" if sense > 0 else "lower",
                "before": b,
                "after": a,
                "after_over_before": round(ratio, 3),
                "noise": round(noise, 3),
                "worse_beyond_noise": worse,
                "control": bool(CONTROL.search(name)),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--before", nargs="+", type=Path, required=True, help="the before tree's runs (JSON files)"
    )
    ap.add_argument("--after", nargs="+", type=Path, required=True, help="the after tree's runs")
    ap.add_argument("--all", action="store_true", help="list every figure compared, not only the worse ones")
    args = ap.parse_args(argv)
    rows = compare(
        [json.loads(p.read_text()) for p in args.before], [json.loads(p.read_text()) for p in args.after]
    )
    worse = [r for r in rows if r["worse_beyond_noise"] and not r["control"]]
    controls = [r for r in rows if r["worse_beyond_noise"] and r["control"]]
    out: dict[str, Any] = {
        "before": [str(p) for p in args.before],
        "after": [str(p) for p in args.after],
        "figures_compared": len(rows),
        "worse_beyond_noise": worse,
        "controls_worse_beyond_noise": controls,
    }
    if args.all:
        out["figures"] = rows
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
