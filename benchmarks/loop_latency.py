"""Produce latency of a well-behaved client while heavy operations run on the same broker.

Run: ``python benchmarks/loop_latency.py [--quick]`` (or ``python -m benchmarks.loop_latency``).
Prints one JSON object (~2.5 min; ``--quick`` ~1 min).

One ``odradek serve`` on an empty data directory.  A paced producer (confluent-kafka,
``acks=1, linger.ms=0``, ``rate`` msg/s of 100-byte values to a 1-partition topic) runs the
whole time; its latency is ``produce()`` -> delivery report.  Each phase lasts ``seconds`` s
and gives p50 / p99 / max of the records sent during it, and ``p99_ratio`` = its p99 / the
idle phase's p99 measured in the same run.  The phases, in order:

* ``idle`` - nothing else.
* ``auto_create`` - another connection sends Metadata v12 requests naming 1,000 unknown topics
  each (auto-create on; a request creates at most ``auto.create.topics.max.per.request``).
* ``metadata_all`` - whole-cluster Metadata requests (every topic the previous phase created),
  8 in flight.
* ``delete_records`` - a DeleteRecords storm (8 in flight) on a topic with 4 KiB segments.
* ``retention`` - a ``large_mb`` MiB log of 1 MiB segments whose ``retention.ms`` is set to
  1 ms when the phase starts (``log.retention.check.interval.ms=500``).
* ``compaction`` - a ``large_mb`` MiB keyed log (10,000 keys) switched to
  ``cleanup.policy=compact`` when the phase starts (``log.cleaner.backoff.ms=500``).
* ``down_convert`` - four connections each sending Fetch v3 (message format v1) of a partition
  holding one 1,000,000-record v2 batch (``down_convert_records``; uncompressed, ~21 MB), with
  limits that take it whole (the worst case: every record converted, ~44 MB answered), again
  and again.
* ``cpu_bound`` - no broker work: as many busy processes as the broker has workers, at the
  workers' nice increment. The machine's own bound for the phases whose workers take every core
  (``down_convert``, ``recompress``): what the paced producer's tail is when the CPUs are taken by
  background work that never touches the broker. ``p99_over_cpu_bound`` = a phase's p99 / this
  phase's p99, same run.
* ``memory_bound`` - no broker work either: as many processes as the broker has workers, at
  their priority, each copying a 21 MB buffer into a new one again and again (allocation, page
  faults, memcpy, free: what a conversion does to memory, without the broker). On a kernel
  without preemption (``Dynamic Preempt: none``) a woken process waits for such a process's
  kernel work to reach a scheduling point, which busy loops never make it do. The machine's bound
  for ``down_convert``: ``p99_over_memory_bound``.
* ``recompress`` - two connections producing uncompressed batches of ``heavy_records`` records,
  one to a ``compression.type=gzip`` topic, one to an ``lz4`` one, again and again.
* ``compacted_keys`` - two connections producing keyed uncompressed batches of ``heavy_records``
  records to a compacted topic, again and again.

``--phases a,b`` runs only those (and ``idle``, the reference).  Also reported: the count of
topics, the broker's peak RSS and that of its worker processes (the processes under it), per
phase the CPU seconds of the broker, its workers and the heavy clients (``cpu_s``), and what
the heavy clients got done (``heavy_requests``: answers).  The machine is a shared
2-core VM: broker, clients and librdkafka's threads share both cores, so ratios include CPU
contention, not only event-loop stalls; the latency tail moves between runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from benchmarks._proc import proc_cpu_times
    from odradek.testing import BrokerProcess, WireClient
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import proc_cpu_times
    from odradek.testing import BrokerProcess, WireClient

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from odradek.protocol.messages.delete_records import DeleteRecordsRequest
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.records import BatchBuilder
from odradek.testing import produce_request

BIG_TOPIC = {"max.message.bytes": str(64 << 20), "segment.bytes": str(1 << 30)}


class _PacedProducer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.samples: list[tuple[float, float]] = []  # (send time, latency s)
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "acks": 1, "linger.ms": 0, "socket.nagle.disable": True})
        interval = 1.0 / self.rate
        nxt = time.monotonic()
        while not self.stop.is_set():
            t0 = time.monotonic()

            def done(err: Any, msg: Any, t0: float = t0) -> None:
                if err is not None:
                    self.failed += 1
                else:
                    self.samples.append((t0, time.monotonic() - t0))

            p.produce(self.topic, value=b"x" * 100, on_delivery=done)
            nxt += interval
            while True:  # poll serves delivery reports and returns early: wait out the interval
                left = nxt - time.monotonic()
                if left <= 0:
                    break
                p.poll(left)
        p.flush(60)


def _stats(samples: list[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    lat = sorted(x for t, x in samples if start <= t < end)
    if not lat:
        return {"records": 0}

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2)

    return {
        "records": len(lat),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "max_ms": round(lat[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(lat) * 1000, 2),
    }


def _fill(bootstrap: str, topic: str, mb: int, keyed: bool) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20, "batch.size": 1 << 20})
    n = mb * 1024 * 1024 // 1000
    value = b"v" * 1000
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=str(i % 10_000).encode() if keyed else None)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)


def _auto_create(addr: tuple[str, int], stop: Any) -> None:
    raw = WireClient(*addr, client_id="heavy", timeout=60)
    k = 0
    while not stop.is_set():
        names = [MetadataRequest.MetadataRequestTopic(name=f"auto-{k}-{i}") for i in range(1000)]
        raw.send(MetadataRequest(topics=names, allow_auto_topic_creation=True), 12)
        raw.receive()
        k += 1
    raw.close()


def _metadata_all(addr: tuple[str, int], stop: Any) -> None:
    raw = WireClient(*addr, client_id="heavy", timeout=60)
    while not stop.is_set():
        while raw.in_flight < 8:
            raw.send(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        raw.receive()
    while raw.in_flight:
        raw.receive()
    raw.close()


def _delete_records(addr: tuple[str, int], stop: Any) -> None:
    raw = WireClient(*addr, client_id="heavy", timeout=60)
    offset = 0
    while not stop.is_set():
        while raw.in_flight < 8:
            offset += 1
            topic = DeleteRecordsRequest.DeleteRecordsTopic(
                name="victim", partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=offset)]
            )
            raw.send(DeleteRecordsRequest(topics=[topic], timeout_ms=30000), 2)
        raw.receive()
    while raw.in_flight:
        raw.receive()
    raw.close()


def _batch(n: int, keyed: bool) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(1_700_000_000_000 + i, b"key-%d" % (i % 10_000) if keyed else None, b"value-%04d" % (i % 10_000))
    return b.build()


def _repeat(addr: tuple[str, int], stop: Any, done: Any, connections: int, send: Callable[[WireClient, int], None]) -> None:
    """``connections`` connections, each sending one request at a time with ``send``, until
    ``stop``; ``done`` counts the answers."""

    def one(k: int) -> None:
        raw = WireClient(*addr, client_id=f"heavy-{k}", timeout=300)
        while not stop.is_set():
            send(raw, k)
            raw.receive()
            with done.get_lock():
                done.value += 1
        raw.close()

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)


def _down_convert(addr: tuple[str, int], stop: Any, done: Any) -> None:
    whole = 100 << 20  # limits that take the whole batch: every record is converted
    fetch = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=whole,
        topics=[FetchRequest.FetchTopic(topic="old-format", partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=whole)
        ])],
    )
    _repeat(addr, stop, done, 4, lambda raw, _k: raw.send(fetch, 3))


def _in_processes(fn: Callable[[], None], n: int) -> None:
    """``fn`` in ``n`` child processes, until they all end.  Forked by hand: the phases run in a
    daemonic multiprocessing child, which may not start others."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                fn()
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)


def _cpu_bound(addr: tuple[str, int], stop: Any) -> None:
    """Busy processes like the broker's workers (their number and nice increment), until ``stop``."""
    from odradek.broker.offload import WORKERS, lower_priority

    def spin() -> None:
        lower_priority()  # as a worker lowers its own (its nice, and its own session under autogroup)
        x = 0
        while not stop.is_set():
            for _ in range(100_000):
                x += 1

    _in_processes(spin, WORKERS)


def _memory_bound(addr: tuple[str, int], stop: Any) -> None:
    """Busy processes like the broker's workers that also move memory as a conversion does: each
    copies a 21 MB buffer (the down-converted batch's size) into a new one, again and again (an
    allocation, page faults, a memcpy and a free, much of it kernel work), at the workers'
    priority, until ``stop``."""
    from odradek.broker.offload import WORKERS, lower_priority

    def churn() -> None:
        lower_priority()
        src = os.urandom(21 << 20)
        while not stop.is_set():
            dst = bytearray(src)
            del dst

    _in_processes(churn, WORKERS)


def _producing(topics: list[str], keyed: bool, records: int) -> Callable[[tuple[str, int], Any, Any], None]:
    def run(addr: tuple[str, int], stop: Any, done: Any) -> None:
        batch = _batch(records, keyed)
        _repeat(addr, stop, done, len(topics), lambda raw, k: raw.send(produce_request(topics[k], batch, timeout_ms=120_000), 9))

    return run


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (the broker's worker processes are its fork server's children)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [c for c, pp in parents.items() if pp == parent]
        out += children
        frontier += children
    return out


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process so far; 0 for one that is gone."""
    try:
        user, system = proc_cpu_times(pid)
    except (OSError, ValueError, IndexError):
        return 0.0
    return user + system


def _vm_hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:  # gone meanwhile
        pass
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--phases", help="comma-separated phases to run (idle always runs)")
    args = ap.parse_args()
    seconds = 6.0 if args.quick else 15.0
    large_mb = 50 if args.quick else 200
    rate = 200
    down_convert_records = 1_000_000
    heavy_records = 200_000
    out: dict[str, Any] = {
        "benchmark": "loop_latency",
        "config": {
            "seconds": seconds, "rate": rate, "large_mb": large_mb, "acks": 1,
            "down_convert_records": down_convert_records, "heavy_records": heavy_records,
        },
    }
    wanted = None if not args.phases else {"idle", *args.phases.split(",")}

    def runs(name: str) -> bool:
        return wanted is None or name in wanted

    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(
        Path(tmp) / "data",
        overrides={"log.retention.check.interval.ms": 500, "log.cleaner.backoff.ms": 500},
    ) as broker:
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        fs = admin.create_topics(
            [
                NewTopic("latency", 1, 1),
                NewTopic("victim", 1, 1, config={"segment.bytes": "4096", "file.delete.delay.ms": "0"}),
                NewTopic("big", 1, 1, config={"segment.bytes": str(1 << 20)}),
                NewTopic("keyed", 1, 1, config={"segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.01"}),
                NewTopic("old-format", 1, 1, config=BIG_TOPIC),
                NewTopic("gzip-topic", 1, 1, config={**BIG_TOPIC, "compression.type": "gzip"}),
                NewTopic("lz4-topic", 1, 1, config={**BIG_TOPIC, "compression.type": "lz4"}),
                NewTopic("compacted", 1, 1, config={**BIG_TOPIC, "cleanup.policy": "compact"}),
            ]
        )
        for f in fs.values():
            f.result(30)
        if runs("delete_records"):
            _fill(bootstrap, "victim", 20, keyed=False)
        if runs("retention"):
            _fill(bootstrap, "big", large_mb, keyed=False)
        if runs("compaction"):
            _fill(bootstrap, "keyed", large_mb, keyed=True)
        if runs("down_convert"):
            raw = WireClient(broker.host, broker.port, client_id="fill", timeout=300)
            answer = raw.request(produce_request("old-format", _batch(down_convert_records, False), timeout_ms=120_000), 9)
            assert answer.responses[0].partition_responses[0].error_code == 0, answer
            raw.close()

        prod = _PacedProducer(bootstrap, "latency", rate)
        prod.start()
        time.sleep(2.0)  # warm-up

        stop = multiprocessing.get_context("fork").Event()
        addr = (broker.host, broker.port)

        def alter(topic: str, configs: dict[str, str]) -> Callable[[], None]:
            def run() -> None:
                for f in admin.alter_configs([ConfigResource("topic", topic, set_config=configs)]).values():
                    f.result(30)

            return run

        # heavy clients run in another process: their decoding must not hold this process's GIL
        # while the paced producer's delivery reports wait
        phases: list[tuple[str, Callable[..., None] | None]] = [
            ("idle", None),
            ("auto_create", _auto_create),
            ("metadata_all", _metadata_all),
            ("delete_records", _delete_records),
            ("retention", alter("big", {"segment.bytes": str(1 << 20), "retention.ms": "1"})),
            (
                "compaction",
                alter(
                    "keyed",
                    {"segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.01", "cleanup.policy": "compact"},
                ),
            ),
            ("cpu_bound", _cpu_bound),
            ("memory_bound", _memory_bound),
            ("down_convert", _down_convert),
            ("recompress", _producing(["gzip-topic", "lz4-topic"], False, heavy_records)),
            ("compacted_keys", _producing(["compacted", "compacted"], True, heavy_records)),
        ]
        counted = {"down_convert", "recompress", "compacted_keys"}  # their work takes a `done` counter
        results: dict[str, Any] = {}
        workers_hwm_kb = 0
        for name, work in phases:
            if not runs(name):
                continue
            stop.clear()
            proc = None
            done = multiprocessing.get_context("fork").Value("q", 0)
            cpu0 = (_cpu(broker.pid), sum(_cpu(c) for c in _descendants(broker.pid)))
            heavy_cpu = 0.0
            start = time.monotonic()
            if name in ("retention", "compaction"):
                assert work is not None
                work()  # a config change; the broker's timers do the rest
            elif work is not None:
                work_args = (addr, stop, done) if name in counted else (addr, stop)
                proc = multiprocessing.get_context("fork").Process(target=work, args=work_args, daemon=True)
                proc.start()
            time.sleep(seconds)
            end = time.monotonic()
            if proc is not None:
                with contextlib.suppress(OSError):
                    # before it is told to end (a process that ended has left the process list), its children too
                    heavy_cpu = _cpu(proc.pid) + sum(_cpu(c) for c in _descendants(proc.pid))
            stop.set()
            if proc is not None:
                proc.join(300)
            results[name] = _stats(prod.samples, start, end)
            if name in counted:
                results[name]["heavy_requests"] = done.value
            results[name]["cpu_s"] = {
                "broker": round(_cpu(broker.pid) - cpu0[0], 2),
                "workers": round(sum(_cpu(c) for c in _descendants(broker.pid)) - cpu0[1], 2),
                "heavy_clients": round(heavy_cpu, 2),
            }
            workers_hwm_kb = max(workers_hwm_kb, sum(_vm_hwm_kb(pid) for pid in _descendants(broker.pid)))
            time.sleep(1.0)
        prod.stop.set()
        prod.join(60)
        idle = results["idle"].get("p99_ms") or 0.0
        bound = results.get("cpu_bound", {}).get("p99_ms") or 0.0
        memory = results.get("memory_bound", {}).get("p99_ms") or 0.0
        for r in results.values():
            if idle and "p99_ms" in r:
                r["p99_ratio"] = round(r["p99_ms"] / idle, 2)
            if bound and "p99_ms" in r:
                r["p99_over_cpu_bound"] = round(r["p99_ms"] / bound, 2)
            if memory and "p99_ms" in r:
                r["p99_over_memory_bound"] = round(r["p99_ms"] / memory, 2)
        out["phases"] = results
        out["failed_deliveries"] = prod.failed
        md = admin.list_topics(timeout=30)
        out["topics"] = len(md.topics)
        out["broker_peak_rss_mb"] = round(_vm_hwm_kb(broker.pid) / 1024, 1)
        out["workers_peak_rss_mb"] = round(workers_hwm_kb / 1024, 1)  # summed over the worker processes
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
