"""A broker on this test's event loop (for tests that look at its internals while clients talk to it)."""

from __future__ import annotations

import asyncio

from odradek.broker.app import Broker
from odradek.broker.replica import Partition
from odradek.testing import running_broker

__all__ = ["hosted", "running_broker"]


async def hosted(broker: Broker, topic: str, partition: int = 0) -> Partition:
    """The partition once the broker hosts it (it applies a created topic's image soon after)."""
    for _ in range(500):
        p = broker.replicas.get(topic, partition)
        if p is not None:
            return p
        await asyncio.sleep(0.01)
    raise AssertionError(f"{topic}-{partition} is never hosted")
