"""The controller (the seeds' KafkaController), active on the broker that owns ``/controller``.

Every broker runs a :class:`Controller`; the one that creates the ephemeral ``/controller``
znode first is active: it increments ``/controller_epoch``, rebuilds its view of the cluster
from ZooKeeper and from then on processes events one at a time from a queue (Kafka's
ControllerEventManager): brokers joining and leaving, topics created, partitions added, topic
deletions, ISR change notifications, reassignments, preferred-replica elections, controlled
shutdowns and the periodic leader rebalance.  Its decisions come from ``odradek.cluster.controller``.

This module holds the controller's life (election, taking over, resigning) and its events; the
work is done by its collaborators, which share its context (:class:`ControllerContext`, reset on
each term): :class:`~.zkview.ZkView` reads and writes ZooKeeper, :class:`~.channel.ControllerChannels`
sends requests to brokers, :class:`~.partitions.PartitionStates` elects leaders,
:class:`~.replicas.ReplicaStates` moves replicas and ISRs, :class:`~.reassignment.Reassignments`
and :class:`~.deletion.TopicDeletion` carry out reassignments and topic deletions.

Partition state writes are ZooKeeper transactions that also check ``/controller_epoch``'s
version, so a deposed controller cannot change anything; its requests to brokers carry the
controller epoch and the target's broker epoch, which brokers check (STALE_CONTROLLER_EPOCH,
STALE_BROKER_EPOCH).  Requests to each broker go through one queue per broker, in order, retried
until they are answered or the broker leaves (Kafka's RequestSendThread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from odradek._scheduler import LoopScheduler, Scheduler
from odradek.broker.channel import BrokerChannel
from odradek.broker.controller.channel import BrokerQueue, ControllerChannels
from odradek.broker.controller.deletion import TopicDeletion
from odradek.broker.controller.events import Event, EventQueue
from odradek.broker.controller.fenced import ControllerMoved
from odradek.broker.controller.partitions import PartitionStates
from odradek.broker.controller.reassignment import Reassignments
from odradek.broker.controller.replicas import ReplicaStates
from odradek.broker.controller.zkview import ZkView
from odradek.cluster.controller import (
    ControllerContext,
    PartitionStateName,
    TopicAssignment,
    controlled_shutdown_election,
    imbalanced_partitions,
)
from odradek.cluster.metadata import BrokerInfo
from odradek.coordination.zookeeper import (
    BadVersionError,
    NodeExistsError,
    ZooKeeperBackend,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics

if TYPE_CHECKING:
    from odradek.settings import Settings
    from odradek.storage import LogConfig

__all__ = ["Controller", "ControllerMoved"]

log = logging.getLogger(__name__)

PS = PartitionStateName
TP = tuple[str, int]


_REARMING = frozenset(
    {
        "_elect",
        "_controller_changed",
        "_session_renewed",
        "_brokers_changed",
        "_topics_changed",
        "_isr_changed",
        "_log_dir_event",
        "_delete_topics_changed",
        "_admin_node_changed",
    }
)


class Controller:
    def __init__(
        self,
        broker_id: int,
        settings: Settings,
        backend: ZooKeeperBackend,
        topic_config: Callable[[str], LogConfig],
        *,
        channel_factory: Callable[..., BrokerChannel] = BrokerChannel,
        timers: Scheduler | None = None,
    ) -> None:
        """``channel_factory(host, port, client_id=, timeout=)`` opens the connection a broker's
        requests go over (a :class:`~odradek.broker.channel.BrokerChannel`); ``settings``: the
        broker's (the controller's read-only ones: fixed at start-up); ``timers``: the broker's
        scheduler (the preferred-replica timer, and the clock of the times it writes)."""
        self.settings = settings.replication
        self.timers: Scheduler = timers or LoopScheduler()
        self.backend = backend
        self.store = backend.store
        self.inter_broker_listener = settings.socket.inter_broker_listener_name or None
        self.id = broker_id
        self._active = False
        #: the ZooKeeper session in which this broker won the election (see :attr:`active`)
        self._session = 0
        #: what the controller knows, shared with its collaborators: reset on each term
        self.ctx = ControllerContext()
        self.brokers: dict[int, BrokerInfo] = {}
        self.events = EventQueue(self._moved, _REARMING)
        self.controller_id = -1
        self._tasks: list[asyncio.Task[None]] = []
        self.zk = ZkView(self.store, self.ctx, self.brokers)
        self.channels = ControllerChannels(
            broker_id, self.ctx, self.brokers, listener=self.inter_broker_listener, channel_factory=channel_factory,
            timeout=self.settings.controller_socket_timeout_ms / 1000,
        )
        self.partitions = PartitionStates(self.ctx, self.zk, self.channels, topic_config)
        self.replicas = ReplicaStates(self.ctx, self.zk, self.channels)
        self.reassignments = Reassignments(self.ctx, self.zk, self.channels, self.replicas, lambda: self.active)
        self.deletion = TopicDeletion(self.store, self.ctx, self.channels)

    @property
    def active(self) -> bool:
        """This broker is the controller: it won the election in the ZooKeeper session it has now.

        When the session expires, kazoo fires every watch at once, so handlers can run before
        the resignation queued behind them; a controller acting then (with the new session) would,
        say, delete the ISR change notifications meant for its successor."""
        return self._active and self.store.session_id == self._session

    @property
    def metrics(self) -> BrokerMetrics | None:
        """The broker's metric counters (set by the broker; None: off)."""
        return self.partitions.metrics

    @metrics.setter
    def metrics(self, metrics: BrokerMetrics | None) -> None:
        self.partitions.metrics = metrics

    @property
    def queues(self) -> dict[int, BrokerQueue]:
        """The request queue to each live broker."""
        return self.channels.queues

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.events.run(), name="controller-events"))
        self._tasks.append(loop.create_task(self._rebalance_timer(), name="controller-rebalance"))
        self.put(self._elect)

    async def stop(self) -> None:
        self.events.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t
        await self._resign(delete_node=True)

    def put(self, event: Event) -> None:
        self.events.put(event)

    def _watch(self, event: Event) -> Callable[[], None]:
        return self.events.watch(event)

    async def on_new_session(self) -> None:
        """Our ZooKeeper session expired and a new one started: resign, then run for election."""
        self.put(self._session_renewed)

    async def _session_renewed(self) -> None:
        await self._resign(delete_node=False)
        await self._elect()

    async def _moved(self) -> None:
        await self._resign(delete_node=False)
        self.put(self._elect)

    async def call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``fn`` on the controller's event queue and return its result."""
        return await self.events.call(fn)

    # -- election -------------------------------------------------------------------------------
    async def _elect(self) -> None:
        data, _ = await self.store.get_or_none("/controller", self._watch(self._controller_changed))
        if data is not None:
            self.controller_id = int(data.get("brokerid", -1))
            if self.controller_id != self.id and self.active:
                await self._resign(delete_node=False)
            if self.controller_id == self.id and not self.active:
                # our own node, but we are not the controller (we resigned, or it is from our
                # previous session): delete it if this session owns it, so that an election can
                # happen; a node from an ended session goes when that session expires (its watch
                # brings us back).  (Deleting only when we "were" active left a resigned
                # controller spinning here with /controller standing: no controller at all.)
                _, stat = await self.store.get_or_none("/controller")
                if stat is not None and stat.ephemeralOwner == self.store.session_id:
                    with contextlib.suppress(Exception):
                        await self.store.delete("/controller", version=stat.version)
                    log.info("broker %d deleted its own /controller node: a new election", self.id)
            return
        session = self.store.session_id
        try:
            await self.store.create(
                "/controller",
                {"version": 1, "brokerid": self.id, "timestamp": str(self.timers.clock.now_ms())},
                ephemeral=True,
            )
        except NodeExistsError:
            data, _ = await self.store.get_or_none("/controller", self._watch(self._controller_changed))
            self.controller_id = int(data.get("brokerid", -1)) if data else -1
            return
        self.controller_id = self.id
        self._session = session
        await self.store.exists("/controller", self._watch(self._controller_changed))
        try:
            await self._become_controller()
        except ControllerMoved:
            raise
        except Exception:
            log.exception("controller start-up failed; resigning")
            await self._resign(delete_node=True)
            raise

    async def _controller_changed(self) -> None:
        await self._elect()

    async def _resign(self, *, delete_node: bool) -> None:
        was = self.active
        self._active = False
        await self.channels.close_all()
        self.ctx.reset()
        if delete_node and was:
            with contextlib.suppress(Exception):
                data, stat = await self.store.get_or_none("/controller")
                if data is not None and int(data.get("brokerid", -1)) == self.id and stat.ephemeralOwner == self.store.session_id:
                    await self.store.delete("/controller", version=stat.version)
        if was:
            log.info("broker %d resigned as controller", self.id)

    async def _become_controller(self) -> None:
        data, stat = await self.store.get_or_none("/controller_epoch")
        if data is None:
            try:
                await self.store.create("/controller_epoch", 1)
                epoch, version = 1, 0
            except NodeExistsError:
                raise ControllerMoved() from None
        else:
            epoch = int(data) + 1
            try:
                st = await self.store.set("/controller_epoch", epoch, stat.version)
            except BadVersionError:
                raise ControllerMoved() from None
            version = st.version
        ctx = self.ctx
        ctx.reset(epoch, version)
        log.info("broker %d is the controller (epoch %d)", self.id, epoch)
        for path in ("/admin/reassign_partitions", "/admin/preferred_replica_election"):
            await self.store.exists(path, self._watch(self._admin_node_changed))
        await self.zk.read_brokers(self._watch(self._brokers_changed))
        names = await self.store.children("/brokers/topics", self._watch(self._topics_changed))
        for name in names:
            await self._read_topic(name)
        self._active = True
        for bid in ctx.live_brokers:
            self.channels.open(bid)
        # state machines from what ZooKeeper holds
        for tp in list(ctx.partitions()):
            ctx.load_states(tp)
        self.channels.update_metadata(ctx.live_brokers)
        await self.partitions.online(list(ctx.partitions()))
        # Kafka's replica state machine start-up: replicas on dead brokers go Offline, which takes
        # them out of the ISR of partitions that still have a leader (a leader waiting for an
        # acks=all write to reach a dead follower would otherwise wait for its own lag timeout,
        # or for ever if its ISR change is lost in the failover)
        dead = {r for tp in ctx.partitions() for r in ctx.replicas(*tp) if not ctx.is_live(r)}
        if dead:
            shrunk = await self.replicas.remove_from_isr(list(ctx.partitions()), dead)
            if shrunk:
                log.info("controller start-up: brokers %s out of the ISR of %d partitions", sorted(dead), len(shrunk))
        self.channels.leader_and_isr(list(ctx.partitions()), None)
        await self._delete_topics_changed()
        await self.store.children("/isr_change_notification", self._watch(self._isr_changed))
        await self._isr_changed()
        await self._log_dir_event()
        await self.reassignments.resume()
        await self._admin_node_changed()

    async def _read_topic(self, name: str) -> TopicAssignment | None:
        return await self.zk.read_topic(name, self._watch(lambda: self._topic_changed(name)))

    # -- events ------------------------------------------------------------------------------------
    async def _brokers_changed(self) -> None:
        if not self.active:
            await self.store.children("/brokers/ids", self._watch(self._brokers_changed))
            return
        added, removed = await self.zk.read_brokers(self._watch(self._brokers_changed))
        if removed:
            await self._on_brokers_failed(removed, still_live=added)
        if added:
            await self._on_brokers_started(added)

    async def _on_brokers_failed(self, dead: set[int], still_live: set[int]) -> None:
        log.info("brokers %s left the cluster", sorted(dead))
        for b in dead:
            if b not in still_live:
                await self.channels.close(b)
            self.ctx.shutting_down.discard(b)
        tps = [tp for tp in self.ctx.partitions() if any(r in dead for r in self.ctx.replicas(*tp))]
        self.replicas.down(tps, dead - still_live)
        led = [tp for tp in tps if (st := self.ctx.states.get(tp)) is not None and st.leader in dead]
        for tp in led:
            if self.ctx.partition_state(tp) is PS.ONLINE:
                self.ctx.set_partition_state(tp, PS.OFFLINE)
        changed = set(await self.partitions.online(led))
        # dead followers leave the ISR of partitions that still have a leader (a new leader epoch)
        changed |= set(await self.replicas.remove_from_isr([tp for tp in tps if tp not in changed], dead - still_live))
        if changed:
            self.channels.leader_and_isr(sorted(changed), None)
        else:
            self.channels.update_metadata(self.ctx.live_brokers)

    async def _on_brokers_started(self, new: set[int]) -> None:
        log.info("brokers %s joined the cluster", sorted(new))
        for lost in self.ctx.offline_replicas.values():  # a restarted broker recovered its dirs
            lost -= new
        for b in new:
            self.channels.open(b)
        self.channels.update_metadata(self.ctx.live_brokers)
        hosted = [tp for tp in self.ctx.partitions() if any(r in new for r in self.ctx.replicas(*tp))]
        self.replicas.up(hosted, new)
        # the returning replicas learn their role first (they truncate, then fetch)
        self.channels.leader_and_isr(hosted, new)
        offline = [tp for tp in self.ctx.offline_partitions()]
        changed = await self.partitions.online(offline)
        if changed:
            self.channels.leader_and_isr(changed, None)
        await self.reassignments.resume()

    async def _topics_changed(self) -> None:
        names = set(await self.store.children("/brokers/topics", self._watch(self._topics_changed)))
        if not self.active:
            return
        new = sorted(names - set(self.ctx.topics))
        gone = set(self.ctx.topics) - names
        for name in gone:
            self.ctx.topics.pop(name, None)
        created: list[TP] = []
        for name in new:
            ta = await self._read_topic(name)
            if ta is not None:
                created += [(name, p) for p in sorted(ta.replicas) if (name, p) not in self.ctx.states]
        await self.partitions.create(created)
        if gone:
            self.channels.update_metadata(self.ctx.live_brokers)

    async def _topic_changed(self, name: str) -> None:
        """Partitions added to a topic (its assignment znode changed)."""
        if not self.active:
            return
        before = set(self.ctx.topics[name].replicas) if name in self.ctx.topics else set()
        ta = await self._read_topic(name)
        if ta is None:
            return
        added = [(name, p) for p in sorted(set(ta.replicas) - before) if (name, p) not in self.ctx.states]
        if added:
            await self.partitions.create(added)

    async def _delete_topics_changed(self) -> None:
        names = await self.store.children("/admin/delete_topics", self._watch(self._delete_topics_changed))
        if not self.active:
            return
        for name in names:
            await self.deletion.delete(name)

    async def _isr_changed(self) -> None:
        children = await self.store.children("/isr_change_notification", self._watch(self._isr_changed))
        if not self.active:
            return
        tps: set[TP] = set()
        for child in children:
            path = f"/isr_change_notification/{child}"
            data, _ = await self.store.get_or_none(path)
            if not self.active:  # the session expired meanwhile: the notifications are our successor's
                return
            for item in (data or {}).get("partitions", []):
                tps.add((str(item["topic"]), int(item["partition"])))
            await self.store.delete(path)
        if not tps:
            return
        for tp in tps:
            if tp[0] in self.ctx.topics:
                await self.zk.read_state(tp)
        # a leader took a follower back into the ISR just before that broker died, and this
        # notification came after the broker's death was handled: out of the ISR again, or
        # acks=all writes would wait replica.lag.time.max.ms for it
        dead = {r for tp in tps if (st := self.ctx.states.get(tp)) is not None for r in st.isr if not self.ctx.is_live(r)}
        changed = await self.replicas.remove_from_isr(sorted(tps), dead) if dead else []
        if changed:
            self.channels.leader_and_isr(changed, None)
        else:
            self.channels.update_metadata(self.ctx.live_brokers)
        if any(tp in self.ctx.reassigning for tp in tps):
            await self.reassignments.resume()

    async def _log_dir_event(self) -> None:
        """A broker's log dir went offline (``/log_dir_event_notification``): ask that broker, with
        a LeaderAndIsr for its partitions, which replicas it lost (KAFKA_STORAGE_ERROR), then
        treat those as Kafka does its offline replicas: leaderships elsewhere, out of ISRs."""
        children = await self.store.children("/log_dir_event_notification", self._watch(self._log_dir_event))
        if not self.active:
            return
        brokers: set[int] = set()
        for child in children:
            path = f"/log_dir_event_notification/{child}"
            data, _ = await self.store.get_or_none(path)
            if not self.active:
                return
            b = (data or {}).get("broker") if isinstance(data, dict) else None
            if isinstance(b, int):
                brokers.add(b)
            with contextlib.suppress(Exception):
                await self.store.delete(path)
        for b in sorted(brokers):
            if not self.ctx.is_live(b):
                continue  # gone: its replicas went offline with it
            tps = self.ctx.partitions_on(b)
            answer = self.channels.ask_leader_and_isr(b, tps)
            await asyncio.wait({answer}, timeout=30.0)
            if not answer.done() or answer.cancelled():
                answer.cancel()
                log.warning("broker %d did not say which replicas its failed log dir held", b)
                continue
            lost = self._storage_errors(answer.result())
            if lost:
                await self._on_replicas_lost(b, sorted(lost))

    def _storage_errors(self, resp: Any) -> set[TP]:
        """The partitions a LeaderAndIsr answer reports KAFKA_STORAGE_ERROR for."""
        if resp is None:
            return set()
        names = {t.topic_id: name for name, t in self.ctx.topics.items()}
        out: set[TP] = set()
        for e in getattr(resp, "partition_errors", None) or []:
            if e.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                out.add((e.topic_name, e.partition_index))
        for t in getattr(resp, "topics", None) or []:
            name = names.get(str(t.topic_id))
            for e in t.partition_errors:
                if name is not None and e.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                    out.add((name, e.partition_index))
        return out

    async def _on_replicas_lost(self, broker_id: int, tps: list[TP]) -> None:
        log.warning("broker %d lost %d replicas with a failed log dir: %s", broker_id, len(tps),
                    ", ".join(f"{t}-{p}" for t, p in tps[:10]) + (" ..." if len(tps) > 10 else ""))
        for tp in tps:
            self.ctx.offline_replicas.setdefault(tp, set()).add(broker_id)
        self.replicas.down(tps, {broker_id})
        led = [tp for tp in tps if (st := self.ctx.states.get(tp)) is not None and st.leader == broker_id]
        for tp in led:
            if self.ctx.partition_state(tp) is PS.ONLINE:
                self.ctx.set_partition_state(tp, PS.OFFLINE)
        changed = set(await self.partitions.online(led))
        changed |= set(await self.replicas.remove_from_isr([tp for tp in tps if tp not in changed], {broker_id}))
        if changed:
            self.channels.leader_and_isr(sorted(changed), None)
        else:
            self.channels.update_metadata(self.ctx.live_brokers)

    async def _admin_node_changed(self) -> None:
        if not self.active:
            return
        data, _ = await self.store.get_or_none("/admin/preferred_replica_election", self._watch(self._admin_node_changed))
        if data is not None:
            tps = [(str(i["topic"]), int(i["partition"])) for i in data.get("partitions", [])]
            await self.partitions.elect_preferred(tps)
            await self.store.delete("/admin/preferred_replica_election")
        data, _ = await self.store.get_or_none("/admin/reassign_partitions", self._watch(self._admin_node_changed))
        if data is not None:
            self.reassignments.requested(data)
            await self.reassignments.resume()

    # -- controlled shutdown --------------------------------------------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]:
        """Move leadership off ``broker_id`` and take it out of ISRs; returns partitions it still
        leads (the broker retries until that list is empty or its retries run out)."""
        self._check_active()
        if broker_id not in self.ctx.live_brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        if broker_epoch >= 0 and broker_epoch < self.ctx.live_brokers[broker_id]:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, f"broker epoch {broker_epoch} is stale")
        self.ctx.shutting_down.add(broker_id)
        log.info("controlled shutdown of broker %d", broker_id)
        live = list(self.ctx.live_brokers)
        hosted = [tp for tp in self.ctx.partitions_on(broker_id) if len(self.ctx.replicas(*tp)) > 1]
        led = [tp for tp in hosted if (st := self.ctx.states.get(tp)) is not None and st.leader == broker_id]
        await self.partitions.elect(
            led, lambda tp, cur: controlled_shutdown_election(self.ctx.replicas(*tp), cur.isr, live, self.ctx.shutting_down)
        )
        changed = await self.replicas.leave_isr(broker_id, [tp for tp in hosted if tp not in led])
        if changed:
            self.channels.leader_and_isr(changed, None)
        return [tp for tp in hosted if (st := self.ctx.states.get(tp)) is not None and st.leader == broker_id]

    # -- preferred replicas ------------------------------------------------------------------------
    async def _rebalance_timer(self) -> None:
        settings = self.settings
        interval = max(1.0, float(settings.leader_imbalance_check_interval_seconds))
        while True:
            await self.timers.sleep(interval * 1000.0)
            if self.active and settings.auto_leader_rebalance_enable:
                self.put(self._auto_rebalance)

    async def _auto_rebalance(self) -> None:
        if not self.active:
            return
        pct = self.settings.leader_imbalance_per_broker_percentage
        tps = imbalanced_partitions(self.ctx, pct)
        if tps:
            log.info("preferred replica election for %d imbalanced partitions", len(tps))
            await self.elect_preferred(tps)

    # -- the APIs the broker's handlers call (through :meth:`call`) ---------------------------------
    def _check_active(self) -> None:
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")

    async def elect_preferred(self, tps: list[TP]) -> dict[TP, ErrorCode]:
        return await self.partitions.elect_preferred(tps)

    async def elect_leaders(self, election_type: int, tps: list[TP] | None) -> dict[TP, ErrorCode]:
        """The ElectLeaders API: 0 = preferred, 1 = unclean (only for partitions without a leader)."""
        self._check_active()
        return await self.partitions.elect_leaders(election_type, tps)

    async def alter_reassignments(
        self, changes: dict[TP, tuple[int, ...] | None], allow_replication_factor_change: bool = True
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        self._check_active()
        return await self.reassignments.alter(changes, allow_replication_factor_change)

    def list_reassignments(self, tps: list[TP] | None) -> dict[TP, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        self._check_active()
        return self.reassignments.describe(tps)
