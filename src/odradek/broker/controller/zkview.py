"""The controller's view of ZooKeeper: what it reads into its context (registered brokers, topic
assignments, partition states) and what it writes back (partition states, assignments), each
write a transaction fenced by the controller epoch (:class:`~.fenced.EpochFencedStore`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from odradek.broker.controller.fenced import EpochFencedStore
from odradek.cluster.controller import ControllerContext, LeaderIsr, TopicAssignment
from odradek.cluster.metadata import BrokerInfo
from odradek.coordination.zookeeper import BadVersionError, ZkStore, broker_from_json

__all__ = ["ZkView"]

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: a ZooKeeper watch: called once when the node changes
Watch = Callable[[], None]


class ZkView:
    """Reads ZooKeeper into ``ctx`` and ``brokers`` (the controller's, kept for its life: a new
    term resets them) and writes partition states and assignments back."""

    def __init__(self, store: ZkStore, ctx: ControllerContext, brokers: dict[int, BrokerInfo]) -> None:
        self.store = store
        self.fenced = EpochFencedStore(store)
        self.ctx = ctx
        self.brokers = brokers

    # -- reading ---------------------------------------------------------------------------------
    async def read_brokers(self, watch: Watch) -> tuple[set[int], set[int]]:
        """The registered brokers into the context; returns (added, removed), a broker that
        registered again (a new czxid: it restarted) in both."""
        ids = await self.store.children("/brokers/ids", watch)
        seen: dict[int, int] = {}
        for child in ids:
            data, stat = await self.store.get_or_none(f"/brokers/ids/{child}")
            if data is None:
                continue
            bid = int(child)
            seen[bid] = stat.czxid
            self.brokers[bid] = broker_from_json(bid, data, stat.czxid)
        old = self.ctx.live_brokers
        bounced = {b for b in seen if b in old and old[b] != seen[b]}
        added = (set(seen) - set(old)) | bounced
        removed = (set(old) - set(seen)) | bounced
        self.ctx.live_brokers = seen
        for b in set(self.brokers) - set(seen):
            del self.brokers[b]
        return added, removed

    async def read_topic(self, name: str, watch: Watch) -> TopicAssignment | None:
        """A topic's assignment and its partitions' states into the context (a topic id given
        to a topic created without one)."""
        data, stat = await self.store.get_or_none(f"/brokers/topics/{name}", watch)
        if data is None:
            self.ctx.topics.pop(name, None)
            return None
        ta = TopicAssignment.from_json(data, str(uuid.uuid4()))
        if not data.get("topic_id"):
            await self.checked_set(f"/brokers/topics/{name}", ta.to_json(), stat.version)
        self.ctx.topics[name] = ta
        for p in ta.replicas:
            await self.read_state((name, p))
        return ta

    async def read_state(self, tp: TP) -> LeaderIsr | None:
        data, stat = await self.store.get_or_none(f"/brokers/topics/{tp[0]}/partitions/{tp[1]}/state")
        if data is None:
            self.ctx.states.pop(tp, None)
            return None
        li = LeaderIsr.from_json(data, stat.version)
        self.ctx.states[tp] = li
        return li

    # -- writes, fenced by the controller epoch ----------------------------------------------------
    async def checked_set(self, path: str, value: Any, version: int) -> int:
        """Set ``path`` (JSON ``value``) if still at ``version``; returns the new version."""
        return await self.fenced.checked_set(self.ctx.epoch_zk_version, path, value, version)

    async def write_state(self, tp: TP, li: LeaderIsr) -> LeaderIsr:
        """Write a partition's state (create or version-checked update); returns it with its new
        znode version.  A BadVersionError means someone (a leader changing its ISR) wrote first."""
        path = f"/brokers/topics/{tp[0]}/partitions/{tp[1]}/state"
        old = self.ctx.states.get(tp)
        li = LeaderIsr(li.leader, li.leader_epoch, li.isr, self.ctx.epoch, 0)
        if old is None:
            parent = f"/brokers/topics/{tp[0]}/partitions/{tp[1]}"
            await self.store.ensure_path(parent)
            await self.fenced.create(self.ctx.epoch_zk_version, path, li.to_json())
            new = LeaderIsr(li.leader, li.leader_epoch, li.isr, li.controller_epoch, 0)
        else:
            version = await self.checked_set(path, li.to_json(), old.zk_version)
            new = LeaderIsr(li.leader, li.leader_epoch, li.isr, li.controller_epoch, version)
        self.ctx.states[tp] = new
        return new

    async def update_leader_isr(self, tp: TP, decide: Callable[[LeaderIsr | None], LeaderIsr | None]) -> LeaderIsr | None:
        """Read-decide-write with retries on concurrent ISR changes by the leader: ``decide``
        gets the state known and returns the one to write (None: nothing to write)."""
        for _ in range(5):
            current = self.ctx.states.get(tp)
            new = decide(current)
            if new is None:
                return None
            try:
                return await self.write_state(tp, new)
            except BadVersionError:
                await self.read_state(tp)
        log.warning("could not update the state of %s-%d: concurrent changes", *tp)
        return None

    async def write_assignment(self, topic: str) -> None:
        """The context's assignment of ``topic`` (replicas, adding, removing) to its znode."""
        path = f"/brokers/topics/{topic}"
        _, stat = await self.store.get(path)
        await self.checked_set(path, self.ctx.topics[topic].to_json(), stat.version)
