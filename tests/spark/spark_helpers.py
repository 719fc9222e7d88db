"""Helpers of the Spark tests: topics, producing and consuming with confluent-kafka, waiting."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    from odradek.client import Admin, NewTopic

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, configs=configs or {})])


def produce(bootstrap: str, topic: str, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Produce with confluent-kafka (librdkafka); returns each record with the ``partition``,
    ``offset`` and ``timestamp`` (ms) the broker gave it, in offset order per partition."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    out: list[dict[str, Any]] = []
    errors: list[Any] = []

    def delivered(err: Any, msg: Any, rec: dict[str, Any]) -> None:
        if err is not None:
            errors.append(err)
            return
        tstype, ts = msg.timestamp()
        out.append({**rec, "partition": msg.partition(), "offset": msg.offset(), "timestamp": ts, "timestampType": tstype - 1})

    for rec in records:
        kwargs: dict[str, Any] = {"value": rec.get("value"), "key": rec.get("key")}
        if rec.get("partition") is not None:
            kwargs["partition"] = rec["partition"]
        if rec.get("headers") is not None:
            kwargs["headers"] = rec["headers"]
        if rec.get("timestamp") is not None:
            kwargs["timestamp"] = rec["timestamp"]
        while True:
            try:
                p.produce(topic, on_delivery=lambda err, msg, rec=rec: delivered(err, msg, rec), **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[Any]:
    """Every record of ``topic`` read with confluent-kafka, waiting for ``expected`` of them."""
    from confluent_kafka import Consumer, TopicPartition

    from odradek.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        parts = [p.partition for p in admin.describe_topics([topic])[topic].partitions]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.2):
                if msg.error() is None:
                    out.append(msg)
        # anything beyond what was expected would be a duplicate: look a little longer
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            out.extend(m for m in c.consume(1000, 0.1) if m.error() is None)
    finally:
        c.close()
    return out


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
