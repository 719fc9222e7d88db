"""Topics: creation, deletion, partition growth and config changes, with the limits checked
before anything is written, and each topic's effective :class:`~odradek.storage.LogConfig`.

Changes go to the metadata store (:class:`~odradek.coordination.MetadataBackend`); the broker
applies the image the store publishes.  A topic's LogConfig (the broker's topic defaults
overlaid with the topic's overrides) is cached and rebuilt only when its overrides or the
broker's dynamic configs change.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from odradek.broker.limits import PartitionBudget, partition_budget
from odradek.broker.logdirs import LogDirFailureChannel, is_io_error
from odradek.cluster.metadata import MetadataImage, TopicInfo
from odradek.config import ConfigError
from odradek.coordination import MetadataBackend
from odradek.errors import ErrorCode, KafkaError
from odradek.settings import LiveSettings, Settings
from odradek.storage import LogConfig, LogManager, StorageError

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "SCHEMAS_TOPIC",
    "SHARE_STATE_TOPIC",
    "TRANSACTION_TOPIC",
    "TopicService",
    "internal_topic_configs",
    "is_internal",
]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
#: the schema registry's store (Confluent's ``_schemas``): created as the coordinators' topics are,
#: but not internal (as in Kafka: clients may read it, and a Confluent registry may use it)
SCHEMAS_TOPIC = "_schemas"

#: The topics the broker's coordinators own (Kafka's ``Topic.INTERNAL_TOPICS``): clients may not
#: create them, produce to them, delete their records, delete them or add them to a transaction.
#: A coordinator with a topic of its own (the share coordinator's ``__share_group_state``) adds its
#: name here, and every one of those rules then applies to it.
INTERNAL_TOPICS: frozenset[str] = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC, SHARE_STATE_TOPIC})


def is_internal(topic: str) -> bool:
    """Whether ``topic`` is internal, by its name (as Kafka's ``Topic.isInternal``), so that the
    answer does not depend on how the topic reached this broker's metadata."""
    return topic in INTERNAL_TOPICS


def internal_topic_configs(settings: Settings) -> dict[str, dict[str, str]]:
    """The configs the internal topics are created with (also when rebuilt from the log dirs)."""
    return {
        OFFSETS_TOPIC: {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(settings.groups.offsets_topic_segment_bytes),
        },
        TRANSACTION_TOPIC: {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "segment.bytes": str(settings.transactions.state_log_segment_bytes),
            "min.insync.replicas": str(settings.transactions.state_log_min_isr),
        },
        # the share coordinator's (KIP-932: cleanup.policy delete, as Kafka creates it); kept
        # until deleted by hand while nothing prunes it (retention would drop an idle
        # share-partition's only snapshot)
        SHARE_STATE_TOPIC: {
            "cleanup.policy": "delete",
            "compression.type": "producer",
            "segment.bytes": str(settings.share_coordinator.state_topic_segment_bytes),
            "retention.ms": "-1",
            "min.insync.replicas": str(settings.share_coordinator.state_topic_min_isr),
        },
    }


#: ``_schemas``: compacted, and an acknowledged registration on two replicas when it has them
_SCHEMAS_CONFIGS = {"cleanup.policy": "compact", "min.insync.replicas": "2"}


class TopicService:
    def __init__(
        self,
        broker_id: int,
        settings: LiveSettings,
        backend: MetadataBackend,
        logs: LogManager,
        log_dirs: LogDirFailureChannel,
    ) -> None:
        self.broker_id = broker_id
        #: the broker's settings now; the dynamic broker configs are applied through it
        self.settings = settings
        self.backend = backend
        self.logs = logs
        self.log_dirs = log_dirs
        self._configs: dict[str, LogConfig] = {}
        self._config_keys: dict[str, tuple[Any, Any]] = {}
        #: the dynamic broker configs of the metadata store last applied to ``settings``
        self._applied: dict[str, str] = {}
        #: registers this broker's endpoints again after advertised.listeners changed (set by the
        #: broker's composition root); returns whether the metadata store advertises them now
        self.advertise: Callable[[], Awaitable[bool]] | None = None

    @property
    def image(self) -> MetadataImage:
        return self.backend.image

    # -- effective topic configs -----------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        cfg = self._configs.get(topic)
        if cfg is None:
            info = self.image.topics.get(topic)
            cfg = self._build(info.configs if info is not None else {})
        return cfg

    def cached_config(self, topic: str) -> LogConfig | None:
        return self._configs.get(topic)

    def refresh_configs(self, image: MetadataImage) -> set[str]:
        """Rebuild the LogConfigs whose sources changed in ``image``; the names rebuilt.

        Only changed topics are rebuilt: rebuilding all of them for every image made each topic
        creation cost O(topics) on the event loop (half of an auto-create's time at 500 topics)."""
        self._apply_broker_configs(image.broker_configs)
        reconfigured = set()
        for topic in image.topics.values():
            source = (topic.configs, image.broker_configs)
            if self._config_keys.get(topic.name) != source or topic.name not in self._configs:
                self._configs[topic.name] = self._build(topic.configs)
                self._config_keys[topic.name] = source
                reconfigured.add(topic.name)
        for name in list(self._configs):
            if name not in image.topics:
                del self._configs[name]
                self._config_keys.pop(name, None)
        return reconfigured

    def _apply_broker_configs(self, stored: Mapping[str, str]) -> None:
        """The dynamic broker configs the metadata store holds, applied to this broker's
        configuration: after a restart (the embedded store keeps them) as after AlterConfigs.  A
        stored value this version refuses is left out with a WARN line (the static value stays)."""
        if stored == self._applied:
            return
        for name in [n for n in self._applied if n not in stored]:
            with contextlib.suppress(ConfigError):
                self.settings.apply({name: None})
        for name, value in stored.items():
            if self._applied.get(name) == value:
                continue
            try:
                self.settings.apply({name: value})
            except ConfigError as exc:
                log.warning("the stored dynamic broker config %s is not applied: %s", name, exc.message)
        self._applied = dict(stored)

    async def load_config(self, topic: str) -> None:
        """Read a topic's overrides from the store when its config is not known yet (a cluster
        broker told to host a partition before the controller's metadata named the topic)."""
        if topic not in self._configs:
            self._configs[topic] = self._build(await self.backend.topic_config(topic))

    def config_for(self, overrides: Mapping[str, str]) -> LogConfig:
        """The LogConfig of a topic with these overrides (of an image not yet applied)."""
        return self._build(overrides)

    def _build(self, overrides: Mapping[str, str]) -> LogConfig:
        merged: dict[str, Any] = dict(self.settings.current.log.topic_defaults)
        merged.update(overrides)
        return LogConfig.from_dict(merged)

    # -- changes -----------------------------------------------------------------------------------

    async def auto_create(self, name: str) -> TopicInfo:
        server = self.settings.current.server
        return await self.create(name, server.num_partitions, server.default_replication_factor, {})

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        if is_internal(name):
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
            raise self.log_dirs.fail(None, exc, f"creating topic {name}") from exc

    async def create_internal(self, name: str, partitions: int, replication_factor: int) -> None:
        """Create an internal topic (``__consumer_offsets``, ``__transaction_state``), or the
        schema registry's ``_schemas``, with its fixed configs (min.insync.replicas at most the
        replication factor: a single node's transaction log, replicated once, must accept its
        writes)."""
        configs = dict(_SCHEMAS_CONFIGS) if name == SCHEMAS_TOPIC else dict(internal_topic_configs(self.settings.current)[name])
        if "min.insync.replicas" in configs:
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), replication_factor))
        await self.backend.create_topic(name, partitions, replication_factor, configs, internal=name in INTERNAL_TOPICS)

    async def delete(self, name: str) -> None:
        if not self.settings.current.server.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "topic deletion is disabled (delete.topic.enable=false)")
        info = self.image.topics.get(name)
        if is_internal(name) or (info is not None and info.internal):
            # Kafka accepts this (only kafka-topics --zookeeper refused it, before 3.0); deleting the
            # coordinators' topic loses every group's offsets and every transaction's state
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{name} is an internal topic")
        await self.backend.delete_topic(name)

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, *, validate_only: bool
    ) -> None:
        info = self.image.topics.get(name)
        if info is not None and total > info.partition_count:
            self.check_partition_limits(name, info.partition_count, total - info.partition_count)
        await self.backend.create_partitions(name, total, assignments, validate_only=validate_only)

    async def set_configs(self, name: str, configs: Mapping[str, str]) -> None:
        await self.backend.set_topic_configs(name, configs)

    async def current_configs(self, name: str) -> Mapping[str, str]:
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

    async def exists(self, name: str) -> bool:
        """Topic ``name`` exists in the metadata store (in a cluster, in ZooKeeper: the controller's
        metadata may not have reached this broker yet)."""
        return await self.backend.topic_exists(name)

    async def set_broker_configs(self, change: Mapping[str, str | None], replace_all: bool) -> None:
        before = self.settings.current.socket.advertised_listeners
        current = dict(self.image.broker_configs) if not replace_all else {}
        # AlterConfigs replaces the whole set: the names it leaves out go back to their static values
        dropped: dict[str, str | None] = {k: None for k in self.image.broker_configs if replace_all and k not in change}
        self.settings.apply({**dropped, **change})
        for k, v in change.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        await self.backend.set_broker_configs(current)
        advertised = self.settings.current.socket.advertised_listeners
        if advertised != before and self.advertise is not None:
            if await self.advertise():
                log.info("advertised.listeners changed: Metadata now advertises %s", advertised)
            else:
                log.warning("advertised.listeners changed to %s: stored and described, not advertised (the "
                            "ZooKeeper controller does not watch a broker's registration for changes)", advertised)

    # -- limits: what a request may add, decided before anything is written -------------------------

    def partition_budget(self) -> PartitionBudget:
        return partition_budget(self.settings.current.server.max_broker_partitions)

    def hosted_count(self) -> int:
        image_count = sum(
            1 for t in self.image.topics.values() for s in t.partitions.values() if self.broker_id in s.replicas
        )
        return max(image_count, len(self.logs))

    def internal_reserve(self, image: MetadataImage) -> int:
        """Room kept in the partition budget for ``__consumer_offsets`` until it exists (it is
        created on the first group request and groups need all of its partitions)."""
        if OFFSETS_TOPIC in image.topics:
            return 0
        return self.settings.current.groups.offsets_topic_num_partitions

    def check_partition_limits(self, topic: str, current: int, adding: int) -> None:
        """POLICY_VIOLATION unless ``topic`` may grow from ``current`` by ``adding`` partitions:
        ``max.partitions.per.topic`` and, when this broker hosts every partition, its budget (in
        a cluster the partitions spread over brokers whose limits this one does not know)."""
        if adding <= 0:
            return
        per_topic = self.settings.current.server.max_partitions_per_topic
        if current + adding > per_topic:
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"topic '{topic}' would have {current + adding} partitions, more than max.partitions.per.topic={per_topic}",
            )
        if not self.backend.hosts_all_partitions:
            return
        budget = self.partition_budget()
        hosted = self.hosted_count()
        reserve = self.internal_reserve(self.image)
        if hosted + reserve + adding > budget.partitions:
            kept = f" ({reserve} of them kept for {OFFSETS_TOPIC})" if reserve else ""
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"adding {adding} partitions to topic '{topic}' would make this broker host "
                f"{hosted + reserve + adding} partitions{kept}, more than its limit of {budget.describe()}",
            )
