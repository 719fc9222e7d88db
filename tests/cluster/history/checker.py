"""The history checker: reads a JSON-lines history (see :mod:`tests.cluster.history.workload`) and reports
what went wrong, in the spirit of Jepsen's Kafka/Redpanda analyses.

Events used (every event has ``t``, monotonic seconds since the run started, and ``type``):

* ``send``   ``proc, value, partition, seq, idempotent, acks`` - a producer handed a record to its client.
* ``ack``    ``proc, value, partition, offset`` - the record was acknowledged at (partition, offset).
* ``error``  ``proc, value, error`` - the record was not acknowledged (indeterminate: it may be in the log).
* ``poll``   ``proc, group, mode, partition, offset, value`` - a consumer received a record.
* ``commit`` ``proc, group, partition, offset`` - a group member committed an offset (successfully).
* ``committed`` ``proc, group, partition, offset`` - an observer read the group's committed offset.
* ``reset``  ``proc, group, partition, reason`` - a consumer's position was reset (offset out of range):
  the only case in which a group's committed offset may legitimately go backwards.
* ``nemesis`` ``op, phase ("start"|"end"), target, id`` - a fault began / was healed.
* ``read``   ``partition, offset, value`` - the final full read from the beginning, after healing.
* ``final``  ``partitions, high_watermarks, complete`` - the final read is over (``complete``: it reached
  every partition's high watermark).

Anomalies (all of them are counted; the lists keep the first few examples):

* **lost**: an ``acks=all`` acknowledged record not at its acknowledged offset in the final read (``moved``
  when its value is elsewhere in the log). Lost ``acks=1`` records are reported apart: Kafka allows them.
* **duplicated**: a value from an idempotent producer more than once in the final read (non-idempotent
  producers' duplicates are counted for information only; retries may duplicate them).
* **reordered**: for an idempotent producer and a partition, acknowledged offsets that do not increase
  with the send order.
* **vanished**: a polled (partition, offset, value) that the final read does not have at that offset
  (a consumer saw a record past the high watermark that was later truncated away, or a phantom).
* **offsets backwards**: per group and partition, a member's acknowledged commit lower than an earlier
  acknowledged commit with no ``reset`` of that group and partition in between, or a committed offset read
  after healing (``final_committed``) lower than the highest acknowledged commit (a lost commit).
* **stale offset reads** (reported, not judged a safety failure): an observer's OffsetFetch (``committed``,
  with ``issued``, when it was asked for) that returned less than a commit acknowledged before it was
  issued, or less than a read that had completed before it was issued. A coordinator that lost its
  ZooKeeper session while frozen answers the requests queued in its socket from its cache until the
  controller tells it it no longer leads the ``__consumer_offsets`` partition - Kafka's coordinators have the
  same window (``GroupCoordinator.handleFetchOffsets`` trusts the local leadership).
* **unavailability**: the longest gap between acknowledgements, overall and per partition, and for each
  nemesis operation the longest gap charged to it: a fault's window runs from its start until the next
  fault starts (so a slow recovery after healing is charged to the fault), and a gap is charged to the
  fault whose window holds the gap's start + 1 s (its middle, if shorter). The longest gap between one
  producer's acknowledgements is reported too (a producer stuck while the others write). Reported, not judged.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

EXAMPLES = 10


def read_history(path: str | Path) -> Iterator[dict[str, Any]]:
    """The events of a history file (a truncated last line, from a crash, is skipped)."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


@dataclass
class Gap:
    start: float  # time of the last acknowledgement before the gap (or the first send)
    end: float  # time of the acknowledgement that ended it (or the end of the workload)
    partition: int | None  # None: the whole topic
    faults: list[str] = field(default_factory=list)  # nemesis operations active during the gap

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def describe(self) -> str:
        where = "all partitions" if self.partition is None else f"partition {self.partition}"
        during = ", ".join(self.faults) if self.faults else "no fault"
        return f"{self.seconds:.1f} s on {where} (t={self.start:.1f}..{self.end:.1f}; during: {during})"


@dataclass
class Report:
    sent: int = 0
    acked: int = 0
    acked_all: int = 0
    errors: int = 0
    polls: int = 0
    commits: int = 0
    final_records: int = 0
    final_complete: bool = False
    lost: list[dict[str, Any]] = field(default_factory=list)
    lost_count: int = 0
    lost_acks1: list[dict[str, Any]] = field(default_factory=list)
    lost_acks1_count: int = 0
    duplicated: list[dict[str, Any]] = field(default_factory=list)
    duplicated_count: int = 0
    duplicated_non_idempotent: int = 0
    reordered: list[dict[str, Any]] = field(default_factory=list)
    reordered_count: int = 0
    vanished: list[dict[str, Any]] = field(default_factory=list)
    vanished_count: int = 0
    backwards: list[dict[str, Any]] = field(default_factory=list)
    backwards_count: int = 0
    stale_reads: list[dict[str, Any]] = field(default_factory=list)
    stale_reads_count: int = 0
    resets: int = 0
    log_problems: list[str] = field(default_factory=list)
    longest_gap: Gap | None = None
    longest_gap_per_partition: dict[int, Gap] = field(default_factory=dict)
    gap_per_fault: dict[str, Gap] = field(default_factory=dict)  # nemesis op label -> longest overlapping gap
    gap_per_fault_kind: dict[str, Gap] = field(default_factory=dict)
    longest_gap_per_producer: dict[str, Gap] = field(default_factory=dict)
    errors_per_producer: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The safety properties: nothing lost, duplicated, reordered, vanished or gone backwards,
        and a final read that reached every high watermark."""
        return (
            self.final_complete
            and not self.lost_count
            and not self.duplicated_count
            and not self.reordered_count
            and not self.vanished_count
            and not self.backwards_count
            and not self.log_problems
        )

    def summary(self) -> str:
        lines = [
            f"sent {self.sent}, acknowledged {self.acked} ({self.acked_all} with acks=all), "
            f"errors {self.errors}, polled {self.polls}, commits {self.commits}",
            f"final read: {self.final_records} records, "
            + ("reached every high watermark" if self.final_complete else "INCOMPLETE (did not reach the high watermarks)"),
            f"lost (acks=all): {self.lost_count}",
            f"lost (acks=1, allowed by Kafka): {self.lost_acks1_count}",
            f"duplicated (idempotent): {self.duplicated_count}; duplicated (non-idempotent, allowed): "
            f"{self.duplicated_non_idempotent}",
            f"reordered (idempotent): {self.reordered_count}",
            f"vanished reads: {self.vanished_count}",
            f"committed offsets backwards: {self.backwards_count} (resets seen: {self.resets})",
            f"stale committed-offset reads (reported only): {self.stale_reads_count}",
        ]
        for name in ("lost", "lost_acks1", "duplicated", "reordered", "vanished", "backwards", "stale_reads"):
            examples = getattr(self, name)
            if examples:
                lines.append(f"  {name} e.g.:")
                lines += [f"    {json.dumps(e, sort_keys=True)}" for e in examples[:EXAMPLES]]
        lines += [f"  log problem: {p}" for p in self.log_problems[:EXAMPLES]]
        lines.append("unavailability (longest gap between acknowledgements):")
        if self.longest_gap is not None:
            lines.append(f"  overall: {self.longest_gap.describe()}")
        for p, gap in sorted(self.longest_gap_per_partition.items()):
            lines.append(f"  partition {p}: {gap.describe()}")
        for proc, gap in sorted(self.longest_gap_per_producer.items()):
            errors = self.errors_per_producer.get(proc, 0)
            lines.append(f"  producer {proc}: {gap.describe().replace('all partitions', 'its partitions')}"
                         + (f"; {errors} records failed (timed out or errors)" if errors else ""))
        if self.gap_per_fault_kind:
            lines.append("  per fault kind (longest gap on any partition charged to a fault of that kind):")
            for kind, gap in sorted(self.gap_per_fault_kind.items()):
                lines.append(f"    {kind}: {gap.describe()}")
        if self.gap_per_fault:
            lines.append("  per fault:")
            for label in self.faults:
                charged = self.gap_per_fault.get(label)
                lines.append(f"    {label}: " + (charged.describe() if charged else "no gap"))
        lines.append("RESULT: " + ("OK" if self.ok else "ANOMALIES FOUND"))
        return "\n".join(lines)


def _gaps(times: list[float], start: float, end: float, partition: int | None) -> list[Gap]:
    """The gaps between consecutive times (sorted), from ``start`` to ``end``."""
    points = [start, *sorted(t for t in times if start <= t <= end), end]
    return [Gap(a, b, partition) for a, b in pairwise(points) if b > a]


def check(events: Iterable[dict[str, Any]]) -> Report:
    r = Report()
    sends: dict[str, dict[str, Any]] = {}  # value -> send event
    acks: dict[str, dict[str, Any]] = {}  # value -> ack event
    polls: list[dict[str, Any]] = []
    offsets_seen: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)  # (group, partition) -> events
    nemesis_start: dict[str, dict[str, Any]] = {}
    nemesis_windows: list[tuple[str, str, float, float | None]] = []  # label, kind, start, end
    final: dict[int, dict[int, str]] = defaultdict(dict)
    final_done: dict[str, Any] | None = None
    read_order: dict[int, list[int]] = defaultdict(list)
    first_t: float | None = None
    workload_end: float | None = None
    for e in events:
        kind = e.get("type")
        t = float(e.get("t", 0.0))
        if kind == "send":
            sends[e["value"]] = e
            r.sent += 1
            first_t = t if first_t is None else min(first_t, t)
        elif kind == "ack":
            acks[e["value"]] = e
        elif kind == "error":
            r.errors += 1
            r.errors_per_producer[e["proc"]] = r.errors_per_producer.get(e["proc"], 0) + 1
        elif kind == "poll":
            polls.append(e)
        elif kind in ("commit", "committed", "final_committed", "reset"):
            offsets_seen[(e["group"], int(e["partition"]))].append(e)
            if kind == "commit":
                r.commits += 1
            elif kind == "reset":
                r.resets += 1
        elif kind == "nemesis":
            if e["phase"] == "start":
                nemesis_start[e["id"]] = e
            else:
                s = nemesis_start.pop(e["id"], None)
                if s is not None:
                    nemesis_windows.append((_label(s), s["op"], float(s["t"]), t))
        elif kind == "workload_end":
            workload_end = t
        elif kind == "read":
            p, o = int(e["partition"]), int(e["offset"])
            if o in final[p]:
                r.log_problems.append(f"partition {p}: offset {o} read twice in the final read")
            final[p][o] = e["value"]
            read_order[p].append(o)
        elif kind == "final":
            final_done = e
    for s in nemesis_start.values():  # never healed (the run ended first)
        nemesis_windows.append((_label(s), s["op"], float(s["t"]), None))
    nemesis_windows.sort(key=lambda w: w[2])
    r.faults = [w[0] for w in nemesis_windows]
    r.acked = len(acks)
    r.polls = len(polls)
    r.final_complete = bool(final_done and final_done.get("complete"))
    r.final_records = sum(len(v) for v in final.values())
    for p, order in read_order.items():
        if order != sorted(order):
            r.log_problems.append(f"partition {p}: the final read's offsets do not increase")

    # where each value is in the final log
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, records in final.items():
        for o, v in records.items():
            where[v].append((p, o))

    # lost acknowledged writes
    for value, a in acks.items():
        s = sends.get(value, {})
        p, o = int(a["partition"]), int(a["offset"])
        if final[p].get(o) == value:
            continue
        item = {"value": value, "partition": p, "offset": o, "acked_at": a["t"],
                "final_at_offset": final[p].get(o), "found_at": where.get(value, [])}
        if str(s.get("acks", "all")) == "all":
            r.lost_count += 1
            if len(r.lost) < EXAMPLES:
                r.lost.append(item)
        else:
            r.lost_acks1_count += 1
            if len(r.lost_acks1) < EXAMPLES:
                r.lost_acks1.append(item)
    r.acked_all = sum(1 for v in acks if str(sends.get(v, {}).get("acks", "all")) == "all")

    # duplicates
    for value, places in where.items():
        if len(places) < 2:
            continue
        if sends.get(value, {}).get("idempotent"):
            r.duplicated_count += 1
            if len(r.duplicated) < EXAMPLES:
                r.duplicated.append({"value": value, "at": sorted(places)})
        else:
            r.duplicated_non_idempotent += 1

    # reordering: per idempotent producer and partition, acked offsets in send order
    by_proc: dict[tuple[str, int], list[tuple[int, int, str]]] = defaultdict(list)
    for value, a in acks.items():
        s = sends.get(value)
        if s is None or not s.get("idempotent"):
            continue
        by_proc[(s["proc"], int(a["partition"]))].append((int(s["seq"]), int(a["offset"]), value))
    for (proc, p), items in by_proc.items():
        items.sort()
        for (_s0, off0, v0), (_s1, off1, v1) in pairwise(items):
            if off1 <= off0:
                r.reordered_count += 1
                if len(r.reordered) < EXAMPLES:
                    r.reordered.append({"proc": proc, "partition": p, "earlier": [v0, off0], "later": [v1, off1]})

    # vanished reads
    for e in polls:
        p, o = int(e["partition"]), int(e["offset"])
        if final[p].get(o) == e["value"]:
            continue
        r.vanished_count += 1
        if len(r.vanished) < EXAMPLES:
            r.vanished.append({"proc": e.get("proc"), "partition": p, "offset": o, "value": e["value"],
                               "polled_at": e["t"], "final_at_offset": final[p].get(o),
                               "found_at": where.get(e["value"], [])})

    # committed offsets going backwards
    for (group, p), evs in offsets_seen.items():
        evs.sort(key=lambda e: float(e["t"]))
        high: dict[str, Any] | None = None  # the highest acknowledged commit since the last reset
        for e in evs:
            if e["type"] == "reset":
                high = None
                continue
            off = int(e["offset"])
            if e["type"] == "commit" or (e["type"] == "final_committed" and high is not None):
                if high is not None and off < int(high["offset"]):
                    r.backwards_count += 1
                    if len(r.backwards) < EXAMPLES:
                        r.backwards.append({"group": group, "partition": p, "from": int(high["offset"]), "to": off,
                                            "from_event": [high["type"], high.get("proc"), high["t"]],
                                            "to_event": [e["type"], e.get("proc"), e["t"]]})
                if e["type"] == "commit" and (high is None or off >= int(high["offset"])):
                    high = e
        # stale reads: compared with what was acknowledged (or read) before the read was issued
        known: list[tuple[float, int, str]] = []  # (completion time, offset, what)
        last_reset = -1.0
        for e in evs:
            if e["type"] == "reset":
                last_reset = float(e["t"])
            elif e["type"] in ("commit", "committed"):
                known.append((float(e["t"]), int(e["offset"]), e["type"]))
        for e in evs:
            if e["type"] != "committed":
                continue
            issued = float(e.get("issued", e["t"]))
            if issued < last_reset:
                continue
            before = [k for k in known if last_reset <= k[0] < issued]
            if not before:
                continue
            best = max(before, key=lambda k: k[1])
            if int(e["offset"]) < best[1]:
                r.stale_reads_count += 1
                if len(r.stale_reads) < EXAMPLES:
                    r.stale_reads.append({"group": group, "partition": p, "read": int(e["offset"]),
                                          "issued": issued, "completed": e["t"],
                                          "but_before_it": [best[2], best[1], best[0]]})

    # unavailability
    ack_times = sorted(float(a["t"]) for a in acks.values())
    if first_t is not None:
        # until the producers stopped sending (their final flush may wait for timeouts: not unavailability)
        last = max([float(x["t"]) for x in sends.values()] + ack_times)
        end = min(workload_end, last) if workload_end is not None else last
        partitions = sorted({int(s["partition"]) for s in sends.values() if s.get("partition") is not None})
        all_gaps = _gaps(ack_times, first_t, end, None)
        per_part: dict[int, list[Gap]] = {}
        for p in partitions:
            times = [float(a["t"]) for a in acks.values() if int(a["partition"]) == p]
            per_part[p] = _gaps(times, first_t, end, p)
        # per producer (incarnation): a producer stuck while the others write is an anomaly of its own
        for proc in sorted({str(x["proc"]) for x in sends.values()}):
            times = [float(a["t"]) for v, a in acks.items() if sends.get(v, {}).get("proc") == proc]
            proc_sends = [float(x["t"]) for x in sends.values() if x["proc"] == proc]
            gaps = _gaps(times, min(proc_sends), min(end, max(proc_sends + times)), None)
            if gaps:
                r.longest_gap_per_producer[proc] = max(gaps, key=lambda g: g.seconds)
        # a fault is charged with the gaps from its start until the next fault starts (its recovery included)
        windows = [
            (label, kind, s, nemesis_windows[i + 1][2] if i + 1 < len(nemesis_windows) else end)
            for i, (label, kind, s, _e) in enumerate(nemesis_windows)
        ]
        # each gap is charged to the one fault whose window holds the gap's start plus 1 s (or its middle if
        # shorter): a gap that begins just before a fault starts belongs to that fault, not the previous one
        for gap in all_gaps + [g for gs in per_part.values() for g in gs] + list(r.longest_gap_per_producer.values()):
            point = min(gap.start + 1.0, (gap.start + gap.end) / 2)
            gap.faults = [label for label, _k, s, e in windows if s <= point < e]
        if all_gaps:
            r.longest_gap = max(all_gaps, key=lambda g: g.seconds)
        for p, gaps in per_part.items():
            if gaps:
                r.longest_gap_per_partition[p] = max(gaps, key=lambda g: g.seconds)
        every = all_gaps + [g for gs in per_part.values() for g in gs]
        for label, kind, _s, _e in windows:
            overlapping = [g for g in every if label in g.faults]
            if not overlapping:
                continue
            worst = max(overlapping, key=lambda g: g.seconds)
            r.gap_per_fault[label] = worst
            if kind not in r.gap_per_fault_kind or worst.seconds > r.gap_per_fault_kind[kind].seconds:
                r.gap_per_fault_kind[kind] = worst
    return r


def _label(e: dict[str, Any]) -> str:
    target = e.get("target")
    return f"{e['op']}" + (f"({target})" if target is not None else "") + f"@{float(e['t']):.1f}"


def check_file(path: str | Path) -> Report:
    return check(read_history(path))


if __name__ == "__main__":
    import sys

    report = check_file(sys.argv[1])
    print(report.summary())
    sys.exit(0 if report.ok else 1)
