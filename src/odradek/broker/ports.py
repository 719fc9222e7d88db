"""The ports: what each group of request handlers may use of the broker, and nothing more.

A handler receives a :class:`~odradek.broker.dispatch.RequestContext` whose ``ports`` holds one
port per handler area (:class:`Ports`): produce, fetch, list_offsets, metadata, groups,
transactions, admin (topics, records, log dirs, producer ids), configs, acls, quotas, sasl and
cluster (the controller's and the inter-broker APIs).  A port is a small immutable record (a
``NamedTuple``: a tenth of a frozen dataclass's cost at import, attribute reads as fast) of what
its area calls, each typed by a ``typing.Protocol`` listing only the methods it uses, and of the
settings it reads (fixed ones as values, dynamic ones through a getter of the current group).
The composition root (:mod:`odradek.broker.app`) builds them from the concrete services, which
satisfy these protocols as they are; handlers import neither those services, the services
locator, the log (``odradek.storage``) nor the metadata store (``odradek.coordination``) -- the
import contracts in pyproject.toml say so, and the architecture tests check that each handler
module uses only its own area's port.

The few values the services hand back and the handlers look into (a partition, an append's
result, a read's file region, the errors a log raises) are named here too.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from odradek._clock import Clock
from odradek._scheduler import Scheduler
from odradek.broker.authorizer import Authorizer
from odradek.broker.faults import FaultInjector
from odradek.broker.logdir_moves import ReplicaDirMoves
from odradek.broker.logdirs import LogDirFailureChannel
from odradek.broker.offload import OffLoop
from odradek.broker.quotas import QuotaManager, ReplicationQuota
from odradek.broker.replica import Partition
from odradek.broker.telemetry import Granted
from odradek.cluster.client_metrics import ClientInfo
from odradek.cluster.group import Group, OffsetAndMetadata
from odradek.cluster.group_configs import GroupConfig
from odradek.cluster.metadata import MetadataImage, TopicInfo
from odradek.cluster.share_state import ShareKey, ShareState, StateBatch
from odradek.config import ConfigSource
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics
from odradek.security.acl import AclEntry
from odradek.settings import LiveSettings, ServerSettings, Settings
from odradek.storage import (
    AppendInfo,
    DecompressionBudgetExceeded,
    FileRegion,
    InvalidRecordError,
    LogConfig,
    OffsetOutOfRangeError,
    ReadResult,
    StorageError,
)

if TYPE_CHECKING:
    from odradek.broker.coordinators.consumer_groups import ConsumerGroupService
    from odradek.broker.coordinators.groups import GroupShard
    from odradek.broker.coordinators.share_groups import ShareGroupService
    from odradek.broker.coordinators.transactions import TxnDescription
    from odradek.broker.schema_validation import SchemaValidation
    from odradek.broker.share_partitions import SharePartitionManager, ShareSettings
    from odradek.cluster.group import JoinResult, SyncResult
    from odradek.protocol.messages.update_metadata import UpdateMetadataRequest
    from odradek.records import BatchHeader
    from odradek.storage import Log

__all__ = [
    "AclEntry",
    "AclPort",
    "AdminPort",
    "AppendInfo",
    "ClusterPort",
    "ConfigsPort",
    "ConnectionPort",
    "DecompressionBudgetExceeded",
    "FetchPort",
    "FileRegion",
    "GroupConfigStore",
    "GroupConfigView",
    "GroupsPort",
    "InvalidRecordError",
    "ListOffsetsPort",
    "MetadataPort",
    "OffsetOutOfRangeError",
    "Partition",
    "Ports",
    "ProducePort",
    "QuotasPort",
    "ReadResult",
    "RunState",
    "SaslPort",
    "ShareStateCoordinator",
    "TransactionsPort",
    "check_log_config",
]

TP = tuple[str, int]
_T = TypeVar("_T")


def check_log_config(configs: Mapping[str, Any]) -> None:
    """Raise INVALID_CONFIG (with the log's reason) unless a log could be built with these
    topic configs."""
    try:
        LogConfig.from_dict(configs)
    except StorageError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, exc.message) from exc


class RunState:
    """Where the broker is in its life (``stopping``: long polls answer at once)."""

    __slots__ = ("stopping",)

    def __init__(self) -> None:
        self.stopping = False


# -- the capabilities (each satisfied by a service as it is) ---------------------------------------


class ClientMetricsStore(Protocol):
    """The client-metrics subscriptions (KIP-714) in the metadata store."""

    async def alter_client_metrics(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]: ...


class GroupConfigView(Protocol):
    """A group's configs in effect (resource type GROUP: its overrides, else the broker's
    ``group.*`` settings), typed: what the group and share-group code reads
    (:class:`odradek.broker.group_configs.GroupConfigs` satisfies it)."""

    def for_group(self, group_id: str) -> GroupConfig: ...


class GroupConfigStore(GroupConfigView, Protocol):
    """The group configs as the config handlers read and change them."""

    def overrides(self, group_id: str) -> Mapping[str, str]: ...

    def groups(self) -> list[str]: ...

    async def alter(
        self, group_id: str, change: Mapping[str, str | None], *, replace_all: bool, validate_only: bool
    ) -> Mapping[str, str]: ...


class TelemetryReceiver(Protocol):
    """GetTelemetrySubscriptions and PushTelemetry (:class:`odradek.broker.telemetry.ClientTelemetry`)."""

    #: telemetry.max.bytes
    max_bytes: int

    def get_subscriptions(self, instance_id: uuid.UUID, info: ClientInfo) -> Granted: ...

    def push(
        self, instance_id: uuid.UUID, info: ClientInfo, sub_id: int, terminating: bool, compression: int, payload: bytes
    ) -> None: ...


class ImageSource(Protocol):
    """The metadata image now (replaced whole on every change)."""

    @property
    def image(self) -> MetadataImage: ...


class ProducePartitions(Protocol):
    def for_produce(self, topic: str, partition: int) -> Partition: ...


class FetchPartitions(Protocol):
    def for_fetch(self, topic: str, partition: int, current_leader_epoch: int, replica_id: int) -> Partition: ...


class FollowerPartitions(FetchPartitions, Protocol):
    def on_follower_fetch(self, p: Partition, replica: int, fetch_offset: int) -> None: ...


class ReplicaWrites(Protocol):
    def append(
        self,
        p: Partition,
        records: bytes | bytearray | memoryview,
        acks: int,
        validated: tuple[list[BatchHeader], LogConfig] | None = None,
        *,
        max_decompressed: int = ...,
    ) -> AppendInfo: ...

    async def wait_durable(self, p: Partition) -> None: ...


class ReplicaReads(Protocol):
    log_dirs: LogDirFailureChannel

    def read(
        self,
        p: Partition,
        offset: int,
        max_bytes: int,
        *,
        isolation_committed: bool,
        replica_id: int,
        min_one: bool,
        max_offset: int | None = None,
    ) -> ReadResult: ...


class HostedReplicas(Protocol):
    """The partitions hosted here (DeleteRecords, DescribeLogDirs, WriteTxnMarkers)."""

    log_dirs: LogDirFailureChannel
    #: moves between this broker's log dirs (AlterReplicaLogDirs)
    dir_moves: ReplicaDirMoves

    def get(self, topic: str, partition: int) -> Partition | None: ...

    def leader_partition(self, topic: str, partition: int) -> Partition: ...


class LogDirectories(Protocol):
    """The log dirs and the logs in them (DescribeLogDirs)."""

    dirs: list[Path]

    def logs(self) -> Iterable[Log]: ...


class FileWork(Protocol):
    """The log scheduler's I/O executor (file work for a request) and its checkpoints."""

    async def run_io(self, fn: Callable[[], Any]) -> Any: ...

    def checkpoint_soon(self) -> None: ...


class TopicAdmin(Protocol):
    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo: ...

    async def delete(self, name: str) -> None: ...

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, *, validate_only: bool
    ) -> None: ...


class TopicCreation(Protocol):
    async def auto_create(self, name: str) -> TopicInfo: ...


class TopicConfigs(Protocol):
    async def current_configs(self, name: str) -> Mapping[str, str]: ...

    async def exists(self, name: str) -> bool: ...

    async def set_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    async def set_broker_configs(self, change: Mapping[str, str | None], replace_all: bool) -> None: ...


class ConfigStore(Protocol):
    """The broker configuration as DescribeConfigs tells it: any config by name, where its value
    came from (the one place that reads settings by name)."""

    def get(self, name: str) -> Any: ...

    def is_set(self, name: str) -> bool: ...

    def source(self, name: str) -> ConfigSource: ...

    def static_value(self, name: str) -> tuple[bool, Any]: ...

    def topic_default(self, topic_config: str) -> tuple[Any, str | None]: ...


class ProducerIds(Protocol):
    async def allocate(self) -> int: ...


class GroupCoordinator(Protocol):
    """The group coordinator, as the group and transaction handlers use it."""

    @property
    def loading(self) -> bool: ...

    def partition_for(self, group_id: str) -> int: ...

    def describe(self, group_id: str) -> Group | None: ...

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None, *,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> dict[tuple[str, int], OffsetAndMetadata | None]: ...

    def list_groups(self, states: set[str] | None = None) -> list[Group]: ...

    def list_all(
        self, states: set[str] | None = None, types: set[str] | None = None
    ) -> list[tuple[str, str, str, str]]: ...

    @property
    def consumer(self) -> ConsumerGroupService: ...

    @property
    def share(self) -> ShareGroupService: ...

    def shard(self, group_id: str) -> GroupShard: ...

    async def ensure_topic(self) -> None: ...

    def check_storage(self, partition: int) -> None: ...

    def check(self, group_id: str) -> None: ...

    async def join(self, **kwargs: object) -> JoinResult: ...

    async def sync(self, **kwargs: object) -> SyncResult: ...

    def heartbeat(self, **kwargs: object) -> ErrorCode: ...

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]: ...

    async def commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
        *,
        api_version: int = 9,
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]: ...

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]: ...

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]: ...

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]: ...

    def pending_txn_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> bool: ...


class ShareStateCoordinator(Protocol):
    """The share coordinator (``__share_group_state``), as the handlers use it."""

    def partition_for(self, key: str) -> int: ...

    async def ensure_topic(self) -> None: ...

    def check_storage(self, partition: int) -> None: ...

    async def initialize(self, key: ShareKey, *, state_epoch: int, start_offset: int) -> None: ...

    async def write(
        self, key: ShareKey, *, leader_epoch: int, state_epoch: int, start_offset: int, batches: Sequence[StateBatch]
    ) -> None: ...

    async def read(self, key: ShareKey, *, leader_epoch: int) -> ShareState | None: ...

    async def summary(self, key: ShareKey) -> ShareState | None: ...

    async def delete(self, key: ShareKey) -> None: ...


class TransactionCoordinator(Protocol):
    """The transaction coordinator, as the handlers use it."""

    def partition_for(self, transactional_id: str) -> int: ...

    async def ensure_topic(self) -> None: ...

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int]: ...

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TP],
        *,
        verify_only: bool = False,
        client_tv: int = 0,
    ) -> None: ...

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TP], *, add: bool = False
    ) -> ErrorCode: ...

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None: ...

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *, client_tv: int = 0
    ) -> tuple[int, int]: ...

    def describe(self, transactional_id: str) -> TxnDescription: ...

    def list_all(self) -> list[TxnDescription]: ...


class FeatureStore(Protocol):
    """The cluster's finalized feature levels, changed by UpdateFeatures (KIP-584)."""

    async def update_features(
        self, change: Callable[[Mapping[str, int] | None], Mapping[str, int] | None]
    ) -> tuple[Mapping[str, int] | None, int]: ...


class MarkerWrites(Protocol):
    """A partition leader's side of WriteTxnMarkers."""

    async def write(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, partitions: list[TP]
    ) -> dict[TP, ErrorCode]: ...


class V0Offsets(Protocol):
    """Offsets kept the 0.8 way, in ZooKeeper (OffsetCommit / OffsetFetch v0 in a cluster)."""

    @property
    def stores_v0_offsets(self) -> bool: ...

    async def commit_v0_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None: ...

    async def fetch_v0_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]: ...


class AclStore(Protocol):
    async def alter_acls(
        self, resource: tuple[str, str, str], change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]
    ) -> frozenset[AclEntry]: ...


class ClientQuotaStore(Protocol):
    async def alter_client_quota(
        self, entity_path: str, change: Callable[[dict[str, float]], dict[str, float]]
    ) -> dict[str, float]: ...


class ScramStore(Protocol):
    async def set_user_scram(self, user: str, credentials: Mapping[str, str]) -> None: ...


class ReplicaControl(Protocol):
    """What the controller's requests (LeaderAndIsr, UpdateMetadata, StopReplica) change here."""

    def check_controller_request(self, controller_epoch: int, broker_epoch: int) -> ErrorCode | None: ...

    async def apply_leader_and_isr(
        self, states: list[Any], topic_ids: Mapping[str, Any], leaders: Mapping[int, tuple[str, int]]
    ) -> dict[TP, int]: ...

    async def apply_update_metadata(self, request: UpdateMetadataRequest) -> None: ...

    async def stop_replicas(self, items: list[tuple[str, int, bool]]) -> dict[TP, int]: ...


class ActiveController(Protocol):
    """The active controller's admin calls (the cluster's controller, or a single node's own)."""

    @property
    def active(self) -> bool: ...

    async def call(self, fn: Callable[[], Awaitable[_T]]) -> _T: ...

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]: ...

    async def elect_leaders(self, election_type: int, tps: list[TP] | None) -> dict[TP, ErrorCode]: ...

    async def alter_reassignments(
        self, changes: dict[TP, tuple[int, ...] | None], allow_replication_factor_change: bool = True
    ) -> dict[TP, tuple[ErrorCode, str | None]]: ...

    def list_reassignments(self, tps: list[TP] | None) -> Mapping[TP, Any]: ...


# -- one port per handler area ---------------------------------------------------------------------


class ProducePort(NamedTuple):
    #: Produce v13 names topics by id
    metadata: ImageSource
    partitions: ProducePartitions
    replicas: ReplicaWrites
    transactions: TransactionCoordinator
    offload: OffLoop
    authorizer: Authorizer | None
    metrics: BrokerMetrics | None
    #: transaction.partition.verification.enable (KIP-890)
    verify_transactions: bool
    #: the broker's scheduler: where acks=all waits time out
    timers: Scheduler
    #: broker-side schema validation of the topics that ask for it (None: every such batch refused)
    schemas: SchemaValidation | None = None


class FetchPort(NamedTuple):
    broker_id: int
    metadata: ImageSource
    partitions: FollowerPartitions
    replicas: ReplicaReads
    offload: OffLoop
    #: KIP-73: the leader side's replication throttle (None: none)
    leader_quota: ReplicationQuota | None
    authorizer: Authorizer | None
    metrics: BrokerMetrics | None
    #: fetch.max.bytes, fetch.response.max.records, fetch.response.target.bytes (read-only)
    settings: ServerSettings
    run: RunState
    #: the broker's scheduler: the long poll's deadline and the throttle's clock
    timers: Scheduler


class SharePort(NamedTuple):
    """Share groups at the partition leaders: ShareFetch and ShareAcknowledge."""

    broker_id: int
    metadata: ImageSource
    partitions: FetchPartitions
    replicas: ReplicaReads
    shares: SharePartitionManager
    #: a group's share settings (its share.* configs, else the broker's defaults)
    settings_for: Callable[[str], ShareSettings]
    run: RunState
    timers: Scheduler


class ListOffsetsPort(NamedTuple):
    partitions: FetchPartitions


class MetadataPort(NamedTuple):
    metadata: ImageSource
    #: whether the image holds the cluster's topics yet (a restarted cluster broker's may not)
    metadata_known: Callable[[], bool]
    topics: TopicCreation
    authorizer: Authorizer | None
    #: auto.create.topics.enable, auto.create.topics.max.per.request,
    #: max.request.partition.size.limit (read-only)
    settings: ServerSettings


class GroupsPort(NamedTuple):
    metadata: ImageSource
    groups: GroupCoordinator
    #: FindCoordinator of a transactional id
    transactions: TransactionCoordinator
    v0_offsets: V0Offsets
    now_ms: Callable[[], int]
    authorizer: Authorizer | None
    #: FindCoordinator of a share-partition (key type 2; None: no share coordinator)
    shares: ShareStateCoordinator | None = None
    #: each group's configs in effect (resource type GROUP: share.record.lock.duration.ms, ...)
    group_configs: GroupConfigView | None = None
    #: the share-group offset APIs: this broker's share partitions (their persister, and the cache an
    #: offsets reset drops) and the partitions it leads (a share group's lag)
    share_partitions: SharePartitionManager | None = None
    partitions: FetchPartitions | None = None


class TransactionsPort(NamedTuple):
    metadata: ImageSource
    transactions: TransactionCoordinator
    groups: GroupCoordinator
    markers: MarkerWrites
    replicas: HostedReplicas
    now_ms: Callable[[], int]
    #: transaction.partition.verification.enable (KIP-890)
    verify_transactions: bool


class ConfigsPort(NamedTuple):
    broker_id: int
    metadata: ImageSource
    topics: TopicConfigs
    #: every config by name, for DescribeConfigs (and the base of IncrementalAlterConfigs' lists)
    store: ConfigStore
    #: the typed settings now, and the check of a dynamic change before it is made
    settings: LiveSettings
    #: client-metrics subscriptions (resource type CLIENT_METRICS)
    client_metrics: ClientMetricsStore
    #: group configs (resource type GROUP)
    group_configs: GroupConfigStore


class AdminPort(NamedTuple):
    metadata: ImageSource
    topics: TopicAdmin
    partitions: FetchPartitions
    replicas: HostedReplicas
    logs: LogDirectories
    files: FileWork
    producer_ids: ProducerIds
    transactions: TransactionCoordinator
    #: KIP-599's controller mutation quota (None: client quotas are off)
    quotas: QuotaManager | None
    #: CreateTopics answers with the new topic's configs (DescribeConfigs' view)
    configs: ConfigsPort
    #: num.partitions, default.replication.factor, max.partitions.per.request (dynamic)
    settings: Callable[[], ServerSettings]
    #: the broker's clock (the mutation quota's windows)
    clock: Clock


class AclPort(NamedTuple):
    authorizer: Authorizer | None
    acls: AclStore


class QuotasPort(NamedTuple):
    metadata: ImageSource
    quotas: ClientQuotaStore


class SaslPort(NamedTuple):
    metadata: ImageSource
    credentials: ScramStore


class ClusterPort(NamedTuple):
    replication: ReplicaControl
    #: the active controller's admin calls (None: not known yet)
    controller: Callable[[], ActiveController | None]


class FeaturesPort(NamedTuple):
    """What ApiVersions advertises and which restricted APIs a listener serves (the cluster's
    finalized features, the inter-broker listener, whether telemetry is on), and UpdateFeatures."""

    metadata: ImageSource
    features: FeatureStore
    #: the listener other brokers and the controller reach this one on (upper case)
    inter_broker_listener: str | None
    #: whether GetTelemetrySubscriptions / PushTelemetry are served (metrics exported)
    telemetry: bool


class TelemetryPort(NamedTuple):
    """GetTelemetrySubscriptions / PushTelemetry (KIP-714)."""

    #: None: the broker exports no metrics, the two APIs are not served
    receiver: TelemetryReceiver | None


class ConnectionPort(NamedTuple):
    """What a connection itself uses: its limits, the client quotas, the request metrics and
    the log dirs' failure channel (a handler's I/O error takes its dir offline)."""

    settings: Settings
    quotas: QuotaManager | None
    metrics: BrokerMetrics | None
    log_dirs: LogDirFailureChannel
    #: told of a connection's end (its session): what the connection held ends with it (share sessions)
    closed: Callable[[object], None] | None = None
    #: fault scripting (a test broker's; None: none)
    faults: FaultInjector | None = None


class Ports(NamedTuple):
    """Every handler area's port, and the authorizer the request context asks."""

    authorizer: Authorizer | None
    connection: ConnectionPort
    produce: ProducePort
    fetch: FetchPort
    share: SharePort
    list_offsets: ListOffsetsPort
    metadata: MetadataPort
    groups: GroupsPort
    transactions: TransactionsPort
    admin: AdminPort
    configs: ConfigsPort
    acls: AclPort
    quotas: QuotasPort
    sasl: SaslPort
    cluster: ClusterPort
    features: FeaturesPort
    telemetry: TelemetryPort
    #: the share coordinator's RPCs 83-87 (None: no share coordinator)
    share_state: ShareStateCoordinator | None = None
