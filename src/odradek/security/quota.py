"""Client quotas as pure logic: Kafka's entities, their precedence, and its rate windows.

Kafka's model (KIP-13, KIP-55, KIP-124, KIP-257, KIP-546):

* A quota entity is a user, a client id, a (user, client id) pair, or an IP, each name possibly
  ``<default>``; it is stored under ZooKeeper's ``/config`` as ``users/<user>``,
  ``users/<user>/clients/<client-id>``, ``clients/<client-id>`` or ``ips/<ip>``, the names
  sanitized as Kafka's ``Sanitizer`` does (URL-encoding): :func:`entity_path`,
  :func:`parse_entity_path`.
* A request from (user, client id) is charged to the most specific entity that has a quota of the
  right kind, in Kafka's order (``users/<user>/clients/<client-id>`` first, ``clients/<default>``
  last): :meth:`QuotaIndex.resolve`.  The sensor it is charged to is keyed like Kafka's metric
  tags: a user quota (even the ``<default>`` one) is shared by all the user's clients, a
  client-id quota by every user of that client id.
* A sensor's rate is the sum over ``quota.window.num`` samples of ``quota.window.size.seconds``
  each, divided by the time they cover (never less than ``num - 1`` windows): Kafka's
  ``Rate``/``SampledStat``.  A value recorded over the bound gives a throttle time of
  ``(rate - bound) / bound * window`` — the time with no more traffic after which the rate is
  back at the bound — capped at the whole quota window: :class:`Sensor`.

Nothing here reads a clock: every call takes ``now`` in milliseconds.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from odradek.errors import OdradekError

__all__ = [
    "CLIENT_ID",
    "CLIENT_QUOTA_KEYS",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "IP",
    "IP_QUOTA_KEYS",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "QuotaError",
    "QuotaIndex",
    "Rate",
    "Sensor",
    "desanitize",
    "entity_path",
    "parse_entity_path",
    "sanitize",
    "throttle_time",
]

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
#: the quotas of users and client ids (Kafka's DynamicConfig.Client)
CLIENT_QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
#: the quotas of IPs (Kafka's DynamicConfig.Ip)
IP_QUOTA_KEYS = (CONNECTION_CREATION_RATE,)
QUOTA_KEYS = CLIENT_QUOTA_KEYS + IP_QUOTA_KEYS

#: entity types, as the ClientQuotas APIs name them
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
#: Kafka's name for a default entity in ``/config`` paths (ConfigEntityName.Default)
DEFAULT = "<default>"

_ROOTS = {USER: "users", CLIENT_ID: "clients", IP: "ips"}
_TYPES = {v: k for k, v in _ROOTS.items()}


class QuotaError(OdradekError, ValueError):
    """An entity or a quota the ClientQuotas APIs refuse (INVALID_REQUEST)."""


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encoding where only letters, digits, ``.-_~`` stay
    as they are (``*`` is ``%2A``, a space ``%20``)."""
    return urllib.parse.quote(name, safe="")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def entity_path(entity: Mapping[str, str | None]) -> str:
    """The ``/config`` path of an entity: entity type -> name (None: the default entity)."""
    kinds = set(entity)
    if kinds == {USER, CLIENT_ID}:
        return f"{_part(USER, entity[USER])}/{_part(CLIENT_ID, entity[CLIENT_ID])}"
    if len(kinds) == 1 and kinds <= set(_ROOTS):
        (kind,) = kinds
        return _part(kind, entity[kind])
    if not kinds:
        raise QuotaError("Invalid empty client quota entity")
    unknown = kinds - set(_ROOTS)
    if unknown:
        raise QuotaError(f"Unhandled client quota entity type: {sorted(unknown)[0]}")
    raise QuotaError(f"Invalid quota entity combination: {sorted(kinds)}")


def _part(kind: str, name: str | None) -> str:
    if name is None:
        return f"{_ROOTS[kind]}/{DEFAULT}"
    if kind == IP:
        return f"ips/{name}"
    return f"{_ROOTS[kind]}/{sanitize(name)}"


def parse_entity_path(path: str) -> dict[str, str | None]:
    """The entity of a ``/config`` path (names desanitized; None: default)."""
    parts = path.split("/")
    if len(parts) not in (2, 4) or (len(parts) == 4 and (parts[0], parts[2]) != ("users", "clients")):
        raise QuotaError(f"not a client quota entity path: {path!r}")
    out: dict[str, str | None] = {}
    for root, name in zip(parts[::2], parts[1::2], strict=True):
        kind = _TYPES.get(root)
        if kind is None or not name:
            raise QuotaError(f"not a client quota entity path: {path!r}")
        out[kind] = None if name == DEFAULT else (name if kind == IP else desanitize(name))
    return out


def valid_keys(entity: Mapping[str, str | None]) -> tuple[str, ...]:
    """The quota names an entity may have."""
    return IP_QUOTA_KEYS if IP in entity else CLIENT_QUOTA_KEYS


def validate_quota(entity: Mapping[str, str | None], key: str, value: float) -> None:
    """Kafka's checks of one quota value set on an entity (QuotaError: INVALID_REQUEST)."""
    if key not in valid_keys(entity):
        if key in QUOTA_KEYS:
            raise QuotaError(f"Invalid configuration key {key} for the entity {_describe(entity)}")
        raise QuotaError(f"Invalid configuration key {key}")
    if value != value or value <= 0:
        raise QuotaError(f"Quota {key} must be greater than 0, got {value}")
    if key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, CONNECTION_CREATION_RATE) and value != int(value):
        raise QuotaError(f"Quota {key} must be an integer, got {value}")


def _describe(entity: Mapping[str, str | None]) -> str:
    return ", ".join(f"{k}={DEFAULT if v is None else v}" for k, v in sorted(entity.items()))


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a request is charged to: the sensor's key (Kafka's metric tags: sanitized user, or
    "", and client id, or "") and the bound."""

    user: str
    client_id: str
    bound: float


class QuotaIndex:
    """The quotas of one kind (``producer_byte_rate``...) by entity path, and Kafka's precedence
    over them (DefaultQuotaCallback's ``quotaMetricTags`` and ``quotaLimit``)."""

    __slots__ = ("_paths", "key")

    def __init__(self, key: str, quotas: Mapping[str, Mapping[str, float]]) -> None:
        self.key = key
        self._paths = {path: float(q[key]) for path, q in quotas.items() if key in q}

    def __bool__(self) -> bool:
        return bool(self._paths)

    def resolve(self, user: str, client_id: str) -> Resolved | None:
        """The sensor and bound for a request of ``user`` with ``client_id`` (both sanitized),
        or None when no quota of this kind applies."""
        paths = self._paths
        if not paths:
            return None
        u, c, d = f"users/{user}", f"clients/{client_id}", DEFAULT
        # the metric tags: which of (user, client id) the most specific configured entity names
        if f"{u}/{c}" in paths or f"{u}/clients/{d}" in paths:
            tags = (user, client_id)
        elif u in paths:
            tags = (user, "")
        elif f"users/{d}/{c}" in paths or f"users/{d}/clients/{d}" in paths:
            tags = (user, client_id)
        elif f"users/{d}" in paths:
            tags = (user, "")
        else:
            tags = ("", client_id)
        bound = self.limit(*tags)
        return None if bound is None else Resolved(tags[0], tags[1], bound)

    def limit(self, user: str, client_id: str) -> float | None:
        """Kafka's ``quotaLimit`` for a sensor's tags."""
        paths = self._paths
        d = DEFAULT
        if user and client_id:
            order: Iterable[str] = (
                f"users/{user}/clients/{client_id}",
                f"users/{user}/clients/{d}",
                f"users/{d}/clients/{client_id}",
                f"users/{d}/clients/{d}",
            )
        elif user:
            order = (f"users/{user}", f"users/{d}")
        elif client_id:
            order = (f"clients/{client_id}", f"clients/{d}")
        else:
            return None
        for path in order:
            value = paths.get(path)
            if value is not None:
                return value
        return None


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat`` of sums: ``num`` samples of ``window_ms`` each.

    A sample starts with the first value recorded after the previous one is complete; samples
    older than the whole window (``num * window_ms``) are reset before every measure.  The rate
    is per second."""

    __slots__ = ("_current", "_samples", "num", "window_ms")

    def __init__(self, num: int, window_ms: float) -> None:
        self.num = max(2, int(num))
        self.window_ms = float(window_ms)
        # each sample: [start ms, sum]
        self._samples: list[list[float]] = []
        self._current = 0

    def record(self, value: float, now: float) -> None:
        samples = self._samples
        if not samples:
            samples.append([now, 0.0])
        sample = samples[self._current]
        if now - sample[0] >= self.window_ms:  # complete: the next one
            self._current = (self._current + 1) % self.num
            if self._current >= len(samples):
                sample = [now, 0.0]
                samples.append(sample)
            else:
                sample = samples[self._current]
                sample[0], sample[1] = now, 0.0
        sample[1] += value

    def _purge(self, now: float) -> None:
        expire = self.num * self.window_ms
        for sample in self._samples:
            if now - sample[0] >= expire:
                sample[0], sample[1] = now, 0.0

    def total(self, now: float) -> float:
        self._purge(now)
        return sum(s[1] for s in self._samples)

    def window_size(self, now: float) -> float:
        """The time the rate is measured over (ms): since the oldest sample's start, and at
        least ``num - 1`` full windows (so a new sensor does not see a huge rate at once)."""
        self._purge(now)
        if not self._samples:
            self._samples.append([now, 0.0])
        elapsed = now - min(s[0] for s in self._samples)
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now: float) -> float:
        """The rate per second."""
        total = self.total(now)
        return total / (self.window_size(now) / 1000.0)


def throttle_time(rate: float, bound: float, window_ms: float, cap_ms: float) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: how long (ms) with nothing recorded brings ``rate``
    measured over ``window_ms`` back to ``bound``; at most ``cap_ms``."""
    if rate <= bound or bound <= 0:
        return 0
    return round(min((rate - bound) / bound * window_ms, cap_ms))


class Sensor:
    """A quota sensor: values recorded against a :class:`Rate` with a bound (per second)."""

    __slots__ = ("last", "rate")

    def __init__(self, num: int, window_ms: float) -> None:
        self.rate = Rate(num, window_ms)
        self.last = 0.0  # when the last value was recorded (ms)

    def record(self, value: float, bound: float, now: float) -> int:
        """Record ``value`` and return the throttle time in ms (0: within the bound)."""
        self.rate.record(value, now)
        self.last = now
        return self.throttle(bound, now)

    def throttle(self, bound: float, now: float) -> int:
        """The throttle time in ms the rate is at now against ``bound`` (0: within it)."""
        rate = self.rate
        measured = rate.measure(now)
        if measured <= bound:
            return 0
        return throttle_time(measured, bound, rate.window_size(now), rate.num * rate.window_ms)
