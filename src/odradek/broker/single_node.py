"""The controller's admin answers on a single-node broker (no ZooKeeper).

The broker is the whole cluster and names itself the controller, so it answers ElectLeaders and
the reassignment APIs as Kafka's controller would on a one-broker cluster: every partition's
only replica already leads, so an election is never needed (or no leader can be found); a
reassignment to the partition's current replicas is done at once, one naming any other broker
is refused, and none is ever in progress.  It offers the same calls as the cluster
:class:`~odradek.broker.controller.Controller`, so the handlers do not ask which one they have.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from odradek.coordination import MetadataBackend
from odradek.errors import ErrorCode, KafkaError

__all__ = ["SingleNodeController"]

TP = tuple[str, int]
_T = TypeVar("_T")


class SingleNodeController:
    active = True

    def __init__(self, broker_id: int, backend: MetadataBackend) -> None:
        self.controller_id = broker_id
        self.backend = backend

    async def call(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        return await fn()

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "a single-node broker has no controlled shutdown")

    async def elect_leaders(self, election_type: int, tps: list[TP] | None) -> dict[TP, ErrorCode]:
        """Nothing to move: Kafka's per-partition answers."""
        image = self.backend.image
        if tps is None:
            tps = [(name, p) for name, info in image.topics.items() for p in info.partitions]
        results: dict[TP, ErrorCode] = {}
        for topic, p in tps:
            info = image.topics.get(topic)
            state = info.partitions.get(p) if info is not None else None
            if state is None:
                results[(topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif election_type == 0:
                preferred = state.replicas[0] if state.replicas else -1
                results[(topic, p)] = (
                    ErrorCode.ELECTION_NOT_NEEDED if state.leader == preferred else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                )
            else:
                results[(topic, p)] = (
                    ErrorCode.ELECTION_NOT_NEEDED if state.leader >= 0 else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                )
        return results

    async def alter_reassignments(
        self, changes: dict[TP, tuple[int, ...] | None], allow_replication_factor_change: bool = True
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """The only broker holds every replica (so no target changes a replication factor: one
        that names another broker is refused before)."""
        image = self.backend.image
        me = self.controller_id
        results: dict[TP, tuple[ErrorCode, str | None]] = {}
        for (topic, p), target in changes.items():
            info = image.topics.get(topic)
            state = info.partitions.get(p) if info is not None else None
            if state is None:
                results[(topic, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {topic}-{p} does not exist")
            elif target is None:
                results[(topic, p)] = (
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    f"no reassignment of {topic}-{p} is in progress to cancel",
                )
            elif tuple(target) == tuple(state.replicas):
                results[(topic, p)] = (ErrorCode.NONE, None)  # already there: done
            else:
                others = sorted({r for r in target if r != me})
                if not target or len(set(target)) != len(target):
                    why = f"invalid replica list {list(target)} for {topic}-{p}"
                elif others:
                    why = (
                        f"replica assignment {list(target)} for {topic}-{p} names brokers {others} that do not exist: "
                        f"this single-node broker (id {me}) is the only broker"
                    )
                else:
                    why = f"invalid replica list {list(target)} for {topic}-{p}"
                results[(topic, p)] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, why)
        return results

    def list_reassignments(self, tps: list[TP] | None) -> dict[TP, Any]:
        return {}  # nothing ever moves between brokers
