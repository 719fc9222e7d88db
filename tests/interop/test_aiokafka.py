"""aiokafka against a real ``odradek serve``: AIOKafkaProducer and AIOKafkaConsumer with ``assign()``.

The tests are synchronous and drive aiokafka through ``asyncio.run`` with a deadline
(``asyncio.timeout``) around every await that talks to the broker.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiokafka
import confluent_kafka as ck
import pytest

from odradek.testing import BrokerProcess

from .interop_helpers import (
    DEFAULT_TIMEOUT,
    aio_read,
    aio_send,
    consume,
    create_topic,
    produce_all,
    producer,
    stored_batches,
)

pytestmark = pytest.mark.interop

BASE_TS = 1_690_000_000_000
CODEC_IDS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def sample(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        out.append(
            {
                "key": None if i % 4 == 1 else b"key-%d" % i,
                "value": None if i % 5 == 2 and i % 4 != 1 else (b"aio-%d;" % i) * (1 + i % 11),
                "timestamp_ms": BASE_TS + 101 * i,
                "headers": [("i", b"%d" % i), ("empty", b"")] if i % 2 else [],
            }
        )
    return out


def _tuples(got: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp, r.timestamp_type) for r in got
    ]


def _expected(records: list[dict[str, Any]], partition: int = 0, first: int = 0) -> list[tuple[Any, ...]]:
    return [
        (partition, first + i, r["key"], r["value"], r["headers"], r["timestamp_ms"], 0)
        for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume(broker: BrokerProcess, topic: str, codec: str | None) -> None:
    records = sample(40)
    meta = aio_send(
        broker.bootstrap, topic, records, compression_type=codec, linger_ms=5, max_batch_size=2048
    )
    assert [(m.partition, m.offset) for m in meta] == [(0, i) for i in range(len(records))]
    got = aio_read(broker.bootstrap, topic, len(records))
    assert _tuples(got) == _expected(records)
    batches = stored_batches(broker.data_dir, topic)
    assert {b.magic for b in batches} == {2}
    assert {b.compression for b in batches} == {CODEC_IDS[codec]}
    # confluent-kafka sees the same records
    cgot = consume(broker.bootstrap, topic, len(records))
    assert [(m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()) for m in cgot] == [
        (i, r["key"], r["value"], r["headers"], (ck.TIMESTAMP_CREATE_TIME, r["timestamp_ms"]))
        for i, r in enumerate(records)
    ]


def test_idempotent_producer_acks_all_several_partitions(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    records = [dict(r, partition=i % 3) for i, r in enumerate(sample(60))]
    meta = aio_send(broker.bootstrap, topic, records, enable_idempotence=True, acks="all", linger_ms=2)
    for part in range(3):
        recs = [r for r in records if r["partition"] == part]
        assert [m.offset for m in meta if m.partition == part] == list(range(len(recs)))
        got = aio_read(broker.bootstrap, topic, len(recs), partition=part)
        assert _tuples(got) == _expected(
            [{k: v for k, v in r.items() if k != "partition"} for r in recs], part
        )
        pids = {b.header.producer_id for b in stored_batches(broker.data_dir, topic, part)}
        assert len(pids) == 1 and min(pids) >= 0


def test_send_batch(broker: BrokerProcess, topic: str) -> None:
    async def go() -> Any:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
        async with asyncio.timeout(DEFAULT_TIMEOUT):
            await p.start()
            try:
                batch = p.create_batch()
                for i in range(25):
                    assert batch.append(key=b"b%d" % i, value=b"x" * i, timestamp=BASE_TS + i) is not None
                fut = await p.send_batch(batch, topic, partition=0)
                return await fut
            finally:
                await p.stop()

    meta = asyncio.run(go())
    assert meta.offset == 0
    got = aio_read(broker.bootstrap, topic, 25)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
        (i, b"b%d" % i, b"x" * i, BASE_TS + i) for i in range(25)
    ]
    [batch] = stored_batches(broker.data_dir, topic)
    assert (batch.header.record_count, batch.compression) == (25, 1)


def test_consumer_positions_and_offset_lookups(broker: BrokerProcess, topic: str) -> None:
    records = [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": BASE_TS + 1000 * i} for i in range(12)]
    produce_all(producer(broker.bootstrap, **{"batch.num.messages": 5, "linger.ms": 5}), topic, records)

    async def go() -> None:
        c = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        async with asyncio.timeout(DEFAULT_TIMEOUT):
            await c.start()
            try:
                tp = aiokafka.TopicPartition(topic, 0)
                c.assign([tp])
                assert await c.beginning_offsets([tp]) == {tp: 0}
                assert await c.end_offsets([tp]) == {tp: 12}
                found = (await c.offsets_for_times({tp: BASE_TS + 4500}))[tp]
                assert found is not None and (found.offset, found.timestamp) == (5, BASE_TS + 5000)
                assert (await c.offsets_for_times({tp: BASE_TS + 60_000}))[tp] is None
                await c.seek_to_end(tp)
                assert await c.position(tp) == 12
                c.seek(tp, 7)  # inside the second batch
                got: list[Any] = []
                while len(got) < 5:
                    for recs in (await c.getmany(tp, timeout_ms=200)).values():
                        got.extend(recs)
                assert [(r.offset, r.key, r.timestamp) for r in got] == [
                    (i, b"k%d" % i, BASE_TS + 1000 * i) for i in range(7, 12)
                ]
            finally:
                await c.stop()

    asyncio.run(go())
