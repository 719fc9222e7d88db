"""Topic deletion by the controller (Kafka's TopicDeletionManager): a topic named under
``/admin/delete_topics`` has its replicas stopped and deleted on the live brokers, then its
znodes removed; replicas on brokers that are down delete their logs when they come back and find
the topic gone from the metadata."""

from __future__ import annotations

import asyncio
import logging

from odradek.broker.controller.channel import ControllerChannels
from odradek.cluster.controller import ControllerContext
from odradek.coordination.zookeeper import ZkStore

__all__ = ["TopicDeletion"]

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: how long a deletion waits for the live replicas' StopReplica answers, in seconds
STOP_REPLICA_WAIT = 10


class TopicDeletion:
    def __init__(self, store: ZkStore, ctx: ControllerContext, channels: ControllerChannels) -> None:
        self.store = store
        self.ctx = ctx
        self.channels = channels

    async def delete(self, name: str) -> None:
        """Delete topic ``name`` (asked for by ``/admin/delete_topics/<name>``, removed at the end)."""
        ta = self.ctx.topics.get(name)
        if ta is not None:
            self.ctx.deleting.add(name)
            tps = [(name, p) for p in ta.replicas]
            per_broker: dict[int, list[TP]] = {}
            for tp in tps:
                for r in ta.replicas[tp[1]]:
                    per_broker.setdefault(r, []).append(tp)
                    if self.ctx.is_live(r):
                        self.ctx.start_replica_deletion(tp, r)
            self.channels.update_metadata(self.ctx.live_brokers)
            waits = [self.channels.stop_replica(b, ps, delete=True) for b, ps in per_broker.items() if self.ctx.is_live(b)]
            if waits:
                await asyncio.wait(waits, timeout=STOP_REPLICA_WAIT)
            # replicas on brokers that are down delete their logs when they come back and find
            # the topic gone from the metadata
            await self.store.delete(f"/brokers/topics/{name}", recursive=True)
            await self.store.delete(f"/config/topics/{name}")
            for tp in tps:
                self.ctx.states.pop(tp, None)
                self.ctx.partition_deleted(tp, ta.replicas[tp[1]])
                self.ctx.reassigning.pop(tp, None)
            self.ctx.topics.pop(name, None)
            self.ctx.deleting.discard(name)
            log.info("deleted topic %s", name)
        await self.store.delete(f"/admin/delete_topics/{name}")
        self.channels.update_metadata(self.ctx.live_brokers)
