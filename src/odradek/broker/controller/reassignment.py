"""Partition reassignment by the controller (KIP-455, as Kafka's controller runs it): a target
replica set asked for by AlterPartitionReassignments or ``/admin/reassign_partitions`` is reached
in two steps, each written to ZooKeeper first: the union of the old and new replicas (the new
ones start fetching), then, once the new replicas are in the ISR, leadership within the target
and the removed replicas stopped and deleted.  The pending targets live in
``/admin/reassign_partitions``, so a new controller resumes them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from odradek.broker.controller.channel import ControllerChannels
from odradek.broker.controller.replicas import ReplicaStates
from odradek.broker.controller.zkview import ZkView
from odradek.cluster.controller import (
    ControllerContext,
    LeaderIsr,
    reassignment_election,
    reassignment_plan,
)
from odradek.coordination.zookeeper import BadVersionError
from odradek.errors import ErrorCode, KafkaError

__all__ = ["Reassignments"]

log = logging.getLogger(__name__)

TP = tuple[str, int]


class Reassignments:
    """The reassignments in progress (``ctx.reassigning``: partition -> target replicas)."""

    def __init__(
        self, ctx: ControllerContext, zk: ZkView, channels: ControllerChannels, replicas: ReplicaStates,
        is_active: Callable[[], bool],
    ) -> None:
        """``is_active``: whether this broker is still the controller (a step that finds it no
        longer is does nothing)."""
        self.ctx = ctx
        self.zk = zk
        self.store = zk.store
        self.channels = channels
        self.replicas = replicas
        self.is_active = is_active

    def requested(self, data: Mapping[str, Any]) -> None:
        """Targets written to ``/admin/reassign_partitions`` (by an admin tool), for partitions
        that exist and are not being reassigned already."""
        for item in data.get("partitions", []):
            tp = (str(item["topic"]), int(item["partition"]))
            target = tuple(int(r) for r in item["replicas"])
            if tp in set(self.ctx.partitions()) and tp not in self.ctx.reassigning:
                self.ctx.reassigning[tp] = target

    async def alter(
        self, changes: dict[TP, tuple[int, ...] | None], allow_replication_factor_change: bool = True
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """The AlterPartitionReassignments API: a new target per partition (None: cancel, back
        to the original replicas); the result per partition.  Without
        ``allow_replication_factor_change`` (v1, KIP-860) a target with another number of
        replicas than the partition's original ones is refused with INVALID_REPLICATION_FACTOR."""
        results: dict[TP, tuple[ErrorCode, str | None]] = {}
        for tp, target in changes.items():
            if tp not in set(self.ctx.partitions()):
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            if target is None:
                if tp not in self.ctx.reassigning:
                    results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
                    continue
                # cancel: go back to the original replicas
                ta = self.ctx.topics[tp[0]]
                original = tuple(r for r in ta.replicas[tp[1]] if r not in ta.adding.get(tp[1], ()))
                self.ctx.reassigning[tp] = original
                results[tp] = (ErrorCode.NONE, None)
                continue
            problem = self._invalid(tp, target)
            if problem is not None:
                results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
                continue
            if not allow_replication_factor_change:
                ta = self.ctx.topics[tp[0]]
                rf = len([r for r in ta.replicas[tp[1]] if r not in ta.adding.get(tp[1], ())])
                if len(target) != rf:
                    results[tp] = (
                        ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"The replication factor would change from {rf} to {len(target)}, "
                        "but allowReplicationFactorChange is false",
                    )
                    continue
            self.ctx.reassigning[tp] = tuple(target)
            results[tp] = (ErrorCode.NONE, None)
        await self._save()
        await self.resume()
        return results

    def _invalid(self, tp: TP, target: tuple[int, ...]) -> str | None:
        """Why a target replica list is refused (Kafka's controller's checks, in its order), or
        None: empty, a duplicate, a negative id, or a replica to add on a broker that is not alive
        (the replicas it keeps may be down: a reassignment off a dead broker must be possible)."""
        if not target:
            return "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
        if any(r < 0 for r in target):
            return f"Invalid broker id in replica list: {list(target)}"
        ta = self.ctx.topics[tp[0]]
        current = ta.replicas[tp[1]]
        original = tuple(r for r in current if r not in ta.adding.get(tp[1], ()))
        adding = [r for r in target if r not in original]
        dead = [r for r in adding if r not in self.ctx.live_brokers]
        if dead:
            return (
                f"Replica assignment has brokers that are not alive. Replica list: {adding}, "
                f"live broker list: {sorted(self.ctx.live_brokers)}"
            )
        return None

    async def _save(self) -> None:
        items = [
            {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(self.ctx.reassigning.items())
        ]
        if items:
            await self.store.upsert("/admin/reassign_partitions", {"version": 1, "partitions": items})
        else:
            await self.store.delete("/admin/reassign_partitions")

    def describe(self, tps: Iterable[TP] | None) -> dict[TP, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """The ListPartitionReassignments API: (replicas, adding, removing) per partition being
        reassigned (of ``tps``; None: all)."""
        wanted = None if tps is None else set(tps)
        out = {}
        for tp in self.ctx.reassigning:
            if wanted is not None and tp not in wanted:
                continue
            ta = self.ctx.topics.get(tp[0])
            if ta is None:
                continue
            out[tp] = (ta.replicas[tp[1]], ta.adding.get(tp[1], ()), ta.removing.get(tp[1], ()))
        return out

    async def resume(self) -> None:
        """Advance every reassignment (also after a controller failover: the pending targets are
        in ``/admin/reassign_partitions``, the union and adding/removing in the topic znode)."""
        if not self.is_active():
            return
        if not self.ctx.reassigning:
            data, _ = await self.store.get_or_none("/admin/reassign_partitions")
            for item in (data or {}).get("partitions", []):
                tp = (str(item["topic"]), int(item["partition"]))
                if tp in set(self.ctx.partitions()):
                    self.ctx.reassigning[tp] = tuple(int(r) for r in item["replicas"])
        done = []
        for tp, target in list(self.ctx.reassigning.items()):
            try:
                if await self._step(tp, target):
                    done.append(tp)
            except (KafkaError, BadVersionError) as exc:
                log.warning("reassignment of %s-%d: %s", *tp, exc)
        if done:
            for tp in done:
                self.ctx.reassigning.pop(tp, None)
            await self._save()

    async def _step(self, tp: TP, target: tuple[int, ...]) -> bool:
        """Take the reassignment of ``tp`` as far as it can go now; True when it is complete."""
        ta = self.ctx.topics[tp[0]]
        current = ta.replicas[tp[1]]
        original = tuple(r for r in current if r not in ta.adding.get(tp[1], ()))
        li = self.ctx.states.get(tp)
        if li is None:
            return False
        if current == target and not ta.adding.get(tp[1]) and not ta.removing.get(tp[1]):
            return True
        plan = reassignment_plan(original, target, li.isr)
        if current != plan.union:
            # step 1: the union of old and new replicas, a new leader epoch; new replicas start
            # fetching.  Replicas of an earlier target that this one drops (a cancel, or a new
            # target while moving) leave the ISR and are stopped and deleted, as Kafka's
            # controller does with a reassignment's unneeded replicas.
            unneeded = tuple(r for r in current if r not in plan.union)
            live = [b for b in self.ctx.live_brokers if b not in self.ctx.shutting_down]

            def widen(cur: LeaderIsr | None) -> LeaderIsr | None:
                if cur is None:
                    return None
                isr = tuple(r for r in cur.isr if r not in unneeded) or cur.isr
                if cur.leader in unneeded:
                    e = reassignment_election(plan.union, isr, live)
                    if e is None:
                        return None
                    return LeaderIsr(e.leader, cur.leader_epoch + 1, e.isr, self.ctx.epoch)
                return LeaderIsr(cur.leader, cur.leader_epoch + 1, isr, self.ctx.epoch)

            ta.replicas[tp[1]] = plan.union
            ta.adding[tp[1]] = plan.adding
            ta.removing[tp[1]] = plan.removing
            await self.zk.write_assignment(tp[0])
            for r in plan.adding:
                self.ctx.replica_up(tp, r)
            await self.zk.update_leader_isr(tp, widen)
            self.channels.leader_and_isr([tp], None)
            # (a leader that could not be replaced is kept until a later step can move it)
            dropped = tuple(r for r in unneeded if r != self.ctx.states[tp].leader)
            if dropped:
                self.replicas.delete(tp, dropped)
            log.info("reassigning %s-%d: %s -> %s via %s%s", *tp, list(original), list(target), list(plan.union),
                     f" (replicas {list(dropped)} dropped)" if dropped else "")
            plan = reassignment_plan(original, target, self.ctx.states[tp].isr)
        if not plan.caught_up:
            return False  # an ISR change notification brings us back here
        # step 2: leadership into the target set, then drop the removed replicas
        live = [b for b in self.ctx.live_brokers if b not in self.ctx.shutting_down]
        removing = plan.removing

        def decide(cur: LeaderIsr | None) -> LeaderIsr | None:
            if cur is None:
                return None
            isr = tuple(r for r in cur.isr if r not in removing)
            if cur.leader in target and self.ctx.is_live(cur.leader):
                return LeaderIsr(cur.leader, cur.leader_epoch + 1, isr, self.ctx.epoch)
            e = reassignment_election(target, isr, live)
            if e is None:
                return None
            return LeaderIsr(e.leader, cur.leader_epoch + 1, e.isr, self.ctx.epoch)

        li2 = await self.zk.update_leader_isr(tp, decide)
        if li2 is None:
            return False
        ta.replicas[tp[1]] = tuple(target)
        ta.adding.pop(tp[1], None)
        ta.removing.pop(tp[1], None)
        await self.zk.write_assignment(tp[0])
        self.channels.leader_and_isr([tp], None)
        self.replicas.delete(tp, removing)
        log.info("reassignment of %s-%d to %s completed (leader %d)", *tp, list(target), li2.leader)
        return True
