"""The consumer's fetch path: response framing (``_FrameStream``), column-wise record building
in ``AsyncSimpleConsumer._decode``, and ``SimpleConsumer``'s fetch ahead."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.client import AsyncSimpleConsumer, ConsumerRecord, SimpleConsumer
from odradek.client._aio import _SCRATCH, _FrameStream
from odradek.client._network import _frame_buffer
from odradek.records import BatchBuilder, TimestampType
from odradek.testing import BrokerProcess

T0 = 1_700_000_000_000


# -- framing ----------------------------------------------------------------------------------------
class _Conn:
    """What ``_FrameStream`` calls back: frames received, failure."""

    def __init__(self) -> None:
        self.node_id = 1
        self.max_frame_size = 1 << 26
        self.frames: list[bytes] = []
        self.closed = False
        self.error: BaseException | None = None

    def _on_frame(self, payload: bytearray | memoryview) -> None:
        assert isinstance(payload, bytearray | memoryview) and not memoryview(payload).readonly
        self.frames.append(bytes(payload))

    def _fail(self, exc: BaseException) -> None:
        self.closed = True
        self.error = exc


def _feed(stream: _FrameStream, data: bytes, rng: random.Random) -> None:
    """Deliver ``data`` as the transport would: into the buffers it hands out, in random chunks."""
    pos = 0
    while pos < len(data):
        buf = stream.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, rng.choice([1, 3, 4, 5, 100, 4096, 1 << 16, 1 << 22]))
        buf[:n] = data[pos : pos + n]
        stream.buffer_updated(n)
        pos += n


@pytest.mark.parametrize("seed", range(8))
def test_frames_of_every_size_in_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 7, 100, _SCRATCH - 5, _SCRATCH - 4, _SCRATCH, _SCRATCH + 1, 3 * _SCRATCH, 1 << 21])
             for _ in range(25)]
    payloads = [rng.randbytes(n) for n in sizes]
    conn = _Conn()
    stream = _FrameStream(conn)  # type: ignore[arg-type]
    _feed(stream, b"".join(struct.pack(">i", len(p)) + p for p in payloads), rng)
    assert conn.frames == payloads and not conn.closed


@pytest.mark.parametrize("size", [-1, (1 << 26) + 1])
def test_bad_frame_sizes_fail_the_connection(size: int) -> None:
    conn = _Conn()
    stream = _FrameStream(conn)  # type: ignore[arg-type]
    _feed(stream, struct.pack(">i", 3) + b"abc" + struct.pack(">i", size) + b"x" * 10, random.Random(0))
    assert conn.frames == [b"abc"] and conn.closed and isinstance(conn.error, ConnectionError)


def test_buffers_of_large_frames_are_reused_once_unreferenced() -> None:
    size = (1 << 20) + 12345
    first = _frame_buffer(size)
    first[:3] = b"abc"
    owner = id(first.obj)
    second = _frame_buffer(size)  # ``first`` is still referred to: another buffer
    assert id(second.obj) != owner and bytes(first[:3]) == b"abc"
    held = first[10:20]  # a view of a view keeps it too
    del first
    assert id(_frame_buffer(size - 100).obj) != owner
    del held
    again = _frame_buffer(size - 100)  # nothing refers to it now; a little smaller fits
    assert id(again.obj) == owner and len(again) == size - 100 and not again.readonly
    del again
    assert id(_frame_buffer(3 * size).obj) != owner  # too small for that


# -- decoding into ConsumerRecord ---------------------------------------------------------------------
def _decode(data: bytes, offset: int, **config: Any) -> Any:
    c = AsyncSimpleConsumer(bootstrap_servers="127.0.0.1:1", **config)
    pd = SimpleNamespace(
        records=memoryview(bytearray(data)),
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
    )
    return c._decode("t", 2, offset, pd)


def _batch(base: int, n: int, *, lat: int | None = None, key: bytes | None = None) -> bytes:
    b = BatchBuilder(base_offset=base, log_append_time=lat)
    for i in range(n):
        b.append(T0 + i // 100, key, b"%08d" % (base + i) + b"v" * 92)
    return b.build()


def test_runs_of_records_decode_to_consumer_records() -> None:
    data = _batch(0, 9000) + _batch(9000, 500, lat=T0 + 5, key=b"k") + _batch(9500, 300)
    got = _decode(data, 0)
    assert len(got) == 9800 and got.next_offset == 9800
    assert all(type(r) is ConsumerRecord for r in got)
    assert [r.offset for r in got] == list(range(9800))
    assert [r.value[:8] for r in got] == [b"%08d" % i for i in range(9800)]
    first, lat = got[8999], got[9000]
    assert first == ConsumerRecord("t", 2, 8999, T0 + 89, TimestampType.CREATE_TIME, None, first.value, [])
    assert lat == ConsumerRecord("t", 2, 9000, T0 + 5, TimestampType.LOG_APPEND_TIME, b"k", lat.value, [])
    assert got[0].headers is not got[1].headers
    # starting inside a batch: the records before the offset are left out
    assert [r.offset for r in _decode(data, 8990)][:12] == list(range(8990, 9002))


def test_deserializers_apply_to_every_record() -> None:
    got = _decode(_batch(0, 300, key=b"k"), 0, key_deserializer=lambda b: b.decode(), value_deserializer=len)
    assert {(r.key, r.value) for r in got} == {("k", 100)} and len(got) == 300


# -- fetching ahead ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("odradek-fetch-path") / "data"
    with BrokerProcess(data_dir, overrides={"num.partitions": 1, "auto.create.topics.enable": "true"}) as proc:
        yield proc


def _produce(broker: BrokerProcess, topic: str, start: int, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 20000})
    for i in range(start, start + n):
        p.produce(topic, b"%d" % i, partition=0, timestamp=T0 + i)
    assert p.flush(30) == 0


def _read(c: SimpleConsumer, topic: str, start: int, end: int, max_bytes: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    offset = start
    while offset < end:
        part = c.fetch(topic, 0, offset, max_bytes)
        assert part.next_offset > offset
        out.extend(part)
        offset = part.next_offset
    return out


def test_fetch_ahead_gives_what_plain_fetches_give(broker: BrokerProcess) -> None:
    topic = "fetch-ahead"
    _produce(broker, topic, 0, 3000)
    with SimpleConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=50) as ahead, SimpleConsumer(
        bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=50
    ) as plain:
        plain.fetch_ahead = False
        want = _read(plain, topic, 0, 3000, 4000)
        assert plain._ahead is None
        assert _read(ahead, topic, 0, 3000, 4000) == want
        assert [r.value for r in want] == [b"%d" % i for i in range(3000)]

        # the next fetch is under way after a fetch that left records in the log
        part = ahead.fetch(topic, 0, 100, 4000)
        assert ahead._ahead is not None and ahead._ahead[0] == (topic, 0, part.next_offset, 4000)
        # any other call drops it, and reads what it asked for
        other = ahead.fetch(topic, 0, 7, 4000)
        assert other[0].offset == 7 and list(other) == want[7 : 7 + len(other)]
        # records produced after a fetch ahead are read by the fetches after it
        _produce(broker, topic, 3000, 500)
        got = list(other) + _read(ahead, topic, other.next_offset, 3500, 4000)
        assert [r.offset for r in got] == list(range(7, 3500))
        assert [r.timestamp for r in got] == [T0 + i for i in range(7, 3500)]
        # at the end of the log nothing is fetched ahead
        assert list(ahead.fetch(topic, 0, 3500, 4000)) == [] and ahead._ahead is None
        ahead.fetch(topic, 0, 0, 4000)
        assert ahead._ahead is not None  # closed with a fetch under way: fine


def test_async_clients_run_on_uvloop(broker: BrokerProcess) -> None:
    """Applications running uvloop (whose transports are not ``asyncio.Transport`` subclasses)
    produce and fetch with the asyncio clients as on the default loop."""
    uvloop = pytest.importorskip("uvloop")
    from odradek.client import AsyncProducer

    topic = "uvloop-clients"

    async def main() -> list[tuple[int, bytes | None]]:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
        try:
            for i in range(50):
                await producer.send(topic, b"v%d" % i, partition=0)
            await producer.flush(30)
        finally:
            await producer.close(30)
        consumer = AsyncSimpleConsumer({"bootstrap.servers": broker.bootstrap})
        try:
            got: list[tuple[int, bytes | None]] = []
            while len(got) < 50:
                records = await consumer.fetch(topic, 0, len(got), 1 << 20)
                assert records, "no progress"
                got += [(r.offset, r.value) for r in records]
            return got
        finally:
            await consumer.close()

    assert uvloop.run(main()) == [(i, b"v%d" % i) for i in range(50)]


def test_blocking_connection_answers_pipelined_requests_in_order(broker: BrokerProcess) -> None:
    """``BrokerConnection.send`` several requests, then ``receive`` their answers in order; the
    records of a large response (read into a reused buffer) stay intact while it is kept."""
    from confluent_kafka import Producer

    from odradek.client import Cluster
    from odradek.protocol.messages.fetch import FetchRequest
    from odradek.records import read_batches

    topic = "blocking-pipeline"
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 100_000})
    for i in range(30_000):
        p.produce(topic, b"%d" % i + b"." * 100, partition=0)
    assert p.flush(30) == 0

    def fetch(offset: int) -> FetchRequest:
        part = FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=200_000)
        topics = [FetchRequest.FetchTopic(topic=topic, partitions=[part])]
        return FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=200_000, topics=topics)

    cluster = Cluster(broker.bootstrap, timeout=10)
    try:
        conn = cluster.leader_of(topic, 0)
        starts = [0, 9000, 18000, 27000]
        for s in starts:
            conn.send(fetch(s), 12)
        responses = [conn.receive() for _ in starts]  # all kept: their buffers are not reused
        for s, resp in zip(starts, responses, strict=True):
            records = resp.responses[0].partitions[0].records
            assert isinstance(records, memoryview) and len(records) > 65536  # a large frame's view
            values = [r.value for b in read_batches(bytes(records)) for r in b.records if r.offset >= s]
            assert values[:500] == [b"%d" % i + b"." * 100 for i in range(s, s + 500)]
        assert len({id(r.responses[0].partitions[0].records.obj) for r in responses}) == len(starts)
    finally:
        cluster.close()
