"""Client quotas: the broker's sensors, charged per request (never per record).

The quotas themselves live in the metadata image (``client_quotas``, kept by the metadata backend:
ZooKeeper's ``/config/users|clients`` or the embedded store); :meth:`QuotaManager.on_image` rebuilds
the per-kind indexes when they change, keeping the sensors (a changed bound applies to the rate
already measured, as in Kafka).  The network layer asks for a throttle time after each produce
(charged by request size), client fetch (by response size) and, with ``request_percentage``
quotas, every request (by the time its handler held the event loop); it sets the response's
``throttle_time_ms`` and mutes the connection for that long (KIP-219).  With no quota configured
:attr:`QuotaManager.active` is False and nothing is looked up or recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from odradek.cluster.metadata import MetadataImage
from odradek.config import BrokerConfig
from odradek.security.quota import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaIndex,
    Resolved,
    Sensor,
    sanitize,
)
from odradek.settings import LiveSettings, QuotaSettings

__all__ = ["QuotaManager", "ReplicationQuota"]

log = logging.getLogger(__name__)

#: sensors not recorded to for this long are dropped (Kafka's inactive sensor expiry: 1 hour)
_SENSOR_EXPIRY_MS = 3600_000.0
_PRUNE_EVERY = 1024  # new sensors between two sweeps of the inactive ones


class _Kind:
    """One kind of quota (producer bytes, consumer bytes, request time): its index, the
    resolutions per (user, client id) and the sensors per resolved tags."""

    __slots__ = ("index", "key", "resolved", "sensors")

    def __init__(self, key: str) -> None:
        self.key = key
        self.index = QuotaIndex(key, {})
        self.resolved: dict[tuple[str, str], tuple[Sensor, float] | None] = {}
        self.sensors: dict[tuple[str, str], Sensor] = {}


class QuotaManager:
    def __init__(self, settings: QuotaSettings, image: MetadataImage | None = None) -> None:
        self.num = max(2, settings.quota_window_num)
        self.window_ms = float(settings.quota_window_size_seconds) * 1000.0
        self._source: Mapping[str, Mapping[str, float]] | None = None
        self.produce = _Kind(PRODUCER_BYTE_RATE)
        self.fetch = _Kind(CONSUMER_BYTE_RATE)
        self.request = _Kind(REQUEST_PERCENTAGE)
        #: KIP-599: partitions created or deleted per second (charged by the admin handlers)
        self.mutation = _Kind(CONTROLLER_MUTATION_RATE)
        #: some client quota is configured (else the network layer charges nothing)
        self.active = False
        self._created = 0
        if image is not None:
            self.on_image(image)

    # -- configuration ----------------------------------------------------------------------------
    def on_image(self, image: MetadataImage) -> None:
        quotas = image.client_quotas
        if quotas is self._source:
            return
        self._source = quotas
        for kind in (self.produce, self.fetch, self.request, self.mutation):
            index = QuotaIndex(kind.key, quotas)
            if index._paths != kind.index._paths:
                kind.index = index
                kind.resolved.clear()
        self.active = bool(self.produce.index or self.fetch.index or self.request.index)

    # -- charging ---------------------------------------------------------------------------------
    def _sensor(self, kind: _Kind, user: str, client_id: str, now: float) -> tuple[Sensor, float] | None:
        key = (user, client_id)
        try:
            return kind.resolved[key]
        except KeyError:
            pass
        found: Resolved | None = (
            kind.index.resolve(sanitize(user), sanitize(client_id)) if kind.index else None
        )
        entry: tuple[Sensor, float] | None = None
        if found is not None:
            tags = (found.user, found.client_id)
            sensor = kind.sensors.get(tags)
            if sensor is None:
                sensor = kind.sensors[tags] = Sensor(self.num, self.window_ms)
                sensor.last = now
                self._created += 1
                if self._created % _PRUNE_EVERY == 0:
                    self._prune(now)
            entry = (sensor, found.bound)
        if len(kind.resolved) > 100_000:  # client ids made up per request: do not grow forever
            kind.resolved.clear()
        kind.resolved[key] = entry
        return entry

    def _prune(self, now: float) -> None:
        for kind in (self.produce, self.fetch, self.request, self.mutation):
            stale = [t for t, s in kind.sensors.items() if now - s.last > _SENSOR_EXPIRY_MS]
            if stale:
                for t in stale:
                    del kind.sensors[t]
                kind.resolved.clear()

    def record(self, kind: _Kind, user: str, client_id: str, value: float, now: float) -> int:
        """Charge ``value`` to the sensor of ``user`` (the principal's name) with ``client_id``
        at ``now`` (ms); the throttle time in ms (0 when within the quota, or none applies)."""
        if not kind.index:
            return 0
        entry = self._sensor(kind, user, client_id, now)
        if entry is None:
            return 0
        sensor, bound = entry
        throttle = sensor.record(value, bound, now)
        if throttle and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s quota of user %r client %r exceeded: %.0f > %.0f, throttled %d ms",
                kind.key,
                user,
                client_id,
                sensor.rate.measure(now),
                bound,
                throttle,
            )
        return throttle

    def over(self, kind: _Kind, user: str, client_id: str, now: float) -> int:
        """The throttle time (ms) the sensor of ``user`` with ``client_id`` is at now, before
        anything more is recorded: 0 when within the quota (KIP-599's strict check)."""
        if not kind.index:
            return 0
        entry = self._sensor(kind, user, client_id, now)
        if entry is None:
            return 0
        sensor, bound = entry
        return sensor.throttle(bound, now)

    def bound(self, kind: _Kind, user: str, client_id: str) -> float | None:
        """The quota that applies to ``user`` with ``client_id`` (None: none)."""
        found = kind.index.resolve(sanitize(user), sanitize(client_id))
        return None if found is None else found.bound


_NO_LIMIT = 9223372036854775807


class ReplicationQuota:
    """KIP-73: one broker's throttle of replication, as leader (bytes it sends to followers) or
    as follower (bytes it fetches).  Only the replicas a topic's
    ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas`` name
    for this broker (``partition:broker`` pairs, or ``*``) are throttled, and only while the
    follower is out of the ISR (a reassignment's new replica catching up): over
    ``<side>.replication.throttled.rate`` (a dynamic broker config), the leader leaves them out
    of its fetch responses and the follower out of its fetch requests until the rate, measured
    over ``replication.quota.window.num`` windows of ``replication.quota.window.size.seconds``,
    is back under the bound.  Bytes are counted per fetch, never per record."""

    def __init__(self, settings: LiveSettings | BrokerConfig, side: str) -> None:
        """``settings``: the broker's, whose ``<side>.replication.throttled.rate`` may change at
        run time (a BrokerConfig: the replica fetcher's, until it takes typed settings too)."""
        self.settings = settings if isinstance(settings, LiveSettings) else LiveSettings(settings)
        self.side = side
        self._leader = side == "leader"
        self._sensor: Sensor | None = None  # made when a rate is first set
        self._parsed: dict[str, frozenset[tuple[int, int]] | None] = {}

    @property
    def sensor(self) -> Sensor:
        if self._sensor is None:
            quotas = self.settings.current.quotas
            self._sensor = Sensor(
                quotas.replication_quota_window_num, quotas.replication_quota_window_size_seconds * 1000.0
            )
        return self._sensor

    @property
    def bound(self) -> float:
        quotas = self.settings.current.quotas  # dynamic
        return float(quotas.leader_replication_throttled_rate if self._leader else quotas.follower_replication_throttled_rate)

    def limited(self) -> bool:
        """Whether a rate is set at all (else nothing needs looking at)."""
        return self.bound < _NO_LIMIT

    def throttled(self, replicas: str, partition: int, broker_id: int) -> bool:
        """Whether the topic's ``*.replication.throttled.replicas`` value names ``partition`` on
        ``broker_id`` (this broker's side of the replication)."""
        if not replicas:
            return False
        parsed = self._parsed.get(replicas, ())
        if parsed == ():
            parsed = _parse_throttled(replicas)
            if len(self._parsed) > 1024:
                self._parsed.clear()
            self._parsed[replicas] = parsed
        return parsed is None or (partition, broker_id) in parsed

    def exceeded(self, now_ms: float) -> bool:
        bound = self.bound
        return bound < _NO_LIMIT and self.sensor.rate.measure(now_ms) > bound

    def delay_ms(self, now_ms: float) -> int:
        """How long (ms) without copying brings the measured rate back to the bound (0: within it)."""
        bound = self.bound
        if bound >= _NO_LIMIT:
            return 0
        return self.sensor.throttle(bound, now_ms)

    def record(self, nbytes: int, now_ms: float) -> None:
        if nbytes > 0:
            self.sensor.record(float(nbytes), self.bound, now_ms)


def _parse_throttled(value: str) -> frozenset[tuple[int, int]] | None:
    """``*`` -> None (every replica); ``0:1,1:2`` -> {(0, 1), (1, 2)} (unreadable pairs skipped:
    AlterConfigs refuses them)."""
    text = value.strip()
    if text == "*":
        return None
    out = set()
    for item in text.split(","):
        p, _, b = item.partition(":")
        if p.strip().isdigit() and b.strip().isdigit():
            out.add((int(p), int(b)))
    return frozenset(out)
