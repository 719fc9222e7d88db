"""The broker's composition root: wires configuration, storage, the metadata store, the
services and the network together, and owns the broker's lifecycle.

Start-up: read or create ``meta.properties`` (broker id, cluster id — generated once as the
22-character URL-safe base64 of a random UUID, like Kafka), load every partition log (recovery
only after an unclean shutdown), open the metadata store, build the services (topics,
replication, partitions, producer ids, the group coordinator, the controller, the log
scheduler), host the partitions the image assigns to this broker, then listen.  With
``zookeeper.connect`` the store is ZooKeeper and the services are the cluster's
(:class:`~odradek.broker.replication.ClusterReplication`, the
:class:`~odradek.broker.controller.Controller`); without it, the embedded store and a single
node's (:class:`~odradek.broker.replication.LocalReplication`,
:class:`~odradek.broker.single_node.SingleNodeController`) — chosen here, once.
:meth:`Broker.stop` closes listeners and connections, flushes every log, writes producer
snapshots and checkpoints and leaves the clean-shutdown marker so that the next start skips
recovery.

Nothing but ``odradek serve`` (and tests) imports this module: handlers and services receive
what they use, never the broker.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import importlib.util
import logging
import resource
import socket
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import odradek.broker.handlers  # noqa: F401  (registers the API handlers)
from odradek._clock import Clock, SystemClock
from odradek._scheduler import LoopScheduler, Scheduler
from odradek._timeouts import wait_for
from odradek.broker import refusals
from odradek.broker.advertised import inter_broker_listener
from odradek.broker.authentication import SUPPORTED_MECHANISMS, ListenerSecurity
from odradek.broker.authorizer import authorizer_for
from odradek.broker.channel import BrokerChannel, ChannelSecurity
from odradek.broker.connections import ConnectionQuotas
from odradek.broker.coordinators import (
    CoordinatorPorts,
    GroupCoordinator,
    MarkerWriter,
    TransactionCoordinator,
)
from odradek.broker.coordinators.share_state import ShareCoordinator, ShareCoordinatorConfig
from odradek.broker.exporter import BrokerRegistry, MetricsAccess, MetricsServer
from odradek.broker.fault_control import FaultControlServer
from odradek.broker.faults import FaultInjector
from odradek.broker.group_configs import GroupConfigs
from odradek.broker.limits import FDS_PER_PARTITION, partition_budget
from odradek.broker.partitions import PartitionService
from odradek.broker.ports import (
    AclPort,
    AdminPort,
    ClusterPort,
    ConfigsPort,
    ConnectionPort,
    FeaturesPort,
    FetchPort,
    GroupsPort,
    ListOffsetsPort,
    MetadataPort,
    Ports,
    ProducePort,
    QuotasPort,
    SaslPort,
    SharePort,
    TelemetryPort,
    TransactionsPort,
)
from odradek.broker.producer_ids import ProducerIdManager
from odradek.broker.quotas import QuotaManager, ReplicationQuota
from odradek.broker.replica import Partition, ReplicaManager
from odradek.broker.replication import ClusterReplication, LocalReplication, Replication
from odradek.broker.scheduler import LogScheduler
from odradek.broker.schema_registry import BrokerSchemaRegistry, schema_registry_for
from odradek.broker.schema_validation import SchemaValidation
from odradek.broker.server import KafkaConnection
from odradek.broker.services import Services
from odradek.broker.share_dlq import DeadLetters, DeadLetterWriter
from odradek.broker.share_partitions import ShareKey, SharePartitionManager, ShareSettings
from odradek.broker.share_persister import SharePersister
from odradek.broker.single_node import SingleNodeController
from odradek.broker.telemetry import ClientTelemetry
from odradek.broker.tls import client_context, server_context
from odradek.broker.topics import TopicService, internal_topic_configs
from odradek.cluster.metadata import BrokerInfo, Endpoint, MetadataImage
from odradek.cluster.share_partition import Archived
from odradek.config import BrokerConfig, ConfigError, Listener
from odradek.coordination import EmbeddedBackend, MetadataBackend
from odradek.coordination.embedded import read_cluster_id
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics
from odradek.security import PlainClient, ScramClient, ScramCredential, parse_jaas
from odradek.settings import LiveSettings, Settings
from odradek.storage import Log, LogManager, StorageError
from odradek.storage.log import set_lock_factory
from odradek.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    META_PROPERTIES,
    read_meta_properties,
    write_meta_properties,
)
from odradek.tables import LeaderLog, TableWriters
from odradek.transport.listen import bind_sockets

if TYPE_CHECKING:  # imported when a cluster is wired: kazoo costs a single node start-up time and memory
    from odradek.broker.controller import Controller
    from odradek.coordination.zookeeper import ZooKeeperBackend

__all__ = ["Broker"]

log = logging.getLogger(__name__)


#: where /metrics listens in the embedded mode when metrics.port is not set
DEFAULT_METRICS_PORT = 9404


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class Broker:
    def __init__(
        self, config: BrokerConfig, *, clock: Clock | None = None, timers: Scheduler | None = None,
        test_mode: bool = False,
    ) -> None:
        """``timers``: where the broker's timed rules wait (a FakeScheduler in tests: the broker
        on fake time); ``clock``: the time they read (by default the scheduler's); ``test_mode``:
        a test broker, with fault scripting (``self.faults``; its listeners must be loopback)."""
        self.config = config
        self.test_mode = test_mode
        #: fault scripting (test mode only)
        self.faults: FaultInjector | None = None
        self.fault_control: FaultControlServer | None = None
        #: the typed settings (checked here: an invalid one stops the broker before it starts),
        #: replaced whole when a dynamic config changes
        self.settings = LiveSettings(config)
        settings = self.settings.current
        self.broker_id = settings.server.id
        self.clock = clock or (timers.clock if timers is not None else SystemClock())
        self.timers: Scheduler = timers or LoopScheduler(self.clock)
        refusals.REFUSALS.timers = self.timers  # the process's refusal log: on its last broker's time
        self.connections: set[KafkaConnection] = set()
        self.max_queued = max(1, settings.socket.queued_max_requests)
        self.stopping = False
        self.cluster_id = ""
        self.listeners: list[Listener] = []
        self.bound: dict[str, tuple[str, int]] = {}
        self._servers: list[_AcceptLoop] = []
        self._idle_task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        # retention and compaction, one at a time, off the loop (DeleteRecords' file work too);
        # the logs swap their segment lists under a real lock
        set_lock_factory(threading.RLock)
        # a compaction pass on a worker thread is CPU-bound Python: the event loop, which drops
        # the GIL at every socket call, would wait up to the default 5 ms switch interval to get
        # it back each time; 1 ms keeps other clients' latency while the cleaner runs
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self.ready_after = 0.0
        # built by start()
        self.logs: LogManager
        self.backend: MetadataBackend
        self.replicas: ReplicaManager
        self.topics: TopicService
        self.replication: Replication
        self.scheduler: LogScheduler
        self.services: Services
        self.ports: Ports
        self.groups: GroupCoordinator
        self.controller: Controller | None = None
        #: the counters /metrics exports and its HTTP listener (None: metrics are off)
        self.metrics: BrokerMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        #: the schema registry (None: off)
        self.schema_registry: BrokerSchemaRegistry | None = None

    # ------------------------------------------------------------------------------------------
    # start / stop

    async def start(self) -> None:
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        settings = self.settings.current
        self.listeners = list(settings.socket.listener_endpoints)
        if self.test_mode:  # fault scripting only where nothing but this machine reaches the broker
            for lst in self.listeners:
                if not _is_loopback(lst.host):
                    raise ConfigError(
                        f"test mode (fault scripting) needs loopback listeners; {lst.name} is on {lst.host or '0.0.0.0'}"
                    )
        # what each listener asks of its connections, and its TLS context: configuration errors
        # stop the start before anything is opened
        self._security = {
            lst.name: ListenerSecurity(settings, lst, self._scram_credential, self.timers) for lst in self.listeners
        }
        self._tls = {lst.name: server_context(settings, lst.name) for lst in self.listeners if self._security[lst.name].tls}
        _warn_plaintext_beyond_loopback(self.listeners)
        inter = settings.socket.inter_broker_listener_name
        self.connection_quotas = ConnectionQuotas(
            settings, [lst.name for lst in self.listeners], inter.upper() if inter else None, self.timers
        )
        _raise_fd_limit()
        dirs = list(settings.log.directories)
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        # the one choice between a cluster and a single node
        zk: ZooKeeperBackend | None = None
        if settings.zookeeper.connect:
            zk = await self._connect_zookeeper(dirs)
        self.cluster_id = self._identity(dirs, zk.cluster_id if zk is not None else None, embedded=zk is None)
        workers = max(1, settings.log.num_recovery_threads_per_data_dir * len(dirs))
        self._executor = executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="odradek-io")
        self.logs = await self._load_logs(dirs, executor)
        logs = self.logs
        backend: MetadataBackend = zk or EmbeddedBackend(
            dirs[0], self.cluster_id, on_disk=self._logs_on_disk, internal_topics=_single_node_internal(settings),
            clean_shutdown=lambda: all(logs.clean_shutdown.values()),
        )
        self.backend = backend
        self.replicas = ReplicaManager(self.broker_id, self.logs, lambda topic: self.topics.log_config(topic))
        self.topics = TopicService(self.broker_id, self.settings, backend, self.logs, self.replicas.log_dirs)
        self.topics.advertise = self._advertise
        args = (self.broker_id, settings, self.topics, self.replicas, backend, self.clock)
        cluster: ClusterReplication | None = None
        if zk is not None:
            self._channel_factory = functools.partial(
                BrokerChannel, security=_inter_broker_security(settings, self.listeners)
            )
            self.replication = cluster = ClusterReplication(
                *args,
                cluster_id=self.cluster_id,
                inter_broker_listener=inter or None,
                channel_factory=self._channel_factory,
                fetcher_settings=self.settings,
            )
        else:
            self.replication = LocalReplication(*args)
        self.scheduler = LogScheduler(self.settings, self.logs, self.replicas.log_dirs, executor, self.timers)
        ports = CoordinatorPorts(self.clock, self.replicas, self.topics, self.replication, self.scheduler, self.timers)
        authorizer = authorizer_for(settings.security, backend.image)
        self.groups = GroupCoordinator(settings.groups, ports, settings.share_groups)
        producer_ids = ProducerIdManager(backend)
        self.txn_markers = MarkerWriter(self.replicas, settings.server.request_timeout_ms, self.groups.complete_txn)
        self.txns = TransactionCoordinator(
            self.broker_id, settings.transactions, ports, producer_ids, self.txn_markers.write,
            channel_factory=self._channel_factory if zk is not None else None,
            inter_broker_listener=(inter or None) if zk is not None else None,
            request_timeout_ms=settings.server.request_timeout_ms,
            offsets_partition=self.groups.partition_for,
        )

        self.share_coordinator = ShareCoordinator(
            ShareCoordinatorConfig.from_settings(settings.share_coordinator, single_node=zk is None), ports
        )
        self.share_persister = SharePersister(
            self.broker_id, self.share_coordinator, lambda: backend.image, self.timers,
            channel_factory=self._channel_factory if zk is not None else None,
            inter_broker_listener=(inter or None) if zk is not None else None,
            request_timeout_ms=settings.server.request_timeout_ms,
        )

        self.schema_registry = schema_registry_for(
            self.broker_id, settings, ports, backend, embedded=zk is None, listeners=self._security,
            scram=self._scram_credential, authorizer=authorizer,
        )

        def on_hosting_changed(image: MetadataImage | None) -> None:
            self.groups.on_hosting_changed(image)
            self.txns.on_hosting_changed(image)
            self.share_coordinator.on_hosting_changed(image)
            if self.schema_registry is not None:
                self.schema_registry.on_hosting_changed(image)

        self.replication.on_hosting_changed = on_hosting_changed
        group_configs = GroupConfigs(backend, self.settings)

        def share_timeouts(group_id: str) -> tuple[int | None, int | None]:
            config = group_configs.for_group(group_id)
            return config.share_session_timeout_ms, config.share_heartbeat_interval_ms

        self.groups.share.set_group_timeouts(share_timeouts)
        self.groups.share.state_deleter = functools.partial(_delete_share_state, self)
        self.services = Services(
            broker_id=self.broker_id,
            cluster_id=self.cluster_id,
            clock=self.clock,
            timers=self.timers,
            backend=backend,
            logs=self.logs,
            replicas=self.replicas,
            topics=self.topics,
            replication=self.replication,
            partitions=PartitionService(backend, self.replicas, self.replication),
            producer_ids=producer_ids,
            scheduler=self.scheduler,
            coordinator=self.groups,
            txn_coordinator=self.txns,
            txn_markers=self.txn_markers,
            share_coordinator=self.share_coordinator,
            controller=SingleNodeController(self.broker_id, backend) if zk is None else None,
            authorizer=authorizer,
            leader_quota=ReplicationQuota(self.settings, "leader"),
            quotas=QuotaManager(settings.quotas, backend.image),
            schema_view=self.schema_registry,
            group_configs=group_configs,
            shares=SharePartitionManager(
                self.timers, _share_settings(group_configs, self.settings), self.share_persister,
                max_sessions=settings.share_groups.max_share_sessions,
            ),
        )
        assert self.services.quotas is not None
        self.dead_letters = _dead_letter_writer(self, zk is not None, inter)
        self.tables = self._table_writers()
        await self._start_metrics(embedded=zk is None)
        # what each group of handlers may use (after the metrics: the ports count with them)
        self.ports = handler_ports(self.services, self.config, self.settings)
        if self.test_mode:
            self.faults = _fault_injector(self)
            self.ports = self.ports._replace(connection=self.ports.connection._replace(faults=self.faults))
            self.fault_control = FaultControlServer(self.faults)
            await self.fault_control.start()
        backend.add_listener(self.services.quotas.on_image)
        if self.services.authorizer is not None:
            backend.add_listener(self.services.authorizer.on_image)
        # listen first so that port 0 resolves to the real port before it is advertised
        for lst in self.listeners:
            factory = functools.partial(
                KafkaConnection, self.ports, lst.name, self.connections, self.max_queued, self._security[lst.name],
                timers=self.timers,
            )
            server = _AcceptLoop(lst.name, factory, self._tls.get(lst.name), self.connection_quotas)
            server.metrics = self.metrics
            try:
                await server.bind(lst.host, lst.port)
            except OSError:
                for s in self._servers:
                    s.close()
                server.close()
                raise
            self.bound[lst.name] = server.address
            self._servers.append(server)
        if self.schema_registry is not None:  # bound before this broker registers: its URL is in the registration
            await self.schema_registry.bind(self._broker_info().endpoints[0].host)
        backend.add_preparer(self.replication.prepare_image)
        backend.add_listener(self._apply_image)
        backend.add_listener(self.tables.on_image)
        self.connection_quotas.on_image(backend.image)
        backend.add_listener(self.connection_quotas.on_image)
        if zk is not None:
            # the controller sends its requests as soon as this broker registers
            for server in self._servers:
                server.start_serving()
        try:
            await backend.start(self._broker_info())
        except BaseException:
            for server in self._servers:
                server.close()
            if zk is not None:
                await zk.stop()
            raise
        self._apply_image(backend.image)
        if self.settings.current.socket.advertised_listeners != settings.socket.advertised_listeners:
            await self._advertise()  # a dynamic advertised.listeners the store kept over a restart
        budget = self.topics.partition_budget()
        hosted = self.topics.hosted_count()
        if hosted > budget.partitions:
            log.warning(
                "this broker hosts %d partitions, more than its limit of %s: no partition can be added "
                "until some are deleted or the limit raised",
                hosted, budget.describe(),
            )
        self.groups.start()
        self.txns.start()
        self.share_coordinator.start()
        if self.schema_registry is not None:
            self.schema_registry.start()
        if zk is not None and cluster is not None:
            from odradek.broker.controller import Controller

            self.controller = Controller(
                self.broker_id, settings, zk, self.topics.log_config, channel_factory=self._channel_factory,
                timers=self.timers,
            )
            self.services.controller = cluster.controller = self.controller
            self.controller.metrics = self.metrics
            zk.on_registered.append(self.controller.on_new_session)
            self.controller.start()
        else:
            for server in self._servers:
                server.start_serving()
        self.scheduler.start()
        self.replication.start(self.scheduler)
        self.tables.start()
        self._idle_task = loop.create_task(self._reap_idle(), name="idle")
        self.ready_after = time.monotonic() - t0

    async def _start_metrics(self, *, embedded: bool) -> None:
        """The Prometheus endpoint (``metrics.host``/``metrics.port``): unset, on at 127.0.0.1:9404
        in the embedded mode (a free port when that one is taken), off in a cluster; -1: off."""
        metrics_settings = self.settings.current.metrics
        configured = metrics_settings.port
        port = configured if configured is not None else (DEFAULT_METRICS_PORT if embedded else -1)
        if port < 0:
            return
        metrics = self.metrics = self.services.metrics = BrokerMetrics()
        for lst in self.listeners:
            metrics.add_listener(lst.name)
        for part in (self.replicas, self.replication, self.scheduler, self.groups):
            part.metrics = metrics
        registry = BrokerRegistry(metrics, self.services, lambda: self.connections, [lst.name for lst in self.listeners])
        if self.schema_registry is not None:
            registry.add_source(self.schema_registry.metrics.families)
        registry.add_source(self.tables.families)
        backend = self.services.backend
        if importlib.util.find_spec("opentelemetry") is not None:  # the telemetry extra: clients' OTLP
            telemetry = self.services.telemetry = ClientTelemetry(
                self.timers, self.settings.current.metrics.telemetry_max_bytes, lambda: backend.image.client_metrics
            )
            registry.add_source(telemetry.families)
        else:
            log.info("client telemetry (KIP-714) is off: install odradek[telemetry] to receive clients' metrics")
        server = MetricsServer(registry, MetricsAccess.from_settings(metrics_settings))
        host = metrics_settings.host or "127.0.0.1"
        try:
            await server.start(host, port)
        except OSError as exc:
            if configured is not None or exc.errno != errno.EADDRINUSE:
                raise ConfigError(f"metrics: cannot listen on {host}:{port} (metrics.port): {exc.strerror or exc}") from None
            log.info("metrics: port %d is taken; serving /metrics on a free port instead", port)
            await server.start(host, 0)
        self.metrics_server = server
        log.info("metrics at %s", server.url)

    @property
    def schema_registry_url(self) -> str | None:
        """The URL of the schema registry listener (None: off)."""
        return self.schema_registry.url if self.schema_registry is not None else None

    @property
    def fault_control_url(self) -> str | None:
        """The URL of the fault control endpoint (test mode only; else None)."""
        return self.fault_control.url if self.fault_control is not None else None

    @property
    def metrics_url(self) -> str | None:
        """The URL of ``/metrics`` (None: metrics are off)."""
        return self.metrics_server.url if self.metrics_server is not None else None

    def _table_writers(self) -> TableWriters:
        """Topics as Iceberg tables: a writer per partition led here of a topic that asks for one."""
        replicas, schema_registry = self.replicas, self.schema_registry

        def source(p: Any) -> LeaderLog:
            def read(offset: int, max_bytes: int) -> bytes:
                return replicas.read(p, offset, max_bytes, isolation_committed=True, replica_id=-1, min_one=True).to_bytes()

            info = self.image.topics.get(p.topic)
            return LeaderLog(p.log, read, str(info.topic_id) if info is not None else None)

        return TableWriters(
            self.settings.current.tables, self.logs.dirs[0], lambda: list(replicas.partitions.values()), source,
            self.topics.log_config, schema_registry.current if schema_registry is not None else lambda: None,
            self.timers, self.clock, schema_registry.synced if schema_registry is not None else None,
        )

    async def _connect_zookeeper(self, dirs: list[Path]) -> ZooKeeperBackend:
        from odradek.coordination.zookeeper import ZooKeeperBackend

        zk_settings = self.settings.current.zookeeper
        zk = ZooKeeperBackend(
            str(zk_settings.connect), zk_settings.session_timeout_ms, zk_settings.connection_timeout_ms, clock=self.clock
        )
        existing = next((_read_meta(d).get("cluster.id") for d in dirs if _read_meta(d)), None)
        zk_cluster = await zk.connect(existing)
        if existing is not None and existing != zk_cluster:
            await zk.stop()
            raise ConfigError(
                f"the cluster id {zk_cluster} in ZooKeeper does not match {existing} in meta.properties: "
                "these log dirs belong to another cluster"
            )
        return zk

    async def _load_logs(self, dirs: list[Path], executor: ThreadPoolExecutor) -> LogManager:
        defaults = dict(self.settings.current.log.topic_defaults)
        # counted before loading: once the descriptors run out, not even the directory can be listed
        on_disk = sum(1 for d in dirs for c in d.iterdir() if c.is_dir())
        t0 = time.monotonic()
        try:
            logs = await asyncio.get_running_loop().run_in_executor(
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
        count = len(logs)
        if count:
            log.info("loaded %d partition logs in %.2f s", count, time.monotonic() - t0)
        return logs

    def _identity(self, dirs: list[Path], cluster_id: str | None, *, embedded: bool) -> str:
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
        if cluster_id is None and embedded:
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
        advertised = self.settings.current.socket.advertised_endpoints  # dynamic
        for lst in advertised:
            host, port = lst.host, lst.port
            bound = self.bound.get(lst.name)
            if port == 0 and bound is not None:
                port = bound[1]
            if host in ("0.0.0.0", "::", ""):
                host = bound[0] if bound and bound[0] not in ("0.0.0.0", "::") else "127.0.0.1"
            endpoints.append(Endpoint(lst.name, lst.security_protocol, host, port))
        registry = self.schema_registry.url if self.schema_registry is not None and self.schema_registry.bound_port else None
        return BrokerInfo(self.broker_id, tuple(endpoints), self.settings.current.server.broker_rack, registry_url=registry)

    async def _advertise(self) -> bool:
        """Register this broker's endpoints again (advertised.listeners changed at run time)."""
        return await self.backend.update_broker(self._broker_info())

    def reload_tls(self) -> bool:
        """Read every TLS listener's keystore and truststore again (SIGHUP): new connections use
        the new certificates, open ones keep theirs.  A file that does not load leaves that
        listener as it was, with an ERROR line.  Returns whether every listener reloaded."""
        ok = True
        for server in self._servers:
            if server.tls is None:
                continue
            try:
                server.tls = server_context(self.settings.current, server.name)
            except ConfigError as exc:
                ok = False
                log.error("listener %s keeps its TLS certificates: %s", server.name, exc)
                continue
            log.info("listener %s: TLS keystore and truststore reloaded", server.name)
        return ok

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A SCRAM user's stored credential, as every broker sees it (the metadata backend)."""
        text = self.backend.image.user_scram.get(user, {}).get(mechanism)
        if text is None:
            return None
        try:
            return ScramCredential.from_text(text)
        except ValueError as exc:
            log.warning("the SCRAM credential of user %s (%s) is damaged: %s", user, mechanism, exc)
            return None

    @property
    def advertised(self) -> list[Endpoint]:
        return list(self._broker_info().endpoints)

    @property
    def image(self) -> MetadataImage:
        return self.backend.image

    def _apply_image(self, image: MetadataImage) -> None:
        self.replication.apply_image(image, self.topics.refresh_configs(image))

    def _logs_on_disk(self) -> dict[tuple[str, int], uuid.UUID | None]:
        """Every partition directory in the log dirs with the topic id its partition.metadata holds."""
        from odradek.broker.replication import log_topic_id

        return {(lg.topic, lg.partition): log_topic_id(lg) for lg in self.logs.logs()}

    async def stop(self) -> None:
        if self.stopping:
            return
        # from here on a call to an unreachable metadata store (ZooKeeper gone) fails at once:
        # shutdown takes at most the controlled.shutdown.* attempts, never ZooKeeper's retries
        self.backend.begin_shutdown()
        with contextlib.suppress(Exception):
            await self.replication.controlled_shutdown()
        self.stopping = self.services.run.stopping = True
        await self.replication.stop()
        await self.replicas.dir_moves.close()  # moves between log dirs: unfinished copies stop
        if self.controller is not None:
            await self.controller.stop()
        for server in self._servers:
            server.close()
        if self.fault_control is not None:
            await self.fault_control.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
            await self.metrics_server.wait_closed()
        telemetry = getattr(getattr(self, "services", None), "telemetry", None)
        if telemetry is not None:
            telemetry.close()
        for conn in list(self.connections):
            conn.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._idle_task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await wait_for(server.wait_closed(), 2)
        self._servers = []
        if self.schema_registry is not None:
            await self.schema_registry.stop()
        await self.groups.stop()
        await self.txns.stop()
        await self.share_coordinator.stop()
        await self.share_persister.close()
        await self.dead_letters.stop()
        if getattr(self, "tables", None) is not None:
            await self.tables.stop()
        for p in self.replicas.partitions.values():
            p.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        # the timers stop; a compaction pass or retention still on a thread is waited for
        await self.scheduler.stop()
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


    async def _reap_idle(self) -> None:
        """Close connections idle for ``connections.max.idle.ms`` with nothing in flight."""
        idle_ms = self.settings.current.socket.connections_max_idle_ms
        limit = idle_ms
        interval = max(1000, min(30000, idle_ms // 2))
        while True:
            await self.timers.sleep(interval)
            now = self.clock.monotonic_ms()
            for conn in list(self.connections):
                if now - conn.last_active > limit and conn.conn.in_flight == 0:
                    log.info("closing idle connection from %s", conn.peer)
                    conn.close()



def _dead_letter_writer(self: Broker, cluster: bool, inter: str | None) -> DeadLetterWriter:
    """Share groups' dead letters (KIP-1191), fed by the share partitions' archived records."""
    svc = self.services
    replicas, topics = self.replicas, self.topics

    def read(p: Partition, offset: int) -> Any:
        return replicas.read(p, offset, 1 << 20, isolation_committed=False, replica_id=-1, min_one=True)

    async def append(p: Partition, batch: bytes) -> None:
        replicas.append(p, batch, -1)
        await replicas.wait_durable(p)

    writer = DeadLetterWriter(
        self.broker_id, lambda: svc.backend.image, replicas.leader_partition, read, append, topics.log_config,
        lambda: self.settings.current.share_groups.dlq_topic_name_prefix, self.clock,
        channel_factory=self._channel_factory if cluster else None,
        inter_broker_listener=inter or None,
        request_timeout_ms=self.settings.current.server.request_timeout_ms,
    )
    shares = svc.shares
    assert shares is not None

    def on_archived(key: ShareKey, p: Partition, archived: list[Archived]) -> None:
        settings = shares.settings_for(key[0])
        if settings.dlq_topic:
            writer.submit(DeadLetters(key[0], p.topic, key[1], p, tuple(archived), settings.dlq_topic,
                                      settings.dlq_copy_record))

    shares.on_archived = on_archived
    return writer

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

    def __init__(
        self,
        name: str,
        factory: Callable[..., asyncio.BaseProtocol],
        tls: ssl.SSLContext | None = None,
        quotas: ConnectionQuotas | None = None,
    ) -> None:
        self.name = name
        self.factory = factory
        self.tls = tls
        self.quotas = quotas
        self._handshakes: set[asyncio.Task[None]] = set()
        self.metrics: BrokerMetrics | None = None  # counts failed TLS handshakes
        self.sockets: list[socket.socket] = []
        self.address: tuple[str, int] = ("", 0)
        self._tasks: list[asyncio.Task[None]] = []

    async def bind(self, host: str, port: int) -> None:
        self.sockets = await bind_sockets(host, port, backlog=2048)
        name = self.sockets[0].getsockname()
        self.address = (name[0], name[1])

    def start_serving(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self.sockets:
            self._tasks.append(loop.create_task(self._accept(sock), name=f"accept-{self.name}"))

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        failing = False
        quotas = self.quotas
        while True:
            if quotas is not None:
                await quotas.wait_for_slot(self.name)
                await quotas.throttle(self.name)
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
            factory = self.factory
            if quotas is not None:
                ip = _peer[0] if isinstance(_peer, tuple) else str(_peer)
                if not quotas.admit(ip, self.name):
                    conn.close()
                    continue
                factory = functools.partial(self.factory, on_close=functools.partial(quotas.release, ip, self.name))
            if self.tls is not None:
                # the TLS handshake runs in a task of its own: a slow or silent client must not
                # hold up the accept loop
                task = loop.create_task(self._tls_connection(conn, _peer, factory))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)
                continue
            try:
                conn.setblocking(False)
                if conn.family in (socket.AF_INET, socket.AF_INET6):
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.connect_accepted_socket(factory, conn)
            except asyncio.CancelledError:
                conn.close()
                raise
            except OSError as exc:
                conn.close()
                self._released(_peer)
                log.warning("listener %s: could not set up an accepted connection: %s", self.name, exc)

    def _released(self, peer: object) -> None:
        """A connection counted by the quotas that never reached its protocol."""
        if self.quotas is not None:
            self.quotas.release(peer[0] if isinstance(peer, tuple) else str(peer), self.name)

    async def _tls_connection(self, conn: socket.socket, peer: object, factory: Callable[..., asyncio.BaseProtocol]) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(
                factory, conn, ssl=self.tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S
            )
        except asyncio.CancelledError:
            conn.close()
            self._released(peer)
            raise
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            conn.close()
            self._released(peer)
            host = peer[0] if isinstance(peer, tuple) else peer
            if self.metrics is not None:
                self.metrics.count(self.metrics.auth_failures, self.name)
            # Kafka's wording: "Failed authentication with /1.2.3.4 (SSL handshake failed)"
            log.info("Failed authentication with /%s on listener %s (SSL handshake failed: %s)", host, self.name,
                     getattr(exc, "reason", None) or exc or type(exc).__name__)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in list(self._handshakes):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []


#: the meta.properties versions this Odradek reads (it writes 0, Kafka's ZooKeeper-mode version)
META_PROPERTIES_VERSIONS = ("0",)


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
    version = props.get("version", "0")
    if version not in META_PROPERTIES_VERSIONS:
        # Kafka's KRaft mode writes version 1 (node.id, directory.id); a newer Odradek could
        # write another: refused rather than guessed at
        raise ConfigError(
            f"{path}: version {version} is not one this Odradek reads (it reads "
            f"{', '.join(META_PROPERTIES_VERSIONS)}): it was written by a newer Odradek or by another program "
            "(Kafka in KRaft mode writes version 1). Nothing was changed; run the version that wrote it, or "
            "give this broker another log dir"
        )
    problem = None
    if not props.get("cluster.id"):
        problem = "it has no cluster.id"
    elif "broker.id" in props and not props["broker.id"].lstrip("-").isdigit():
        problem = f"broker.id {props['broker.id']!r} is not a number"
    if problem is not None:
        raise ConfigError(f"{path} is damaged: {problem}. Nothing was changed; {fix}")
    return props


#: seconds a client has to complete the TLS handshake
TLS_HANDSHAKE_TIMEOUT_S = 10.0


def _fault_injector(broker: Broker) -> FaultInjector:
    """Fault scripting of a test broker, with the coordinators' actions it carries out (fencing a
    transactional producer, expiring a member's session)."""
    txns, groups, backend = broker.txns, broker.groups, broker.backend

    async def fence(transactional_id: str) -> None:
        meta = txns.metadata(transactional_id)
        try:
            await txns.init_producer_id(transactional_id, meta.timeout_ms if meta is not None else 60_000)
        except KafkaError as exc:  # an open transaction: its producer fenced, the transaction aborting
            if exc.code != ErrorCode.CONCURRENT_TRANSACTIONS:
                raise

    async def expire(group_id: str, member_id: str | None) -> int:
        return groups.expire_sessions(group_id, member_id)

    def topic_name(topic_id: uuid.UUID) -> str | None:
        info = backend.image.topic_by_id(topic_id)
        return None if info is None else info.name

    return FaultInjector(broker.timers, broker.connections, topic_name, fence=fence, expire=expire)


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _warn_plaintext_beyond_loopback(listeners: list[Listener]) -> None:
    """A broker that anyone on a network can reach in clear text, without authentication, says so."""
    if any(lst.security_protocol != "PLAINTEXT" for lst in listeners):
        return
    for lst in listeners:
        loopback = lst.host in ("localhost", "::1") or lst.host.startswith("127.")
        if not loopback:
            log.warning(
                "listener %s accepts anyone who reaches %s:%d in clear text without authentication; add an "
                "SSL or SASL_SSL listener (see docs/security.md) before exposing it to a network",
                lst.name, lst.host, lst.port,
            )


def _inter_broker_security(settings: Settings, listeners: list[Listener]) -> ChannelSecurity | None:
    """How this broker's own connections (followers, the controller, controlled shutdown) reach
    the other brokers: the inter-broker listener's protocol (``inter.broker.listener.name``, or
    the first listener), with the broker's truststore and keystore for TLS and, for SASL, the
    mechanism ``sasl.mechanism.inter.broker.protocol`` with the ``username`` and ``password``
    of that listener's JAAS config for the mechanism (Kafka's way)."""
    name = settings.socket.inter_broker_listener_name
    chosen = next((lst for lst in listeners if name and lst.name == name.upper()), None)
    if chosen is None and listeners:
        chosen = listeners[0]
    if chosen is None or chosen.security_protocol == "PLAINTEXT":
        return None
    tls = client_context(settings, chosen.name) if chosen.security_protocol in ("SSL", "SASL_SSL") else None
    if chosen.security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ChannelSecurity(tls)
    mechanism = settings.sasl.mechanism_inter_broker_protocol.upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(
            f"inter-broker listener {chosen}: sasl.mechanism.inter.broker.protocol={mechanism} is not supported "
            f"(one of {', '.join(SUPPORTED_MECHANISMS)})"
        )
    jaas = settings.for_listener(chosen.name, mechanism).sasl.jaas_config
    options = parse_jaas(str(jaas))[1] if jaas else {}
    user, password = options.get("username"), options.get("password")
    if not user or password is None:
        raise ConfigError(
            f"inter-broker listener {chosen}: its {mechanism} JAAS config (listener.name.{chosen.name.lower()}."
            f"{mechanism.lower()}.sasl.jaas.config) needs username and password for the brokers' own connections"
        )
    if mechanism == "PLAIN":
        return ChannelSecurity(tls, functools.partial(PlainClient, user, password))
    return ChannelSecurity(tls, functools.partial(ScramClient, mechanism, user, password))


def handler_ports(svc: Services, config: BrokerConfig, live: LiveSettings) -> Ports:
    """Each handler area's port, from the services the broker built: what that area uses and
    nothing more (the concrete services satisfy the ports' protocols as they are).  Settings a
    port reads are fixed values when read-only, a getter of the current group when dynamic."""
    settings = live.current
    image_source = svc.backend
    offload = svc.scheduler.offload
    groups, transactions = svc.groups, svc.transactions
    verify_transactions = settings.transactions.partition_verification_enable
    shares = svc.shares
    assert shares is not None and svc.group_configs is not None
    configs = ConfigsPort(svc.broker_id, image_source, svc.topics, config, live, svc.backend, svc.group_configs)
    return Ports(
        authorizer=svc.authorizer,
        connection=ConnectionPort(settings, svc.quotas, svc.metrics, svc.replicas.log_dirs, shares.connection_closed),
        produce=ProducePort(
            image_source, svc.partitions, svc.replicas, transactions, offload, svc.authorizer, svc.metrics,
            verify_transactions, svc.timers, SchemaValidation(svc.schema_view, offload),
        ),
        fetch=FetchPort(
            svc.broker_id, image_source, svc.partitions, svc.replicas, offload, svc.leader_quota, svc.authorizer,
            svc.metrics, settings.server, svc.run, svc.timers,
        ),
        share=SharePort(
            svc.broker_id, image_source, svc.partitions, svc.replicas, shares, shares.settings_for, svc.run, svc.timers,
        ),
        list_offsets=ListOffsetsPort(svc.partitions),
        metadata=MetadataPort(image_source, svc.backend.metadata_known, svc.topics, svc.authorizer, settings.server),
        groups=GroupsPort(
            image_source, groups, transactions, svc.backend, svc.clock.now_ms, svc.authorizer,
            shares=svc.share_coordinator, group_configs=svc.group_configs, share_partitions=shares,
            partitions=svc.partitions,
        ),
        transactions=TransactionsPort(
            image_source, transactions, groups, svc.markers, svc.replicas, svc.clock.now_ms, verify_transactions
        ),
        admin=AdminPort(
            image_source, svc.topics, svc.partitions, svc.replicas, svc.logs, svc.scheduler, svc.producer_ids,
            transactions, svc.quotas, configs, lambda: live.current.server, svc.clock,
        ),
        configs=configs,
        acls=AclPort(svc.authorizer, svc.backend),
        quotas=QuotasPort(image_source, svc.backend),
        sasl=SaslPort(image_source, svc.backend),
        # the cluster's controller exists once this broker has registered: looked up per request
        cluster=ClusterPort(svc.replication, lambda: svc.controller),
        features=FeaturesPort(
            image_source, svc.backend, inter_broker_listener(settings), svc.telemetry is not None
        ),
        telemetry=TelemetryPort(svc.telemetry),
        share_state=svc.share_coordinator,
    )


def _share_settings(configs: GroupConfigs, live: LiveSettings) -> Callable[[str], ShareSettings]:
    """A share group's settings at the partition leaders: its group configs (share.*), else the
    broker's group.share.* defaults; remembered while the group's configs stay the same."""
    made: dict[str, tuple[object, ShareSettings]] = {}

    def settings_for(group_id: str) -> ShareSettings:
        config = configs.for_group(group_id)
        hit = made.get(group_id)
        if hit is not None and hit[0] is config:
            return hit[1]
        reset = config.share_auto_offset_reset
        found = ShareSettings(
            lock_ms=config.share_record_lock_duration_ms,
            delivery_limit=config.share_delivery_count_limit,
            auto_offset_reset=reset.strategy,
            reset_duration_ms=reset.duration_ms,
            read_committed=config.share_read_committed,
            max_in_flight=live.current.share_groups.partition_max_record_locks,
            dlq_topic=config.dlq_topic_name or None,
            dlq_copy_record=config.dlq_copy_record_enable,
            renew_enabled=config.share_renew_acknowledge_enable,
        )
        if len(made) >= 10_000:
            made.clear()
        made[group_id] = (config, found)
        return found

    return settings_for


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _single_node_internal(settings: Settings) -> dict[str, dict[str, str]]:
    """The internal topics' configs on a single node: replicated once, so min.insync.replicas 1."""
    out = {}
    for name, configs in internal_topic_configs(settings).items():
        out[name] = {**configs, "min.insync.replicas": "1"} if "min.insync.replicas" in configs else configs
    return out


async def _delete_share_state(self: Broker, group_id: str) -> ErrorCode:
    """DeleteGroups of a share group: the state of its share partitions deleted at the share
    coordinators (every partition of every topic: DeleteShareGroupState answers NONE where there
    is none) and dropped from this leader's cache; the first error found, NONE when all went."""
    image = self.services.backend.image
    topics = {t.topic_id: sorted(t.partitions) for name, t in image.topics.items() if not name.startswith("__")}
    if not topics:
        return ErrorCode.NONE
    errors = await self.share_persister.delete(group_id, topics)
    shares = self.services.shares
    if shares is not None:
        for (topic_id, partition), code in errors.items():
            if code is ErrorCode.NONE:
                shares.forget((group_id, topic_id, partition))
    failed = [code for code in errors.values() if code is not ErrorCode.NONE]
    if failed:
        log.warning("share group %s: the state of %d share partitions could not be deleted (%s); the group stays",
                    group_id, len(failed), failed[0].name)
        return failed[0]
    return ErrorCode.NONE
