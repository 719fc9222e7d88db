"""Which partitions this broker hosts, and as leader or follower: the broker side of replication.

Two implementations of one interface, chosen once when the broker is wired:

* :class:`LocalReplication` — a single node (the embedded store): the metadata image decides
  what is hosted; every hosted partition is led here; the controller's requests are refused
  (STALE_CONTROLLER_EPOCH: there is no other controller).
* :class:`ClusterReplication` — a ZooKeeper cluster: the controller's LeaderAndIsr, StopReplica
  and UpdateMetadata decide; leaders shrink and expand their ISRs (version-checked writes to
  the metadata store, then a change notification), followers fetch through the
  :class:`~odradek.broker.fetcher.ReplicaFetcherManager`, and a stopping broker asks the
  controller to move its leaderships away first (controlled shutdown).

The per-partition rules (high watermark, ISR membership) are pure functions in
:mod:`odradek.cluster.isr`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek._clock import Clock
from odradek.broker.channel import BrokerChannel
from odradek.broker.fetcher import ReplicaFetcherManager
from odradek.broker.replica import Partition, ReplicaManager
from odradek.broker.scheduler import LogScheduler
from odradek.broker.topics import TopicService, is_internal
from odradek.cluster.controller import LeaderIsr
from odradek.cluster.isr import adopt_stored_isr
from odradek.cluster.metadata import BrokerInfo, Endpoint, MetadataImage, PartitionState, TopicInfo
from odradek.config import BrokerConfig
from odradek.coordination import MetadataBackend
from odradek.coordination.base import StaleVersion
from odradek.coordination.embedded import is_deleted
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics
from odradek.protocol.messages.controlled_shutdown import ControlledShutdownRequest
from odradek.protocol.messages.update_metadata import UpdateMetadataRequest
from odradek.settings import LiveSettings, Settings
from odradek.storage import Log, LogConfig, LogManager, StorageError

if TYPE_CHECKING:
    from odradek.broker.controller import Controller

__all__ = ["ClusterReplication", "LocalReplication", "Replication", "topic_infos_from_update"]

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: threads making the logs of one batch of new partitions (see :meth:`Replication.create_logs`);
#: they wait on the disk, not on a core
CREATE_THREADS = 8


@dataclass(frozen=True, slots=True)
class NewLog:
    """A partition whose log :meth:`Replication.create_logs` makes before it is hosted."""

    topic: str
    partition: int
    config: LogConfig
    topic_id: uuid.UUID | None
    #: the leader epoch it is hosted with as leader (its checkpoint is written too); None: follower
    leader_epoch: int | None


class Replication:
    """What both wirings offer the request handlers and the rest of the broker."""

    def __init__(
        self,
        broker_id: int,
        settings: Settings,
        topics: TopicService,
        replicas: ReplicaManager,
        backend: MetadataBackend,
        clock: Clock,
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.topics = topics
        self.replicas = replicas
        self.logs: LogManager = replicas.logs
        self.backend = backend
        self.clock = clock
        #: called after the set of hosted partitions may have changed (the group coordinator
        #: loads and unloads the ``__consumer_offsets`` partitions it leads)
        self.on_hosting_changed: Callable[[MetadataImage | None], None] = lambda _image: None
        #: the broker's metric counters (set by the broker; None: off)
        self.metrics: BrokerMetrics | None = None

    async def prepare_image(self, image: MetadataImage) -> None:
        """Before the store publishes ``image`` (a change made on this broker): slow work that
        applying it would do on the event loop."""
        return None

    def apply_image(self, image: MetadataImage, reconfigured: set[str]) -> None:
        raise NotImplementedError

    def rehost(self, topic: str, partition: int) -> Partition | None:
        """Host now a partition of the image whose log could not be created when the image was
        applied; None when this broker does not host it."""
        return None

    def offsets_replication_factor(self) -> int:
        return 1

    def transaction_log_replication_factor(self) -> int:
        return 1

    def start(self, scheduler: LogScheduler) -> None:
        return None

    async def controlled_shutdown(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def check_controller_request(self, controller_epoch: int, broker_epoch: int) -> ErrorCode | None:
        """None when a controller request may be applied, else the error to answer."""
        return ErrorCode.STALE_CONTROLLER_EPOCH

    async def apply_leader_and_isr(
        self, states: list[Any], topic_ids: Mapping[str, uuid.UUID], leaders: Mapping[int, tuple[str, int]]
    ) -> dict[TP, int]:
        raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH, "no controller sends requests to a single node")

    async def apply_update_metadata(self, request: UpdateMetadataRequest) -> None:
        raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH, "no controller sends requests to a single node")

    async def stop_replicas(self, items: list[tuple[str, int, bool]]) -> dict[TP, int]:
        raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH, "no controller sends requests to a single node")

    def on_follower_fetch(self, p: Partition, replica: int, fetch_offset: int) -> None:
        """A follower's fetch: its log end offset moves the HW."""
        p.record_follower_fetch(replica, fetch_offset, self.clock.now_ms())
        p.update_high_watermark()

    async def create_logs(self, new: list[NewLog]) -> None:
        """Create the logs of partitions about to be hosted here on a worker thread, then
        register them: a new log costs a directory, files and fsyncs (~3 ms), and a CreateTopics
        of 1,000 partitions did all of it on the event loop, every client waiting ~2 s.  Hosting
        then finds the logs made.  A log that cannot be created here is left to hosting, which
        tries again and reports the failure as it always did.

        The logs of a batch are made side by side (:data:`CREATE_THREADS`): a new log waits on
        four fsyncs of its own (its ``partition.metadata`` and leader-epoch checkpoint, each file
        and then its directory), which the disk completes together when they come together, and
        its log dir is fsynced once for the batch, after every new directory in it exists (one a
        log before: 10,000 partitions took 40-48 s to create, nearly all of it fsyncs)."""
        new = [n for n in new if self.logs.get(n.topic, n.partition) is None]
        if not new:
            return
        targets = self.logs.place([(n.topic, n.partition) for n in new])
        logs = self.logs

        def create_one(n: NewLog, target: Path) -> tuple[Log, Path] | None:
            try:
                lg = logs.create_unregistered(n.topic, n.partition, n.config, n.topic_id, target, sync_parent=False)
            except (OSError, StorageError):
                return None
            if n.leader_epoch is not None:
                with contextlib.suppress(OSError):  # written (or reported) when it becomes leader
                    lg.start_epoch(n.leader_epoch)
            return lg, target

        def create() -> list[tuple[Log, Path]]:
            with ThreadPoolExecutor(min(CREATE_THREADS, len(new)), thread_name_prefix="odradek-new-log") as pool:
                made = [m for m in pool.map(create_one, new, targets) if m is not None]
            unsynced = set()
            for target in {t for _, t in made}:
                try:
                    logs.files.sync_dir(target)
                except OSError as exc:  # the new directories may not be durable: left to hosting
                    log.warning("new logs in %s not made: fsync of the log dir failed: %s", target, exc)
                    unsynced.add(target)
            for lg, target in made:
                if target in unsynced:
                    lg.abandon()
            return [(lg, target) for lg, target in made if target not in unsynced]

        job = asyncio.get_running_loop().run_in_executor(None, create)
        cancelled: asyncio.CancelledError | None = None
        while not job.done():
            try:
                await asyncio.shield(job)
            except asyncio.CancelledError as exc:
                # the caller went away (the controller's connection closed): the thread goes on
                # making these logs' files, so they are registered before the cancellation goes
                # on — else the next request would make the same logs again, beside the thread
                cancelled = exc
        for lg, target in job.result():
            if self.logs.get(lg.topic, lg.partition) is None:
                self.logs.register(lg, target)
            else:  # created meanwhile on the event loop: keep that one
                lg.abandon()
        if cancelled is not None:
            raise cancelled


class LocalReplication(Replication):
    """A single node: host what the image assigns here, every partition as its leader."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._applied_topics: dict[str, TopicInfo] = {}
        self._unknown_logs: set[TP] = set()

    async def prepare_image(self, image: MetadataImage) -> None:
        """Before ``image`` is published: make the logs of the partitions it adds here off the
        event loop (see :meth:`create_logs`), within the partition budget :meth:`apply_image`
        applies."""
        budget = self.topics.partition_budget()
        room = budget.partitions - self.topics.internal_reserve(image) - len(self.logs)
        new: list[NewLog] = []
        for topic in sorted(image.topics.values(), key=lambda t: not t.internal):
            if self._applied_topics.get(topic.name) is topic:
                continue
            config = None
            for state in topic.partitions.values():
                key = (topic.name, state.partition)
                if (
                    self.broker_id not in state.replicas
                    or key in self.replicas.partitions
                    or self.logs.get(*key) is not None
                ):
                    continue
                if not topic.internal and len(new) >= room:
                    break  # apply_image leaves it offline and says why
                config = config or self.topics.config_for(topic.configs)
                new.append(NewLog(topic.name, state.partition, config, topic.topic_id, state.leader_epoch))
        await self.create_logs(new)

    def apply_image(self, image: MetadataImage, reconfigured: set[str]) -> None:
        hosted = set()
        failed: list[str] = []
        over: list[str] = []
        error: BaseException | None = None
        budget = self.topics.partition_budget()
        reserve = self.topics.internal_reserve(image)
        applied = self._applied_topics
        for topic in sorted(image.topics.values(), key=lambda t: not t.internal):
            # a topic applied before, unchanged (same TopicInfo, same LogConfig): its partitions
            # are as they were (walking them all made each creation O(partitions))
            same = applied.get(topic.name) is topic and topic.name not in reconfigured
            for state in topic.partitions.values():
                if self.broker_id not in state.replicas:
                    continue
                key = (topic.name, state.partition)
                if same and key in self.replicas.partitions:
                    hosted.add(key)
                    continue
                if (
                    not topic.internal
                    and key not in self.replicas.partitions
                    and self.logs.get(*key) is None
                    and len(self.logs) + reserve >= budget.partitions
                ):
                    # a new log would take descriptors the broker needs to serve (metadata written
                    # by a version without limits, or a lower ulimit -n than before): offline
                    over.append(f"{topic.name}-{state.partition}")
                    continue
                try:
                    self.replicas.become_leader(state, topic.topic_id)
                except (KafkaError, OSError) as exc:
                    if (
                        isinstance(exc, KafkaError)
                        and not isinstance(exc, StorageError)
                        and exc.code != ErrorCode.KAFKA_STORAGE_ERROR
                    ):
                        raise
                    # the partition stays offline (clients get UNKNOWN_TOPIC_OR_PARTITION / retry),
                    # the broker keeps serving the others and is still able to start
                    failed.append(f"{topic.name}-{state.partition}")
                    error = exc
                    continue
                hosted.add((topic.name, state.partition))
        self._applied_topics = dict(image.topics)
        if over:
            log.error(
                "%d partition(s) (%s%s) have no log yet and this broker already hosts %d, its limit of %s: "
                "they stay offline; delete topics or raise the limit and restart",
                len(over), ", ".join(over[:5]), ", ..." if len(over) > 5 else "", len(self.logs), budget.describe(),
            )
        if failed:
            log.error(
                "could not open or create the logs of %d partition(s) (%s%s): %s; they are offline",
                len(failed), ", ".join(failed[:5]), ", ..." if len(failed) > 5 else "", error,
            )
        for key in list(self.replicas.partitions):
            if key not in hosted:
                self.replicas.remove_partition(key[0], key[1], delete=False)
        self.on_hosting_changed(image)
        self._delete_deleted_logs(image, hosted)

    def _delete_deleted_logs(self, image: MetadataImage, hosted: set[TP]) -> None:
        """Delete the partition directories of the topic deletions the metadata recorded (also
        those deleted while this broker was down) — and nothing else: a log on disk the metadata
        does not know is kept and reported."""
        remaining: set[uuid.UUID | None] = set()
        for lg in list(self.logs.logs()):
            key = (lg.topic, lg.partition)
            if key in hosted:
                continue
            topic_id = log_topic_id(lg)
            if is_deleted(image, lg.topic, topic_id):
                log.info(
                    "deleting %s: partition %d of topic %s (id %s), whose deletion the metadata recorded",
                    lg.directory, lg.partition, lg.topic, topic_id,
                )
                try:
                    self.logs.delete(lg.topic, lg.partition)
                except OSError as exc:
                    log.warning("could not delete %s (%s); retried at the next start", lg.directory, exc)
                    remaining.add(topic_id)
            elif key not in self._unknown_logs:
                self._unknown_logs.add(key)
                log.warning(
                    "%s is not a partition in the metadata and no deletion of it was recorded: kept on disk, "
                    "not served", lg.directory,
                )
        done = [
            tid
            for tid, name in image.deleted_topics.items()
            if tid not in remaining and not (None in remaining and name not in image.topics)
        ]
        if done:
            self.backend.deletions_done(done)

    def rehost(self, topic: str, partition: int) -> Partition | None:
        """Host a partition of the image whose log could not be created when the image was
        applied (a full or failed log dir), now that it is used.  Raises KAFKA_STORAGE_ERROR
        while it still cannot be created."""
        image = self.backend.image
        info = image.topics.get(topic)
        state = info.partitions.get(partition) if info is not None else None
        if info is None or state is None or self.broker_id not in state.replicas:
            return None
        p = self.replicas.become_leader(state, info.topic_id)
        log.info("%s-%d: its log is created now (it could not be when the topic was applied)", topic, partition)
        if info.internal:
            self.on_hosting_changed(None)
        return p


class ClusterReplication(Replication):
    """A ZooKeeper cluster: the controller decides what is hosted and who leads."""

    def __init__(
        self,
        *args: Any,
        cluster_id: str,
        inter_broker_listener: str | None,
        channel_factory: Callable[..., BrokerChannel] = BrokerChannel,
        fetcher_settings: LiveSettings | BrokerConfig,
        **kwargs: Any,
    ) -> None:
        """``fetcher_settings``: the settings the replica fetchers read (live: a dynamic change
        of ``num.replica.fetchers`` or the throttle applies)."""
        super().__init__(*args, **kwargs)
        self.cluster_id = cluster_id
        self.inter_broker_listener = inter_broker_listener
        self.channel_factory = channel_factory
        self.fetchers = ReplicaFetcherManager(self.broker_id, fetcher_settings, self.replicas, channel_factory)
        self.controller: Controller | None = None
        self.controller_epoch = 0
        self._full_metadata_seen = False
        #: set once this broker asks for its controlled shutdown: from then on it follows no
        #: partition (see :meth:`controlled_shutdown`)
        self.shutting_down = False
        #: ISR changes written but not yet announced (the notification failed): retried by the
        #: ISR check, or the controller would keep the old ISR for good
        self._unannounced: set[tuple[str, int]] = set()
        #: a log dir went offline and the controller has not been told yet (retried by the ISR check)
        self._dir_failure_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.replicas.log_dirs.offline_listeners.append(self._dir_went_offline)

    def offsets_replication_factor(self) -> int:
        return self.settings.groups.offsets_topic_replication_factor

    def transaction_log_replication_factor(self) -> int:
        return self.settings.transactions.state_log_replication_factor

    def start(self, scheduler: LogScheduler) -> None:
        interval = max(100, self.settings.replication.replica_lag_time_max_ms // 2)
        scheduler.every(interval, self._isr_check, "isr-shrink")
        self._loop = asyncio.get_running_loop()

    def _dir_went_offline(self, d: Path) -> None:
        """A log dir went offline (on any thread): its followers stop fetching and the controller
        is told, which moves the leaderships of its partitions away."""
        self._dir_failure_pending = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: loop.create_task(self._announce_dir_failure(d)))

    async def _announce_dir_failure(self, d: Path | None = None) -> None:
        if d is not None:
            for (topic, idx), p in list(self.replicas.partitions.items()):
                if p.log_dir == d:
                    self.fetchers.remove(topic, idx)
        if not self._dir_failure_pending:
            return
        self._dir_failure_pending = False
        try:
            await self.backend.notify_log_dir_failure()
            log.info("told the controller that a log dir of broker %d is offline", self.broker_id)
        except Exception as exc:
            self._dir_failure_pending = True
            log.warning("could not tell the controller that a log dir is offline (%s); retrying at the next "
                        "ISR check", exc)

    async def stop(self) -> None:
        await self.fetchers.shutdown()

    def apply_image(self, image: MetadataImage, reconfigured: set[str]) -> None:
        """LeaderAndIsr / StopReplica decide which partitions are hosted; an image only updates
        topic configs and, once complete, removes logs of deleted topics."""
        for (topic, _idx), p in self.replicas.partitions.items():
            cfg = self.topics.cached_config(topic)
            if cfg is not None and cfg is not p.log.config:
                p.log.update_config(cfg)
        if not self._full_metadata_seen or not self.backend.metadata_known():
            # before the controller's first metadata is installed, an image (the broker's own
            # start-up view, published while that metadata is still being read in) says nothing
            # about which topics exist: deleting on it lost a restarted broker's partitions
            return
        for lg in list(self.logs.logs()):
            key = (lg.topic, lg.partition)
            if lg.topic not in image.topics and key not in self.replicas.partitions:
                log.info("deleting %s-%d: its topic no longer exists", *key)
                self.logs.delete(lg.topic, lg.partition)

    # -- the controller's requests -----------------------------------------------------------------

    def check_controller_request(self, controller_epoch: int, broker_epoch: int) -> ErrorCode | None:
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if broker_epoch >= 0 and broker_epoch < self.backend.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        self.controller_epoch = controller_epoch
        return None

    def _leader_endpoint(self, leader: int) -> tuple[str, int] | None:
        info = self.backend.image.brokers.get(leader)
        ep = None if info is None else (info.endpoint(self.inter_broker_listener) or info.endpoint())
        return None if ep is None else (ep.host, ep.port)

    async def apply_leader_and_isr(
        self, states: list[Any], topic_ids: Mapping[str, uuid.UUID], leaders: Mapping[int, tuple[str, int]]
    ) -> dict[TP, int]:
        """Become leader or follower of each partition, as the controller says."""
        results: dict[TP, int] = {}
        for name in {ps.topic_name for ps in states}:
            await self.topics.load_config(name)
        await self.create_logs([
            NewLog(
                ps.topic_name, ps.partition_index, self.topics.log_config(ps.topic_name), topic_ids.get(ps.topic_name),
                ps.leader_epoch if ps.leader == self.broker_id else None,
            )
            for ps in states
            if self.broker_id in ps.replicas and self.replicas.get(ps.topic_name, ps.partition_index) is None
        ])
        await self._write_new_epochs(states)
        now = self.clock.now_ms()
        for ps in states:
            key = (ps.topic_name, ps.partition_index)
            current = self.replicas.get(*key)
            if current is not None and (
                ps.leader_epoch < current.leader_epoch
                or (ps.leader_epoch == current.leader_epoch and ps.partition_epoch < current.state.partition_epoch)
            ):
                results[key] = int(ErrorCode.STALE_CONTROLLER_EPOCH)
                continue
            if self.broker_id not in ps.replicas:
                results[key] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if current is not None and self.replicas.log_dirs.offline(current.log_dir):
                # the replica is lost with its dir: the controller hears it from this answer
                self.fetchers.remove(*key)
                results[key] = int(ErrorCode.KAFKA_STORAGE_ERROR)
                continue
            state = PartitionState(
                ps.topic_name, ps.partition_index, tuple(ps.replicas), tuple(ps.isr),
                ps.leader, ps.leader_epoch, ps.partition_epoch,
            )
            topic_id = topic_ids.get(ps.topic_name)
            try:
                if ps.leader == self.broker_id:
                    self.fetchers.remove(*key)
                    self.replicas.make_leader(state, topic_id, now)
                    if current is None or not current.is_leader or current.leader_epoch != ps.leader_epoch:
                        log.info("%s-%d: leader at epoch %d, ISR %s", *key, ps.leader_epoch, list(ps.isr))
                else:
                    same = (
                        current is not None
                        and not current.is_leader
                        and current.state.leader == ps.leader
                        and current.leader_epoch == ps.leader_epoch
                        and self.fetchers.follows(*key)
                    )
                    if same and current is not None:
                        current.state = state
                    else:
                        p = self.replicas.make_follower(state, topic_id)
                        endpoint = leaders.get(ps.leader)
                        if endpoint is None and ps.leader >= 0:
                            endpoint = self._leader_endpoint(ps.leader)
                        if ps.leader >= 0 and endpoint is not None and not self.shutting_down:
                            self.fetchers.add(p, ps.leader, endpoint[0], endpoint[1])
                        else:
                            self.fetchers.remove(*key)
                results[key] = 0
            except (KafkaError, StorageError, OSError) as exc:
                log.exception("LeaderAndIsr for %s-%d failed", *key)
                results[key] = int(exc.code) if isinstance(exc, KafkaError) else int(ErrorCode.KAFKA_STORAGE_ERROR)
        self.on_hosting_changed(None)
        return results

    async def _write_new_epochs(self, states: list[Any]) -> None:
        """Write the leader-epoch checkpoints of the followers this LeaderAndIsr makes leaders
        at a newer epoch, on a worker thread: each is a file write and fsync (~3 ms), done on
        the event loop by :meth:`ReplicaManager.become_leader` one partition at a time, so a
        failover moving many partitions here held every client.  Their fetchers are removed
        first, so no follower append moves a log end offset meanwhile (the new epoch starts
        there); becoming leader then finds the epoch in place.  A write that fails here is tried
        again, and reported, by ``become_leader``."""
        moving: list[tuple[Log, int]] = []
        for ps in states:
            p = self.replicas.get(ps.topic_name, ps.partition_index)
            if (
                p is None
                or p.is_leader  # a leader appends meanwhile: its new epoch starts on the loop
                or ps.leader != self.broker_id
                or self.broker_id not in ps.replicas
                or ps.leader_epoch <= p.log.epochs.latest_epoch
                or ps.leader_epoch < p.leader_epoch
            ):
                continue
            self.fetchers.remove(ps.topic_name, ps.partition_index)
            moving.append((p.log, ps.leader_epoch))
        if not moving:
            return

        def write() -> None:
            for lg, epoch in moving:
                if lg.closed:
                    continue
                with contextlib.suppress(OSError, StorageError):
                    lg.start_epoch(epoch)

        await asyncio.get_running_loop().run_in_executor(None, write)

    async def apply_update_metadata(self, request: UpdateMetadataRequest) -> None:
        brokers, topics = topic_infos_from_update(request)
        image = MetadataImage(
            self.cluster_id, request.controller_id, brokers, topics, dict(self.backend.image.broker_configs)
        )
        self._full_metadata_seen = True
        await self.backend.apply_metadata(image)

    async def stop_replicas(self, items: list[tuple[str, int, bool]]) -> dict[TP, int]:
        errors = {}
        for topic, idx, delete in items:
            self.fetchers.remove(topic, idx)
            try:
                if delete and self.logs.get(topic, idx) is not None:
                    log.info("deleting %s-%d: the controller's StopReplica asked for its deletion", topic, idx)
                self.replicas.remove_partition(topic, idx, delete=delete)
                errors[(topic, idx)] = 0
            except (StorageError, OSError):
                log.exception("StopReplica for %s-%d failed", topic, idx)
                errors[(topic, idx)] = int(ErrorCode.KAFKA_STORAGE_ERROR)
        self.on_hosting_changed(None)
        return errors

    # -- the ISR (leader side) ---------------------------------------------------------------------

    def on_follower_fetch(self, p: Partition, replica: int, fetch_offset: int) -> None:
        """A follower's fetch: its log end offset moves the HW; a caught-up follower rejoins the ISR."""
        super().on_follower_fetch(p, replica, fetch_offset)
        # only a registered broker joins (KIP-841's rule): one whose registration is gone is out
        # of the ISR for good until it registers again, whatever it still fetches
        if not p.isr_pending and p.can_join_isr(replica) and replica in self.backend.image.brokers:
            new_isr = (*p.state.isr, replica)
            asyncio.get_running_loop().create_task(self.change_isr(p, new_isr))

    async def _isr_check(self) -> None:
        """Drop followers that have not caught up for ``replica.lag.time.max.ms`` from the ISR."""
        max_lag = self.settings.replication.replica_lag_time_max_ms
        now = self.clock.now_ms()
        await self._announce_isr_changes()
        changes = []
        for p in list(self.replicas.partitions.values()):
            if not p.is_leader or p.isr_pending:
                continue
            lagging = p.lagging_followers(now, max_lag)
            if lagging:
                new_isr = tuple(r for r in p.state.isr if r not in lagging)
                log.info("%s-%d: shrinking ISR from %s to %s", p.topic, p.index, list(p.state.isr), list(new_isr))
                changes.append(self.change_isr(p, new_isr))
        # all at once: one slow ZooKeeper write (up to its timeout) must not hold back the others,
        # each of them holding acks=all writes to its partition (change_isr logs its own failures)
        if changes:
            await asyncio.gather(*changes)

    async def change_isr(self, p: Partition, new_isr: tuple[int, ...]) -> None:
        """The leader writes its new ISR to the metadata store (version-checked against the state
        it was given) and announces it with an ISR change notification."""
        p.isr_pending = True
        try:
            state = p.state
            li = LeaderIsr(self.broker_id, state.leader_epoch, new_isr, self.controller_epoch)
            try:
                version = await self.backend.write_leader_isr(p.topic, p.index, li, state.partition_epoch)
            except StaleVersion:
                # someone wrote the state since we were given it (the controller, or our own
                # write whose answer was lost): adopt the store's ISR if we still lead at this
                # epoch; the next check retries the change against it
                found = await self.backend.read_leader_isr(p.topic, p.index)
                if found is None:
                    return
                current, stored = found
                if adopt_stored_isr(self.broker_id, state.leader_epoch, p.is_leader, p.leader_epoch,
                                     p.state.partition_epoch, current.leader, current.leader_epoch, stored):
                    log.info("%s-%d: ISR in the metadata store is %s (version %d), not %s; adopting it",
                             p.topic, p.index, list(current.isr), stored, list(p.state.isr))
                    self._adopt_isr(p, current.isr, stored)
                return
            if version is None:
                return
            if not adopt_stored_isr(self.broker_id, state.leader_epoch, p.is_leader, p.leader_epoch,
                                     p.state.partition_epoch, self.broker_id, state.leader_epoch, version):
                return  # a newer LeaderAndIsr arrived meanwhile: it wins
            # (a LeaderAndIsr of the same epoch that arrived while we wrote carries an older
            # partition epoch than our write: the store now holds our ISR, so we keep it)
            shrunk = any(r not in new_isr for r in state.isr)
            if shrunk:
                log.info("%s-%d: ISR shrunk to %s", p.topic, p.index, list(new_isr))
            else:
                log.info("%s-%d: ISR expanded to %s", p.topic, p.index, list(new_isr))
            if self.metrics is not None:
                if shrunk:
                    self.metrics.isr_shrinks += 1
                else:
                    self.metrics.isr_expands += 1
            self._adopt_isr(p, new_isr, version)
            self._unannounced.add((p.topic, p.index))
            await self._announce_isr_changes()
        except Exception:
            log.exception("ISR change of %s-%d failed", p.topic, p.index)
        finally:
            p.isr_pending = False

    async def _announce_isr_changes(self) -> None:
        """One ISR change notification for every change not yet announced (if any)."""
        if self._dir_failure_pending:
            await self._announce_dir_failure()
        if not self._unannounced:
            return
        tps = sorted(self._unannounced)
        self._unannounced.difference_update(tps)
        try:
            await self.backend.notify_isr_change(tps)
        except Exception as exc:
            self._unannounced.update(tps)
            log.warning("could not announce the ISR change of %d partitions to the controller (%s); "
                        "retrying at the next ISR check", len(tps), exc)

    def _adopt_isr(self, p: Partition, isr: tuple[int, ...], version: int) -> None:
        """The leader's ISR is now ``isr`` at partition state version ``version``: the HW may
        move (a shrink releases acks=all waiters held by the removed replicas)."""
        p.state = replace(p.state, isr=isr, partition_epoch=version)
        now = self.clock.now_ms()
        for r in isr:
            p.follower_caught_up.setdefault(r, now)
        p.update_high_watermark()

    # -- controlled shutdown ----------------------------------------------------------------------

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away before this broker stops: at most
        ``controlled.shutdown.max.retries`` attempts, ``controlled.shutdown.retry.backoff.ms``
        apart.  The controller records new leaders in ZooKeeper, so with ZooKeeper unreachable
        from here (after a short grace for a reconnect) there is nothing to ask: the broker shuts
        down at once and the controller moves leadership when this broker's registration
        disappears, as after a crash."""
        replication = self.settings.replication
        if not replication.controlled_shutdown_enable:
            return
        # the controller's answer demotes this broker and takes it out of ISRs, with LeaderAndIsr
        # requests that make it a follower: were it to fetch, it would catch up and its leader
        # would take it back into the ISR just before it stops, and acks=all writes would then
        # wait replica.lag.time.max.ms for it (Kafka sends it StopReplica instead)
        self.shutting_down = True
        retries = replication.controlled_shutdown_max_retries
        backoff = replication.controlled_shutdown_retry_backoff_ms / 1000
        for attempt in range(retries):
            if attempt:
                await asyncio.sleep(backoff)
            if not await self._coordination_reachable(2.0):
                log.warning(
                    "controlled shutdown skipped: ZooKeeper is not reachable, so no controller can move "
                    "leadership now; shutting down without it"
                )
                return
            if not set(self.backend.image.brokers) - {self.broker_id}:
                # the last live broker: no replica anywhere could take over its leaderships, and the
                # attempts would only wait out their backoffs (the last broker of `cluster down`)
                log.info("controlled shutdown not needed: no other live broker to move leadership to")
                return
            controller = self.controller
            cid = controller.controller_id if controller is not None else -1
            if cid < 0:  # not known from the /controller watch: ask the store
                cid = await self.backend.controller_id()
            epoch = self.backend.broker_epoch
            if cid == self.broker_id and controller is not None and controller.active:
                remaining = await controller.call(
                    functools.partial(controller.controlled_shutdown, self.broker_id, epoch)
                )
                if not remaining:
                    log.info("controlled shutdown succeeded")
                    return
            else:
                endpoint = self._leader_endpoint(cid)
                if endpoint is not None:
                    channel = self.channel_factory(
                        endpoint[0], endpoint[1], client_id=f"broker-{self.broker_id}", timeout=30
                    )
                    try:
                        resp = await channel.request(
                            ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=epoch), 3
                        )
                    except (ConnectionError, TimeoutError, OSError) as exc:
                        log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
                        resp = None
                    finally:
                        await channel.close()
                    if resp is not None and resp.error_code == 0 and not resp.remaining_partitions:
                        log.info("controlled shutdown succeeded")
                        await self._wait_not_leading(5.0)
                        return
        log.warning("controlled shutdown did not complete after %d attempts; shutting down anyway", retries)

    async def _coordination_reachable(self, grace: float) -> bool:
        """Whether the metadata store answers, waiting up to ``grace`` s for a reconnect."""
        deadline = time.monotonic() + grace
        while not self.backend.reachable():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True

    async def _wait_not_leading(self, timeout: float) -> None:
        """Until the controller's LeaderAndIsr has made this broker a follower everywhere."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(p.is_leader and len(p.state.replicas) > 1 for p in self.replicas.partitions.values()):
                return
            await asyncio.sleep(0.05)


def log_topic_id(lg: Any) -> uuid.UUID | None:
    """The topic id a log's ``partition.metadata`` holds; None (logged) when unreadable."""
    try:
        return LogManager.topic_id(lg)
    except (StorageError, OSError, ValueError) as exc:
        log.warning("%s/partition.metadata is unreadable (%s): its topic id is unknown", lg.directory, exc)
        return None


_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def topic_infos_from_update(request: UpdateMetadataRequest) -> tuple[dict[int, BrokerInfo], dict[str, TopicInfo]]:
    """The brokers and topics an UpdateMetadata request describes."""
    brokers = {}
    for b in request.live_brokers:
        eps = tuple(
            Endpoint(e.listener, _PROTOCOL_NAMES.get(e.security_protocol, "PLAINTEXT"), e.host, e.port)
            for e in b.endpoints
        )
        brokers[b.id] = BrokerInfo(b.id, eps, b.rack)
    topics = {}
    for t in request.topic_states:
        parts = {
            ps.partition_index: PartitionState(
                t.topic_name,
                ps.partition_index,
                tuple(ps.replicas),
                tuple(ps.isr),
                ps.leader,
                ps.leader_epoch,
                ps.zk_version,
                tuple(ps.offline_replicas),
            )
            for ps in t.partition_states
        }
        topics[t.topic_name] = TopicInfo(t.topic_name, t.topic_id, parts, {}, is_internal(t.topic_name))
    return brokers, topics
