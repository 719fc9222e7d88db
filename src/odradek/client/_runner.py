"""How every blocking client face runs its asyncio twin: an event loop in a daemon thread.

``Producer``, ``Consumer``, ``SimpleConsumer`` and ``Admin`` each own one :class:`LoopThread`;
their methods hand the async client's coroutines to it and wait for the result.  Stopping runs
what is still on the loop to its end (or cancels it) and closes the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")

#: a coroutine the loop runs until it returns, told ``ready()`` once it has set itself up
Main = Callable[[Callable[[], None]], Coroutine[Any, Any, None]]


class LoopThread:
    """An asyncio event loop on its own daemon thread: what the blocking clients run their asyncio twin on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    def start(self, main: Main | None = None) -> None:
        """Run the loop in its thread, forever or until ``main(ready)`` returns; returns once the
        loop runs (with ``main``: once it called ``ready()``, or ended)."""
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                if main is None:
                    self.loop.call_soon(started.set)
                    self.loop.run_forever()
                else:
                    self.loop.run_until_complete(main(started.set))
            finally:
                started.set()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        started.wait()

    @property
    def alive(self) -> bool:
        """Whether the loop's thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def is_current(self) -> bool:
        """Whether the caller runs on the loop's thread (a callback: it must not block on the loop)."""
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop from any thread; its future.  RuntimeError once the loop is closed."""
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError(f"{self.name}: the event loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait (up to ``timeout`` s) for its result, raising what it raised."""
        return self.submit(coro).result(timeout)

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` on the loop's thread soon (thread-safe)."""
        self.loop.call_soon_threadsafe(fn)

    def cancel_all(self) -> None:
        """Cancel every task on the loop (what would otherwise keep a stopping loop running)."""
        self.loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(self.loop)])

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread to end; whether it did."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.alive

    def stop(self, timeout: float = 10) -> None:
        """Stop a loop that runs forever, wait for its thread, and close it once the thread ended."""
        if not self.loop.is_closed() and self.alive:
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.close_when_ended(timeout)

    def close_when_ended(self, timeout: float) -> None:
        """Close the loop if its thread ends within ``timeout`` s (a loop still running is left open)."""
        if self.join(timeout) and not self.loop.is_closed():
            self.loop.close()
