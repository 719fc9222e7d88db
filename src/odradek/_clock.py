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
    """A clock that moves only when told to (tests)."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms
        self._mono = 0

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        self._now += ms
        self._mono += ms
