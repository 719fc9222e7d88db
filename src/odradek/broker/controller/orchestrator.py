"""The controller (the seeds' KafkaController), active on the broker that owns ``/controller``.

Every broker runs a :class:`Controller`; the one that creates the ephemeral ``/controller``
znode first is active: it increments ``/controller_epoch``, rebuilds its view of the cluster
from ZooKeeper and from then on processes events one at a time from a queue (Kafka's
ControllerEventManager): brokers joining and leaving, topics created, partitions added, topic
deletions, ISR change notifications, reassignments, preferred-replica elections, controlled
shutdowns and the periodic leader rebalance.  Its decisions come from ``odradek.cluster.controller``.

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
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from odradek._scheduler import LoopScheduler, Scheduler
from odradek.broker.channel import BrokerChannel
from odradek.broker.controller.channel import BrokerQueue
from odradek.broker.controller.events import Event, EventQueue
from odradek.broker.controller.fenced import ControllerMoved, EpochFencedStore
from odradek.broker.controller.requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    leader_and_isr_requests,
    stop_replica_request,
    update_metadata_requests,
)
from odradek.cluster.controller import (
    ControllerContext,
    Election,
    LeaderIsr,
    PartitionStateName,
    ReplicaStateName,
    TopicAssignment,
    controlled_shutdown_election,
    imbalanced_partitions,
    offline_election,
    preferred_election,
    reassignment_election,
    reassignment_plan,
)
from odradek.cluster.metadata import BrokerInfo, PartitionState
from odradek.coordination.zookeeper import (
    BadVersionError,
    NodeExistsError,
    ZooKeeperBackend,
    broker_from_json,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics

if TYPE_CHECKING:
    from odradek.config import BrokerConfig
    from odradek.storage import LogConfig

__all__ = ["Controller", "ControllerMoved"]

log = logging.getLogger(__name__)

NO_LEADER = -1
PS = PartitionStateName
RS = ReplicaStateName
TP = tuple[str, int]


_REARMING = frozenset(
    {
        "_elect",
        "_controller_changed",
        "_session_renewed",
        "_brokers_changed",
        "_topics_changed",
        "_isr_changed",
        "_delete_topics_changed",
        "_admin_node_changed",
    }
)


class Controller:
    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        backend: ZooKeeperBackend,
        topic_config: Callable[[str], LogConfig],
        *,
        channel_factory: Callable[..., BrokerChannel] = BrokerChannel,
        timers: Scheduler | None = None,
    ) -> None:
        """``channel_factory(host, port, client_id=, timeout=)`` opens the connection a broker's
        requests go over (a :class:`~odradek.broker.channel.BrokerChannel`); ``timers``: the
        broker's scheduler (the preferred-replica timer, and the clock of the times it writes)."""
        self.config = config
        self.timers: Scheduler = timers or LoopScheduler()
        self.channel_factory = channel_factory
        self.backend = backend
        self.store = backend.store
        self.fenced = EpochFencedStore(backend.store)
        self.topic_config = topic_config
        name = config.get("inter.broker.listener.name")
        self.inter_broker_listener = str(name) if name else None
        self.id = broker_id
        self._active = False
        #: the ZooKeeper session in which this broker won the election (see :attr:`active`)
        self._session = 0
        self.ctx = ControllerContext()
        self.brokers: dict[int, BrokerInfo] = {}
        self.queues: dict[int, BrokerQueue] = {}
        self.events = EventQueue(self._moved, _REARMING)
        self.controller_id = -1
        #: the broker's metric counters (set by the broker; None: off)
        self.metrics: BrokerMetrics | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._topic_watched: set[str] = set()

    @property
    def active(self) -> bool:
        """This broker is the controller: it won the election in the ZooKeeper session it has now.

        When the session expires, kazoo fires every watch at once, so handlers can run before
        the resignation queued behind them; a controller acting then (with the new session) would,
        say, delete the ISR change notifications meant for its successor."""
        return self._active and self.store.session_id == self._session

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
        for q in self.queues.values():
            await q.close()
        self.queues.clear()
        self.ctx = ControllerContext()
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
        ctx = self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=version)
        log.info("broker %d is the controller (epoch %d)", self.id, epoch)
        for path in ("/admin/reassign_partitions", "/admin/preferred_replica_election"):
            await self.store.exists(path, self._watch(self._admin_node_changed))
        await self._read_brokers()
        names = await self.store.children("/brokers/topics", self._watch(self._topics_changed))
        for name in names:
            await self._read_topic(name)
        self._active = True
        for bid in ctx.live_brokers:
            self._open_queue(bid)
        # state machines from what ZooKeeper holds
        for tp in list(ctx.partitions()):
            ctx.load_states(tp)
        self._send_update_metadata(ctx.live_brokers, None)
        await self._online_partitions(list(ctx.partitions()))
        # Kafka's replica state machine start-up: replicas on dead brokers go Offline, which takes
        # them out of the ISR of partitions that still have a leader (a leader waiting for an
        # acks=all write to reach a dead follower would otherwise wait for its own lag timeout,
        # or for ever if its ISR change is lost in the failover)
        dead = {r for tp in ctx.partitions() for r in ctx.replicas(*tp) if not ctx.is_live(r)}
        if dead:
            shrunk = await self._remove_from_isr(list(ctx.partitions()), dead)
            if shrunk:
                log.info("controller start-up: brokers %s out of the ISR of %d partitions", sorted(dead), len(shrunk))
        self._send_leader_and_isr(list(ctx.partitions()), None)
        await self._delete_topics_changed()
        await self.store.children("/isr_change_notification", self._watch(self._isr_changed))
        await self._isr_changed()
        await self._resume_reassignments()
        await self._admin_node_changed()

    # -- reading ZooKeeper --------------------------------------------------------------------------
    async def _read_brokers(self) -> tuple[set[int], set[int]]:
        ids = await self.store.children("/brokers/ids", self._watch(self._brokers_changed))
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

    async def _read_topic(self, name: str) -> TopicAssignment | None:
        data, stat = await self.store.get_or_none(f"/brokers/topics/{name}", self._watch(lambda: self._topic_changed(name)))
        if data is None:
            self.ctx.topics.pop(name, None)
            return None
        ta = TopicAssignment.from_json(data, str(uuid.uuid4()))
        if not data.get("topic_id"):
            await self._checked_set(f"/brokers/topics/{name}", ta.to_json(), stat.version)
        self.ctx.topics[name] = ta
        for p in ta.replicas:
            await self._read_state((name, p))
        return ta

    async def _read_state(self, tp: TP) -> LeaderIsr | None:
        data, stat = await self.store.get_or_none(f"/brokers/topics/{tp[0]}/partitions/{tp[1]}/state")
        if data is None:
            self.ctx.states.pop(tp, None)
            return None
        li = LeaderIsr.from_json(data, stat.version)
        self.ctx.states[tp] = li
        return li

    # -- ZooKeeper writes, fenced by the controller epoch ------------------------------------------------
    async def _checked_set(self, path: str, value: Any, version: int) -> int:
        return await self.fenced.checked_set(self.ctx.epoch_zk_version, path, value, version)

    async def _write_state(self, tp: TP, li: LeaderIsr) -> LeaderIsr:
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
            version = await self._checked_set(path, li.to_json(), old.zk_version)
            new = LeaderIsr(li.leader, li.leader_epoch, li.isr, li.controller_epoch, version)
        self.ctx.states[tp] = new
        return new

    async def _update_leader_isr(self, tp: TP, decide: Callable[[LeaderIsr | None], LeaderIsr | None]) -> LeaderIsr | None:
        """Read-decide-write with retries on concurrent ISR changes by the leader."""
        for _ in range(5):
            current = self.ctx.states.get(tp)
            new = decide(current)
            if new is None:
                return None
            try:
                return await self._write_state(tp, new)
            except BadVersionError:
                await self._read_state(tp)
        log.warning("could not update the state of %s-%d: concurrent changes", *tp)
        return None

    # -- requests to brokers ---------------------------------------------------------------------
    def _open_queue(self, bid: int) -> None:
        info = self.brokers.get(bid)
        if info is None or bid in self.queues:
            return
        ep = info.endpoint(self.inter_broker_listener) or info.endpoint()
        if ep is None:
            return
        timeout = int(self.config.get("controller.socket.timeout.ms")) / 1000
        self.queues[bid] = BrokerQueue(
            self.channel_factory, bid, ep.host, ep.port, client_id=f"controller-{self.id}", timeout=timeout
        )

    async def _close_queue(self, bid: int) -> None:
        q = self.queues.pop(bid, None)
        if q is not None:
            await q.close()

    def _partition_state(self, tp: TP, li: LeaderIsr) -> PartitionState:
        ta = self.ctx.topics[tp[0]]
        replicas = ta.replicas.get(tp[1], ())
        offline = tuple(r for r in replicas if not self.ctx.is_live(r))
        return PartitionState(tp[0], tp[1], replicas, li.isr, li.leader, li.leader_epoch, li.zk_version, offline)

    def _send_leader_and_isr(self, tps: Iterable[TP], targets: Iterable[int] | None, *, is_new: bool = False) -> None:
        """LeaderAndIsr for ``tps`` to their live replicas (or only to ``targets``), then
        UpdateMetadata to every live broker."""
        built = leader_and_isr_requests(
            self.id, self.ctx, self.brokers, self.inter_broker_listener, tps, targets, is_new=is_new
        )
        for bid, req in built.items():
            q = self.queues.get(bid)
            if q is not None:
                q.send(req, LEADER_AND_ISR_VERSION)
        self._send_update_metadata(self.ctx.live_brokers, None)

    def _send_update_metadata(self, targets: Iterable[int], tps: Iterable[TP] | None) -> None:
        del tps
        for bid, req in update_metadata_requests(self.id, self.ctx, self.brokers, targets).items():
            q = self.queues.get(bid)
            if q is not None:
                q.send(req, UPDATE_METADATA_VERSION)

    def _send_stop_replica(self, bid: int, tps: Iterable[TP], *, delete: bool) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        q = self.queues.get(bid)
        if q is None:
            fut.set_result(None)
            return fut
        q.send(stop_replica_request(self.id, self.ctx, bid, tps, delete=delete), STOP_REPLICA_VERSION, fut)
        return fut

    # -- partition state machine -------------------------------------------------------------------
    def _unclean_allowed(self, topic: str) -> bool:
        return bool(self.topic_config(topic).unclean_leader_election_enable)

    async def _online_partitions(self, tps: list[TP]) -> list[TP]:
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
                li = await self._write_state(tp, LeaderIsr(live[0], 0, tuple(live), self.ctx.epoch))
                self.ctx.set_partition_state(tp, PS.ONLINE)
                for r in replicas:
                    self.ctx.replica_up(tp, r) if self.ctx.is_live(r) else self.ctx.replica_down(tp, r)
                changed.append(tp)
                log.info("new partition %s-%d: leader %d, ISR %s", *tp, li.leader, list(li.isr))
                continue
            known = self.ctx.states.get(tp)
            if known is not None and known.leader >= 0 and self.ctx.is_live(known.leader) and known.leader not in self.ctx.shutting_down:
                if state is not PS.ONLINE:
                    self.ctx.set_partition_state(tp, PS.ONLINE)
                continue
            unclean = self._unclean_allowed(tp[0])
            used_unclean = False

            def decide(cur: LeaderIsr | None, replicas: tuple[int, ...] = replicas, unclean: bool = unclean) -> LeaderIsr | None:
                nonlocal used_unclean
                if cur is None:
                    return None
                if cur.leader >= 0 and self.ctx.is_live(cur.leader) and cur.leader not in self.ctx.shutting_down:
                    return None
                live = [r for r in self.ctx.live_brokers if r not in self.ctx.shutting_down]
                e = offline_election(replicas, cur.isr, live, unclean=unclean)
                if e is None:
                    # nobody eligible: no leader; the ISR keeps its last member for a clean election
                    if cur.leader == NO_LEADER:
                        return None
                    keep = tuple(r for r in cur.isr if self.ctx.is_live(r)) or cur.isr[-1:]
                    return LeaderIsr(NO_LEADER, cur.leader_epoch + 1, keep, self.ctx.epoch)
                used_unclean = e.unclean
                return LeaderIsr(e.leader, cur.leader_epoch + 1, e.isr, self.ctx.epoch)

            t0 = time.perf_counter()
            elected = await self._update_leader_isr(tp, decide)
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

    async def _elect_with(self, tps: list[TP], elect: Callable[[TP, LeaderIsr], Election | None]) -> dict[TP, ErrorCode]:
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
            li = await self._update_leader_isr(tp, decide)
            results[tp] = outcome[0]
            if li is not None:
                self._count_election(t0, bool(chosen and chosen[-1].unclean))
                changed.append(tp)
                self.ctx.partition_led(tp, li.leader)
        if changed:
            self._send_leader_and_isr(changed, None)
        return results

    # -- events ------------------------------------------------------------------------------------
    async def _brokers_changed(self) -> None:
        if not self.active:
            await self.store.children("/brokers/ids", self._watch(self._brokers_changed))
            return
        added, removed = await self._read_brokers()
        if removed:
            await self._on_brokers_failed(removed, still_live=added)
        if added:
            await self._on_brokers_started(added)

    async def _on_brokers_failed(self, dead: set[int], still_live: set[int]) -> None:
        log.info("brokers %s left the cluster", sorted(dead))
        for b in dead:
            if b not in still_live:
                await self._close_queue(b)
            self.ctx.shutting_down.discard(b)
        tps = [tp for tp in self.ctx.partitions() if any(r in dead for r in self.ctx.replicas(*tp))]
        for tp in tps:
            for r in self.ctx.replicas(*tp):
                if r in dead and r not in still_live:
                    self.ctx.replica_down(tp, r)
        led = [tp for tp in tps if (st := self.ctx.states.get(tp)) is not None and st.leader in dead]
        for tp in led:
            if self.ctx.partition_state(tp) is PS.ONLINE:
                self.ctx.set_partition_state(tp, PS.OFFLINE)
        changed = set(await self._online_partitions(led))
        # dead followers leave the ISR of partitions that still have a leader (a new leader epoch)
        changed |= set(await self._remove_from_isr([tp for tp in tps if tp not in changed], dead - still_live))
        if changed:
            self._send_leader_and_isr(sorted(changed), None)
        else:
            self._send_update_metadata(self.ctx.live_brokers, None)

    async def _remove_from_isr(self, tps: list[TP], dead: set[int]) -> list[TP]:
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

            if await self._update_leader_isr(tp, decide) is not None:
                changed.append(tp)
                log.info("%s-%d: brokers %s out of the ISR, now %s", *tp, sorted(dead & set(self.ctx.replicas(*tp))),
                         list(self.ctx.states[tp].isr))
        return changed

    async def _on_brokers_started(self, new: set[int]) -> None:
        log.info("brokers %s joined the cluster", sorted(new))
        for b in new:
            self._open_queue(b)
        self._send_update_metadata(self.ctx.live_brokers, None)
        hosted = [tp for tp in self.ctx.partitions() if any(r in new for r in self.ctx.replicas(*tp))]
        for tp in hosted:
            for r in self.ctx.replicas(*tp):
                if r in new:
                    self.ctx.replica_up(tp, r)
        # the returning replicas learn their role first (they truncate, then fetch)
        self._send_leader_and_isr(hosted, new)
        offline = [tp for tp in self.ctx.offline_partitions()]
        changed = await self._online_partitions(offline)
        if changed:
            self._send_leader_and_isr(changed, None)
        await self._resume_reassignments()

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
        await self._create_partitions(created)
        if gone:
            self._send_update_metadata(self.ctx.live_brokers, None)

    async def _create_partitions(self, tps: list[TP]) -> None:
        for tp in tps:
            self.ctx.new_partition(tp)
        changed = await self._online_partitions(tps)
        if changed:
            self._send_leader_and_isr(changed, None, is_new=True)

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
            await self._create_partitions(added)

    async def _delete_topics_changed(self) -> None:
        names = await self.store.children("/admin/delete_topics", self._watch(self._delete_topics_changed))
        if not self.active:
            return
        for name in names:
            await self._delete_topic(name)

    async def _delete_topic(self, name: str) -> None:
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
            self._send_update_metadata(self.ctx.live_brokers, None)
            waits = [self._send_stop_replica(b, ps, delete=True) for b, ps in per_broker.items() if self.ctx.is_live(b)]
            if waits:
                await asyncio.wait(waits, timeout=10)
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
        self._send_update_metadata(self.ctx.live_brokers, None)

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
                await self._read_state(tp)
        # a leader took a follower back into the ISR just before that broker died, and this
        # notification came after the broker's death was handled: out of the ISR again, or
        # acks=all writes would wait replica.lag.time.max.ms for it
        dead = {r for tp in tps if (st := self.ctx.states.get(tp)) is not None for r in st.isr if not self.ctx.is_live(r)}
        changed = await self._remove_from_isr(sorted(tps), dead) if dead else []
        if changed:
            self._send_leader_and_isr(changed, None)
        else:
            self._send_update_metadata(self.ctx.live_brokers, None)
        if any(tp in self.ctx.reassigning for tp in tps):
            await self._resume_reassignments()

    # -- controlled shutdown --------------------------------------------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]:
        """Move leadership off ``broker_id`` and take it out of ISRs; returns partitions it still
        leads (the broker retries until that list is empty or its retries run out)."""
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        if broker_id not in self.ctx.live_brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        if broker_epoch >= 0 and broker_epoch < self.ctx.live_brokers[broker_id]:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, f"broker epoch {broker_epoch} is stale")
        self.ctx.shutting_down.add(broker_id)
        log.info("controlled shutdown of broker %d", broker_id)
        live = list(self.ctx.live_brokers)
        hosted = [tp for tp in self.ctx.partitions_on(broker_id) if len(self.ctx.replicas(*tp)) > 1]
        led = [tp for tp in hosted if (st := self.ctx.states.get(tp)) is not None and st.leader == broker_id]
        await self._elect_with(
            led, lambda tp, cur: controlled_shutdown_election(self.ctx.replicas(*tp), cur.isr, live, self.ctx.shutting_down)
        )
        followers = [tp for tp in hosted if tp not in led]
        changed = []
        for tp in followers:

            def decide(cur: LeaderIsr | None) -> LeaderIsr | None:
                if cur is None or broker_id not in cur.isr or cur.leader in (broker_id, NO_LEADER):
                    return None
                return LeaderIsr(cur.leader, cur.leader_epoch + 1, tuple(r for r in cur.isr if r != broker_id), self.ctx.epoch)

            if await self._update_leader_isr(tp, decide) is not None:
                changed.append(tp)
        if changed:
            self._send_leader_and_isr(changed, None)
        return [tp for tp in hosted if (st := self.ctx.states.get(tp)) is not None and st.leader == broker_id]

    # -- preferred replicas ------------------------------------------------------------------------
    async def _rebalance_timer(self) -> None:
        cfg = self.config
        interval = max(1.0, float(cfg.get("leader.imbalance.check.interval.seconds")))
        while True:
            await self.timers.sleep(interval * 1000.0)
            if self.active and cfg.get("auto.leader.rebalance.enable"):
                self.put(self._auto_rebalance)

    async def _auto_rebalance(self) -> None:
        if not self.active:
            return
        pct = int(self.config.get("leader.imbalance.per.broker.percentage"))
        tps = imbalanced_partitions(self.ctx, pct)
        if tps:
            log.info("preferred replica election for %d imbalanced partitions", len(tps))
            await self.elect_preferred(tps)

    async def elect_preferred(self, tps: list[TP]) -> dict[TP, ErrorCode]:
        live = [b for b in self.ctx.live_brokers if b not in self.ctx.shutting_down]
        results = await self._elect_with(tps, lambda tp, cur: preferred_election(self.ctx.replicas(*tp), cur.isr, live))
        for tp, code in results.items():
            if code == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE:
                results[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        return results

    async def elect_leaders(self, election_type: int, tps: list[TP] | None) -> dict[TP, ErrorCode]:
        """The ElectLeaders API: 0 = preferred, 1 = unclean (only for partitions without a leader)."""
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        if tps is None:
            tps = [tp for tp in self.ctx.partitions() if tp[0] not in self.ctx.deleting]
        known = [tp for tp in tps if tp in self.ctx.states]
        results = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in tps if tp not in self.ctx.states}
        if election_type == 0:
            results.update(await self.elect_preferred(known))
            return results
        live = [b for b in self.ctx.live_brokers if b not in self.ctx.shutting_down]

        def unclean(tp: TP, cur: LeaderIsr) -> Election | None:
            if cur.leader >= 0 and self.ctx.is_live(cur.leader):
                return Election(cur.leader, cur.isr)  # has a leader: not needed
            e = offline_election(self.ctx.replicas(*tp), cur.isr, live, unclean=True)
            if e is not None and e.unclean:
                log.warning("unclean leader election for %s-%d requested: broker %d leads", *tp, e.leader)
            return e

        results.update(await self._elect_with(known, unclean))
        return results

    async def _admin_node_changed(self) -> None:
        if not self.active:
            return
        data, _ = await self.store.get_or_none("/admin/preferred_replica_election", self._watch(self._admin_node_changed))
        if data is not None:
            tps = [(str(i["topic"]), int(i["partition"])) for i in data.get("partitions", [])]
            await self.elect_preferred(tps)
            await self.store.delete("/admin/preferred_replica_election")
        data, _ = await self.store.get_or_none("/admin/reassign_partitions", self._watch(self._admin_node_changed))
        if data is not None:
            for item in data.get("partitions", []):
                tp = (str(item["topic"]), int(item["partition"]))
                target = tuple(int(r) for r in item["replicas"])
                if tp in set(self.ctx.partitions()) and tp not in self.ctx.reassigning:
                    self.ctx.reassigning[tp] = target
            await self._resume_reassignments()

    # -- reassignment -----------------------------------------------------------------------------
    async def alter_reassignments(self, changes: dict[TP, tuple[int, ...] | None]) -> dict[TP, tuple[ErrorCode, str | None]]:
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
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
            if not target or len(set(target)) != len(target):
                results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "duplicate or empty replica list")
                continue
            unknown = [r for r in target if r not in self.ctx.live_brokers]
            if unknown:
                results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"brokers {unknown} are not alive")
                continue
            self.ctx.reassigning[tp] = tuple(target)
            results[tp] = (ErrorCode.NONE, None)
        await self._save_reassignments()
        await self._resume_reassignments()
        return results

    async def _save_reassignments(self) -> None:
        items = [
            {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(self.ctx.reassigning.items())
        ]
        if items:
            await self.store.upsert("/admin/reassign_partitions", {"version": 1, "partitions": items})
        else:
            await self.store.delete("/admin/reassign_partitions")

    def list_reassignments(self, tps: list[TP] | None) -> dict[TP, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        out = {}
        for tp in self.ctx.reassigning:
            if tps is not None and tp not in tps:
                continue
            ta = self.ctx.topics.get(tp[0])
            if ta is None:
                continue
            out[tp] = (ta.replicas[tp[1]], ta.adding.get(tp[1], ()), ta.removing.get(tp[1], ()))
        return out

    async def _resume_reassignments(self) -> None:
        """Advance every reassignment (also after a controller failover: the pending targets are
        in ``/admin/reassign_partitions``, the union and adding/removing in the topic znode)."""
        if not self.active:
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
                if await self._reassign_step(tp, target):
                    done.append(tp)
            except (KafkaError, BadVersionError) as exc:
                log.warning("reassignment of %s-%d: %s", *tp, exc)
        if done:
            for tp in done:
                self.ctx.reassigning.pop(tp, None)
            await self._save_reassignments()

    async def _reassign_step(self, tp: TP, target: tuple[int, ...]) -> bool:
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
            # step 1: the union of old and new replicas, a new leader epoch; new replicas start fetching
            ta.replicas[tp[1]] = plan.union
            ta.adding[tp[1]] = plan.adding
            ta.removing[tp[1]] = plan.removing
            await self._write_assignment(tp[0])
            for r in plan.adding:
                self.ctx.replica_up(tp, r)
            await self._update_leader_isr(
                tp, lambda cur: None if cur is None else LeaderIsr(cur.leader, cur.leader_epoch + 1, cur.isr, self.ctx.epoch)
            )
            self._send_leader_and_isr([tp], None)
            log.info("reassigning %s-%d: %s -> %s via %s", *tp, list(original), list(target), list(plan.union))
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

        li2 = await self._update_leader_isr(tp, decide)
        if li2 is None:
            return False
        ta.replicas[tp[1]] = tuple(target)
        ta.adding.pop(tp[1], None)
        ta.removing.pop(tp[1], None)
        await self._write_assignment(tp[0])
        self._send_leader_and_isr([tp], None)
        for r in removing:
            self.ctx.start_replica_deletion(tp, r)
            if self.ctx.is_live(r):
                self._send_stop_replica(r, [tp], delete=True)
            self.ctx.replica_deleted(tp, r)
        log.info("reassignment of %s-%d to %s completed (leader %d)", *tp, list(target), li2.leader)
        return True

    async def _write_assignment(self, topic: str) -> None:
        path = f"/brokers/topics/{topic}"
        _, stat = await self.store.get(path)
        await self._checked_set(path, self.ctx.topics[topic].to_json(), stat.version)
