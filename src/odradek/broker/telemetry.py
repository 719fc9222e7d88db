"""The broker's client-telemetry receiver (KIP-714): client instances, their subscriptions and
the metrics they pushed, shown on ``/metrics`` as ``kafka_client_<metric>{client_instance_id,
client_id, ...}``.

Kafka's ClientMetricsManager rules, on the broker's scheduler: GetTelemetrySubscriptions gives
a client (a new instance id when it sends zero) the subscriptions it matches
(:mod:`odradek.cluster.client_metrics`); asking again before its push interval passed is
THROTTLING_QUOTA_EXCEEDED unless its last push failed on the subscription id or the codec. A push
must carry the instance's current subscription id (UNKNOWN_SUBSCRIPTION_ID: the client fetches
the subscription again), must not come before the interval (THROTTLING_QUOTA_EXCEEDED) unless
it is the first after a fetch or a terminating one, and nothing is taken after a terminating
push (INVALID_REQUEST).  A changed subscription re-evaluates each instance at its next request.

Bounded against a client that floods it: at most :data:`MAX_CLIENTS` instances (the least
recently seen goes), :data:`MAX_SERIES_PER_CLIENT` series per instance and :data:`MAX_SERIES`
in all (points beyond are dropped and counted); an instance that stops asking is forgotten,
with its series, after three push intervals (at least a minute).
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.cluster.client_metrics import (
    ACCEPTED_COMPRESSION,
    RESERVED_IDS,
    ClientInfo,
    Point,
    Subscription,
    decode_push,
    resolve,
    subscription_id,
    subscriptions,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import counter, gauge
from odradek.records.compression import Compression

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from odradek._scheduler import Scheduler, TimerHandle

log = logging.getLogger(__name__)

__all__ = ["MAX_CLIENTS", "MAX_SERIES", "MAX_SERIES_PER_CLIENT", "ClientTelemetry", "Granted"]

MAX_CLIENTS = 4096
MAX_SERIES_PER_CLIENT = 1000
MAX_SERIES = 20_000
#: an instance is forgotten this long after its last request, at least (Kafka's cache expiry)
EXPIRY_MIN_MS = 60_000
PREFIX = "kafka_client_"


@dataclass(frozen=True, slots=True)
class Granted:
    """GetTelemetrySubscriptions' answer."""

    client_instance_id: uuid.UUID
    subscription_id: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    accepted_compression: tuple[int, ...]


@dataclass(slots=True)
class _Instance:
    info: ClientInfo
    subscription_id: int
    metrics: tuple[str, ...]
    interval_ms: int
    version: int
    last_get: int | None = None
    last_push: int | None = None
    terminating: bool = False
    #: a GetTelemetrySubscriptions came since the last push: the next push is taken at once
    fetched: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    expiry: TimerHandle | None = None
    #: (metric, labels) -> value
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)


class ClientTelemetry:
    def __init__(
        self,
        scheduler: Scheduler,
        max_bytes: int,
        stored: Callable[[], Mapping[str, Mapping[str, str]]],
    ) -> None:
        self._scheduler = scheduler
        #: telemetry.max.bytes: the largest push, compressed or not
        self.max_bytes = max_bytes
        self._stored = stored
        self._instances: OrderedDict[uuid.UUID, _Instance] = OrderedDict()
        self._subs_key: object = None
        self._subs: list[Subscription] = []
        self._version = 0
        self._series = 0
        #: counts for /metrics: pushes taken, refused (by error), points dropped at the caps
        self.pushes = 0
        self.refused: dict[str, int] = {}
        self.dropped_points = 0

    # -- subscriptions ------------------------------------------------------------------------

    def _subscriptions(self) -> tuple[list[Subscription], int]:
        stored = self._stored()
        if stored != self._subs_key:
            self._subs_key = {k: dict(v) for k, v in stored.items()}
            self._subs = subscriptions(stored)
            self._version += 1
        return self._subs, self._version

    def _instance(self, instance_id: uuid.UUID, info: ClientInfo) -> _Instance:
        subs, version = self._subscriptions()
        inst = self._instances.get(instance_id)
        if inst is None or inst.version < version:
            metrics, interval = resolve(subs, info)
            sub_id = subscription_id(metrics, interval, instance_id)
            if inst is None:
                inst = _Instance(info, sub_id, metrics, interval, version)
                self._instances[instance_id] = inst
                while len(self._instances) > MAX_CLIENTS:
                    old_id, _old = next(iter(self._instances.items()))
                    self._forget(old_id)
            else:
                inst.subscription_id, inst.metrics, inst.interval_ms, inst.version = sub_id, metrics, interval, version
        self._instances.move_to_end(instance_id)
        if inst.expiry is not None:
            inst.expiry.cancel()
        inst.expiry = self._scheduler.call_later(max(EXPIRY_MIN_MS, 3 * inst.interval_ms), self._expire, instance_id)
        return inst

    def _expire(self, instance_id: uuid.UUID) -> None:
        if instance_id in self._instances:
            log.info("client telemetry: instance %s sent nothing for three push intervals: forgotten", instance_id)
            self._forget(instance_id)

    def _forget(self, instance_id: uuid.UUID) -> None:
        inst = self._instances.pop(instance_id, None)
        if inst is not None:
            self._series -= len(inst.series)
            if inst.expiry is not None:
                inst.expiry.cancel()

    # -- the two requests ---------------------------------------------------------------------

    def get_subscriptions(self, instance_id: uuid.UUID, info: ClientInfo) -> Granted:
        if instance_id in RESERVED_IDS:
            instance_id = uuid.uuid4()
            while instance_id in self._instances:
                instance_id = uuid.uuid4()
        info = _with_id(info, instance_id)
        inst = self._instance(instance_id, info)
        now = self._scheduler.clock.monotonic_ms()
        last = max((t for t in (inst.last_get, inst.last_push) if t is not None), default=None)
        if last is not None and now - last < inst.interval_ms and inst.last_error not in (
            ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        ):
            raise KafkaError(
                ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                f"Request from the client [{instance_id}] arrived before the next push interval time",
            )
        inst.last_get = now
        inst.fetched = True
        inst.last_error = ErrorCode.NONE
        return Granted(instance_id, inst.subscription_id, inst.metrics, inst.interval_ms, tuple(ACCEPTED_COMPRESSION))

    def push(
        self, instance_id: uuid.UUID, info: ClientInfo, sub_id: int, terminating: bool, compression: int, payload: bytes
    ) -> None:
        """Take one push (raises KafkaError with Kafka's code when it is refused)."""
        if instance_id in RESERVED_IDS:
            raise self._refuse(
                KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid request from the client [{instance_id}], "
                           "invalid client instance id")
            )
        inst = self._instance(instance_id, _with_id(info, instance_id))
        try:
            self._check_push(inst, instance_id, sub_id, terminating, compression, len(payload))
            points = decode_push(payload, compression, self.max_bytes) if payload else []
        except KafkaError as exc:
            inst.last_error = exc.code
            raise self._refuse(exc) from None
        finally:
            inst.terminating = inst.terminating or terminating
        inst.last_error = ErrorCode.NONE
        self.pushes += 1
        self._record(inst, points)
        if terminating:
            log.info("client telemetry: instance %s (client id %r) pushed its last metrics",
                     instance_id, inst.info.client_id)

    def _check_push(
        self, inst: _Instance, instance_id: uuid.UUID, sub_id: int, terminating: bool, compression: int, size: int
    ) -> None:
        if inst.terminating:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"Client [{instance_id}] sent the previous request with state terminating to TRUE, can not "
                "accept any requests after that",
            )
        now = self._scheduler.clock.monotonic_ms()
        first_after_get = inst.fetched
        last = max((t for t in (inst.last_get, inst.last_push) if t is not None), default=None)
        if not first_after_get and last is not None and now - last < inst.interval_ms and not terminating:
            raise KafkaError(
                ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                f"Request from the client [{instance_id}] arrived before the next push interval time",
            )
        inst.last_push = now
        inst.fetched = False
        if sub_id != inst.subscription_id:
            raise KafkaError(ErrorCode.UNKNOWN_SUBSCRIPTION_ID, f"Unknown client subscription id for the client [{instance_id}]")
        if compression not in Compression._value2member_map_:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"Unknown compression type [{compression}] is received in telemetry request from [{instance_id}]",
            )
        if size > self.max_bytes:
            raise KafkaError(
                ErrorCode.TELEMETRY_TOO_LARGE,
                f"Telemetry request from [{instance_id}] is larger than the maximum allowed size [{self.max_bytes}]",
            )

    def _refuse(self, exc: KafkaError) -> KafkaError:
        name = exc.code.name
        if name in self.refused or len(self.refused) < 32:
            self.refused[name] = self.refused.get(name, 0) + 1
        return exc

    def _record(self, inst: _Instance, points: list[Point]) -> None:
        series = inst.series
        for p in points:
            key = (p.name, p.labels)
            if key not in series:
                if len(series) >= MAX_SERIES_PER_CLIENT or self._series >= MAX_SERIES:
                    self.dropped_points += 1
                    continue
                self._series += 1
            series[key] = p.value

    # -- /metrics -----------------------------------------------------------------------------

    def families(self) -> list[Metric]:
        """The pushed metrics and the receiver's own counts (called on the loop at each scrape)."""
        by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
        for instance_id, inst in self._instances.items():
            base = {"client_instance_id": str(instance_id), "client_id": inst.info.client_id}
            for (name, labels), value in inst.series.items():
                sample = {**dict(labels), **base}
                by_name.setdefault(PREFIX + name, []).append((sample, value))
        out = [gauge(name, "pushed by clients (KIP-714 telemetry)", samples) for name, samples in sorted(by_name.items())]
        out.append(gauge("odradek_client_telemetry_instances", "Client instances with telemetry state",
                         [({}, len(self._instances))]))
        out.append(gauge("odradek_client_telemetry_series", "Pushed client metric series kept", [({}, self._series)]))
        out.append(counter("odradek_client_telemetry_pushes", "PushTelemetry requests taken", [({}, self.pushes)]))
        out.append(counter("odradek_client_telemetry_refused", "PushTelemetry requests refused, by error",
                           [({"error": k}, v) for k, v in sorted(self.refused.items())]))
        out.append(counter("odradek_client_telemetry_dropped_points",
                           "Pushed points dropped at the series caps", [({}, self.dropped_points)]))
        return out

    def close(self) -> None:
        for instance_id in list(self._instances):
            self._forget(instance_id)


def _with_id(info: ClientInfo, instance_id: uuid.UUID) -> ClientInfo:
    return ClientInfo(
        str(instance_id), info.client_id, info.client_software_name, info.client_software_version,
        info.client_source_address, info.client_source_port,
    )
