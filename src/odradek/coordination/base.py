"""The interface between the broker and the place cluster metadata is kept."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

from odradek.cluster.metadata import BrokerInfo, MetadataImage, TopicInfo
from odradek.errors import ErrorCode, KafkaError

__all__ = ["MetadataBackend", "validate_topic_name"]

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


class MetadataBackend(ABC):
    """Keeps the metadata image and applies changes to it; notifies listeners of new images."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[MetadataImage], None]] = []

    @property
    @abstractmethod
    def image(self) -> MetadataImage: ...

    def add_listener(self, callback: Callable[[MetadataImage], None]) -> None:
        self._listeners.append(callback)

    def _publish(self, image: MetadataImage) -> None:
        for cb in list(self._listeners):
            cb(image)

    @abstractmethod
    async def start(self, broker: BrokerInfo) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    def reachable(self) -> bool:
        """Whether the metadata store answers now (an embedded store always does)."""
        return True

    def metadata_known(self) -> bool:
        """Whether the image holds the cluster's topics yet: a ZooKeeper broker serves requests
        before the controller's first metadata reaches it (an embedded store always knows)."""
        return True

    async def topic_config(self, name: str) -> dict[str, str]:
        """A topic's config overrides as the metadata store has them now (what DescribeConfigs
        reports); here, the image's."""
        info = self.image.topics.get(name)
        return dict(info.configs) if info is not None else {}

    def begin_shutdown(self) -> None:
        """The broker is stopping: from now on, calls to an unreachable store fail at once
        instead of waiting for it (shutdown is bounded even when coordination is gone)."""
        return None

    @abstractmethod
    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
    ) -> TopicInfo: ...

    @abstractmethod
    async def delete_topic(self, name: str) -> None: ...

    @abstractmethod
    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None, *, validate_only: bool = False
    ) -> None: ...

    @abstractmethod
    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    @abstractmethod
    async def set_broker_configs(self, configs: Mapping[str, str]) -> None: ...
