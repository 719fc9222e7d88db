"""The broker's ``fetch.max.bytes`` caps what one consumer fetch returns, whatever the request
asks (Kafka: min(request max_bytes, fetch.max.bytes)); a follower's fetch is not capped by it."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.messages.fetch import FetchRequest
from odradek.testing import BrokerProcess, WireClient


def _fetch(partitions: int, partition_max: int) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=0, min_bytes=0, max_bytes=100 * 1024 * 1024,
        topics=[FetchRequest.FetchTopic(topic="big", partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=partition_max)
            for p in range(partitions)
        ])],
    )


def test_fetch_max_bytes_caps_a_consumer_fetch(tmp_path: Path) -> None:
    cap = 300_000
    with BrokerProcess(tmp_path / "data", overrides={"fetch.max.bytes": cap}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept while its future is pending
        admin.create_topics([NewTopic("big", 3, 1)])["big"].result(30)
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "batch.size": 20_000, "linger.ms": 5})
        for i in range(6000):
            p.produce("big", b"v" * 100, partition=i % 3)
        assert p.flush(30) == 0
        w = WireClient(b.host, b.port, "fetch-cap")
        try:
            resp = w.request(_fetch(3, 10 * 1024 * 1024), 4)
        finally:
            w.close()
        sizes = [len(bytes(part.records or b"")) for t in resp.responses for part in t.partitions]
        # every partition holds ~200 kB: uncapped, the 100 MB request would get them all (~600 kB)
        assert sum(sizes) <= cap and sizes[0] > 0, sizes
