"""Odradek's Python client: Producer, group Consumer, SimpleConsumer, ShareConsumer and Admin, each with an
asyncio twin, over the transport layer (:mod:`odradek.transport`; its blocking face is
re-exported here as :class:`Cluster` and :class:`BrokerConnection`).

Configuration takes Kafka's client config names, as a dict or as keyword arguments with
underscores: ``Producer({"bootstrap.servers": "127.0.0.1:9092"})`` or
``Producer(bootstrap_servers="127.0.0.1:9092")``; ``PRODUCER_DEFAULTS``, ``CONSUMER_DEFAULTS``,
``SHARE_CONSUMER_DEFAULTS`` and ``ADMIN_DEFAULTS`` list the names each accepts with their defaults,
``PRODUCER_CONFIGS``, ``CONSUMER_CONFIGS``, ``SHARE_CONSUMER_CONFIGS`` and ``ADMIN_CONFIGS`` the
same as rows (type, default, documentation, valid values: :class:`odradek.config.ConfigDef`, the
broker's row type).  The modules named with
a leading underscore are private to this package (an import-linter contract says so).
Serializers for schema-registry-framed Avro, JSON Schema and Protobuf are in
:mod:`odradek.client.serde`.
"""

from typing import Any

from odradek.client._config import (
    ADMIN_CONFIGS,
    ADMIN_DEFAULTS,
    CONSUMER_CONFIGS,
    CONSUMER_DEFAULTS,
    PRODUCER_CONFIGS,
    PRODUCER_DEFAULTS,
    SHARE_CONSUMER_CONFIGS,
    SHARE_CONSUMER_DEFAULTS,
    ClientConfigError,
)
from odradek.client._security import ClientSecurity
from odradek.client.admin import (
    Admin,
    AdminError,
    AlterConfigOp,
    AlterConfigOpType,
    AsyncAdmin,
    ConfigResource,
    ConfigResourceType,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    PartitionLag,
)
from odradek.client.consumer import (
    AsyncConsumer,
    Blacklist,
    CommitFailed,
    Consumer,
    HighLevelConsumer,
    Whitelist,
    create_message_streams,
    create_message_streams_by_filter,
)
from odradek.client.consumer_simple import (
    AsyncSimpleConsumer,
    ConsumerRecord,
    FetchedRecords,
    RawFetched,
    SimpleConsumer,
)
from odradek.client.errors import OffsetOutOfRangeError
from odradek.client.partitioner import DefaultPartitioner, murmur2, murmur2_partition
from odradek.client.producer import AsyncProducer, Producer, RecordMetadata
from odradek.client.share_consumer import (
    AcknowledgeType,
    AsyncShareConsumer,
    IllegalStateError,
    ShareConsumer,
    ShareRecord,
)
from odradek.transport import BrokerConnection, Cluster, parse_bootstrap

__all__ = [
    "ADMIN_CONFIGS",
    "ADMIN_DEFAULTS",
    "CONSUMER_CONFIGS",
    "CONSUMER_DEFAULTS",
    "PRODUCER_CONFIGS",
    "PRODUCER_DEFAULTS",
    "SHARE_CONSUMER_CONFIGS",
    "SHARE_CONSUMER_DEFAULTS",
    "AcknowledgeType",
    "Admin",
    "AdminError",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncShareConsumer",
    "AsyncSimpleConsumer",
    "Blacklist",
    "BrokerConnection",
    "ClientConfigError",
    "ClientSecurity",
    "Cluster",
    "CommitFailed",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerRecord",
    "ConsumerTimeoutError",
    "DefaultPartitioner",
    "FetchedRecords",
    "GroupDescription",
    "GroupListing",
    "HighLevelConsumer",
    "IllegalStateError",
    "MemberDescription",
    "MessageAndMetadata",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetOutOfRangeError",
    "PartitionLag",
    "Producer",
    "RawFetched",
    "RecordMetadata",
    "ShareConsumer",
    "ShareRecord",
    "SimpleConsumer",
    "Whitelist",
    "ZookeeperConsumer",
    "create_message_streams",
    "create_message_streams_by_filter",
    "murmur2",
    "murmur2_partition",
    "parse_bootstrap",
]

#: the ZooKeeper consumer's names, imported on first use: it needs kazoo (the ``cluster`` extra),
#: which a plain install or a Spark worker does not have
_ZK_CONSUMER = ("ConsumerTimeoutError", "MessageAndMetadata", "ZookeeperConsumer")


def __getattr__(name: str) -> Any:
    if name in _ZK_CONSUMER:
        from odradek.client import zk_consumer

        return getattr(zk_consumer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
