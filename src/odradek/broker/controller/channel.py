"""The controller's connection to each broker: requests sent in order over one channel per
broker (Kafka's RequestSendThread; a :class:`~odradek.transport.Channel`, the broker's
:class:`~odradek.broker.channel.BrokerChannel` in a running broker), each retried until it is
answered or the broker leaves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.errors import ErrorCode
from odradek.protocol import Message
from odradek.transport import Channel

__all__ = ["BrokerQueue"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Send:
    message: Message
    version: int
    future: asyncio.Future[Any] | None


class BrokerQueue:
    """Requests to one broker, sent in order and retried until answered or the broker leaves."""

    def __init__(
        self, channel_factory: Callable[..., Channel], broker_id: int, host: str, port: int, *,
        client_id: str, timeout: float,
    ) -> None:
        self.broker_id = broker_id
        self.channel = channel_factory(host, port, client_id=client_id, timeout=timeout)
        self.queue: asyncio.Queue[_Send] = asyncio.Queue()
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"controller-send-{broker_id}")

    def send(self, message: Message, version: int, future: asyncio.Future[Any] | None = None) -> None:
        self.queue.put_nowait(_Send(message, version, future))

    async def _run(self) -> None:
        while not self.closed:
            item = await self.queue.get()
            try:
                await self._deliver(item)
            finally:
                if item.future is not None and not item.future.done():
                    item.future.cancel()  # the queue closed before an answer came

    async def _deliver(self, item: _Send) -> None:
        while not self.closed:
            try:
                resp = await self.channel.request(item.message, item.version)
                if item.future is not None and not item.future.done():
                    item.future.set_result(resp)
                err = getattr(resp, "error_code", 0)
                if err:
                    log.warning("broker %d answered %s with %s", self.broker_id, type(item.message).__name__,
                                ErrorCode(err).name)
                return
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.debug("controller request to broker %d failed: %s; retrying", self.broker_id, exc)
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        # the flag ends the retry loop even if a cancellation were lost (see odradek._timeouts)
        self.closed = True
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item.future is not None and not item.future.done():
                item.future.cancel()
        await self.channel.close()
