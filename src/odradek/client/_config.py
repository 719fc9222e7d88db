"""Client configuration with Kafka's client config names and defaults.

Every client takes a dict of Kafka names (``{"bootstrap.servers": "...", "linger.ms": 5}``) and,
as an alternative, the same names as keyword arguments with underscores
(``bootstrap_servers=...``).  Unknown names are an error, so that typos do not pass silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.config import unknown_name_message
from odradek.errors import OdradekError

__all__ = ["ADMIN_DEFAULTS", "CONSUMER_DEFAULTS", "PRODUCER_DEFAULTS", "ClientConfigError", "merge_config"]

_COMMON: dict[str, Any] = {
    "bootstrap.servers": "127.0.0.1:9092",
    "client.id": "odradek",
    "request.timeout.ms": 30000,
    "metadata.max.age.ms": 300000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 10000,
    "connections.max.idle.ms": 540000,
    "security.protocol": "PLAINTEXT",
    # TLS and SASL: see odradek.client._security
    "ssl.truststore.location": None,
    "ssl.truststore.type": None,
    "ssl.truststore.certificates": None,
    "ssl.keystore.location": None,
    "ssl.keystore.type": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.key.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.ca.location": None,
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "sasl.mechanism": "GSSAPI",
    "sasl.jaas.config": None,
    "sasl.username": None,
    "sasl.password": None,
    # OAUTHBEARER: oauth_cb() gives the token (a str, or (token, expiry, ...) as confluent-kafka's
    # oauth_cb); sasl.oauthbearer.config "principal=NAME [scope=A B] [lifeSeconds=N]" makes an
    # unsecured one (development only), as librdkafka does
    "oauth_cb": None,
    "sasl.oauthbearer.config": None,
}

PRODUCER_DEFAULTS: dict[str, Any] = {
    **_COMMON,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 16384,
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "retries": 2147483647,
    "delivery.timeout.ms": 120000,
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "none",
    "compression.level": None,
    "max.request.size": 1048576,
    "key.serializer": None,
    "value.serializer": None,
    "partitioner": None,
    "partitioner.ignore.keys": False,
    "interceptors": (),
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
    "allow.auto.create.topics": True,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    **_COMMON,
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 52428800,
    "fetch.max.wait.ms": 500,
    "max.partition.fetch.bytes": 1048576,
    "isolation.level": "read_uncommitted",
    "check.crcs": True,
    "key.deserializer": None,
    "value.deserializer": None,
    "group.id": None,
    "group.instance.id": None,
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "auto.offset.reset": "latest",
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "max.poll.interval.ms": 300000,
    "max.poll.records": 500,
    "partition.assignment.strategy": "range,cooperative-sticky",
    "exclude.internal.topics": True,
    "allow.auto.create.topics": False,
    "default.api.timeout.ms": 60000,
}

ADMIN_DEFAULTS: dict[str, Any] = {
    **_COMMON,
    "default.api.timeout.ms": 60000,
}


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
