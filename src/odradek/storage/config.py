"""Topic-level log configuration: Kafka's names and defaults.

A :class:`LogConfig` is built from a dict keyed by Kafka's topic-level config names
(``segment.bytes``, ``retention.ms``, ``cleanup.policy``, ...).  Missing keys take Kafka's
defaults; unknown keys are an error, so typos do not pass silently.  Kafka's topic configs that
Odradek does not act on (``compression.gzip.level``, ``remote.log.copy.disable``, ...) are
accepted and have no field here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from odradek.config import TOPIC_KEYS, TOPIC_SCHEMA, ConfigError, iceberg_partition_spec
from odradek.storage.errors import InvalidConfigError

__all__ = ["DEFAULTS", "LogConfig"]

#: the topic configs a log acts on, with their defaults (the rows of odradek.config.TOPIC_SCHEMA
#: that Odradek uses; each is a field of LogConfig)
# Any: each config's value has its row's type (int, float, bool or str)
DEFAULTS: dict[str, Any] = {k.name: k.default for k in TOPIC_SCHEMA if k.used}


def _coerce(name: str, value: Any, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                return value.lower() == "true"
            return bool(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise InvalidConfigError(f"invalid value {value!r} for {name}") from exc


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Typed view of a topic's log configuration."""

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    flush_messages: int
    flush_ms: int
    retention_ms: int
    retention_bytes: int
    file_delete_delay_ms: int
    cleanup_policy: str
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    message_timestamp_difference_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    compression_type: str
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    preallocate: bool
    message_downconversion_enable: bool
    message_format_version: str
    leader_replication_throttled_replicas: str
    follower_replication_throttled_replicas: str
    errors_deadletterqueue_group_enable: bool
    confluent_key_schema_validation: bool
    confluent_value_schema_validation: bool
    confluent_key_subject_name_strategy: str
    confluent_value_subject_name_strategy: str
    odradek_iceberg_mode: str
    odradek_iceberg_partition_spec: str
    odradek_iceberg_commit_interval_ms: int
    # derived from the fields above when built (read for every produced batch: plain attributes,
    # not properties); not configs of their own (to_dict leaves them out)
    #: cleanup.policy has compact
    compact: bool = field(init=False, repr=False, compare=False)
    #: whether produced records' keys or values are checked against the schema registry
    schema_validation: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compact", "compact" in self.cleanup_policy)
        object.__setattr__(
            self, "schema_validation", self.confluent_key_schema_validation or self.confluent_value_schema_validation
        )

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | None = None) -> LogConfig:
        config = dict(config or {})
        unknown = sorted(set(config) - set(TOPIC_KEYS))
        if unknown:
            raise InvalidConfigError(f"Unknown topic config name: {', '.join(unknown)}")
        values = {k: _coerce(k, config.get(k, d), d) for k, d in DEFAULTS.items()}
        policy = {p.strip() for p in values["cleanup.policy"].split(",") if p.strip()}
        if not policy or not policy <= {"delete", "compact"}:
            raise InvalidConfigError(f"invalid cleanup.policy {values['cleanup.policy']!r}")
        if values["segment.bytes"] < 14:
            raise InvalidConfigError("segment.bytes must be at least 14")
        if values["segment.index.bytes"] < 12:
            raise InvalidConfigError("segment.index.bytes must be at least 12")
        if values["message.timestamp.type"] not in ("CreateTime", "LogAppendTime"):
            raise InvalidConfigError(f"invalid message.timestamp.type {values['message.timestamp.type']!r}")
        if values["odradek.iceberg.mode"] not in ("off", "key_value", "value_schema"):
            raise InvalidConfigError(f"invalid odradek.iceberg.mode {values['odradek.iceberg.mode']!r}")
        try:
            iceberg_partition_spec(values["odradek.iceberg.partition.spec"])
        except ConfigError as exc:
            raise InvalidConfigError(exc.message) from None
        if values["odradek.iceberg.commit.interval.ms"] < 1:
            raise InvalidConfigError(f"Invalid value {values['odradek.iceberg.commit.interval.ms']} for configuration "
                                     "odradek.iceberg.commit.interval.ms: Value must be at least 1")
        return cls(**{k.replace(".", "_"): v for k, v in values.items()})

    def to_dict(self) -> dict[str, Any]:
        return {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self) if f.init}

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

