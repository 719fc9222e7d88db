"""The services the broker built, as one record of the composition root.

The broker's composition root (:mod:`odradek.broker.app`) keeps what it built here -- topics,
partitions, replication, producer ids, the coordinators, the controller (the cluster's, or a
single node's own answers), the log scheduler and the read-only facts (broker id, cluster id,
clock, the metadata image) -- and the metrics exporter reads the broker's state from it.  Request
handlers never see it: they get the narrow ports of :mod:`odradek.broker.ports`, built from these
services (the import contracts keep it so).  Nothing here starts, stops or wires anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek._clock import Clock
from odradek._scheduler import Scheduler
from odradek.broker.authorizer import Authorizer
from odradek.broker.coordinators import GroupCoordinator, MarkerWriter, TransactionCoordinator
from odradek.broker.coordinators.share_state import ShareCoordinator
from odradek.broker.group_configs import GroupConfigs
from odradek.broker.partitions import PartitionService
from odradek.broker.ports import RunState
from odradek.broker.producer_ids import ProducerIdManager
from odradek.broker.quotas import QuotaManager, ReplicationQuota
from odradek.broker.replica import ReplicaManager
from odradek.broker.replication import Replication
from odradek.broker.scheduler import LogScheduler
from odradek.broker.single_node import SingleNodeController
from odradek.broker.topics import TopicService
from odradek.cluster.metadata import MetadataImage
from odradek.coordination import MetadataBackend
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics
from odradek.storage import LogManager

if TYPE_CHECKING:
    from odradek.broker.controller import Controller
    from odradek.broker.schema_validation import RegistryView
    from odradek.broker.share_partitions import SharePartitionManager
    from odradek.broker.telemetry import ClientTelemetry

__all__ = ["Services"]


@dataclass(slots=True, eq=False)
class Services:
    broker_id: int
    cluster_id: str
    clock: Clock
    #: where timed rules wait (delayed operations, mutes), on ``clock``
    timers: Scheduler
    backend: MetadataBackend
    logs: LogManager
    replicas: ReplicaManager
    topics: TopicService
    replication: Replication
    partitions: PartitionService
    producer_ids: ProducerIdManager
    scheduler: LogScheduler
    coordinator: GroupCoordinator | None = None
    #: the active controller's admin calls: the cluster's Controller (None until it exists), or
    #: the single node's own answers
    controller: Controller | SingleNodeController | None = None
    #: KIP-73: the leader side's replication throttle (None: none)
    leader_quota: ReplicationQuota | None = None
    #: the ACL authorizer (None: none configured, everything is allowed)
    authorizer: Authorizer | None = None
    #: client quotas (None: not enforced)
    quotas: QuotaManager | None = None
    #: the counters /metrics exports (None: metrics are off, nothing is counted)
    metrics: BrokerMetrics | None = None
    #: the client-telemetry receiver (KIP-714; None: metrics are off, telemetry is not served)
    telemetry: ClientTelemetry | None = None
    #: the transaction coordinator, and the writer of the markers it sends (None: starting)
    txn_coordinator: TransactionCoordinator | None = None
    txn_markers: MarkerWriter | None = None
    #: the share coordinator (``__share_group_state``; None: starting)
    share_coordinator: ShareCoordinator | None = None
    #: where the broker is in its life (stopping: long polls answer at once)
    #: this broker's view of the schema registry's ``_schemas`` (None: it has no registry)
    schema_view: RegistryView | None = None
    #: share groups' partitions and sessions at this leader (None: starting)
    shares: SharePartitionManager | None = None
    #: the group configs (resource type GROUP): ``group_configs.for_group(id)`` is a group's typed
    #: configs in effect (None: starting)
    group_configs: GroupConfigs | None = None
    run: RunState = field(default_factory=RunState)

    @property
    def image(self) -> MetadataImage:
        return self.backend.image

    @property
    def groups(self) -> GroupCoordinator:
        if self.coordinator is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is starting")
        return self.coordinator

    @property
    def transactions(self) -> TransactionCoordinator:
        if self.txn_coordinator is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is starting")
        return self.txn_coordinator

    @property
    def markers(self) -> MarkerWriter:
        if self.txn_markers is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the broker is starting")
        return self.txn_markers
