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
import logging
import resource
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import odradek.broker.handlers  # noqa: F401  (registers the API handlers)
from odradek._clock import Clock, SystemClock
from odradek.broker.coordinator import GroupCoordinator
from odradek.broker.replica import Partition, ReplicaManager
from odradek.broker.server import KafkaConnection
from odradek.cluster.metadata import BrokerInfo, Endpoint, MetadataImage, TopicInfo
from odradek.config import BrokerConfig, ConfigError, Listener
from odradek.coordination import EmbeddedBackend, MetadataBackend
from odradek.errors import ErrorCode, KafkaError
from odradek.records import (
    BatchBuilder,
    Compression,
    LegacyBatchBuilder,
    RecordsError,
    iter_batch_headers,
    read_batches,
)
from odradek.storage import LogConfig, LogManager, StorageError
from odradek.storage.manager import read_meta_properties, write_meta_properties

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
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._topic_configs: dict[str, LogConfig] = {}
        self._next_pid = 0
        self._pid_limit = 0
        self._pid_lock = asyncio.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.logs: LogManager
        self.backend: MetadataBackend
        self.replicas: ReplicaManager
        self._groups: GroupCoordinator | None = None
        self.ready_after = 0.0

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
        self.cluster_id = self._identity(dirs)
        workers = max(1, int(self.config.get("num.recovery.threads.per.data.dir")) * len(dirs))
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="odradek-io")
        executor = self._executor
        defaults = self.config.topic_defaults()
        self.logs = await loop.run_in_executor(
            executor, lambda: LogManager(dirs, defaults, clock=self.clock, parallel_map=executor.map)
        )
        for lg in self.logs.logs():
            lg.auto_flush = False
        self.replicas = ReplicaManager(self.broker_id, self.logs, self.topic_log_config)
        self._next_pid, self._pid_limit = 0, 0
        # listen first so that port 0 resolves to the real port before it is advertised
        for lst in self.listeners:
            server = await loop.create_server(
                lambda name=lst.name: KafkaConnection(self, name),  # type: ignore[misc]
                lst.host,
                lst.port,
                reuse_address=True,
                backlog=2048,
                start_serving=False,
            )
            sock = server.sockets[0].getsockname()
            self.bound[lst.name] = (sock[0], sock[1])
            self._servers.append(server)
        self.backend = EmbeddedBackend(dirs[0], self.cluster_id)
        await self.backend.start(self._broker_info())
        self._groups = GroupCoordinator(self)
        self.backend.add_listener(self._apply_image)
        self._apply_image(self.backend.image)
        self.groups.start()
        for server in self._servers:
            await server.start_serving()
        self._start_timers()
        self.ready_after = time.monotonic() - t0

    def _identity(self, dirs: list[Path]) -> str:
        cluster_id = None
        for d in dirs:
            props = read_meta_properties(d)
            if not props:
                continue
            if "broker.id" in props and int(props["broker.id"]) != self.broker_id:
                raise ConfigError(
                    f"{d}/meta.properties belongs to broker {props['broker.id']}, not broker.id={self.broker_id}"
                )
            if cluster_id is not None and props.get("cluster.id") not in (None, cluster_id):
                raise ConfigError(f"log dirs belong to different clusters ({cluster_id}, {props.get('cluster.id')})")
            cluster_id = props.get("cluster.id", cluster_id)
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
    def advertised(self) -> list[Endpoint]:
        return list(self._broker_info().endpoints)

    async def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
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
        if self._groups is not None:
            await self._groups.stop()
        for p in self.replicas.partitions.values():
            p.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._shutdown_storage)
        await self.backend.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def _shutdown_storage(self) -> None:
        for lg in self.logs.logs():
            if not lg.closed:
                with contextlib.suppress(Exception):
                    lg.take_producer_snapshot()
        self.logs.shutdown()

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
        hosted = set()
        for topic in image.topics.values():
            cfg = self._log_config(topic)
            self._topic_configs[topic.name] = cfg
            for state in topic.partitions.values():
                if self.broker_id not in state.replicas:
                    continue
                hosted.add((topic.name, state.partition))
                p = self.replicas.become_leader(state, topic.topic_id)
                p.log.auto_flush = False
        for key in list(self.replicas.partitions):
            if key not in hosted:
                self.replicas.remove_partition(key[0], key[1], delete=True)
        for name in list(self._topic_configs):
            if name not in image.topics:
                del self._topic_configs[name]
        if self._groups is not None and (self._groups.loaded or "__consumer_offsets" in image.topics):
            self._groups.on_image()
        # logs on disk for topics that no longer exist (deleted while this broker was down)
        for lg in list(self.logs.logs()):
            if (lg.topic, lg.partition) not in hosted:
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
        return await self.backend.create_topic(
            name, partitions, replication_factor, configs, assignments, validate_only=validate_only
        )

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
        await self.backend.create_partitions(name, total, assignments, validate_only=validate_only)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        await self.backend.set_topic_configs(name, configs)

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
    # partitions for requests

    def produce_partition(self, topic: str, partition: int) -> Partition:
        info = self.image.topics.get(topic)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{topic}' does not exist")
        if info.internal:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"clients may not write to the internal topic {topic}")
        if partition not in info.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {topic}-{partition} does not exist")
        return self.replicas.leader_partition(topic, partition)

    def fetch_partition(self, topic: str, partition: int, current_leader_epoch: int, replica_id: int) -> Partition:
        if topic not in self.image.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{topic}' does not exist")
        p = self.replicas.leader_partition(topic, partition)
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
                except (KafkaError, StorageError, OSError):
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
        self.logs.cleanup()

    async def _flush_due(self) -> None:
        for lg in self.logs.logs():
            if lg.closed or lg.log_end_offset <= lg.recovery_point:
                continue
            if self.clock.monotonic_ms() - lg.last_flush_ms >= lg.config.flush_ms:
                await asyncio.get_running_loop().run_in_executor(self._executor, lg.flush)

    async def _checkpoint(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self.logs.checkpoint)

    def checkpoint_soon(self) -> None:
        asyncio.get_running_loop().create_task(self._checkpoint())

    async def _clean(self) -> None:
        self.logs.clean()

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


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
