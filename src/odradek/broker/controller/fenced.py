"""The controller's writes to ZooKeeper, fenced by its epoch: each is a multi-op transaction
that also checks ``/controller_epoch``'s version, so a controller that another has replaced
changes nothing (:class:`ControllerMoved`); a node written meanwhile by someone else (a leader
changing its ISR) is a :class:`~kazoo.exceptions.BadVersionError` for the caller to re-read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.coordination.zookeeper import (
    BadVersionError,
    RolledBackError,
    RuntimeInconsistency,
    ZkStore,
    dumps,
)
from odradek.errors import OdradekError

__all__ = ["ControllerMoved", "EpochFencedStore"]


class ControllerMoved(OdradekError):
    """Another broker became controller: the ZooKeeper epoch check failed."""


class EpochFencedStore:
    def __init__(self, store: ZkStore) -> None:
        self.store = store

    async def txn(self, epoch_version: int, ops: Callable[[Any], None]) -> list[Any]:
        zk = self.store.zk

        def run() -> list[Any]:
            t = zk.transaction()
            t.check("/controller_epoch", epoch_version)
            ops(t)
            return list(t.commit())

        results = await self.store.run(run)
        # a failed multi-op fails every op: the one at fault carries its error (BadVersion, NoNode,
        # NodeExists), those before it RolledBackError, those after it RuntimeInconsistency.  Only
        # a failed epoch check means another controller; a partition state written meanwhile by its
        # leader (an ISR change) is a BadVersionError for the caller to re-read and retry.  (This
        # used to be read as "controller moved": the controller resigned in the middle of its
        # takeover and, its /controller znode still standing, no broker was controller any more.)
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMoved()
        for r in results[1:]:
            if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency)):
                raise r
        if isinstance(results[0], Exception) or any(isinstance(r, Exception) for r in results[1:]):
            raise BadVersionError()
        return results

    async def checked_set(self, epoch_version: int, path: str, value: Any, version: int) -> int:
        results = await self.txn(epoch_version, lambda t: t.set_data(path, dumps(value), version))
        return int(results[1].version)

    async def create(self, epoch_version: int, path: str, value: Any) -> None:
        await self.txn(epoch_version, lambda t: t.create(path, dumps(value)))
