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
    "TOPIC_SYNONYMS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "Listener",
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
    ("queued.max.requests", "int", 500),
    ("num.network.threads", "int", 3, False),
    ("num.io.threads", "int", 8, False),
    ("num.recovery.threads.per.data.dir", "int", 2, False),
    ("fetch.max.bytes", "int", 57671680),
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
    ("transaction.state.log.replication.factor", "short", 1),
    ("zookeeper.connect", "string", None),
    ("zookeeper.session.timeout.ms", "int", 18000),
    ("zookeeper.connection.timeout.ms", "int", None),
    ("controlled.shutdown.enable", "boolean", True),
    ("controlled.shutdown.max.retries", "int", 3),
    ("controlled.shutdown.retry.backoff.ms", "long", 5000),
    ("controller.socket.timeout.ms", "int", 30000),
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

#: Kafka's topic-level configs, with the broker configs their defaults come from (in order)
TOPIC_SYNONYMS: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("log.cleanup.policy",),
    "compression.type": ("compression.type",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "max.message.bytes": ("message.max.bytes",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
    "message.format.version": ("log.message.format.version",),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "min.insync.replicas": ("min.insync.replicas",),
    "preallocate": ("log.preallocate",),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.bytes": ("log.segment.bytes",),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
}

#: topic configs Kafka 3.x deprecates but still accepts, with why they have no effect here: a
#: change naming one is accepted with a warning (as Kafka does for message.format.version)
DEPRECATED_TOPIC_CONFIGS: dict[str, str] = {
    "message.format.version": "records are always written in message format v2 (Kafka 3.0 deprecated this "
    "configuration and ignores it; Kafka 4.0 removes it)",
}

#: topic configs with their types (for validation of CreateTopics / AlterConfigs)
TOPIC_CONFIGS: dict[str, str] = {
    "cleanup.policy": "list",
    "compression.type": "string",
    "delete.retention.ms": "long",
    "file.delete.delay.ms": "long",
    "flush.messages": "long",
    "flush.ms": "long",
    "index.interval.bytes": "int",
    "max.compaction.lag.ms": "long",
    "max.message.bytes": "int",
    "message.downconversion.enable": "boolean",
    "message.format.version": "string",
    "message.timestamp.difference.max.ms": "long",
    "message.timestamp.before.max.ms": "long",
    "message.timestamp.after.max.ms": "long",
    "message.timestamp.type": "string",
    "min.cleanable.dirty.ratio": "double",
    "min.compaction.lag.ms": "long",
    "min.insync.replicas": "int",
    "preallocate": "boolean",
    "retention.bytes": "long",
    "retention.ms": "long",
    "segment.bytes": "int",
    "segment.index.bytes": "int",
    "segment.jitter.ms": "long",
    "segment.ms": "long",
    "unclean.leader.election.enable": "boolean",
}

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


#: ``ODRADEK_*`` environment variables that are not broker configs (``ODRADEK_TEST_*`` neither)
NON_CONFIG_ENV = frozenset({"ODRADEK_EXAMPLES"})


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

    # -- access --------------------------------------------------------------------------
    def get(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise KeyError(name)
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
