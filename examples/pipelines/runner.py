"""Run a pipeline: create its topics, optionally generate events, start its queries, wait.

``odradek pipeline run|generate|list`` calls these; so can a script run from the repository
root::

    from examples.pipelines import runner
    runner.run("activity", bootstrap="127.0.0.1:9092", generate=2000, available_now=True)
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from . import PIPELINES
from ._common import Settings, ensure_topics, iso_ms, parse_iso, publish

__all__ = ["describe", "generate", "load", "run", "spark_session"]


def load(name: str) -> Any:
    """The pipeline module ``name``."""
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}: choose one of {', '.join(PIPELINES)}")
    return importlib.import_module(f"{__package__}.{name}")


def describe() -> list[tuple[str, str]]:
    """``(name, summary)`` of every pipeline."""
    return [(name, load(name).SUMMARY) for name in PIPELINES]


def spark_session(master: str = "local[*]", shuffle_partitions: int = 4) -> tuple[Any, bool]:
    """The running SparkSession (when called from a Spark application) or a new local one;
    ``True`` when it is new (the caller stops it).  The ``odradek`` data source is registered
    and the session time zone of a new session is UTC (the event times are)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    import odradek.spark

    created = SparkContext._active_spark_context is None
    if not created:
        session = SparkSession.builder.getOrCreate()
    else:
        os.environ.setdefault("PYSPARK_PYTHON", odradek.spark.worker_python())
        builder = SparkSession.builder.master(master)
        if master.startswith("local"):  # everything on this machine: stay on the loopback interface
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1")
        session = (
            builder
            .appName("odradek-pipelines")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("WARN")
    odradek.spark.register(session)
    return session, created


def _settings(bootstrap: str, output: str | Path, prefix: str, **kwargs: Any) -> Settings:
    return Settings(bootstrap=bootstrap, output=Path(output), prefix=prefix, **kwargs)


def generate(
    name: str,
    *,
    bootstrap: str = "127.0.0.1:9092",
    count: int = 1000,
    seed: int = 1,
    start: str = "auto",
    prefix: str = "",
    out: TextIO = sys.stdout,
) -> int:
    """Create the pipeline's topics and send ``count`` generated events to its input topic.
    ``start`` is the event time of the first: ISO 8601, ``now``, or ``auto`` — a second after
    the newest event already in the topic, or now if there is none, so that generating again
    continues the stream rather than sending events the watermark has passed."""
    module = load(name)
    settings = _settings(bootstrap, "pipeline-output", prefix)
    topic = settings.topic(module.INPUT)
    for created in ensure_topics(bootstrap, module.topics(settings)):
        out.write(f"created topic {created}\n")
    if start.strip().lower() == "auto":
        newest = _newest_timestamp(bootstrap, topic)
        start_ms = parse_iso("now") if newest is None else max(parse_iso("now"), newest + 1000)
    else:
        start_ms = parse_iso(start)
    events = module.generate(count, seed, start_ms)
    sent = publish(bootstrap, topic, events)
    out.write(f"sent {sent} events to {topic} (seed {seed}, event times from {iso_ms(start_ms)})\n")
    out.flush()
    return sent


def _newest_timestamp(bootstrap: str, topic: str) -> int | None:
    """The largest record timestamp (the event time, for the generators' records) in ``topic``."""
    from odradek.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        partitions = admin.describe_topics([topic])[topic].partitions
        found = admin.list_offsets({(topic, p.partition): "max_timestamp" for p in partitions})
    stamps = [r.timestamp for r in found.values() if r.offset >= 0 and r.timestamp >= 0]
    return max(stamps) if stamps else None


#: how many times :func:`run` starts the queries again after one failed (Spark itself restarts
#: none: a failed query stays failed; a Python worker that does not start within Spark's fixed
#: 10 s, on a loaded machine, fails its query)
RESTARTS = 2


def run(
    name: str,
    *,
    bootstrap: str = "127.0.0.1:9092",
    output: str | Path = "pipeline-output",
    prefix: str = "",
    generate_count: int = 0,
    seed: int = 1,
    start: str = "auto",
    available_now: bool = False,
    timeout: float | None = None,
    trigger_interval: str = "5 seconds",
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    master: str = "local[*]",
    restarts: int = RESTARTS,
    out: TextIO = sys.stdout,
) -> int:
    """Run pipeline ``name`` until it has caught up (``available_now``), until ``timeout``
    seconds have passed, or until Ctrl-C.  When a query fails, the pipeline's queries are
    started again from their checkpoints, up to ``restarts`` times (what they wrote is written
    once: their sinks and checkpoints make a restart exactly-once).  Returns 0, or 1 when a
    query failed every time or did not catch up within ``timeout``."""
    if restarts < 0:
        raise ValueError("restarts must be 0 or more")
    module = load(name)
    settings = _settings(
        bootstrap,
        output,
        prefix,
        available_now=available_now,
        trigger_interval=trigger_interval,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )
    for topic in ensure_topics(bootstrap, module.topics(settings)):
        out.write(f"created topic {topic}\n")
    if generate_count:
        generate(name, bootstrap=bootstrap, count=generate_count, seed=seed, start=start, prefix=prefix, out=out)
    spark, created = spark_session(master)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for attempt in range(restarts + 1):
            queries = module.start(spark, settings)
            for q in queries:
                out.write(f"started query {q.name}\n")
            if attempt == 0:
                for line in module.outputs(settings):
                    out.write(f"  -> {line}\n")
            out.flush()
            finished = interrupted = False
            try:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.01)
                finished = _wait(queries, available_now, left)
            except KeyboardInterrupt:
                interrupted = True
                out.write("interrupted: stopping\n")
            finally:
                for q in queries:
                    if q.isActive:
                        q.stop()
            failures = [q for q in queries if q.exception() is not None]
            if not failures or interrupted or attempt == restarts:
                break
            for q in failures:
                reason = (str(q.exception()).strip().splitlines() or [type(q.exception()).__name__])[0]
                out.write(f"{q.name} failed: {reason}\n")
            out.write(f"restarting the queries from their checkpoints ({attempt + 1} of {restarts})\n")
        failed = False
        for q in queries:
            progress = q.recentProgress
            rows = sum(p["numInputRows"] for p in progress)
            watermark = progress[-1].get("eventTime", {}).get("watermark", "-") if progress else "-"
            out.write(f"{q.name}: {len(progress)} micro-batches, {rows} input rows, watermark {watermark}\n")
            if q.exception() is not None:
                failed = True
                out.write(f"{q.name} failed: {q.exception()}\n")
        if available_now and not finished and not failed:
            out.write(f"not caught up after {timeout} s\n")
            failed = True
        out.flush()
        return 1 if failed else 0
    finally:
        if created:
            spark.stop()


def _wait(queries: list[Any], available_now: bool, timeout: float | None) -> bool:
    """Wait for every query to end (``available_now``) or for ``timeout``; returns whether
    they all ended.  A query that fails or stops ends the wait."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        active = [q for q in queries if q.isActive]
        if not active:
            return True
        if len(active) < len(queries) and (not available_now or any(q.exception() is not None for q in queries)):
            return False
        left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
        if left <= 0:
            return False
        try:
            active[0].awaitTermination(max(left, 0.01))
        except Exception:  # PySpark raises the query's failure here: it is read from exception()
            if active[0].exception() is None:
                raise
