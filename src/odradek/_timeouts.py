"""``wait_for`` that never loses a cancellation.

Python 3.11's :func:`asyncio.wait_for` swallows a cancellation that arrives in the same loop
iteration as the awaited future's result or exception (CPython gh-86296, fixed in 3.12, where
``wait_for`` is built on :func:`asyncio.timeout` as here): the caller sees the result, or the
future's exception, instead of CancelledError.  A task cancelled that way goes on running, and
whoever awaits it after ``cancel()`` waits forever.  The controller hung exactly so when a
broker's connection broke while the controller was closing its request queue to that broker.
Every asyncio layer of Odradek uses this function instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["wait_for"]

T = TypeVar("T")


async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
    """Await ``aw`` for at most ``timeout`` seconds (None: no limit); raises TimeoutError.

    As :func:`asyncio.wait_for`: a coroutine runs as a task of its own, and on a timeout, or a
    cancellation of the caller, the awaited future is cancelled.  Unlike it, a cancellation of
    the caller always propagates as CancelledError.  Not built on :func:`asyncio.timeout`, which
    needs a current task: the broker drives a handler's coroutine by hand until it first waits.
    """
    if timeout is None:
        return await aw
    loop = asyncio.get_running_loop()
    fut = asyncio.ensure_future(aw, loop=loop)
    if fut.done():
        return fut.result()
    expired = False

    def expire() -> None:
        nonlocal expired
        if not fut.done():
            expired = True
            fut.cancel()

    handle = loop.call_later(max(timeout, 0.0), expire)
    try:
        return await fut
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if expired and (task is None or not task.cancelling()):
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()
