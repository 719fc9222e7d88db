"""The controller's partition state changes (Kafka's PartitionStateMachine): partitions brought
online by electing leaders (new ones, and those whose leader left), and the elections asked for
(preferred replica, unclean, controlled shutdown).  Each decision comes from
:mod:`odradek.cluster.controller`'s rules, each state change goes through its transition
table, each new leader and ISR is written to ZooKeeper before the replicas are told."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from odradek.broker.controller.channel import ControllerChannels
from odradek.broker.controller.zkview import ZkView
from odradek.cluster.controller import (
    ControllerContext,
    Election,
    LeaderIsr,
    PartitionStateName,
    offline_election,
    preferred_election,
)
from odradek.errors import ErrorCode
from odradek.metrics import BrokerMetrics

if TYPE_CHECKING:
    from odradek.storage import LogConfig

__all__ = ["PartitionStates"]

log = logging.getLogger(__name__)

NO_LEADER = -1
PS = PartitionStateName
TP = tuple[str, int]
#: an election's rule: the leader and ISR for a partition and its current state (None: none eligible)
Elect = Callable[[TP, LeaderIsr], Election | None]


class PartitionStates:
    """Leaders for the partitions of the context ``ctx``: elected, written through ``zk``,
    announced through ``channels``."""

    def __init__(
        self, ctx: ControllerContext, zk: ZkView, channels: ControllerChannels,
        topic_config: Callable[[str], LogConfig],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.channels = channels
        self.topic_config = topic_config
        #: the broker's metric counters (None: off)
        self.metrics: BrokerMetrics | None = None

    def _unclean_allowed(self, topic: str) -> bool:
        return bool(self.topic_config(topic).unclean_leader_election_enable)

    async def create(self, tps: list[TP]) -> None:
        """Partitions just created: New, then Online with a leader; their replicas told."""
        for tp in tps:
            self.ctx.new_partition(tp)
        changed = await self.online(tps)
        if changed:
            self.channels.leader_and_isr(changed, None, is_new=True)

    async def online(self, tps: list[TP]) -> list[TP]:
        """Move New/Offline partitions to Online by electing leaders; returns those changed."""
        changed = []
        existing = set(self.ctx.partitions())
        for tp in tps:
            if tp[0] in self.ctx.deleting or tp not in existing:
                continue
            state = self.ctx.partition_state(tp)
            replicas = self.ctx.replicas(*tp)
            if state is PS.NON_EXISTENT:
                self.ctx.set_partition_state(tp, PS.NEW)
                state = PS.NEW
            if state is PS.NEW and tp not in self.ctx.states:
                live = [r for r in replicas if self.ctx.is_live(r)]
                if not live:
                    continue
                li = await self.zk.write_state(tp, LeaderIsr(live[0], 0, tuple(live), self.ctx.epoch))
                self.ctx.set_partition_state(tp, PS.ONLINE)
                for r in replicas:
                    self.ctx.replica_up(tp, r) if self.ctx.is_live(r) else self.ctx.replica_down(tp, r)
                changed.append(tp)
                log.info("new partition %s-%d: leader %d, ISR %s", *tp, li.leader, list(li.isr))
                continue
            known = self.ctx.states.get(tp)
            if known is not None and known.leader >= 0 and self.ctx.replica_usable(tp, known.leader) and known.leader not in self.ctx.shutting_down:
                if state is not PS.ONLINE:
                    self.ctx.set_partition_state(tp, PS.ONLINE)
                continue
            unclean = self._unclean_allowed(tp[0])
            used_unclean = False

            def decide(
                cur: LeaderIsr | None, replicas: tuple[int, ...] = replicas, unclean: bool = unclean, tp: TP = tp
            ) -> LeaderIsr | None:
                nonlocal used_unclean
                if cur is None:
                    return None
                if cur.leader >= 0 and self.ctx.replica_usable(tp, cur.leader) and cur.leader not in self.ctx.shutting_down:
                    return None
                live = self.ctx.eligible(tp)
                e = offline_election(replicas, cur.isr, live, unclean=unclean)
                if e is None:
                    # nobody eligible: no leader; the ISR keeps its last member for a clean election
                    if cur.leader == NO_LEADER:
                        return None
                    keep = tuple(r for r in cur.isr if self.ctx.replica_usable(tp, r)) or cur.isr[-1:]
                    return LeaderIsr(NO_LEADER, cur.leader_epoch + 1, keep, self.ctx.epoch)
                used_unclean = e.unclean
                return LeaderIsr(e.leader, cur.leader_epoch + 1, e.isr, self.ctx.epoch)

            t0 = time.perf_counter()
            elected = await self.zk.update_leader_isr(tp, decide)
            if elected is not None and elected.leader != NO_LEADER:
                self._count_election(t0, used_unclean)
            if elected is None:
                if state is not PS.OFFLINE:
                    self.ctx.set_partition_state(tp, PS.OFFLINE)
                continue
            li = elected
            if li.leader == NO_LEADER:
                self.ctx.set_partition_state(tp, PS.OFFLINE)
                log.error("partition %s-%d is offline: no live in-sync replica (ISR %s)", *tp, list(li.isr))
            else:
                self.ctx.set_partition_state(tp, PS.ONLINE)
                if used_unclean:
                    log.warning(
                        "unclean leader election for %s-%d: broker %d, not in the ISR, is the new leader; "
                        "records acknowledged by the old ISR may be lost", *tp, li.leader,
                    )
                else:
                    log.info("partition %s-%d: new leader %d (epoch %d), ISR %s", *tp, li.leader, li.leader_epoch, list(li.isr))
            changed.append(tp)
        return changed

    def _count_election(self, t0: float, unclean: bool) -> None:
        """A leader elected (metrics: elections, their time, unclean ones)."""
        m = self.metrics
        if m is not None:
            m.leader_elections += 1
            m.leader_election_time.observe((time.perf_counter() - t0) * 1000.0)
            if unclean:
                m.unclean_elections += 1

    async def elect(self, tps: list[TP], elect: Elect) -> dict[TP, ErrorCode]:
        """Run an election for each partition; write, then tell the replicas."""
        results: dict[TP, ErrorCode] = {}
        changed = []
        for tp in tps:
            if tp not in self.ctx.states:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            outcome: list[ErrorCode] = [ErrorCode.NONE]
            chosen: list[Election] = []

            def decide(
                cur: LeaderIsr | None, tp: TP = tp, outcome: list[ErrorCode] = outcome, chosen: list[Election] = chosen
            ) -> LeaderIsr | None:
                if cur is None:
                    outcome[0] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    return None
                e = elect(tp, cur)
                if e is None:
                    outcome[0] = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                    return None
                if e.leader == cur.leader and e.isr == cur.isr:
                    outcome[0] = ErrorCode.ELECTION_NOT_NEEDED
                    return None
                chosen[:] = [e]
                return LeaderIsr(e.leader, cur.leader_epoch + 1, e.isr, self.ctx.epoch)

            t0 = time.perf_counter()
            li = await self.zk.update_leader_isr(tp, decide)
            results[tp] = outcome[0]
            if li is not None:
                self._count_election(t0, bool(chosen and chosen[-1].unclean))
                changed.append(tp)
                self.ctx.partition_led(tp, li.leader)
        if changed:
            self.channels.leader_and_isr(changed, None)
        return results

    async def elect_preferred(self, tps: list[TP]) -> dict[TP, ErrorCode]:
        """Each partition's preferred replica (its first) as its leader, where it is alive and in
        the ISR."""
        results = await self.elect(
            tps, lambda tp, cur: preferred_election(self.ctx.replicas(*tp), cur.isr, self.ctx.eligible(tp))
        )
        for tp, code in results.items():
            if code == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE:
                results[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        return results

    async def elect_leaders(self, election_type: int, tps: list[TP] | None) -> dict[TP, ErrorCode]:
        """The ElectLeaders API: 0 = preferred, 1 = unclean (only for partitions without a leader)."""
        if tps is None:
            tps = [tp for tp in self.ctx.partitions() if tp[0] not in self.ctx.deleting]
        known = [tp for tp in tps if tp in self.ctx.states]
        results = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in tps if tp not in self.ctx.states}
        if election_type == 0:
            results.update(await self.elect_preferred(known))
            return results
        def unclean(tp: TP, cur: LeaderIsr) -> Election | None:
            if cur.leader >= 0 and self.ctx.replica_usable(tp, cur.leader):
                return Election(cur.leader, cur.isr)  # has a leader: not needed
            e = offline_election(self.ctx.replicas(*tp), cur.isr, self.ctx.eligible(tp), unclean=True)
            if e is not None and e.unclean:
                log.warning("unclean leader election for %s-%d requested: broker %d leads", *tp, e.leader)
            return e

        results.update(await self.elect(known, unclean))
        return results
