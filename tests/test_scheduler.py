"""The scheduler the broker's timed rules wait on: the fake one runs what falls due in order, at
its deadline, and what a woken task schedules within the same advance; the loop one waits real
time."""

from __future__ import annotations

import asyncio

import pytest

from odradek._clock import FakeClock
from odradek._scheduler import FakeScheduler, LoopScheduler


def test_tick_runs_what_falls_due_in_order_at_each_deadline() -> None:
    time = FakeScheduler(FakeClock(now_ms=1_000_000))
    seen: list[tuple[str, int, int]] = []

    def note(name: str) -> None:
        seen.append((name, time.clock.monotonic_ms(), time.clock.now_ms()))

    time.call_later(30, note, "c")
    time.call_later(10, note, "a")
    time.call_at(10, note, "b")  # same deadline: in the order scheduled
    dropped = time.call_later(20, note, "dropped")
    dropped.cancel()
    time.call_later(41, note, "later")
    assert time.pending() == 4
    assert time.next_due() == 10
    assert time.tick(40) == 3
    assert seen == [("a", 10, 1_000_010), ("b", 10, 1_000_010), ("c", 30, 1_000_030)]
    assert time.clock.monotonic_ms() == 40 and time.clock.now_ms() == 1_000_040
    assert time.tick(1) == 1
    assert seen[-1] == ("later", 41, 1_000_041)
    assert time.pending() == 0 and time.next_due() is None
    with pytest.raises(ValueError):
        time.tick(-1)


def test_advance_runs_timers_that_woken_tasks_set_within_the_same_advance() -> None:
    async def scenario() -> None:
        time = FakeScheduler()
        woke: list[int] = []

        async def periodic() -> None:
            while True:
                await time.sleep(100)
                woke.append(time.clock.monotonic_ms())

        task = asyncio.get_running_loop().create_task(periodic())
        assert await time.advance(99) == 0
        assert woke == []
        assert await time.advance(251) == 3  # 100, 200 and 300: each sleep set after the last woke
        assert woke == [100, 200, 300]
        assert time.clock.monotonic_ms() == 350
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert time.pending() == 0  # the cancelled sleep's timer is dropped

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_wait_for_times_out_on_fake_time_and_passes_results_through() -> None:
    async def scenario() -> None:
        time = FakeScheduler()
        never: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(time.wait_for(never, 500))
        await time.advance(499)
        assert not waiting.done()
        await time.advance(1)
        with pytest.raises(TimeoutError):
            await waiting
        assert never.cancelled()

        soon: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(time.wait_for(soon, 500))
        await time.advance(10)
        soon.set_result(7)
        assert await waiting == 7
        assert time.pending() == 0
        assert await time.wait_for(asyncio.sleep(0, 3), None) == 3

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_deadline_already_passed_runs_on_the_next_loop_round_without_an_advance() -> None:
    async def scenario() -> None:
        time = FakeScheduler()
        ran: list[str] = []
        time.call_later(0, ran.append, "now")
        time.call_at(-5, ran.append, "past")
        await asyncio.sleep(0)
        assert ran == ["now", "past"]
        await time.sleep(0)  # returns at once
        assert time.clock.monotonic_ms() == 0

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_loop_scheduler_waits_real_time_on_its_clock() -> None:
    async def scenario() -> None:
        time = LoopScheduler()
        assert time.wall_recheck_ms == 1000
        fired = asyncio.Event()
        start = time.clock.monotonic_ms()
        time.call_at(start + 20, fired.set)
        await asyncio.wait_for(fired.wait(), 10)
        assert time.clock.monotonic_ms() >= start + 20
        handle = time.call_later(10_000, fired.clear)
        handle.cancel()
        await time.sleep(1)
        with pytest.raises(TimeoutError):
            await time.wait_for(asyncio.Event().wait(), 5)
        assert FakeScheduler.wall_recheck_ms is None

    asyncio.run(asyncio.wait_for(scenario(), 30))
