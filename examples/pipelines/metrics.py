"""Operational metrics: samples from hosts -> one-minute aggregates per host and metric.

Input ``metrics`` (key: host; value: JSON)::

    {"host": "web-1", "metric": "http.latency_ms", "value": 41.27, "unit": "ms",
     "ts": "2024-03-09T12:00:01.123Z"}

Per host, metric and one-minute event-time window (watermark :data:`WATERMARK`): ``count``,
``mean``, ``p95``, ``min`` and ``max``, emitted once the window closes, to

- Parquet under ``OUTPUT/metrics/aggregates`` (every window), and
- the compacted topic ``metrics-latest`` (``cleanup.policy=compact``), key ``host|metric``:
  the newest closed window of each series, so that the topic keeps the latest value of
  every series.

``p95`` is ``percentile_approx(value, 0.95, 10000)``: the nearest-rank 95th percentile
(the smallest sample with at least 95 % of the samples at or below it); it is exact while a
window holds fewer than 5,000 samples (the summary's error bound, n / 10000, is below one
rank) and within ``n / 10000`` ranks beyond that.
"""

from __future__ import annotations

import random
from typing import Any

from ._common import (
    EVENT_TIME_FORMAT,
    Event,
    Settings,
    TopicSpec,
    arrival_order,
    iso_ms,
    json_event,
    read_topic,
    start_query,
    to_topic_and_parquet,
)

NAME = "metrics"
SUMMARY = "host metrics -> per-host, per-metric 1-minute count/mean/p95 (compacted topic + Parquet)"
INPUT = "metrics"
LATEST = "metrics-latest"
WATERMARK = "2 minutes"
MAX_DELAY_MS = 30_000
PERCENTILE_ACCURACY = 10_000
#: Each series reports every 3 s (with up to 1 s of jitter).
INTERVAL_MS = 3_000

#: host -> metric -> unit
SERIES = {
    "web-1": {"cpu.percent": "%", "http.latency_ms": "ms"},
    "web-2": {"cpu.percent": "%", "http.latency_ms": "ms"},
    "db-1": {"cpu.percent": "%", "db.query_ms": "ms"},
}


def topics(settings: Settings) -> list[TopicSpec]:
    return [
        TopicSpec(settings.topic(INPUT), 3),
        TopicSpec(
            settings.topic(LATEST),
            1,
            {"cleanup.policy": "compact", "segment.ms": "60000", "min.cleanable.dirty.ratio": "0.1"},
        ),
    ]


def outputs(settings: Settings) -> list[str]:
    return [
        f"compacted topic {settings.topic(LATEST)} (key host|metric)",
        f"Parquet {settings.path(NAME, 'aggregates')}",
    ]


def _sample(rng: random.Random, host: str, metric: str, load: float) -> float:
    if metric == "cpu.percent":
        return round(min(100.0, max(0.0, rng.gauss(25 + 40 * load, 10))), 1)
    if metric == "http.latency_ms":
        return round(rng.lognormvariate(3.3 + load, 0.5), 2)
    return round(rng.lognormvariate(1.5 + load, 0.8), 2)


def generate(count: int, seed: int = 1, start_ms: int = 1_710_000_000_000) -> list[Event]:
    """``count`` samples of 6 series (3 hosts x 2 metrics), each every 3 s; each host's load
    drifts, moving its cpu and latencies with it."""
    rng = random.Random(seed)
    series = [(h, m, u) for h, metrics in SERIES.items() for m, u in metrics.items()]
    load = {h: rng.random() for h in SERIES}
    events: list[Event] = []
    step = 0
    while len(events) < count:
        for h in load:
            load[h] = min(1.0, max(0.0, load[h] + rng.gauss(0, 0.05)))
        for host, metric, unit in series:
            if len(events) == count:
                break
            t = start_ms + step * INTERVAL_MS + rng.randint(0, 999)
            payload = {
                "host": host,
                "metric": metric,
                "value": _sample(rng, host, metric, load[host]),
                "unit": unit,
                "ts": iso_ms(t),
            }
            events.append(json_event(host, payload, t))
        step += 1
    return arrival_order(events, rng, MAX_DELAY_MS)


def start(spark: Any, settings: Settings) -> list[Any]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    schema = "host string, metric string, value double, unit string, ts string"
    samples = (
        read_topic(spark, settings, settings.topic(INPUT))
        .select(F.from_json(F.col("value").cast("string"), schema).alias("m"))
        .select("m.*")
        .withColumn("event_time", F.try_to_timestamp(F.col("ts"), F.lit(EVENT_TIME_FORMAT)))
        .where(
            F.col("event_time").isNotNull()
            & F.col("host").isNotNull()
            & F.col("metric").isNotNull()
            & F.col("value").isNotNull()
        )
        .withWatermark("event_time", WATERMARK)
    )
    aggregates = (
        samples.groupBy(F.window("event_time", "1 minute").alias("w"), "host", "metric")
        .agg(
            F.count("*").alias("count"),
            F.avg("value").alias("mean"),
            F.percentile_approx("value", 0.95, PERCENTILE_ACCURACY).alias("p95"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
        )
        .select(
            "host",
            "metric",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "count",
            "mean",
            "p95",
            "min",
            "max",
        )
    )

    def latest(batch: Any) -> Any:
        # windows close in event-time order, so the newest of a batch is the newest so far
        newest = Window.partitionBy("host", "metric").orderBy(F.col("window_start").desc())
        return batch.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")

    sink = to_topic_and_parquet(
        settings, settings.topic(LATEST), settings.path(NAME, "aggregates"), ["host", "metric"], to_topic=latest
    )
    return [start_query(aggregates.writeStream.outputMode("append").foreachBatch(sink), settings, NAME, "aggregates")]
