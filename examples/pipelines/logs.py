"""Log aggregation: raw log lines of several services -> error rate per service per minute.

Input ``logs``: one record per line, key = the service that wrote it (as a log shipper tags
lines), value = the line as the service wrote it.  The application services write

    2024-03-09T23:59:58.123Z ERROR [req=7f3a9c] payment declined: card expired

(levels in any case, ``WARNING`` for ``WARN``; Java stack-trace lines follow some errors),
and the ``gateway`` writes access-log lines, whose status decides the level (5xx ERROR, 4xx
WARN, else INFO)::

    10.0.3.7 - - [09/Mar/2024:23:59:58 +0000] "GET /api/cart HTTP/1.1" 502 173

Lines that parse neither way (stack traces, garbage) are dropped.  Per service and one-minute
event-time window (watermark :data:`WATERMARK`): ``lines``, ``errors`` (ERROR and FATAL) and
``error_rate = errors / lines``, appended once the window closes to Parquet under
``OUTPUT/logs/error_rates``, partitioned by ``date`` (UTC) of the window start — Spark's
file sink, exactly once.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from ._common import (
    EVENT_TIME_FORMAT,
    Event,
    Settings,
    TopicSpec,
    arrival_order,
    iso_ms,
    read_topic,
    start_query,
)

NAME = "logs"
SUMMARY = "service log lines -> parsed -> error rate per service per minute (Parquet by date)"
INPUT = "logs"
WATERMARK = "2 minutes"
MAX_DELAY_MS = 30_000

#: The application line (Java regex; the same in Python's ``re``).
APP_LINE = r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)\s+([A-Za-z]+)\s+(?:\[req=([0-9a-f]+)\]\s+)?(.*)$"
#: The gateway's access-log line.
ACCESS_LINE = r'^(\S+) \S+ \S+ \[([^\]]+)\] "([A-Z]+) (\S+) [^"]*" (\d{3}) (\d+|-)'
ACCESS_TIME_FORMAT = "dd/MMM/yyyy:HH:mm:ss Z"
LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")

#: service -> (base error probability, how it spells levels)
SERVICES = {
    "checkout": (0.06, "upper"),
    "auth": (0.03, "lower"),
    "search": (0.01, "upper"),
    "inventory": (0.04, "upper"),
}
GATEWAY = "gateway"
MESSAGES = {
    "INFO": ["request served in {n} ms", "cache hit for key item:{n}", "user {n} signed in", "order {n} created"],
    "DEBUG": ["pool size {n}", "retrying in {n} ms"],
    "WARN": ["slow query took {n} ms", "retry {n} of 3"],
    "ERROR": ["payment declined: card expired", "timeout after {n} ms calling db", "null reference in handler {n}"],
    "FATAL": ["out of memory: {n} MB requested"],
}
PATHS = ["/api/cart", "/api/search?q=shoes", "/api/items/{n}", "/login", "/api/checkout"]


def topics(settings: Settings) -> list[TopicSpec]:
    return [TopicSpec(settings.topic(INPUT), 3)]


def outputs(settings: Settings) -> list[str]:
    return [f"Parquet {settings.path(NAME, 'error_rates')} (partitioned by date)"]


def _spell(level: str, style: str, rng: random.Random) -> str:
    if level == "WARN" and rng.random() < 0.5:
        level = "WARNING"
    return level.lower() if style == "lower" else level


def generate(count: int, seed: int = 1, start_ms: int = 1_710_028_200_000) -> list[Event]:
    """``count`` lines, one every 2 s on average; the default start (2024-03-09T23:50Z) makes
    the stream cross midnight.  Between minutes 6 and 9 the checkout service and the
    gateway have an incident (many more errors)."""
    rng = random.Random(seed)
    services = [*SERVICES, GATEWAY]
    events: list[Event] = []
    t = start_ms
    while len(events) < count:
        t += int(rng.expovariate(1 / 2000)) + 1
        service = rng.choice(services)
        incident = 6 * 60_000 <= t - start_ms < 9 * 60_000
        if service == GATEWAY:
            p5 = 0.35 if incident else 0.04
            r = rng.random()
            status = rng.choice([500, 502, 503]) if r < p5 else rng.choice([400, 404]) if r < p5 + 0.1 else 200
            when = _access_time(t)
            path = rng.choice(PATHS).format(n=rng.randint(1, 99))
            ip = f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)}"
            line = f'{ip} - - [{when}] "GET {path} HTTP/1.1" {status} {rng.randint(100, 9000)} "-" "Mozilla/5.0"'
            events.append(Event(service.encode(), line.encode(), t))
            continue
        base, style = SERVICES[service]
        p_err = min(0.7, base * 10) if incident and service == "checkout" else base
        r = rng.random()
        level = (
            ("FATAL" if rng.random() < 0.1 else "ERROR")
            if r < p_err
            else "WARN"
            if r < p_err + 0.08
            else "DEBUG"
            if r < p_err + 0.18
            else "INFO"
        )
        message = rng.choice(MESSAGES[level]).format(n=rng.randint(1, 5000))
        req = f"[req={rng.getrandbits(24):06x}] " if rng.random() < 0.8 else ""
        line = f"{iso_ms(t)} {_spell(level, style, rng)} {req}{message}"
        events.append(Event(service.encode(), line.encode(), t))
        if level in ("ERROR", "FATAL") and service == "inventory":
            for frame in ("com.shop.inventory.Stock.reserve(Stock.java:42)", "com.shop.http.Handler.run(Handler.java:97)"):
                if len(events) < count:
                    events.append(Event(service.encode(), f"\tat {frame}".encode(), t))
    if count > 10:  # a shipper hiccup: one garbled line
        events[count // 2] = Event(b"search", b"\x00\x00garbled", events[count // 2].timestamp)
    return arrival_order(events, rng, MAX_DELAY_MS)


def _access_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms // 1000, dt.UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")


def parsed_lines(spark: Any, settings: Settings) -> Any:
    """service, event_time, level, is_error: the lines that parse, with the watermark."""
    from pyspark.sql import functions as F

    raw = read_topic(spark, settings, settings.topic(INPUT)).select(
        F.col("key").cast("string").alias("service"), F.col("value").cast("string").alias("line")
    )
    app_time = F.regexp_extract("line", APP_LINE, 1)
    app_level = F.upper(F.regexp_extract("line", APP_LINE, 2))
    access_time = F.regexp_extract("line", ACCESS_LINE, 2)
    status_text = F.regexp_extract("line", ACCESS_LINE, 5)
    status = F.when(status_text != "", status_text).cast("int")
    parsed = raw.select(
        "service",
        F.coalesce(
            F.try_to_timestamp(F.when(app_time != "", app_time), F.lit(EVENT_TIME_FORMAT)),
            F.try_to_timestamp(F.when(access_time != "", access_time), F.lit(ACCESS_TIME_FORMAT)),
        ).alias("event_time"),
        F.when(app_time != "", F.when(app_level == "WARNING", F.lit("WARN")).otherwise(app_level))
        .when(status >= 500, F.lit("ERROR"))
        .when(status >= 400, F.lit("WARN"))
        .when(status.isNotNull(), F.lit("INFO"))
        .alias("level"),
    )
    return (
        parsed.where(
            F.col("service").isNotNull() & F.col("event_time").isNotNull() & F.col("level").isin(*LEVELS)
        )
        .withColumn("is_error", F.col("level").isin("ERROR", "FATAL"))
        .withWatermark("event_time", WATERMARK)
    )


def start(spark: Any, settings: Settings) -> list[Any]:
    from pyspark.sql import functions as F

    rates = (
        parsed_lines(spark, settings)
        .groupBy(F.window("event_time", "1 minute").alias("w"), "service")
        .agg(F.count("*").alias("lines"), F.sum(F.col("is_error").cast("long")).alias("errors"))
        .select(
            F.to_date(F.col("w.start")).alias("date"),
            "service",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "lines",
            "errors",
            (F.col("errors") / F.col("lines")).alias("error_rate"),
        )
    )
    writer = (
        rates.writeStream.outputMode("append")
        .format("parquet")
        .option("path", settings.path(NAME, "error_rates"))
        .partitionBy("date")
    )
    return [start_query(writer, settings, NAME, "error-rates")]
