"""Producer ids for InitProducerId: handed out one by one from blocks the metadata store grants.

A block is claimed from the store (ZooKeeper's ``/latest_producer_id_block``, or the embedded
store's ``producer-id-block`` file) before any of its ids is used, so no id is given twice, even
across restarts and brokers; the unused rest of a block is skipped after a restart, as in Kafka.
"""

from __future__ import annotations

import asyncio

from odradek.coordination import MetadataBackend

__all__ = ["ProducerIdManager"]


class ProducerIdManager:
    def __init__(self, backend: MetadataBackend) -> None:
        self._backend = backend
        self._next = 0
        self._limit = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._limit:
                self._next, self._limit = await self._backend.allocate_producer_ids()
            pid = self._next
            self._next += 1
            return pid
