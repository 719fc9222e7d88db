"""The controller's event queue (Kafka's ControllerEventManager): events are handled one at a
time, in order, so the controller's view never changes under a handler that is waiting for
ZooKeeper or a broker.

ZooKeeper watches, timers and requests (ElectLeaders, reassignments, controlled shutdown) put
events; :meth:`EventQueue.call` runs one and returns its result to the caller.  An event that
finds the controller epoch moved on (:class:`~odradek.broker.controller.fenced.ControllerMoved`)
makes the controller resign; a failed event that re-arms a ZooKeeper watch is retried a second
later, or the change it watches would go unnoticed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from odradek.broker.controller.fenced import ControllerMoved

__all__ = ["Event", "EventQueue"]

log = logging.getLogger("odradek.broker.controller")

Event = Callable[[], Awaitable[None]]


class EventQueue:
    def __init__(self, on_moved: Callable[[], Awaitable[None]], rearming: Collection[str]) -> None:
        """``on_moved`` runs after an event found another controller; events named in
        ``rearming`` are retried after a failure."""
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._on_moved = on_moved
        self._rearming = frozenset(rearming)
        self.closed = False

    def put(self, event: Event) -> None:
        if not self.closed:
            self._queue.put_nowait(event)

    def watch(self, event: Event) -> Callable[[], None]:
        """A ZooKeeper watch that queues ``event`` (watches fire once; handlers re-arm them)."""
        return lambda: self.put(event)

    def empty(self) -> bool:
        return self._queue.empty()

    def close(self) -> None:
        """No more events are taken (the controller stops)."""
        self.closed = True

    async def call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``fn`` as an event and return its result."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def event() -> None:
            try:
                fut.set_result(await fn())
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(exc)
                if isinstance(exc, ControllerMoved):
                    raise

        self.put(event)
        return await fut

    async def run(self) -> None:
        """Handle events until cancelled."""
        while True:
            event = await self._queue.get()
            try:
                await event()
            except asyncio.CancelledError:
                raise
            except ControllerMoved:
                log.warning("controller epoch moved on: resigning")
                await self._on_moved()
            except Exception:
                name = getattr(event, "__name__", "")
                log.exception("controller event %s failed", name or event)
                if name in self._rearming:
                    # these events re-arm ZooKeeper watches: retry, or changes would go unnoticed
                    asyncio.get_running_loop().call_later(1.0, self.put, event)
