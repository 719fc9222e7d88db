"""The admin client's arguments and results, and :class:`AdminError`."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from odradek.config import ConfigSource
from odradek.errors import KafkaError

TopicPartition = tuple[str, int]


def _item(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{key[0]}-{key[1]}"
    return str(key)


def _config_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ConfigResourceType(enum.IntEnum):
    """Kafka's config resource types (DescribeConfigs / AlterConfigs ``resource_type``)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def parse(cls, value: ConfigResourceType | str | int) -> ConfigResourceType:
        """The type named by ``value``: a member, its name in any case (``topic``, ``broker-logger``) or its
        code; ValueError for anything else."""
        if isinstance(value, str):
            try:
                return cls[value.strip().upper().replace("-", "_")]
            except KeyError:
                raise ValueError(f"unknown config resource type {value!r}") from None
        return cls(int(value))


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3

    @classmethod
    def parse(cls, value: AlterConfigOpType | str | int) -> AlterConfigOpType:
        """The operation named by ``value``: a member, its name in any case (``set``, ``append``) or its code;
        ValueError for anything else."""
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ValueError(f"unknown config operation {value!r}") from None
        return cls(int(value))


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A topic (``ConfigResource("topic", "orders")``) or a broker (``ConfigResource("broker", "0")``).

    A broker resource named ``""`` is the cluster-wide default broker config."""

    type: ConfigResourceType
    name: str

    def __init__(self, type: ConfigResourceType | str | int, name: str | int) -> None:
        object.__setattr__(self, "type", ConfigResourceType.parse(type))
        object.__setattr__(self, "name", str(name))

    def __str__(self) -> str:
        return f"{self.type.name.lower()} '{self.name}'"


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One change of IncrementalAlterConfigs: ``AlterConfigOp("retention.ms", "1000")`` sets,
    ``AlterConfigOp.delete("retention.ms")`` removes the override, APPEND / SUBTRACT change a
    list config (``cleanup.policy``) by the comma-separated items of ``value``."""

    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET

    def __init__(self, name: str, value: Any = None, op: AlterConfigOpType | str | int = AlterConfigOpType.SET) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", _config_text(value))
        object.__setattr__(self, "op", AlterConfigOpType.parse(op))

    @classmethod
    def set(cls, name: str, value: Any) -> AlterConfigOp:
        """Set ``name`` to ``value`` (Kafka's ``AlterConfigOp.OpType.SET``); the value is sent as
        text: ``True`` becomes ``"true"``, a number its decimal form."""
        return cls(name, value, AlterConfigOpType.SET)

    @classmethod
    def delete(cls, name: str) -> AlterConfigOp:
        """Remove ``name``'s override: the resource falls back to its default."""
        return cls(name, None, AlterConfigOpType.DELETE)

    @classmethod
    def append(cls, name: str, value: Any) -> AlterConfigOp:
        """Add the comma-separated items of ``value`` to the list config ``name``."""
        return cls(name, value, AlterConfigOpType.APPEND)

    @classmethod
    def subtract(cls, name: str, value: Any) -> AlterConfigOp:
        """Remove the comma-separated items of ``value`` from the list config ``name``."""
        return cls(name, value, AlterConfigOpType.SUBTRACT)


@dataclass(slots=True)
class NewTopic:
    """A topic to create.  -1 partitions or replication factor means the broker's default
    (``num.partitions``, ``default.replication.factor``).  ``assignments`` places each partition's
    replicas explicitly: ``{0: [1, 2], 1: [2, 3]}`` or ``[[1, 2], [2, 3]]``."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, Any] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | Sequence[Sequence[int]] | None = None


@dataclass(slots=True)
class NewPartitions:
    """The new total partition count of a topic, optionally with the replicas of each new one."""

    total_count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as metadata describes it: id, advertised host and port, rack (None when unset)."""

    id: int
    host: str
    port: int
    rack: str | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (id: {self.id}{'' if self.rack is None else f' rack: {self.rack}'})"


@dataclass(slots=True)
class ClusterDescription:
    """What :meth:`AsyncAdmin.describe_cluster` returns: the cluster id, the active controller
    (None when there is none) and the live brokers."""

    cluster_id: str | None
    controller: Node | None
    brokers: list[Node]

    @property
    def controller_id(self) -> int:
        """The controller's broker id, -1 when there is none (Kafka's ``controllerId``)."""
        return -1 if self.controller is None else self.controller.id


@dataclass(slots=True)
class TopicListing:
    """One topic of :meth:`AsyncAdmin.list_topics`: its name, id, and whether it is internal
    (``__consumer_offsets``, ``__transaction_state``)."""

    name: str
    topic_id: uuid.UUID | None
    internal: bool


@dataclass(slots=True)
class PartitionDescription:
    """One partition of a :class:`TopicDescription`: its leader, leader epoch, replicas, in-sync
    replicas and offline replicas (broker ids), and the partition's error, if any."""

    partition: int
    leader: int  # broker id, -1 when there is none
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    error: KafkaError | None = None  # e.g. LEADER_NOT_AVAILABLE while a leader is being elected


@dataclass(slots=True)
class TopicDescription:
    """A topic as :meth:`AsyncAdmin.describe_topics` finds it in the metadata: name, id,
    internal or not, and its partitions in partition order."""

    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: list[PartitionDescription]

    @property
    def replication_factor(self) -> int:
        """The number of replicas of the first partition (0 for a topic without partitions)."""
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """Where else a config's value could come from (a broker default, a static broker
    setting, ...), in the order Kafka applies them; see ``include_synonyms``."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(slots=True)
class ConfigEntry:
    """One config of a resource as DescribeConfigs reports it: value (None when sensitive),
    source, whether it is read-only or sensitive, its synonyms, type and documentation."""

    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)
    type: str | None = None  # "int", "long", "list", ... (DescribeConfigs v3+)
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        """Whether the value is the default (source ``DEFAULT_CONFIG``), not set anywhere."""
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclass(slots=True)
class CreateTopicResult:
    """A topic :meth:`AsyncAdmin.create_topics` created (or would create, with
    ``validate_only``): its id, partition count, replication factor and resulting configs."""

    name: str
    topic_id: uuid.UUID | None
    num_partitions: int  # -1 when the broker did not say (CreateTopics before v5)
    replication_factor: int
    configs: dict[str, ConfigEntry] = field(default_factory=dict)


class ListOffsetsResultInfo(NamedTuple):
    """One partition's answer to :meth:`AsyncAdmin.list_offsets`: the offset, the timestamp of
    the record found and its leader epoch."""

    offset: int  # -1 when no record has the timestamp asked for (or a later one)
    timestamp: int  # -1 unless asked by timestamp or max_timestamp
    leader_epoch: int


class OffsetAndMetadata(NamedTuple):
    """A consumer group's committed position in one partition."""

    offset: int  # the next record the group will read
    metadata: str = ""
    leader_epoch: int = -1  # the leader epoch of the committed record, -1 when unknown


@dataclass(slots=True)
class GroupListing:
    """One group of :meth:`AsyncAdmin.list_groups`: id, protocol type and state."""

    group_id: str
    protocol_type: str  # "consumer" for consumer groups; "" for groups that only commit offsets
    state: str | None  # "Stable", "Empty", "PreparingRebalance", ...; None before ListGroups v4

    @property
    def is_simple_consumer_group(self) -> bool:
        """A group without members' protocol: its offsets are committed by assign()-ing consumers."""
        return self.protocol_type == ""


@dataclass(slots=True)
class MemberDescription:
    """A member of a consumer group (DescribeGroups / ConsumerGroupDescribe): its ids, host
    and the partitions assigned to it."""

    member_id: str
    group_instance_id: str | None  # static membership (DescribeGroups v4+)
    client_id: str
    host: str  # the member's address as the coordinator sees it ("/127.0.0.1")
    assignment: list[TopicPartition]  # decoded when the group uses the consumer protocol and is Stable
    #: a consumer group's (KIP-848) member: its epoch, and the partitions it is to own
    member_epoch: int | None = None
    target_assignment: list[TopicPartition] | None = None


@dataclass(slots=True)
class GroupDescription:
    """A group as :meth:`AsyncAdmin.describe_groups` reports it: state, protocol, members,
    coordinator, and for a KIP-848 consumer group its type and epochs."""

    group_id: str
    state: str  # "Stable", "Empty", ...; "Dead" for a group that does not exist
    protocol_type: str  # "consumer", or "" for a group that only commits offsets
    protocol: str  # the partition assignor chosen ("range", "cooperative-sticky", ...)
    members: list[MemberDescription]
    coordinator: Node | None
    #: "classic", or "consumer" for a group of the consumer protocol (KIP-848, ConsumerGroupDescribe)
    group_type: str = "classic"
    #: a consumer group's epoch and its target assignment's epoch
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def is_simple_consumer_group(self) -> bool:
        """A group without members' protocol: its offsets are committed by assign()-ing consumers."""
        return self.protocol_type == ""


@dataclass(slots=True)
class PartitionLag:
    """How far a group is behind in one partition (see :meth:`AsyncAdmin.group_lag`)."""

    committed_offset: int | None  # None when the group has committed nothing for the partition
    log_end_offset: int | None  # the high watermark (or last stable offset); None if the partition is gone
    lag: int | None  # log_end_offset - committed_offset (at least 0); None unless both are known
    member: MemberDescription | None  # the member the partition is assigned to, if any


class AdminError(KafkaError):
    """An operation on several items failed for some of them.

    It carries the code and message of the first failure; ``errors`` maps every failed item to
    its :class:`KafkaError` and ``results`` holds what the operation returned for the others."""

    def __init__(self, errors: Mapping[Any, KafkaError], results: Mapping[Any, Any] | None = None) -> None:
        self.errors: dict[Any, KafkaError] = dict(errors)
        self.results: dict[Any, Any] = dict(results or {})
        first = next(iter(self.errors.values()))
        message = first.message or first.code.name
        if len(self.errors) > 1:
            message += f" (and {len(self.errors) - 1} more failed: " + ", ".join(
                f"{_item(k)}: {e.code.name}" for k, e in list(self.errors.items())[1:]
            ) + ")"
        super().__init__(first.code, message)


@dataclass(slots=True)
class TransactionListing:
    """One transactional producer of :meth:`AsyncAdmin.list_transactions`: its
    ``transactional.id``, producer id and transaction state."""

    transactional_id: str
    producer_id: int
    state: str  # "Ongoing", "PrepareCommit", "CompleteCommit", ... (Kafka's names)


@dataclass(slots=True)
class ProducerState:
    """A producer a partition leader knows (DescribeProducers, KIP-664)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int  # ms, -1 unknown
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction on this partition


@dataclass(slots=True)
class TransactionDescription:
    """A transactional producer as its transaction coordinator describes it
    (:meth:`AsyncAdmin.describe_transactions`): state, producer id and epoch,
    ``transaction.timeout.ms``, when the open transaction started, and its partitions."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1: no transaction open
    coordinator: int  # broker id
    partitions: list[tuple[str, int]] = field(default_factory=list)
