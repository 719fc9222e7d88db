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
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "BROKER_CONFIGS",
    "DEPRECATED_TOPIC_CONFIGS",
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
    "nearest_name",
    "parse_listeners",
    "read_properties",
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
    name: str
    type: str  # boolean, string, int, short, long, double, list, password
    default: Any
    read_only: bool = True  # cannot be changed at run time (AlterConfigs on a broker)


def _defs(*rows: tuple[str, str, Any] | tuple[str, str, Any, bool]) -> dict[str, ConfigDef]:
    return {r[0]: ConfigDef(*r) for r in rows}


BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    ("broker.id", "int", 0),
    ("node.id", "int", -1),
    ("broker.rack", "string", None),
    ("listeners", "string", "PLAINTEXT://127.0.0.1:9092"),
    ("advertised.listeners", "string", None),
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
    ("ssl.cipher.suites", "list", None),
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
    ("sasl.server.callback.handler.class", "string", None),
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
    ("transactional.id.expiration.ms", "int", 604800000),
    ("transaction.max.timeout.ms", "int", 900000),
    ("transaction.state.log.num.partitions", "int", 50),
    ("transaction.state.log.replication.factor", "short", 3),
    ("transaction.state.log.min.isr", "int", 2),
    ("transaction.state.log.segment.bytes", "int", 104857600),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000),
    ("transaction.partition.verification.enable", "boolean", True),
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
)

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
    # accepted in stored metadata for compatibility with Kafka's tools; tiered storage is not
    # implemented
    _T("local.retention.ms", "long", -2, (), "Tiered storage (not supported): local retention time.", settable=False),
    _T("local.retention.bytes", "long", -2, (), "Tiered storage (not supported): local retention size.", settable=False),
    _T("remote.storage.enable", "boolean", False, (), "Tiered storage (not supported).", settable=False),
    _T("leader.replication.throttled.replicas", "list", "", (),
       "Replicas whose replication the leader throttles to leader.replication.throttled.rate (KIP-73): "
       "partition:broker pairs naming the leader's side, or '*' for every replica."),
    _T("follower.replication.throttled.replicas", "list", "", (),
       "Replicas whose replication the follower throttles to follower.replication.throttled.rate (KIP-73): "
       "partition:broker pairs naming the follower's side, or '*' for every replica."),
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
_UNIT = {"log.retention.minutes": 60000, "log.retention.hours": 3600000, "log.roll.hours": 3600000, "log.roll.jitter.hours": 3600000}
_ENUMS = {
    "compression.type": {"producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"},
    # Kafka's MetadataVersionValidator: a release ("0.10.0", "2.8", "3.0") or one of its
    # inter-broker protocol versions ("3.0-IV1")
    "message.format.version": _METADATA_VERSIONS,
    "log.message.format.version": _METADATA_VERSIONS,
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
    "ssl.client.auth": {"none", "requested", "required"},
    "security.inter.broker.protocol": {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"},
}


def parse_value(name: str, type_: str, value: Any) -> Any:
    """Parse a config value given as text (or already typed) into its Python type."""
    if value is None:
        return None
    try:
        if type_ == "boolean":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(value)
            return text == "true"
        if type_ in ("int", "short", "long"):
            number = int(str(value).strip())
            limit = {"int": 2**31, "short": 2**15, "long": 2**63}[type_]
            if not -limit <= number < limit:
                raise ValueError(value)
            return number
        if type_ == "double":
            return float(str(value).strip())
        if type_ == "list":
            return ",".join(p.strip() for p in str(value).split(",") if p.strip())
        text = str(value).strip()
        allowed = _ENUMS.get(name)
        if allowed is not None and text not in allowed:
            raise ValueError(value)
        return text
    except ValueError as exc:
        raise ConfigError(f"invalid value {value!r} for configuration {name}") from exc


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-style ``.properties`` file (``key=value`` or ``key: value``, ``#`` comments,
    backslash line continuations)."""
    props: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text().splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line.startswith(("#", "!")):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            props[line] = ""
            continue
        i = min(seps)
        props[line[:i].strip()] = line[i + 1 :].strip()
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

#: ``ODRADEK_*`` environment variables that are not broker configs (``ODRADEK_TEST_*`` neither)
NON_CONFIG_ENV = frozenset({"ODRADEK_EXAMPLES", "ODRADEK_PURE_PYTHON"})  # examples dir; odradek.records.speedups


def env_name(config: str) -> str:
    """The environment variable of a broker config: ``log.dirs`` -> ``ODRADEK_LOG_DIRS``."""
    return "ODRADEK_" + config.upper().replace(".", "_").replace("-", "_")


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
        self._extra: dict[str, str] = {}
        #: listener.name.<listener>[.<mechanism>].<config>: {(LISTENER, MECHANISM or "", config): value}
        self._per_listener: dict[tuple[str, str, str], Any] = {}
        for key, value in (properties or {}).items():
            self._set(key, value, strict, properties_source)
        for var, (key, value) in self._from_env(env or {}, strict).items():
            self._set(key, value, strict, f"from the environment variable {var}")
        for key, value in (overrides or {}).items():
            self._set(key, value, strict, "in --override")

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
        if key.startswith("listener.name."):
            self._set_per_listener(key, value, where)
            return
        d = BROKER_CONFIGS.get(key)
        if d is None:
            if key in TOPIC_CONFIGS:
                raise ConfigError(f"{key} is a topic config; set its broker default instead")
            if strict and not key.startswith(("ssl.", "sasl.", "security.", "authorizer.", "metric", "kafka.")):
                raise ConfigError(unknown_name_message("broker configuration", key, BROKER_CONFIGS, where))
            self._extra[key] = str(value)
            return
        self._values[key] = parse_value(key, d.type, value)
        self._sources[key] = ConfigSource.STATIC_BROKER_CONFIG

    def _set_per_listener(self, key: str, value: Any, where: str) -> None:
        """``listener.name.<listener>.<config>`` or ``listener.name.<listener>.<mechanism>.<config>``
        (Kafka's per-listener overrides; the mechanism form for ``sasl.jaas.config`` and the
        other SASL settings of one mechanism)."""
        rest = key[len("listener.name.") :]
        listener, _, name = rest.partition(".")
        mechanism = ""
        if name and name not in BROKER_CONFIGS and "." in name:
            first, _, after = name.partition(".")
            if first.upper() in _SASL_MECHANISM_NAMES:
                mechanism, name = first.upper(), after
        d = BROKER_CONFIGS.get(name)
        if not listener or d is None:
            near = nearest_name(name, BROKER_CONFIGS) if name else None
            hint = f" (did you mean 'listener.name.{listener}.{near}'?)" if near else ""
            raise ConfigError(
                f"unknown per-listener configuration {key!r}{(' ' + where) if where else ''}: "
                f"expected listener.name.<listener>.<config>{hint}"
            )
        self._per_listener[(listener.upper(), mechanism, name)] = parse_value(name, d.type, value)

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
            raise ConfigError(f"unknown broker configuration {name}")
        if value is None:
            self._values.pop(name, None)
            self._sources.pop(name, None)
            return
        self._values[name] = parse_value(name, d.type, value)
        self._sources[name] = ConfigSource.DYNAMIC_BROKER_CONFIG

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
        for broker_name in TOPIC_SYNONYMS.get(topic_config, ()):
            value = self.get(broker_name)
            if value is not None:
                unit = _UNIT.get(broker_name)
                return (value * unit if unit else value), broker_name
        return None, None

    def topic_defaults(self) -> dict[str, Any]:
        """Every topic config's broker-derived default (Kafka names), for new logs."""
        out = {}
        for name in TOPIC_SYNONYMS:
            value, _src = self.topic_default(name)
            if value is not None:
                out[name] = value
        return out
