"""How the broker configs Odradek acts on become typed settings: one group per component, as
Kafka's config classes group them (ServerConfigs, SocketServerConfigs, ServerLogConfigs and
CleanerConfig, ReplicationConfigs, GroupCoordinatorConfig, TransactionLogConfig and
TransactionStateManagerConfig, QuotaConfig, SslConfigs, SaslConfigs, BrokerSecurityConfigs,
ZkConfigs), Odradek's metrics endpoint apart.

Each group lists its configs; a field is named after its config with the group's prefix taken off
(``log.segment.bytes`` is ``log.segment_bytes``).  Configs given in several units become one field
in the unit of the first (:class:`Resolved`, resolved as Kafka resolves ``log.retention.ms`` /
``.minutes`` / ``.hours``: the first one set wins); a few fields are derived from others
(:class:`Derived`).  Kafka's range validators (``atLeast``, ``between``) are checked at start-up
and on every run-time change.  Every config of the table that Odradek uses (``used=True``) is in
exactly one group (the generator refuses to run otherwise); Kafka's configs it only accepts are
not settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None


def at_least(low: float) -> Range:
    return Range(low)


def between(low: float, high: float) -> Range:
    return Range(low, high)


@dataclass(frozen=True)
class Resolved:
    """One field from configs in several units: ``topic`` names the topic config whose broker
    synonyms they are (their order and units come from the config table), else ``sources``
    lists ``(config, factor to milliseconds)`` in order."""

    field: str
    topic: str | None = None
    sources: tuple[tuple[str, int], ...] = ()
    doc: str = ""


@dataclass(frozen=True)
class Derived:
    """A field computed from other values: ``expr`` is Python over ``src`` (a
    :class:`~odradek.settings._rules.Source`) and the helpers of ``_rules``."""

    field: str
    annotation: str
    expr: str
    doc: str


@dataclass(frozen=True)
class Group:
    attr: str  # the attribute of Settings
    cls: str
    doc: str
    prefix: str
    configs: tuple[str, ...]
    resolved: tuple[Resolved, ...] = ()
    derived: tuple[Derived, ...] = ()
    #: field names that differ from the rule
    names: tuple[tuple[str, str], ...] = ()


#: Kafka's range validators of the configs Odradek uses
RANGES: dict[str, Range] = {
    # ServerConfigs, SocketServerConfigs
    "message.max.bytes": at_least(0),
    "telemetry.max.bytes": at_least(1),
    "num.io.threads": at_least(1),
    "max.incremental.fetch.session.cache.slots": at_least(0),
    "max.request.partition.size.limit": at_least(1),
    "fetch.max.bytes": at_least(1024),
    "socket.request.max.bytes": at_least(1),
    "max.connections.per.ip": at_least(0),
    "max.connections": at_least(0),
    "max.connection.creation.rate": at_least(0),
    "connection.failed.authentication.delay.ms": at_least(0),
    "queued.max.requests": at_least(1),
    "num.network.threads": at_least(1),
    # ServerLogConfigs (LogConfig.SERVER_CONFIG_DEF), CleanerConfig
    "num.partitions": at_least(1),
    "log.segment.bytes": at_least(14),
    "log.roll.hours": at_least(1),
    "log.roll.jitter.hours": at_least(0),
    "log.retention.check.interval.ms": at_least(1),
    "log.index.size.max.bytes": at_least(4),
    "log.index.interval.bytes": at_least(0),
    "log.flush.interval.messages": at_least(1),
    "log.segment.delete.delay.ms": at_least(0),
    "log.flush.offset.checkpoint.interval.ms": at_least(0),
    "log.flush.start.offset.checkpoint.interval.ms": at_least(0),
    "num.recovery.threads.per.data.dir": at_least(1),
    "min.insync.replicas": at_least(1),
    "log.message.timestamp.difference.max.ms": at_least(0),
    "log.message.timestamp.before.max.ms": at_least(0),
    "log.message.timestamp.after.max.ms": at_least(0),
    "log.cleaner.backoff.ms": at_least(0),
    "log.cleaner.min.cleanable.ratio": between(0, 1),
    "log.cleaner.delete.retention.ms": at_least(0),
    "log.cleaner.min.compaction.lag.ms": at_least(0),
    "log.cleaner.max.compaction.lag.ms": at_least(1),
    # ReplicationConfigs
    "replica.fetch.max.bytes": at_least(0),
    "replica.fetch.backoff.ms": at_least(0),
    "replica.fetch.response.max.bytes": at_least(0),
    "leader.imbalance.check.interval.seconds": at_least(1),
    # GroupCoordinatorConfig
    "group.max.size": at_least(1),
    "offsets.load.buffer.size": at_least(1),
    "offsets.topic.replication.factor": at_least(1),
    "offsets.topic.num.partitions": at_least(1),
    "offsets.topic.segment.bytes": at_least(1),
    "offsets.retention.minutes": at_least(1),
    "offsets.retention.check.interval.ms": at_least(1),
    "offsets.commit.timeout.ms": at_least(1),
    "group.share.session.timeout.ms": at_least(1),
    "group.share.min.session.timeout.ms": at_least(1),
    "group.share.max.session.timeout.ms": at_least(1),
    "group.share.heartbeat.interval.ms": at_least(1),
    "group.share.min.heartbeat.interval.ms": at_least(1),
    "group.share.max.heartbeat.interval.ms": at_least(1),
    "group.share.max.size": between(1, 1000),
    # ShareGroupConfig
    "group.share.max.share.sessions": at_least(1),
    "group.share.record.lock.duration.ms": between(1000, 3600000),
    "group.share.min.record.lock.duration.ms": between(1000, 30000),
    "group.share.max.record.lock.duration.ms": between(30000, 3600000),
    "group.share.delivery.count.limit": between(2, 10),
    "group.share.min.delivery.count.limit": between(2, 5),
    "group.share.max.delivery.count.limit": between(5, 25),
    "group.share.partition.max.record.locks": between(100, 10000),
    # TransactionLogConfig, TransactionStateManagerConfig
    "transaction.state.log.min.isr": at_least(1),
    "transaction.state.log.replication.factor": at_least(1),
    "transaction.state.log.num.partitions": at_least(1),
    "transaction.state.log.segment.bytes": at_least(1),
    # ShareCoordinatorConfig
    "share.coordinator.state.topic.num.partitions": at_least(1),
    "share.coordinator.state.topic.replication.factor": at_least(1),
    "share.coordinator.state.topic.min.isr": at_least(1),
    "share.coordinator.state.topic.segment.bytes": at_least(1),
    "share.coordinator.snapshot.update.records.per.snapshot": between(0, 500),
    "share.coordinator.write.timeout.ms": at_least(1),
    "producer.id.expiration.ms": at_least(1),
    "producer.id.expiration.check.interval.ms": at_least(1),
    "transactional.id.expiration.ms": at_least(1),
    "transaction.max.timeout.ms": at_least(1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": at_least(1),
    "transaction.remove.expired.transaction.cleanup.interval.ms": at_least(1),
    # QuotaConfig
    "quota.window.num": at_least(1),
    "quota.window.size.seconds": at_least(1),
    "replication.quota.window.num": at_least(1),
    "replication.quota.window.size.seconds": at_least(1),
    "leader.replication.throttled.rate": at_least(0),
    "follower.replication.throttled.rate": at_least(0),
}

GROUPS: tuple[Group, ...] = (
    Group(
        "server", "ServerSettings",
        "The broker itself and what one request may ask of it (Kafka's ServerConfigs, with Odradek's "
        "own request bounds).",
        "",
        (
            "broker.id", "node.id", "broker.rack", "request.timeout.ms", "num.io.threads",
            "auto.create.topics.enable", "auto.create.topics.max.per.request", "delete.topic.enable",
            "num.partitions", "default.replication.factor", "request.max.topics",
            "max.partitions.per.request", "max.partitions.per.topic", "max.broker.partitions",
            "fetch.max.bytes", "fetch.response.max.records", "fetch.response.target.bytes",
            "max.incremental.fetch.session.cache.slots", "max.request.partition.size.limit",
        ),
        derived=(
            Derived("id", "int", "broker_id(src)",
                    "This broker's id: node.id when it alone is set, else broker.id."),
        ),
    ),
    Group(
        "socket", "SocketSettings",
        "Listeners and connections (Kafka's SocketServerConfigs).",
        "socket.",
        (
            "listeners", "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
            "security.inter.broker.protocol", "socket.request.max.bytes", "socket.send.buffer.bytes",
            "socket.receive.buffer.bytes", "connections.max.idle.ms", "max.connections.per.ip",
            "max.connections.per.ip.overrides", "max.connections", "max.connection.creation.rate",
            "queued.max.requests", "num.network.threads",
        ),
        derived=(
            Derived("listener_endpoints", "tuple[Listener, ...]",
                    'tuple(parse_listeners(src.text("listeners"), src.text("listener.security.protocol.map")))',
                    "The listeners, parsed (name, security protocol, host, port)."),
            Derived("advertised_endpoints", "tuple[Listener, ...]", "advertised(src)",
                    "What Metadata advertises: advertised.listeners, else the listeners."),
        ),
    ),
    Group(
        "log", "LogSettings",
        "The log: segments, retention, flushing, compaction and the topic configs' broker defaults "
        "(Kafka's ServerLogConfigs and CleanerConfig).",
        "log.",
        (
            "log.dirs", "log.dir", "log.segment.bytes", "log.retention.bytes", "log.retention.check.interval.ms",
            "log.index.size.max.bytes", "log.index.interval.bytes", "log.flush.interval.messages",
            "log.flush.scheduler.interval.ms", "log.flush.offset.checkpoint.interval.ms",
            "log.flush.start.offset.checkpoint.interval.ms", "log.cleanup.policy", "log.cleaner.enable",
            "log.cleaner.backoff.ms", "log.cleaner.min.cleanable.ratio", "log.cleaner.delete.retention.ms",
            "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms",
            "log.message.timestamp.type", "log.message.timestamp.difference.max.ms",
            "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
            "log.message.downconversion.enable", "log.message.format.version", "log.preallocate",
            "compression.type", "min.insync.replicas", "unclean.leader.election.enable", "message.max.bytes",
            "num.recovery.threads.per.data.dir",
        ),
        resolved=(
            Resolved("roll_ms", topic="segment.ms", doc="log.roll.ms, else log.roll.hours"),
            Resolved("roll_jitter_ms", topic="segment.jitter.ms", doc="log.roll.jitter.ms, else log.roll.jitter.hours"),
            Resolved("retention_ms", topic="retention.ms",
                     doc="log.retention.ms, else log.retention.minutes, else log.retention.hours"),
            Resolved("flush_interval_ms", topic="flush.ms",
                     doc="log.flush.interval.ms, else log.flush.scheduler.interval.ms"),
        ),
        derived=(
            Derived("directories", "tuple[Path, ...]", "log_dirs(src)", "log.dirs (else log.dir), as paths."),
            Derived("topic_defaults", "Mapping[str, Any]", "topic_defaults(src)",
                    "Every topic config's default from these broker configs, by topic config name "
                    "(what a topic without overrides gets: LogConfig.from_dict's input)."),
        ),
    ),
    Group(
        "replication", "ReplicationSettings",
        "Followers, the ISR, the controller and controlled shutdown (Kafka's ReplicationConfigs).",
        "",
        (
            "replica.lag.time.max.ms", "replica.fetch.wait.max.ms", "replica.fetch.min.bytes",
            "replica.fetch.max.bytes", "replica.fetch.response.max.bytes", "replica.fetch.backoff.ms",
            "replica.socket.timeout.ms", "num.replica.fetchers", "replica.high.watermark.checkpoint.interval.ms",
            "controlled.shutdown.enable", "controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
            "controller.socket.timeout.ms", "auto.leader.rebalance.enable", "leader.imbalance.per.broker.percentage",
            "leader.imbalance.check.interval.seconds",
        ),
    ),
    Group(
        "groups", "GroupSettings",
        "The group coordinator and __consumer_offsets (Kafka's GroupCoordinatorConfig).",
        "group.",
        (
            "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms", "group.max.session.timeout.ms",
            "group.max.size", "offsets.topic.num.partitions", "offsets.topic.replication.factor",
            "offsets.topic.segment.bytes", "offsets.retention.check.interval.ms", "offsets.commit.timeout.ms",
            "offsets.commit.required.acks", "offsets.load.buffer.size", "offset.metadata.max.bytes",
            "group.coordinator.rebalance.protocols", "group.consumer.session.timeout.ms",
            "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
            "group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms", "group.consumer.max.size", "group.consumer.assignors",
            "group.consumer.migration.policy",
        ),
        resolved=(Resolved("offsets_retention_ms", sources=(("offsets.retention.minutes", 60000),),
                           doc="offsets.retention.minutes"),),
    ),
    Group(
        "share_groups", "ShareGroupSettings",
        "Share groups (KIP-932): their members' timings and size, acquisition locks, delivery counts and "
        "the bounds of the group configs (Kafka's GroupCoordinatorConfig share-group part and ShareGroupConfig).",
        "group.share.",
        (
            "group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
            "group.share.max.session.timeout.ms", "group.share.heartbeat.interval.ms",
            "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms", "group.share.max.size",
            "group.share.max.share.sessions", "group.share.record.lock.duration.ms",
            "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms",
            "group.share.delivery.count.limit", "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit", "group.share.partition.max.record.locks",
            "share.fetch.purgatory.purge.interval.requests", "errors.deadletterqueue.topic.name.prefix",
        ),
        names=(("share.fetch.purgatory.purge.interval.requests", "fetch_purgatory_purge_interval_requests"),
               ("errors.deadletterqueue.topic.name.prefix", "dlq_topic_name_prefix")),
    ),
    Group(
        "transactions", "TransactionSettings",
        "The transaction coordinator, __transaction_state and producer ids (Kafka's TransactionLogConfig "
        "and TransactionStateManagerConfig).",
        "transaction.",
        (
            "transactional.id.expiration.ms", "transaction.max.timeout.ms", "transaction.state.log.num.partitions",
            "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
            "transaction.state.log.segment.bytes", "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "transaction.remove.expired.transaction.cleanup.interval.ms", "transaction.partition.verification.enable",
            "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
        ),
    ),
    Group(
        "share_coordinator", "ShareCoordinatorSettings",
        "The share coordinator and __share_group_state (Kafka's ShareCoordinatorConfig).",
        "share.coordinator.",
        (
            "share.coordinator.state.topic.num.partitions", "share.coordinator.state.topic.replication.factor",
            "share.coordinator.state.topic.min.isr", "share.coordinator.state.topic.segment.bytes",
            "share.coordinator.snapshot.update.records.per.snapshot", "share.coordinator.write.timeout.ms",
        ),
    ),
    Group(
        "quotas", "QuotaSettings",
        "Client quotas' windows and the replication throttles (Kafka's QuotaConfig).",
        "",
        (
            "quota.window.num", "quota.window.size.seconds", "replication.quota.window.num",
            "replication.quota.window.size.seconds", "leader.replication.throttled.rate",
            "follower.replication.throttled.rate",
        ),
    ),
    Group(
        "ssl", "SslSettings",
        "TLS of SSL and SASL_SSL listeners (Kafka's SslConfigs); per listener with Settings.for_listener.",
        "ssl.",
        (
            "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
            "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
            "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.protocol",
            "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
            "ssl.principal.mapping.rules",
        ),
    ),
    Group(
        "sasl", "SaslSettings",
        "SASL of SASL_PLAINTEXT and SASL_SSL listeners (Kafka's SaslConfigs); per listener and mechanism "
        "with Settings.for_listener.",
        "sasl.",
        (
            "sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config",
            "sasl.server.max.receive.size", "sasl.server.callback.handler.class", "sasl.kerberos.service.name",
            "sasl.kerberos.principal.to.local.rules", "sasl.oauthbearer.jwks.endpoint.url",
            "sasl.oauthbearer.expected.audience", "sasl.oauthbearer.expected.issuer",
            "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.scope.claim.name",
            "sasl.oauthbearer.clock.skew.seconds",
        ),
    ),
    Group(
        "security", "SecuritySettings",
        "Authentication's timing and the authorizer (Kafka's BrokerSecurityConfigs and the authorizer's "
        "configs).",
        "",
        (
            "connections.max.reauth.ms", "connection.failed.authentication.delay.ms", "authorizer.class.name",
            "super.users", "allow.everyone.if.no.acl.found",
        ),
    ),
    Group(
        "zookeeper", "ZooKeeperSettings",
        "The cluster's metadata store (Kafka's ZkConfigs); without zookeeper.connect, a single node.",
        "zookeeper.",
        ("zookeeper.connect", "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms"),
    ),
    Group(
        "metrics", "MetricsSettings",
        "The Prometheus endpoint (Odradek's own).",
        "metrics.",
        (
            "metrics.port", "metrics.host", "metrics.http.allowed.hosts", "metrics.http.basic.auth.user",
            "metrics.http.basic.auth.password", "telemetry.max.bytes",
        ),
        names=(("telemetry.max.bytes", "telemetry_max_bytes"),),
    ),
    Group(
        "schema_registry", "SchemaRegistrySettings",
        "The schema registry's listener, store and defaults (Odradek's own; Confluent's names where it has them).",
        "schema.registry.",
        (
            "schema.registry.listeners", "schema.registry.topic.replication.factor",
            "schema.registry.compatibility.level", "schema.registry.mode.mutability",
            "schema.registry.authentication.method", "schema.registry.request.max.bytes",
            "schema.registry.timeout.ms",
        ),
        derived=(
            Derived("listeners_set", "bool", 'src.value("schema.registry.listeners") is not None',
                    "Whether schema.registry.listeners was set (unset: on by default on a single node; "
                    "set empty: off)."),
        ),
    ),
    Group(
        "tables", "TableSettings",
        "Topics as Iceberg tables (odradek.tables): the catalog the partition leaders commit to.",
        "odradek.iceberg.",
        (
            "odradek.iceberg.catalog.type", "odradek.iceberg.catalog.uri", "odradek.iceberg.warehouse",
            "odradek.iceberg.namespace",
        ),
    ),
    Group(
        "schema_registry_ssl", "SchemaRegistrySslSettings",
        "TLS of an https schema registry listener and of forwarding to the writer's, as the broker's ssl.* configs.",
        "schema.registry.ssl.",
        (
            "schema.registry.ssl.keystore.type", "schema.registry.ssl.keystore.location",
            "schema.registry.ssl.keystore.password", "schema.registry.ssl.key.password",
            "schema.registry.ssl.keystore.certificate.chain", "schema.registry.ssl.keystore.key",
            "schema.registry.ssl.truststore.type", "schema.registry.ssl.truststore.location",
            "schema.registry.ssl.truststore.password", "schema.registry.ssl.truststore.certificates",
            "schema.registry.ssl.client.auth", "schema.registry.ssl.enabled.protocols",
            "schema.registry.ssl.cipher.suites", "schema.registry.ssl.endpoint.identification.algorithm",
        ),
    ),
)
