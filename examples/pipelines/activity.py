"""Website activity tracking: page views -> per-minute views per page, and per-user sessions.

Input ``page-views`` (key: user id; value: JSON)::

    {"event_id": "u007-12", "user_id": "u007", "page": "/products/p-3",
     "referrer": "/search", "ts": "2024-03-09T12:00:01.123Z"}

Two streaming queries over it, both in event time with a watermark of
:data:`WATERMARK` (a view that arrives later than that behind the newest one is dropped):

- ``page-view-counts``: one-minute tumbling windows per page — ``views`` and distinct
  ``visitors`` — emitted once a window is closed by the watermark;
- ``user-sessions``: session windows per user with a gap of :data:`SESSION_GAP` (a session
  ends 30 minutes after its last view) — ``page_views``, ``distinct_pages``, ``entry_page``,
  ``exit_page`` and ``duration_seconds`` (first to last view).

Each goes to a topic of the same name (key: page / user id; value: the row as JSON) and to
Parquet under ``OUTPUT/activity/``.
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

NAME = "activity"
SUMMARY = "page views -> per-minute views per page and per-user sessions (topics + Parquet)"
INPUT = "page-views"
COUNTS = "page-view-counts"
SESSIONS = "user-sessions"
WATERMARK = "2 minutes"
SESSION_GAP = "30 minutes"
#: The generator delays events by up to this much (less than the watermark: nothing is dropped).
MAX_DELAY_MS = 60_000

PAGES = [
    ("/", 20),
    ("/search", 15),
    ("/products", 15),
    ("/products/p-1", 8),
    ("/products/p-2", 8),
    ("/products/p-3", 6),
    ("/products/p-4", 4),
    ("/products/p-5", 4),
    ("/cart", 10),
    ("/checkout", 5),
    ("/help", 5),
]
EXTERNAL_REFERRERS = ["https://search.example/", "https://social.example/", ""]


def topics(settings: Settings) -> list[TopicSpec]:
    return [
        TopicSpec(settings.topic(INPUT), 3),
        TopicSpec(settings.topic(COUNTS), 2),
        TopicSpec(settings.topic(SESSIONS), 2),
    ]


def outputs(settings: Settings) -> list[str]:
    return [
        f"topic {settings.topic(COUNTS)} and Parquet {settings.path(NAME, 'page_view_counts')}",
        f"topic {settings.topic(SESSIONS)} and Parquet {settings.path(NAME, 'user_sessions')}",
    ]


def generate(count: int, seed: int = 1, start_ms: int = 1_710_000_000_000) -> list[Event]:
    """``count`` page views by ``count // 15`` users (at least 2).  Each user browses in
    sessions of 1-12 views, 5 s to 4 min apart, with 32 to 75 min between sessions."""
    rng = random.Random(seed)
    pages = [p for p, _ in PAGES]
    weights = [w for _, w in PAGES]
    n_users = max(2, count // 15)
    quotas = [count // n_users + (1 if i < count % n_users else 0) for i in range(n_users)]
    events: list[Event] = []
    for u, quota in enumerate(quotas):
        user = f"u{u + 1:03d}"
        t = start_ms + rng.randint(0, 20 * 60_000)
        n = 0
        while n < quota:
            length = min(quota - n, rng.randint(1, 12))
            previous = rng.choice(EXTERNAL_REFERRERS)
            for _ in range(length):
                page = rng.choices(pages, weights)[0]
                payload = {
                    "event_id": f"{user}-{n}",
                    "user_id": user,
                    "page": page,
                    "referrer": previous,
                    "ts": iso_ms(t),
                }
                events.append(json_event(user, payload, t))
                previous = page
                n += 1
                t += rng.randint(5_000, 240_000)
            t += rng.randint(32 * 60_000, 75 * 60_000)
    return arrival_order(sorted(events, key=lambda e: e.timestamp), rng, MAX_DELAY_MS)


def page_views(spark: Any, settings: Settings) -> Any:
    """The parsed views, with ``event_time`` and the watermark."""
    from pyspark.sql import functions as F

    schema = "event_id string, user_id string, page string, referrer string, ts string"
    return (
        read_topic(spark, settings, settings.topic(INPUT))
        .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.try_to_timestamp(F.col("ts"), F.lit(EVENT_TIME_FORMAT)))
        .where(F.col("event_time").isNotNull() & F.col("user_id").isNotNull() & F.col("page").isNotNull())
        .withWatermark("event_time", WATERMARK)
    )


def start(spark: Any, settings: Settings) -> list[Any]:
    from pyspark.sql import functions as F

    views = page_views(spark, settings)
    counts = (
        views.groupBy(F.window("event_time", "1 minute").alias("w"), "page")
        .agg(F.count("*").alias("views"), F.size(F.collect_set("user_id")).alias("visitors"))
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "page",
            "views",
            "visitors",
        )
    )
    sessions = (
        views.groupBy("user_id", F.session_window("event_time", SESSION_GAP).alias("s"))
        .agg(
            F.count("*").alias("page_views"),
            F.size(F.collect_set("page")).alias("distinct_pages"),
            F.min_by("page", "event_time").alias("entry_page"),
            F.max_by("page", "event_time").alias("exit_page"),
            F.min("event_time").alias("first_view"),
            F.max("event_time").alias("last_view"),
        )
        .select(
            "user_id",
            F.col("s.start").alias("session_start"),
            F.col("s.end").alias("session_end"),
            "page_views",
            "distinct_pages",
            "entry_page",
            "exit_page",
            ((F.unix_millis("last_view") - F.unix_millis("first_view")) / 1000.0).alias("duration_seconds"),
        )
    )
    q_counts = start_query(
        counts.writeStream.outputMode("append").foreachBatch(
            to_topic_and_parquet(settings, settings.topic(COUNTS), settings.path(NAME, "page_view_counts"), ["page"])
        ),
        settings,
        NAME,
        "page-view-counts",
    )
    q_sessions = start_query(
        sessions.writeStream.outputMode("append").foreachBatch(
            to_topic_and_parquet(settings, settings.topic(SESSIONS), settings.path(NAME, "user_sessions"), ["user_id"])
        ),
        settings,
        NAME,
        "user-sessions",
    )
    return [q_counts, q_sessions]
