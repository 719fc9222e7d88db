"""The cluster metadata image: brokers, topics, partitions with their leaders, ISR and epochs.

Immutable values: every change produces a new image, so the broker can hand the current image to
a request handler and replace it under it without locks.  Backends in ``odradek.coordination``
(embedded, ZooKeeper) build images; the broker only reads them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "MAX_TOPIC_NAME", "BrokerInfo", "Endpoint", "MetadataImage", "PartitionState", "TopicInfo", "assign_replicas",
    "validate_topic_name",
]

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def validate_topic_name(name: str) -> None:
    """Kafka's topic-name rules; raises INVALID_TOPIC_EXCEPTION."""
    if not name or name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL.match(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} contains characters other than ASCII alphanumerics, '.', '_' and '-'",
        )


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    security_protocol: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    epoch: int = 0
    #: the URL of the broker's schema registry listener (None: it has none), in its registration
    #: only: brokers find the ``_schemas`` writer's listener there
    registry_url: str | None = None

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        for e in self.endpoints:
            if listener is None or e.listener == listener:
                return e
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionState]
    configs: Mapping[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def to_json(self) -> dict[str, Any]:
        """The topic as the embedded backend stores it (see :meth:`MetadataImage.to_json`)."""
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "internal": self.internal,
            "configs": dict(self.configs),
            "partitions": [
                {
                    "partition": p.partition,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch,
                }
                for p in sorted(self.partitions.values(), key=lambda p: p.partition)
            ],
        }


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    controller_id: int
    brokers: Mapping[int, BrokerInfo]
    topics: Mapping[str, TopicInfo]
    broker_configs: Mapping[str, str] = field(default_factory=dict)
    #: topics deleted whose partition directories may still be on disk (topic id -> name): the
    #: only logs a broker deletes (the embedded backend records them; see ``without_topic``)
    deleted_topics: Mapping[uuid.UUID, str] = field(default_factory=dict)
    #: SCRAM credentials: user -> mechanism -> Kafka's stored form (salt, keys, iterations)
    user_scram: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: ACLs: (resource type, pattern type, resource name) -> {(principal, permission, operation,
    #: host)}, in Kafka's names ("Topic", "PREFIXED", "orders-"; "User:alice", "Allow", "Read", "*")
    acls: Mapping[tuple[str, str, str], frozenset[tuple[str, str, str, str]]] = field(default_factory=dict)
    #: client quotas: Kafka's entity path under /config ("users/alice", "users/<default>/clients/c1",
    #: "clients/c1"; names sanitized as Kafka does) -> quota name -> value
    client_quotas: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: finalized feature levels (KIP-584) as last set by UpdateFeatures, every feature listed;
    #: None: never set, the defaults of :mod:`odradek.cluster.features` apply
    features: Mapping[str, int] | None = None
    #: the epoch of the finalized features: incremented by every change (ZooKeeper: the version
    #: of ``/feature``), 0 while never set
    features_epoch: int = 0
    #: client-metrics subscriptions (KIP-714): name -> config (``metrics``, ``interval.ms``, ``match``)
    client_metrics: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: group configs (resource type GROUP, KIP-848 / KIP-932): group id -> config name -> value as
    #: set, for groups that exist or not yet (see :mod:`odradek.cluster.group_configs`)
    group_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def empty(cls, cluster_id: str, controller_id: int = -1) -> MetadataImage:
        return cls(cluster_id, controller_id, {}, {})

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    # -- functional updates ---------------------------------------------------------------
    def with_broker(self, broker: BrokerInfo) -> MetadataImage:
        brokers = dict(self.brokers)
        brokers[broker.broker_id] = broker
        return replace(self, brokers=brokers)

    def without_broker(self, broker_id: int) -> MetadataImage:
        brokers = {k: v for k, v in self.brokers.items() if k != broker_id}
        return replace(self, brokers=brokers)

    def with_topic(self, topic: TopicInfo) -> MetadataImage:
        topics = dict(self.topics)
        topics[topic.name] = topic
        return replace(self, topics=topics)

    def without_topic(self, name: str, *, record_deletion: bool = False) -> MetadataImage:
        topics = {k: v for k, v in self.topics.items() if k != name}
        if not record_deletion or name not in self.topics:
            return replace(self, topics=topics)
        deleted = dict(self.deleted_topics)
        deleted[self.topics[name].topic_id] = name
        return replace(self, topics=topics, deleted_topics=deleted)

    def without_deleted(self, topic_ids: Iterable[uuid.UUID]) -> MetadataImage:
        """Forget recorded deletions whose partition directories are gone."""
        gone = set(topic_ids)
        return replace(self, deleted_topics={k: v for k, v in self.deleted_topics.items() if k not in gone})

    def with_partitions(self, topic: str, states: Iterable[PartitionState]) -> MetadataImage:
        t = self.topics[topic]
        parts = dict(t.partitions)
        for s in states:
            parts[s.partition] = s
        return self.with_topic(replace(t, partitions=parts))

    def with_topic_configs(self, topic: str, configs: Mapping[str, str]) -> MetadataImage:
        return self.with_topic(replace(self.topics[topic], configs=dict(configs)))

    def with_controller(self, controller_id: int) -> MetadataImage:
        return replace(self, controller_id=controller_id)

    def with_broker_configs(self, configs: Mapping[str, str]) -> MetadataImage:
        return replace(self, broker_configs=dict(configs))

    def with_user_scram(self, user: str, credentials: Mapping[str, str]) -> MetadataImage:
        """A user's SCRAM credentials (mechanism -> stored form); none: the user is removed."""
        users = {k: v for k, v in self.user_scram.items() if k != user}
        if credentials:
            users[user] = dict(credentials)
        return replace(self, user_scram=users)

    def with_acls(self, acls: Mapping[tuple[str, str, str], frozenset[tuple[str, str, str, str]]]) -> MetadataImage:
        """The whole ACL set (resources without entries are dropped)."""
        return replace(self, acls={k: frozenset(v) for k, v in acls.items() if v})

    def with_client_quota(self, entity_path: str, quotas: Mapping[str, float]) -> MetadataImage:
        """One entity's quotas; none: the entity is removed."""
        out = {k: v for k, v in self.client_quotas.items() if k != entity_path}
        if quotas:
            out[entity_path] = dict(quotas)
        return replace(self, client_quotas=out)

    def with_features(self, levels: Mapping[str, int], epoch: int) -> MetadataImage:
        return replace(self, features=dict(levels), features_epoch=epoch)

    def with_client_metrics(self, name: str, configs: Mapping[str, str]) -> MetadataImage:
        """One client-metrics subscription; no configs: it is removed."""
        out = {k: v for k, v in self.client_metrics.items() if k != name}
        if configs:
            out[name] = dict(configs)
        return replace(self, client_metrics=out)

    def with_group_configs(self, group_id: str, configs: Mapping[str, str]) -> MetadataImage:
        """One group's configs; none: the group has none left."""
        out = {k: v for k, v in self.group_configs.items() if k != group_id}
        if configs:
            out[group_id] = dict(configs)
        return replace(self, group_configs=out)

    # -- serialisation (embedded backend) ---------------------------------------------------
    def to_json(self, *, topics: bool = True) -> dict[str, Any]:
        """The image as the embedded backend stores it; ``topics=False`` leaves the topic list
        empty (the backend splices in its cached per-topic texts)."""
        return {
            "cluster_id": self.cluster_id,
            "broker_configs": dict(self.broker_configs),
            "scram_credentials": {u: dict(c) for u, c in sorted(self.user_scram.items())},
            "acls": [
                {"resource_type": r[0], "pattern_type": r[1], "name": r[2], "entries": [list(e) for e in sorted(es)]}
                for r, es in sorted(self.acls.items())
            ],
            "client_quotas": {k: dict(v) for k, v in sorted(self.client_quotas.items())},
            **({} if self.features is None else {
                "features": dict(sorted(self.features.items())), "features_epoch": self.features_epoch,
            }),
            "client_metrics": {k: dict(v) for k, v in sorted(self.client_metrics.items())},
            "group_configs": {k: dict(v) for k, v in sorted(self.group_configs.items())},
            "topics": [t.to_json() for t in sorted(self.topics.values(), key=lambda t: t.name)] if topics else [],
            "deleted_topics": [
                {"name": name, "topic_id": str(tid)} for tid, name in sorted(self.deleted_topics.items(), key=str)
            ],
        }

    # Any: JSON read back from the metadata store (written by to_json)
    @classmethod
    def from_json(cls, data: Mapping[str, Any], controller_id: int = -1) -> MetadataImage:
        topics = {}
        for t in data.get("topics", []):
            parts = {
                p["partition"]: PartitionState(
                    t["name"],
                    p["partition"],
                    tuple(p["replicas"]),
                    tuple(p["isr"]),
                    p["leader"],
                    p.get("leader_epoch", 0),
                    p.get("partition_epoch", 0),
                )
                for p in t["partitions"]
            }
            topics[t["name"]] = TopicInfo(
                t["name"], uuid.UUID(t["topic_id"]), parts, dict(t.get("configs", {})), t.get("internal", False)
            )
        deleted = {uuid.UUID(d["topic_id"]): d["name"] for d in data.get("deleted_topics", [])}
        users = {str(u): {str(m): str(t) for m, t in c.items()} for u, c in data.get("scram_credentials", {}).items()}
        acls = {
            (str(a["resource_type"]), str(a["pattern_type"]), str(a["name"])): frozenset(
                (str(e[0]), str(e[1]), str(e[2]), str(e[3])) for e in a["entries"]
            )
            for a in data.get("acls", [])
        }
        quotas = {str(k): {str(q): float(v) for q, v in c.items()} for k, c in data.get("client_quotas", {}).items()}
        raw_features = data.get("features")
        features = None if raw_features is None else {str(k): int(v) for k, v in raw_features.items()}
        metrics = {str(k): {str(n): str(v) for n, v in c.items()} for k, c in data.get("client_metrics", {}).items()}
        group_configs = {
            str(k): {str(n): str(v) for n, v in c.items()} for k, c in data.get("group_configs", {}).items()
        }
        return cls(
            data["cluster_id"], controller_id, {}, topics, dict(data.get("broker_configs", {})), deleted, users,
            acls, quotas, features, int(data.get("features_epoch", 0)), metrics, group_configs,
        )


def assign_replicas(
    broker_ids: list[int],
    partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    start_index: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Round-robin replica placement: partition p's leader is broker (start + p) mod n and its
    followers the next brokers after it, with a shift per full round so followers spread."""
    brokers = sorted(broker_ids)
    n = len(brokers)
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} is larger than the {n} available brokers")
    result = {}
    for i in range(partitions):
        p = start_partition + i
        first = (start_index + p) % n
        shift = 1 + (p // n) % max(n - 1, 1)
        replicas = [brokers[first]]
        for r in range(1, replication_factor):
            replicas.append(brokers[(first + shift + r - 1) % n])
        result[p] = tuple(replicas)
    return result
