"""The broker: wires configuration, storage, the metadata backend and the network together.

Start-up: read or create ``meta.properties`` (broker id, cluster id — generated once as the
22-character URL-safe base64 of a random UUID, like Kafka), load every partition log (recovery
only after an unclean shutdown), start the metadata backend, host the partitions the image
assigns to this broker, then listen.  Background timers run retention, time-based flushes,
checkpoints, compaction and idle-connection reaping.  :meth:`Broker.stop` closes listeners and
connections, flushes every log, writes producer snapshots and checkpoints and leaves the
clean-shutdown marker so that the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import logging
import resource
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import odradek.broker.handlers  # noqa: F401  (registers the API handlers)
from odradek._clock import Clock, SystemClock
from odradek.broker.coordinator import GroupCoordinator
from odradek.broker.fetcher import ReplicaFetcherManager
from odradek.broker.limits import FDS_PER_PARTITION, PartitionBudget, partition_budget
from odradek.broker.logdirs import is_io_error
from odradek.broker.replica import Partition, ReplicaManager
from odradek.broker.server import KafkaConnection
from odradek.cluster.metadata import BrokerInfo, Endpoint, MetadataImage, PartitionState, TopicInfo
from odradek.config import BrokerConfig, ConfigError, Listener
from odradek.coordination import EmbeddedBackend, MetadataBackend
from odradek.coordination.embedded import is_deleted, read_cluster_id
from odradek.errors import ErrorCode, KafkaError
from odradek.records import (
    BatchBuilder,
    Compression,
    LegacyBatchBuilder,
    RecordsError,
    iter_batch_headers,
    read_batches,
)
from odradek.storage import Log, LogConfig, LogManager, StorageError
from odradek.storage.log import set_lock_factory
from odradek.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    META_PROPERTIES,
    read_meta_properties,
    write_meta_properties,
)

if TYPE_CHECKING:
    from odradek.broker.controller import Controller
    from odradek.coordination.zookeeper import ZooKeeperBackend

__all__ = ["Broker"]

log = logging.getLogger(__name__)

_CODECS = {
    "uncompressed": Compression.NONE,
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
PRODUCER_ID_BLOCK = 1000


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.clock = clock or SystemClock()
        self.connections: set[KafkaConnection] = set()
        self.max_queued = max(1, int(config.get("queued.max.requests")))
        self.stopping = False
        self.cluster_id = ""
        self.listeners: list[Listener] = []
        self.bound: dict[str, tuple[str, int]] = {}
        self._servers: list[_AcceptLoop] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._topic_configs: dict[str, LogConfig] = {}
        self._config_keys: dict[str, tuple[Any, Any]] = {}
        self._applied_topics: dict[str, TopicInfo] = {}
        self._next_pid = 0
        self._pid_limit = 0
        self._pid_lock = asyncio.Lock()
        self._executor: ThreadPoolExecutor | None = None
        # retention and compaction, one at a time, off the loop (DeleteRecords' file work too);
        # the logs swap their segment lists under a real lock
        set_lock_factory(threading.RLock)
        # a compaction pass on a worker thread is CPU-bound Python: the event loop, which drops
        # the GIL at every socket call, would wait up to the default 5 ms switch interval to get
        # it back each time; 1 ms keeps other clients' latency while the cleaner runs
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self._maintenance = asyncio.Lock()
        self._checkpointing = asyncio.Lock()
        self._checkpoint_pending = False
        self._maintenance_job: asyncio.Future[Any] | None = None
        self.logs: LogManager
        self.backend: MetadataBackend
        self.replicas: ReplicaManager
        self._groups: GroupCoordinator | None = None
        self.ready_after = 0.0
        # cluster mode (zookeeper.connect): the controller, followers' fetchers, fencing state
        self.zk_mode = bool(config.get("zookeeper.connect"))
        self.controller: Controller | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.controller_epoch = 0
        self._full_metadata_seen = False
        self._unknown_logs: set[tuple[str, int]] = set()

    # ------------------------------------------------------------------------------------------
    # start / stop

    async def start(self) -> None:
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        self.listeners = self.config.listeners
        for lst in self.listeners:
            if lst.security_protocol != "PLAINTEXT":
                raise ConfigError(
                    f"listener {lst}: security protocol {lst.security_protocol} is not supported yet "
                    "(only PLAINTEXT listeners work in this version)"
                )
        _raise_fd_limit()
        dirs = self.config.log_dirs
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        zk: ZooKeeperBackend | None = None
        if self.zk_mode:
            from odradek.coordination.zookeeper import ZooKeeperBackend

            timeout = self.config.get("zookeeper.connection.timeout.ms")
            zk = ZooKeeperBackend(
                str(self.config.get("zookeeper.connect")),
                int(self.config.get("zookeeper.session.timeout.ms")),
                int(timeout) if timeout is not None else None,
            )
            existing = next((_read_meta(d).get("cluster.id") for d in dirs if _read_meta(d)), None)
            zk_cluster = await zk.connect(existing)
            if existing is not None and existing != zk_cluster:
                await zk.stop()
                raise ConfigError(
                    f"the cluster id {zk_cluster} in ZooKeeper does not match {existing} in meta.properties: "
                    "these log dirs belong to another cluster"
                )
        self.cluster_id = self._identity(dirs, zk.cluster_id if zk is not None else None)
        workers = max(1, int(self.config.get("num.recovery.threads.per.data.dir")) * len(dirs))
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="odradek-io")
        executor = self._executor
        defaults = self.config.topic_defaults()
        on_disk = sum(1 for d in dirs for c in d.iterdir() if c.is_dir())
        try:
            self.logs = await loop.run_in_executor(
                executor,
                lambda: LogManager(dirs, defaults, clock=self.clock, parallel_map=executor.map, flush_inline=False),
            )
        except (OSError, StorageError) as exc:
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            if not isinstance(cause, OSError) or cause.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            budget = partition_budget(-1)
            raise ConfigError(
                f"cannot open the {on_disk} partition directories in {', '.join(map(str, dirs))}: the file "
                f"descriptor limit {budget.fd_limit} (ulimit -n) is too low for them (about "
                f"{on_disk * FDS_PER_PARTITION + budget.reserve} are needed); raise it (ulimit -n / LimitNOFILE) "
                "and start again. Nothing was changed"
            ) from None
        self.replicas = ReplicaManager(self.broker_id, self.logs, self.topic_log_config)
        self._next_pid, self._pid_limit = 0, 0
        # listen first so that port 0 resolves to the real port before it is advertised
        for lst in self.listeners:
            server = _AcceptLoop(self, lst.name, functools.partial(KafkaConnection, self, lst.name))
            try:
                await server.bind(lst.host, lst.port)
            except OSError:
                for s in self._servers:
                    s.close()
                server.close()
                raise
            self.bound[lst.name] = server.address
            self._servers.append(server)
        if zk is not None:
            self.backend = zk
            self.fetchers = ReplicaFetcherManager(self)
        else:
            self.backend = EmbeddedBackend(
                dirs[0], self.cluster_id, on_disk=self._logs_on_disk, internal_topics=self._internal_topic_configs()
            )
        self._groups = GroupCoordinator(self)
        self.backend.add_listener(self._apply_image)
        if zk is not None:
            # the controller sends its requests as soon as this broker registers
            for server in self._servers:
                server.start_serving()
        try:
            await self.backend.start(self._broker_info())
        except BaseException:
            for server in self._servers:
                server.close()
            if zk is not None:
                await zk.stop()
            raise
        self._apply_image(self.backend.image)
        budget = self.partition_budget()
        hosted = self._hosted_count()
        if hosted > budget.partitions:
            log.warning(
                "this broker hosts %d partitions, more than its limit of %s: no partition can be added "
                "until some are deleted or the limit raised",
                hosted, budget.describe(),
            )
        self.groups.start()
        if zk is not None:
            from odradek.broker.controller import Controller

            self.controller = Controller(self, zk)
            zk.on_registered.append(self.controller.on_new_session)
            self.controller.start()
            self._every(max(100, int(self.config.get("replica.lag.time.max.ms")) // 2), self._isr_check, "isr-shrink")
        else:
            for server in self._servers:
                server.start_serving()
        self._start_timers()
        self.ready_after = time.monotonic() - t0

    def _identity(self, dirs: list[Path], cluster_id: str | None = None) -> str:
        for d in dirs:
            props = _read_meta(d)
            if not props:
                continue
            if "broker.id" in props and int(props["broker.id"]) != self.broker_id:
                raise ConfigError(
                    f"{d}/meta.properties belongs to broker {props['broker.id']}, not broker.id={self.broker_id}"
                )
            if cluster_id is not None and props.get("cluster.id") not in (None, cluster_id):
                raise ConfigError(f"log dirs belong to different clusters ({cluster_id}, {props.get('cluster.id')})")
            cluster_id = props.get("cluster.id", cluster_id)
        if cluster_id is None and not self.zk_mode:
            # meta.properties was removed: keep the cluster id the metadata store recorded
            cluster_id = read_cluster_id(dirs[0])
            if cluster_id is not None:
                log.warning("%s is missing: rewriting it with the cluster id %s recorded in the metadata store",
                            dirs[0] / META_PROPERTIES, cluster_id)
        if cluster_id is None:
            cluster_id = new_cluster_id()
        for d in dirs:
            if read_meta_properties(d).get("cluster.id") != cluster_id:
                write_meta_properties(d, self.broker_id, cluster_id)
        return cluster_id

    def _broker_info(self) -> BrokerInfo:
        endpoints = []
        advertised = self.config.advertised_listeners
        for lst in advertised:
            host, port = lst.host, lst.port
            bound = self.bound.get(lst.name)
            if port == 0 and bound is not None:
                port = bound[1]
            if host in ("0.0.0.0", "::", ""):
                host = bound[0] if bound and bound[0] not in ("0.0.0.0", "::") else "127.0.0.1"
            endpoints.append(Endpoint(lst.name, lst.security_protocol, host, port))
        return BrokerInfo(self.broker_id, tuple(endpoints), self.config.get("broker.rack"))

    @property
    def single_node(self) -> bool:
        """No ZooKeeper: this broker is the whole cluster and its own controller (the embedded
        backend), so it answers the controller's admin APIs itself."""
        return self.config.get("zookeeper.connect") is None

    @property
    def advertised(self) -> list[Endpoint]:
        return list(self._broker_info().endpoints)

    async def stop(self) -> None:
        if self.stopping:
            return
        # from here on a call to an unreachable metadata store (ZooKeeper gone) fails at once:
        # shutdown takes at most the controlled.shutdown.* attempts, never ZooKeeper's retries
        self.backend.begin_shutdown()
        if self.controller is not None and self.config.get("controlled.shutdown.enable"):
            with contextlib.suppress(Exception):
                await self._controlled_shutdown()
        self.stopping = True
        if self.fetchers is not None:
            await self.fetchers.shutdown()
        if self.controller is not None:
            await self.controller.stop()
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        self._servers = []
        if self._groups is not None:
            await self._groups.stop()
        for p in self.replicas.partitions.values():
            p.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        job = self._maintenance_job
        if job is not None and not job.done():  # a compaction pass or retention still on a thread
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(job), 60)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._shutdown_storage)
        await self.backend.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def _shutdown_storage(self) -> None:
        """Flush and close every log, then checkpoints and the clean-shutdown markers.  A log
        dir that fails (full disk, I/O error) does not stop the shutdown: what could not be
        flushed or written is logged, the dir gets no clean-shutdown marker (the next start
        recovers its logs from the segments), and the other dirs shut down cleanly."""
        failures = self.replicas.log_dirs
        for lg in self.logs.logs():
            if lg.closed:
                continue
            d = lg.directory.parent
            if failures.offline(d):
                _close_unflushed(lg)
                continue
            try:
                lg.take_producer_snapshot()
            except (OSError, StorageError) as exc:
                log.warning("%s-%d: producer state snapshot not written at shutdown: %s", lg.topic, lg.partition, exc)
            try:
                lg.close()
            except (OSError, StorageError) as exc:
                failures.fail(d, exc, f"flushing {lg.topic}-{lg.partition} at shutdown", sync=True)
                log.warning("%s-%d: not flushed at shutdown (%s); recovered at the next start", lg.topic, lg.partition, exc)
                _close_unflushed(lg)
        try:
            self.logs.shutdown()
        except (OSError, StorageError) as exc:
            failures.fail(None, exc, "writing checkpoints at shutdown")
            log.warning("checkpoints not written at shutdown (%s): the next start recovers the logs", exc)
        for d in self.logs.dirs:
            if not failures.offline(d):
                continue
            # never a clean-shutdown marker for a failed dir: its logs must be recovered
            try:
                (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
            except OSError as exc:
                log.error("log dir %s is offline and its clean-shutdown marker could not be removed: %s", d, exc)
            else:
                log.warning("log dir %s was offline: its logs are recovered at the next start", d)

    # ------------------------------------------------------------------------------------------
    # metadata

    @property
    def groups(self) -> GroupCoordinator:
        if self._groups is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is starting")
        return self._groups

    @property
    def image(self) -> MetadataImage:
        return self.backend.image

    def _apply_image(self, image: MetadataImage) -> None:
        reconfigured = set()
        for topic in image.topics.values():
            # a topic's LogConfig is rebuilt only when its configs or the broker's dynamic
            # configs changed: rebuilding all of them for every image made each topic creation
            # cost O(topics) on the event loop (half of an auto-create's time at 500 topics)
            source = (topic.configs, image.broker_configs)
            if self._config_keys.get(topic.name) != source or topic.name not in self._topic_configs:
                self._topic_configs[topic.name] = self._log_config(topic)
                self._config_keys[topic.name] = source
                reconfigured.add(topic.name)
        for name in list(self._topic_configs):
            if name not in image.topics:
                del self._topic_configs[name]
                self._config_keys.pop(name, None)
        if self.zk_mode:
            self._apply_cluster_image(image)
            return
        hosted = set()
        failed: list[str] = []
        over: list[str] = []
        error: BaseException | None = None
        budget = self.partition_budget()
        reserve = self._internal_reserve(image)
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
        if self._groups is not None and (self._groups.loaded or "__consumer_offsets" in image.topics):
            self._groups.on_image()
        self._delete_deleted_logs(image, hosted)

    def _delete_deleted_logs(self, image: MetadataImage, hosted: set[tuple[str, int]]) -> None:
        """Delete the partition directories of the topic deletions the metadata recorded (also
        those deleted while this broker was down) — and nothing else: a log on disk the metadata
        does not know is kept and reported."""
        remaining: set[uuid.UUID | None] = set()
        for lg in list(self.logs.logs()):
            key = (lg.topic, lg.partition)
            if key in hosted:
                continue
            topic_id = self._log_topic_id(lg)
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
        if done and isinstance(self.backend, EmbeddedBackend):
            self.backend.deletions_done(done)

    def _log_topic_id(self, lg: Any) -> uuid.UUID | None:
        try:
            return LogManager.topic_id(lg)
        except (StorageError, OSError, ValueError) as exc:
            log.warning("%s/partition.metadata is unreadable (%s): its topic id is unknown", lg.directory, exc)
            return None

    def _logs_on_disk(self) -> dict[tuple[str, int], uuid.UUID | None]:
        """Every partition directory in the log dirs with the topic id its partition.metadata holds."""
        return {(lg.topic, lg.partition): self._log_topic_id(lg) for lg in self.logs.logs()}

    def _internal_topic_configs(self) -> dict[str, dict[str, str]]:
        """The configs ``__consumer_offsets`` is created with (also when it is rebuilt from the log dirs)."""
        return {
            "__consumer_offsets": {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self.config.get("offsets.topic.segment.bytes")),
            }
        }

    def _apply_cluster_image(self, image: MetadataImage) -> None:
        """In a cluster, LeaderAndIsr / StopReplica decide which partitions are hosted; an image
        only updates topic configs and, once complete, removes logs of deleted topics."""
        for (topic, _idx), p in self.replicas.partitions.items():
            cfg = self._topic_configs.get(topic)
            if cfg is not None and cfg is not p.log.config:
                p.log.update_config(cfg)
        if not self._full_metadata_seen:
            return
        for lg in list(self.logs.logs()):
            key = (lg.topic, lg.partition)
            if lg.topic not in image.topics and key not in self.replicas.partitions:
                log.info("deleting %s-%d: its topic no longer exists", *key)
                self.logs.delete(lg.topic, lg.partition)

    def _log_config(self, topic: TopicInfo) -> LogConfig:
        merged: dict[str, Any] = self.config.topic_defaults()
        merged.update(topic.configs)
        return LogConfig.from_dict(merged)

    def topic_log_config(self, topic: str) -> LogConfig:
        cfg = self._topic_configs.get(topic)
        if cfg is None:
            info = self.image.topics.get(topic)
            cfg = self._log_config(info) if info is not None else LogConfig.from_dict(self.config.topic_defaults())
        return cfg

    async def auto_create_topic(self, name: str) -> TopicInfo:
        return await self.create_topic(
            name, self.config.get("num.partitions"), self.config.get("default.replication.factor"), {}
        )

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        if name.startswith("__") and name in ("__consumer_offsets", "__transaction_state"):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{name} is an internal topic")
        count = len(assignments) if assignments else partitions
        if name not in self.image.topics:
            self.check_partition_limits(name, 0, count)
        try:
            return await self.backend.create_topic(
                name, partitions, replication_factor, configs, assignments, validate_only=validate_only
            )
        except (OSError, StorageError) as exc:
            if not is_io_error(exc):
                raise
            # the metadata or a new log could not be written (a full or failed disk)
            raise self.replicas.log_dirs.fail(None, exc, f"creating topic {name}") from exc

    async def delete_topic(self, name: str) -> None:
        if not self.config.get("delete.topic.enable"):
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "topic deletion is disabled (delete.topic.enable=false)")
        info = self.image.topics.get(name)
        if info is not None and info.internal:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{name} is an internal topic")
        await self.backend.delete_topic(name)

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, *, validate_only: bool
    ) -> None:
        info = self.image.topics.get(name)
        if info is not None and total > info.partition_count:
            self.check_partition_limits(name, info.partition_count, total - info.partition_count)
        await self.backend.create_partitions(name, total, assignments, validate_only=validate_only)

    # ------------------------------------------------------------------------------------------
    # limits: what a request may add, decided before anything is written

    def partition_budget(self) -> PartitionBudget:
        return partition_budget(int(self.config.get("max.broker.partitions")))

    def _hosted_count(self) -> int:
        image_count = sum(
            1 for t in self.image.topics.values() for s in t.partitions.values() if self.broker_id in s.replicas
        )
        return max(image_count, len(self.logs))

    def _internal_reserve(self, image: MetadataImage) -> int:
        """Room kept in the partition budget for ``__consumer_offsets`` until it exists (it is
        created on the first group request and groups need all of its partitions)."""
        if "__consumer_offsets" in image.topics:
            return 0
        return int(self.config.get("offsets.topic.num.partitions"))

    def check_partition_limits(self, topic: str, current: int, adding: int) -> None:
        """POLICY_VIOLATION unless ``topic`` may grow from ``current`` by ``adding`` partitions:
        ``max.partitions.per.topic`` and (single node) this broker's partition budget."""
        if adding <= 0:
            return
        per_topic = int(self.config.get("max.partitions.per.topic"))
        if current + adding > per_topic:
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"topic '{topic}' would have {current + adding} partitions, more than max.partitions.per.topic={per_topic}",
            )
        if self.zk_mode:
            return  # in a cluster the partitions spread over brokers whose limits this one does not know
        budget = self.partition_budget()
        hosted = self._hosted_count()
        reserve = self._internal_reserve(self.image)
        if hosted + reserve + adding > budget.partitions:
            kept = f" ({reserve} of them kept for __consumer_offsets)" if reserve else ""
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"adding {adding} partitions to topic '{topic}' would make this broker host "
                f"{hosted + reserve + adding} partitions{kept}, more than its limit of {budget.describe()}",
            )

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        await self.backend.set_topic_configs(name, configs)

    async def current_topic_configs(self, name: str) -> Mapping[str, str]:
        """A topic's overrides for DescribeConfigs: the metadata store's now (in a cluster,
        ZooKeeper's, as Kafka reads them), the image's while the store is unreachable."""
        info = self.image.topics.get(name)
        cached: Mapping[str, str] = info.configs if info is not None else {}
        if not self.backend.reachable():
            return cached
        try:
            return await self.backend.topic_config(name)
        except KafkaError as exc:
            log.warning("topic %s: configs not read from the metadata store (%s); reporting the cached ones", name, exc)
            return cached

    async def set_broker_configs(self, change: Mapping[str, str | None], replace_all: bool) -> None:
        current = dict(self.image.broker_configs) if not replace_all else {}
        for k, v in change.items():
            self.config.set_dynamic(k, v)
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        await self.backend.set_broker_configs(current)

    # ------------------------------------------------------------------------------------------
    # cluster mode: the controller's requests, followers, the ISR

    @property
    def inter_broker_listener(self) -> str | None:
        name = self.config.get("inter.broker.listener.name")
        return str(name) if name else None

    def offsets_replication_factor(self) -> int:
        rf = int(self.config.get("offsets.topic.replication.factor"))
        return rf if self.zk_mode else 1

    def check_controller_request(self, controller_epoch: int, broker_epoch: int) -> ErrorCode | None:
        if not self.zk_mode:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        zk = self._zk()
        if broker_epoch >= 0 and broker_epoch < zk.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        self.controller_epoch = controller_epoch
        return None

    def _zk(self) -> ZooKeeperBackend:
        from odradek.coordination.zookeeper import ZooKeeperBackend

        assert isinstance(self.backend, ZooKeeperBackend)
        return self.backend

    async def apply_leader_and_isr(
        self,
        states: list[Any],
        topic_ids: Mapping[str, uuid.UUID],
        leaders: Mapping[int, tuple[str, int]],
    ) -> dict[tuple[str, int], int]:
        """Become leader or follower of each partition, as the controller says."""
        assert self.fetchers is not None
        results: dict[tuple[str, int], int] = {}
        for name in {ps.topic_name for ps in states}:
            if name not in self._topic_configs:
                extra = await self._zk().topic_config(name)
                merged: dict[str, Any] = self.config.topic_defaults()
                merged.update(extra)
                self._topic_configs[name] = LogConfig.from_dict(merged)
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
            state = PartitionState(
                ps.topic_name,
                ps.partition_index,
                tuple(ps.replicas),
                tuple(ps.isr),
                ps.leader,
                ps.leader_epoch,
                ps.partition_epoch,
            )
            topic_id = topic_ids.get(ps.topic_name)
            try:
                if ps.leader == self.broker_id:
                    self.fetchers.remove(*key)
                    p = self.replicas.make_leader(state, topic_id, now)
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
                            info = self.image.brokers.get(ps.leader)
                            ep = None if info is None else (info.endpoint(self.inter_broker_listener) or info.endpoint())
                            endpoint = None if ep is None else (ep.host, ep.port)
                        if ps.leader >= 0 and endpoint is not None:
                            self.fetchers.add(p, ps.leader, endpoint[0], endpoint[1])
                        else:
                            self.fetchers.remove(*key)
                results[key] = 0
            except (KafkaError, StorageError, OSError) as exc:
                log.exception("LeaderAndIsr for %s-%d failed", *key)
                results[key] = int(exc.code) if isinstance(exc, KafkaError) else int(ErrorCode.KAFKA_STORAGE_ERROR)
        if self._groups is not None:
            self._groups.on_image()
        return results

    async def apply_update_metadata(self, request: Any) -> None:
        from odradek.broker.controller import topic_infos_from_update

        brokers, topics = topic_infos_from_update(request)
        image = MetadataImage(
            self.cluster_id, request.controller_id, brokers, topics, dict(self.image.broker_configs)
        )
        self._full_metadata_seen = True
        await self._zk().apply_metadata(image)

    async def stop_replicas(self, items: list[tuple[str, int, bool]]) -> dict[tuple[str, int], int]:
        assert self.fetchers is not None
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
        if self._groups is not None:
            self._groups.on_image()
        return errors

    def on_follower_fetch(self, p: Partition, replica: int, fetch_offset: int) -> None:
        """A follower's fetch: its log end offset moves the HW; a caught-up follower rejoins the ISR."""
        p.record_follower_fetch(replica, fetch_offset, self.clock.now_ms())
        p.update_high_watermark()
        if self.zk_mode and not p.isr_pending and p.can_join_isr(replica):
            new_isr = (*p.state.isr, replica)
            asyncio.get_running_loop().create_task(self._change_isr(p, new_isr))

    async def _isr_check(self) -> None:
        """Drop followers that have not caught up for ``replica.lag.time.max.ms`` from the ISR."""
        max_lag = int(self.config.get("replica.lag.time.max.ms"))
        now = self.clock.now_ms()
        changes = []
        for p in list(self.replicas.partitions.values()):
            if not p.is_leader or p.isr_pending:
                continue
            lagging = p.lagging_followers(now, max_lag)
            if lagging:
                new_isr = tuple(r for r in p.state.isr if r not in lagging)
                log.info("%s-%d: shrinking ISR from %s to %s", p.topic, p.index, list(p.state.isr), list(new_isr))
                changes.append(self._change_isr(p, new_isr))
        # all at once: one slow ZooKeeper write (up to its timeout) must not hold back the others,
        # each of them holding acks=all writes to its partition (_change_isr logs its own failures)
        if changes:
            await asyncio.gather(*changes)

    async def _change_isr(self, p: Partition, new_isr: tuple[int, ...]) -> None:
        """The leader writes its new ISR to ZooKeeper (version-checked against the state it was
        given) and announces it through ``/isr_change_notification``."""
        from odradek.cluster.controller import LeaderIsr
        from odradek.coordination.zookeeper import BadVersionError, NoNodeError

        zk = self._zk()
        p.isr_pending = True
        try:
            path = f"/brokers/topics/{p.topic}/partitions/{p.index}/state"
            state = p.state
            li = LeaderIsr(self.broker_id, state.leader_epoch, new_isr, self.controller_epoch)
            try:
                stat = await zk.store.set(path, li.to_json(), state.partition_epoch)
            except BadVersionError:
                # someone wrote the state since we were given it (the controller, or our own
                # write whose answer was lost): adopt ZooKeeper's ISR if we still lead at this
                # epoch; the next check retries the change against it
                data, zstat = await zk.store.get(path)
                current = LeaderIsr.from_json(data, zstat.version)
                if current.leader != self.broker_id or current.leader_epoch != state.leader_epoch:
                    return  # the controller moved on; its LeaderAndIsr will tell us
                if p.is_leader and p.leader_epoch == current.leader_epoch and p.state.partition_epoch <= zstat.version:
                    log.info("%s-%d: ISR in ZooKeeper is %s (version %d), not %s; adopting it",
                             p.topic, p.index, list(current.isr), zstat.version, list(p.state.isr))
                    self._adopt_isr(p, current.isr, zstat.version)
                return
            except NoNodeError:
                return
            if not p.is_leader or p.leader_epoch != state.leader_epoch or p.state.partition_epoch > stat.version:
                return  # a newer LeaderAndIsr arrived meanwhile: it wins
            # (a LeaderAndIsr of the same epoch that arrived while we wrote carries an older
            # partition epoch than our write: ZooKeeper now holds our ISR, so we keep it)
            if any(r not in new_isr for r in state.isr):
                log.info("%s-%d: ISR shrunk to %s", p.topic, p.index, list(new_isr))
            else:
                log.info("%s-%d: ISR expanded to %s", p.topic, p.index, list(new_isr))
            self._adopt_isr(p, new_isr, stat.version)
            with contextlib.suppress(Exception):
                await zk.notify_isr_change([(p.topic, p.index)])
        except Exception:
            log.exception("ISR change of %s-%d failed", p.topic, p.index)
        finally:
            p.isr_pending = False

    def _adopt_isr(self, p: Partition, isr: tuple[int, ...], version: int) -> None:
        """The leader's ISR is now ``isr`` at partition state version ``version``: the HW may
        move (a shrink releases acks=all waiters held by the removed replicas)."""
        p.state = replace(p.state, isr=isr, partition_epoch=version)
        now = self.clock.now_ms()
        for r in isr:
            p.follower_caught_up.setdefault(r, now)
        p.update_high_watermark()

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away before this broker stops: at most
        ``controlled.shutdown.max.retries`` attempts, ``controlled.shutdown.retry.backoff.ms``
        apart.  The controller records new leaders in ZooKeeper, so with ZooKeeper unreachable
        from here (after a short grace for a reconnect) there is nothing to ask: the broker shuts
        down at once and the controller moves leadership when this broker's registration
        disappears, as after a crash."""
        from odradek.broker.channel import BrokerChannel
        from odradek.protocol.messages.controlled_shutdown import ControlledShutdownRequest

        zk = self._zk()
        retries = int(self.config.get("controlled.shutdown.max.retries"))
        backoff = int(self.config.get("controlled.shutdown.retry.backoff.ms")) / 1000
        for attempt in range(retries):
            if attempt:
                await asyncio.sleep(backoff)
            if not await self._coordination_reachable(2.0):
                log.warning(
                    "controlled shutdown skipped: ZooKeeper is not reachable, so no controller can move "
                    "leadership now; shutting down without it"
                )
                return
            if not set(self.image.brokers) - {self.broker_id}:
                # the last live broker: no replica anywhere could take over its leaderships, and the
                # attempts would only wait out their backoffs (the last broker of `cluster down`)
                log.info("controlled shutdown not needed: no other live broker to move leadership to")
                return
            controller = self.controller
            cid = controller.controller_id if controller is not None else -1
            if cid < 0:  # not known from the /controller watch: ask ZooKeeper
                data, _ = await zk.store.get_or_none("/controller")
                cid = int(data["brokerid"]) if data else -1
            if cid == self.broker_id and controller is not None and controller.active:
                remaining = await controller.call(
                    functools.partial(controller.controlled_shutdown, self.broker_id, zk.broker_epoch)
                )
                if not remaining:
                    log.info("controlled shutdown succeeded")
                    return
            else:
                info = self.image.brokers.get(cid)
                ep = None if info is None else (info.endpoint(self.inter_broker_listener) or info.endpoint())
                if ep is not None:
                    channel = BrokerChannel(ep.host, ep.port, client_id=f"broker-{self.broker_id}", timeout=30)
                    try:
                        resp = await channel.request(
                            ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=zk.broker_epoch), 3
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

    # ------------------------------------------------------------------------------------------
    # partitions for requests

    def produce_partition(self, topic: str, partition: int) -> Partition:
        info = self.image.topics.get(topic)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{topic}' does not exist")
        if info.internal:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"clients may not write to the internal topic {topic}")
        if partition not in info.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {topic}-{partition} does not exist")
        return self._led_here(topic, partition)

    def _led_here(self, topic: str, partition: int) -> Partition:
        """The partition this broker leads; NOT_LEADER_OR_FOLLOWER (the client refreshes its
        metadata) when the partition exists but lives on other brokers."""
        p = self.replicas.get(topic, partition)
        if p is None and self.rehost(topic, partition) is None:
            state = self.image.partition(topic, partition)
            if state is not None:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} is led by broker {state.leader}, not here"
                )
        return self.replicas.leader_partition(topic, partition)

    def rehost(self, topic: str, partition: int) -> Partition | None:
        """Single node: host a partition of the image whose log could not be created when the
        image was applied (a full or failed log dir), now that it is used; None when the image
        does not assign it here.  Raises KAFKA_STORAGE_ERROR while it still cannot be created."""
        if self.zk_mode:
            return None
        info = self.image.topics.get(topic)
        state = info.partitions.get(partition) if info is not None else None
        if info is None or state is None or self.broker_id not in state.replicas:
            return None
        p = self.replicas.become_leader(state, info.topic_id)
        log.info("%s-%d: its log is created now (it could not be when the topic was applied)", topic, partition)
        if self._groups is not None and info.internal:
            self._groups.on_image()
        return p

    def fetch_partition(self, topic: str, partition: int, current_leader_epoch: int, replica_id: int) -> Partition:
        if topic not in self.image.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{topic}' does not exist")
        p = self._led_here(topic, partition)
        if self.replicas.log_dirs.any_failed:
            self.replicas.log_dirs.check_read(p.log_dir)  # an offline dir serves nothing
        if current_leader_epoch >= 0:
            if current_leader_epoch < p.leader_epoch:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"epoch {current_leader_epoch} < {p.leader_epoch}")
            if current_leader_epoch > p.leader_epoch:
                raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {current_leader_epoch} > {p.leader_epoch}")
        return p

    def recompress_for(self, p: Partition, records: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """Apply the topic's ``compression.type``: ``producer`` keeps batches as sent."""
        target = p.log.config.compression_type
        if target == "producer":
            return records
        codec = _CODECS[target]
        try:
            headers = list(iter_batch_headers(records))
            if all(h.compression == codec for h in headers):
                return records
            out = bytearray()
            for batch in read_batches(bytes(records)):
                if batch.magic == 2:
                    builder = BatchBuilder(
                        compression=codec,
                        producer_id=batch.producer_id,
                        producer_epoch=batch.producer_epoch,
                        base_sequence=batch.base_sequence,
                        is_transactional=batch.is_transactional,
                        is_control=batch.is_control,
                    )
                    for r in batch.records:
                        builder.append(r.timestamp, r.key, r.value, r.headers, offset_delta=r.offset - batch.base_offset)
                    out += builder.build()
                else:
                    legacy = LegacyBatchBuilder(batch.magic, compression=codec if codec != Compression.ZSTD else 0)
                    for r in batch.records:
                        legacy.append(r.timestamp, r.key, r.value)
                    out += legacy.build()
            return out
        except RecordsError as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc

    async def allocate_producer_id(self) -> int:
        async with self._pid_lock:
            if self._next_pid >= self._pid_limit and self.zk_mode:
                from odradek.coordination.zookeeper import PRODUCER_ID_BLOCK as ZK_BLOCK

                start = await self._zk().allocate_producer_id_block()
                self._next_pid, self._pid_limit = start, start + ZK_BLOCK
            if self._next_pid >= self._pid_limit:
                path = self.config.log_dirs[0] / "producer-id-block"
                start = int(path.read_text()) if path.exists() else 0
                from odradek.storage.checkpoint import write_atomic

                write_atomic(path, str(start + PRODUCER_ID_BLOCK))
                self._next_pid, self._pid_limit = start, start + PRODUCER_ID_BLOCK
            pid = self._next_pid
            self._next_pid += 1
            return pid

    # ------------------------------------------------------------------------------------------
    # background work

    def _every(self, interval_ms: int, fn: Callable[[], Awaitable[None]], name: str) -> None:
        async def run() -> None:
            while not self.stopping:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except (KafkaError, StorageError, OSError) as exc:
                    if is_io_error(exc):
                        # through the log dirs' failure channel, which logs each failure once
                        self.replicas.log_dirs.fail(None, exc, f"running the {name} task", sync=name == "flush")
                    else:
                        log.exception("background task %s failed", name)

        self._tasks.append(asyncio.get_running_loop().create_task(run(), name=name))

    def _start_timers(self) -> None:
        cfg = self.config
        self._every(min(int(cfg.get("log.retention.check.interval.ms")), 2**31), self._retention, "retention")
        flush_interval = min(int(cfg.get("log.flush.scheduler.interval.ms")), 1000)
        self._every(flush_interval, self._flush_due, "flush")
        self._every(int(cfg.get("replica.high.watermark.checkpoint.interval.ms")), self._checkpoint, "checkpoint")
        if cfg.get("log.cleaner.enable"):
            self._every(int(cfg.get("log.cleaner.backoff.ms")), self._clean, "cleaner")
        self._every(max(1000, min(30000, int(cfg.get("connections.max.idle.ms")) // 2)), self._reap_idle, "idle")
        self._every(int(cfg.get("producer.id.expiration.check.interval.ms")), self._expire_producers, "producers")

    async def _retention(self) -> None:
        # segment removal and file deletion on a worker thread (the log swaps its segment list
        # under its lock); one maintenance job at a time, so retention and compaction of one
        # log never interleave
        await self.run_maintenance(self.logs.cleanup)

    async def _flush_due(self) -> None:
        failures = self.replicas.log_dirs
        for lg in self.logs.logs():
            if lg.closed:
                continue
            if lg.flush_time_due(self.clock.monotonic_ms()):
                d = lg.directory.parent
                if failures.offline(d):
                    continue
                try:
                    await asyncio.get_running_loop().run_in_executor(self._executor, lg.flush)
                except (OSError, StorageError) as exc:
                    if not is_io_error(exc):
                        raise
                    # this log's dir goes offline; the other logs are still flushed
                    failures.fail(d, exc, f"flushing {lg.topic}-{lg.partition}", sync=True)

    async def _checkpoint(self) -> None:
        async with self._checkpointing:  # one writer of the checkpoint files at a time
            self._checkpoint_pending = False
            await asyncio.get_running_loop().run_in_executor(self._executor, self.logs.checkpoint)

    def checkpoint_soon(self) -> None:
        """Write the checkpoints soon, once for all the requests asking meanwhile (a DeleteRecords
        storm writes them a few times, not once per request)."""
        if self._checkpoint_pending:
            return
        self._checkpoint_pending = True

        async def run() -> None:
            try:
                await self._checkpoint()
            except OSError:
                log.exception("checkpoint failed")

        asyncio.get_running_loop().create_task(run())

    async def _clean(self) -> None:
        # a compaction pass reads and rewrites whole segments: on a worker thread
        await self.run_maintenance(self.logs.clean)

    async def run_io(self, fn: Callable[[], Any]) -> Any:
        """Run file work for a request (DeleteRecords...) on the I/O executor."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def run_maintenance(self, fn: Callable[[], Any]) -> Any:
        """Run retention or compaction on the I/O executor, one job at a time (a request's file
        work, which must not wait for a compaction pass, goes through :meth:`run_io`)."""
        async with self._maintenance:
            job = asyncio.get_running_loop().run_in_executor(self._executor, fn)
            self._maintenance_job = job
            # shielded: a cancelled caller (stop) leaves the job running; stop waits for it
            # before closing the logs
            return await asyncio.shield(job)

    async def _reap_idle(self) -> None:
        limit = int(self.config.get("connections.max.idle.ms")) / 1000
        now = time.monotonic()
        for conn in list(self.connections):
            if now - conn.last_active > limit and conn.conn.in_flight == 0:
                log.info("closing idle connection from %s", conn.peer)
                conn.close()

    async def _expire_producers(self) -> None:
        expiration = int(self.config.get("producer.id.expiration.ms"))
        now = self.clock.now_ms()
        for lg in self.logs.logs():
            lg.producers.remove_expired(now, expiration)


def _close_unflushed(lg: Log) -> None:
    """Close a log's files without flushing them (its dir failed)."""
    for seg in lg.segments:
        with contextlib.suppress(OSError, StorageError):
            seg.close()
    lg.closed = True


class _AcceptLoop:
    """A listening socket and the task accepting its connections.

    asyncio's own server and uvloop's differ when ``accept()`` fails for lack of descriptors
    (EMFILE / ENFILE): asyncio logs a traceback every second, libuv silently accepts and closes
    the waiting connections.  Here the failure is logged once per episode (WARN, with the limit),
    the connection waits in the backlog, accept is retried after a short pause — never a spin —
    and a line says when connections are accepted again.
    """

    RETRY_S = 0.1

    def __init__(self, broker: Broker, name: str, factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self.broker = broker
        self.name = name
        self.factory = factory
        self.sockets: list[socket.socket] = []
        self.address: tuple[str, int] = ("", 0)
        self._tasks: list[asyncio.Task[None]] = []

    async def bind(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        seen = set()
        for family, type_, proto, _canon, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            sock = socket.socket(family, type_, proto)
            self.sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
            if port == 0 and self.address[1]:
                addr = (addr[0], self.address[1], *addr[2:])  # the same ephemeral port on every address
            sock.bind(addr)
            sock.listen(2048)
            sock.setblocking(False)
            if not self.address[1]:
                name = sock.getsockname()
                self.address = (name[0], name[1])

    def start_serving(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self.sockets:
            self._tasks.append(loop.create_task(self._accept(sock), name=f"accept-{self.name}"))

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        failing = False
        while True:
            try:
                conn, _peer = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if not failing:
                        failing = True
                        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                        log.warning(
                            "listener %s cannot accept connections: %s (file descriptor limit %d); new "
                            "connections wait until descriptors are free — fewer connections or partitions, "
                            "or a higher ulimit -n, fix this",
                            self.name, exc.strerror or exc, soft,
                        )
                elif exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EAGAIN, errno.EINTR):
                    continue
                else:
                    log.warning("listener %s: accept failed: %s", self.name, exc)
                await asyncio.sleep(self.RETRY_S)
                continue
            if failing:
                failing = False
                log.info("listener %s accepts connections again", self.name)
            try:
                conn.setblocking(False)
                if conn.family in (socket.AF_INET, socket.AF_INET6):
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.connect_accepted_socket(self.factory, conn)
            except asyncio.CancelledError:
                conn.close()
                raise
            except OSError as exc:
                conn.close()
                log.warning("listener %s: could not set up an accepted connection: %s", self.name, exc)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []


def _read_meta(d: Path) -> dict[str, str]:
    """``meta.properties`` of a log dir ({} if absent); a damaged one stops the start with a message."""
    path = d / META_PROPERTIES
    fix = (
        "restore it from a backup, or remove it and start again (the broker then writes a new one, "
        "keeping the cluster id recorded in cluster-metadata.json)"
    )
    try:
        props = read_meta_properties(d)
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is damaged: it is not text. Nothing was changed; {fix}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}. Nothing was changed; {fix}") from None
    if not props and not path.exists():
        return {}
    problem = None
    if not props.get("cluster.id"):
        problem = "it has no cluster.id"
    elif "broker.id" in props and not props["broker.id"].lstrip("-").isdigit():
        problem = f"broker.id {props['broker.id']!r} is not a number"
    if problem is not None:
        raise ConfigError(f"{path} is damaged: {problem}. Nothing was changed; {fix}")
    return props


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
