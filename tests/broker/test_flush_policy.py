"""The broker flushes by the logs' own flush rules, from a worker thread and a timer, never inline.

``flush.messages``: a produce that brings the unflushed records to the limit is answered once they
are on disk (recovery point moved), one below the limit is not flushed. ``flush.ms``: the broker's
timer flushes a log whose records waited that long, and leaves a log with the default (never)
alone (on fake time: the timer's ticks are moved by hand). Both decisions are
:meth:`Log.flush_messages_due` / :meth:`Log.flush_time_due`; the logs the broker creates or loads
never flush inline (``LogManager(flush_inline=False)``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from odradek.broker.app import Broker
from odradek.protocol import Message
from odradek.records import BatchBuilder
from odradek.storage import Log
from odradek.testing import FakeScheduler, WireClient, produce_request
from tests.broker.inprocess import hosted, running_broker


def _produce(topic: str, value: bytes) -> Message:
    b = BatchBuilder()
    b.append(int(time.time() * 1000), None, value, [])
    return produce_request(topic, bytes(b.build()))


async def _log(broker: Broker, topic: str, configs: dict[str, str]) -> Log:
    await broker.topics.create(topic, 1, 1, configs)
    return (await hosted(broker, topic)).log


async def _send(broker: Broker, topic: str, value: bytes) -> None:
    """One acks=1 produce over a real connection (a blocking client on a thread: the broker runs on
    this event loop)."""
    host, port = broker.bound["PLAINTEXT"]
    w = await asyncio.to_thread(WireClient, host, port, "flush-test")
    try:
        resp = await asyncio.to_thread(w.request, _produce(topic, value), 9)
    finally:
        w.close()
    assert resp.responses[0].partition_responses[0].error_code == 0, resp


def _run(
    tmp_path: Path, body: Callable[[Broker], Awaitable[None]], timers: FakeScheduler | None = None,
    overrides: dict[str, object] | None = None,
) -> None:
    async def main() -> None:
        async with running_broker(tmp_path / "data", overrides=overrides, timers=timers) as broker:
            await body(broker)

    asyncio.run(main())


def test_flush_messages_is_answered_once_flushed(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        lg = await _log(broker, "every-third", {"flush.messages": "3"})
        assert not lg.auto_flush, "a broker's log flushes inline on the event loop"
        await _send(broker, "every-third", b"1")
        await _send(broker, "every-third", b"2")
        assert (lg.log_end_offset, lg.recovery_point) == (2, 0)
        assert not lg.flush_messages_due()
        await _send(broker, "every-third", b"3")
        # answered only after the flush: the records are below the recovery point
        assert (lg.log_end_offset, lg.recovery_point) == (3, 3)
        await _send(broker, "every-third", b"4")
        assert lg.recovery_point == 3

    _run(tmp_path, body)


def test_flush_ms_is_flushed_by_the_timer(tmp_path: Path) -> None:
    fake = FakeScheduler()

    async def flushes_done(broker: Broker) -> None:
        """Until the flushes the timer handed to the I/O executor have run (one thread: what it
        was handed before runs before this)."""
        await broker.scheduler.run_io(lambda: None)

    async def body(broker: Broker) -> None:
        timed = await _log(broker, "timed", {"flush.ms": "100"})
        never = await _log(broker, "never", {})
        await _send(broker, "never", b"a")
        await _send(broker, "timed", b"b")
        await fake.advance(999)  # the flush timer ticks every second (log.flush.scheduler.interval.ms, at most 1 s)
        await flushes_done(broker)
        assert timed.recovery_point == 0, "flushed before the timer's tick"
        await fake.advance(1)
        await flushes_done(broker)
        assert timed.recovery_point == 1, "the flush timer never flushed a log past its flush.ms"
        await fake.advance(1000)  # one more tick of the flush timer
        await flushes_done(broker)
        assert (never.log_end_offset, never.recovery_point) == (1, 0), "a log without flush.ms was flushed"
        assert not never.flush_time_due(broker.clock.monotonic_ms())

    _run(tmp_path, body, fake, {"num.recovery.threads.per.data.dir": 1})  # the I/O executor's one thread
