"""No request's per-record work runs on the event loop: down-conversion for an old fetch,
recompression for a topic's ``compression.type`` and the key check of a compacted topic run in the
broker's workers, while the loop answers everyone else; and their results are right.

The heavy function is replaced by a stand-in that notes where it runs and, off the loop, holds its
worker until the test releases it: meanwhile another connection's ApiVersions, Metadata and Produce
are answered and the heavy request is not.  (On the loop it is not held, which would freeze the
test's own loop too: the test fails on where it ran.)  The jobs run in a thread pool there, where a
stand-in can be installed; one test holds the real worker processes instead (frozen with SIGSTOP)
and checks the same.  What this costs in latency is measured by ``benchmarks/loop_latency.py``
(its down_convert, recompress and compacted_keys phases).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import odradek.storage.log as log_module
import odradek.storage.validator as validator_module
from odradek.broker.app import Broker
from odradek.broker.handlers import fetch as fetch_module
from odradek.errors import ErrorCode
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.records import BatchBuilder, Compression, read_batches
from odradek.testing import WireClient, freeze, produce_request
from tests.broker.inprocess import hosted, running_broker

BASE_TS = 1_700_000_000_000
RECORDS = 20_000  # far above what the loop may convert or check itself
BIG = {"max.message.bytes": str(64 << 20), "segment.bytes": str(256 << 20)}


def _batch(n: int, *, keyless: set[int] | frozenset[int] = frozenset(), codec: Compression = Compression.NONE,
           producer_id: int = -1, sequence: int = -1) -> bytes:
    b = BatchBuilder(compression=codec, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                     base_sequence=sequence)
    for i in range(n):
        b.append(BASE_TS + i, None if i in keyless else b"k%d" % (i % 1000), b"value-%d" % i)
    return b.build()


class _Hold:
    """Stands in for a heavy function: notes whether it ran on the event loop and, off it,
    waits until released (then does the real work)."""

    def __init__(self, real: Callable[..., Any], loop_thread: threading.Thread, heavy: Callable[..., bool]) -> None:
        self.real = real
        self.loop_thread = loop_thread
        self.heavy = heavy  # which calls are the request's heavy work (others pass through)
        self.started = threading.Event()
        self.release = threading.Event()
        self.on_loop = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(self.real, *args, **kwargs)

    def around(self, real: Callable[..., Any]) -> Callable[..., Any]:
        """The same hold around another function (one more place the heavy work may run)."""
        return lambda *args, **kwargs: self.run(real, *args, **kwargs)

    def run(self, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.heavy(*args, **kwargs):
            if threading.current_thread() is self.loop_thread:
                self.on_loop = True
            else:
                self.started.set()
                self.release.wait(60)
        return real(*args, **kwargs)


@pytest.fixture
def threads() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-offload")
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)


def _jobs_in(broker: Broker, pool: ThreadPoolExecutor) -> None:
    """The broker's off-loop jobs run in ``pool`` (threads: a stand-in installed here is used)."""
    offload = getattr(broker.scheduler, "offload", None)
    if offload is not None:
        offload.run_in(pool)


async def _until(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _fetch_v3(topic: str, offset: int, partition_max: int, max_bytes: int = 64 << 20) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=partition_max)
        ])],
    )


async def _others_answered(port: int) -> list[Any]:
    """ApiVersions, Metadata and a Produce on a connection of their own, answered."""

    def run() -> list[Any]:
        w = WireClient("127.0.0.1", port, "other", timeout=30)
        try:
            return [
                w.request(ApiVersionsRequest(), 3),
                w.request(MetadataRequest(topics=None), 9),
                w.request(produce_request("live", _batch(3)), 9),
            ]
        finally:
            w.close()

    return await asyncio.to_thread(run)


def _request_in_thread(port: int, request: Any, version: int) -> asyncio.Future[Any]:
    def run() -> Any:
        w = WireClient("127.0.0.1", port, "heavy", timeout=120)
        try:
            return w.request(request, version)
        finally:
            w.close()

    return asyncio.ensure_future(asyncio.to_thread(run))


async def _held_while_others_answered(broker: Broker, hold: _Hold, heavy: asyncio.Future[Any]) -> None:
    await _until(lambda: hold.started.is_set() or hold.on_loop or heavy.done(), "the heavy work to start")
    assert not hold.on_loop, "the heavy work ran on the event loop"
    api, metadata, produced = await _others_answered(broker.bound["PLAINTEXT"][1])
    assert api.error_code == 0 and metadata.brokers
    assert produced.responses[0].partition_responses[0].error_code == 0
    assert not heavy.done(), "the heavy request was answered while its work was held"


# -- down-conversion --------------------------------------------------------------------------------------


def test_a_large_down_conversion_runs_off_the_loop(
    tmp_path: Path, threads: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("old", 1, 1, BIG)
            await broker.topics.create("live", 1, 1, {})
            p = await hosted(broker, "old")
            await hosted(broker, "live")
            broker.replicas.append(p, bytearray(_batch(RECORDS, codec=Compression.LZ4)), 1)
            _jobs_in(broker, threads)
            hold = _Hold(fetch_module.down_convert, threading.current_thread(), lambda *a, **k: True)
            monkeypatch.setattr(fetch_module, "down_convert", hold)

            heavy = _request_in_thread(broker.bound["PLAINTEXT"][1], _fetch_v3("old", 5000, 64 << 20), 3)
            try:
                await _held_while_others_answered(broker, hold, heavy)
            finally:
                hold.release.set()
            resp = await heavy
            part = resp.responses[0].partitions[0]
            assert part.error_code == 0
            batches = list(read_batches(bytes(part.records)))
            assert {b.magic for b in batches} == {1}
            got = [(r.offset, r.timestamp, r.key, r.value) for b in batches for r in b.records]
            # from the fetch offset on (Kafka drops what is below it), offsets and timestamps kept
            assert got == [(i, BASE_TS + i, b"k%d" % (i % 1000), b"value-%d" % i) for i in range(5000, RECORDS)]

    asyncio.run(body())


def test_down_conversion_in_the_worker_processes(tmp_path: Path) -> None:
    """The real workers (processes): frozen with SIGSTOP while the conversion is theirs, the loop
    still answers; thawed, the fetch gets its records."""

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("old", 1, 1, BIG)
            await broker.topics.create("live", 1, 1, {})
            p = await hosted(broker, "old")
            await hosted(broker, "live")
            broker.replicas.append(p, bytearray(_batch(RECORDS)), 1)
            offload = broker.scheduler.offload
            # start every worker (as many jobs at once), then freeze them
            assert await asyncio.gather(offload.run(len, b"ab", cost=2), offload.run(len, b"abc", cost=3)) == [2, 3]
            pids = offload.worker_pids()
            assert len(pids) == offload.workers
            stopped: list[int] = []
            try:
                for pid in pids:
                    await asyncio.to_thread(freeze, pid)
                    stopped.append(pid)
                heavy = _request_in_thread(broker.bound["PLAINTEXT"][1], _fetch_v3("old", 0, 256 << 10), 3)
                await _until(lambda: offload.running > 0 or heavy.done(), "the conversion to reach a worker")
                api, metadata, produced = await _others_answered(broker.bound["PLAINTEXT"][1])
                assert api.error_code == 0 and metadata.brokers
                assert produced.responses[0].partition_responses[0].error_code == 0
                assert not heavy.done(), "the fetch was answered while the workers were stopped"
            finally:
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            resp = await heavy
            part = resp.responses[0].partitions[0]
            records = [r for b in read_batches(bytes(part.records)) for r in b.records]
            # the partition's 256 KiB, not the whole 20,000-record batch converted
            assert 0 < len(bytes(part.records)) <= 256 << 10
            assert [(r.offset, r.timestamp, r.value) for r in records] == [
                (i, BASE_TS + i, b"value-%d" % i) for i in range(len(records))
            ]

    asyncio.run(body())


# -- recompression ----------------------------------------------------------------------------------------


def _build_held(monkeypatch: pytest.MonkeyPatch, loop_thread: threading.Thread) -> _Hold:
    """The recompressed batch is made by BatchBuilder.build, wherever the recompression runs:
    held when it is the large one."""
    hold = _Hold(BatchBuilder.build, loop_thread, lambda b: b.record_count >= RECORDS)

    def build(self: BatchBuilder) -> bytes:
        return hold(self)  # type: ignore[no-any-return]

    monkeypatch.setattr(BatchBuilder, "build", build)
    return hold


def test_a_large_recompression_runs_off_the_loop(
    tmp_path: Path, threads: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("zipped", 1, 1, {**BIG, "compression.type": "gzip"})
            await broker.topics.create("live", 1, 1, {})
            p = await hosted(broker, "zipped")
            await hosted(broker, "live")
            _jobs_in(broker, threads)
            request = produce_request("zipped", _batch(RECORDS))
            hold = _build_held(monkeypatch, threading.current_thread())

            heavy = _request_in_thread(broker.bound["PLAINTEXT"][1], request, 9)
            try:
                await _held_while_others_answered(broker, hold, heavy)
                assert p.log.log_end_offset == 0  # nothing written while it is prepared
            finally:
                hold.release.set()
            resp = await heavy
            assert resp.responses[0].partition_responses[0].error_code == 0
            stored = list(read_batches(p.log.read(0, 64 << 20).to_bytes()))
            assert {b.compression for b in stored} == {Compression.GZIP}
            assert [(r.offset, r.timestamp, r.value) for b in stored for r in b.records] == [
                (i, BASE_TS + i, b"value-%d" % i) for i in range(RECORDS)
            ]

    asyncio.run(body())


def test_a_retry_appended_while_the_first_is_prepared_is_a_duplicate(
    tmp_path: Path, threads: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idempotence check is made when the prepared batch is appended, on the loop: the same
    batch appended meanwhile (a retry that came first) makes it a duplicate, written once."""

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("zipped", 1, 1, {**BIG, "compression.type": "gzip"})
            await broker.topics.create("live", 1, 1, {})
            p = await hosted(broker, "zipped")
            await hosted(broker, "live")
            _jobs_in(broker, threads)
            batch = _batch(RECORDS, producer_id=4000, sequence=0)
            hold = _build_held(monkeypatch, threading.current_thread())

            heavy = _request_in_thread(broker.bound["PLAINTEXT"][1], produce_request("zipped", batch), 9)
            try:
                await _until(lambda: hold.started.is_set() or hold.on_loop or heavy.done(), "the recompression")
                assert not hold.on_loop, "the recompression ran on the event loop"
                first = broker.replicas.append(p, bytearray(batch), 1)  # the retry, first (nothing to build)
            finally:
                hold.release.set()
            resp = (await heavy).responses[0].partition_responses[0]
            assert resp.error_code == 0 and resp.base_offset == first.first_offset == 0
            assert p.log.log_end_offset == RECORDS  # once

    asyncio.run(body())


# -- compacted topics ---------------------------------------------------------------------------------------


def _key_check_held(monkeypatch: pytest.MonkeyPatch, loop_thread: threading.Thread) -> _Hold:
    """The key check: part of the pass over a batch's records (validate_records, and the log's
    fast path, check_produced), wherever it is called from."""
    hold = _Hold(validator_module.validate_records, loop_thread, lambda data, *a, **k: len(data) > 100_000)
    monkeypatch.setattr(validator_module, "validate_records", hold)
    monkeypatch.setattr(log_module, "check_produced", hold.around(log_module.check_produced))
    return hold


def test_a_large_key_check_runs_off_the_loop_and_refuses_keyless_records(
    tmp_path: Path, threads: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("compacted", 1, 1, {**BIG, "cleanup.policy": "compact"})
            await broker.topics.create("live", 1, 1, {})
            p = await hosted(broker, "compacted")
            await hosted(broker, "live")
            _jobs_in(broker, threads)
            hold = _key_check_held(monkeypatch, threading.current_thread())
            keyless = {7, 12_345, RECORDS - 1}
            refused = produce_request("compacted", _batch(RECORDS, keyless=keyless))
            keyed = produce_request("compacted", _batch(RECORDS))

            heavy = _request_in_thread(broker.bound["PLAINTEXT"][1], refused, 9)
            try:
                await _held_while_others_answered(broker, hold, heavy)
            finally:
                hold.release.set()
            resp = (await heavy).responses[0].partition_responses[0]
            assert resp.error_code == ErrorCode.INVALID_RECORD
            assert [e.batch_index for e in resp.record_errors] == sorted(keyless)
            assert all("Compacted topic cannot accept message without key" in e.batch_index_error_message
                       for e in resp.record_errors)
            assert p.log.log_end_offset == 0  # the refused batch wrote nothing

            # a keyed one of the same size is written
            ok = await _request_in_thread(broker.bound["PLAINTEXT"][1], keyed, 9)
            assert ok.responses[0].partition_responses[0].error_code == 0
            assert p.log.log_end_offset == RECORDS

    asyncio.run(body())


def test_down_conversion_disabled_for_a_topic(tmp_path: Path) -> None:
    """``message.downconversion.enable=false``: an old fetch of its v2 batches is answered
    UNSUPPORTED_VERSION for that partition, as Kafka does; a fetch of today reads them."""

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("modern-only", 1, 1, {"message.downconversion.enable": "false"})
            p = await hosted(broker, "modern-only")
            broker.replicas.append(p, bytearray(_batch(10)), 1)
            port = broker.bound["PLAINTEXT"][1]
            old = await _request_in_thread(port, _fetch_v3("modern-only", 0, 1 << 20), 3)
            assert old.responses[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION
            new = await _request_in_thread(port, _fetch_v3("modern-only", 0, 1 << 20), 4)
            part = new.responses[0].partitions[0]
            assert part.error_code == 0 and len(list(read_batches(bytes(part.records)))) == 1

    asyncio.run(body())


def test_conversions_beyond_the_workers_wait_their_turn(
    tmp_path: Path, threads: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four old fetches needing a large conversion at once: as many are converted as there are
    workers (one to three here), the others wait, holding nothing but their request; the loop
    answers others meanwhile; all four get their records."""

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("old", 1, 1, BIG)
            await broker.topics.create("live", 1, 1, {})
            p = await hosted(broker, "old")
            await hosted(broker, "live")
            broker.replicas.append(p, bytearray(_batch(RECORDS)), 1)
            _jobs_in(broker, threads)
            hold = _Hold(fetch_module.down_convert, threading.current_thread(), lambda *a, **k: True)
            monkeypatch.setattr(fetch_module, "down_convert", hold)
            offload = getattr(broker.scheduler, "offload", None)
            port = broker.bound["PLAINTEXT"][1]

            fetches = [_request_in_thread(port, _fetch_v3("old", 1000 * i, 1 << 20), 3) for i in range(4)]
            try:
                assert offload is not None and offload.workers < 4
                await _until(lambda: hold.on_loop or offload.waiting == 4 - offload.workers, "the rest waiting")
                assert not hold.on_loop, "the down-conversion ran on the event loop"
                assert offload.running == offload.workers
                api, _metadata, produced = await _others_answered(port)
                assert api.error_code == 0 and produced.responses[0].partition_responses[0].error_code == 0
                assert not any(f.done() for f in fetches)
            finally:
                hold.release.set()
            for i, f in enumerate(fetches):
                part = (await f).responses[0].partitions[0]
                records = [r for b in read_batches(bytes(part.records)) for r in b.records]
                assert records and records[0].offset == 1000 * i
                assert [r.value for r in records] == [b"value-%d" % o for o in range(1000 * i, 1000 * i + len(records))]
            assert offload.running == 0 and offload.bytes_in_flight == 0

    asyncio.run(body())


# -- validation of compressed batches -----------------------------------------------------------------------


def test_a_full_librdkafka_batch_of_a_fast_codec_is_validated_on_the_loop(
    tmp_path: Path, threads: ThreadPoolExecutor
) -> None:
    """librdkafka's batches hold up to 10,000 records (``batch.num.messages``): one compressed with
    lz4, zstd or snappy is decompressed and checked where it arrives (0.1-0.3 ms of compiled work),
    not sent to a worker through a spool file and a pipe, which cost more than the work (at the
    earlier limit of 8,192 records lz4 produce ran at 0.55x).  A batch beyond the loop's share
    still goes to a worker, and both are written."""
    from odradek.broker.handlers.produce import INLINE_DECOMPRESS_RECORDS

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("fast", 1, 1, BIG)
            p = await hosted(broker, "fast")
            _jobs_in(broker, threads)
            offload = broker.scheduler.offload
            port = broker.bound["PLAINTEXT"][1]
            for codec in (Compression.LZ4, Compression.ZSTD, Compression.SNAPPY):
                r = await _request_in_thread(port, produce_request("fast", _batch(10_000, codec=codec)), 9)
                assert r.responses[0].partition_responses[0].error_code == 0
            assert offload.started == 0, "a batch of 10,000 records went to a worker"
            larger = _batch(INLINE_DECOMPRESS_RECORDS + 1, codec=Compression.LZ4)
            r = await _request_in_thread(port, produce_request("fast", larger), 9)
            assert r.responses[0].partition_responses[0].error_code == 0
            assert offload.started == 1
            assert p.log.log_end_offset == 30_000 + INLINE_DECOMPRESS_RECORDS + 1

    asyncio.run(body())


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD, Compression.GZIP, Compression.SNAPPY])
def test_a_batch_of_few_records_that_inflates_far_is_validated_in_a_worker(
    tmp_path: Path, threads: ThreadPoolExecutor, codec: Compression
) -> None:
    """A batch's record count bounds the loop's work of reading records, not of decompressing
    them: one record of 20 MiB of zeros compresses to a few kilobytes (zstd) and decompressing it
    took the loop tens of milliseconds.  Past ``LOOP_DECOMPRESSED_BYTES`` the loop stops and hands the
    batch to a worker, which writes it whole; one past Kafka's 64 MiB bound is MESSAGE_TOO_LARGE
    there, with nothing written."""
    from odradek.broker.offload import LOOP_DECOMPRESSED_BYTES

    big = bytes(20 << 20)
    assert len(big) > LOOP_DECOMPRESSED_BYTES

    def one(value: bytes) -> bytes:
        b = BatchBuilder(compression=codec)
        b.append(BASE_TS, b"k", value)
        return b.build()

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            await broker.topics.create("inflating", 1, 1, BIG)
            p = await hosted(broker, "inflating")
            _jobs_in(broker, threads)
            offload = broker.scheduler.offload
            port = broker.bound["PLAINTEXT"][1]
            small = await _request_in_thread(port, produce_request("inflating", one(bytes(1000))), 9)
            assert small.responses[0].partition_responses[0].error_code == 0
            assert offload.started == 0  # a batch within the budget stays on the loop
            batch = one(big)
            assert len(batch) < 2 << 20
            r = await _request_in_thread(port, produce_request("inflating", batch), 9)
            assert r.responses[0].partition_responses[0].error_code == 0
            assert offload.started == 1, "the inflating batch was validated on the loop"
            stored = [r for b in read_batches(p.log.read(0, 64 << 20).to_bytes()) for r in b.records]
            assert [(r.offset, len(r.value or b"")) for r in stored] == [(0, 1000), (1, len(big))]
            assert stored[1].value == big
            over = one(bytes(65 << 20))
            r = await _request_in_thread(port, produce_request("inflating", over), 9)
            assert r.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
            assert offload.started == 2
            assert p.log.log_end_offset == 2

    asyncio.run(body())
