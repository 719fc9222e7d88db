"""DescribeConfigs (32) v0-4, AlterConfigs (33) v0-2, IncrementalAlterConfigs (44) v0-1.

Topic resources (type 2) report every topic config: the topic's override (source
DYNAMIC_TOPIC_CONFIG), else the broker config it derives from (STATIC_BROKER_CONFIG when set in
the broker's configuration, DEFAULT_CONFIG otherwise), with synonyms in that order.  Broker
resources (type 4, named by broker id) report the broker configs.  Group resources (type 32,
named by group id, existing or not) report every group config: the group's override (source
GROUP_CONFIG, 8), else the broker setting it defaults to (DEFAULT_CONFIG), as Kafka does.  AlterConfigs replaces a
resource's whole override set; IncrementalAlterConfigs applies SET / DELETE / APPEND / SUBTRACT.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek._clock import Clock, SystemClock
from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.ports import check_log_config
from odradek.cluster import client_metrics
from odradek.cluster.group_configs import GROUP_CONFIG_KEYS, GROUP_CONFIG_SCHEMA
from odradek.config import (
    BROKER_CONFIGS,
    DEPRECATED_TOPIC_CONFIGS,
    TOPIC_CONFIGS,
    TOPIC_KEYS,
    TOPIC_SYNONYMS,
    TYPE_CODES,
    ConfigError,
    ConfigSource,
    nearest_name,
    parse_listeners,
    parse_value,
    split_per_listener,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from odradek.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from odradek.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from odradek.protocol.messages.list_config_resources import (
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from odradek.security.acl import Operation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.ports import ConfigsPort, ConfigStore

log = logging.getLogger(__name__)

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
#: a client-metrics subscription's configs and their types (KIP-714)
_CLIENT_METRICS_TYPES = {client_metrics.METRICS: "list", client_metrics.INTERVAL: "int", client_metrics.MATCH: "list"}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() is False:
        return repr(value)
    return str(value)


@dataclass
class Entry:
    name: str
    value: str | None
    read_only: bool
    config_source: int
    config_type: int
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


_warned: set[tuple[str, str, str]] = set()
_MAX_WARNED = 10_000


def throttled_replicas_valid(value: str) -> bool:
    """Kafka's ThrottledReplicaListValidator: empty, ``*``, or ``partition:broker`` pairs."""
    text = value.strip()
    if text in ("", "*"):
        return True
    return all(re.fullmatch(r"\s*\d+\s*:\s*\d+\s*", item) for item in text.split(","))


class _HintBudget:
    """How many "did you mean" searches the broker makes: one costs up to a few milliseconds on
    the event loop (edit similarity against every config name), so a request naming thousands of
    unknown configs, or a flood of them, gets the rest answered without the hint.  A token
    bucket: ``rate`` searches a second, ``rate`` at once."""

    def __init__(self, rate: int, clock: Clock) -> None:
        self.rate, self.clock = rate, clock
        self.tokens, self.at = float(rate), clock.monotonic_ms()

    def take(self) -> bool:
        now = self.clock.monotonic_ms()
        self.tokens = min(float(self.rate), self.tokens + (now - self.at) * self.rate / 1000)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


_hints = _HintBudget(25, SystemClock())


def _unknown(kind: str, name: str, known: Iterable[str]) -> KafkaError:
    """Kafka's wording (``Unknown topic config name: x``, which clients match), with the valid
    name meant when one is close (while the hint budget lasts)."""
    near = nearest_name(name, known) if _hints.take() else None
    hint = f" (did you mean {near!r}?)" if near is not None else ""
    return KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {name}{hint}")


#: Kafka's ranges of the topic configs Odradek accepts without acting on them
_LEVELS = {"compression.gzip.level": (-1, 9), "compression.lz4.level": (1, 17), "compression.zstd.level": (-131072, 22)}


def _check_topic_value(name: str, type_: str, value: str) -> None:
    parse_value(name, type_, value)
    if name.endswith(".replication.throttled.replicas") and not throttled_replicas_valid(value):
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Invalid value {value} for configuration {name}: must be the literal '*' or a list of replicas in "
            "the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
        )
    if name in _LEVELS:
        low, high = _LEVELS[name]
        level = int(value)
        if not (low <= level <= high) or (name == "compression.gzip.level" and level == 0):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: "
                             f"Value must be between {low} and {high}")
    if name == "remote.storage.enable" and parse_value(name, type_, value):
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.",
        )


def validate_topic_configs(
    configs: Mapping[str, str | None], base: Mapping[str, Any] | None = None, *, topic: str | None = None
) -> None:
    """Refuse unknown names and invalid values (INVALID_CONFIG) with Kafka's messages.  With
    ``topic`` (a change about to be made to that topic), a deprecated config that Kafka 3.x still
    accepts is accepted with a WARN line, once per topic, config and value, and Kafka's configs
    that Odradek does not act on with one WARN line naming them."""
    for name, value in configs.items():
        t = TOPIC_CONFIGS.get(name)
        if t is None:
            raise _unknown("topic", name, TOPIC_CONFIGS)
        if value is not None:
            _check_topic_value(name, t, value)
    merged = dict(base or {})
    merged.update({k: v for k, v in configs.items() if v is not None})
    check_log_config(merged)
    if topic is not None:
        for name, value in configs.items():
            why = DEPRECATED_TOPIC_CONFIGS.get(name)
            if why is None or value is None or not _first_time((topic, name, value)):
                continue
            log.warning("Topic configuration %s with value `%s` is ignored for `%s`: %s", name, value, topic, why)
        unused = sorted(f"{k}={v}" for k, v in configs.items() if v is not None and not TOPIC_KEYS[k].used)
        if unused and _first_time((topic, "", ",".join(unused))):
            log.warning("Topic `%s`: accepted, not used by Odradek (Kafka topic configs with no effect here): %s",
                        topic, ", ".join(unused))


def _first_time(key: tuple[str, str, str]) -> bool:
    """Whether this warning has not been logged yet (remembered up to _MAX_WARNED of them)."""
    if key in _warned:
        return False
    if len(_warned) < _MAX_WARNED:
        _warned.add(key)
    return True


def validate_broker_configs(port: ConfigsPort, change: Mapping[str, str | None], *, per_broker: bool) -> None:
    """A change of broker configs (AlterConfigs on a BROKER resource) as Kafka checks it: every
    name one of the schema's (else INVALID_CONFIG naming the nearest), only dynamic ones
    (INVALID_REQUEST, ``Cannot update these configs dynamically``), per-broker ones only for a
    broker id, and every value of its type (INVALID_REQUEST, as Kafka wraps it)."""
    for k in change:
        if k in BROKER_CONFIGS:
            continue
        if k.startswith("listener.name."):
            try:
                split_per_listener(k, suggest=_hints.take())
            except ConfigError as exc:
                raise KafkaError(ErrorCode.INVALID_CONFIG, exc.message) from None
            continue
        raise _unknown("broker", k, BROKER_CONFIGS)
    # per-listener settings are read when a listener starts (SIGHUP reloads TLS keystores)
    fixed = [k for k in change if k.startswith("listener.name.") or BROKER_CONFIGS[k].read_only]
    if fixed:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    if not per_broker:
        mine = [k for k in change if BROKER_CONFIGS[k].per_broker]
        if mine:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"Cannot update these configs at default cluster level, broker id must be specified: Set({', '.join(mine)})",
            )
    for k, v in change.items():
        if v is None:
            continue
        try:
            parse_value(k, BROKER_CONFIGS[k].type, v)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, exc.message) from None
    try:
        port.settings.check(change)  # Kafka's ranges (num.partitions at least 1, ...)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, exc.message) from None
    spec = change.get("advertised.listeners")
    if spec:
        _check_advertised(port, spec)


def _check_advertised(port: ConfigsPort, spec: str) -> None:
    """Kafka's DynamicListenerConfig check: parseable, and only listeners this broker has."""
    try:
        advertised = parse_listeners(spec, port.settings.current.socket.listener_security_protocol_map)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid value {spec} for configuration advertised.listeners: "
                         f"{exc.message}") from None
    socket_settings = port.settings.current.socket
    names = {lst.name for lst in socket_settings.listener_endpoints}
    if not {lst.name for lst in advertised} <= names:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Advertised listeners '{spec}' must be a subset of listeners '{socket_settings.listeners}'",
        )
    if any(lst.port == 0 for lst in advertised):
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Invalid value {spec} for configuration advertised.listeners: an advertised port cannot be 0")


def topic_config_entries(port: ConfigsPort, topic: str, overrides: Mapping[str, str], version: int) -> list[Entry]:
    store = port.store
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for broker_name in TOPIC_SYNONYMS.get(name, ()):
            if store.is_set(broker_name):
                synonyms.append((broker_name, _text(store.get(broker_name)), store.source(broker_name)))
        value, _from = store.topic_default(name)
        default_text = _text(value)
        for broker_name in TOPIC_SYNONYMS.get(name, ()):
            d = BROKER_CONFIGS[broker_name]
            if d.default is not None and not store.is_set(broker_name):
                synonyms.append((broker_name, _text(d.default), ConfigSource.DEFAULT_CONFIG))
                break
        value_text: str | None
        source: int
        if name in overrides:
            value_text, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
        else:
            value_text = default_text
            source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(Entry(name, value_text, False, int(source), TYPE_CODES.get(TOPIC_CONFIGS[name], 0), synonyms))
    return entries


#: how DescribeConfigs' documentation marks Kafka's configs that Odradek does not act on
UNUSED = "Accepted, not used by Odradek."


def documentation(resource_type: int, name: str) -> str | None:
    """A config's documentation for DescribeConfigs (v3+, when asked): the schema's line, after
    :data:`UNUSED` for Kafka's configs that Odradek accepts without acting on them."""
    if resource_type == GROUP:
        group_key = GROUP_CONFIG_KEYS.get(name)
        return None if group_key is None else group_key.doc
    if resource_type == TOPIC:
        key = TOPIC_KEYS.get(name)
        if key is None:
            return None
        return key.doc if key.used else f"{UNUSED} {key.doc}"
    d = BROKER_CONFIGS.get(name)
    if d is None:
        return None
    return (d.doc or None) if d.used else f"{UNUSED} {d.doc}"


def broker_config_entries(store: ConfigStore) -> list[Entry]:
    entries = []
    for name, d in BROKER_CONFIGS.items():
        source = store.source(name)
        # passwords, keys and JAAS configs are never told: Kafka answers null, is_sensitive
        value = None if d.type == "password" else _text(store.get(name))
        synonyms = [(name, value, int(source))]
        if source == ConfigSource.DYNAMIC_BROKER_CONFIG:
            static, static_value = store.static_value(name)
            if static:
                shown = None if d.type == "password" else _text(static_value)
                synonyms.append((name, shown, int(ConfigSource.STATIC_BROKER_CONFIG)))
        if source != ConfigSource.DEFAULT_CONFIG and d.default is not None and d.type != "password":
            synonyms.append((name, _text(d.default), int(ConfigSource.DEFAULT_CONFIG)))
        entries.append(Entry(name, value, d.read_only, int(source), TYPE_CODES.get(d.type, 0), synonyms))
    return entries


@handles(ApiKey.DESCRIBE_CONFIGS, versions=(0, 4))
async def describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    R = DescribeConfigsResponse
    port = ctx.ports.configs
    version = ctx.version
    results = []
    for res in request.resources:
        out = R.DescribeConfigsResult(resource_type=res.resource_type, resource_name=res.resource_name, error_message=None)
        results.append(out)
        try:
            _authorize(ctx, res.resource_type, res.resource_name, Operation.DESCRIBE_CONFIGS)
            if res.resource_type == TOPIC:
                info = port.metadata.image.topics.get(res.resource_name)
                if info is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{res.resource_name}' does not exist")
                overrides = await port.topics.current_configs(info.name)
                entries = topic_config_entries(port, info.name, overrides, version)
            elif res.resource_type == BROKER:
                if res.resource_name not in ("", str(port.broker_id)):
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unexpected broker id {res.resource_name}")
                entries = broker_config_entries(port.store)
            elif res.resource_type == BROKER_LOGGER:
                entries = []
            elif res.resource_type == CLIENT_METRICS:
                entries = client_metrics_entries(port, res.resource_name)
            elif res.resource_type == GROUP:
                entries = group_config_entries(port, res.resource_name)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {res.resource_type}")
            keys = res.configuration_keys
            for e in entries:
                if keys is not None and e.name not in keys:
                    continue
                doc = None
                if version >= 3 and request.include_documentation:
                    doc = documentation(res.resource_type, e.name)
                item = R.DescribeConfigsResourceResult(
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    is_sensitive=e.config_type == TYPE_CODES["password"],
                    documentation=doc,
                )
                if version == 0:
                    item.is_default = e.config_source == ConfigSource.DEFAULT_CONFIG
                else:
                    item.config_source = e.config_source
                if version >= 1 and request.include_synonyms:
                    item.synonyms = [R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in e.synonyms]
                if version >= 3:
                    item.config_type = e.config_type
                out.configs.append(item)
        except KafkaError as exc:
            out.error_code = int(exc.code)
            out.error_message = exc.message or None
    return R(throttle_time_ms=0, results=results)


def _authorize(ctx: RequestContext, resource_type: int, name: str, op: Operation) -> None:
    """A topic's configs need ``op`` on the topic, a group's on the group, a broker's on the cluster."""
    if resource_type == TOPIC:
        if not ctx.authorize(op, ResourceType.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
    elif resource_type == GROUP:
        if not ctx.authorize(op, ResourceType.GROUP, name):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
    elif resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS) and not ctx.authorize_cluster(op):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")


async def _apply(
    port: ConfigsPort, resource_type: int, name: str, change: dict[str, str | None], replace_all: bool, validate_only: bool
) -> None:
    if resource_type == TOPIC:
        # the metadata store decides, as Kafka's ZooKeeper mode reads ZooKeeper: a topic created
        # through another broker may not be in this one's image yet, and an incremental change
        # applies to the overrides as stored now, not to what this broker last heard
        if not await port.topics.exists(name):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        new = {} if replace_all else dict(await port.topics.current_configs(name))
        for k, v in change.items():
            if v is None:
                new.pop(k, None)
            else:
                new[k] = v
        validate_topic_configs(change, topic=None if validate_only else name)
        validate_topic_configs(new, port.settings.current.log.topic_defaults)
        if not validate_only:
            await port.topics.set_configs(name, new)
    elif resource_type == BROKER:
        if name not in ("", str(port.broker_id)):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unexpected broker id {name}")
        validate_broker_configs(port, change, per_broker=name != "")
        if not validate_only:
            await port.topics.set_broker_configs(change, replace_all)
            unused = sorted(k for k, v in change.items() if v is not None and not BROKER_CONFIGS[k].used)
            if unused:
                log.warning("broker %s: accepted, not used by Odradek (Kafka configs with no effect here): %s",
                            name or "<default>", ", ".join(unused))
    elif resource_type == CLIENT_METRICS:
        await _apply_client_metrics(port, name, change, replace_all, validate_only)
    elif resource_type == GROUP:
        await port.group_configs.alter(name, change, replace_all=replace_all, validate_only=validate_only)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {resource_type}")


def group_config_entries(port: ConfigsPort, group_id: str) -> list[Entry]:
    """Every group config of ``group_id`` (the group need not exist): the override as set (source
    GROUP_CONFIG), else the value in effect from the broker's setting (DEFAULT_CONFIG)."""
    if not group_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    overrides = port.group_configs.overrides(group_id)
    effective = port.group_configs.for_group(group_id)
    values = {
        "consumer.session.timeout.ms": effective.consumer_session_timeout_ms,
        "consumer.heartbeat.interval.ms": effective.consumer_heartbeat_interval_ms,
        "share.session.timeout.ms": effective.share_session_timeout_ms,
        "share.heartbeat.interval.ms": effective.share_heartbeat_interval_ms,
        "share.record.lock.duration.ms": effective.share_record_lock_duration_ms,
        "share.delivery.count.limit": effective.share_delivery_count_limit,
        "share.auto.offset.reset": str(effective.share_auto_offset_reset),
        "share.isolation.level": effective.share_isolation_level,
        "share.renew.acknowledge.enable": effective.share_renew_acknowledge_enable,
        "errors.deadletterqueue.topic.name": effective.dlq_topic_name,
        "errors.deadletterqueue.copy.record.enable": effective.dlq_copy_record_enable,
    }
    entries = []
    for key in GROUP_CONFIG_SCHEMA:
        type_code = TYPE_CODES.get(key.type, 0)
        if key.name in overrides:
            source = int(ConfigSource.GROUP_CONFIG)
            text: str | None = overrides[key.name]
            entries.append(Entry(key.name, text, False, source, type_code, [(key.name, text, source)]))
        else:
            text = _text(values[key.name])
            entries.append(Entry(key.name, text, False, int(ConfigSource.DEFAULT_CONFIG), type_code, []))
    return entries


def client_metrics_entries(port: ConfigsPort, name: str) -> list[Entry]:
    """A client-metrics subscription's configs as set (none: no such subscription)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
    stored = port.metadata.image.client_metrics.get(name, {})
    source = int(ConfigSource.CLIENT_METRICS_CONFIG)
    return [
        Entry(k, v, False, source, TYPE_CODES.get(_CLIENT_METRICS_TYPES.get(k, "string"), 0), [(k, v, source)])
        for k, v in sorted(stored.items())
    ]


async def _apply_client_metrics(
    port: ConfigsPort, name: str, change: Mapping[str, str | None], replace_all: bool, validate_only: bool
) -> None:
    """Change a client-metrics subscription (KIP-714) in the metadata store, checked as Kafka does;
    a subscription left with no config is removed."""
    client_metrics.validate(name, {k: v for k, v in change.items() if v is not None})

    def apply(before: dict[str, str]) -> dict[str, str]:
        after = {} if replace_all else dict(before)
        for k, v in change.items():
            if v is None:
                after.pop(k, None)
            else:
                after[k] = v
        client_metrics.validate(name, after)
        return before if validate_only else after

    after = await port.client_metrics.alter_client_metrics(name, apply)
    if not validate_only:
        log.info("client-metrics subscription %r %s: %s", name, "set" if after else "removed", after)


@handles(ApiKey.ALTER_CONFIGS, versions=(0, 2))
async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    R = AlterConfigsResponse
    results = []
    for res in request.resources:
        out = R.AlterConfigsResourceResponse(
            resource_type=res.resource_type, resource_name=res.resource_name, error_message=None
        )
        results.append(out)
        try:
            _authorize(ctx, res.resource_type, res.resource_name, Operation.ALTER_CONFIGS)
            change = {c.name: c.value for c in res.configs}
            await _apply(ctx.ports.configs, res.resource_type, res.resource_name, change, True, request.validate_only)
        except KafkaError as exc:
            out.error_code = int(exc.code)
            out.error_message = exc.message or None
    return R(throttle_time_ms=0, responses=results)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, versions=(0, 1))
async def incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    R = IncrementalAlterConfigsResponse
    port = ctx.ports.configs
    results = []
    for res in request.resources:
        out = R.AlterConfigsResourceResponse(
            resource_type=res.resource_type, resource_name=res.resource_name, error_message=None
        )
        results.append(out)
        try:
            _authorize(ctx, res.resource_type, res.resource_name, Operation.ALTER_CONFIGS)
            current: Mapping[str, str] = {}
            if res.resource_type == TOPIC:
                info = port.metadata.image.topics.get(res.resource_name)
                current = info.configs if info is not None else {}
            elif res.resource_type == CLIENT_METRICS:
                current = port.metadata.image.client_metrics.get(res.resource_name, {})
            elif res.resource_type == GROUP:
                current = port.group_configs.overrides(res.resource_name)
            change: dict[str, str | None] = {}
            for c in res.configs:
                if c.config_operation == SET:
                    change[c.name] = c.value
                elif c.config_operation == DELETE:
                    change[c.name] = None
                elif c.config_operation in (APPEND, SUBTRACT):
                    if res.resource_type == TOPIC:
                        kind = TOPIC_CONFIGS.get(c.name)
                        if kind is None:
                            raise _unknown("topic", c.name, TOPIC_CONFIGS)
                    elif res.resource_type == CLIENT_METRICS:
                        kind = _CLIENT_METRICS_TYPES.get(c.name, "string")
                    elif res.resource_type == GROUP:
                        group_key = GROUP_CONFIG_KEYS.get(c.name)
                        if group_key is None:
                            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {c.name}")
                        kind = group_key.type
                    else:
                        d = BROKER_CONFIGS.get(c.name)
                        if d is None:
                            raise _unknown("broker", c.name, BROKER_CONFIGS)
                        kind = d.type
                    if kind != "list":
                        verb = "append" if c.config_operation == APPEND else "subtract"
                        raise KafkaError(
                            ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {c.name}"
                        )
                    # the list to change: an earlier op in this request, else the override, else
                    # the value in effect (Kafka appends to the default when nothing is set)
                    if c.name in change:
                        base = change[c.name]
                    elif c.name in current:
                        base = current[c.name]
                    elif res.resource_type == TOPIC:
                        base = _text(port.store.topic_default(c.name)[0])
                    elif res.resource_type == CLIENT_METRICS:
                        base = None
                    else:
                        base = _text(port.store.get(c.name)) if c.name in BROKER_CONFIGS else None
                    items = [x for x in (base or "").split(",") if x]
                    values = [x for x in (c.value or "").split(",") if x]
                    if c.config_operation == APPEND:
                        items += [v for v in values if v not in items]
                    else:
                        items = [x for x in items if x not in values]
                    change[c.name] = ",".join(items)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown config operation {c.config_operation}")
            await _apply(port, res.resource_type, res.resource_name, change, False, request.validate_only)
        except KafkaError as exc:
            out.error_code = int(exc.code)
            out.error_message = exc.message or None
    return R(throttle_time_ms=0, responses=results)


@handles(ApiKey.LIST_CONFIG_RESOURCES, versions=(0, 1))
def list_config_resources(ctx: RequestContext, request: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    """ListConfigResources (74; v0 was ListClientMetricsResources): the resources with configs,
    of the requested types (none: every type; v0: client-metrics subscriptions).  Needs
    DescribeConfigs on the cluster."""
    R = ListConfigResourcesResponse
    if not ctx.authorize_cluster(Operation.DESCRIBE_CONFIGS):
        return R(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    image = ctx.ports.configs.metadata.image
    known = {
        TOPIC: sorted(image.topics),
        BROKER: sorted(str(b) for b in image.brokers),
        BROKER_LOGGER: sorted(str(b) for b in image.brokers),
        CLIENT_METRICS: sorted(image.client_metrics),
        GROUP: ctx.ports.configs.group_configs.groups(),
    }
    types = [CLIENT_METRICS] if ctx.version == 0 else list(dict.fromkeys(request.resource_types)) or list(known)
    if any(t not in known for t in types):
        return R(error_code=int(ErrorCode.UNSUPPORTED_VERSION))
    return R(config_resources=[R.ConfigResource(resource_name=n, resource_type=t) for t in types for n in known[t]])
