"""The controller's connection to each broker: requests sent in order over one channel per
broker (Kafka's RequestSendThread; a :class:`~odradek.transport.Channel`, the broker's
:class:`~odradek.broker.channel.BrokerChannel` in a running broker), each retried until it is
answered or the broker leaves; :class:`ControllerChannels` holds one per live broker and sends
them what :mod:`~odradek.broker.controller.requests` builds (Kafka's ControllerChannelManager)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.broker.controller.requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    leader_and_isr_requests,
    stop_replica_request,
    update_metadata_requests,
)
from odradek.cluster.controller import ControllerContext
from odradek.cluster.metadata import BrokerInfo
from odradek.errors import ErrorCode
from odradek.protocol import Message
from odradek.transport import Channel

__all__ = ["BrokerQueue", "ControllerChannels"]

TP = tuple[str, int]

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


class ControllerChannels:
    """A :class:`BrokerQueue` per live broker, and the controller's requests sent over them,
    built from ``ctx`` and ``brokers`` (the controller's) as they are when sent."""

    def __init__(
        self, controller_id: int, ctx: ControllerContext, brokers: dict[int, BrokerInfo], *,
        listener: str | None, channel_factory: Callable[..., Channel], timeout: float,
    ) -> None:
        """``listener``: the inter-broker listener's name (None: a broker's first endpoint);
        ``timeout``: of each request, in seconds (``controller.socket.timeout.ms``)."""
        self.controller_id = controller_id
        self.ctx = ctx
        self.brokers = brokers
        self.listener = listener
        self.channel_factory = channel_factory
        self.timeout = timeout
        self.queues: dict[int, BrokerQueue] = {}

    def open(self, bid: int) -> None:
        """A queue to broker ``bid`` (registered, with an endpoint), unless it has one."""
        info = self.brokers.get(bid)
        if info is None or bid in self.queues:
            return
        ep = info.endpoint(self.listener) or info.endpoint()
        if ep is None:
            return
        self.queues[bid] = BrokerQueue(
            self.channel_factory, bid, ep.host, ep.port, client_id=f"controller-{self.controller_id}",
            timeout=self.timeout,
        )

    async def close(self, bid: int) -> None:
        q = self.queues.pop(bid, None)
        if q is not None:
            await q.close()

    async def close_all(self) -> None:
        for q in self.queues.values():
            await q.close()
        self.queues.clear()

    def leader_and_isr(self, tps: Iterable[TP], targets: Iterable[int] | None, *, is_new: bool = False) -> None:
        """LeaderAndIsr for ``tps`` to their live replicas (or only to ``targets``), then
        UpdateMetadata to every live broker."""
        built = leader_and_isr_requests(
            self.controller_id, self.ctx, self.brokers, self.listener, tps, targets, is_new=is_new
        )
        for bid, req in built.items():
            q = self.queues.get(bid)
            if q is not None:
                q.send(req, LEADER_AND_ISR_VERSION)
        self.update_metadata(self.ctx.live_brokers)

    def ask_leader_and_isr(self, bid: int, tps: Iterable[TP]) -> asyncio.Future[Any]:
        """LeaderAndIsr for ``tps`` to broker ``bid`` alone; the future is its answer (cancelled
        when the queue closes first; done with None when there is no queue to it)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        q = self.queues.get(bid)
        req = leader_and_isr_requests(self.controller_id, self.ctx, self.brokers, self.listener, tps, [bid]).get(bid)
        if q is None or req is None:
            fut.set_result(None)
            return fut
        q.send(req, LEADER_AND_ISR_VERSION, fut)
        return fut

    def update_metadata(self, targets: Iterable[int]) -> None:
        """UpdateMetadata (every live broker and partition) to ``targets``."""
        for bid, req in update_metadata_requests(self.controller_id, self.ctx, self.brokers, targets).items():
            q = self.queues.get(bid)
            if q is not None:
                q.send(req, UPDATE_METADATA_VERSION)

    def stop_replica(self, bid: int, tps: Iterable[TP], *, delete: bool) -> asyncio.Future[Any]:
        """StopReplica for ``tps`` to broker ``bid``; the future is done when it answers (at once
        when there is no queue to it)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        q = self.queues.get(bid)
        if q is None:
            fut.set_result(None)
            return fut
        q.send(stop_replica_request(self.controller_id, self.ctx, bid, tps, delete=delete), STOP_REPLICA_VERSION, fut)
        return fut
