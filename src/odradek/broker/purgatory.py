"""Delayed operations (Kafka's purgatory): a request that cannot be answered yet waits for a
condition on some partitions, or for its deadline, without a task of its own.

A :class:`Deferred` is what a plain-function handler returns to answer later: the server calls
:meth:`~Deferred.start` once, then exactly one of the ``done`` callback (from the deferred, never
from within ``start``) or :meth:`~Deferred.cancel` (the connection is gone).

A :class:`DelayedOperation` is the common long poll: one future, watched by every partition the
operation waits on (woken when data becomes visible, or for a follower on any append) and by a
timer; at each wake-up the operation tries to complete, and waits again for the rest of its time
when it cannot.  The fetch long poll is one (``handlers/fetch.py``); the ``acks=all`` produce
waits on the high watermark in :mod:`odradek.broker.replica`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from odradek._scheduler import LoopScheduler, Scheduler, TimerHandle

__all__ = ["Deferred", "DelayedOperation", "Watchable", "wait_all"]

Done = Callable[[Any, BaseException | None], None]


class Deferred:
    """A response a plain-function handler completes later, from callbacks: cheaper than a
    coroutine in a task for a wait that is mostly a future and a timer.  The server calls
    :meth:`start` once, then exactly one of: the ``done`` callback (from the deferred:
    ``done(response, None)`` or ``done(None, exception)``, never from within ``start``) or
    :meth:`cancel` (from the server: the connection is gone)."""

    __slots__ = ()

    def start(self, done: Done) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError


class Watchable(Protocol):
    """A partition a delayed operation waits on."""

    def watch(self, fut: asyncio.Future[None], follower: bool) -> None: ...

    def unwatch(self, fut: asyncio.Future[None], follower: bool) -> None: ...


class DelayedOperation(Deferred):
    """Waits until :meth:`try_complete` says it can answer, :meth:`max_wait_s` passed (on
    ``timers``, the broker's scheduler) or :meth:`stopping`; then answers :meth:`response`."""

    __slots__ = ("_deadline", "_done", "_timer", "_timers", "_waiter")

    def __init__(self, timers: Scheduler | None = None) -> None:
        self._done: Done | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: TimerHandle | None = None
        self._timers = timers or _LOOP
        self._deadline = 0.0  # ms of the scheduler's monotonic clock

    # -- what an operation says ----------------------------------------------------------------------
    def watched(self) -> Iterable[tuple[Watchable, bool]]:
        """The partitions to wait on, each with whether the wait is a follower's (any append wakes it)."""
        raise NotImplementedError

    def try_complete(self) -> bool:
        """Check again (after a wake-up): True when the operation can answer now."""
        raise NotImplementedError

    def response(self) -> Any:
        raise NotImplementedError

    def max_wait_s(self) -> float:
        raise NotImplementedError

    def stopping(self) -> bool:
        """The broker is stopping: answer at once with what there is."""
        return False

    # -- the wait --------------------------------------------------------------------------------------
    def start(self, done: Done) -> None:
        self._done = done
        loop = asyncio.get_running_loop()
        wait = self.max_wait_s() * 1000.0
        self._deadline = self._timers.clock.monotonic_ms() + wait
        if self.stopping():
            waiter: asyncio.Future[None] = loop.create_future()  # answer at once, not from start()
            waiter.add_done_callback(self._woken)
            waiter.set_result(None)
            self._waiter = waiter
            return
        self._arm(loop, wait)

    def _arm(self, loop: asyncio.AbstractEventLoop, remaining: float) -> None:
        waiter: asyncio.Future[None] = loop.create_future()
        for p, follower in self.watched():
            p.watch(waiter, follower)
        waiter.add_done_callback(self._woken)
        self._waiter = waiter
        self._timer = self._timers.call_later(remaining, _wake, waiter)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiter = self._waiter
        if waiter is not None:
            for p, follower in self.watched():
                p.unwatch(waiter, follower)

    def _woken(self, waiter: asyncio.Future[None]) -> None:
        done = self._done
        if done is None or waiter is not self._waiter:  # cancelled
            return
        self._disarm()
        try:
            if not self.try_complete():
                remaining = self._deadline - self._timers.clock.monotonic_ms()
                if remaining > 0 and not self.stopping():
                    self._arm(asyncio.get_running_loop(), remaining)
                    return
            response = self.response()
        except Exception as exc:
            self._done = None
            done(None, exc)
            return
        self._done = None
        done(response, None)

    def cancel(self) -> None:
        if self._done is None:
            return
        self._done = None
        self._disarm()
        if self._waiter is not None:
            self._waiter.remove_done_callback(self._woken)
            self._waiter.cancel()


async def wait_all(timers: Scheduler, futures: Iterable[asyncio.Future[Any]], timeout_ms: float) -> set[asyncio.Future[Any]]:
    """Wait until every one of ``futures`` is done or ``timeout_ms`` passed on ``timers`` (the
    ``acks=all`` produce's wait for the high watermark); returns those not done."""
    pending = {f for f in futures if not f.done()}
    if not pending:
        return set()
    expired: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    timer = timers.call_later(timeout_ms, _wake, expired)
    try:
        while pending and not expired.done():
            _done, pending = await asyncio.wait({*pending, expired}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(expired)
    finally:
        timer.cancel()
        if not expired.done():
            expired.cancel()
    return {f for f in pending if not f.done()}


#: the scheduler of operations given none (asyncio's timers on the system clock)
_LOOP = LoopScheduler()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
