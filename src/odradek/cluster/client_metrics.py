"""Client telemetry (KIP-714) as rules: client-metrics subscriptions and pushed metrics.

A subscription is a named config (``odradek configs --entity-type client-metrics``, Kafka's
``kafka-configs.sh`` names): ``metrics`` (metric-name prefixes, ``*`` for all), ``interval.ms``
(how often matching clients push, 100 ms to 1 hour, default 5 minutes) and ``match``
(``client_id=REGEX,client_software_name=REGEX,...``; every pattern must match the whole value;
no ``match``: every client).  A client is told the union of the metrics of the subscriptions it
matches, the shortest of their intervals, and a subscription id: a hash of both with its client
instance id, which its pushes must carry.

A push carries OTLP ``MetricsData`` (opentelemetry-proto), compressed with one of Kafka's codecs.
:func:`decode_push` decompresses it without ever holding more than ``telemetry.max.bytes``
(a bigger one is TELEMETRY_TOO_LARGE, garbage is INVALID_RECORD) and returns its numbers as
:class:`Point` values: sums and gauges as they are, histograms and summaries as ``_count`` and
``_sum``.  No sockets, no clock: the broker's :mod:`odradek.broker.telemetry` keeps the state.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from odradek.errors import ErrorCode, KafkaError
from odradek.records._crc import crc32c
from odradek.records.compression import Compression, decompress
from odradek.records.errors import DecompressionLimitExceeded, RecordsError

__all__ = [
    "ACCEPTED_COMPRESSION",
    "ALL_METRICS",
    "CONFIG_NAMES",
    "INTERVAL_DEFAULT_MS",
    "MATCH_KEYS",
    "ClientInfo",
    "Point",
    "Subscription",
    "decode_push",
    "resolve",
    "sanitize",
    "subscription_id",
    "subscriptions",
    "validate",
]

METRICS, INTERVAL, MATCH = "metrics", "interval.ms", "match"
CONFIG_NAMES = (METRICS, INTERVAL, MATCH)
INTERVAL_DEFAULT_MS = 300_000
INTERVAL_MIN_MS, INTERVAL_MAX_MS = 100, 3_600_000
ALL_METRICS = "*"
#: what a client may match on (Kafka's ClientMetricsConfigs)
MATCH_KEYS = (
    "client_instance_id", "client_id", "client_software_name", "client_software_version",
    "client_source_address", "client_source_port",
)
#: the codecs a client may compress its pushes with, preferred first (Kafka's order)
ACCEPTED_COMPRESSION = (Compression.ZSTD, Compression.LZ4, Compression.GZIP, Compression.SNAPPY)
#: the reserved client instance ids (Kafka's Uuid.RESERVED): never a client's
RESERVED_IDS = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})


def _items(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


def _patterns(entries: Iterable[str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    out = []
    for entry in entries:
        key, sep, regex = entry.partition("=")
        key, regex = key.strip(), regex.strip()
        if not sep or key not in MATCH_KEYS or not regex:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {entry}")
        try:
            out.append((key, re.compile(regex)))
        except (re.error, RecursionError, OverflowError):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal regex pattern for {key}: {regex}") from None
    return tuple(out)


def validate(name: str, configs: Mapping[str, str]) -> None:
    """Kafka's checks of a subscription's config (ClientMetricsConfigs.validate): a known name
    (INVALID_REQUEST otherwise), an interval in range and well-formed match patterns
    (INVALID_CONFIG)."""
    if not name.strip():
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    unknown = sorted(k for k in configs if k not in CONFIG_NAMES)
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {unknown}")
    if INTERVAL in configs:
        try:
            interval = int(configs[INTERVAL])
        except ValueError:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Invalid value {configs[INTERVAL]} for configuration interval.ms"
            ) from None
        if not INTERVAL_MIN_MS <= interval <= INTERVAL_MAX_MS:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {interval} for interval.ms, interval must be between 100 and 3600000 (1 hour)",
            )
    _patterns(_items(configs.get(MATCH)))


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]


def subscriptions(stored: Mapping[str, Mapping[str, str]]) -> list[Subscription]:
    """The stored subscriptions (name -> config), in name order; an invalid one (written around
    the checks) is left out."""
    out = []
    for name, configs in sorted(stored.items()):
        try:
            validate(name, configs)
        except KafkaError:
            continue
        interval = int(configs.get(INTERVAL, INTERVAL_DEFAULT_MS))
        match = _patterns(_items(configs.get(MATCH)))
        out.append(Subscription(name, tuple(_items(configs.get(METRICS))), interval, match))
    return out


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What a subscription's ``match`` is tested against."""

    client_instance_id: str
    client_id: str
    client_software_name: str
    client_software_version: str
    client_source_address: str
    client_source_port: str

    def matches(self, subscription: Subscription) -> bool:
        return all(pattern.fullmatch(getattr(self, key)) is not None for key, pattern in subscription.match)


def resolve(subs: Iterable[Subscription], client: ClientInfo) -> tuple[tuple[str, ...], int]:
    """The metrics (sorted; ``("*",)`` when a subscription wants all) and the push interval of
    the subscriptions ``client`` matches (none: no metrics, the default interval)."""
    metrics: set[str] = set()
    interval = INTERVAL_DEFAULT_MS
    for sub in subs:
        if client.matches(sub):
            metrics.update(sub.metrics)
            interval = min(interval, sub.interval_ms)
    if ALL_METRICS in metrics:
        return (ALL_METRICS,), interval
    return tuple(sorted(metrics)), interval


def subscription_id(metrics: Iterable[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    """The id a client's pushes carry: a CRC32C of its metrics and interval, XORed with a hash of
    its instance id (as Kafka computes it), as a signed 32-bit int."""
    crc = crc32c(f"[{', '.join(metrics)}]{interval_ms}".encode())
    hilo = (instance_id.int >> 64) ^ (instance_id.int & (2**64 - 1))
    value = (crc ^ (hilo >> 32) ^ hilo) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


_NAME_BAD = re.compile(r"[^a-zA-Z0-9_]")


def sanitize(name: str) -> str:
    """A Prometheus metric or label name from an OTLP one (``org.apache.kafka.producer.x``:
    ``org_apache_kafka_producer_x``)."""
    out = _NAME_BAD.sub("_", name)
    return f"_{out}" if out[:1].isdigit() else out


@dataclass(frozen=True, slots=True)
class Point:
    """One number of a push: the metric (sanitized), its attributes, its value, and whether it
    is a monotonic sum (a counter) rather than a gauge."""

    name: str
    value: float
    counter: bool = False
    labels: tuple[tuple[str, str], ...] = field(default=())


#: the most attributes kept of one data point, the longest label value and metric name kept (a
#: longer value is cut, a metric with a longer name is left out): a series' size is bounded
MAX_LABELS = 8
_LABEL_VALUE_MAX = 128
MAX_NAME = 200


def _any_value(v: object) -> str:
    for kind in ("string_value", "int_value", "double_value", "bool_value"):
        if v.HasField(kind):  # type: ignore[attr-defined]
            return str(getattr(v, kind))[:_LABEL_VALUE_MAX]
    return ""


def _labels(attributes: Iterable[object]) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for kv in attributes:
        key = sanitize(kv.key[:MAX_NAME]).lstrip("_")  # type: ignore[attr-defined]  # __*: Prometheus' own
        if key and key not in out and len(out) < MAX_LABELS:
            out[key] = _any_value(kv.value)  # type: ignore[attr-defined]
    return tuple(sorted(out.items()))


def _number(dp: object) -> float:
    if dp.HasField("as_double"):  # type: ignore[attr-defined]
        return float(dp.as_double)  # type: ignore[attr-defined]
    return float(dp.as_int)  # type: ignore[attr-defined]


def decode_push(payload: bytes, compression: int, max_bytes: int) -> list[Point]:
    """The numbers of one push; raises KafkaError TELEMETRY_TOO_LARGE when the payload is, or
    decompresses to, more than ``max_bytes`` (decompression stops there), INVALID_RECORD when it
    cannot be decompressed or is not OTLP MetricsData, UNSUPPORTED_COMPRESSION_TYPE for a codec
    Kafka does not know."""
    if compression not in Compression._value2member_map_:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Unknown compression type [{compression}]")
    if len(payload) > max_bytes:
        raise KafkaError(ErrorCode.TELEMETRY_TOO_LARGE, f"telemetry is larger than {max_bytes} bytes")
    try:
        data = decompress(compression, payload, max_size=max_bytes)
    except DecompressionLimitExceeded:
        raise KafkaError(
            ErrorCode.TELEMETRY_TOO_LARGE, f"telemetry decompresses to more than {max_bytes} bytes"
        ) from None
    except RecordsError as exc:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"cannot decompress telemetry: {exc}") from None
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    try:
        metrics_data = MetricsData.FromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"telemetry is not OTLP metrics: {exc}") from None
    out: list[Point] = []
    for rm in metrics_data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                name = sanitize(metric.name)
                if not name or len(name) > MAX_NAME:
                    continue
                kind = metric.WhichOneof("data")
                if kind == "gauge":
                    out += [Point(name, _number(dp), False, _labels(dp.attributes)) for dp in metric.gauge.data_points]
                elif kind == "sum":
                    counter = metric.sum.is_monotonic
                    out += [Point(name, _number(dp), counter, _labels(dp.attributes)) for dp in metric.sum.data_points]
                elif kind in ("histogram", "exponential_histogram", "summary"):
                    for dp in getattr(metric, kind).data_points:
                        labels = _labels(dp.attributes)
                        out.append(Point(f"{name}_count", float(dp.count), True, labels))
                        out.append(Point(f"{name}_sum", float(dp.sum), True, labels))
    return out
