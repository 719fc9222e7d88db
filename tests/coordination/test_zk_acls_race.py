"""A broker's own ACL change must not overwrite a newer one it has already applied.

Broker 3 writes its change to ``/kafka-acl/...``; before it applies the result locally, broker 1
writes a newer value and its notification reaches broker 3, which applies it.  Broker 3 then
holds the newer value: its own (older) write result must not replace it, since no notification
will come again to correct it.  The interleaving is forced on the in-process ZooKeeper; the
contract suite's concurrent ACL test met it by chance on Debian's ZooKeeper.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from odradek.cluster.metadata import BrokerInfo, Endpoint
from odradek.coordination import zookeeper
from odradek.coordination.inprocess import InProcessZooKeeper, register, unregister
from odradek.coordination.zookeeper import ZooKeeperBackend

RESOURCE = ("Topic", "LITERAL", "orders")
MINE = ("User:mine", "Allow", "Read", "*")
THEIRS = ("User:theirs", "Allow", "Read", "*")


async def _backend(connect: str, broker_id: int) -> ZooKeeperBackend:
    b = ZooKeeperBackend(connect, 6000)
    await b.connect(None)
    await b.start(BrokerInfo(broker_id, (Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9000 + broker_id),), None))
    return b


def test_a_newer_acl_applied_meanwhile_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = InProcessZooKeeper(f"acl-race-{uuid.uuid4().hex[:8]}")
    connect = register(tree)

    async def scenario() -> None:
        one, three = await _backend(connect, 1), await _backend(connect, 3)
        original = zookeeper.write_acls
        interleaved = False

        async def write_then_race(store: Any, resource: Any, change: Callable[..., Any], *a: Any) -> Any:
            nonlocal interleaved
            after = await original(store, resource, change, *a)
            if store is three.store and not interleaved:
                interleaved = True
                await one.alter_acls(RESOURCE, lambda cur: cur | {THEIRS})
                for _ in range(500):  # broker 3 applies broker 1's notification
                    if three.image.acls.get(RESOURCE) == frozenset({MINE, THEIRS}):
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError("broker 3 never applied broker 1's change")
            return after

        monkeypatch.setattr(zookeeper, "write_acls", write_then_race)
        try:
            await three.alter_acls(RESOURCE, lambda cur: cur | {MINE})
            assert interleaved
            assert three.image.acls.get(RESOURCE) == frozenset({MINE, THEIRS})
        finally:
            await one.stop()
            await three.stop()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        unregister(tree)
