"""The interface between the broker and the place cluster metadata is kept."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping

from odradek.cluster.controller import LeaderIsr
from odradek.cluster.metadata import BrokerInfo, MetadataImage, TopicInfo, validate_topic_name
from odradek.errors import ErrorCode, KafkaError, OdradekError
from odradek.security.acl import AclEntry

__all__ = ["AclEntry", "MetadataBackend", "StaleVersion", "validate_topic_name"]

# the ACL entry and the topic-name rules are the security and cluster models' (named here too)


class StaleVersion(OdradekError):
    """A version-checked write found the stored value at another version than expected."""


class MetadataBackend(ABC):
    """Keeps the metadata image and applies changes to it; notifies listeners of new images.

    Two stores implement it: the embedded single-node store (one JSON file; this broker is the
    whole cluster, hosts every partition and decides alone) and ZooKeeper (a cluster: the
    controller decides which broker hosts what; partition leaders record ISR changes).  The
    operations only a replicated store has (``*_leader_isr``, ``notify_isr_change``,
    ``apply_metadata``, ``controller_id``) refuse on the embedded store: the broker's single-node
    wiring never calls them.
    """

    #: whether every partition lives on this broker (the embedded store): the broker then hosts
    #: what the image assigns and checks its own partition budget when topics grow
    hosts_all_partitions: bool = True

    def __init__(self) -> None:
        self._listeners: list[Callable[[MetadataImage], None]] = []
        self._preparers: list[Callable[[MetadataImage], Awaitable[None]]] = []

    @property
    @abstractmethod
    def image(self) -> MetadataImage: ...

    def add_listener(self, callback: Callable[[MetadataImage], None]) -> None:
        self._listeners.append(callback)

    def add_preparer(self, callback: Callable[[MetadataImage], Awaitable[None]]) -> None:
        """``callback`` is awaited with each image a change made here, once it is stored and
        before it is published: slow work the listeners would otherwise do synchronously (the
        embedded store's new partitions' logs) can be done off the event loop."""
        self._preparers.append(callback)

    async def _prepare(self, image: MetadataImage) -> None:
        for cb in list(self._preparers):
            await cb(image)

    def _publish(self, image: MetadataImage) -> None:
        for cb in list(self._listeners):
            cb(image)

    @abstractmethod
    async def start(self, broker: BrokerInfo) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    async def update_broker(self, broker: BrokerInfo) -> bool:
        """Advertise this broker's new endpoints (a dynamic ``advertised.listeners``): False when
        this store cannot yet (a ZooKeeper cluster's controller does not watch a broker's
        registration for changes)."""
        return False

    async def broker_registration(self, broker_id: int) -> BrokerInfo | None:
        """Broker ``broker_id``'s registration as it wrote it (``/brokers/ids/<id>``), with what
        only the registration holds (its schema registry URL); None: not registered (a single
        node has only its own)."""
        return None

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

    async def topic_exists(self, name: str) -> bool:
        """Whether the metadata store holds topic ``name`` now (an alter of its configs may come
        before the topic reaches this broker's image); here, the image's."""
        return name in self.image.topics

    @property
    def broker_epoch(self) -> int:
        """This broker's registration epoch (the czxid of its ZooKeeper registration), which the
        controller's requests must not be older than; -1 without registrations."""
        return -1

    async def allocate_producer_ids(self) -> tuple[int, int]:
        """Claim the next block of producer ids, ``[start, end)``, for this broker alone."""
        raise self._not_replicated("producer id blocks")

    async def read_leader_isr(self, topic: str, partition: int) -> tuple[LeaderIsr, int] | None:
        """A partition's stored leader and ISR with its version; None when the partition is gone."""
        raise self._not_replicated("partition states")

    async def write_leader_isr(self, topic: str, partition: int, state: LeaderIsr, version: int) -> int | None:
        """Write a partition's leader and ISR if it is still at ``version``: the new version, None
        when the partition is gone; :class:`StaleVersion` when it was written meanwhile."""
        raise self._not_replicated("partition states")

    async def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        """Tell the controller that these partitions' ISRs changed."""
        raise self._not_replicated("ISR change notifications")

    async def notify_log_dir_failure(self) -> None:
        """Tell the controller that a log dir of this broker went offline."""
        raise self._not_replicated("log dir failure notifications")

    async def apply_metadata(self, image: MetadataImage) -> None:
        """Install the metadata the controller sent (UpdateMetadata)."""
        raise self._not_replicated("controller metadata")

    async def controller_id(self) -> int:
        """The active controller's broker id, -1 when there is none."""
        raise self._not_replicated("controller elections")

    #: whether OffsetCommit/OffsetFetch v0 keep a group's offsets in this store under
    #: ``/consumers/<group>/offsets/<topic>/<partition>`` (ZooKeeper, as Kafka 0.8.2-0.10 did);
    #: otherwise v0 goes to the group coordinator like v1+
    stores_v0_offsets: bool = False

    async def commit_v0_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Store a group's offsets the 0.8 way (OffsetCommit v0)."""
        raise self._not_replicated("ZooKeeper consumer offsets")

    async def fetch_v0_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """A group's offsets stored the 0.8 way (OffsetFetch v0): -1 for a partition without one."""
        raise self._not_replicated("ZooKeeper consumer offsets")

    def deletions_done(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """These deleted topics' logs are gone from this broker: the store may forget them."""
        return None

    def _not_replicated(self, what: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REQUEST, f"the {type(self).__name__} store has no {what}")

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

    @abstractmethod
    async def set_user_scram(self, user: str, credentials: Mapping[str, str]) -> None:
        """Replace ``user``'s SCRAM credentials (mechanism -> stored form; empty: none left),
        for every broker of the cluster."""

    @abstractmethod
    async def alter_acls(
        self, resource: tuple[str, str, str], change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]
    ) -> frozenset[AclEntry]:
        """Apply ``change`` to the ACL entries of ``resource`` (resource type, pattern type, name)
        as the store holds them now, for every broker of the cluster; returns the new entries."""

    @abstractmethod
    async def alter_client_quota(
        self, entity_path: str, change: Callable[[dict[str, float]], dict[str, float]]
    ) -> dict[str, float]:
        """Apply ``change`` to the quotas of one client-quota entity (Kafka's path under
        ``/config``: ``users/alice``, ``users/<default>/clients/c1``, ``clients/c1``), for every
        broker of the cluster; returns the new quotas (empty: the entity has none left)."""

    @abstractmethod
    async def update_features(
        self, change: Callable[[Mapping[str, int] | None], Mapping[str, int] | None]
    ) -> tuple[Mapping[str, int] | None, int]:
        """Apply ``change`` to the finalized feature levels as the store holds them now (None:
        never set; ``change`` may raise to refuse, or return what it was given to change
        nothing), for every broker of the cluster; returns the levels and their epoch."""

    @abstractmethod
    async def alter_client_metrics(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Apply ``change`` to the config of client-metrics subscription ``name`` (KIP-714) as the
        store holds it now, for every broker of the cluster; returns the new config (empty: the
        subscription is gone)."""

    @abstractmethod
    async def alter_group_configs(
        self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Apply ``change`` to the configs of group ``group_id`` (resource type GROUP) as the store
        holds them now (``change`` may raise to refuse), for every broker of the cluster; returns
        the new configs (empty: the group has none left).  The group need not exist."""
