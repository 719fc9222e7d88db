"""A broker on this test's event loop (for tests that look at its internals while clients talk to it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from odradek.broker.app import Broker
from odradek.broker.replica import Partition
from odradek.config import BrokerConfig


@contextlib.asynccontextmanager
async def running_broker(*log_dirs: Path, overrides: dict[str, object] | None = None) -> AsyncIterator[Broker]:
    """A started broker on 127.0.0.1 with an ephemeral port and these log dirs (and ``overrides``
    of its settings); stopped on exit."""
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": ",".join(map(str, log_dirs)), **(overrides or {})}
    config = BrokerConfig.load(None, [], settings, env={})
    broker = Broker(config)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def hosted(broker: Broker, topic: str, partition: int = 0) -> Partition:
    """The partition once the broker hosts it (it applies a created topic's image soon after)."""
    for _ in range(500):
        p = broker.replicas.get(topic, partition)
        if p is not None:
            return p
        await asyncio.sleep(0.01)
    raise AssertionError(f"{topic}-{partition} is never hosted")
