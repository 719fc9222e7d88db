"""Broker configuration: Kafka's names, types and defaults, and where each value came from.

One table (:data:`BROKER_CONFIGS`) is the single source of truth for ``server.properties``,
``--override key=value``, ``ODRADEK_*`` environment variables (``ODRADEK_LOG_DIRS`` is
``log.dirs``) and the short command-line flags.  Later sources win:
defaults < properties file < environment < overrides < flags.

Topic-level configs (``segment.bytes``, ``retention.ms``, ...) take their defaults from broker
configs (``log.segment.bytes``, ``log.retention.ms``, ...): :data:`TOPIC_SYNONYMS` lists, for
each topic config, the broker configs it falls back to, in order, as Kafka does.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

from odradek.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = [
    "BROKER_CONFIGS",
    "DEPRECATED_TOPIC_CONFIGS",
    "KAFKA_BROKER_CONFIGS",
    "SYNONYM_UNITS",
    "TOPIC_CONFIGS",
    "TOPIC_KEYS",
    "TOPIC_SCHEMA",
    "TOPIC_SYNONYMS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "Listener",
    "TopicKey",
    "iceberg_partition_spec",
    "nearest_name",
    "parse_listeners",
    "read_properties",
    "split_per_listener",
    "topic_default",
    "topic_defaults",
    "unknown_name_message",
]

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_CONFIG, message)


def nearest_name(name: str, known: Iterable[str], *, ignore_case: bool = False) -> str | None:
    """The known name closest to a misspelt ``name`` (edit similarity, difflib's), or None when
    nothing is close enough to be the one meant."""
    if len(name) > 255:  # no config name is that long; and the search's cost grows with it
        return None
    fold = str.lower if ignore_case else str
    by_key = {fold(n): n for n in known}
    match = difflib.get_close_matches(fold(name), list(by_key), n=1, cutoff=0.75)
    return by_key[match[0]] if match else None


def unknown_name_message(what: str, name: str, known: Iterable[str], where: str = "", *,
                         ignore_case: bool = False) -> str:
    """One wording for every unknown configuration name, wherever it was given (broker configs,
    ``ODRADEK_*`` variables, client configs, Spark options):
    ``unknown broker configuration 'log.retention.hour' in server.properties (did you mean
    'log.retention.hours'?)``."""
    near = nearest_name(name, known, ignore_case=ignore_case)
    text = f"unknown {what} {name!r}" + (f" {where}" if where else "")
    return text + (f" (did you mean {near!r}?)" if near is not None else "")


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs source codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


#: Kafka's DescribeConfigs config type codes
TYPE_CODES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8, "password": 9}


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One row of a configuration table: the broker's (:data:`BROKER_CONFIGS`), the clients'
    (``odradek.client``: producer, consumer, admin) and the Spark source's and sink's options
    all use it -- name, type, default, documentation and valid values."""

    name: str
    type: str  # boolean, string, int, short, long, double, list, class, password
    default: Any
    read_only: bool = True  # cannot be changed at run time (AlterConfigs on a broker)
    #: False: one of Kafka's configs that Odradek accepts, stores and describes but does not act on
    used: bool = True
    #: what it is (every config Odradek does not use has one; see docs/configuration.md)
    doc: str = ""
    #: a dynamic config that is set for one broker (resource name = its id), never cluster-wide
    per_broker: bool = False
    #: the values it may take, when they are a fixed set (empty: any value of its type)
    valid: tuple[str, ...] = ()

    @property
    def update_mode(self) -> str:
        """Kafka's name for how it may change: read-only, per-broker or cluster-wide."""
        return "read-only" if self.read_only else "per-broker" if self.per_broker else "cluster-wide"


#: dynamic configs that Kafka lets be set only per broker (DynamicBrokerConfig's PerBrokerConfigs)
_PER_BROKER = frozenset({"advertised.listeners"})


def _defs(*rows: tuple[str, str, Any] | tuple[str, str, Any, bool]) -> dict[str, ConfigDef]:
    return {r[0]: ConfigDef(r[0], r[1], r[2], r[3] if len(r) == 4 else True, per_broker=r[0] in _PER_BROKER) for r in rows}


BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    ("broker.id", "int", 0),
    ("node.id", "int", -1),
    ("broker.rack", "string", None),
    ("listeners", "string", "PLAINTEXT://127.0.0.1:9092"),
    # per broker at run time too (Kafka's dynamic per-broker config): Metadata then advertises it
    ("advertised.listeners", "string", None, False),
    ("listener.security.protocol.map", "string", "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
    ("inter.broker.listener.name", "string", None),
    ("security.inter.broker.protocol", "string", "PLAINTEXT"),
    # TLS (SSL and SASL_SSL listeners); each may be given per listener as
    # listener.name.<listener>.<config>.  ssl.keystore.type / ssl.truststore.type: PEM (told by
    # the file when not set) or PKCS12; Java's JKS cannot be read here.
    ("ssl.keystore.type", "string", None),
    ("ssl.keystore.location", "string", None),
    ("ssl.keystore.password", "password", None),
    ("ssl.key.password", "password", None),
    ("ssl.keystore.certificate.chain", "password", None),
    ("ssl.keystore.key", "password", None),
    ("ssl.truststore.type", "string", None),
    ("ssl.truststore.location", "string", None),
    ("ssl.truststore.password", "password", None),
    ("ssl.truststore.certificates", "password", None),
    ("ssl.client.auth", "string", "none"),
    ("ssl.protocol", "string", "TLSv1.3"),
    ("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3"),
    ("ssl.cipher.suites", "list", ""),
    ("ssl.endpoint.identification.algorithm", "string", "https"),
    ("ssl.principal.mapping.rules", "string", "DEFAULT"),
    # SASL (SASL_PLAINTEXT and SASL_SSL listeners); sasl.jaas.config also per listener and
    # mechanism: listener.name.<listener>.<mechanism>.sasl.jaas.config
    ("sasl.enabled.mechanisms", "list", "GSSAPI"),
    ("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
    ("sasl.jaas.config", "password", None),
    ("connections.max.reauth.ms", "long", 0),
    ("connection.failed.authentication.delay.ms", "int", 100),
    # the largest frame a connection of a SASL listener may send before it has authenticated
    # (ApiVersions, SaslHandshake, SaslAuthenticate, v0 tokens); a larger size prefix fails the
    # authentication and closes the connection, nothing of it read (Kafka's internal setting)
    ("sasl.server.max.receive.size", "int", 524288),
    # authorization: empty (none), odradek's own ("odradek.acl"), or Kafka's class names (AclAuthorizer,
    # StandardAuthorizer), which select the same ACL authorizer
    # replication throttles (KIP-73): bytes/s of the replicas the topics' *.replication.throttled.replicas
    # name, while they are out of the ISR (reassignment); dynamic, per broker
    ("leader.replication.throttled.rate", "long", 9223372036854775807, False),
    ("follower.replication.throttled.rate", "long", 9223372036854775807, False),
    ("replication.quota.window.num", "int", 11),
    ("replication.quota.window.size.seconds", "int", 1),
    ("authorizer.class.name", "string", ""),
    ("super.users", "string", ""),
    ("allow.everyone.if.no.acl.found", "boolean", False),
    # OAUTHBEARER: without a JWKS, Kafka's unsecured validator (development only; its options in
    # the mechanism's JAAS config); with one, signed tokens (KIP-768)
    ("sasl.server.callback.handler.class", "class", None),
    # GSSAPI (Kerberos): the service name clients ask for, and how Kerberos names become principals
    ("sasl.kerberos.service.name", "string", None),
    ("sasl.kerberos.principal.to.local.rules", "list", "DEFAULT"),
    ("sasl.oauthbearer.jwks.endpoint.url", "string", None),
    ("sasl.oauthbearer.expected.audience", "list", None),
    ("sasl.oauthbearer.expected.issuer", "string", None),
    ("sasl.oauthbearer.sub.claim.name", "string", "sub"),
    ("sasl.oauthbearer.scope.claim.name", "string", "scope"),
    ("sasl.oauthbearer.clock.skew.seconds", "int", 30),
    ("log.dirs", "string", None),
    ("log.dir", "string", "./odradek-data"),
    ("num.partitions", "int", 1, False),
    ("default.replication.factor", "int", 1, False),
    ("auto.create.topics.enable", "boolean", True),
    # Odradek's own bounds on one request (Kafka has none): topics named in the top-level array
    # of Metadata, CreateTopics, DeleteTopics, DeleteRecords and ListOffsets (more: the connection
    # closes before the request is decoded), and topics one Metadata request may auto-create
    # (the others are answered LEADER_NOT_AVAILABLE, retriable)
    ("request.max.topics", "int", 10000),
    ("auto.create.topics.max.per.request", "int", 100),
    ("delete.topic.enable", "boolean", True),
    ("message.max.bytes", "int", 1048588, False),
    ("socket.request.max.bytes", "int", 104857600),
    ("socket.send.buffer.bytes", "int", 102400),
    ("socket.receive.buffer.bytes", "int", 102400),
    ("connections.max.idle.ms", "long", 600000),
    # connection quotas (see odradek.broker.connections); max.connections and
    # max.connection.creation.rate also per listener: listener.name.<l>.max.connections
    ("max.connections.per.ip", "int", 2147483647),
    ("max.connections.per.ip.overrides", "string", ""),
    ("max.connections", "int", 2147483647),
    ("max.connection.creation.rate", "int", 2147483647),
    # client quotas (odradek.broker.quotas): rates over quota.window.num samples of this many seconds
    ("quota.window.num", "int", 11),
    ("quota.window.size.seconds", "int", 1),
    ("queued.max.requests", "int", 500),
    ("num.network.threads", "int", 3, False),
    ("num.io.threads", "int", 8, False),
    ("num.recovery.threads.per.data.dir", "int", 2, False),
    ("fetch.max.bytes", "int", 57671680),
    # Odradek's own (Kafka has none): about how many records one answer to a consumer's Fetch
    # holds at most (0: no cap; followers are never capped).  librdkafka stops fetching for
    # fetch.queue.backoff.ms (1 s) whenever its queue holds queued.min.messages (100,000): an
    # answer below that keeps its fetches flowing; the first batch is returned whole anyway
    ("fetch.response.max.records", "int", 50000),
    # Odradek's own: once an answer to a consumer's Fetch holds this many bytes it takes no
    # further partition (the one that crosses it is read to its own limits; 0: fill up to
    # fetch.max.bytes, as Kafka does).  librdkafka consumes one 1 MB partition a response ~20 %
    # faster than four (benchmarks/scale.py); clients rotate the partitions they fetch first
    ("fetch.response.target.bytes", "int", 1048576),
    ("log.segment.bytes", "int", 1073741824, False),
    ("log.roll.ms", "long", None, False),
    ("log.roll.hours", "int", 168),
    ("log.roll.jitter.ms", "long", None, False),
    ("log.roll.jitter.hours", "int", 0),
    ("log.retention.ms", "long", None, False),
    ("log.retention.minutes", "int", None),
    ("log.retention.hours", "int", 168),
    ("log.retention.bytes", "long", -1, False),
    ("log.retention.check.interval.ms", "long", 300000),
    ("log.index.size.max.bytes", "int", 10485760, False),
    ("log.index.interval.bytes", "int", 4096, False),
    ("log.flush.interval.messages", "long", LONG_MAX, False),
    ("log.flush.interval.ms", "long", None, False),
    ("log.flush.scheduler.interval.ms", "long", LONG_MAX),
    ("log.flush.offset.checkpoint.interval.ms", "int", 60000),
    ("log.flush.start.offset.checkpoint.interval.ms", "int", 60000),
    ("log.cleanup.policy", "list", "delete", False),
    ("log.cleaner.enable", "boolean", True),
    ("log.cleaner.backoff.ms", "long", 15000, False),
    ("log.cleaner.min.cleanable.ratio", "double", 0.5, False),
    ("log.cleaner.delete.retention.ms", "long", 86400000, False),
    ("log.cleaner.min.compaction.lag.ms", "long", 0, False),
    ("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, False),
    ("log.segment.delete.delay.ms", "long", 60000, False),
    ("log.message.timestamp.type", "string", "CreateTime", False),
    ("log.message.timestamp.difference.max.ms", "long", LONG_MAX, False),
    ("log.message.timestamp.before.max.ms", "long", LONG_MAX, False),
    ("log.message.timestamp.after.max.ms", "long", LONG_MAX, False),
    ("log.message.downconversion.enable", "boolean", True, False),
    # deprecated since Kafka 3.0 and ignored (records are always written in format v2)
    ("log.message.format.version", "string", "3.0-IV1"),
    ("log.preallocate", "boolean", False, False),
    ("compression.type", "string", "producer", False),
    ("min.insync.replicas", "int", 1, False),
    ("unclean.leader.election.enable", "boolean", False, False),
    ("producer.id.expiration.ms", "int", 86400000, False),
    ("producer.id.expiration.check.interval.ms", "int", 600000),
    ("max.incremental.fetch.session.cache.slots", "int", 1000),
    ("offsets.topic.num.partitions", "int", 50),
    ("offsets.topic.replication.factor", "short", 3),
    ("offsets.topic.segment.bytes", "int", 104857600),
    ("offsets.retention.minutes", "int", 10080),
    ("offsets.retention.check.interval.ms", "long", 600000),
    ("offsets.commit.timeout.ms", "int", 5000),
    ("offsets.commit.required.acks", "short", -1),
    ("offsets.load.buffer.size", "int", 5242880),
    ("offset.metadata.max.bytes", "int", 4096),
    ("group.initial.rebalance.delay.ms", "int", 3000),
    ("group.min.session.timeout.ms", "int", 6000),
    ("group.max.session.timeout.ms", "int", 1800000),
    ("group.max.size", "int", INT_MAX),
    # KIP-848 consumer groups (ConsumerGroupHeartbeat): the protocols served ("consumer" enables
    # them), the session timeout and heartbeat interval the coordinator gives their members (each
    # within its min/max bounds, the interval below the session timeout: checked at start-up), the
    # largest group, the server-side assignors (uniform, range, or Kafka's class names of them; the
    # first the default, a member may choose another with group.remote.assignor) and when a live
    # group converts between the classic and the consumer protocol (disabled, upgrade, downgrade,
    # bidirectional)
    ("group.coordinator.rebalance.protocols", "list", "classic,consumer"),
    ("group.consumer.session.timeout.ms", "int", 45000),
    ("group.consumer.min.session.timeout.ms", "int", 45000),
    ("group.consumer.max.session.timeout.ms", "int", 60000),
    ("group.consumer.heartbeat.interval.ms", "int", 5000),
    ("group.consumer.min.heartbeat.interval.ms", "int", 5000),
    ("group.consumer.max.heartbeat.interval.ms", "int", 15000),
    ("group.consumer.max.size", "int", INT_MAX),
    ("group.consumer.assignors", "list",
     "org.apache.kafka.coordinator.group.assignor.UniformAssignor,org.apache.kafka.coordinator.group.assignor.RangeAssignor"),
    ("group.consumer.migration.policy", "string", "bidirectional"),
    # share groups (KIP-932; Kafka's GroupCoordinatorConfig and ShareGroupConfig): the session
    # timeout and heartbeat interval given to share-group members, the largest share group and the
    # share sessions a broker keeps; how long a member holds an acquired record, how often a record
    # is delivered before it is archived, and how many records of a share partition may be in flight.
    # Each default is also the default of the group config of the same name without the "group."
    # prefix (share.record.lock.duration.ms, ...), which a group may set within the min/max bounds
    ("group.share.session.timeout.ms", "int", 45000),
    ("group.share.min.session.timeout.ms", "int", 45000),
    ("group.share.max.session.timeout.ms", "int", 60000),
    ("group.share.heartbeat.interval.ms", "int", 5000),
    ("group.share.min.heartbeat.interval.ms", "int", 5000),
    ("group.share.max.heartbeat.interval.ms", "int", 15000),
    ("group.share.max.size", "int", 200),
    ("group.share.max.share.sessions", "int", 2000),
    ("group.share.record.lock.duration.ms", "int", 30000),
    ("group.share.min.record.lock.duration.ms", "int", 15000),
    ("group.share.max.record.lock.duration.ms", "int", 60000),
    ("group.share.delivery.count.limit", "int", 5),
    ("group.share.min.delivery.count.limit", "int", 2),
    ("group.share.max.delivery.count.limit", "int", 10),
    ("group.share.partition.max.record.locks", "int", 2000),
    ("share.fetch.purgatory.purge.interval.requests", "int", 1000),
    # KIP-1191: a share group's dead-letter topic must have this prefix
    ("errors.deadletterqueue.topic.name.prefix", "string", "dlq."),
    ("transactional.id.expiration.ms", "int", 604800000),
    ("transaction.max.timeout.ms", "int", 900000),
    ("transaction.state.log.num.partitions", "int", 50),
    ("transaction.state.log.replication.factor", "short", 3),
    ("transaction.state.log.min.isr", "int", 2),
    ("transaction.state.log.segment.bytes", "int", 104857600),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000),
    ("transaction.partition.verification.enable", "boolean", True),
    # the share coordinator (KIP-932) and __share_group_state
    ("share.coordinator.state.topic.num.partitions", "int", 50),
    ("share.coordinator.state.topic.replication.factor", "short", 3),
    ("share.coordinator.state.topic.min.isr", "short", 2),
    ("share.coordinator.state.topic.segment.bytes", "int", 104857600),
    ("share.coordinator.snapshot.update.records.per.snapshot", "int", 500),
    ("share.coordinator.write.timeout.ms", "int", 5000),
    # the most partitions one DescribeTopicPartitions answer carries (a request may ask fewer)
    ("max.request.partition.size.limit", "int", 2000),
    ("zookeeper.connect", "string", None),
    ("zookeeper.session.timeout.ms", "int", 18000),
    ("zookeeper.connection.timeout.ms", "int", None),
    ("controlled.shutdown.enable", "boolean", True),
    ("controlled.shutdown.max.retries", "int", 3),
    ("controlled.shutdown.retry.backoff.ms", "long", 5000),
    ("controller.socket.timeout.ms", "int", 30000),
    ("request.timeout.ms", "int", 30000),
    ("replica.socket.timeout.ms", "int", 30000),
    ("auto.leader.rebalance.enable", "boolean", True),
    ("leader.imbalance.per.broker.percentage", "int", 10),
    ("leader.imbalance.check.interval.seconds", "long", 300),
    ("replica.lag.time.max.ms", "long", 30000),
    ("replica.fetch.wait.max.ms", "int", 500),
    ("replica.fetch.min.bytes", "int", 1),
    ("replica.fetch.max.bytes", "int", 1048576),
    ("replica.fetch.response.max.bytes", "int", 10485760),
    ("replica.fetch.backoff.ms", "int", 1000),
    ("num.replica.fetchers", "int", 1),
    ("replica.high.watermark.checkpoint.interval.ms", "long", 5000),
    # Prometheus metrics (Odradek's own; Kafka has JMX): /metrics on an HTTP listener of the broker
    # at metrics.host:metrics.port (odradek serve --metrics-port).  Unset: on in the embedded
    # (single-node) mode at 127.0.0.1:9404, or a free port when 9404 is taken; off in a cluster
    # (ZooKeeper).  0 picks a free port; -1 turns metrics off (nothing is counted).  The URL is
    # in the broker's ready line.
    ("metrics.port", "int", None),
    ("metrics.host", "string", "127.0.0.1"),
    # who may read /metrics.  metrics.http.allowed.hosts: the Host header values accepted beside
    # the bound address, the address a request came in on, localhost and this machine's names
    # (DNS-rebinding protection; "*" accepts any).  metrics.http.basic.auth.user/.password: when
    # set, every request needs these HTTP Basic credentials (Prometheus' basic_auth).
    ("metrics.http.allowed.hosts", "list", None),
    ("metrics.http.basic.auth.user", "string", None),
    ("metrics.http.basic.auth.password", "password", None),
    # client telemetry (KIP-714, Kafka's name): the largest PushTelemetry metrics payload, compressed
    # or once decompressed; larger pushes are answered TELEMETRY_TOO_LARGE.  Clients push when the
    # broker exports metrics (metrics.port) and a client-metrics subscription matches them
    # (odradek configs --entity-type client-metrics)
    ("telemetry.max.bytes", "int", 1048576),
    # The schema registry (odradek.registry): Confluent's Schema Registry REST API on an HTTP
    # listener of its own, schemas kept in the compacted _schemas topic (see
    # docs/schema-registry.md).  schema.registry.listeners: http://HOST:PORT or https://HOST:PORT (the
    # schema.registry.ssl.* keystore); unset: on at http://127.0.0.1:8081 in the embedded
    # (single-node) mode (a free port when 8081 is taken), off in a cluster; empty: off.
    ("schema.registry.listeners", "list", None),
    # the replication factor _schemas is created with (Confluent's kafkastore.topic.replication.factor;
    # a single node's is 1); its min.insync.replicas is 2 when the factor allows it
    ("schema.registry.topic.replication.factor", "short", 3),
    # the compatibility level of subjects without one (GET /config), and whether PUT /mode may change modes
    ("schema.registry.compatibility.level", "string", "BACKWARD"),
    ("schema.registry.mode.mutability", "boolean", True),
    # NONE or BASIC (HTTP Basic against the broker's SASL PLAIN users and SCRAM credentials).
    # Unset: BASIC on a broker with a SASL listener or an authorizer, NONE otherwise
    ("schema.registry.authentication.method", "string", None),
    # the largest request body (a schema with its references), and how long a request may wait
    # for the writer (the _schemas leader: forwarding, an election, the ISR) before it is answered
    # 50002/50003
    ("schema.registry.request.max.bytes", "int", 2097152),
    ("schema.registry.timeout.ms", "int", 10000),
    # TLS of an https listener, as the broker's ssl.* configs
    ("schema.registry.ssl.keystore.type", "string", None),
    ("schema.registry.ssl.keystore.location", "string", None),
    ("schema.registry.ssl.keystore.password", "password", None),
    ("schema.registry.ssl.key.password", "password", None),
    ("schema.registry.ssl.keystore.certificate.chain", "password", None),
    ("schema.registry.ssl.keystore.key", "password", None),
    ("schema.registry.ssl.truststore.type", "string", None),
    ("schema.registry.ssl.truststore.location", "string", None),
    ("schema.registry.ssl.truststore.password", "password", None),
    ("schema.registry.ssl.truststore.certificates", "password", None),
    ("schema.registry.ssl.client.auth", "string", "none"),
    ("schema.registry.ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3"),
    ("schema.registry.ssl.cipher.suites", "list", ""),
    ("schema.registry.ssl.endpoint.identification.algorithm", "string", "https"),
    # Limits that bound what one request may ask for (Kafka has none by these names; KIP-578
    # proposed ``max.broker.partitions``).  A CreateTopics / CreatePartitions / auto-creation
    # beyond them is refused with POLICY_VIOLATION and a message, before any work is done.
    #   max.partitions.per.request: partitions one CreateTopics / CreatePartitions request may add
    #   max.partitions.per.topic:   partitions one topic may have
    #   max.broker.partitions:      partitions this broker may host; -1 derives it from the file
    #                               descriptor limit (RLIMIT_NOFILE after raising the soft limit to
    #                               the hard one): (limit - reserve for connections) / descriptors
    #                               per partition (see odradek.broker.limits)
    ("max.partitions.per.request", "int", 10000, False),
    ("max.partitions.per.topic", "int", 10000, False),
    ("max.broker.partitions", "int", -1, False),
    # topics as Iceberg tables (odradek.tables): the catalog the partition leaders commit to.
    #   odradek.iceberg.catalog.type: sql (PyIceberg's SQL catalog; a SQLite file under the first
    #     log dir unless odradek.iceberg.catalog.uri names a database) or rest (a REST catalog at
    #     odradek.iceberg.catalog.uri)
    #   odradek.iceberg.warehouse: where data and metadata files go (a path or URL; unset: the
    #     directory iceberg/warehouse under the first log dir)
    #   odradek.iceberg.namespace: the namespace the topics' tables are created in
    ("odradek.iceberg.catalog.type", "string", "sql"),
    ("odradek.iceberg.catalog.uri", "string", None),
    ("odradek.iceberg.warehouse", "string", None),
    ("odradek.iceberg.namespace", "string", "odradek"),
)

_R, _C, _B = "read-only", "cluster-wide", "per-broker"


def _kafka_defs(*rows: tuple[str, str, Any, str, str]) -> dict[str, ConfigDef]:
    return {
        name: ConfigDef(name, type_, default, mode == _R, used=False, doc=doc, per_broker=mode == _B)
        for name, type_, default, mode, doc in rows
    }


#: Kafka's broker configs (3.x and 4.0) that Odradek accepts, stores and describes but does not act
#: on: a server.properties written for Kafka starts Odradek unchanged (with one WARN line naming
#: them), and AlterConfigs / DescribeConfigs on a broker answer them as Kafka does.  Names, types,
#: defaults and update modes are Kafka's; the descriptions say what each is for in Kafka.
KAFKA_BROKER_CONFIGS: dict[str, ConfigDef] = _kafka_defs(
    # broker identity and registration
    ("broker.id.generation.enable", "boolean", True, _R, "Kafka (ZooKeeper mode): assign a broker id automatically when broker.id is unset."),
    ("reserved.broker.max.id", "int", 1000, _R, "Kafka (ZooKeeper mode): the largest broker id a user may configure; generated ids start above it."),
    ("early.start.listeners", "string", None, _R, "Kafka: listeners started before the authorizer has loaded."),
    ("control.plane.listener.name", "string", None, _R, "Kafka (ZooKeeper mode): a listener reserved for controller-to-broker requests."),
    ("socket.listen.backlog.size", "int", 50, _R, "Kafka: the pending-connection queue length of each listening socket."),
    ("queued.max.request.bytes", "long", -1, _R, "Kafka: bytes of queued requests before reading stops (-1: no limit)."),
    ("socket.connection.setup.timeout.ms", "long", 10000, _R, "Kafka: first timeout for the broker's own outgoing connections."),
    ("socket.connection.setup.timeout.max.ms", "long", 30000, _R, "Kafka: largest timeout for the broker's own outgoing connections."),
    # threads and purgatories
    ("background.threads", "int", 10, _C, "Kafka: threads for background tasks."),
    ("num.replica.alter.log.dirs.threads", "int", None, _R, "Kafka: threads moving replicas between log directories."),
    ("fetch.purgatory.purge.interval.requests", "int", 1000, _R, "Kafka: fetch purgatory purge interval, in requests."),
    ("producer.purgatory.purge.interval.requests", "int", 1000, _R, "Kafka: produce purgatory purge interval, in requests."),
    ("delete.records.purgatory.purge.interval.requests", "int", 1, _R, "Kafka: delete-records purgatory purge interval, in requests."),
    # KRaft (Odradek's metadata is embedded or in ZooKeeper)
    ("process.roles", "list", "", _R, "Kafka (KRaft): whether this node is a broker, a controller or both."),
    ("controller.listener.names", "string", None, _R, "Kafka (KRaft): the listeners the controllers use."),
    ("sasl.mechanism.controller.protocol", "string", "GSSAPI", _R, "Kafka (KRaft): the SASL mechanism for talking to controllers."),
    ("initial.broker.registration.timeout.ms", "int", 60000, _R, "Kafka (KRaft): how long a broker waits for its first registration."),
    ("broker.heartbeat.interval.ms", "int", 2000, _R, "Kafka (KRaft): interval of broker heartbeats to the controller."),
    ("broker.session.timeout.ms", "int", 9000, _R, "Kafka (KRaft): how long a broker may miss heartbeats before it is fenced."),
    ("metadata.log.dir", "string", None, _R, "Kafka (KRaft): the directory of the metadata log."),
    ("metadata.log.segment.bytes", "int", 1073741824, _R, "Kafka (KRaft): segment size of the metadata log."),
    ("metadata.log.segment.ms", "long", 604800000, _R, "Kafka (KRaft): segment roll time of the metadata log."),
    ("metadata.log.max.record.bytes.between.snapshots", "long", 20971520, _R, "Kafka (KRaft): metadata log bytes between two snapshots."),
    ("metadata.log.max.snapshot.interval.ms", "long", 3600000, _R, "Kafka (KRaft): longest time between two metadata snapshots."),
    ("metadata.max.retention.bytes", "long", 104857600, _R, "Kafka (KRaft): bytes of metadata log kept."),
    ("metadata.max.retention.ms", "long", 604800000, _R, "Kafka (KRaft): how long metadata log segments are kept."),
    ("metadata.max.idle.interval.ms", "int", 500, _R, "Kafka (KRaft): interval of no-op records the active controller appends."),
    ("zookeeper.metadata.migration.enable", "boolean", False, _R, "Kafka: migrate the metadata from ZooKeeper to KRaft."),
    ("eligible.leader.replicas.enable", "boolean", False, _R, "Kafka (KRaft): eligible leader replicas (KIP-966)."),
    ("controller.quorum.voters", "list", "", _R, "Kafka (KRaft): the controller quorum's voters, id@host:port."),
    ("controller.quorum.bootstrap.servers", "list", "", _R, "Kafka (KRaft): addresses to discover the controller quorum."),
    ("controller.quorum.election.timeout.ms", "int", 1000, _R, "Kafka (KRaft): time without a leader before an election."),
    ("controller.quorum.fetch.timeout.ms", "int", 2000, _R, "Kafka (KRaft): time without a fetch from the leader before a voter stands for election."),
    ("controller.quorum.election.backoff.max.ms", "int", 1000, _R, "Kafka (KRaft): longest wait before a new election."),
    ("controller.quorum.append.linger.ms", "int", 25, _R, "Kafka (KRaft): how long the leader lingers to batch metadata writes."),
    ("controller.quorum.request.timeout.ms", "int", 2000, _R, "Kafka (KRaft): request timeout within the controller quorum."),
    ("controller.quorum.retry.backoff.ms", "int", 20, _R, "Kafka (KRaft): backoff before a failed quorum request is retried."),
    ("controller.quota.window.num", "int", 11, _R, "Kafka (KRaft): samples kept for controller mutation quotas."),
    ("controller.quota.window.size.seconds", "int", 1, _R, "Kafka (KRaft): length of one controller-quota sample."),
    # ZooKeeper client settings Odradek's kazoo client does not take
    ("zookeeper.set.acl", "boolean", False, _R, "Kafka: write ZooKeeper nodes with secure ACLs."),
    ("zookeeper.max.in.flight.requests", "int", 10, _R, "Kafka: unacknowledged requests the ZooKeeper client may send."),
    ("zookeeper.ssl.client.enable", "boolean", False, _R, "Kafka: connect to ZooKeeper over TLS."),
    ("zookeeper.clientCnxnSocket", "string", None, _R, "Kafka: the ZooKeeper client's socket implementation (Netty for TLS)."),
    ("zookeeper.ssl.keystore.location", "string", None, _R, "Kafka: keystore for TLS to ZooKeeper."),
    ("zookeeper.ssl.keystore.password", "password", None, _R, "Kafka: password of the ZooKeeper TLS keystore."),
    ("zookeeper.ssl.keystore.type", "string", None, _R, "Kafka: format of the ZooKeeper TLS keystore."),
    ("zookeeper.ssl.truststore.location", "string", None, _R, "Kafka: truststore for TLS to ZooKeeper."),
    ("zookeeper.ssl.truststore.password", "password", None, _R, "Kafka: password of the ZooKeeper TLS truststore."),
    ("zookeeper.ssl.truststore.type", "string", None, _R, "Kafka: format of the ZooKeeper TLS truststore."),
    ("zookeeper.ssl.protocol", "string", "TLSv1.2", _R, "Kafka: TLS protocol for ZooKeeper connections."),
    ("zookeeper.ssl.enabled.protocols", "list", None, _R, "Kafka: TLS protocols enabled for ZooKeeper connections."),
    ("zookeeper.ssl.cipher.suites", "list", None, _R, "Kafka: cipher suites enabled for ZooKeeper connections."),
    ("zookeeper.ssl.endpoint.identification.algorithm", "string", "HTTPS", _R, "Kafka: host name verification of ZooKeeper's certificate."),
    ("zookeeper.ssl.crl.enable", "boolean", False, _R, "Kafka: check certificate revocation lists for ZooKeeper TLS."),
    ("zookeeper.ssl.ocsp.enable", "boolean", False, _R, "Kafka: check OCSP for ZooKeeper TLS."),
    # replication and log
    ("inter.broker.protocol.version", "string", "3.9-IV0", _R, "Kafka (ZooKeeper mode): the protocol version brokers speak to each other."),
    ("replica.socket.receive.buffer.bytes", "int", 65536, _R, "Kafka: socket receive buffer of replica fetcher connections."),
    ("replica.selector.class", "string", None, _R, "Kafka: chooses the replica a consumer fetches from (KIP-392)."),
    ("log.cleaner.threads", "int", 1, _C, "Kafka: threads compacting logs (Odradek's log scheduler compacts)."),
    ("log.cleaner.dedupe.buffer.size", "long", 134217728, _C, "Kafka: memory for the compaction key index, over all cleaner threads."),
    ("log.cleaner.io.buffer.size", "int", 524288, _C, "Kafka: memory for compaction read and write buffers."),
    ("log.cleaner.io.buffer.load.factor", "double", 0.9, _C, "Kafka: fill ratio of the compaction key index."),
    ("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, _C, "Kafka: I/O throttle of log compaction."),
    ("log.dir.failure.timeout.ms", "long", 30000, _R, "Kafka (KRaft): how long a failed log directory may stay unreported before shutdown."),
    ("compression.gzip.level", "int", -1, _C, "Kafka: gzip level for broker-side recompression (-1: the codec's default)."),
    ("compression.lz4.level", "int", 9, _C, "Kafka: lz4 level for broker-side recompression."),
    ("compression.zstd.level", "int", 3, _C, "Kafka: zstd level for broker-side recompression."),
    ("create.topic.policy.class.name", "class", None, _R, "Kafka: a plug-in class that may veto topic creation."),
    ("alter.config.policy.class.name", "class", None, _R, "Kafka: a plug-in class that may veto config changes."),
    # tiered storage (not implemented)
    ("remote.log.storage.system.enable", "boolean", False, _R, "Kafka: tiered storage on this broker."),
    ("remote.log.storage.manager.class.name", "string", None, _R, "Kafka (tiered storage): the remote storage plug-in."),
    ("remote.log.storage.manager.class.path", "string", None, _R, "Kafka (tiered storage): class path of the remote storage plug-in."),
    ("remote.log.storage.manager.impl.prefix", "string", "rsm.config.", _R, "Kafka (tiered storage): prefix of the remote storage plug-in's settings."),
    ("remote.log.metadata.manager.class.name", "string", "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", _R, "Kafka (tiered storage): the remote log metadata plug-in."),
    ("remote.log.metadata.manager.class.path", "string", None, _R, "Kafka (tiered storage): class path of the remote log metadata plug-in."),
    ("remote.log.metadata.manager.impl.prefix", "string", "rlmm.config.", _R, "Kafka (tiered storage): prefix of the remote log metadata plug-in's settings."),
    ("remote.log.metadata.manager.listener.name", "string", None, _R, "Kafka (tiered storage): the listener the metadata plug-in's clients use."),
    ("remote.log.metadata.custom.metadata.max.bytes", "int", 128, _R, "Kafka (tiered storage): largest custom metadata of a remote segment."),
    ("remote.log.index.file.cache.total.size.bytes", "long", 1073741824, _C, "Kafka (tiered storage): disk cache of remote index files."),
    ("remote.log.manager.thread.pool.size", "int", 10, _R, "Kafka (tiered storage): threads of the remote log manager."),
    ("remote.log.manager.copier.thread.pool.size", "int", -1, _R, "Kafka (tiered storage): threads copying segments to remote storage."),
    ("remote.log.manager.expiration.thread.pool.size", "int", -1, _R, "Kafka (tiered storage): threads deleting expired remote segments."),
    ("remote.log.manager.task.interval.ms", "long", 30000, _R, "Kafka (tiered storage): interval of the remote log manager's tasks."),
    ("remote.log.reader.threads", "int", 10, _R, "Kafka (tiered storage): threads reading remote segments."),
    ("remote.log.reader.max.pending.tasks", "int", 100, _R, "Kafka (tiered storage): queued remote reads."),
    ("log.local.retention.ms", "long", -2, _C, "Kafka (tiered storage): local retention time of tiered topics (-2: retention.ms)."),
    ("log.local.retention.bytes", "long", -2, _C, "Kafka (tiered storage): local retention size of tiered topics (-2: retention.bytes)."),
    ("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX, _C, "Kafka (tiered storage): copy throttle."),
    ("remote.log.manager.copy.quota.window.num", "int", 11, _R, "Kafka (tiered storage): samples kept for the copy throttle."),
    ("remote.log.manager.copy.quota.window.size.seconds", "int", 1, _R, "Kafka (tiered storage): length of one copy-throttle sample."),
    ("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX, _C, "Kafka (tiered storage): remote fetch throttle."),
    ("remote.log.manager.fetch.quota.window.num", "int", 11, _R, "Kafka (tiered storage): samples kept for the fetch throttle."),
    ("remote.log.manager.fetch.quota.window.size.seconds", "int", 1, _R, "Kafka (tiered storage): length of one fetch-throttle sample."),
    ("remote.fetch.max.wait.ms", "int", 500, _C, "Kafka (tiered storage): longest wait of a fetch served from remote storage."),
    ("remote.list.offsets.request.timeout.ms", "long", 30000, _C, "Kafka (tiered storage): timeout of a ListOffsets answered from remote storage."),
    # quotas
    ("alter.log.dirs.replication.quota.window.num", "int", 11, _R, "Kafka: samples kept for the log-dir move throttle."),
    ("alter.log.dirs.replication.quota.window.size.seconds", "int", 1, _R, "Kafka: length of one log-dir move throttle sample."),
    ("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, _C, "Kafka: throttle of replicas moving between log directories."),
    ("client.quota.callback.class", "class", None, _R, "Kafka: a plug-in class deciding client quotas."),
    # groups: the consumer protocol (KIP-848) and share groups, with Odradek's own limits
    ("group.coordinator.threads", "int", 1, _R, "Kafka: threads of the group coordinator."),
    ("group.coordinator.append.linger.ms", "int", 10, _R, "Kafka: how long the group coordinator lingers to batch its writes."),
    ("group.share.max.groups", "short", 10, _R, "Kafka: most share groups."),
    ("share.coordinator.state.topic.num.partitions", "int", 50, _R, "Kafka: partitions of __share_group_state."),
    ("share.coordinator.state.topic.replication.factor", "short", 3, _R, "Kafka: replication factor of __share_group_state."),
    ("share.coordinator.state.topic.min.isr", "short", 2, _R, "Kafka: min.insync.replicas of __share_group_state."),
    ("share.coordinator.state.topic.segment.bytes", "int", 104857600, _R, "Kafka: segment size of __share_group_state."),
    ("share.coordinator.state.topic.compression.codec", "int", 0, _R, "Kafka: codec of the share coordinator's records."),
    ("share.coordinator.threads", "int", 1, _R, "Kafka: threads of the share coordinator."),
    ("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, _R, "Kafka: share-state updates between two snapshots."),
    ("share.coordinator.load.buffer.size", "int", 5242880, _R, "Kafka: read size when loading __share_group_state."),
    ("share.coordinator.append.linger.ms", "int", 10, _R, "Kafka: how long the share coordinator lingers to batch its writes."),
    ("share.coordinator.write.timeout.ms", "int", 5000, _R, "Kafka: timeout of the share coordinator's writes."),
    ("offsets.topic.compression.codec", "int", 0, _R, "Kafka: codec of the group coordinator's records."),
    ("transaction.state.log.load.buffer.size", "int", 5242880, _R, "Kafka: read size when loading __transaction_state."),
    # metrics (Odradek exports Prometheus metrics; see metrics.port)
    ("metric.reporters", "list", "org.apache.kafka.common.metrics.JmxReporter", _C, "Kafka: classes metrics are reported to."),
    ("metrics.num.samples", "int", 2, _R, "Kafka: samples kept to compute a metric."),
    ("metrics.sample.window.ms", "long", 30000, _R, "Kafka: length of one metrics sample."),
    ("metrics.recording.level", "string", "INFO", _R, "Kafka: the most detailed level of metrics recorded."),
    ("auto.include.jmx.reporter", "boolean", True, _R, "Kafka 3.x: report metrics over JMX whatever metric.reporters says."),
    ("kafka.metrics.reporters", "list", "", _R, "Kafka: Yammer metrics reporter classes."),
    ("kafka.metrics.polling.interval.secs", "int", 10, _R, "Kafka: polling interval of the Yammer metrics reporters."),
    # security: TLS engine details, SASL login (the broker as a SASL client), Kerberos ticket
    # renewal, delegation tokens, password encoding
    ("security.providers", "string", None, _R, "Kafka: Java security provider creators."),
    ("principal.builder.class", "class", "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", _B, "Kafka: a plug-in class building principals (Odradek: ssl.principal.mapping.rules, sasl.kerberos.principal.to.local.rules)."),
    ("ssl.provider", "string", None, _B, "Kafka: the Java security provider of TLS."),
    ("ssl.keymanager.algorithm", "string", "SunX509", _B, "Kafka: the Java key manager factory algorithm."),
    ("ssl.trustmanager.algorithm", "string", "PKIX", _B, "Kafka: the Java trust manager factory algorithm."),
    ("ssl.secure.random.implementation", "string", None, _B, "Kafka: the Java SecureRandom implementation for TLS."),
    ("ssl.engine.factory.class", "class", None, _B, "Kafka: a plug-in class creating TLS engines."),
    ("ssl.allow.dn.changes", "boolean", False, _R, "Kafka: allow a reloaded keystore to change the certificate's distinguished name."),
    ("ssl.allow.san.changes", "boolean", False, _R, "Kafka: allow a reloaded keystore to change the certificate's alternative names."),
    ("sasl.client.callback.handler.class", "class", None, _R, "Kafka: a plug-in class for the broker's SASL client side."),
    ("sasl.login.class", "class", None, _R, "Kafka: a plug-in class performing the SASL login."),
    ("sasl.login.callback.handler.class", "class", None, _R, "Kafka: a plug-in class for the SASL login (e.g. fetching OAuth tokens)."),
    ("sasl.login.connect.timeout.ms", "int", None, _R, "Kafka: connect timeout of the OAuth login's HTTP requests."),
    ("sasl.login.read.timeout.ms", "int", None, _R, "Kafka: read timeout of the OAuth login's HTTP requests."),
    ("sasl.login.retry.backoff.ms", "long", 100, _R, "Kafka: first backoff of the OAuth login's retries."),
    ("sasl.login.retry.backoff.max.ms", "long", 10000, _R, "Kafka: largest backoff of the OAuth login's retries."),
    ("sasl.login.refresh.window.factor", "double", 0.8, _B, "Kafka: share of a login credential's lifetime after which it is refreshed."),
    ("sasl.login.refresh.window.jitter", "double", 0.05, _B, "Kafka: random jitter added to the login refresh time."),
    ("sasl.login.refresh.min.period.seconds", "short", 60, _B, "Kafka: shortest time between two login refreshes."),
    ("sasl.login.refresh.buffer.seconds", "short", 300, _B, "Kafka: time before expiry to keep when refreshing a login credential."),
    ("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", _B, "Kafka: path of the kinit command."),
    ("sasl.kerberos.ticket.renew.window.factor", "double", 0.8, _B, "Kafka: share of a Kerberos ticket's lifetime after which it is renewed."),
    ("sasl.kerberos.ticket.renew.jitter", "double", 0.05, _B, "Kafka: random jitter added to the Kerberos renewal time."),
    ("sasl.kerberos.min.time.before.relogin", "long", 60000, _B, "Kafka: shortest time between two Kerberos logins."),
    ("sasl.oauthbearer.token.endpoint.url", "string", None, _R, "Kafka: the OAuth token endpoint of the broker's own login."),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000, _R, "Kafka: interval of JWKS refreshes (Odradek reads the JWKS at start-up)."),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100, _R, "Kafka: first backoff of JWKS retries."),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", 10000, _R, "Kafka: largest backoff of JWKS retries."),
    ("delegation.token.secret.key", "password", None, _R, "Kafka: the secret signing delegation tokens."),
    ("delegation.token.master.key", "password", None, _R, "Kafka 3.x: the former name of delegation.token.secret.key."),
    ("delegation.token.max.lifetime.ms", "long", 604800000, _R, "Kafka: longest lifetime of a delegation token."),
    ("delegation.token.expiry.time.ms", "long", 86400000, _R, "Kafka: validity of a delegation token before it must be renewed."),
    ("delegation.token.expiry.check.interval.ms", "long", 3600000, _R, "Kafka: interval of the expired delegation token scan."),
    ("password.encoder.secret", "password", None, _R, "Kafka: secret encoding dynamically set passwords."),
    ("password.encoder.old.secret", "password", None, _R, "Kafka: the previous password.encoder.secret, for rotation."),
    ("password.encoder.keyfactory.algorithm", "string", None, _R, "Kafka: key factory algorithm of the password encoder."),
    ("password.encoder.cipher.algorithm", "string", "AES/CBC/PKCS5Padding", _R, "Kafka: cipher of the password encoder."),
    ("password.encoder.key.length", "int", 128, _R, "Kafka: key length of the password encoder."),
    ("password.encoder.iterations", "int", 4096, _R, "Kafka: iterations of the password encoder."),
    # Kafka's internal configs (accepted by Kafka, not in its documentation)
    ("unstable.api.versions.enable", "boolean", False, _R, "Kafka (internal): advertise API versions still in development."),
    ("unstable.feature.versions.enable", "boolean", False, _R, "Kafka (internal): allow feature levels still in development."),
    ("unclean.leader.election.interval.ms", "long", 300000, _R, "Kafka (internal): interval of the controller's unclean election checks."),
    ("metadata.log.segment.min.bytes", "int", 8388608, _R, "Kafka (internal, KRaft): smallest metadata log segment."),
    ("server.max.startup.time.ms", "long", LONG_MAX, _R, "Kafka (internal, KRaft): longest start-up before the broker gives up."),
    ("zookeeper.metadata.migration.min.batch.size", "int", 200, _R, "Kafka (internal): records per batch of the ZooKeeper migration."),
    ("group.coordinator.new.enable", "boolean", False, _R, "Kafka 3.x (internal): the new group coordinator (KIP-848)."),
    ("group.share.enable", "boolean", False, _R, "Kafka (internal): share groups (KIP-932) before they were generally available."),
    ("share.fetch.max.fetch.records", "int", INT_MAX, _R, "Kafka (internal): records one share fetch may return."),
    ("remote.log.manager.task.retry.backoff.ms", "long", 500, _R, "Kafka (internal, tiered storage): first backoff of a failed task."),
    ("remote.log.manager.task.retry.backoff.max.ms", "long", 30000, _R, "Kafka (internal, tiered storage): largest backoff of a failed task."),
    ("remote.log.manager.task.retry.jitter", "double", 0.2, _R, "Kafka (internal, tiered storage): jitter of the task backoff."),
    ("log.initial.task.delay.ms", "long", 30000, _R, "Kafka (internal): delay before the log manager's first background tasks."),
    # Kafka's ZooKeeper-mode AclAuthorizer: ACLs in another ZooKeeper (Odradek keeps them with the
    # rest of its metadata)
    ("authorizer.zookeeper.url", "string", None, _R, "Kafka's AclAuthorizer: a separate ZooKeeper for ACLs."),
    ("authorizer.zookeeper.connection.timeout.ms", "int", None, _R, "Kafka's AclAuthorizer: connection timeout of its ZooKeeper."),
    ("authorizer.zookeeper.session.timeout.ms", "int", None, _R, "Kafka's AclAuthorizer: session timeout of its ZooKeeper."),
    ("authorizer.zookeeper.max.in.flight.requests", "int", None, _R, "Kafka's AclAuthorizer: unacknowledged requests to its ZooKeeper."),
    *(
        ("authorizer." + name, type_, None, _R, f"Kafka's AclAuthorizer: {name} for its own ZooKeeper.")
        for name, type_ in (
            ("zookeeper.ssl.client.enable", "boolean"), ("zookeeper.clientCnxnSocket", "string"),
            ("zookeeper.ssl.keystore.location", "string"), ("zookeeper.ssl.keystore.password", "password"),
            ("zookeeper.ssl.keystore.type", "string"), ("zookeeper.ssl.truststore.location", "string"),
            ("zookeeper.ssl.truststore.password", "password"), ("zookeeper.ssl.truststore.type", "string"),
            ("zookeeper.ssl.protocol", "string"), ("zookeeper.ssl.enabled.protocols", "list"),
            ("zookeeper.ssl.cipher.suites", "list"), ("zookeeper.ssl.endpoint.identification.algorithm", "string"),
            ("zookeeper.ssl.crl.enable", "boolean"), ("zookeeper.ssl.ocsp.enable", "boolean"),
        )
    ),
)
# a row in BROKER_CONFIGS (a config Odradek acts on) wins over the same name here
BROKER_CONFIGS.update({name: d for name, d in KAFKA_BROKER_CONFIGS.items() if name not in BROKER_CONFIGS})

@dataclass(frozen=True, slots=True)
class TopicKey:
    """One topic-level config: the row every use of it reads (validation of CreateTopics and
    AlterConfigs, DescribeConfigs with its synonyms and documentation, the LogConfig defaults and
    the generated reference in ``docs/topic-configs.md``)."""

    name: str
    type: str  # boolean, string, int, long, double, list
    default: Any  # Kafka's default when no broker config gives one
    synonyms: tuple[str, ...]  # the broker configs its default comes from, in order
    doc: str
    #: why a deprecated config has no effect (a change naming it is accepted with a WARN line)
    deprecated: str | None = None
    #: settable by clients (CreateTopics, AlterConfigs) and reported by DescribeConfigs; the
    #: others are only accepted in stored metadata (written by Kafka's tools), with no effect
    settable: bool = True
    #: False: one of Kafka's topic configs that Odradek accepts, stores and describes but does not
    #: act on (a change naming it is accepted with a WARN line)
    used: bool = True


_T = TopicKey
#: Kafka's topic-level configs, one row each
TOPIC_SCHEMA: tuple[TopicKey, ...] = (
    _T("cleanup.policy", "list", "delete", ("log.cleanup.policy",),
       "What happens to old segments: delete (by retention.ms / retention.bytes), compact (keep the "
       "latest record per key), or both."),
    _T("compression.type", "string", "producer", ("compression.type",),
       "The codec batches are stored with: producer keeps what the producer sent; uncompressed, gzip, "
       "snappy, lz4 or zstd recompresses on the broker."),
    _T("delete.retention.ms", "long", 86400000, ("log.cleaner.delete.retention.ms",),
       "How long a tombstone (a null value) stays in a compacted topic, so that consumers that lag see it."),
    _T("file.delete.delay.ms", "long", 60000, ("log.segment.delete.delay.ms",),
       "How long a segment removed from the log waits before its files are deleted (reads in flight finish)."),
    _T("flush.messages", "long", LONG_MAX, ("log.flush.interval.messages",),
       "fsync the log after this many appended records (default: leave it to the OS and replication)."),
    _T("flush.ms", "long", LONG_MAX, ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
       "fsync the log when its oldest unflushed record is this old."),
    _T("index.interval.bytes", "int", 4096, ("log.index.interval.bytes",),
       "Bytes of records between two entries of the offset and time indexes."),
    _T("max.compaction.lag.ms", "long", LONG_MAX, ("log.cleaner.max.compaction.lag.ms",),
       "The longest a record may stay uncompacted in a compacted topic."),
    _T("max.message.bytes", "int", 1048588, ("message.max.bytes",),
       "The largest record batch (with its 12-byte log overhead) a producer may write to the topic."),
    _T("message.downconversion.enable", "boolean", True, ("log.message.downconversion.enable",),
       "Whether fetches by clients older than message format v2 get their batches converted."),
    _T("message.format.version", "string", "3.0-IV1", ("log.message.format.version",),
       "Deprecated: records are always written in format v2.",
       deprecated="records are always written in message format v2 (Kafka 3.0 deprecated this "
       "configuration and ignores it; Kafka 4.0 removes it)"),
    _T("message.timestamp.difference.max.ms", "long", LONG_MAX, ("log.message.timestamp.difference.max.ms",),
       "The largest difference between a record's CreateTime and the broker's clock (either way)."),
    _T("message.timestamp.before.max.ms", "long", LONG_MAX, ("log.message.timestamp.before.max.ms",),
       "How far before the broker's clock a record's CreateTime may be."),
    _T("message.timestamp.after.max.ms", "long", LONG_MAX, ("log.message.timestamp.after.max.ms",),
       "How far after the broker's clock a record's CreateTime may be."),
    _T("message.timestamp.type", "string", "CreateTime", ("log.message.timestamp.type",),
       "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's clock."),
    _T("min.cleanable.dirty.ratio", "double", 0.5, ("log.cleaner.min.cleanable.ratio",),
       "The share of a compacted log not yet compacted that makes it due for cleaning."),
    _T("min.compaction.lag.ms", "long", 0, ("log.cleaner.min.compaction.lag.ms",),
       "The shortest time a record stays uncompacted."),
    _T("min.insync.replicas", "int", 1, ("min.insync.replicas",),
       "With acks=all, the fewest in-sync replicas a write needs (else NOT_ENOUGH_REPLICAS)."),
    _T("preallocate", "boolean", False, ("log.preallocate",),
       "Preallocate a new segment's file."),
    _T("retention.bytes", "long", -1, ("log.retention.bytes",),
       "With cleanup.policy=delete, the largest a partition's log may grow before its oldest segments "
       "are deleted (-1: no limit)."),
    _T("retention.ms", "long", 604800000, ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
       "With cleanup.policy=delete, how long a segment is kept after its newest record (-1: forever)."),
    _T("segment.bytes", "int", 1073741824, ("log.segment.bytes",),
       "The size at which a new segment file is rolled."),
    _T("segment.index.bytes", "int", 10485760, ("log.index.size.max.bytes",),
       "The size of a segment's offset and time index files."),
    _T("segment.jitter.ms", "long", 0, ("log.roll.jitter.ms", "log.roll.jitter.hours"),
       "A random amount up to this subtracted from segment.ms, so that partitions do not roll together."),
    _T("segment.ms", "long", 604800000, ("log.roll.ms", "log.roll.hours"),
       "Roll a new segment when the active one is this old, even if not full."),
    _T("unclean.leader.election.enable", "boolean", False, ("unclean.leader.election.enable",),
       "Whether a replica outside the ISR may become leader when no in-sync replica is left (records "
       "acknowledged by the old ISR can be lost)."),
    _T("leader.replication.throttled.replicas", "list", "", (),
       "Replicas whose replication the leader throttles to leader.replication.throttled.rate (KIP-73): "
       "partition:broker pairs naming the leader's side, or '*' for every replica."),
    _T("follower.replication.throttled.replicas", "list", "", (),
       "Replicas whose replication the follower throttles to follower.replication.throttled.rate (KIP-73): "
       "partition:broker pairs naming the follower's side, or '*' for every replica."),
    # Confluent Server's broker-side schema validation (odradek.schemas.validation)
    _T("errors.deadletterqueue.group.enable", "boolean", False, (),
       "Whether share groups may use the topic as their dead-letter topic (KIP-1191: the topic's owner "
       "allows it; a group's errors.deadletterqueue.topic.name naming a topic without it writes nothing)."),
    _T("confluent.key.schema.validation", "boolean", False, (),
       "Refuse (INVALID_RECORD) a produced batch whose record keys are not framed for the schema registry "
       "(magic byte 0 and a 4-byte schema id) with an id registered under the key subject."),
    _T("confluent.value.schema.validation", "boolean", False, (),
       "Refuse (INVALID_RECORD) a produced batch whose record values are not framed for the schema registry "
       "(magic byte 0 and a 4-byte schema id) with an id registered under the value subject."),
    _T("confluent.key.subject.name.strategy", "string", "io.confluent.kafka.serializers.subject.TopicNameStrategy",
       (), "How key validation names the subject: TopicNameStrategy (TOPIC-key), RecordNameStrategy (the "
       "schema's record name) or TopicRecordNameStrategy (TOPIC-RECORDNAME), as Confluent's class names."),
    _T("confluent.value.subject.name.strategy", "string", "io.confluent.kafka.serializers.subject.TopicNameStrategy",
       (), "How value validation names the subject: TopicNameStrategy (TOPIC-value), RecordNameStrategy (the "
       "schema's record name) or TopicRecordNameStrategy (TOPIC-RECORDNAME), as Confluent's class names."),
    # topics as Iceberg tables (odradek.tables)
    _T("odradek.iceberg.mode", "string", "off", (),
       "Whether the partition leaders write the topic's committed records to an Apache Iceberg table: off, "
       "key_value (key and value as binary with topic, partition, offset, timestamp and headers columns) "
       "or value_schema (the value decoded with the latest schema of the subject TOPIC-value as columns)."),
    _T("odradek.iceberg.partition.spec", "string", "hour(timestamp)", (),
       "How the topic's Iceberg table is partitioned: a comma-separated list of hour(timestamp), "
       "day(timestamp), month(timestamp), year(timestamp) (the record timestamp) and identity(partition) "
       "(the Kafka partition), or none."),
    _T("odradek.iceberg.commit.interval.ms", "long", 60000, (),
       "How often a partition's leader commits what it has written to the topic's Iceberg table (a "
       "snapshot): the longest a committed record waits before it is in the table."),
    # Kafka's, accepted and described with no effect here: broker-side recompression levels (KIP-390;
    # Odradek recompresses at each codec's default level) and tiered storage (not implemented)
    _T("compression.gzip.level", "int", -1, ("compression.gzip.level",),
       "Kafka: the gzip level of broker-side recompression (-1: the codec's default).", used=False),
    _T("compression.lz4.level", "int", 9, ("compression.lz4.level",),
       "Kafka: the lz4 level of broker-side recompression.", used=False),
    _T("compression.zstd.level", "int", 3, ("compression.zstd.level",),
       "Kafka: the zstd level of broker-side recompression.", used=False),
    _T("local.retention.ms", "long", -2, ("log.local.retention.ms",),
       "Kafka (tiered storage): how long segments stay on local disk (-2: retention.ms).", used=False),
    _T("local.retention.bytes", "long", -2, ("log.local.retention.bytes",),
       "Kafka (tiered storage): how much of a partition stays on local disk (-2: retention.bytes).", used=False),
    _T("remote.storage.enable", "boolean", False, (),
       "Kafka (tiered storage): copy the topic's segments to remote storage; only false is accepted here.",
       used=False),
    _T("remote.log.copy.disable", "boolean", False, (),
       "Kafka (tiered storage): stop copying segments to remote storage, keeping what is there.", used=False),
    _T("remote.log.delete.on.disable", "boolean", False, (),
       "Kafka (tiered storage): delete the remote segments when tiered storage is turned off.", used=False),
)
TOPIC_KEYS: dict[str, TopicKey] = {k.name: k for k in TOPIC_SCHEMA}
#: the topic configs clients may set, with their types (derived from :data:`TOPIC_SCHEMA`)
TOPIC_CONFIGS: dict[str, str] = {k.name: k.type for k in TOPIC_SCHEMA if k.settable}
#: each settable topic config's broker configs, in order (derived)
TOPIC_SYNONYMS: dict[str, tuple[str, ...]] = {k.name: k.synonyms for k in TOPIC_SCHEMA if k.settable}
#: deprecated topic configs Kafka 3.x still accepts, with why they have no effect (derived)
DEPRECATED_TOPIC_CONFIGS: dict[str, str] = {k.name: k.deprecated for k in TOPIC_SCHEMA if k.deprecated}


def _metadata_versions() -> frozenset[str]:
    releases = ["0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0", "0.10.1", "0.10.2", "0.11.0"]
    releases += [f"1.{m}" for m in range(2)] + [f"2.{m}" for m in range(9)] + [f"3.{m}" for m in range(10)]
    names = set(releases)
    names.update(r + "-IV0" for r in releases)
    names.update(r + "-IV1" for r in releases)
    names.update(r + "-IV2" for r in releases)
    names.update(r + "-IV3" for r in releases)
    names.update(r + ".0" for r in releases if r.count(".") == 1)
    return frozenset(names)


_METADATA_VERSIONS = _metadata_versions()
#: Confluent's subject name strategies, by class name or its last part
_SUBJECT_NAME_STRATEGIES = frozenset(
    prefix + name for prefix in ("", "io.confluent.kafka.serializers.subject.")
    for name in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
)
#: the broker configs given in a coarser unit than their topic config's milliseconds, with the factor
SYNONYM_UNITS = {
    "log.retention.minutes": 60000, "log.retention.hours": 3600000, "log.roll.hours": 3600000,
    "log.roll.jitter.hours": 3600000,
}
_ENUMS = {
    "compression.type": {"producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"},
    # Kafka's MetadataVersionValidator: a release ("0.10.0", "2.8", "3.0") or one of its
    # inter-broker protocol versions ("3.0-IV1")
    "message.format.version": _METADATA_VERSIONS,
    "log.message.format.version": _METADATA_VERSIONS,
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
    "ssl.client.auth": {"none", "requested", "required"},
    "security.inter.broker.protocol": {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"},
    "schema.registry.ssl.client.auth": {"none", "requested", "required"},
    "schema.registry.compatibility.level": {
        "NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE",
    },
    "schema.registry.authentication.method": {"NONE", "BASIC"},
    "confluent.key.subject.name.strategy": _SUBJECT_NAME_STRATEGIES,
    "confluent.value.subject.name.strategy": _SUBJECT_NAME_STRATEGIES,
    "odradek.iceberg.mode": {"off", "key_value", "value_schema"},
    "odradek.iceberg.catalog.type": {"sql", "rest"},
}
#: one transform of ``odradek.iceberg.partition.spec`` (the whole value: these, comma-separated, or none)
ICEBERG_PARTITION_FIELD = re.compile(r"(hour|day|month|year)\(timestamp\)|identity\(partition\)")


def iceberg_partition_spec(value: str) -> tuple[tuple[str, str], ...]:
    """``odradek.iceberg.partition.spec`` as ``(transform, source)`` pairs (empty: unpartitioned);
    ConfigError for anything else."""
    text = value.strip()
    if text == "none":
        return ()
    out = []
    for part in text.split(","):
        m = ICEBERG_PARTITION_FIELD.fullmatch(part.strip())
        if m is None:
            raise _invalid("odradek.iceberg.partition.spec", value,
                           "expected none or a comma-separated list of hour(timestamp), day(timestamp), "
                           "month(timestamp), year(timestamp), identity(partition)")
        transform, _, source = part.strip().partition("(")
        out.append((transform, source.rstrip(")")))
    if len({s for _, s in out}) != len(out):
        raise _invalid("odradek.iceberg.partition.spec", value, "each source column may be partitioned once")
    return tuple(out)


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?|[+-]?Infinity")
_INT_LIMITS = {"short": 2**15, "int": 2**31, "long": 2**63}


def _invalid(name: str, value: Any, reason: str) -> ConfigError:
    """Kafka's wording (ConfigException): ``Invalid value X for configuration NAME: REASON``."""
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def parse_value(name: str, type_: str, value: Any) -> Any:
    """Parse a config value given as text (or already typed) into its Python type, as Kafka's
    ConfigDef does: ASCII decimal numbers within the type's range, ``true``/``false``, and the
    listed values of an enumerated config; anything else is a :class:`ConfigError`."""
    if value is None:
        return None
    if type_ == "boolean":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise _invalid(name, value, "Expected value to be either true or false")
        return text == "true"
    if type_ in _INT_LIMITS:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _invalid(name, value, f"Expected value to be a {type_} number")
        text = str(value).strip()
        # ASCII digits only: Python's int() would also take "1_000" and other scripts' digits
        if not _INTEGER.fullmatch(text) or len(text) > 40:
            raise _invalid(name, value, f"Not a number of type {type_.upper()}")
        number = int(text)
        limit = _INT_LIMITS[type_]
        if not -limit <= number < limit:
            raise _invalid(name, value, f"Not a number of type {type_.upper()}")
        return number
    if type_ == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _invalid(name, value, "Expected value to be a double number")
        text = str(value).strip()
        if isinstance(value, str) and (not _DOUBLE.fullmatch(text) or len(text) > 400):
            raise _invalid(name, value, "Not a number of type DOUBLE")
        if text[-1:] in "dDfF" and not text.endswith("Infinity"):
            text = text[:-1]  # Java's 1.5d / 1.5f
        real = float(text)
        if real != real:
            raise _invalid(name, value, "Not a number of type DOUBLE")
        return real
    if type_ == "list":
        return ",".join(p.strip() for p in str(value).split(",") if p.strip())
    text = str(value).strip()
    allowed = _ENUMS.get(name)
    if allowed is not None and text not in allowed:
        shown = ", ".join(sorted(allowed)) if len(allowed) <= 10 else "a Kafka release or protocol version"
        raise _invalid(name, value, f"String must be one of: {shown}")
    return text


def _unescape(text: str, path: str, number: int) -> str:
    """A ``.properties`` line's escapes: ``\\t \\n \\r \\f``, ``\\uXXXX`` and ``\\`` before any
    other character (which stands for itself), as Java's Properties.load reads them."""
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        n = text[i + 1]
        if n == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{path}, line {number}: malformed \\uXXXX escape {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
        i += 2
    return "".join(out)


def _separator(line: str) -> int:
    """Index of the first unescaped ``=`` or ``:`` (or whitespace) ending a key, -1 if none."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in " \t\f":
            return i
        i += 1
    return -1


#: Java's line terminators (str.splitlines() would also split at \x1c, \x85, \u2028, ...)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-style ``.properties`` file as Java's Properties.load does: ``key=value``,
    ``key: value`` or ``key value``, ``#``/``!`` comments, backslash line continuations and
    escapes.  The file is read as UTF-8.  A file that cannot be read or a malformed escape is a
    :class:`ConfigError` naming the file (and the line)."""
    try:
        raw_text = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw_text.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = raw_text[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {at}: not UTF-8 text (byte {raw_text[exc.start]:#04x})") from None
    if "\x00" in text:
        at = text[: text.index("\x00")].count("\n") + 1
        raise ConfigError(f"{path}, line {at}: a NUL byte (is this a properties file?)")
    props: dict[str, str] = {}
    pending, first = "", 0
    # one more empty line ends a continuation left open on the last line
    for number, raw in enumerate([*_LINE_BREAK.split(text), ""], 1):
        stripped = raw.lstrip(" \t\f")
        if not pending and (not stripped or stripped.startswith(("#", "!"))):
            continue
        line = pending + stripped
        # an odd number of trailing backslashes continues the line
        if (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            pending, first = line[:-1], first or number
            continue
        at, pending, first = first or number, "", 0
        sep = _separator(line)
        if sep < 0:
            key, value = line, ""
        else:
            key, rest = line[:sep], line[sep:]
            if rest[0] in " \t\f":
                rest = rest.lstrip(" \t\f")
                if rest[:1] in ("=", ":"):
                    rest = rest[1:]
            else:
                rest = rest[1:]
            value = rest.lstrip(" \t\f")
        props[_unescape(key, str(path), at)] = _unescape(value, str(path), at).strip()
    return props


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    security_protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(spec: str, protocol_map: str) -> list[Listener]:
    """Parse ``listeners`` (``NAME://host:port,...``) using ``listener.security.protocol.map``."""
    mapping = {}
    for pair in protocol_map.split(","):
        if ":" in pair:
            name, proto = pair.split(":", 1)
            mapping[name.strip().upper()] = proto.strip().upper()
    result = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        if "://" not in item:
            raise ConfigError(f"listener {item!r} is not of the form NAME://host:port")
        name, rest = item.split("://", 1)
        name = name.strip().upper()
        host, sep, port_text = rest.rpartition(":")
        if not sep:
            raise ConfigError(f"listener {item!r} has no port")
        host = host.strip("[]") or "0.0.0.0"
        try:
            port = int(port_text)
        except ValueError as exc:
            raise ConfigError(f"listener {item!r} has an invalid port {port_text!r}: a port is a number 0-65535") from exc
        if not 0 <= port <= 65535:
            raise ConfigError(
                f"listener {item!r}: port {port} is out of range; a port is 0-65535 (0 picks a free port)"
            )
        if name not in mapping:
            raise ConfigError(f"listener name {name} is not in listener.security.protocol.map")
        result.append(Listener(name, mapping[name], host, port))
    if not result:
        raise ConfigError("no listeners configured")
    return result


_SASL_MECHANISM_NAMES = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"})

_UNSET = object()

#: ``ODRADEK_*`` environment variables that are not broker configs (``ODRADEK_TEST_*`` neither)
NON_CONFIG_ENV = frozenset({"ODRADEK_EXAMPLES", "ODRADEK_PURE_PYTHON"})  # examples dir; odradek.records.speedups


def env_name(config: str) -> str:
    """The environment variable of a broker config: ``log.dirs`` -> ``ODRADEK_LOG_DIRS``."""
    return "ODRADEK_" + config.upper().replace(".", "_").replace("-", "_")


def _mechanism_config(name: str) -> bool:
    """Whether ``name`` may follow a SASL mechanism in ``listener.name.<l>.<mechanism>.<name>``
    (Kafka reads the JAAS config, the login and callback classes and the mechanism's options so)."""
    return name.startswith("sasl.") or name == "connections.max.reauth.ms"


def _parse_at(name: str, type_: str, value: Any, where: str) -> Any:
    """:func:`parse_value`, naming where the value was given when it is refused."""
    try:
        return parse_value(name, type_, value)
    except ConfigError as exc:
        raise ConfigError(exc.message + (f" ({where})" if where else "")) from None


def split_per_listener(key: str, where: str = "", *, suggest: bool = True) -> tuple[str, str, str]:
    """``listener.name.<listener>[.<mechanism>].<config>`` as ``(listener, MECHANISM or "",
    config)``; a config (or mechanism) not in the schema is a :class:`ConfigError` naming the
    nearest valid key (unless not ``suggest``: the search costs a few milliseconds)."""
    rest = key[len("listener.name.") :]
    listener, _, tail = rest.partition(".")
    if listener and tail in BROKER_CONFIGS:
        return listener, "", tail
    first, _, after = tail.partition(".")
    if listener and first.upper() in _SASL_MECHANISM_NAMES and _mechanism_config(after) and after in BROKER_CONFIGS:
        return listener, first.upper(), after
    candidates = list(BROKER_CONFIGS) + [
        f"{m.lower()}.{c}" for m in sorted(_SASL_MECHANISM_NAMES) for c in BROKER_CONFIGS if _mechanism_config(c)
    ]
    near = nearest_name(tail, candidates) if suggest and listener and tail else None
    text = f"unknown per-listener configuration {key!r}" + (f" {where}" if where else "")
    text += ": expected listener.name.<listener>.<config> or listener.name.<listener>.<sasl mechanism>.<config>"
    hint = f" (did you mean 'listener.name.{listener}.{near}'?)" if near is not None else ""
    raise ConfigError(text + hint)


class BrokerConfig:
    """Typed broker configuration with the source of every value."""

    def __init__(
        self,
        properties: Mapping[str, Any] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        strict: bool = True,
        properties_source: str = "",
    ) -> None:
        self._values: dict[str, Any] = {}
        self._sources: dict[str, ConfigSource] = {}
        #: the static values that dynamic ones (AlterConfigs) override for now
        self._static: dict[str, Any] = {}
        #: listener.name.<listener>[.<mechanism>].<config>: {(LISTENER, MECHANISM or "", config): value}
        self._per_listener: dict[tuple[str, str, str], Any] = {}
        #: the same keys: (the name as given, where it was given)
        self._per_listener_keys: dict[tuple[str, str, str], tuple[str, str]] = {}
        #: counts the run-time changes (:meth:`set_dynamic`): a typed view built from this
        #: configuration (odradek.settings) knows it must be built again
        self.changes = 0
        for key, value in (properties or {}).items():
            self._set(key, value, strict, properties_source)
        for var, (key, value) in self._from_env(env or {}, strict).items():
            self._set(key, value, strict, f"from the environment variable {var}")
        for key, value in (overrides or {}).items():
            self._set(key, value, strict, "in --override")
        if strict:
            self._check_listener_names()
        unused = self.unused_settings()
        if unused:
            log.warning("accepted, not used by Odradek (Kafka configs with no effect here): %s", ", ".join(unused))

    @staticmethod
    def _from_env(env: Mapping[str, str], strict: bool) -> dict[str, tuple[str, str]]:
        """``ODRADEK_<NAME>`` variables as ``{variable: (config name, value)}``.  Every
        ``ODRADEK_*`` variable names a broker config, except those in :data:`NON_CONFIG_ENV` and
        ``ODRADEK_TEST_*`` (the test suite's); another one is a typo, an error when ``strict``."""
        result = {}
        by_env = {env_name(name): name for name in BROKER_CONFIGS}
        for key, value in env.items():
            name = by_env.get(key)
            if name is not None:
                result[key] = (name, value)
            elif strict and key.startswith("ODRADEK_") and key not in NON_CONFIG_ENV and not key.startswith(
                "ODRADEK_TEST_"
            ):
                raise ConfigError(unknown_name_message("environment variable", key, by_env))
        return result

    def _set(self, key: str, value: Any, strict: bool, where: str = "") -> None:
        """One setting from a source (``where`` names it in errors): every name is one of the
        schema's, prefixed families (``ssl.``, ``sasl.``, ``authorizer.``, ``metric``...) too, so
        that a misspelt security setting stops the start instead of being ignored."""
        if key.startswith("listener.name."):
            self._set_per_listener(key, value, where)
            return
        d = BROKER_CONFIGS.get(key)
        if d is None:
            if key in TOPIC_KEYS:
                synonyms = ", ".join(TOPIC_KEYS[key].synonyms) or "none"
                raise ConfigError(f"{key} {where + ' ' if where else ''}is a topic config; set it per topic, or its "
                                  f"broker default ({synonyms})")
            message = unknown_name_message("broker configuration", key, BROKER_CONFIGS, where)
            if strict:
                raise ConfigError(message)
            log.warning("ignored: %s", message)
            return
        self._values[key] = _parse_at(key, d.type, value, where)
        self._sources[key] = ConfigSource.STATIC_BROKER_CONFIG

    def _set_per_listener(self, key: str, value: Any, where: str) -> None:
        """``listener.name.<listener>.<config>`` or ``listener.name.<listener>.<mechanism>.<config>``
        (Kafka's per-listener overrides; the mechanism form for ``sasl.jaas.config`` and the
        other settings of one SASL mechanism).  Whether ``<listener>`` is one of the broker's is
        checked by :meth:`validate`, when every source has been read."""
        listener, mechanism, name = split_per_listener(key, where)
        d = BROKER_CONFIGS[name]
        self._per_listener[(listener.upper(), mechanism, name)] = _parse_at(key, d.type, value, where)
        self._per_listener_keys[(listener.upper(), mechanism, name)] = (key, where)

    def for_listener(self, listener: str, name: str, mechanism: str = "") -> Any:
        """A config as one listener sees it: ``listener.name.<listener>.<mechanism>.<name>``,
        then ``listener.name.<listener>.<name>``, then ``name`` itself."""
        key = listener.upper()
        if mechanism:
            value = self._per_listener.get((key, mechanism.upper(), name))
            if value is not None:
                return value
        value = self._per_listener.get((key, "", name))
        return value if value is not None else self.get(name)

    def listener_overrides(self) -> dict[tuple[str, str, str], Any]:
        """The per-listener settings given: ``{(LISTENER, MECHANISM or "", config): value}``."""
        return dict(self._per_listener)

    @classmethod
    def load(
        cls,
        config_file: str | Path | None = None,
        overrides: Iterable[str] = (),
        flags: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        """Defaults < ``config_file`` < environment (``ODRADEK_*``) < ``key=value`` overrides < flags."""
        props = read_properties(config_file) if config_file else {}
        over: dict[str, Any] = {}
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} is not key=value")
            k, v = item.split("=", 1)
            over[k.strip()] = v.strip()
        over.update(flags or {})
        config = cls(
            props,
            env=os.environ if env is None else env,
            overrides=over,
            properties_source=f"in {config_file}" if config_file else "",
        )
        config.validate()
        return config

    def validate(self) -> None:
        """Check settings whose parts must agree (listeners and their ports), naming the setting."""
        for name in ("listeners", "advertised.listeners"):
            spec = self.get(name)
            if not spec:
                continue
            try:
                parse_listeners(spec, self.get("listener.security.protocol.map"))
            except ConfigError as exc:
                raise ConfigError(f"{name}: {exc.message}") from None
        port = self.get("metrics.port")
        if port is not None and not -1 <= int(port) <= 65535:
            raise ConfigError(f"metrics.port={port} is out of range: a port is 0-65535 (0 picks a free one; -1: off)")

    def listener_names(self) -> set[str]:
        """Every listener name the configuration mentions (upper case): those of
        ``listener.security.protocol.map``, ``listeners``, ``advertised.listeners`` and the
        settings naming one listener."""
        names = set()
        for pair in str(self.get("listener.security.protocol.map") or "").split(","):
            names.add(pair.partition(":")[0].strip().upper())
        for spec in ("listeners", "advertised.listeners"):
            for item in str(self.get(spec) or "").split(","):
                if "://" in item:
                    names.add(item.split("://", 1)[0].strip().upper())
        for one in ("inter.broker.listener.name", "control.plane.listener.name", "controller.listener.names"):
            names.update(n.strip().upper() for n in str(self.get(one) or "").split(","))
        names.discard("")
        return names

    def _check_listener_names(self) -> None:
        """A per-listener setting names a listener of this broker.  One naming a listener close
        to one of them is a typo and refused (``listener.name.sasl-ssl.ssl.client.auth`` would
        leave SASL_SSL without client authentication); one naming another listener has no effect
        and gets a WARN line (settings kept for a listener that is not configured now)."""
        known = sorted(n.lower() for n in self.listener_names())
        for (listener, _mechanism, _name), (key, where) in self._per_listener_keys.items():
            if listener.lower() in known:
                continue
            given = key[len("listener.name.") :].partition(".")[0]
            text = (f"per-listener configuration {key!r}" + (f" {where}" if where else "")
                    + f" names listener {given!r}, which is not one of this broker's ({', '.join(known)})")
            near = nearest_name(given, known, ignore_case=True)
            if near is None:
                log.warning("%s: it has no effect", text)
                continue
            raise ConfigError(f"{text} (did you mean 'listener.name.{near}.{key.split('.', 3)[3]}'?)")

    def unused_settings(self) -> list[str]:
        """The settings given that Odradek accepts but does not act on (Kafka's configs), sorted."""
        names = [n for n in self._values if not BROKER_CONFIGS[n].used]
        names += [key for (_l, _m, name), (key, _w) in self._per_listener_keys.items() if not BROKER_CONFIGS[name].used]
        return sorted(names)

    # -- access --------------------------------------------------------------------------
    def get(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        d = BROKER_CONFIGS.get(name)
        if d is None:  # a misspelt name in the code: say which one was meant
            raise KeyError(unknown_name_message("broker configuration", name, BROKER_CONFIGS))
        return d.default

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def source(self, name: str) -> ConfigSource:
        return self._sources.get(name, ConfigSource.DEFAULT_CONFIG)

    def is_set(self, name: str) -> bool:
        return name in self._values

    def items(self) -> Iterable[tuple[str, Any]]:
        for name in BROKER_CONFIGS:
            yield name, self.get(name)

    def set_dynamic(self, name: str, value: Any) -> None:
        """A run-time change (AlterConfigs on the broker resource)."""
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise ConfigError(unknown_name_message("broker configuration", name, BROKER_CONFIGS))
        self.changes += 1
        if value is None:  # back to the static value (server.properties, ...) or the default
            static = self._static.pop(name, _UNSET)
            if static is _UNSET:
                if self._sources.get(name) == ConfigSource.DYNAMIC_BROKER_CONFIG:
                    self._values.pop(name, None)
                    self._sources.pop(name, None)
            else:
                self._values[name] = static
                self._sources[name] = ConfigSource.STATIC_BROKER_CONFIG
            return
        parsed = parse_value(name, d.type, value)
        if self._sources.get(name) == ConfigSource.STATIC_BROKER_CONFIG:
            self._static[name] = self._values[name]
        self._values[name] = parsed
        self._sources[name] = ConfigSource.DYNAMIC_BROKER_CONFIG

    def static_value(self, name: str) -> tuple[bool, Any]:
        """``(True, value)`` when ``name`` was set at start-up (server.properties, ``ODRADEK_*``,
        ``--override``), also while a dynamic value overrides it; else ``(False, None)``."""
        if name in self._static:
            return True, self._static[name]
        if self._sources.get(name) == ConfigSource.STATIC_BROKER_CONFIG:
            return True, self._values[name]
        return False, None

    # -- derived -------------------------------------------------------------------------
    @property
    def broker_id(self) -> int:
        node = self.get("node.id")
        return int(node) if node is not None and node >= 0 and not self.is_set("broker.id") else int(self.get("broker.id"))

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.get("log.dirs") or self.get("log.dir")
        return [Path(d.strip()) for d in str(dirs).split(",") if d.strip()]

    @property
    def listeners(self) -> list[Listener]:
        return parse_listeners(self.get("listeners"), self.get("listener.security.protocol.map"))

    @property
    def advertised_listeners(self) -> list[Listener]:
        spec = self.get("advertised.listeners")
        if not spec:
            return self.listeners
        return parse_listeners(spec, self.get("listener.security.protocol.map"))

    def topic_default(self, topic_config: str) -> tuple[Any, str | None]:
        """Default of a topic config from the broker configs: ``(value, broker name it came from)``."""
        return topic_default(self.get, topic_config)

    def topic_defaults(self) -> dict[str, Any]:
        """Every topic config's broker-derived default (Kafka names), for new logs."""
        return topic_defaults(self.get)


def topic_default(get: Callable[[str], Any], topic_config: str) -> tuple[Any, str | None]:
    """Default of a topic config from the broker configs ``get`` gives: ``(value, broker name it
    came from)`` -- the first of its broker synonyms that is set, in milliseconds for the ones
    given in minutes or hours, as Kafka resolves them."""
    for broker_name in TOPIC_SYNONYMS.get(topic_config, ()):
        value = get(broker_name)
        if value is not None:
            unit = SYNONYM_UNITS.get(broker_name)
            return (value * unit if unit else value), broker_name
    key = TOPIC_KEYS.get(topic_config)
    # no broker config gives one (leader.replication.throttled.replicas, remote.storage.enable):
    # the topic config's own default, as Kafka's LogConfig has it ("" for an empty list)
    return (key.default if key is not None else None), None


def topic_defaults(get: Callable[[str], Any]) -> dict[str, Any]:
    """Every topic config's broker-derived default (Kafka names), for new logs."""
    out = {}
    for name in TOPIC_SYNONYMS:
        value, _src = topic_default(get, name)
        if value is not None:
            out[name] = value
    return out
