"""Shared helpers for the interop tests: bounded waits, topic creation, reading the stored log,
and produce/consume wrappers for confluent-kafka, kafka-python, aiokafka and kcat.

Every wait here has a deadline; nothing sleeps for a fixed time to synchronise.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.producer.future import RecordMetadata

from odradek.records import read_batches
from odradek.testing import BrokerProcess

DEFAULT_TIMEOUT = 20.0

# librdkafka settings that keep client-side waits short on loopback.
CK_COMMON: dict[str, Any] = {
    "socket.timeout.ms": 10000,
    "metadata.max.age.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 200,
    "retry.backoff.ms": 20,
    "api.version.request.timeout.ms": 5000,
}


def wait_until(
    predicate: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT, what: str = "condition"
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)  # poll interval, bounded by the deadline above
        delay = min(delay * 2, 0.2)


@dataclass
class ErrorLog:
    """Collects librdkafka error callbacks so tests can assert that none were fatal."""

    errors: list[ck.KafkaError] = field(default_factory=list)

    def __call__(self, err: ck.KafkaError) -> None:
        self.errors.append(err)

    def fatal(self) -> list[ck.KafkaError]:
        return [e for e in self.errors if e.fatal()]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **CK_COMMON})


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    a = admin(bootstrap)
    futures = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
        request_timeout=timeout,
    )
    futures[name].result(timeout=timeout)
    wait_until(
        lambda: (
            name in a.list_topics(timeout=5).topics
            and len(a.list_topics(name, timeout=5).topics[name].partitions) == partitions
        ),
        timeout,
        f"topic {name} in metadata",
    )


def producer(bootstrap: str, **conf: Any) -> ck.Producer:
    return ck.Producer({"bootstrap.servers": bootstrap, **CK_COMMON, **conf})


def consumer(bootstrap: str, **conf: Any) -> ck.Consumer:
    # confluent-kafka insists on a group.id, but with assign() and no commits no group is joined.
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "interop-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        **CK_COMMON,
    }
    settings.update(conf)
    return ck.Consumer(settings)


@dataclass
class Delivered:
    partition: int
    offset: int
    timestamp: tuple[int, int]


def produce_all(
    p: ck.Producer, topic: str, records: Iterable[Mapping[str, Any]], timeout: float = DEFAULT_TIMEOUT
) -> list[Delivered]:
    """Produce each record (kwargs for ``Producer.produce``) and return their delivery reports in order."""
    reports: list[Delivered | None] = []
    errors: list[ck.KafkaError] = []

    def on_delivery(index: int) -> Callable[[ck.KafkaError | None, ck.Message], None]:
        def cb(err: ck.KafkaError | None, msg: ck.Message) -> None:
            if err is not None:
                errors.append(err)
                return
            # acks=0: no response, so librdkafka reports no offset (None)
            partition, offset = msg.partition(), msg.offset()
            reports[index] = Delivered(
                -1 if partition is None else partition, -1 if offset is None else offset, msg.timestamp()
            )

        return cb

    for i, rec in enumerate(records):
        reports.append(None)
        p.produce(topic, on_delivery=on_delivery(i), **rec)
        p.poll(0)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} records were not delivered within {timeout}s"
    assert not errors, f"delivery errors: {errors}"
    assert all(r is not None for r in reports)
    return [r for r in reports if r is not None]


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partition: int = 0,
    offset: int = ck.OFFSET_BEGINNING,
    timeout: float = DEFAULT_TIMEOUT,
    conf: Mapping[str, Any] | None = None,
) -> list[ck.Message]:
    """Read exactly ``count`` records from one partition with ``assign()`` (no group, no commits)."""
    c = consumer(bootstrap, **(conf or {}))
    try:
        c.assign([ck.TopicPartition(topic, partition, offset)])
        got: list[ck.Message] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"got {len(got)} of {count} records from {topic}[{partition}] within {timeout}s"
            for m in c.consume(num_messages=count - len(got), timeout=min(left, 0.5)):
                err = m.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error: {err}")
                got.append(m)
        return got
    finally:
        c.close()


def partition_dir(data_dir: Path, topic: str, partition: int = 0) -> Path:
    return data_dir / f"{topic}-{partition}"


def stored_batches(data_dir: Path, topic: str, partition: int = 0) -> list[Any]:
    """Every batch in the partition's segment files, as the broker wrote them to disk."""
    out: list[Any] = []
    for seg in sorted(partition_dir(data_dir, topic, partition).glob("*.log")):
        out.extend(read_batches(seg.read_bytes()))
    return out


def record_tuple(m: ck.Message) -> tuple[Any, ...]:
    return (m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp())


def expect_tuples(
    records: Sequence[Mapping[str, Any]], first_offset: int = 0, partition: int = 0
) -> list[tuple[Any, ...]]:
    """The (partition, offset, key, value, headers, (CreateTime, ts)) a consumer must see for ``records``."""
    out = []
    for i, r in enumerate(records):
        headers = r.get("headers")
        out.append(
            (
                partition,
                first_offset + i,
                r.get("key"),
                r.get("value"),
                list(headers) if headers else None,
                (ck.TIMESTAMP_CREATE_TIME, r["timestamp"]),
            )
        )
    return out


# ------------------------------------------------------------------------------------------------
# kafka-python

V0_9 = (0, 9)  # Produce v1 / Fetch v1: message format v0
V0_10_1 = (0, 10, 1)  # Produce v2 / Fetch v3: message format v1


def kp_producer(
    broker: BrokerProcess, api_version: tuple[int, ...] | None = None, **conf: Any
) -> KafkaProducer:
    settings: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap,
        "request_timeout_ms": 10000,
        "retry_backoff_ms": 20,
        "linger_ms": 5,
    }
    if api_version is not None:
        settings["api_version"] = api_version
    settings.update(conf)
    return KafkaProducer(**settings)


def kp_send(
    broker: BrokerProcess,
    topic: str,
    records: Sequence[dict[str, Any]],
    api_version: tuple[int, ...] | None = None,
    **conf: Any,
) -> list[RecordMetadata]:
    p = kp_producer(broker, api_version, **conf)
    try:
        futures = [p.send(topic, **r) for r in records]
        p.flush(DEFAULT_TIMEOUT)
        return [f.get(timeout=DEFAULT_TIMEOUT) for f in futures]
    finally:
        p.close(timeout=DEFAULT_TIMEOUT)


@contextmanager
def kp_consumer(
    broker: BrokerProcess, api_version: tuple[int, ...] | None = None, **conf: Any
) -> Iterator[KafkaConsumer]:
    settings: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "fetch_max_wait_ms": 100,
        "request_timeout_ms": 10000,
        "retry_backoff_ms": 20,
    }
    if api_version is not None:
        settings["api_version"] = api_version
    settings.update(conf)
    c = KafkaConsumer(**settings)
    try:
        yield c
    finally:
        c.close()


def kp_read(
    broker: BrokerProcess,
    topic: str,
    count: int,
    api_version: tuple[int, ...] | None = None,
    partition: int = 0,
    offset: int | None = None,
) -> list[Any]:
    """Exactly ``count`` records from ``offset`` (default: the beginning) via ``assign()``."""
    with kp_consumer(broker, api_version) as c:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        if offset is None:
            c.seek_to_beginning(tp)
        else:
            c.seek(tp, offset)
        got: list[Any] = []
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while len(got) < count:
            assert time.monotonic() < deadline, (
                f"kafka-python {api_version} read {len(got)} of {count} records"
            )
            for recs in c.poll(timeout_ms=200, max_records=count - len(got)).values():
                got.extend(recs)
        # nothing beyond what was expected
        assert not any(c.poll(timeout_ms=200).values())
        return got


# ------------------------------------------------------------------------------------------------
# aiokafka (driven from synchronous tests through asyncio.run)


async def _aio_send(
    bootstrap: str, topic: str, records: Sequence[Mapping[str, Any]], conf: Mapping[str, Any]
) -> list[Any]:
    p = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=10000, retry_backoff_ms=20, **conf
    )
    async with asyncio.timeout(DEFAULT_TIMEOUT):
        await p.start()
        try:
            futures = [await p.send(topic, **r) for r in records]
            return list(await asyncio.gather(*futures))
        finally:
            await p.stop()


def aio_send(bootstrap: str, topic: str, records: Sequence[Mapping[str, Any]], **conf: Any) -> list[Any]:
    return asyncio.run(_aio_send(bootstrap, topic, records, conf))


async def aio_read_async(
    bootstrap: str, topic: str, count: int, partition: int = 0, offset: int | None = None, **conf: Any
) -> list[Any]:
    c = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        request_timeout_ms=10000,
        retry_backoff_ms=20,
        **conf,
    )
    async with asyncio.timeout(DEFAULT_TIMEOUT):
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, partition)
            c.assign([tp])
            if offset is None:
                await c.seek_to_beginning(tp)
            else:
                c.seek(tp, offset)
            got: list[Any] = []
            while len(got) < count:
                for recs in (await c.getmany(tp, timeout_ms=200, max_records=count - len(got))).values():
                    got.extend(recs)
            assert not any((await c.getmany(tp, timeout_ms=200)).values())
            return got
        finally:
            await c.stop()


def aio_read(
    bootstrap: str, topic: str, count: int, partition: int = 0, offset: int | None = None, **conf: Any
) -> list[Any]:
    return asyncio.run(aio_read_async(bootstrap, topic, count, partition, offset, **conf))


# ------------------------------------------------------------------------------------------------
# kcat


def run_kcat(
    kcat: str, broker: BrokerProcess, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    cmd = [kcat, "-b", broker.bootstrap, "-X", "socket.timeout.ms=10000", *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, timeout=60)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    return proc
