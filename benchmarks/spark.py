"""Benchmark of the ``odradek`` PySpark data source against Spark's own row generation.

Run: ``python benchmarks/spark.py [--records N] [--repeats R]`` (or ``python -m
benchmarks.spark``). Prints one JSON object (~1-2 min with the defaults). Needs pyspark >= 4.2,
pyarrow, confluent-kafka and Java 17.

A fresh ``odradek serve`` process gets a 2-partition topic of ``records`` (2,000,000) values of
100 bytes (no key), produced with confluent-kafka (``linger.ms=20``, ``batch.size=1 MiB``,
uncompressed; the produce time is given for information). One local Spark session
(``local[2]``: the machine's two cores) then runs, alternately, ``repeats`` times each:

* ``reference`` - ``spark.range(records).selectExpr("repeat(cast(id % 10 AS string), 100) AS
  value")`` aggregated with ``sum(length(value))``: the same number of 100-byte values, made
  by Spark's generated code without any I/O;
* ``batch_read`` - ``spark.read.format("odradek")`` over the topic (both partitions, all
  columns, as Spark's Kafka source) with the same ``sum(length(value))``.

Window: ``collect()`` of the aggregate (job start to result on the driver). Figures are medians;
``ratio`` is odradek rows/s over reference rows/s of this run (target >= 0.7). Both sums are
checked to be ``records * 100``. Each query runs ``warmup`` (3) times before the ``repeats``
(7) timed runs (JIT, Python workers). ``cpu_seconds`` splits the median-run CPU time of this process's descendants into the
JVM, Spark's Python workers (where the data source's ``read()`` decodes) and the broker.

``python_source_ceiling`` runs the same aggregate, in the same alternation, over a Python data
source that only yields ready-made ``pyarrow.RecordBatch`` objects with the source's seven
columns (100-byte values, 35,000 rows a batch, one task per partition): no broker, no fetching,
no decoding.  Its ratio to the reference is the most any Python data source can reach in this
Spark on this machine; ``ratio_to_ceiling`` is odradek's rows/s over it (``ceiling_target``
0.9).  ``transport_cpu`` reads the topic outside Spark with the executors' code, five times,
and splits the CPU of the broker and of the reader into user and kernel time per million
records; ``ceiling_bound`` turns the kernel part (moving the bytes through loopback TCP, which
no user-space code removes) into the highest ``ratio_to_ceiling`` a network read can reach on
these CPU-bound cores: the ceiling's CPU per run over that plus the kernel's.  ``ratio_to_bound``
is ``ratio_to_ceiling`` over that bound (issue 45's target: >= 0.95).

* ``offline_read`` - ``spark.read.format("odradek").option("path", <the broker's data dir>)``
  (issue 24: the segment files read by the executors, no broker and no socket in the path) over
  the same topic with the same aggregate, timed in the same alternation; ``ratio_to_batch_read``
  is its rows/s over the network batch read's (target >= 1.2), ``ratio`` over the reference's;
  ``bound`` is its own bound, as ``ceiling_bound`` is the network read's: ``read_cpu`` reads the
  segment files outside Spark with the executors' code, five times, and the kernel part of that
  CPU (the file reads) bounds ``ratio_to_ceiling``; ``ratio_to_bound`` is the read's share of it
  (target 0.95, as the batch read's ``ratio_to_bound`` against ``ceiling_bound``);
  ``ratio_to_batch_read_at_most`` is the ceiling's rows/s over the network read's (an offline
  read is a Python data source too).
  The broker runs with the default flush settings, so its recovery-point checkpoint does not
  cover the topic: the read takes ``readPastRecoveryPoint=true`` (up to the last complete batch).

* ``streaming`` - ``spark.readStream.format("odradek")`` from the earliest offsets with
  ``maxOffsetsPerTrigger = records / 10`` and ``Trigger.AvailableNow`` into the ``noop`` sink:
  window ``start()`` to the end of the query; rows/s over all batches, and the number of
  micro-batches (each at most the limit). Median of ``stream_repeats`` runs, each with a new
  checkpoint, after ``stream_warmup`` (1) untimed runs of both streams (the first streaming query
  of a session pays for the JVM's class loading and JIT of the streaming engine: ~1 s); ratios
  to the reference and to the batch read of this run.

* ``pushdown`` - filter pushdown (issue 45): a second topic, ``pushdown_records`` (3,000,000, as in the issue)
  records of 100-byte values over 3 partitions with record timestamps spread evenly over 3 hours,
  queried with ``timestamp >= <the last 1 %, 10 %, 100 % of the span>`` and ``sum(length(value))``,
  once with ``spark.sql.python.filterPushdown.enabled=true`` (the source reads from the offsets
  the time index gives) and once without (the whole topic read, Spark filtering), alternately,
  ``repeats`` times each after ``warmup`` runs of every query; ``ratio`` is the pushdown query's median time over
  the full scan's (target at 1 %: <= 0.1).  ``nothing_to_read_seconds``: a pushdown query that
  plans no range (``partition < 0``), the per-query floor of planning and running a Spark job
  over a Python source; ``nothing_to_read_with_load_seconds`` the same timed as the other
  queries (``load()`` included), alternately with ``python_source_floor_seconds``: a Python
  source that takes every filter and plans nothing without any I/O, the floor of any Python
  source's query here; ``ratio_at_most_at_1%`` is that floor over the full scan's time at 1 %,
  the lowest ``ratio`` a Python source can reach (issue 45's target is 0.1).
  ``--pushdown-only`` runs this part alone.

The session takes the Python worker settings :func:`odradek.spark.session` sets
(``odradek.spark.PYTHON_WORKER_CONF``: Unix domain sockets between the JVM and its Python
workers); ``--tcp-python-workers`` keeps PySpark's default (loopback TCP) instead.

The machine is a shared 2-core VM: the JVM, the Python workers and the broker share both cores,
so the figures move by 10-20 % between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from benchmarks._proc import cpu_seconds, proc_cpu_times, proc_stat
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import cpu_seconds, proc_cpu_times, proc_stat
    from odradek.testing import BrokerProcess

TARGET_RATIO = 0.7
#: issue 24: the offline read (segment files) vs the network batch read of the same run
OFFLINE_TARGET = 1.2
#: issue 19: batch read vs the Python-source ceiling, streaming vs the toy streaming ceiling
CEILING_TARGET = 0.9
STREAM_CEILING_TARGET = 0.8
VALUE_SIZE = 100
PARTITIONS = 2
TOPIC = "bench"


def produce(bootstrap: str, records: int) -> float:
    import confluent_kafka as ck

    from odradek.client import Admin, NewTopic

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    value = b"v" * VALUE_SIZE
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) != 0:
        raise RuntimeError("records left unsent")
    return time.perf_counter() - t0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = int(proc_stat(int(name))[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, ()):
            out.append(c)
            todo.append(c)
    return out


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds (user + system) of this process's descendants: jvm, python_workers, broker."""
    out = {"jvm": 0.0, "python_workers": 0.0, "broker": 0.0}
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        seconds = cpu_seconds(pid)
        if "odradek serve" in cmd or "odradek.__main__" in cmd or " -m odradek " in cmd:
            out["broker"] += seconds
        elif cmd.split(" ")[0].endswith("java"):
            out["jvm"] += seconds
        elif "pyspark" in cmd:
            out["python_workers"] += seconds
    return out


def median_run(runs: list[tuple[float, Any, dict[str, float]]]) -> tuple[float, Any, dict[str, float]]:
    """The run of median time among ``timed`` results (its CPU split goes with it)."""
    return sorted(runs, key=lambda r: r[0])[len(runs) // 2]


def timed(fn: Any) -> tuple[float, Any, dict[str, float]]:
    c0 = cpu_by_kind()
    t0 = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - t0
    c1 = cpu_by_kind()
    return elapsed, result, {k: round(c1[k] - c0[k], 2) for k in c0}


def ready_batches() -> Any:
    """A function yielding ``rows`` rows of the source's seven columns as ready-made Arrow batches
    of 35,000 (100-byte values): what the ceilings' readers hand Spark.  A closure, so that
    Spark's workers get it by value whatever way this file was started."""

    def ready(rows: int) -> Any:
        import pyarrow as pa

        from odradek.spark._arrow import arrow_schema

        n = 35_000
        batch = pa.RecordBatch.from_arrays(
            [
                pa.nulls(n, pa.binary()),
                pa.array([b"v" * VALUE_SIZE] * n, pa.binary()),
                pa.repeat(pa.scalar(TOPIC), n),
                pa.repeat(pa.scalar(0, pa.int32()), n),
                pa.array(range(n), pa.int64()),
                pa.array(range(n), pa.int64()).view(pa.timestamp("us", tz="UTC")),
                pa.repeat(pa.scalar(0, pa.int32()), n),
            ],
            schema=arrow_schema(False),
        )
        left = rows
        while left > 0:
            yield batch if left >= n else batch.slice(0, left)
            left -= n

    return ready


def register_ceiling(spark: Any, records: int) -> Any:
    """A Python data source yielding ready-made Arrow batches of the source's columns."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from odradek.spark.source import source_schema

    ready = ready_batches()

    class CeilingReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(records // PARTITIONS) for _ in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Any:
            return ready(partition.value)

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "odradek_ceiling"

        def schema(self) -> Any:
            return source_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return CeilingReader()

    spark.dataSource.register(Ceiling)
    return spark.read.format("odradek_ceiling").load()


def register_stream_ceiling(spark: Any, records: int) -> None:
    """A Python streaming data source with the same trigger sizes and columns as the odradek
    stream, yielding ready-made Arrow batches: the Python-streaming-source ceiling."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    from odradek.spark.source import source_schema

    per_partition = records // PARTITIONS
    ready = ready_batches()

    class CeilingStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, limit: int) -> None:
            self.limit = limit

        def initialOffset(self) -> dict:
            return {str(p): 0 for p in range(PARTITIONS)}

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(self.limit) if self.limit else ReadAllAvailable()

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            share = limit.max_rows // PARTITIONS if isinstance(limit, ReadMaxRows) else per_partition
            return {p: min(int(o) + share, per_partition) for p, o in start.items()}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [InputPartition((int(start[p]), int(end[p]))) for p in sorted(start) if end[p] > start[p]]

        def read(self, partition: InputPartition) -> Any:
            first, last = partition.value
            return ready(last - first)

        def commit(self, end: dict) -> None:
            pass

    class CeilingStreamSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "odradek_stream_ceiling"

        def schema(self) -> Any:
            return source_schema(False)

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return CeilingStream(int(self.options.get("maxOffsetsPerTrigger", 0)))

    spark.dataSource.register(CeilingStreamSource)


def transport_cost(bootstrap: str, broker_pid: int, records: int, repeats: int = 5) -> dict[str, Any]:
    """User and kernel CPU of the network read outside Spark: the topic read ``repeats`` times
    in this process by the executors' code (``read_range``, compiled decoder), with the
    broker's CPU split the same way; per million records.  Most of it is the kernel's (the
    broker's sendfile and this process's receive through loopback TCP), which no user-space
    code of either side removes."""
    from odradek.spark._fetch import read_range

    per_partition = records // PARTITIONS
    b0, me0 = proc_cpu_times(broker_pid), os.times()
    rows = 0
    for _ in range(repeats):
        for p in range(PARTITIONS):
            for batch in read_range({"bootstrap.servers": bootstrap}, TOPIC, p, 0, per_partition):
                rows += batch.num_rows
    b1, me1 = proc_cpu_times(broker_pid), os.times()
    if rows != repeats * PARTITIONS * per_partition:
        raise RuntimeError(f"transport_cost read {rows} rows")
    million = rows / 1e6
    return {
        "broker_user_s_per_million": round((b1[0] - b0[0]) / million, 4),
        "broker_kernel_s_per_million": round((b1[1] - b0[1]) / million, 4),
        "reader_user_s_per_million": round((me1.user - me0.user) / million, 4),
        "reader_kernel_s_per_million": round((me1.system - me0.system) / million, 4),
    }


def ceiling_bound(ceiling_cpu: float, records: int, transport: dict[str, Any]) -> dict[str, Any]:
    """The highest ``ratio_to_ceiling`` a network read can reach here when the run is CPU-bound
    (both the ceiling's runs and the source's keep the same cores busy): the ceiling's CPU per
    run against that plus the kernel CPU of moving the records through loopback TCP (broker and
    reader, from ``transport``), with decoding and all user-space work of the broker free."""
    kernel = (transport["broker_kernel_s_per_million"] + transport["reader_kernel_s_per_million"]) * records / 1e6
    return {
        "ceiling_cpu_s_per_run": round(ceiling_cpu, 3),
        "kernel_transport_cpu_s_per_run": round(kernel, 3),
        "ratio_to_ceiling_at_most": round(ceiling_cpu / (ceiling_cpu + kernel), 3) if ceiling_cpu > 0 else None,
    }


def offline_cost(data_dir: Path, records: int, repeats: int = 5) -> dict[str, Any]:
    """User and kernel CPU of the offline read outside Spark: the topic read ``repeats`` times in
    this process by the executors' code (``read_offline`` over the segment files, as planned by
    ``plan_offline``), per million records.  Its kernel part (reading the files through the page
    cache) is what no user-space code removes: the offline read's own bound, as ``transport_cost``
    is the network read's."""
    from odradek.spark._offline import parse_offline_options, plan_offline, read_offline

    opts = parse_offline_options({"path": str(data_dir), "subscribe": TOPIC, "readPastRecoveryPoint": "true"})
    me0 = os.times()
    rows = 0
    for _ in range(repeats):
        for r in plan_offline(opts):
            for batch in read_offline(r.directory, r.topic, r.partition, r.start, r.end):
                rows += batch.num_rows
    me1 = os.times()
    if rows != repeats * records:
        raise RuntimeError(f"offline_cost read {rows} rows")
    million = rows / 1e6
    return {
        "reader_user_s_per_million": round((me1.user - me0.user) / million, 4),
        "reader_kernel_s_per_million": round((me1.system - me0.system) / million, 4),
    }


def offline_bound(ceiling_cpu: float, records: int, cost: dict[str, Any]) -> dict[str, Any]:
    """The highest ``ratio_to_ceiling`` the offline read can reach here (as ``ceiling_bound``): the
    ceiling's CPU per run against that plus the kernel CPU of reading the segment files."""
    kernel = cost["reader_kernel_s_per_million"] * records / 1e6
    return {
        "ceiling_cpu_s_per_run": round(ceiling_cpu, 3),
        "kernel_read_cpu_s_per_run": round(kernel, 3),
        "ratio_to_ceiling_at_most": round(ceiling_cpu / (ceiling_cpu + kernel), 3) if ceiling_cpu > 0 else None,
    }


#: records per producer batch in ``decode_alone``: ~1 MiB of 100-byte values, as the benchmark's
#: producer's ``batch.size``
BATCH_RECORDS = 9_000


def decode_alone(records: int = 1_000_000, repeats: int = 5) -> dict[str, Any]:
    """Median seconds of ``decode_partition_data`` over ``records`` records in buffers of record
    batches the size of the executors' fetches (``DEFAULT_FETCH_BYTES``, 4 MiB: each buffer is
    one decode call, as one Fetch response is), in this process (the decoder in use is fixed at
    import: see ``odradek.records.speedups``).  One buffer of all the records would time the
    page faults of a fresh 100 MB allocation more than the decoding.

    ``uniform``: ``records`` x 100-byte values, no key, one timestamp per batch (the batch and
    stream shape); ``mixed``: keys, values of 0-299 bytes, increasing timestamps, a header on
    every third record (real data: no runs of one layout)."""
    import random

    from odradek.records import speedups
    from odradek.records.v2 import BatchBuilder
    from odradek.spark._arrow import decode_partition_data
    from odradek.spark._options import DEFAULT_FETCH_BYTES

    rng = random.Random(7)
    out: dict[str, Any] = {"implementation": speedups.implementation()}
    for shape in ("uniform", "mixed"):
        # producer-sized batches (~1 MiB, as the benchmark's producer's batch.size), gathered
        # into fetch-sized buffers: (first offset, bytes) of each
        buffers: list[tuple[int, bytes]] = []
        chunk: list[bytes] = []
        chunk_base = base = 0
        while base < records:
            b = BatchBuilder(base_offset=base)
            for i in range(min(BATCH_RECORDS, records - base)):
                if shape == "uniform":
                    b.append(1_700_000_000_000, None, b"v" * VALUE_SIZE)
                else:
                    headers = [("trace", b"%016x" % i)] if i % 3 == 0 else None
                    b.append(1_700_000_000_000 + i, b"user-%d" % (i % 977), rng.randbytes(rng.randrange(300)), headers)
            built = b.build()
            if chunk and sum(map(len, chunk)) + len(built) > DEFAULT_FETCH_BYTES:
                buffers.append((chunk_base, b"".join(chunk)))
                chunk, chunk_base = [], base
            chunk.append(built)
            base += BATCH_RECORDS
        buffers.append((chunk_base, b"".join(chunk)))
        times = []
        for _ in range(repeats + 1):
            rows = 0
            t0 = time.perf_counter()
            for first, data in buffers:
                decoded = decode_partition_data(data, TOPIC, 0, first, records, include_headers=shape == "mixed")
                rows += decoded.batch.num_rows if decoded.batch is not None else 0
            times.append(time.perf_counter() - t0)
            if rows != records:
                raise RuntimeError("decoded the wrong number of records")
        median = statistics.median(times[1:])
        out[shape] = {
            "seconds": round(median, 4),
            "rows_per_s": round(records / median),
            "mb": round(sum(len(d) for _, d in buffers) / 1e6, 1),
            "buffers": len(buffers),
        }
    return out


def decode_both() -> dict[str, Any]:
    """``decode_alone`` in two child processes: the compiled decoder, and pure Python."""
    result: dict[str, Any] = {}
    for name, flag in (("compiled", "0"), ("pure_python", "1")):
        env = dict(os.environ, ODRADEK_PURE_PYTHON=flag)
        out = subprocess.run(
            [sys.executable, __file__, "--decode-child"], capture_output=True, text=True, timeout=600, env=env
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        result[name] = json.loads(out.stdout)
    if result["compiled"]["implementation"] != "compiled":
        result["note"] = "the compiled decoder is not built here: both figures are pure Python"
    for shape in ("uniform", "mixed"):
        result[f"{shape}_speedup"] = round(result["pure_python"][shape]["seconds"] / result["compiled"][shape]["seconds"], 2)
    return result


def end_to_end_latency(spark: Any, bootstrap: str, work: Path, rate: int, seconds: float, warmup: float) -> dict[str, Any]:
    """produce -> Odradek -> Spark (processingTime 1 s) -> Odradek: per record, the time from
    ``produce()`` (its value carries ``time.time()``) to its arrival at a consumer of the output
    topic (confluent-kafka, ``fetch.wait.max.ms=5``); records produced in the first ``warmup``
    seconds after the query's first batch are not counted."""
    import threading

    import confluent_kafka as ck

    from odradek.client import Admin, NewTopic

    source, sink = "latency-in", "latency-out"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(source, PARTITIONS, 1), NewTopic(sink, PARTITIONS, 1)])
    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "latest")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(work / "latency-checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    latencies: list[float] = []
    stop = threading.Event()
    counted_from = [float("inf")]

    def consume() -> None:
        c = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "latency",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 5,
            }
        )
        c.assign([ck.TopicPartition(sink, p, 0) for p in range(PARTITIONS)])
        while not stop.is_set():
            for m in c.consume(1000, 0.05):
                if m.error() is None:
                    now = time.time()
                    sent = float((m.value() or b"0")[:20])
                    if sent >= counted_from[0]:
                        latencies.append(now - sent)
        c.close()

    reader = threading.Thread(target=consume, daemon=True)
    try:
        for _ in range(600):  # the query's first (empty) batch has run
            if query.lastProgress is not None:
                break
            time.sleep(0.1)
        reader.start()
        p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": 1})
        t0 = time.time()
        counted_from[0] = t0 + warmup
        sent = 0
        end = t0 + warmup + seconds
        while time.time() < end:
            due = int((time.time() - t0) * rate)
            while sent < due:
                p.produce(source, value=b"%20.6f" % time.time() + b"x" * (VALUE_SIZE - 20), key=b"%d" % sent)
                sent += 1
            p.poll(0)
            time.sleep(0.002)
        p.flush(30)
        expected = int(seconds * rate * 0.95)
        for _ in range(300):  # the last records through the pipeline
            if len(latencies) >= expected:
                time.sleep(3)
                break
            time.sleep(0.1)
    finally:
        stop.set()
        reader.join(10)
        query.stop()
    if not latencies:
        raise RuntimeError("no record came through the pipeline")
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {
        "window": "produce() to arrival at a consumer of the output topic; trigger processingTime 1 s",
        "rate_per_s": rate,
        "measured_records": len(ordered),
        "produced": sent,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


#: issue 45: pushdown query time over full scan + filter time, at 1 % selectivity
PUSHDOWN_TARGET = 0.1
PUSHDOWN_TOPIC = "bench-ts"
PUSHDOWN_SPAN_MS = 3 * 3600 * 1000


def produce_timestamped(bootstrap: str, records: int, t0: int) -> None:
    """``records`` 100-byte values over 3 partitions, timestamps evenly over ``PUSHDOWN_SPAN_MS`` from ``t0``."""
    import confluent_kafka as ck

    from odradek.client import Admin, NewTopic

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(PUSHDOWN_TOPIC, 3, 1)])
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    value = b"v" * VALUE_SIZE
    for i in range(records):
        ts = t0 + PUSHDOWN_SPAN_MS * i // records
        while True:
            try:
                p.produce(PUSHDOWN_TOPIC, value, partition=i % 3, timestamp=ts)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) != 0:
        raise RuntimeError("records left unsent")


def _plans_nothing(reader: Any) -> Any:
    return reader.load().where("partition < 0").selectExpr("sum(length(value)) AS n").collect()


def register_floor_source(spark: Any) -> None:
    """A Python data source with the source's columns that takes every pushed filter and plans
    nothing, with no I/O: what any Python source's query costs Spark here when it reads nothing."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from odradek.spark.source import source_schema

    class FloorReader(DataSourceReader):
        def pushFilters(self, filters: list[Any]) -> Any:
            return list(filters)

        def partitions(self) -> list[InputPartition]:
            return []

        def read(self, partition: InputPartition) -> Any:
            return iter(())

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "odradek_floor"

        def schema(self) -> Any:
            return source_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    spark.dataSource.register(Floor)


def pushdown_bench(spark: Any, bootstrap: str, records: int, repeats: int, warmup: int) -> dict[str, Any]:
    """Pushdown query vs full scan + filter at selectivities 1 %, 10 % and 100 % (see the module docstring)."""
    from odradek.spark import PUSHDOWN_CONF

    t0 = 1_700_000_000_000
    produce_timestamped(bootstrap, records, t0)
    out: dict[str, Any] = {"records": records, "span_hours": 3, "partitions": 3}

    def query(enabled: bool, where: str, expected: int) -> Any:
        spark.conf.set(PUSHDOWN_CONF, "true" if enabled else "false")
        df = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap).option("subscribe", PUSHDOWN_TOPIC).load()
        got = df.where(where).selectExpr("sum(length(value)) AS n").collect()[0].n or 0
        if got != expected:
            raise RuntimeError(f"pushdown={enabled} {where}: sum(length(value)) is {got}, expected {expected}")
        return got

    shares = (0.01, 0.1, 1.0)
    cases = []
    for share in shares:
        since = t0 + PUSHDOWN_SPAN_MS - int(PUSHDOWN_SPAN_MS * share)
        expected = sum(1 for i in range(records) if t0 + PUSHDOWN_SPAN_MS * i // records >= since) * VALUE_SIZE
        cases.append((share, f"timestamp >= timestamp_millis({since})", expected))
    for _ in range(warmup):  # JIT and Python workers, every query
        for _share, where, expected in cases:
            query(True, where, expected)
            query(False, where, expected)
    runs: dict[float, tuple[list[Any], list[Any]]] = {share: ([], []) for share in shares}
    for _ in range(repeats):  # alternately, every selectivity in each round
        for share, where, expected in cases:
            runs[share][0].append(timed(lambda w=where, e=expected: query(True, w, e)))
            runs[share][1].append(timed(lambda w=where, e=expected: query(False, w, e)))
    for share, where, expected in cases:
        pushed_runs, full_runs = runs[share]
        pushed_t = statistics.median(r[0] for r in pushed_runs)
        full_t = statistics.median(r[0] for r in full_runs)
        out[f"{round(share * 100)}%"] = {
            "where": where,
            "rows": expected // VALUE_SIZE,
            "pushdown_seconds": [round(r[0], 3) for r in pushed_runs],
            "full_scan_seconds": [round(r[0], 3) for r in full_runs],
            "ratio": round(pushed_t / full_t, 3),
        }
    # the floor under any pushdown query: one that plans nothing (Spark's and the planner workers' cost)
    spark.conf.set(PUSHDOWN_CONF, "true")
    floor = []
    for _ in range(repeats):
        df = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap).option("subscribe", PUSHDOWN_TOPIC).load()
        floor.append(timed(lambda df=df: df.where("partition < 0").selectExpr("sum(length(value)) AS n").collect()))
    out["nothing_to_read_seconds"] = [round(r[0], 3) for r in floor]
    # the same, timed as ``query`` (load() included), alternately with a Python source that takes
    # every filter and plans nothing without any I/O: the floor of any Python data source here
    register_floor_source(spark)
    ours, toy = [], []
    for _ in range(repeats):
        ours.append(timed(lambda: _plans_nothing(spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap).option("subscribe", PUSHDOWN_TOPIC))))
        toy.append(timed(lambda: _plans_nothing(spark.read.format("odradek_floor"))))
    toy_t = statistics.median(r[0] for r in toy)
    out["nothing_to_read_with_load_seconds"] = [round(r[0], 3) for r in ours]
    out["python_source_floor_seconds"] = [round(r[0], 3) for r in toy]
    out["ratio_at_most_at_1%"] = round(toy_t / statistics.median(r[0] for r in runs[shares[0]][1]), 3)
    spark.conf.unset(PUSHDOWN_CONF)
    ratio = out["1%"]["ratio"]
    out.update({"target_at_1%": PUSHDOWN_TARGET, "meets_target": ratio <= PUSHDOWN_TARGET})
    return out


def java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        return (out.stderr or out.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--stream-repeats", type=int, default=3)
    parser.add_argument("--stream-warmup", type=int, default=1)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--pushdown-records", type=int, default=3_000_000)
    parser.add_argument("--pushdown-only", action="store_true", help="run the pushdown part alone")
    parser.add_argument(
        "--tcp-python-workers",
        action="store_true",
        help="PySpark's default loopback TCP to the Python workers, not odradek.spark.session()'s Unix domain sockets",
    )
    parser.add_argument("--decode-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.decode_child:
        print(json.dumps(decode_alone()))
        return
    records = args.records

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from odradek.spark import worker_python

    os.environ["PYSPARK_PYTHON"] = worker_python()  # what odradek.spark.session() gives the workers
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import pyarrow
    import pyspark
    from pyspark.sql import SparkSession

    import odradek.spark

    work = Path(tempfile.mkdtemp(prefix="odradek-spark-bench-"))
    broker = BrokerProcess(work / "data", overrides={"num.partitions": PARTITIONS})
    broker.start()
    spark = None
    try:
        produce_seconds = 0.0 if args.pushdown_only else produce(broker.bootstrap, records)
        builder = (
            SparkSession.builder.master("local[2]")
            .appName("odradek-benchmark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
        )
        workers = "tcp" if args.tcp_python_workers else "unix domain sockets"
        if not args.tcp_python_workers:
            for key, value in odradek.spark.PYTHON_WORKER_CONF.items():
                builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        odradek.spark.register(spark)
        if args.pushdown_only:
            pushdown = pushdown_bench(spark, broker.bootstrap, args.pushdown_records, args.repeats, args.warmup)
            print(json.dumps({"benchmark": "spark", "python_workers": workers, "pushdown": pushdown}, indent=2))
            return
        reference = spark.range(records).selectExpr(f"repeat(cast(id % 10 AS string), {VALUE_SIZE}) AS value")
        source = (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .load()
        )

        offline = (
            spark.read.format("odradek")
            .option("path", str(work / "data"))
            .option("subscribe", TOPIC)
            .option("readPastRecoveryPoint", "true")
            .load()
        )

        def total(df: Any) -> Any:
            return lambda: df.selectExpr("sum(length(value)) AS n").collect()[0].n

        ceiling = register_ceiling(spark, records)
        expected = records * VALUE_SIZE
        for _ in range(args.warmup):  # JIT and Python workers; the sums must agree
            for df in (reference, source, ceiling, offline):
                got = total(df)()
                if got != expected:
                    raise RuntimeError(f"sum(length(value)) is {got}, expected {expected}")
        ref_runs, src_runs, ceil_runs, off_runs = [], [], [], []
        for _ in range(args.repeats):
            ref_runs.append(timed(total(reference)))
            src_runs.append(timed(total(source)))
            ceil_runs.append(timed(total(ceiling)))
            off_runs.append(timed(total(offline)))
        ref_t = statistics.median(r[0] for r in ref_runs)
        src_t = statistics.median(r[0] for r in src_runs)
        ceil_t = statistics.median(r[0] for r in ceil_runs)
        off_t = statistics.median(r[0] for r in off_runs)
        src_median_run = median_run(src_runs)
        ref_median_run = median_run(ref_runs)

        limit = max(records // 10, 1)
        register_stream_ceiling(spark, records)
        stream_runs, toy_runs = [], []
        for i in range(-args.stream_warmup, args.stream_repeats):

            def run_stream(fmt: str, checkpoint: Path) -> Any:
                reader = spark.readStream.format(fmt)
                if fmt == "odradek":
                    reader = (
                        reader.option("kafka.bootstrap.servers", broker.bootstrap)
                        .option("subscribe", TOPIC)
                        .option("startingOffsets", "earliest")
                    )
                q = (
                    reader.option("maxOffsetsPerTrigger", str(limit))
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True)
                    .start()
                )
                q.awaitTermination()
                if q.exception() is not None:
                    raise RuntimeError(str(q.exception()))
                return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

            odradek_run = timed(lambda i=i: run_stream("odradek", work / f"checkpoint-{i}"))
            toy_run = timed(lambda i=i: run_stream("odradek_stream_ceiling", work / f"toy-checkpoint-{i}"))
            if i >= 0:  # negative: warm-up runs, not timed
                stream_runs.append(odradek_run)
                toy_runs.append(toy_run)
        toy_t = statistics.median(r[0] for r in toy_runs)
        if sum(toy_runs[0][1]) != records or max(toy_runs[0][1]) > limit:
            raise RuntimeError(f"the toy stream read {sum(toy_runs[0][1])} rows in batches {toy_runs[0][1]}")
        stream_t = statistics.median(r[0] for r in stream_runs)
        batches = stream_runs[0][1]
        if sum(batches) != records or max(batches) > limit:
            raise RuntimeError(f"streaming read {sum(batches)} rows in batches {batches}")

        latency = end_to_end_latency(spark, broker.bootstrap, work, 10_000, args.latency_seconds, warmup=5.0)
        decode = decode_both()
        transport = transport_cost(broker.bootstrap, broker.pid, records)
        ceil_median_run = median_run(ceil_runs)
        bound = ceiling_bound(sum(ceil_median_run[2].values()), records, transport)
        off_cost = offline_cost(work / "data", records)
        off_bound = offline_bound(sum(ceil_median_run[2].values()), records, off_cost)
        pushdown = pushdown_bench(spark, broker.bootstrap, args.pushdown_records, args.repeats, args.warmup)

        ref_rps = records / ref_t
        src_rps = records / src_t
        ceil_rps = records / ceil_t
        off_rps = records / off_t
        stream_rps = records / stream_t
        result = {
            "benchmark": "spark",
            "records": records,
            "value_bytes": VALUE_SIZE,
            "partitions": PARTITIONS,
            "spark_master": "local[2]",
            "batch_read": {
                "window": "collect() of sum(length(value)), median of repeats",
                "odradek_rows_per_s": round(src_rps),
                "reference_rows_per_s": round(ref_rps),
                "ratio": round(src_rps / ref_rps, 3),
                "target": TARGET_RATIO,
                "meets_target": src_rps / ref_rps >= TARGET_RATIO,
                "odradek_seconds": [round(r[0], 3) for r in src_runs],
                "reference_seconds": [round(r[0], 3) for r in ref_runs],
                "cpu_seconds": {"odradek": src_median_run[2], "reference": ref_median_run[2]},
                "ratio_to_ceiling": round(src_rps / ceil_rps, 3),
                "ceiling_target": CEILING_TARGET,
                "meets_ceiling_target": src_rps / ceil_rps >= CEILING_TARGET,
                "transport_cpu": transport,
                "ceiling_bound": bound,
                "ratio_to_bound": round(src_rps / ceil_rps / bound["ratio_to_ceiling_at_most"], 3)
                if bound["ratio_to_ceiling_at_most"]
                else None,
            },
            "offline_read": {
                "window": "collect() of sum(length(value)), median of repeats, in the batch_read alternation",
                "source": "option path = the broker's data dir (segment files), readPastRecoveryPoint=true",
                "rows_per_s": round(off_rps),
                "ratio_to_batch_read": round(off_rps / src_rps, 3),
                "target": OFFLINE_TARGET,
                "meets_target": off_rps / src_rps >= OFFLINE_TARGET,
                "ratio": round(off_rps / ref_rps, 3),
                "ratio_to_ceiling": round(off_rps / ceil_rps, 3),
                "read_cpu": off_cost,
                "bound": off_bound,
                "ratio_to_bound": round(off_rps / ceil_rps / off_bound["ratio_to_ceiling_at_most"], 3)
                if off_bound["ratio_to_ceiling_at_most"]
                else None,
                # an offline read is a Python data source too: at the ceiling's rate at best
                "ratio_to_batch_read_at_most": round(ceil_rps / src_rps, 3),
                "seconds": [round(r[0], 3) for r in off_runs],
                "cpu_seconds": median_run(off_runs)[2],
            },
            "python_source_ceiling": {
                "rows_per_s": round(ceil_rps),
                "ratio_to_reference": round(ceil_rps / ref_rps, 3),
                "seconds": [round(r[0], 3) for r in ceil_runs],
                "cpu_seconds": ceil_median_run[2],
            },
            "streaming": {
                "window": "start() to the end of a Trigger.AvailableNow query into the noop sink",
                "max_offsets_per_trigger": limit,
                "micro_batches": len(batches),
                "rows_per_batch": batches,
                "rows_per_s": round(stream_rps),
                "ratio_to_reference": round(stream_rps / ref_rps, 3),
                "ratio_to_batch_read": round(stream_rps / src_rps, 3),
                "ratio_to_stream_ceiling": round(stream_t and toy_t / stream_t, 3),
                "stream_ceiling_target": STREAM_CEILING_TARGET,
                "meets_stream_ceiling_target": bool(stream_t) and toy_t / stream_t >= STREAM_CEILING_TARGET,
                "stream_ceiling_rows_per_s": round(records / toy_t),
                "stream_ceiling_seconds": [round(r[0], 3) for r in toy_runs],
                "stream_ceiling_cpu_seconds": median_run(toy_runs)[2],
                "seconds": [round(r[0], 3) for r in stream_runs],
                "cpu_seconds": median_run(stream_runs)[2],
            },
            "pushdown": pushdown,
            "end_to_end_latency": latency,
            "decode_alone": decode,
            "info": {
                "produce_seconds": round(produce_seconds, 2),
                "produce_rows_per_s": round(records / produce_seconds),
            },
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "pyspark": pyspark.__version__,
                "pyarrow": pyarrow.__version__,
                "java": java_version(),
                "python_workers": workers,
            },
        }
        print(json.dumps(result, indent=2))
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
