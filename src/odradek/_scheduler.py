"""Timers on an injectable clock: "call me after T" and "sleep until T".

The broker's rules that depend on time (the purgatory's deadlines, flush and retention timers,
the coordinators' session and transaction timers, quota mutes, the refusal log's windows, the
delay before a failed authentication is answered) wait through a :class:`Scheduler` rather than
on the event loop's clock, and read the time from its :attr:`~Scheduler.clock`.  In production
that is :class:`LoopScheduler`: asyncio's timers on the system clock.  In tests it is
:class:`FakeScheduler`: time stands still until the test moves it with
:meth:`FakeScheduler.advance`, which runs everything that falls due, in order, letting the event
loop run what each wakes before the next — so a test of a one-hour expiry takes no time, and
gives the same answer on a loaded machine as on an idle one.

Times are milliseconds, as :class:`~odradek._clock.Clock` gives them.  Waits for I/O (a
connection's request timeout, a retry's backoff) are not rules and stay on the loop's real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from odradek._clock import Clock, FakeClock, SystemClock
from odradek._timeouts import wait_for

__all__ = ["FakeScheduler", "LoopScheduler", "Scheduler", "TimerHandle"]

T = TypeVar("T")


class TimerHandle(Protocol):
    """A scheduled call, which :meth:`cancel` drops (a no-op once it ran)."""

    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Where the broker's timed rules wait (see the module's documentation)."""

    @property
    def clock(self) -> Clock:
        """The clock the deadlines are on."""
        ...

    #: the longest a wait for a wall-clock deadline may go before it looks at the wall clock again
    #: (it may jump); None: it never jumps (a fake clock)
    wall_recheck_ms: int | None

    def call_later(self, delay_ms: float, fn: Callable[..., object], *args: Any) -> TimerHandle:
        """Call ``fn(*args)`` on the event loop once ``delay_ms`` of the monotonic clock passed."""
        ...

    def call_at(self, monotonic_ms: float, fn: Callable[..., object], *args: Any) -> TimerHandle:
        """Call ``fn(*args)`` on the event loop once the monotonic clock reaches ``monotonic_ms``."""
        ...

    async def sleep(self, delay_ms: float) -> None:
        """Return once ``delay_ms`` of the monotonic clock passed."""
        ...

    async def wait_for(self, aw: Awaitable[T], timeout_ms: float | None) -> T:
        """Await ``aw`` for at most ``timeout_ms`` (None: no limit); TimeoutError after it, as
        :func:`odradek._timeouts.wait_for`."""
        ...


class LoopScheduler:
    """The production scheduler: asyncio's timers, on the system clock (or the given one, for
    tests that fake the time read but not the waits)."""

    wall_recheck_ms: int | None = 1000

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()

    @property
    def clock(self) -> Clock:
        return self._clock

    def call_later(self, delay_ms: float, fn: Callable[..., object], *args: Any) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, delay_ms) / 1000.0, fn, *args)

    def call_at(self, monotonic_ms: float, fn: Callable[..., object], *args: Any) -> TimerHandle:
        return self.call_later(monotonic_ms - self._clock.monotonic_ms(), fn, *args)

    async def sleep(self, delay_ms: float) -> None:
        await asyncio.sleep(max(0.0, delay_ms) / 1000.0)

    async def wait_for(self, aw: Awaitable[T], timeout_ms: float | None) -> T:
        return await wait_for(aw, None if timeout_ms is None else timeout_ms / 1000.0)


class _FakeTimer:
    __slots__ = ("args", "cancelled", "due", "fn")

    def __init__(self, due: int, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.due = due
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeScheduler:
    """A scheduler on a :class:`~odradek._clock.FakeClock`: nothing falls due until the test
    moves the time.

    :meth:`advance` moves the clock forward to each pending deadline in turn, runs what is due
    there (in deadline order, then in the order it was scheduled), and lets the event loop run
    the callbacks and tasks that woke before going on, so that a timer set by a task woken on
    the way fires too if it falls within the advance.  Work on threads (a flush on the I/O
    executor) is not waited for: poll for its result.  :meth:`tick` does the same without an
    event loop (for code that only schedules callbacks).

    A broker on fake time, in a test::

        from odradek.testing import FakeScheduler, running_broker

        async def test_an_idle_producer_id_expires(tmp_path):
            fake = FakeScheduler()
            overrides = {"producer.id.expiration.ms": 60_000}
            async with running_broker(tmp_path, overrides=overrides, timers=fake) as broker:
                ...  # produce with an idempotent producer
                await fake.advance(61_000)  # the expiry timer runs, on fake time
                ...  # the producer id is gone

    Time read by the broker's rules (``broker.clock``) is this scheduler's :attr:`clock`; the
    wall clock (record timestamps, retention) and the monotonic clock move together.
    """

    wall_recheck_ms: int | None = None

    def __init__(self, clock: FakeClock | None = None) -> None:
        self._clock = clock if clock is not None else FakeClock()
        self._heap: list[tuple[int, int, _FakeTimer]] = []
        self._seq = itertools.count()

    @property
    def clock(self) -> FakeClock:
        """The fake clock the deadlines are on (advance the scheduler, not the clock, to run timers)."""
        return self._clock

    # -- scheduling ------------------------------------------------------------------------------
    def call_later(self, delay_ms: float, fn: Callable[..., object], *args: Any) -> TimerHandle:
        """Call ``fn(*args)`` once the test has advanced ``delay_ms`` of fake time; returns a handle with
        ``cancel()``."""
        return self.call_at(self._clock.monotonic_ms() + max(0.0, delay_ms), fn, *args)

    def call_at(self, monotonic_ms: float, fn: Callable[..., object], *args: Any) -> TimerHandle:
        """Call ``fn(*args)`` once the fake monotonic clock reaches ``monotonic_ms`` (rounded up to a whole
        ms; at once, on the loop's next round, if already due)."""
        # a deadline between two milliseconds falls due at the later one, as a real timer would
        due = -int(-monotonic_ms // 1)
        if due <= self._clock.monotonic_ms():
            try:  # due already: on the loop's next round, as asyncio's call_later(0) would
                return asyncio.get_running_loop().call_soon(fn, *args)
            except RuntimeError:
                pass  # no loop: the next tick() runs it
        timer = _FakeTimer(due, fn, args)
        heapq.heappush(self._heap, (due, next(self._seq), timer))
        return timer

    async def sleep(self, delay_ms: float) -> None:
        """Return once the test has advanced ``delay_ms`` of fake time (at the loop's next round for 0 or
        less)."""
        if delay_ms <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(delay_ms, _set_result, fut)
        try:
            await fut
        finally:
            timer.cancel()

    async def wait_for(self, aw: Awaitable[T], timeout_ms: float | None) -> T:
        """Await ``aw`` for at most ``timeout_ms`` of fake time (None: no limit): TimeoutError, ``aw``
        cancelled, when the test advances past it."""
        if timeout_ms is None:
            return await aw
        fut = asyncio.ensure_future(aw)
        if fut.done():
            return fut.result()
        expired = False

        def expire() -> None:
            nonlocal expired
            if not fut.done():
                expired = True
                fut.cancel()

        timer = self.call_later(timeout_ms, expire)
        try:
            return await fut
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if expired and (task is None or not task.cancelling()):
                raise TimeoutError from None
            raise
        finally:
            timer.cancel()

    # -- moving the time -------------------------------------------------------------------------
    def pending(self) -> int:
        """How many calls are scheduled and not cancelled."""
        return sum(1 for _, _, t in self._heap if not t.cancelled)

    def next_due(self) -> int | None:
        """The monotonic ms of the earliest scheduled call (None: nothing is scheduled)."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    def tick(self, ms: int = 0) -> int:
        """Move the clock ``ms`` forward, running every call that falls due on the way (in order,
        the clock at each one's deadline), without yielding to an event loop; returns how many
        ran."""
        target = self._moved_to(ms)
        ran = 0
        while self._due_by(target):
            ran += self._run_next()
        self._clock.advance(target - self._clock.monotonic_ms())
        return ran

    async def advance(self, ms: int = 0) -> int:
        """Move the clock ``ms`` forward, running every call that falls due on the way, in order,
        each at its deadline, and after each deadline the callbacks and tasks it woke (as long as
        the event loop has ready work; threads are not waited for); returns how many calls ran.
        ``advance(0)`` runs what is due now."""
        target = self._moved_to(ms)
        await _settle()
        ran = 0
        while self._due_by(target):
            ran += self._run_next()
            await _settle()
        self._clock.advance(target - self._clock.monotonic_ms())
        await _settle()
        return ran

    def _moved_to(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("time does not go backwards")
        return self._clock.monotonic_ms() + ms

    def _due_by(self, target: int) -> bool:
        self._drop_cancelled()
        return bool(self._heap) and self._heap[0][0] <= target

    def _run_next(self) -> int:
        """Move the clock to the earliest deadline and run every call due at it; how many ran."""
        due = self._heap[0][0]
        if due > self._clock.monotonic_ms():
            self._clock.advance(due - self._clock.monotonic_ms())
        batch = []
        while self._heap and self._heap[0][0] <= due:
            batch.append(heapq.heappop(self._heap)[2])
        ran = 0
        for timer in batch:  # what these schedule for the same instant runs in the next round
            if timer.cancelled:
                continue
            timer.cancelled = True  # it ran: a later cancel() is a no-op
            timer.fn(*timer.args)
            ran += 1
        return ran

    def _drop_cancelled(self) -> None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)


def _set_result(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


#: the most loop iterations :meth:`FakeScheduler.advance` lets run after a timer fires
_SETTLE_ROUNDS = 1000


async def _settle() -> None:
    """Let the event loop run what is ready (woken tasks, their callbacks) until nothing is,
    within a bound: a task that yields forever does not hang the test."""
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)  # CPython's base event loop; others get fixed rounds
    for _ in range(_SETTLE_ROUNDS if ready is not None else 50):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return
