"""Group configs: the dynamic per-group configs of resource type GROUP (32), as Kafka's GroupConfig.

A client sets them with IncrementalAlterConfigs / AlterConfigs on ``ConfigResource(GROUP, id)``
(usually before the group exists: a share consumer's ``share.auto.offset.reset`` is set before it
subscribes) and reads them with DescribeConfigs.  A group config without an override takes its
default from the broker setting of the same name with the ``group.`` prefix
(``share.record.lock.duration.ms`` from ``group.share.record.lock.duration.ms``), else Kafka's
default; an override must lie within the broker's ``group.*.min.*`` / ``group.*.max.*`` bounds.

Pure rules, no I/O: the table (:data:`GROUP_CONFIG_SCHEMA`), the check of a group's overrides
(:func:`validate` -- INVALID_CONFIG with Kafka's messages) and the typed view of a group's configs
(:func:`resolve` -> :class:`GroupConfig`).  The broker keeps the overrides in its metadata store
(``MetadataImage.group_configs``) and serves the typed view as
:class:`odradek.broker.group_configs.GroupConfigs` (``for_group(group_id)``).

Kafka's ``streams.*`` group configs (streams groups, KIP-1071) are not served: they are unknown
names here, as streams groups are.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from odradek.config import ConfigError, parse_value
from odradek.settings import GroupSettings, ShareGroupSettings

__all__ = [
    "GROUP_CONFIG_KEYS",
    "GROUP_CONFIG_SCHEMA",
    "AutoOffsetReset",
    "GroupConfig",
    "GroupConfigKey",
    "broker_values",
    "parse_auto_offset_reset",
    "parse_iso_duration_ms",
    "resolve",
    "validate",
]

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
SHARE_RENEW_ACKNOWLEDGE_ENABLE = "share.renew.acknowledge.enable"
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"

READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    """One group config: its name, type, the broker setting its default comes from (None: the
    fixed ``default``), Kafka's ``atLeast`` of the value, the broker settings bounding an override
    (min, max) and what it is."""

    name: str
    type: str  # int, string, boolean
    synonym: str | None
    default: Any
    at_least: int | None
    bounds: tuple[str, str] | None
    doc: str


_K = GroupConfigKey
#: Kafka's group configs (GroupConfig, 4.2; the dead-letter ones are Kafka 4.4's KIP-1191), in order
GROUP_CONFIG_SCHEMA: tuple[GroupConfigKey, ...] = (
    _K(CONSUMER_SESSION_TIMEOUT_MS, "int", "group.consumer.session.timeout.ms", 45000, 1,
       ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
       "The timeout to detect client failures when using the consumer group protocol. (Kept and described; "
       "Odradek's consumer-group coordinator gives every group the broker setting for now.)"),
    _K(CONSUMER_HEARTBEAT_INTERVAL_MS, "int", "group.consumer.heartbeat.interval.ms", 5000, 1,
       ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
       "The heartbeat interval given to the members of a consumer group. (Kept and described; Odradek's "
       "consumer-group coordinator gives every group the broker setting for now.)"),
    _K(SHARE_SESSION_TIMEOUT_MS, "int", "group.share.session.timeout.ms", 45000, 1,
       ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
       "The timeout to detect client failures when using the share group protocol."),
    _K(SHARE_HEARTBEAT_INTERVAL_MS, "int", "group.share.heartbeat.interval.ms", 5000, 1,
       ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
       "The heartbeat interval given to the members of a share group."),
    _K(SHARE_RECORD_LOCK_DURATION_MS, "int", "group.share.record.lock.duration.ms", 30000, 1000,
       ("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
       "How long a share-group member holds a record it acquired before the record is available again, "
       "in milliseconds."),
    _K(SHARE_DELIVERY_COUNT_LIMIT, "int", "group.share.delivery.count.limit", 5, 2,
       ("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
       "How many times a record is delivered to the share group before it is archived (or written to "
       "the dead-letter topic)."),
    _K(SHARE_AUTO_OFFSET_RESET, "string", None, "latest", None, None,
       "Where a share partition starts when the group has no start offset for it: latest, earliest, or "
       "by_duration:<ISO-8601 duration> (the first record at most that long ago, e.g. by_duration:PT1H)."),
    _K(SHARE_ISOLATION_LEVEL, "string", None, READ_UNCOMMITTED, None, None,
       "read_committed: the share group delivers only committed transactional records (never an aborted "
       "one); read_uncommitted: every record. Records outside transactions are delivered either way."),
    _K(SHARE_RENEW_ACKNOWLEDGE_ENABLE, "boolean", None, True, None, None,
       "Whether members may renew the acquisition lock of a record (the RENEW acknowledgement, KIP-1222)."),
    _K(DLQ_TOPIC_NAME, "string", None, "", None, None,
       "The share group's dead-letter topic (KIP-1191): archived records are written there. Empty: none."),
    _K(DLQ_COPY_RECORD_ENABLE, "boolean", None, False, None, None,
       "Whether a dead-letter record copies the original record's key and value, or carries only the "
       "headers naming its origin."),
)
GROUP_CONFIG_KEYS: dict[str, GroupConfigKey] = {k.name: k for k in GROUP_CONFIG_SCHEMA}

# Java's Duration.parse: [-+]P[nD][T[nH][nM][n[.f]S]], case-insensitive, at least one part
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE | re.ASCII,
)
_LONG_MAX = (1 << 63) - 1


def parse_iso_duration_ms(text: str) -> int | None:
    """An ISO-8601 duration as Java's ``Duration.parse`` reads it (``PT1H``, ``P2D``,
    ``PT0.5S``), in milliseconds (truncated); None when it is not one, or beyond Java's range."""
    m = _DURATION.fullmatch(text)
    if m is None or len(text) > 200:
        return None
    sign, days, t_part, hours, minutes, seconds, fraction = m.groups()
    if days is None and t_part is None:
        return None
    if t_part is not None and hours is None and minutes is None and seconds is None:
        return None
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    nanos = int((fraction or "").ljust(9, "0") or 0)
    if seconds is not None and seconds.startswith("-"):
        nanos = -nanos
    if sign == "-":
        total, nanos = -total, -nanos
    exact = total * 1_000_000_000 + nanos
    if not -(_LONG_MAX + 1) * 1_000_000_000 <= exact <= _LONG_MAX * 1_000_000_000 + 999_999_999:
        return None
    return exact // 1_000_000 if exact >= 0 else -((-exact) // 1_000_000)


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """``share.auto.offset.reset``: ``latest``, ``earliest`` or ``by_duration`` (``duration_ms``
    before now)."""

    strategy: Literal["latest", "earliest", "by_duration"]
    duration_ms: int = 0

    def timestamp(self, now_ms: int) -> int:
        """ListOffsets' timestamp for it: -1 (latest), -2 (earliest), else now less the duration."""
        if self.strategy == "latest":
            return -1
        if self.strategy == "earliest":
            return -2
        return max(now_ms - self.duration_ms, 0)

    def __str__(self) -> str:
        return self.strategy


def parse_auto_offset_reset(name: str, text: str) -> AutoOffsetReset:
    """Kafka's ShareGroupAutoOffsetResetStrategy (case-sensitive; a duration not negative), or
    ConfigError with Kafka's message."""
    if text == "latest":
        return AutoOffsetReset("latest")
    if text == "earliest":
        return AutoOffsetReset("earliest")
    if text.startswith("by_duration:"):
        ms = parse_iso_duration_ms(text[len("by_duration:"):])
        if ms is not None and ms >= 0:
            return AutoOffsetReset("by_duration", ms)
    raise ConfigError(
        f"Invalid value {text} for configuration {name}: Invalid value `{text}` for configuration {name}. "
        "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."
    )


def _parse(key: GroupConfigKey, value: str) -> Any:
    """One value as Kafka's ConfigDef parses it (trimmed; types and ``atLeast`` checked)."""
    if key.type == "int":
        number = parse_value(key.name, "int", value)
        if key.at_least is not None and number < key.at_least:
            raise ConfigError(f"Invalid value {number} for configuration {key.name}: "
                              f"Value must be at least {key.at_least}")
        return number
    if key.type == "boolean":
        return parse_value(key.name, "boolean", value)
    text = value.strip()
    if key.name == SHARE_AUTO_OFFSET_RESET:
        return parse_auto_offset_reset(key.name, text)
    if key.name == SHARE_ISOLATION_LEVEL and text not in ISOLATION_LEVELS:
        raise ConfigError(f"Invalid value {text} for configuration {key.name}: "
                          f"String must be one of: {', '.join(ISOLATION_LEVELS)}")
    if key.name == DLQ_TOPIC_NAME and text.startswith("__"):
        raise ConfigError(f"{DLQ_TOPIC_NAME}: DLQ topic name must not start with '__'")
    return text


def broker_values(groups: GroupSettings, share: ShareGroupSettings) -> dict[str, int]:
    """The broker settings group configs default to and are bounded by, by broker config name."""
    return {
        "group.consumer.session.timeout.ms": groups.consumer_session_timeout_ms,
        "group.consumer.min.session.timeout.ms": groups.consumer_min_session_timeout_ms,
        "group.consumer.max.session.timeout.ms": groups.consumer_max_session_timeout_ms,
        "group.consumer.heartbeat.interval.ms": groups.consumer_heartbeat_interval_ms,
        "group.consumer.min.heartbeat.interval.ms": groups.consumer_min_heartbeat_interval_ms,
        "group.consumer.max.heartbeat.interval.ms": groups.consumer_max_heartbeat_interval_ms,
        "group.share.session.timeout.ms": share.session_timeout_ms,
        "group.share.min.session.timeout.ms": share.min_session_timeout_ms,
        "group.share.max.session.timeout.ms": share.max_session_timeout_ms,
        "group.share.heartbeat.interval.ms": share.heartbeat_interval_ms,
        "group.share.min.heartbeat.interval.ms": share.min_heartbeat_interval_ms,
        "group.share.max.heartbeat.interval.ms": share.max_heartbeat_interval_ms,
        "group.share.record.lock.duration.ms": share.record_lock_duration_ms,
        "group.share.min.record.lock.duration.ms": share.min_record_lock_duration_ms,
        "group.share.max.record.lock.duration.ms": share.max_record_lock_duration_ms,
        "group.share.delivery.count.limit": share.delivery_count_limit,
        "group.share.min.delivery.count.limit": share.min_delivery_count_limit,
        "group.share.max.delivery.count.limit": share.max_delivery_count_limit,
    }


def _default(key: GroupConfigKey, broker: Mapping[str, int]) -> Any:
    if key.synonym is not None:
        return broker[key.synonym]
    if key.name == SHARE_AUTO_OFFSET_RESET:
        return AutoOffsetReset("latest")
    return key.default


def validate(
    overrides: Mapping[str, str], groups: GroupSettings, share: ShareGroupSettings
) -> dict[str, Any]:
    """Check a group's overrides (name -> value as set) as Kafka's ``GroupConfig.validate`` checks
    them, merged over the broker's defaults: every name known (``Unknown group config name: x``),
    every value of its type and range, every bounded one within the broker's min/max, each session
    timeout above its heartbeat interval.  Returns the parsed overrides; raises ConfigError
    (INVALID_CONFIG) on the first problem."""
    for name in overrides:
        if name not in GROUP_CONFIG_KEYS:
            raise ConfigError(f"Unknown group config name: {name}")
    broker = broker_values(groups, share)
    parsed = {name: _parse(GROUP_CONFIG_KEYS[name], value) for name, value in overrides.items()}
    merged = {k.name: parsed.get(k.name, _default(k, broker)) for k in GROUP_CONFIG_SCHEMA}
    for key in GROUP_CONFIG_SCHEMA:
        if key.bounds is None:
            continue
        low, high = key.bounds
        if merged[key.name] < broker[low]:
            raise ConfigError(f"{key.name} must be greater than or equal to {low}")
        if merged[key.name] > broker[high]:
            raise ConfigError(f"{key.name} must be less than or equal to {high}")
    for session, heartbeat in ((CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
                               (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS)):
        if merged[session] <= merged[heartbeat]:
            raise ConfigError(f"{session} must be greater than {heartbeat}")
    return parsed


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A group's configs in effect: its overrides, else the broker's defaults (typed)."""

    group_id: str
    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_auto_offset_reset: AutoOffsetReset
    #: ``read_uncommitted`` or ``read_committed``
    share_isolation_level: str
    share_renew_acknowledge_enable: bool
    #: the dead-letter topic (KIP-1191); "" none
    dlq_topic_name: str
    dlq_copy_record_enable: bool
    #: the overrides as set (config name -> value), empty when the group has none
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def share_read_committed(self) -> bool:
        return self.share_isolation_level == READ_COMMITTED


def resolve(
    group_id: str, overrides: Mapping[str, str], groups: GroupSettings, share: ShareGroupSettings
) -> GroupConfig:
    """The typed configs of ``group_id`` from its stored ``overrides``.  Never raises: an override
    that no longer parses (stored by another version) takes the default, and a number outside the
    broker's bounds now (they changed since it was set) is brought within them."""
    broker = broker_values(groups, share)
    values: dict[str, Any] = {}
    for key in GROUP_CONFIG_SCHEMA:
        value = _default(key, broker)
        text = overrides.get(key.name)
        if text is not None:
            with contextlib.suppress(ConfigError):
                value = _parse(key, text)
        if key.bounds is not None:
            value = min(max(value, broker[key.bounds[0]]), broker[key.bounds[1]])
        values[key.name] = value
    return GroupConfig(
        group_id=group_id,
        consumer_session_timeout_ms=values[CONSUMER_SESSION_TIMEOUT_MS],
        consumer_heartbeat_interval_ms=values[CONSUMER_HEARTBEAT_INTERVAL_MS],
        share_session_timeout_ms=values[SHARE_SESSION_TIMEOUT_MS],
        share_heartbeat_interval_ms=values[SHARE_HEARTBEAT_INTERVAL_MS],
        share_record_lock_duration_ms=values[SHARE_RECORD_LOCK_DURATION_MS],
        share_delivery_count_limit=values[SHARE_DELIVERY_COUNT_LIMIT],
        share_auto_offset_reset=values[SHARE_AUTO_OFFSET_RESET],
        share_isolation_level=values[SHARE_ISOLATION_LEVEL],
        share_renew_acknowledge_enable=values[SHARE_RENEW_ACKNOWLEDGE_ENABLE],
        dlq_topic_name=values[DLQ_TOPIC_NAME],
        dlq_copy_record_enable=values[DLQ_COPY_RECORD_ENABLE],
        overrides=dict(overrides),
    )


def check_share_settings(share: ShareGroupSettings) -> None:
    """The share-group broker settings checked against each other as Kafka checks them at start-up
    (GroupCoordinatorConfig, ShareGroupConfig): ConfigError naming the two that disagree."""
    s = share
    rules = [
        (s.max_heartbeat_interval_ms >= s.min_heartbeat_interval_ms,
         "group.share.max.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
        (s.heartbeat_interval_ms >= s.min_heartbeat_interval_ms,
         "group.share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
        (s.heartbeat_interval_ms <= s.max_heartbeat_interval_ms,
         "group.share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
        (s.max_session_timeout_ms >= s.min_session_timeout_ms,
         "group.share.max.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
        (s.session_timeout_ms >= s.min_session_timeout_ms,
         "group.share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
        (s.session_timeout_ms <= s.max_session_timeout_ms,
         "group.share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
        (s.heartbeat_interval_ms < s.session_timeout_ms,
         "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"),
        (s.max_delivery_count_limit >= s.delivery_count_limit,
         "group.share.max.delivery.count.limit must be greater than or equal to group.share.delivery.count.limit"),
        (s.delivery_count_limit >= s.min_delivery_count_limit,
         "group.share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit"),
        (s.record_lock_duration_ms >= s.min_record_lock_duration_ms,
         "group.share.record.lock.duration.ms must be greater than or equal to "
         "group.share.min.record.lock.duration.ms"),
        (s.max_record_lock_duration_ms >= s.record_lock_duration_ms,
         "group.share.max.record.lock.duration.ms must be greater than or equal to "
         "group.share.record.lock.duration.ms"),
        (s.max_share_sessions >= s.max_size,
         "group.share.max.share.sessions must be greater than or equal to group.share.max.size"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)
