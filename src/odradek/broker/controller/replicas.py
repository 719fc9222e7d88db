"""The controller's replica state changes (Kafka's ReplicaStateMachine): replicas Online when
their broker is alive, Offline when it leaves (and out of the ISR of partitions that keep their
leader), out of the ISR of a broker shutting down, and deleted when a reassignment drops them.
Each state change goes through :mod:`odradek.cluster.controller`'s transition table; ISR changes
are written to ZooKeeper with a new leader epoch."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from odradek.broker.controller.channel import ControllerChannels
from odradek.broker.controller.zkview import ZkView
from odradek.cluster.controller import ControllerContext, LeaderIsr

__all__ = ["ReplicaStates"]

log = logging.getLogger(__name__)

NO_LEADER = -1
TP = tuple[str, int]


class ReplicaStates:
    """The replicas of the partitions of the context ``ctx``; ISR changes written through ``zk``."""

    def __init__(self, ctx: ControllerContext, zk: ZkView, channels: ControllerChannels) -> None:
        self.ctx = ctx
        self.zk = zk
        self.channels = channels

    def up(self, tps: Iterable[TP], brokers: set[int]) -> None:
        """The replicas of ``tps`` on ``brokers`` (started) are Online."""
        for tp in tps:
            for r in self.ctx.replicas(*tp):
                if r in brokers:
                    self.ctx.replica_up(tp, r)

    def down(self, tps: Iterable[TP], brokers: set[int]) -> None:
        """The replicas of ``tps`` on ``brokers`` (gone) are Offline."""
        for tp in tps:
            for r in self.ctx.replicas(*tp):
                if r in brokers:
                    self.ctx.replica_down(tp, r)

    async def remove_from_isr(self, tps: list[TP], dead: set[int]) -> list[TP]:
        """Replicas on ``dead`` brokers go Offline: out of the ISR of each partition in ``tps`` that
        has a live leader (a version-checked write with a new leader epoch); the partitions changed."""
        changed = []
        for tp in tps:

            def decide(cur: LeaderIsr | None) -> LeaderIsr | None:
                if cur is None or cur.leader == NO_LEADER or not self.ctx.is_live(cur.leader):
                    return None
                isr = tuple(r for r in cur.isr if r not in dead)
                if isr == cur.isr or not isr:
                    return None
                return LeaderIsr(cur.leader, cur.leader_epoch + 1, isr, self.ctx.epoch)

            if await self.zk.update_leader_isr(tp, decide) is not None:
                changed.append(tp)
                log.info("%s-%d: brokers %s out of the ISR, now %s", *tp, sorted(dead & set(self.ctx.replicas(*tp))),
                         list(self.ctx.states[tp].isr))
        return changed

    async def leave_isr(self, broker_id: int, tps: list[TP]) -> list[TP]:
        """Broker ``broker_id`` (shutting down) out of the ISR of ``tps``, where it follows; the
        partitions changed."""
        changed = []
        for tp in tps:

            def decide(cur: LeaderIsr | None) -> LeaderIsr | None:
                if cur is None or broker_id not in cur.isr or cur.leader in (broker_id, NO_LEADER):
                    return None
                return LeaderIsr(cur.leader, cur.leader_epoch + 1, tuple(r for r in cur.isr if r != broker_id), self.ctx.epoch)

            if await self.zk.update_leader_isr(tp, decide) is not None:
                changed.append(tp)
        return changed

    def delete(self, tp: TP, replicas: Iterable[int]) -> None:
        """``replicas`` of ``tp`` dropped (a reassignment's): deleted, StopReplica with delete to
        those alive (their brokers delete the log)."""
        for r in replicas:
            self.ctx.start_replica_deletion(tp, r)
            if self.ctx.is_live(r):
                self.channels.stop_replica(r, [tp], delete=True)
            self.ctx.replica_deleted(tp, r)
