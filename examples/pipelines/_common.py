"""What the example pipelines share: settings, topics, events, producing, and Spark plumbing.

Nothing here imports pyspark at module level: the Spark helpers import it when called.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EVENT_TIME_FORMAT",
    "Event",
    "Settings",
    "TopicSpec",
    "arrival_order",
    "ensure_topics",
    "iso_ms",
    "json_event",
    "parse_iso",
    "publish",
    "read_topic",
    "start_query",
    "to_topic_and_parquet",
    "write_topic",
]

#: How the generators write event times (ISO 8601, milliseconds, UTC: ``2024-03-09T23:59:58.123Z``)
#: and how the pipelines parse them (Spark's datetime pattern).
EVENT_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Event:
    """One record for the input topic: ``timestamp`` (ms) is the event's time and becomes the
    record's CreateTime."""

    key: bytes | None
    value: bytes
    timestamp: int


@dataclass
class Settings:
    """Where a pipeline reads and writes.

    ``prefix`` is put before every topic name (so several copies can share a broker);
    ``output`` holds the Parquet results and, under ``_checkpoints``, the queries'
    checkpoints (delete it to start over).  ``available_now`` processes what the input holds
    and stops (``Trigger.AvailableNow``); otherwise a micro-batch starts every
    ``trigger_interval``.
    """

    bootstrap: str = "127.0.0.1:9092"
    output: Path = Path("pipeline-output")
    prefix: str = ""
    available_now: bool = False
    trigger_interval: str = "5 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None

    def topic(self, name: str) -> str:
        return self.prefix + name

    def path(self, pipeline: str, name: str) -> str:
        return str(Path(self.output) / pipeline / name)

    def checkpoint(self, pipeline: str, query: str) -> str:
        return str(Path(self.output) / "_checkpoints" / pipeline / query)


# ---------------------------------------------------------------------------------------------
# events


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ``2024-03-09T23:59:58.123Z``."""
    t = dt.datetime.fromtimestamp(ms // 1000, dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def parse_iso(text: str) -> int:
    """``2024-03-09T23:50:00Z`` (or with an offset, or ``now``) as epoch milliseconds; a
    time without an offset is UTC."""
    if text.strip().lower() == "now":
        return int(dt.datetime.now(dt.UTC).timestamp()) * 1000
    t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def json_event(key: str | None, payload: dict[str, Any], timestamp: int) -> Event:
    value = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return Event(key.encode() if key is not None else None, value, timestamp)


def arrival_order(events: Sequence[Event], rng: random.Random, max_delay_ms: int) -> list[Event]:
    """The events in the order they reach the broker: each is delayed by up to
    ``max_delay_ms`` after its event time, so the stream is out of order by at most that."""
    delayed = [(e.timestamp + rng.randint(0, max_delay_ms), i, e) for i, e in enumerate(events)]
    return [e for _, _, e in sorted(delayed, key=lambda d: (d[0], d[1]))]


# ---------------------------------------------------------------------------------------------
# the broker


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], timeout: float = 30.0) -> list[str]:
    """Create the topics that do not exist yet; returns the names of those created."""
    from odradek.client import Admin, NewTopic
    from odradek.errors import ErrorCode, KafkaError

    created = []
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        for spec in specs:
            try:
                admin.create_topics([NewTopic(spec.name, spec.partitions, 1, configs=spec.configs)], timeout=timeout)
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
            else:
                created.append(spec.name)
    return created


def publish(bootstrap: str, topic: str, events: Iterable[Event], timeout: float = 60.0) -> int:
    """Send ``events`` in order with Odradek's producer (idempotent, acks=all) and wait until
    each is acknowledged; returns how many were sent."""
    from odradek.client import Producer

    futures = []
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}) as producer:
        for e in events:
            futures.append(producer.send(topic, e.value, key=e.key, timestamp=e.timestamp))
        producer.flush(timeout)
        for f in futures:
            f.result(timeout)
    return len(futures)


# ---------------------------------------------------------------------------------------------
# Spark


def read_topic(spark: Any, settings: Settings, topic: str) -> Any:
    """A streaming DataFrame of ``topic`` with the odradek source (Kafka-source columns)."""
    reader = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", settings.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", settings.starting_offsets)
    )
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    return reader.load()


def start_query(writer: Any, settings: Settings, pipeline: str, name: str) -> Any:
    """Name the query, give it its checkpoint and trigger, and start it."""
    writer = writer.queryName(f"{settings.prefix}{pipeline}-{name}").option(
        "checkpointLocation", settings.checkpoint(pipeline, name)
    )
    if settings.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=settings.trigger_interval)
    return writer.start()


def write_topic(df: Any, bootstrap: str, topic: str) -> None:
    """A batch write of ``df`` (columns ``key``, ``value``) to ``topic``."""
    (
        df.write.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )


def to_topic_and_parquet(
    settings: Settings,
    topic: str,
    path: str,
    key_columns: Sequence[str],
    to_topic: Callable[[Any], Any] | None = None,
) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function writing each micro-batch to Parquet (appended to ``path``)
    and to ``topic``: key ``a|b`` of ``key_columns``, value the row as JSON.  ``to_topic``
    may first change what goes to the topic (e.g. keep the latest row per key).

    A micro-batch replayed after a failure is written again (at-least-once)."""

    def write(batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        batch = batch.persist()
        try:
            if batch.isEmpty():
                return
            batch.write.mode("append").parquet(path)
            rows = to_topic(batch) if to_topic is not None else batch
            records = rows.select(
                F.concat_ws("|", *[F.col(c).cast("string") for c in key_columns]).alias("key"),
                F.to_json(F.struct(*[F.col(c) for c in rows.columns])).alias("value"),
            )
            write_topic(records, settings.bootstrap, topic)
        finally:
            batch.unpersist()

    return write
