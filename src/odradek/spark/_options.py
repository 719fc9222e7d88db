"""The source's and sink's options, with the names and rules of Spark's Kafka source.

Pure parsing and validation (no pyspark, no network), so that mistakes are reported when the
DataFrame is defined, with the messages Spark's Kafka source gives.  Option names are
case-insensitive.  ``kafka.``-prefixed options go to the client with the prefix removed
(``kafka.bootstrap.servers`` -> ``bootstrap.servers``); ``bootstrap.servers`` is accepted
without the prefix too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from odradek.client import (
    ADMIN_DEFAULTS,
    CONSUMER_CONFIGS,
    CONSUMER_DEFAULTS,
    PRODUCER_CONFIGS,
    PRODUCER_DEFAULTS,
)
from odradek.config import ConfigDef, nearest_name, unknown_name_message

from ._typed import TypedOptions, parse_typed_options

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "SinkOptions",
    "SourceOptions",
    "is_offline",
    "parse_offsets_json",
    "parse_sink_options",
    "parse_source_options",
]

log = logging.getLogger(__name__)

LATEST, EARLIEST = -1, -2
TopicPartition = tuple[str, int]

_STRATEGIES = ("subscribe", "subscribepattern", "assign")
_STRATEGY_NAMES = "subscribe, subscribePattern, assign"
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
#: Default bytes per partition per fetch on the executors (Kafka's default is 1 MiB; larger
#: fetches halve the per-request overhead of a scan).
DEFAULT_FETCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``kind`` is ``earliest``, ``latest``, ``offsets`` (per partition,
    -2 earliest / -1 latest), ``timestamp`` (one timestamp for every partition) or
    ``timestamps`` (per partition)."""

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = -1


@dataclass(frozen=True)
class SourceOptions:
    """A read's options, parsed and checked: the client configs from ``kafka.*``, the subscription, the offset
    options, the trigger limits and the typed-column options."""

    consumer_config: dict[str, Any]
    admin_config: dict[str, Any]
    strategy: str  # subscribe | subscribepattern | assign | all (the offline read without one)
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assignment: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    no_match_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None  # with max_trigger_delay_ms: Spark's delayed batches
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120000
    fetch_bytes: int = DEFAULT_FETCH_BYTES
    isolation_level: str = "read_uncommitted"
    #: keyFormat / valueFormat and the schema registry (:mod:`odradek.spark._typed`)
    typed: TypedOptions = field(default_factory=TypedOptions)
    #: ``source``: ``log`` or ``table+tail`` (:mod:`odradek.spark._table_tail`)
    source: str = "log"
    #: table+tail: the ``odradek.iceberg.*`` options given (the catalog; the rest from the broker)
    iceberg: dict[str, str] = field(default_factory=dict)

    def matches(self, topic: str) -> bool:
        """Whether ``subscribePattern`` matches all of ``topic``."""
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class SinkOptions:
    """A write's options, parsed and checked: the producer config from ``kafka.*``, the
    ``topic``, exactly-once and the typed-column options."""

    producer_config: dict[str, Any]
    topic: str | None
    #: the exactly-once streaming sink (option ``exactlyOnce``): transactions per task
    exactly_once: bool = False
    #: its transactional ids are ``<prefix>-<Spark partition>``
    transactional_id_prefix: str | None = None
    #: keyFormat / valueFormat, autoRegister and the schema registry
    typed: TypedOptions = field(default_factory=TypedOptions)


_O = ConfigDef
_TYPED_ROWS = (
    _O("keyFormat", "string", "binary",
       doc="the key as a struct column: avro, json or protobuf (read only) (Confluent-framed, schema of subject <topic>-key)",
       valid=("binary", "avro", "json", "protobuf")),
    _O("valueFormat", "string", "binary", doc="the value as a struct column: avro, json or protobuf (read only) (subject <topic>-value)",
       valid=("binary", "avro", "json", "protobuf")),
    _O("schema.registry.url", "string", None, doc="the schema registry of keyFormat / valueFormat (default: the brokers' own, from their schema.registry.listeners)"),
    _O("schema.registry.basic.auth.user.info", "password", None, doc="user:password for the registry's HTTP Basic authentication"),
)
#: The source's own options (Spark's Kafka source's names), as rows of the same kind as the
#: broker's and the clients' configs (type, default, documentation, valid values); their values
#: are parsed by parse_source_options, with Spark's messages.
SOURCE_OPTION_ROWS = (
    _O("subscribe", "list", None, doc="the topics to read (one of subscribe, subscribePattern, assign)"),
    _O("subscribePattern", "string", None, doc="a regular expression of the topics to read"),
    _O("assign", "string", None, doc='the partitions to read, as JSON: {"topicA":[0,1]}'),
    _O("startingOffsets", "string", None, doc="earliest, latest (streaming's default) or JSON offsets per partition"),
    _O("endingOffsets", "string", "latest", doc="batch queries: latest or JSON offsets per partition"),
    _O("startingTimestamp", "long", None, doc="start at the first record at or after this time, every partition"),
    _O("endingTimestamp", "long", None, doc="batch queries: end at this time, every partition"),
    _O("startingOffsetsByTimestamp", "string", None, doc="JSON start timestamps per partition"),
    _O("endingOffsetsByTimestamp", "string", None, doc="JSON end timestamps per partition"),
    _O("startingOffsetsByTimestampStrategy", "string", "error",
       doc="a partition without a record at the timestamp: fail, or start at its end", valid=("error", "latest")),
    _O("failOnDataLoss", "boolean", True, doc="fail when records between two micro-batches are gone"),
    _O("includeHeaders", "boolean", False, doc="a headers column"),
    _O("maxOffsetsPerTrigger", "long", None, doc="streaming: the most records one micro-batch reads"),
    _O("minOffsetsPerTrigger", "long", None, doc="streaming: the fewest records that start a micro-batch"),
    _O("maxTriggerDelay", "string", "15m", doc="streaming: the longest a micro-batch waits for minOffsetsPerTrigger"),
    _O("minPartitions", "int", None, doc="split partitions to make at least this many Spark partitions"),
    _O("maxRecordsPerPartition", "long", None, doc="split partitions so that none holds more records"),
    _O("kafkaConsumer.pollTimeoutMs", "long", 120000, doc="how long an executor's fetch may wait"),
    _O("fetchOffset.numRetries", "int", 3, doc="accepted for Spark's Kafka source's options, not used"),
    _O("fetchOffset.retryIntervalMs", "long", 10, doc="accepted for Spark's Kafka source's options, not used"),
    _O("groupIdPrefix", "string", None, doc="accepted for Spark's Kafka source's options, not used"),
    _O("logDirs", "list", None, doc="read segment files from these log dirs, no broker (the offline read)"),
    _O("stopAtCorruption", "boolean", False, doc="offline read: stop at a damaged batch instead of failing"),
    _O("readPastRecoveryPoint", "boolean", False, doc="offline read: also read what was not flushed"),
    _O("maxBytesPerPartition", "long", None, doc="offline read: split partitions into Spark partitions of this size"),
    *_TYPED_ROWS,
    _O("mode", "string", "FAILFAST", doc="a typed key or value that cannot be decoded: fail the query, or null and the corrupt-record column",
       valid=("FAILFAST", "PERMISSIVE")),
    _O("columnNameOfCorruptRecord", "string", "_corrupt_record", doc="PERMISSIVE: the column of the undecodable record's value bytes"),
    _O("source", "string", "log", doc="batch reads: the log, or table+tail: the topic's Iceberg table for what it holds, the log for the rest",
       valid=("log", "table+tail")),
    _O("odradek.iceberg.catalog.type", "string", None, doc="table+tail: sql or rest (default: the broker's setting)",
       valid=("sql", "rest")),
    _O("odradek.iceberg.catalog.uri", "string", None,
       doc="table+tail: the catalog's database URL or REST URL (default: the broker's, or its SQLite file under its first data dir)"),
    _O("odradek.iceberg.warehouse", "string", None, doc="table+tail: the tables' files (default: the broker's setting)"),
    _O("odradek.iceberg.namespace", "string", None, doc="table+tail: the tables' namespace (default: the broker's setting, odradek)"),
)
#: the sink's own options
SINK_OPTION_ROWS = (
    _O("topic", "string", None, doc="the topic to write to (else each row's topic column)"),
    _O("exactlyOnce", "boolean", False, doc="streaming: one transaction per task and micro-batch"),
    _O("transactionalIdPrefix", "string", None, doc="exactlyOnce: the prefix of the tasks' transactional ids"),
    *_TYPED_ROWS,
    _O("autoRegister", "boolean", False, doc="typed columns: register the schema derived from the struct type (else the subject's latest)"),
)
#: options Spark itself may pass along with the source's and the sink's
SPARK_OPTION_ROWS = (
    _O("path", "string", None, doc="the offline read's log dir (a load(path))"),
    _O("checkpointLocation", "string", None, doc="the query's checkpoint"),
    _O("queryName", "string", None, doc="the query's name"),
)
#: The names: anything else is either a typo of one of these (an error naming it) or left alone
#: (Spark's Kafka source ignores options it does not know).
SOURCE_OPTIONS = tuple(r.name for r in SOURCE_OPTION_ROWS)
#: options of the offline read (segment files, no broker: ``path`` or ``logDirs``) only
OFFLINE_OPTIONS = ("stopAtCorruption", "readPastRecoveryPoint", "maxBytesPerPartition")
#: the catalog options of the table + tail read (the broker's settings' names)
CATALOG_OPTIONS = ("odradek.iceberg.catalog.type", "odradek.iceberg.catalog.uri", "odradek.iceberg.warehouse",
                   "odradek.iceberg.namespace")
TABLE_TAIL = "table+tail"
SINK_OPTIONS = tuple(r.name for r in SINK_OPTION_ROWS)
SPARK_OPTIONS = tuple(r.name for r in SPARK_OPTION_ROWS)
#: Kafka client options that Spark's Kafka source and sink accept and handle themselves
_IGNORED_KAFKA_OPTIONS = ("group.id", "key.serializer", "value.serializer", "key.deserializer", "value.deserializer")


def _check_names(opts: Mapping[str, str], known: tuple[str, ...], client: Mapping[str, Any], what: str) -> None:
    """A misspelt option (close to a known one, or a ``kafka.*`` option close to a client config)
    is an error naming the one meant."""
    valid = {k.lower() for k in known + SPARK_OPTIONS}
    any_client = {k.lower() for d in (CONSUMER_DEFAULTS, PRODUCER_DEFAULTS, ADMIN_DEFAULTS) for k in d}
    for key in opts:
        if key.startswith("kafka.") or key == "bootstrap.servers":
            name = key.removeprefix("kafka.")
            if name in any_client or name in _IGNORED_KAFKA_OPTIONS:
                continue
            near = nearest_name(name, client, ignore_case=True)
            if near is not None:
                raise ValueError(unknown_name_message("Kafka option", key, [f"kafka.{near}"]))
        elif key not in valid and nearest_name(key, known, ignore_case=True) is not None:
            raise ValueError(unknown_name_message(f"{what} option", key, known, ignore_case=True))


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _client_config(opts: Mapping[str, str], rows: tuple[ConfigDef, ...], what: str) -> dict[str, Any]:
    """``kafka.*`` options (and a bare ``bootstrap.servers``) that the client knows, each parsed
    by its row's type."""
    out: dict[str, Any] = {}
    by_name = {r.name: r for r in rows}
    known = {k.lower(): k for k in by_name}
    for key, value in opts.items():
        if key.startswith("kafka."):
            name = key[len("kafka.") :]
        elif key == "bootstrap.servers":
            name = key
        else:
            continue
        if name in known:
            out[known[name]] = _coerce(value, by_name[known[name]])
        elif name not in _IGNORED_KAFKA_OPTIONS:
            log.warning("Kafka option '%s' is not used by the %s", name, what)
    return out


def _coerce(value: str, row: ConfigDef) -> Any:
    """A client option's text as its row's type: true/false for a boolean, a number for an
    integer (text that is not one is left for the client to refuse); anything else as given."""
    if row.type == "boolean":
        return _bool(value, "kafka option")
    if row.type in ("int", "short", "long"):
        try:
            return int(value)
        except ValueError:
            return value
    return value


def _bool(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ValueError(f"Option '{name}' must be true or false, not {value!r}")


def _positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key].strip())
    except ValueError:
        raise ValueError(f"Option '{name}' must be an integer, not {opts[key]!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive")
    return value


_DURATION = re.compile(r"(?i)\s*(\d+)\s*(ms|s|m|min|h|d|us)?\s*")
_DURATION_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str, name: str) -> int:
    """Spark's time strings (``15m``, ``30s``, ``500ms``; a bare number is milliseconds, as
    Spark's ``timeStringAsMs`` reads it) in milliseconds."""
    m = _DURATION.fullmatch(str(text))
    if m is None:
        raise ValueError(f"Option '{name}' must be a duration such as '15m', '30s' or '500ms', not {text!r}")
    unit = m.group(2).lower() if m.group(2) else None
    return int(int(m.group(1)) * _DURATION_MS[unit])


def parse_offsets_json(text: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23, "1": -1}}`` -> ``{("topic", 0): 23, ("topic", 1): -1}``."""
    try:
        data = json.loads(text)
        out: dict[TopicPartition, int] = {}
        for topic, parts in data.items():
            for p, off in parts.items():
                if isinstance(off, bool) or not isinstance(off, int):
                    raise TypeError(off)
                out[(str(topic), int(p))] = off
        return out
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"Expected e.g. {_OFFSETS_EXAMPLE}, got {text}") from None


def _parse_timestamps_json(text: str) -> dict[TopicPartition, int]:
    try:
        return parse_offsets_json(text)
    except ValueError:
        raise ValueError(f"Expected e.g. {_TIMESTAMPS_EXAMPLE}, got {text}") from None


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    if not text.strip().startswith("{"):
        raise ValueError(f"No topicpartitions to assign as specified value for option 'assign' is '{text}'")
    try:
        data = json.loads(text)
        out = []
        for topic, parts in data.items():
            for p in parts:
                if isinstance(p, bool) or not isinstance(p, int):
                    raise TypeError(p)
                out.append((str(topic), p))
        return tuple(sorted(set(out)))
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"Expected e.g. {_ASSIGN_EXAMPLE}, got {text}") from None


def _offset_spec(
    opts: Mapping[str, str], ts_key: str, by_ts_key: str, offsets_key: str, default: str
) -> OffsetSpec:
    """Spark's order of preference: a global timestamp, timestamps per partition, offsets."""
    if ts_key in opts:
        text = opts[ts_key].strip()
        try:
            return OffsetSpec("timestamp", timestamp=int(text))
        except ValueError:
            raise ValueError(f"Expected a single long value, got {text}") from None
    if by_ts_key in opts:
        return OffsetSpec("timestamps", offsets=_parse_timestamps_json(opts[by_ts_key].strip()))
    if offsets_key in opts:
        text = opts[offsets_key].strip()
        if text.lower() in ("earliest", "latest"):
            return OffsetSpec(text.lower())
        return OffsetSpec("offsets", offsets=parse_offsets_json(text))
    return OffsetSpec(default)


def is_offline(options: Mapping[str, Any]) -> bool:
    """Whether the options ask for the offline read: segment files from ``path`` or ``logDirs``."""
    return any(str(k).lower() in ("path", "logdirs") and v is not None for k, v in options.items())


def parse_source_options(options: Mapping[str, Any], *, streaming: bool | None, offline: bool = False) -> SourceOptions:
    """Validate the reader options of a batch (``streaming=False``) or streaming query
    (``streaming=None``: only the rules common to both).  ``offline``: the options of the
    offline read (:mod:`odradek.spark._offline`), which takes no broker address and reads every
    partition found when no ``subscribe`` / ``subscribePattern`` / ``assign`` is given
    (strategy ``"all"``)."""
    opts = _lower(options)
    _check_names(opts, SOURCE_OPTIONS, CONSUMER_DEFAULTS, "odradek source")
    if not offline:
        for name in OFFLINE_OPTIONS:
            if name.lower() in opts:
                raise ValueError(
                    f"Option '{name}' is an option of the offline read, which reads segment files "
                    "(option 'path' or 'logDirs') instead of a broker"
                )
    strategies = [k for k in _STRATEGIES if k in opts]
    if offline and not strategies:
        strategies = ["all"]
    if not strategies:
        raise ValueError(
            f"One of the following options must be specified for Kafka source: {_STRATEGY_NAMES}. "
            "See the docs for more details."
        )
    if len(strategies) > 1:
        raise ValueError(
            f"Only one of the following options can be specified for Kafka source: {_STRATEGY_NAMES}. "
            "See the docs for more details."
        )
    strategy = strategies[0]
    topics: tuple[str, ...] = ()
    pattern = ""
    assignment: tuple[TopicPartition, ...] = ()
    if strategy == "subscribe":
        value = opts["subscribe"]
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise ValueError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
    elif strategy == "subscribepattern":
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise ValueError(
                f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{opts['subscribepattern']}'"
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"Invalid subscribePattern {pattern!r}: {exc}") from None
    elif strategy == "assign":
        assignment = _parse_assign(opts["assign"])

    if "kafka.auto.offset.reset" in opts:
        raise ValueError(
            "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
            "'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured Streaming "
            "manages which offsets are consumed internally, rather than relying on the kafkaConsumer to do "
            "it. This will ensure that no data is missed when new topics/partitions are dynamically "
            "subscribed. Note that 'startingOffsets' only applies when a new Streaming query is started, "
            "and that resuming will always pick up from where the query left off. See the docs for more details."
        )
    for name, what in (("key.deserializer", "keys"), ("value.deserializer", "values")):
        if f"kafka.{name}" in opts:
            raise ValueError(
                f"Kafka option '{name}' is not supported as {what} are deserialized as byte arrays with "
                f"ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the {what}."
            )
    for name in ("enable.auto.commit", "interceptor.classes"):
        if f"kafka.{name}" in opts:
            raise ValueError(f"Kafka option '{name}' is not supported")
    if offline:
        if "kafka.bootstrap.servers" in opts or "bootstrap.servers" in opts:
            raise ValueError(
                "Options 'path' and 'logDirs' read segment files without a broker: "
                "do not give 'kafka.bootstrap.servers' with them"
            )
    elif "kafka.bootstrap.servers" not in opts and "bootstrap.servers" not in opts:
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    typed = parse_typed_options(opts)
    if offline and typed.typed:
        raise ValueError("keyFormat / valueFormat are for reads from a broker (with its schema registry), not the offline read")
    max_offsets = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_offsets = _positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    max_trigger_delay_ms = _duration_ms(opts.get("maxtriggerdelay", "15m"), "maxTriggerDelay")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise ValueError(
            f"The value of minOffsetPerTrigger({min_offsets}) is higher than the maxOffsetsPerTrigger({max_offsets})"
        )

    min_partitions = _positive(opts, "minpartitions", "minPartitions")
    max_records = _positive(opts, "maxrecordsperpartition", "maxRecordsPerPartition")
    strategy_on_no_match = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_on_no_match not in ("error", "latest"):
        raise ValueError(
            f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', not {opts['startingoffsetsbytimestampstrategy']!r}"
        )

    starting = _offset_spec(
        opts,
        "startingtimestamp",
        "startingoffsetsbytimestamp",
        "startingoffsets",
        "latest" if streaming else "earliest",
    )
    ending = OffsetSpec("latest")
    if streaming is None:
        pass
    elif streaming:
        if "endingoffsets" in opts:
            raise ValueError("ending offset not valid in streaming queries")
        if "endingoffsetsbytimestamp" in opts or "endingtimestamp" in opts:
            raise ValueError("ending timestamp not valid in streaming queries")
    else:
        ending = _offset_spec(opts, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", "latest")
        if starting.kind == "latest":
            raise ValueError("starting offset can't be latest for batch queries on Kafka")
        if starting.kind == "offsets":
            for (t, p), off in starting.offsets.items():
                if off == LATEST:
                    raise ValueError(
                        f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka"
                    )
        if ending.kind == "earliest":
            raise ValueError("ending offset can't be earliest for batch queries on Kafka")
        if ending.kind == "offsets":
            for (t, p), off in ending.offsets.items():
                if off == EARLIEST:
                    raise ValueError(
                        f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka"
                    )
        if starting.kind == ending.kind and starting.kind in ("offsets", "timestamps"):
            if set(starting.offsets) != set(ending.offsets):
                raise ValueError(
                    "The topic-partitions of the starting and ending offsets differ: "
                    f"{_tps(starting.offsets)} vs {_tps(ending.offsets)}"
                )
            for tp, s in starting.offsets.items():
                e = ending.offsets[tp]
                if s >= 0 and e >= 0 and s > e:
                    what = "offset" if starting.kind == "offsets" else "timestamp"
                    raise ValueError(
                        f"The starting {what} ({s}) is greater than the ending {what} ({e}) for {tp[0]}-{tp[1]}"
                    )
        for key, name in (
            ("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
            ("minoffsetspertrigger", "minOffsetsPerTrigger"),
            ("maxtriggerdelay", "maxTriggerDelay"),
        ):
            if key in opts:
                log.warning("%s option ignored in batch queries", name)

    consumer = _client_config(opts, CONSUMER_CONFIGS, "odradek source")
    if "bootstrap.servers" not in consumer and not offline:
        consumer["bootstrap.servers"] = opts.get("kafka.bootstrap.servers", opts.get("bootstrap.servers"))
    source, iceberg = _table_tail_options(opts, streaming=streaming, offline=offline, typed=typed.typed)
    isolation = str(consumer.get("isolation.level", "read_committed" if source == TABLE_TAIL else "read_uncommitted")).lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise ValueError(
            f"kafka.isolation.level must be read_uncommitted or read_committed, not {isolation!r}"
        )
    if source == TABLE_TAIL and isolation != "read_committed":
        raise ValueError(
            "source=table+tail returns committed records only (the table holds what read_committed sees): "
            "kafka.isolation.level=read_uncommitted cannot be used with it"
        )
    consumer["isolation.level"] = isolation
    admin = {k: v for k, v in consumer.items() if k in ADMIN_DEFAULTS}
    fetch_bytes = int(consumer.get("max.partition.fetch.bytes", DEFAULT_FETCH_BYTES))
    poll_timeout = opts.get("kafkaconsumer.polltimeoutms", "120000")
    try:
        poll_timeout_ms = int(poll_timeout)
    except ValueError:
        raise ValueError(
            f"Option 'kafkaConsumer.pollTimeoutMs' must be an integer, not {poll_timeout!r}"
        ) from None
    return SourceOptions(
        consumer_config=consumer,
        admin_config=admin,
        strategy=strategy,
        topics=topics,
        pattern=pattern,
        assignment=assignment,
        starting=starting,
        ending=ending,
        no_match_latest=strategy_on_no_match == "latest",
        fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
        include_headers=_bool(opts.get("includeheaders", "false"), "includeHeaders"),
        max_offsets_per_trigger=max_offsets if streaming is not False else None,
        min_offsets_per_trigger=min_offsets if streaming is not False else None,
        max_trigger_delay_ms=max_trigger_delay_ms,
        min_partitions=min_partitions,
        max_records_per_partition=max_records,
        poll_timeout_ms=poll_timeout_ms,
        fetch_bytes=fetch_bytes,
        isolation_level=isolation,
        typed=typed,
        source=source,
        iceberg=iceberg,
    )


def _table_tail_options(
    opts: Mapping[str, str], *, streaming: bool | None, offline: bool, typed: bool
) -> tuple[str, dict[str, str]]:
    """``source`` and the catalog options, checked against the rest of the read's options."""
    source = opts.get("source", "log").strip().lower()
    if source not in ("log", TABLE_TAIL):
        raise ValueError(
            f"Option 'source' must be 'log' (the default: the topic's log) or '{TABLE_TAIL}' (the topic's Iceberg "
            f"table for what it holds, the log for the rest), not {opts['source']!r}"
        )
    iceberg = {name: opts[name.lower()].strip() for name in CATALOG_OPTIONS if name.lower() in opts}
    if source != TABLE_TAIL:
        if iceberg:
            raise ValueError(f"Options {', '.join(sorted(iceberg))} name the Iceberg catalog of source={TABLE_TAIL}: give that option too")
        return source, iceberg
    kind = iceberg.get("odradek.iceberg.catalog.type")
    if kind is not None:
        kind = iceberg["odradek.iceberg.catalog.type"] = kind.lower()
        if kind not in ("sql", "rest"):
            raise ValueError(f"Option 'odradek.iceberg.catalog.type' must be sql or rest, not {kind!r}")
        if kind == "rest" and "odradek.iceberg.catalog.uri" not in iceberg:
            raise ValueError("odradek.iceberg.catalog.type=rest needs odradek.iceberg.catalog.uri (the REST catalog's URL)")
    if offline:
        raise ValueError(f"source={TABLE_TAIL} reads the topic's table and its log through a broker, not segment files ('path', 'logDirs')")
    if streaming:
        raise ValueError(
            f"source={TABLE_TAIL} is a batch read (spark.read): a streaming query reads the log "
            "(start it at the ending offsets of a table+tail read to go on from there)"
        )
    for key, name in (("startingtimestamp", "startingTimestamp"), ("startingoffsetsbytimestamp", "startingOffsetsByTimestamp"),
                      ("endingtimestamp", "endingTimestamp"), ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp")):
        if key in opts:
            raise ValueError(f"Option '{name}' is not supported with source={TABLE_TAIL}: give offsets (startingOffsets, endingOffsets)")
    if typed:
        raise ValueError(f"keyFormat / valueFormat are not supported with source={TABLE_TAIL} yet: decode the binary columns")
    return source, iceberg


def _tps(offsets: Mapping[TopicPartition, int]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(offsets))


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Validate the writer options."""
    opts = _lower(options)
    return replace(_parse_sink_options(opts), typed=parse_typed_options(opts, sink=True))


def _parse_sink_options(opts: Mapping[str, str]) -> SinkOptions:
    _check_names(opts, SINK_OPTIONS, PRODUCER_DEFAULTS, "odradek sink")
    for name in ("key.serializer", "value.serializer"):
        if f"kafka.{name}" in opts:
            raise ValueError(
                f"Kafka option '{name}' is not supported as keys and values are serialized as byte arrays "
                "with ByteArraySerializer. Use DataFrame operations to explicitly serialize them into strings "
                "or byte arrays."
            )
    if "kafka.bootstrap.servers" not in opts and "bootstrap.servers" not in opts:
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer")
    producer = _client_config(opts, PRODUCER_CONFIGS, "odradek sink")
    if "bootstrap.servers" not in producer:
        producer["bootstrap.servers"] = opts.get("kafka.bootstrap.servers", opts.get("bootstrap.servers"))
    topic = opts.get("topic")
    topic = topic.strip() if topic is not None else None
    exactly_once = _bool(opts.get("exactlyonce", "false"), "exactlyOnce")
    prefix = opts.get("transactionalidprefix")
    if not exactly_once:
        if prefix is not None:
            raise ValueError("Option 'transactionalIdPrefix' needs exactlyOnce=true")
        return SinkOptions(producer_config=producer, topic=topic)
    if "transactional.id" in producer:
        raise ValueError(
            "Option 'kafka.transactional.id' cannot be used with exactlyOnce: each task has its own "
            "transactional id; set 'transactionalIdPrefix' instead"
        )
    if not topic:
        raise ValueError(
            "exactlyOnce needs the 'topic' option: every transaction commits its micro-batch marker as an "
            "offset of partition 0 of that topic"
        )
    if prefix is None:
        checkpoint = opts.get("checkpointlocation")
        if not checkpoint:
            raise ValueError(
                "exactlyOnce needs 'transactionalIdPrefix' (unique to this query, the same across its "
                "restarts) or the 'checkpointLocation' option to derive one from"
            )
        prefix = "odradek-spark-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    elif not prefix.strip():
        raise ValueError("Option 'transactionalIdPrefix' must not be empty")
    return SinkOptions(producer_config=producer, topic=topic, exactly_once=True, transactional_id_prefix=prefix.strip())
