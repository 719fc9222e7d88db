"""Injectable time: the layers below the broker never read the wall clock themselves."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (timestamps, retention)."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds of a monotonic clock (timeouts, intervals)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to (tests): the wall clock starts at ``now_ms``, the
    monotonic one at 0, and :meth:`advance` moves both.  For the code that takes a clock and
    schedules nothing (storage, the cluster rules)::

        from odradek.storage import Log, LogConfig
        from odradek.testing import FakeClock

        clock = FakeClock()
        log = Log(tmp_path / "t-0", LogConfig.from_dict({"segment.ms": 60_000}), clock=clock)
        log.append(batch)
        clock.advance(60_001)
        assert log.maybe_roll_for_time()  # the active segment is over a minute old: a new one

    A broker's timers wait on a scheduler: give it a :class:`odradek.testing.FakeScheduler`
    (which holds a FakeClock and runs the timers that fall due as it advances).
    """

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms
        self._mono = 0

    def now_ms(self) -> int:
        """The fake wall clock in ms since the epoch (``now_ms`` given, plus every advance)."""
        return self._now

    def monotonic_ms(self) -> int:
        """The fake monotonic clock in ms: 0 at creation, plus every advance."""
        return self._mono

    def advance(self, ms: int) -> None:
        """Move both clocks forward by ``ms``; runs nothing (a :class:`FakeScheduler` runs its timers)."""
        self._now += ms
        self._mono += ms
