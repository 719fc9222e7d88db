"""Compaction and retention of a large log run on the I/O executor, never on the event loop: a
client's produce -> fetch round trips go on while they work.

The maintenance job here is the broker's own (``LogScheduler.run_maintenance`` with
``LogManager.clean`` / ``cleanup``), wrapped so that after doing its work it waits, on its thread,
until the client has completed round trips that started while it ran.  Run on the event loop, the
job would block the loop those round trips need (and its thread check fails first).  The latency
cost is measured by ``benchmarks/loop_latency.py`` (retention and compaction phases, as ratios to
idle in the same run).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from odradek.broker.app import Broker
from odradek.client import AsyncProducer, AsyncSimpleConsumer
from odradek.records import BatchBuilder
from tests.broker.inprocess import hosted, running_broker

ROUND_TRIPS = 5


def _fill(broker: Broker, topic: str, batches: int, keys: int, value: int) -> None:
    p = broker.replicas.get(topic, 0)
    assert p is not None
    for i in range(batches):
        b = BatchBuilder()
        for j in range(50):
            n = i * 50 + j
            b.append(1_700_000_000_000 + n, f"k{n % keys}".encode(), b"%08d" % n + b"v" * value)
        broker.replicas.append(p, bytearray(b.build()), 1)


class _RoundTrips:
    """Produce one record and fetch it back, again and again, counting completed round trips."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.done = 0
        self.wanted_from: int | None = None
        self.enough = threading.Event()
        self.stop = False
        self.errors: list[BaseException] = []

    async def run(self) -> None:
        try:
            await self._run()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    async def _run(self) -> None:
        async with (
            AsyncProducer(bootstrap_servers=self.bootstrap, linger_ms=0) as producer,
            AsyncSimpleConsumer(bootstrap_servers=self.bootstrap, fetch_max_wait_ms=100) as consumer,
        ):
            n = 0
            while not self.stop:
                n += 1
                value = b"rt-%d" % n
                md = await (await producer.send("live", value, partition=0))
                got = await consumer.fetch("live", 0, md.offset)
                assert got and got[0].value == value, (md.offset, list(got)[:1])
                self.done += 1
                if self.wanted_from is not None and self.done >= self.wanted_from + ROUND_TRIPS:
                    self.enough.set()

    def gate(self, real: Callable[[], Any], loop_thread: threading.Thread) -> Callable[[], Any]:
        def job() -> Any:
            assert threading.current_thread() is not loop_thread, "maintenance ran on the event loop"
            self.wanted_from = self.done
            result = real()
            if not self.enough.wait(60):
                raise AssertionError(f"round trips stopped while maintenance ran ({self.done} done)")
            self.enough.clear()
            return result

        return job


def test_round_trips_go_on_while_a_large_log_is_compacted_and_expired(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create(
                "compacted", 1, 1,
                {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.01"},
            )
            await broker.topics.create("expiring", 1, 1, {"segment.bytes": "16384", "file.delete.delay.ms": "0"})
            await broker.topics.create("live", 1, 1, {})
            for t in ("compacted", "expiring", "live"):
                await hosted(broker, t)
            _fill(broker, "compacted", 400, keys=1000, value=1000)  # ~20 MiB, 20 segments, 1,000 keys
            _fill(broker, "expiring", 400, keys=20000, value=100)  # ~2 MiB in ~130 segments
            compacted = broker.logs.get("compacted", 0)
            expiring = broker.logs.get("expiring", 0)
            assert compacted is not None and expiring is not None
            segments_before = len(expiring.segments)
            size_before = compacted.size_bytes
            assert len(compacted.segments) >= 10 and segments_before >= 50

            trips = _RoundTrips(f"127.0.0.1:{broker.bound['PLAINTEXT'][1]}")
            driver = asyncio.get_running_loop().create_task(trips.run())
            loop_thread = threading.current_thread()
            try:
                while trips.done < 3 and not driver.done():  # the client is connected and going
                    await asyncio.sleep(0.01)
                assert not trips.errors, trips.errors
                results = await broker.scheduler.run_maintenance(trips.gate(broker.logs.clean, loop_thread))
                assert sum(r.records_removed for r in results) > 15000, results  # 20,000 records, 1,000 keys
                await broker.topics.set_configs("expiring", {"retention.ms": "1", "segment.bytes": "16384",
                                                             "file.delete.delay.ms": "0"})
                for _ in range(500):  # the image with the new config is applied
                    if expiring.config.retention_ms == 1:
                        break
                    await asyncio.sleep(0.01)
                removed = await broker.scheduler.run_maintenance(trips.gate(broker.logs.cleanup, loop_thread))
                assert removed >= segments_before - 1, (removed, segments_before)
            finally:
                trips.stop = True
                await asyncio.wait_for(driver, 30)
            assert not trips.errors, trips.errors
            # compaction kept about one record per key (the latest of each): a twentieth of the bytes
            assert compacted.size_bytes < size_before / 5, (compacted.size_bytes, size_before)

    asyncio.run(body())


def test_round_trips_go_on_while_a_topic_of_many_partitions_is_created(tmp_path: Path) -> None:
    """A new log costs a directory, files and fsyncs (~3 ms): a CreateTopics of 1,000 partitions
    held the event loop ~2 s.  The logs are made on a worker thread before the image is applied."""

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("live", 1, 1, {})
            await hosted(broker, "live")
            trips = _RoundTrips(f"127.0.0.1:{broker.bound['PLAINTEXT'][1]}")
            driver = asyncio.get_running_loop().create_task(trips.run())
            loop_thread = threading.current_thread()
            created: list[tuple[str, int]] = []
            first = threading.Lock()  # the logs of a batch are made on several threads at once
            real = broker.logs.create_unregistered

            def create(topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
                assert threading.current_thread() is not loop_thread, "a log was created on the event loop"
                with first:
                    if not created:  # the first one waits, on its thread, for round trips the loop serves
                        trips.gate(lambda: None, loop_thread)()
                    created.append((topic, partition))
                return real(topic, partition, *args, **kwargs)

            broker.logs.create_unregistered = create  # type: ignore[method-assign]
            try:
                while trips.done < 3 and not driver.done():  # the client is connected and going
                    await asyncio.sleep(0.01)
                assert not trips.errors, trips.errors
                await broker.topics.create("wide", 40, 1, {"segment.bytes": "123456"})
            finally:
                trips.stop = True
                await asyncio.wait_for(driver, 30)
            assert not trips.errors, trips.errors
            assert sorted(created) == [("wide", p) for p in range(40)]
            # hosted at once (the CreateTopics answer comes after), with the topic's config
            for p in range(40):
                part = broker.replicas.get("wide", p)
                assert part is not None and part.is_leader and part.log.config.segment_bytes == 123456
                assert part.log.epochs.entries == [(0, 0)]

    asyncio.run(body())
