"""What the producer knows of its topics (Kafka's ProducerMetadata): each topic's partition count
and the partitions that have a leader, for the partitioner, from the cluster's metadata; and the
wait, up to ``max.block.ms``, for a topic ``send()`` has not seen yet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

from odradek._timeouts import wait_for
from odradek.client.errors import worse_error
from odradek.errors import ErrorCode, KafkaError
from odradek.transport import AsyncCluster

__all__ = ["TopicMetadata"]

T = TypeVar("T")


class _SenderState(Protocol):
    """Whether the sender stopped for good (a metadata wait then ends with its error)."""

    @property
    def fatal(self) -> BaseException | None: ...

    @property
    def stopped(self) -> asyncio.Event | None: ...


class TopicMetadata:
    """Partition counts of the producer's topics, from ``cluster``; ``max_block`` and
    ``retry_backoff`` in seconds."""

    def __init__(self, cluster: AsyncCluster, *, max_block: float, retry_backoff: float) -> None:
        self.cluster = cluster
        self.max_block = max_block
        self.retry_backoff = retry_backoff
        #: topic -> (partition count, the partitions with a leader)
        self.counts: dict[str, tuple[int, list[int]]] = {}
        #: the sender, once there is one (see _SenderState)
        self.sender: _SenderState | None = None

    def update_counts(self, topic: str) -> None:
        """Partition count and partitions with a leader, from the cluster's metadata."""
        info = self.cluster.topics.get(topic)
        if info is None or not info.partitions:
            return
        count = max(info.partitions) + 1
        available = sorted(p for p, pi in info.partitions.items() if pi.leader >= 0)
        self.counts[topic] = (count, available)

    def update_all_counts(self) -> None:
        """Every known topic's counts again (after a metadata refresh)."""
        for topic in list(self.counts):
            self.update_counts(topic)

    def _fatal(self) -> BaseException | None:
        return None if self.sender is None else self.sender.fatal

    async def wait_for_topic(self, topic: str) -> None:
        """Wait up to ``max.block.ms`` for ``topic``'s metadata (whatever the connection errors
        on the way), then record its partitions for the partitioner."""
        deadline = time.monotonic() + self.max_block
        last: BaseException | None = None
        while True:
            fatal = self._fatal()
            if fatal is not None:  # the sender stopped (e.g. InitProducerId refused): no use waiting
                raise fatal
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"topic {topic} not present in metadata after {self.max_block * 1000:.0f} ms"
                    + (f" ({last})" if last is not None else ""),
                )
            try:
                await self._unless_stopped(self.cluster.topic(topic, wait_ms=int(left * 1000)), left)
                self.update_counts(topic)
                return
            except (ConnectionError, TimeoutError, KafkaError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                last = worse_error(last, exc)
            await asyncio.sleep(min(self.retry_backoff, max(0.0, deadline - time.monotonic())))

    async def _unless_stopped(self, coro: Awaitable[T], timeout: float) -> T:
        """``coro``'s result within ``timeout``; the sender's fatal error if it stops first."""
        stopped = None if self.sender is None else self.sender.stopped
        if stopped is None:
            return await wait_for(coro, timeout)
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(stopped.wait())
        try:
            done, _ = await asyncio.wait({task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task in done:
            return task.result()
        task.cancel()
        fatal = self._fatal()
        if fatal is not None:
            raise fatal
        raise TimeoutError
