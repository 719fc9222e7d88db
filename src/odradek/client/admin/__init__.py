"""Admin and AsyncAdmin: topics, partitions, configs, offsets, records and the cluster.

``AsyncAdmin`` does the work on the caller's event loop; ``Admin`` runs one on an event loop in a
background thread and offers the same operations as blocking calls.  Both are configured like the
other clients (Kafka's names as a dict, or keyword arguments with underscores)::

    with Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        admin.create_topics([NewTopic("orders", num_partitions=3, configs={"retention.ms": 86400000})])
        admin.describe_topics(["orders"])["orders"].partitions[0].leader

Every operation takes ``timeout`` in seconds (default ``default.api.timeout.ms``); within it,
retriable errors (connection failures, NOT_CONTROLLER, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
...) are retried with backoff (``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``) after
fresh metadata.  As in Kafka's Java admin client, UNKNOWN_TOPIC_OR_PARTITION is final for admin
operations: the topic is absent from the metadata the operation just fetched.  Failures raise
:class:`~odradek.errors.KafkaError` with Kafka's code; an operation on several items that fails
for some raises :class:`AdminError` (a ``KafkaError`` with the code of the first failure) holding
every item's error and the results of the items that succeeded.

Routing follows Kafka: topic creation, deletion and partition changes go to the controller; a
broker's configs go to that broker, topic configs to any broker; offsets and record deletion to
each partition's leader.  Consumer-group operations go to each group's coordinator, found with
FindCoordinator and found again after COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or
NOT_COORDINATOR; listing groups asks every broker and merges the answers.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from odradek.client._runner import LoopThread
from odradek.client.admin._acls import AclAdmin
from odradek.client.admin._configs import ConfigAdmin
from odradek.client.admin._features import FeatureAdmin, FeatureMetadata
from odradek.client.admin._groups import GroupAdmin
from odradek.client.admin._quotas import SPECIFIED, ClientQuotaEntity, QuotaAdmin
from odradek.client.admin._records import RecordAdmin
from odradek.client.admin._replicas import (
    LogDirDescription,
    PartitionReassignment,
    ReplicaAdmin,
    ReplicaInfo,
    TopicPartitionReplica,
)
from odradek.client.admin._share_groups import (
    ShareGroupAdmin,
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffset,
)
from odradek.client.admin._topics import TopicAdmin
from odradek.client.admin._transactions import TransactionAdmin
from odradek.client.admin._users import UserAdmin
from odradek.client.admin.types import (
    AdminError,
    AlterConfigOp,
    AlterConfigOpType,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSynonym,
    CreateTopicResult,
    GroupDescription,
    GroupListing,
    ListOffsetsResultInfo,
    MemberDescription,
    NewPartitions,
    NewTopic,
    Node,
    OffsetAndMetadata,
    PartitionDescription,
    PartitionLag,
    ProducerState,
    TopicDescription,
    TopicListing,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from odradek.config import ConfigSource
from odradek.errors import KafkaError
from odradek.security.acl import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    PermissionType,
    ResourceType,
)

T = TypeVar("T")
log = logging.getLogger("odradek.client.admin")

__all__ = [
    "SPECIFIED",
    "AclAdmin",
    "AclBinding",
    "AclBindingFilter",
    "Admin",
    "AdminError",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AsyncAdmin",
    "ClientQuotaEntity",
    "ClusterDescription",
    "ConfigAdmin",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "CreateTopicResult",
    "FeatureAdmin",
    "FeatureMetadata",
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "ListOffsetsResultInfo",
    "LogDirDescription",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "Operation",
    "PartitionDescription",
    "PartitionLag",
    "PartitionReassignment",
    "PatternType",
    "PermissionType",
    "ProducerState",
    "QuotaAdmin",
    "RecordAdmin",
    "ReplicaAdmin",
    "ReplicaInfo",
    "ResourceType",
    "ShareGroupAdmin",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffset",
    "TopicAdmin",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
    "TopicPartitionReplica",
    "TransactionAdmin",
    "TransactionDescription",
    "TransactionListing",
    "UserAdmin",
]


class AsyncAdmin(
    TopicAdmin, ConfigAdmin, TransactionAdmin, ShareGroupAdmin, GroupAdmin, RecordAdmin, UserAdmin, AclAdmin, QuotaAdmin, FeatureAdmin,
    ReplicaAdmin,
):
    """The asyncio admin client.  ``async with AsyncAdmin(bootstrap_servers=...) as admin: ...``

    Its operations come by resource: :class:`TopicAdmin` (cluster and topics),
    :class:`ConfigAdmin`, :class:`RecordAdmin` (offsets and records), :class:`GroupAdmin`,
    :class:`ReplicaAdmin` (reassignments, leader elections, log dirs)."""


class Admin:
    """The blocking admin client: an :class:`AsyncAdmin` on an event loop in a background thread.

    ``Admin({"bootstrap.servers": "127.0.0.1:9092"})`` or ``Admin(bootstrap_servers=...)``; the
    operations and their arguments are those of :class:`AsyncAdmin`.  Thread-safe.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._async = AsyncAdmin(config, **kwargs)
        self.config = self._async.config
        self._runner = LoopThread("odradek-admin")
        self._runner.start()
        self._closed = False

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the admin client is closed")
        fut = self._runner.submit(coro)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()
            raise

    def describe_cluster(self, *, timeout: float | None = None) -> ClusterDescription:
        return self._call(self._async.describe_cluster(timeout=timeout))

    def list_topics(self, include_internal: bool = False, *, timeout: float | None = None) -> dict[str, TopicListing]:
        return self._call(self._async.list_topics(include_internal, timeout=timeout))

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        return self._call(self._async.describe_topics(names, timeout=timeout))

    def create_topics(
        self, new_topics: Iterable[NewTopic], *, validate_only: bool = False, timeout: float | None = None
    ) -> dict[str, CreateTopicResult]:
        return self._call(self._async.create_topics(new_topics, validate_only=validate_only, timeout=timeout))

    def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> None:
        self._call(self._async.delete_topics(names, timeout=timeout))

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, dict[str, int]]:
        return self._call(self._async.describe_user_scram_credentials(users, timeout=timeout))

    def describe_features(self, *, timeout: float | None = None) -> FeatureMetadata:
        return self._call(self._async.describe_features(timeout=timeout))

    def update_features(
        self, updates: Mapping[str, tuple[int, int]], *, validate_only: bool = False, timeout: float | None = None
    ) -> None:
        self._call(self._async.update_features(updates, validate_only=validate_only, timeout=timeout))

    def describe_client_quotas(
        self, components: Mapping[str, Any] | None = None, *, strict: bool = False, timeout: float | None = None
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        return self._call(self._async.describe_client_quotas(components, strict=strict, timeout=timeout))

    def alter_client_quotas(
        self,
        alterations: Iterable[tuple[Mapping[str, str | None] | ClientQuotaEntity, Mapping[str, float | None]]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.alter_client_quotas(alterations, validate_only=validate_only, timeout=timeout))

    def create_acls(self, bindings: Iterable[AclBinding], *, timeout: float | None = None) -> None:
        self._call(self._async.create_acls(bindings, timeout=timeout))

    def describe_acls(self, flt: AclBindingFilter | None = None, *, timeout: float | None = None) -> list[AclBinding]:
        return self._call(self._async.describe_acls(flt, timeout=timeout))

    def delete_acls(self, filters: Iterable[AclBindingFilter], *, timeout: float | None = None) -> list[AclBinding]:
        return self._call(self._async.delete_acls(filters, timeout=timeout))

    def alter_user_scram_credentials(
        self,
        upsert: Iterable[tuple[str, str, str, int]] = (),
        delete: Iterable[tuple[str, str]] = (),
        *,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.alter_user_scram_credentials(upsert, delete, timeout=timeout))

    def create_partitions(
        self,
        new_partitions: Mapping[str, int | NewPartitions],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.create_partitions(new_partitions, validate_only=validate_only, timeout=timeout))

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        keys: Iterable[str] | None = None,
        include_synonyms: bool = True,
        include_documentation: bool = False,
        timeout: float | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        return self._call(
            self._async.describe_configs(
                resources,
                keys=keys,
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
                timeout=timeout,
            )
        )

    def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.alter_configs(configs, validate_only=validate_only, timeout=timeout))

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp] | Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.incremental_alter_configs(changes, validate_only=validate_only, timeout=timeout))

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout: float | None = None,
    ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        return self._call(self._async.list_offsets(specs, isolation_level=isolation_level, timeout=timeout))

    def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return self._call(self._async.delete_records(before, timeout=timeout))

    def list_groups(self, states: Iterable[str] | None = None, *, timeout: float | None = None) -> list[GroupListing]:
        return self._call(self._async.list_groups(states, timeout=timeout))

    def describe_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        return self._call(self._async.describe_groups(group_ids, timeout=timeout))

    def list_transactions(
        self, states: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> list[TransactionListing]:
        return self._call(self._async.list_transactions(states, timeout=timeout))

    def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, TransactionDescription]:
        return self._call(self._async.describe_transactions(transactional_ids, timeout=timeout))

    def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        return self._call(self._async.describe_producers(partitions, timeout=timeout))

    def abort_transaction(
        self,
        partition: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.abort_transaction(
            partition, producer_id, producer_epoch, coordinator_epoch, timeout=timeout
        ))

    def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._call(
            self._async.list_group_offsets(group_id, partitions, require_stable=require_stable, timeout=timeout)
        )

    def group_lag(
        self, group_id: str, *, isolation_level: str = "read_uncommitted", timeout: float | None = None
    ) -> dict[TopicPartition, PartitionLag]:
        return self._call(self._async.group_lag(group_id, isolation_level=isolation_level, timeout=timeout))

    def delete_groups(self, group_ids: Iterable[str], *, timeout: float | None = None) -> None:
        self._call(self._async.delete_groups(group_ids, timeout=timeout))

    def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.alter_group_offsets(group_id, offsets, timeout=timeout))

    def delete_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> None:
        self._call(self._async.delete_group_offsets(group_id, partitions, timeout=timeout))

    def list_share_groups(self, *, timeout: float | None = None) -> list[str]:
        """The ids of the cluster's share groups, sorted (see :meth:`AsyncAdmin.list_share_groups`)."""
        return self._call(self._async.list_share_groups(timeout=timeout))

    def describe_share_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, ShareGroupDescription]:
        """Each share group's state, epochs and members (see :meth:`AsyncAdmin.describe_share_groups`)."""
        return self._call(self._async.describe_share_groups(group_ids, timeout=timeout))

    def describe_share_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, *, timeout: float | None = None
    ) -> dict[TopicPartition, SharePartitionOffset]:
        """The start offset and lag of a share group's share-partitions (see :meth:`AsyncAdmin.describe_share_group_offsets`)."""
        return self._call(self._async.describe_share_group_offsets(group_id, partitions, timeout=timeout))

    def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> None:
        """Set an empty share group's start offsets (see :meth:`AsyncAdmin.alter_share_group_offsets`)."""
        self._call(self._async.alter_share_group_offsets(group_id, offsets, timeout=timeout))

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *, timeout: float | None = None) -> None:
        """Delete an empty share group's share-partition state of topics (see :meth:`AsyncAdmin.delete_share_group_offsets`)."""
        self._call(self._async.delete_share_group_offsets(group_id, topics, timeout=timeout))

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
        timeout: float | None = None,
    ) -> None:
        self._call(self._async.alter_partition_reassignments(
            reassignments, allow_replication_factor_change=allow_replication_factor_change, timeout=timeout
        ))  # fmt: skip

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, *, timeout: float | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        return self._call(self._async.list_partition_reassignments(partitions, timeout=timeout))

    def elect_leaders(
        self,
        election_type: str = "preferred",
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        return self._call(self._async.elect_leaders(election_type, partitions, timeout=timeout))

    def describe_log_dirs(
        self,
        brokers: Iterable[int] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[int, dict[str, LogDirDescription]]:
        return self._call(self._async.describe_log_dirs(brokers, partitions, timeout=timeout))

    def alter_replica_log_dirs(
        self, moves: Mapping[TopicPartitionReplica, str], *, timeout: float | None = None
    ) -> None:
        self._call(self._async.alter_replica_log_dirs(moves, timeout=timeout))

    def close(self) -> None:
        """Close the connections and stop the background loop (waiting up to 10 s for the
        close); later calls raise RuntimeError.  Closing twice is harmless."""
        if self._closed:
            return
        try:
            self._runner.call(self._async.close(), 10)
        except Exception:  # closing anyway
            log.debug("admin close failed", exc_info=True)
        self._closed = True
        self._runner.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


for _name in (
    "describe_cluster",
    "list_topics",
    "describe_topics",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "list_offsets",
    "delete_records",
    "list_groups",
    "describe_groups",
    "list_group_offsets",
    "group_lag",
    "delete_groups",
    "alter_group_offsets",
    "delete_group_offsets",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_features",
    "update_features",
    "describe_client_quotas",
    "alter_client_quotas",
    "create_acls",
    "describe_acls",
    "delete_acls",
    "list_transactions",
    "describe_transactions",
    "describe_producers",
    "abort_transaction",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "elect_leaders",
    "describe_log_dirs",
    "alter_replica_log_dirs",
):
    getattr(Admin, _name).__doc__ = getattr(AsyncAdmin, _name).__doc__
del _name
