"""The ZooKeeper consumer's streams iterate with ``for`` and with ``async for`` alike: same
messages, the same consumer.timeout.ms error, the end at shutdown, and a cancelled ``async for``
loses no message (the next iteration gets it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("kazoo")

from odradek.client.zk_consumer import _SHUTDOWN, ConsumerTimeoutError, KafkaStream, MessageAndMetadata


class _Consumer:
    """What a stream asks of its consumer: turn a fetched record into a message (None: stale)."""

    def _consumed(self, thread_id: str, generation: int, record: Any) -> MessageAndMetadata | None:
        if generation < 1:
            return None  # fetched before a rebalance: dropped
        return MessageAndMetadata("t", 0, record, None, b"v%d" % record)


def _stream(timeout_ms: int = -1) -> KafkaStream:
    return KafkaStream(_Consumer(), "g_c-0", timeout_ms, capacity=4)  # type: ignore[arg-type]


def test_sync_and_async_iteration_give_the_same_messages() -> None:
    def fill(s: KafkaStream) -> None:
        s.queue.put((0, [100, 101]))  # a stale chunk
        s.queue.put((1, [0, 1, 2]))
        s.queue.put((1, [3]))
        s.queue.put(_SHUTDOWN)

    sync = _stream()
    fill(sync)
    got_sync = [m.offset for m in sync]

    async def consume() -> list[int]:
        s = _stream()
        fill(s)
        return [m.offset async for m in s]

    assert got_sync == asyncio.run(consume()) == [0, 1, 2, 3]


def test_consumer_timeout_in_both_forms() -> None:
    with pytest.raises(ConsumerTimeoutError):
        next(_stream(50))

    async def wait() -> None:
        await _stream(50).__anext__()

    with pytest.raises(ConsumerTimeoutError):
        asyncio.run(wait())


def test_a_cancelled_async_iteration_loses_no_message() -> None:
    async def main() -> list[int]:
        s = _stream()
        waiting = asyncio.create_task(s.__anext__())
        await asyncio.sleep(0.05)
        waiting.cancel()  # nothing arrived yet: the waiter goes away
        with pytest.raises(asyncio.CancelledError):
            await waiting
        s.queue.put((1, [7, 8]))
        s.queue.put(_SHUTDOWN)
        return [m.offset async for m in s]

    assert asyncio.run(main()) == [7, 8]
