"""The connection's request pipeline, in process: requests handled right away while their
handlers do not wait, in order behind one that waits, long-poll fetches woken by produces (the
purgatory's deadlines on fake time), and nothing left behind by a connection that goes away while
its fetch waits."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker.app import Broker
from odradek.protocol import ClientConnection, Message, ResponseReceived
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.records import BatchBuilder, read_batches
from odradek.testing import FakeScheduler, produce_request
from tests.broker.inprocess import hosted, running_broker

TOPIC = "pipeline"


class _Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = ClientConnection("pipeline-test")

    @classmethod
    async def connect(cls, broker: Broker) -> _Client:
        host, port = broker.bound["PLAINTEXT"]
        return cls(*await asyncio.open_connection(host, port))

    def send(self, message: Message, version: int, expect_response: bool = True) -> int:
        cid, data = self.conn.send_request(message, version, expect_response)
        self.writer.write(data)
        return cid

    async def receive(self) -> ResponseReceived:
        while True:
            ev = self.conn.next_event()
            if isinstance(ev, ResponseReceived):
                return ev
            chunk = await asyncio.wait_for(self.reader.read(1 << 20), 10)
            assert chunk, "broker closed the connection"
            self.conn.receive_data(chunk)

    def close(self) -> None:
        self.writer.close()


def _batch(value: bytes) -> bytes:
    b = BatchBuilder()
    b.append(int(time.time() * 1000), None, value, [])
    return bytes(b.build())


def _produce(value: bytes, acks: int = 1) -> Message:
    return produce_request(TOPIC, _batch(value), acks=acks)


def _fetch(offset: int, max_wait_ms: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            FetchRequest.FetchTopic(
                topic=TOPIC,
                partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)],
            )
        ],
    )


def _values(response: Any) -> list[bytes | None]:
    records = response.responses[0].partitions[0].records
    return [r.value for b in read_batches(bytes(records or b"")) for r in b.records]


def _run(
    tmp_path: Path, body: Callable[[Broker], Awaitable[None]], loop: str = "asyncio", timers: FakeScheduler | None = None
) -> None:
    async def main() -> None:
        async with running_broker(tmp_path / "data", timers=timers) as broker:
            await broker.topics.create(TOPIC, 1, 1, {})
            await hosted(broker, TOPIC)
            await body(broker)

    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())


def test_pipelined_requests_are_answered_in_order(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        c = await _Client.connect(broker)
        sent = [c.send(_produce(b"a"), 9), c.send(_produce(b"b"), 9), c.send(MetadataRequest(topics=None), 12)]
        c.send(_produce(b"no answer", acks=0), 9, expect_response=False)
        sent.append(c.send(_produce(b"c"), 9))
        got = [await c.receive() for _ in sent]
        assert [r.correlation_id for r in got] == sent
        offsets = [r.response.responses[0].partition_responses[0].base_offset for r in (got[0], got[1], got[3])]
        assert offsets == [0, 1, 3]
        assert TOPIC in {t.name for t in got[2].response.topics}
        c.close()

    _run(tmp_path, body)


async def _waiting(broker: Broker, count: int = 1) -> None:
    """Until ``count`` fetches wait in the partition's purgatory."""
    p = broker.replicas.get(TOPIC, 0)
    assert p is not None
    for _ in range(1000):
        if len(p.data_waiters) == count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{len(p.data_waiters)} fetches wait, not {count}")


def test_long_poll_fetch_is_woken_by_a_produce(tmp_path: Path) -> None:
    fake = FakeScheduler()

    async def body(broker: Broker) -> None:
        consumer, producer = await _Client.connect(broker), await _Client.connect(broker)
        consumer.send(_fetch(0, 5000), 11)
        await _waiting(broker)
        start = fake.clock.monotonic_ms()
        producer.send(_produce(b"wake up"), 9)
        await producer.receive()
        fetched = await consumer.receive()
        assert fake.clock.monotonic_ms() == start  # woken by the produce, not by its deadline
        assert _values(fetched.response) == [b"wake up"]
        # nothing visible at the next offset: the fetch waits out max_wait_ms and comes back empty
        consumer.send(_fetch(1, 60_000), 11)  # a deadline no real wait reaches in this test
        await _waiting(broker)
        await fake.advance(59_999)
        await _waiting(broker)  # still waiting 1 ms before its deadline
        await fake.advance(1)
        empty = await consumer.receive()
        assert empty.response.responses[0].partitions[0].error_code == 0
        assert _values(empty.response) == []
        consumer.close()
        producer.close()

    _run(tmp_path, body, timers=fake)


def test_requests_behind_a_waiting_fetch_keep_their_order(tmp_path: Path) -> None:
    fake = FakeScheduler()

    async def body(broker: Broker) -> None:
        c = await _Client.connect(broker)
        first = c.send(_fetch(0, 60_000), 11)
        second = c.send(_produce(b"queued"), 9)  # waits behind the fetch, which cannot see it
        await _waiting(broker)
        await fake.advance(59_999)
        await _waiting(broker)
        lg = broker.logs.get(TOPIC, 0)
        assert lg is not None and lg.log_end_offset == 0, "the produce was handled before the fetch ahead of it"
        await fake.advance(1)
        a, b = await c.receive(), await c.receive()
        assert (a.correlation_id, b.correlation_id) == (first, second)
        assert _values(a.response) == []
        assert b.response.responses[0].partition_responses[0].base_offset == 0
        c.close()

    _run(tmp_path, body, timers=fake)


def test_a_fetch_left_waiting_by_a_closed_connection_leaves_nothing_behind(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        p = broker.replicas.get(TOPIC, 0)
        assert p is not None
        for _ in range(3):
            c = await _Client.connect(broker)
            c.send(_fetch(0, 10_000), 11)
            for _ in range(100):
                if p.data_waiters:
                    break
                await asyncio.sleep(0.01)
            assert len(p.data_waiters) == 1
            c.close()
            for _ in range(200):
                if not p.data_waiters and not broker.connections:
                    break
                await asyncio.sleep(0.01)
            assert p.data_waiters == []
        # the broker still serves fetches and produces
        c = await _Client.connect(broker)
        c.send(_produce(b"after"), 9)
        await c.receive()
        c.send(_fetch(0, 1000), 11)
        assert _values((await c.receive()).response) == [b"after"]
        c.close()

    _run(tmp_path, body)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_large_responses_queued_behind_a_slow_reader_stay_intact(tmp_path: Path, loop: str) -> None:
    """Large pipelined fetch responses to a client that reads only after they all went out
    arrive whole and in order (each batch's CRC checked), under both event loops."""
    values = [os.urandom(900_000) for _ in range(8)]

    async def body(broker: Broker) -> None:
        c = await _Client.connect(broker)
        for v in values:
            c.send(_produce(v), 9)
            await c.receive()
        for rounds in range(3):
            sent = [c.send(_fetch(i, 1000), 11) for i in range(len(values))]
            await asyncio.sleep(0.2)  # nothing read yet: the responses back up in the broker
            got = [await c.receive() for _ in sent]
            assert [r.correlation_id for r in got] == sent
            for i, r in enumerate(got):
                # read_batches checks each batch's CRC; the first record is the one asked for
                assert _values(r.response)[0] == values[i], f"response {i} of round {rounds}"
        c.close()

    _run(tmp_path, body, loop)


class _HoldingTransport:
    """Keeps every written buffer by reference (as uvloop does with what it cannot send at
    once) until ``sent`` says how many bytes went out."""

    def __init__(self) -> None:
        self.writes: list[tuple[memoryview, bytes]] = []  # what was handed over, and a copy
        self.handed = 0
        self.sent = 0

    def write(self, data: Any) -> None:
        view = memoryview(data)
        self.writes.append((view, bytes(view)))
        self.handed += len(view)

    def get_write_buffer_size(self) -> int:
        return self.handed - self.sent


class _FileRegion:
    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd, self.position, self.length = fd, position, length


def test_response_buffers_are_reused_only_once_sent(tmp_path: Path) -> None:
    """The page-aligned buffers that fetch responses are assembled in are kept for the next
    responses, but one the transport still holds (not sent yet) is never written over."""
    from odradek.broker.server import KafkaConnection

    segment = tmp_path / "segment"
    data = os.urandom(3 << 20)
    segment.write_bytes(data)
    fd = os.open(segment, os.O_RDONLY)
    try:

        from odradek.broker.authentication import ListenerSecurity
        from odradek.config import BrokerConfig, Listener
        from odradek.settings import settings_from

        class _Ports:
            connection = SimpleNamespace(
                settings=settings_from(BrokerConfig({"socket.request.max.bytes": 100 << 20})),
                quotas=None, metrics=None, log_dirs=None, closed=None,
            )

        security = ListenerSecurity(settings_from(BrokerConfig({})), Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0), lambda u, m: None)
        conn = KafkaConnection(_Ports(), "PLAINTEXT", set(), 500, security)  # type: ignore[arg-type]
        transport = _HoldingTransport()
        conn.transport = transport  # type: ignore[assignment]

        def respond(i: int) -> None:
            conn._write([b"head%d" % i, _FileRegion(fd, i * 100_000, 1 << 20), b"tail"])

        def unsent_intact() -> None:
            at = 0
            for view, copy in transport.writes:
                at += len(view)
                if at > transport.sent:
                    assert bytes(view) == copy, "a buffer the transport still holds was written over"

        for i in range(4):  # nothing sent: every response needs a buffer of its own
            respond(i)
            unsent_intact()
        assert len({id(v.obj) for v, _ in transport.writes}) == 4
        transport.sent = transport.handed  # all out: buffers are reused from now on
        for i in range(4, 12):
            respond(i)
            unsent_intact()
            transport.sent = transport.handed - (1 << 19)  # half of the last one still queued
        assert len({id(v.obj) for v, _ in transport.writes}) < 12
        assert [c[4:] for _, c in transport.writes] == [
            b"%d" % i + data[i * 100_000 : i * 100_000 + (1 << 20)] + b"tail" for i in range(12)
        ]
    finally:
        os.close(fd)
