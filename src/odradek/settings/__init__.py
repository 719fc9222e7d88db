"""The broker's settings, typed: what every component reads instead of a config by name.

:class:`Settings` (generated from the broker config table, see ``tools/settingsgen``) holds one
frozen group per component -- ``settings.log``, ``settings.groups``, ``settings.share_groups``, ``settings.transactions``,
``settings.replication``, ``settings.quotas``, ``settings.ssl``, ``settings.sasl``,
``settings.security``, ``settings.socket``, ``settings.server``, ``settings.zookeeper``,
``settings.metrics`` -- each field typed, in its unit (``log.retention_ms`` from
``log.retention.ms`` / ``.minutes`` / ``.hours`` as Kafka resolves them), checked against Kafka's
ranges when it is built.  :func:`settings_from` builds it from a
:class:`~odradek.config.BrokerConfig` (the store of values and where each came from, which
DescribeConfigs reads); ``settings.for_listener(name, mechanism)`` gives a listener's view.

Dynamic configs (AlterConfigs on the broker) change at run time: :class:`LiveSettings` holds the
current object and replaces it whole after a change, so a component given the holder reads
``holder.current`` and never sees half a change; a component given a group (or a Settings)
has values fixed at start-up, which is right for every read-only config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.config import BROKER_CONFIGS, BrokerConfig, ConfigError, parse_value
from odradek.settings._generated import (
    GroupSettings,
    LogSettings,
    MetricsSettings,
    QuotaSettings,
    ReplicationSettings,
    SaslSettings,
    SchemaRegistrySettings,
    SchemaRegistrySslSettings,
    SecuritySettings,
    ServerSettings,
    Settings,
    ShareCoordinatorSettings,
    ShareGroupSettings,
    SocketSettings,
    SslSettings,
    TableSettings,
    TransactionSettings,
    ZooKeeperSettings,
    build,
)
from odradek.settings._rules import Source

__all__ = [
    "GroupSettings",
    "LiveSettings",
    "LogSettings",
    "MetricsSettings",
    "QuotaSettings",
    "ReplicationSettings",
    "SaslSettings",
    "SchemaRegistrySettings",
    "SchemaRegistrySslSettings",
    "SecuritySettings",
    "ServerSettings",
    "Settings",
    "ShareCoordinatorSettings",
    "ShareGroupSettings",
    "SocketSettings",
    "SslSettings",
    "TableSettings",
    "TransactionSettings",
    "ZooKeeperSettings",
    "settings_from",
]


def _source(config: BrokerConfig, change: Mapping[str, Any | None] | None = None) -> Source:
    values = {name: config.get(name) for name in BROKER_CONFIGS}
    given = {name for name in BROKER_CONFIGS if config.is_set(name)}
    for name, value in (change or {}).items():
        if value is None:  # back to the static value, else the default
            static, static_value = config.static_value(name)
            values[name] = static_value if static else BROKER_CONFIGS[name].default
        else:
            values[name] = parse_value(name, BROKER_CONFIGS[name].type, value)
            given.add(name)
    return Source(values, frozenset(given), config.listener_overrides())


def settings_from(config: BrokerConfig) -> Settings:
    """The typed settings of ``config`` as it is now (a ConfigError names an invalid value)."""
    return build(_source(config))


class LiveSettings:
    """The broker's settings now.  Every change goes through :meth:`apply` (AlterConfigs, the
    dynamic configs the metadata store keeps): it is checked first, then made, and
    :attr:`current` is a new object built from the changed configuration."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._current = settings_from(config)
        self._seen = config.changes

    @property
    def current(self) -> Settings:
        if self._seen != self.config.changes:  # changed through the BrokerConfig itself
            self._current = settings_from(self.config)
            self._seen = self.config.changes
        return self._current

    def check(self, change: Mapping[str, Any | None]) -> None:
        """Raise ConfigError unless ``change`` (name -> value, None: back to the static value)
        makes valid settings; nothing changes."""
        build(_source(self.config, change))

    def apply(self, change: Mapping[str, Any | None]) -> None:
        """Make ``change`` (checked first: a refused change changes nothing)."""
        unknown = [name for name in change if name not in BROKER_CONFIGS]
        if unknown:
            raise ConfigError(f"unknown broker configuration {unknown[0]!r}")
        self.check(change)
        for name, value in change.items():
            self.config.set_dynamic(name, value)
        self._current = settings_from(self.config)
        self._seen = self.config.changes
