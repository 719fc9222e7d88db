"""Fetch responses go to an idle plaintext socket with sendfile, and what it cannot take follows
through the transport: the bytes arrive whole and in order however slowly the client reads."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.app import Broker
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.records import BatchBuilder, read_batches
from odradek.testing import WireClient, produce_request
from tests.broker.inprocess import hosted, running_broker

TOPIC = "direct"
PARTITIONS = 3
BATCHES = 4  # per partition, of RECORDS records of VALUE bytes: 2 MB a partition
RECORDS = 500
VALUE = 1000


def _batch(partition: int, first: int) -> bytes:
    b = BatchBuilder()
    for i in range(first, first + RECORDS):
        b.append(int(time.time() * 1000), None, b"%d:%d:" % (partition, i) + b"v" * VALUE, [])
    return bytes(b.build())


async def _topic(broker: Broker, w: WireClient, batches: int) -> None:
    """The topic, with ``batches`` batches in each partition, written through ``w``."""
    await broker.topics.create(TOPIC, PARTITIONS, 1, {})
    for p in range(PARTITIONS):
        await hosted(broker, TOPIC, p)
        for k in range(batches):
            resp = await asyncio.to_thread(w.request, produce_request(TOPIC, {p: _batch(p, k * RECORDS)}), 9)
            assert resp.responses[0].partition_responses[0].error_code == 0, resp


def _fetch(max_bytes: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
        topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=max_bytes)
            for p in range(PARTITIONS)
        ])],
    )


def _slow_client(broker: Broker) -> WireClient:
    """A client with a 64 KiB receive buffer: the broker's socket fills long before a fetch of
    several MB is out."""
    host, port = broker.bound["PLAINTEXT"]
    w = WireClient(host, port, "sendfile-test", timeout=30)
    w.sock.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(30)
    sock.connect((host, port))
    w.sock = sock
    return w


def _values(response: Any) -> dict[int, list[bytes]]:
    out = {}
    for part in response.responses[0].partitions:
        assert part.error_code == 0, part
        out[part.partition_index] = [r.value for b in read_batches(bytes(part.records or b"")) for r in b.records]
    return out


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_big_fetch_to_a_slow_reader_arrives_whole_and_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop: str
) -> None:
    calls: list[str] = []
    real_sendfile = os.sendfile

    def sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        try:
            sent = real_sendfile(out_fd, in_fd, offset, count)
        except BlockingIOError:
            calls.append("full")
            raise
        calls.append("all" if sent == count else "part")
        return sent

    monkeypatch.setattr(os, "sendfile", sendfile)

    async def main() -> None:
        # every partition in the one answer (no fetch.response.target.bytes): regions of three files
        async with running_broker(tmp_path / "data", overrides={"fetch.response.target.bytes": 0}) as broker:
            host, port = broker.bound["PLAINTEXT"]
            producer = await asyncio.to_thread(WireClient, host, port, "producer")
            await _topic(broker, producer, BATCHES)
            producer.close()

            w = await asyncio.to_thread(_slow_client, broker)
            # no back-pressure: the requests behind the first are answered while the transport
            # still holds what the socket could not take, and must queue behind it
            for _ in range(100):
                if broker.connections:
                    break
                await asyncio.sleep(0.01)
            for conn in broker.connections:
                assert conn.transport is not None
                conn.transport.set_write_buffer_limits(high=1 << 30)

            def exchange() -> list[Any]:
                data = b"".join(
                    w.conn.send_request(request, version)[1]
                    for request, version in [
                        (_fetch(8 << 20), 11),
                        (MetadataRequest(topics=None), 12),
                        (_fetch(8 << 20), 11),
                        (_fetch(8 << 20), 11),
                    ]
                )
                w.sock.sendall(data)  # in one write: the broker handles them in one go
                w.in_flight += 4
                time.sleep(0.5)  # the broker's socket fills meanwhile
                return [w.receive() for _ in range(4)]

            first, metadata, *others = await asyncio.to_thread(exchange)
            w.close()
            expected = {
                p: [b"%d:%d:" % (p, i) + b"v" * VALUE for i in range(BATCHES * RECORDS)] for p in range(PARTITIONS)
            }
            assert _values(first) == expected
            assert [t.name for t in metadata.topics] == [TOPIC]
            for response in others:
                assert _values(response) == expected

    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())
    # the first response went out with sendfile until the socket was full, and the rest followed
    # through the transport
    assert calls[0] in ("all", "part") and "full" in calls, calls


def test_nothing_goes_around_bytes_the_transport_still_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the transport holds unsent bytes, a response written straight to the socket would
    overtake them: then it goes through the transport too."""
    calls: list[int] = []
    real_sendfile = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda *a: calls.append(a[3]) or real_sendfile(*a))

    class Holding:
        """The connection's transport, reporting unsent bytes."""

        def __init__(self, transport: Any) -> None:
            self._transport = transport
            self.written = 0

        def get_write_buffer_size(self) -> int:
            return 1

        def write(self, data: Any) -> None:
            self.written += len(data)
            self._transport.write(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._transport, name)

    async def main() -> None:
        async with running_broker(tmp_path / "data") as broker:
            host, port = broker.bound["PLAINTEXT"]
            w = await asyncio.to_thread(WireClient, host, port, "holding")
            await _topic(broker, w, 1)
            answer = await asyncio.to_thread(w.request, _fetch(8 << 20), 11)
            assert calls, "an idle socket gets a big fetch response with sendfile"
            assert {p: len(v) for p, v in _values(answer).items()} == {p: RECORDS for p in range(PARTITIONS)}
            calls.clear()
            [conn] = broker.connections
            holding = Holding(conn.transport)
            conn.transport = holding  # type: ignore[assignment]
            answer = await asyncio.to_thread(w.request, _fetch(8 << 20), 11)
            w.close()
            assert calls == [] and holding.written > PARTITIONS * RECORDS * VALUE
            assert {p: len(v) for p, v in _values(answer).items()} == {p: RECORDS for p in range(PARTITIONS)}

    asyncio.run(main())
