"""A progress line for long CLI work, printed on a terminal only (quiet in pipes and scripts)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``update(text)`` prints ``"<what>: <text()>"`` on ``stream`` (stderr) at most once per
    ``interval`` seconds, the first time one ``interval`` after the start.  ``enabled=None``:
    only when ``stream`` is a terminal.  ``text`` is called only when a line is due."""

    def __init__(
        self, what: str, *, stream: TextIO | None = None, interval: float = 2.0, enabled: bool | None = None
    ) -> None:
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval = interval
        self._next = time.monotonic() + interval
        self.lines = 0

    def update(self, text: Callable[[], str]) -> None:
        """Print ``text()`` as a progress line on ``stream`` when the interval has passed since the
        last one (nothing when progress is off)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        self.lines += 1
        print(f"{self.what}: {text()}", file=self.stream, flush=True)
