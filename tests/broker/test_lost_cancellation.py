"""A cancellation that meets a failing request in the same loop iteration is not lost.

Python 3.11's ``asyncio.wait_for`` turns such a cancellation into the request's exception; the
controller's send loop then retried a dead broker forever and its ``close()`` never returned, so
no new leader was elected for the partitions that broker led (a CI failure of the failover test).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from odradek._timeouts import wait_for
from odradek.broker.channel import BrokerChannel
from odradek.broker.controller.channel import BrokerQueue
from odradek.protocol.messages.api_versions import ApiVersionsRequest


async def _cancel_while_failing(fut: asyncio.Future[Any], task: asyncio.Task[Any]) -> None:
    await asyncio.sleep(0.01)
    fut.set_exception(ConnectionError("the broker went away"))
    task.cancel()  # the same loop iteration


def test_wait_for_propagates_a_cancellation_that_meets_an_exception() -> None:
    async def main() -> str:
        fut = asyncio.get_running_loop().create_future()

        async def waiter() -> str:
            try:
                await wait_for(fut, 10)
            except ConnectionError:
                return "the cancellation was lost"
            return "no exception"

        task = asyncio.create_task(waiter())
        await _cancel_while_failing(fut, task)
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    assert asyncio.run(main()) == "cancelled"


def test_wait_for_times_out_and_cancels_the_future() -> None:
    async def main() -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await wait_for(fut, 0.01)
        return fut

    assert asyncio.run(main()).cancelled()


class _DyingChannel:
    """A broker channel whose requests wait until the test breaks the connection."""

    def __init__(self, *_a: Any, **_k: Any) -> None:
        self.inflight: asyncio.Future[Any] | None = None
        self.requests = 0
        self.closed = False

    async def request(self, message: Any, version: int) -> Any:
        self.requests += 1
        if self.inflight is not None:  # after the first failure: connection refused
            raise ConnectionError("connection refused")
        self.inflight = asyncio.get_running_loop().create_future()
        # Python 3.11's wait_for, on purpose: the queue must close even if code below it loses
        # a cancellation
        return await asyncio.wait_for(self.inflight, 30)

    async def close(self) -> None:
        self.closed = True


def test_controller_queue_closes_while_its_request_fails() -> None:
    async def main() -> tuple[bool, bool, bool]:
        channel = _DyingChannel()
        queue = BrokerQueue(lambda *a, **k: cast(BrokerChannel, channel), 3, "127.0.0.1", 1, client_id="controller-1", timeout=30)
        answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queue.send(ApiVersionsRequest(), 0, answered)
        for _ in range(100):
            if channel.inflight is not None:
                break
            await asyncio.sleep(0.01)
        assert channel.inflight is not None
        closing = asyncio.create_task(queue.close())
        channel.inflight.set_exception(ConnectionError("the broker went away"))  # as close() cancels
        done, _ = await asyncio.wait({closing}, timeout=10)
        return bool(done), channel.closed, answered.cancelled()

    closed, channel_closed, cancelled = asyncio.run(main())
    assert closed, "BrokerQueue.close() hung: the send loop lost its cancellation"
    assert channel_closed and cancelled


def test_wait_for_works_in_a_coroutine_driven_by_hand() -> None:
    """The broker sends into a handler's coroutine from its protocol callback, with no task
    running, until the handler first waits (asyncio.timeout refuses to work there)."""

    async def handler(fut: asyncio.Future[int]) -> int:
        return await wait_for(fut, 5) + 1

    async def main() -> int:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        coro = handler(fut)
        started: asyncio.Future[object] = loop.create_future()

        def from_a_callback() -> None:  # like data_received: no current task
            assert asyncio.current_task() is None
            try:
                started.set_result(coro.send(None))
            except BaseException as exc:
                started.set_exception(exc)

        loop.call_soon(from_a_callback)
        await started
        fut.set_result(41)
        await asyncio.sleep(0)
        try:
            coro.send(None)
        except StopIteration as stop:
            return int(stop.value)
        raise AssertionError("the handler should have finished")

    assert asyncio.run(main()) == 42
