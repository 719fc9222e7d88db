"""Client configuration with Kafka's client config names and defaults.

Every client takes a dict of Kafka names (``{"bootstrap.servers": "...", "linger.ms": 5}``) and,
as an alternative, the same names as keyword arguments with underscores
(``bootstrap_servers=...``).  Unknown names are an error, so that typos do not pass silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.config import ConfigDef, unknown_name_message
from odradek.errors import OdradekError

__all__ = [
    "ADMIN_CONFIGS", "ADMIN_DEFAULTS", "COMMON_CONFIGS", "CONSUMER_CONFIGS", "CONSUMER_DEFAULTS", "PRODUCER_CONFIGS",
    "PRODUCER_DEFAULTS", "SHARE_CONSUMER_CONFIGS", "SHARE_CONSUMER_DEFAULTS", "ClientConfigError", "defaults",
    "merge_config",
]

_C = ConfigDef


def _rows(*rows: ConfigDef) -> tuple[ConfigDef, ...]:
    return rows


def defaults(rows: tuple[ConfigDef, ...]) -> dict[str, Any]:
    """A table's names and defaults (what a client starts from)."""
    return {r.name: r.default for r in rows}


_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: what every client takes (Kafka's CommonClientConfigs, with librdkafka's TLS names)
COMMON_CONFIGS = _rows(
    _C("bootstrap.servers", "list", "127.0.0.1:9092", doc="host:port of the brokers to ask for the cluster's metadata"),
    _C("client.id", "string", "odradek", doc="the name the client gives in every request (logs, quotas)"),
    _C("request.timeout.ms", "int", 30000, doc="how long a request waits for its answer"),
    _C("metadata.max.age.ms", "long", 300000, doc="metadata older than this is refreshed"),
    _C("retry.backoff.ms", "long", 100, doc="first wait before a failed request is retried"),
    _C("retry.backoff.max.ms", "long", 1000, doc="longest wait between retries"),
    _C("reconnect.backoff.ms", "long", 50, doc="first wait before a lost connection is opened again"),
    _C("reconnect.backoff.max.ms", "long", 1000, doc="longest wait before reconnecting"),
    _C("socket.connection.setup.timeout.ms", "long", 10000, doc="how long opening a connection may take"),
    _C("connections.max.idle.ms", "long", 540000, doc="idle connections are closed after this"),
    _C("security.protocol", "string", "PLAINTEXT", doc="how connections are secured", valid=_PROTOCOLS),
    # TLS and SASL: see odradek.client._security
    _C("ssl.truststore.location", "string", None, doc="the CA certificates (PEM) the brokers' are checked against"),
    _C("ssl.truststore.type", "string", None, doc="the truststore's format (PEM)"),
    _C("ssl.truststore.certificates", "password", None, doc="the CA certificates inline (PEM)"),
    _C("ssl.keystore.location", "string", None, doc="the client's certificate chain and key (PEM), for mutual TLS"),
    _C("ssl.keystore.type", "string", None, doc="the keystore's format (PEM)"),
    _C("ssl.keystore.certificate.chain", "password", None, doc="the client's certificate chain inline (not supported yet)"),
    _C("ssl.keystore.key", "password", None, doc="the client's key inline (not supported yet)"),
    _C("ssl.key.password", "password", None, doc="the password of the client's key"),
    _C("ssl.endpoint.identification.algorithm", "string", "https",
       doc="https: the broker's certificate must name the host connected to; empty: not checked"),
    _C("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", doc="the TLS versions the client offers"),
    _C("ssl.ca.location", "string", None, doc="librdkafka's name of ssl.truststore.location"),
    _C("ssl.certificate.location", "string", None, doc="librdkafka's: the client's certificate (PEM)"),
    _C("ssl.key.location", "string", None, doc="librdkafka's: the client's key (PEM)"),
    _C("sasl.mechanism", "string", "GSSAPI", doc="the SASL mechanism",
       valid=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")),
    _C("sasl.jaas.config", "password", None, doc="Kafka's JAAS line with the user name and password"),
    _C("sasl.username", "string", None, doc="librdkafka's: the SASL user"),
    _C("sasl.password", "password", None, doc="librdkafka's: the SASL password"),
    # OAUTHBEARER: oauth_cb() gives the token (a str, or (token, expiry, ...) as confluent-kafka's
    # oauth_cb); sasl.oauthbearer.config "principal=NAME [scope=A B] [lifeSeconds=N]" makes an
    # unsecured one (development only), as librdkafka does
    _C("oauth_cb", "class", None, doc="a callable giving OAUTHBEARER tokens (confluent-kafka's)"),
    _C("sasl.oauthbearer.config", "string", None, doc="librdkafka's: an unsecured token's principal=NAME (development)"),
)

#: the producer's (Kafka's ProducerConfig names and defaults)
PRODUCER_CONFIGS = _rows(
    *COMMON_CONFIGS,
    _C("acks", "string", "all", doc="which replicas must have a batch before it is acknowledged",
       valid=("all", "-1", "0", "1")),
    _C("linger.ms", "long", 5, doc="how long a batch waits for more records"),
    _C("batch.size", "int", 16384, doc="the size at which a partition's batch is sent"),
    _C("buffer.memory", "long", 33554432, doc="bytes of records waiting to be sent before send() blocks"),
    _C("max.block.ms", "long", 60000, doc="how long send() may block for room or metadata"),
    _C("retries", "int", 2147483647, doc="how often a failed batch is sent again"),
    _C("delivery.timeout.ms", "int", 120000, doc="the time a record has to be acknowledged, retries included"),
    _C("enable.idempotence", "boolean", True, doc="no duplicates or reordering from retries (a producer id)"),
    _C("max.in.flight.requests.per.connection", "int", 5, doc="unacknowledged produce requests per broker"),
    _C("compression.type", "string", "none", doc="the codec batches are compressed with", valid=_CODECS),
    _C("compression.level", "int", None, doc="the codec's level (none: its default)"),
    _C("max.request.size", "int", 1048576, doc="the largest produce request"),
    _C("key.serializer", "class", None, doc="a callable turning keys into bytes"),
    _C("value.serializer", "class", None, doc="a callable turning values into bytes"),
    _C("partitioner", "class", None, doc="a callable choosing a record's partition (default: murmur2 of the key)"),
    _C("partitioner.ignore.keys", "boolean", False, doc="spread keyed records as unkeyed ones"),
    _C("interceptors", "list", (), doc="callables that see every record sent and acknowledged"),
    _C("transactional.id", "string", None, doc="the producer's transactional id (transactions)"),
    _C("transaction.timeout.ms", "int", 60000, doc="the longest a transaction may stay open"),
    _C("allow.auto.create.topics", "boolean", True, doc="whether a broker may create a topic the producer names"),
)

#: the consumer's (Kafka's ConsumerConfig names and defaults)
CONSUMER_CONFIGS = _rows(
    *COMMON_CONFIGS,
    _C("fetch.min.bytes", "int", 1, doc="bytes a fetch waits for"),
    _C("fetch.max.bytes", "int", 52428800, doc="the most a fetch answer holds"),
    _C("fetch.max.wait.ms", "int", 500, doc="how long a fetch waits for fetch.min.bytes"),
    _C("max.partition.fetch.bytes", "int", 1048576, doc="the most a fetch answer holds of one partition"),
    _C("isolation.level", "string", "read_uncommitted", doc="read_committed: no records of open or aborted transactions",
       valid=("read_uncommitted", "read_committed")),
    _C("check.crcs", "boolean", True, doc="check every batch's CRC"),
    _C("key.deserializer", "class", None, doc="a callable turning key bytes into keys"),
    _C("value.deserializer", "class", None, doc="a callable turning value bytes into values"),
    _C("group.id", "string", None, doc="the consumer group (none: no group, no commits)"),
    _C("group.instance.id", "string", None, doc="a static member's id (KIP-345)"),
    _C("group.protocol", "string", "classic", doc="classic (the members assign) or consumer (KIP-848: the broker assigns)",
       valid=("classic", "consumer")),
    _C("group.remote.assignor", "string", None, doc="group.protocol=consumer: the broker's assignor (uniform, range; "
       "none: the group's default)"),
    _C("client.rack", "string", None, doc="group.protocol=consumer: the rack sent to the broker's assignor"),
    _C("enable.auto.commit", "boolean", True, doc="commit the positions in the background"),
    _C("auto.commit.interval.ms", "int", 5000, doc="how often positions are committed"),
    _C("auto.offset.reset", "string", "latest", doc="where to start without a committed offset",
       valid=("earliest", "latest", "none")),
    _C("session.timeout.ms", "int", 45000, doc="a member missing heartbeats this long leaves the group"),
    _C("heartbeat.interval.ms", "int", 3000, doc="how often a member heartbeats"),
    _C("max.poll.interval.ms", "int", 300000, doc="the longest gap between polls before the member leaves"),
    _C("max.poll.records", "int", 500, doc="the most records one poll returns"),
    _C("partition.assignment.strategy", "list", "range,cooperative-sticky", doc="the assignors offered, in order"),
    _C("exclude.internal.topics", "boolean", True, doc="a pattern subscription skips internal topics"),
    _C("allow.auto.create.topics", "boolean", False, doc="whether subscribing may create a topic"),
    _C("default.api.timeout.ms", "int", 60000, doc="the timeout of calls that take none"),
)

#: the share consumer's (Kafka's ShareConsumerConfig names and defaults; the lock duration and the
#: heartbeat interval are the group's, set on the broker)
SHARE_CONSUMER_CONFIGS = _rows(
    *COMMON_CONFIGS,
    _C("group.id", "string", None, doc="the share group (required)"),
    _C("share.acknowledgement.mode", "string", "implicit", doc="implicit: the records of a poll are accepted by the "
       "next poll or commit; explicit: each record is acknowledged with acknowledge()", valid=("implicit", "explicit")),
    _C("fetch.min.bytes", "int", 1, doc="bytes a share fetch waits for"),
    _C("fetch.max.bytes", "int", 52428800, doc="the most a share fetch answer holds"),
    _C("fetch.max.wait.ms", "int", 500, doc="how long a share fetch waits for records"),
    _C("max.partition.fetch.bytes", "int", 1048576, doc="the most a share fetch answer holds of one partition"),
    _C("max.poll.records", "int", 500, doc="the most records one share fetch acquires and one poll returns"),
    _C("check.crcs", "boolean", True, doc="check every batch's CRC"),
    _C("key.deserializer", "class", None, doc="a callable turning key bytes into keys"),
    _C("value.deserializer", "class", None, doc="a callable turning value bytes into values"),
    _C("client.rack", "string", None, doc="the rack sent to the group coordinator when joining"),
    _C("default.api.timeout.ms", "int", 60000, doc="the timeout of calls that take none (commit_sync, close)"),
)

#: the admin client's
ADMIN_CONFIGS = _rows(
    *COMMON_CONFIGS,
    _C("default.api.timeout.ms", "int", 60000, doc="the timeout of calls that take none"),
)

PRODUCER_DEFAULTS: dict[str, Any] = defaults(PRODUCER_CONFIGS)
CONSUMER_DEFAULTS: dict[str, Any] = defaults(CONSUMER_CONFIGS)
ADMIN_DEFAULTS: dict[str, Any] = defaults(ADMIN_CONFIGS)
SHARE_CONSUMER_DEFAULTS: dict[str, Any] = defaults(SHARE_CONSUMER_CONFIGS)


class ClientConfigError(OdradekError, ValueError):
    """An unknown configuration name or an invalid value."""


def merge_config(defaults: Mapping[str, Any], config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults, then ``config`` (Kafka names), then keyword arguments (underscores for dots)."""
    merged = dict(defaults)
    given: dict[str, Any] = dict(config or {})
    for key, value in kwargs.items():
        given[key.replace("_", ".")] = value
    unknown = sorted(k for k in given if k not in defaults)
    if unknown:
        raise ClientConfigError("; ".join(unknown_name_message("client configuration", k, defaults) for k in unknown))
    merged.update(given)
    return merged
