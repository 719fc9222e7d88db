"""Fault scripting for test brokers: the rules, pure.

A test arms rules (:meth:`FaultScript.arm`) and the broker asks, for every request at its
dispatch boundary, which rule applies (:meth:`FaultScript.match`): the first armed rule whose
API, client id, topic and partition match, counted down when it has a count.  What a rule does
is said by its kind:

* ``error`` — the request is answered with Kafka's error answer for ``error`` (every topic and
  partition it named carries the code; the top-level code where the response has one), and the
  handler is not run: an injected error writes nothing;
* ``delay`` — the request is handled ``delay_ms`` later (its answer comes that much later);
* ``hold`` — the request waits, unanswered, until the rule is cleared (a paused broker when it
  names no API and no client, a frozen client when it names a client id);
* ``drop`` — the connection that sent the request is closed, nothing answered;
* ``offline`` — the partition is offline: requests that read or write it get
  ``KAFKA_STORAGE_ERROR``, as Kafka answers for a partition in an offline log dir.

A rule that names a topic or partition applies to a request that names that partition; the whole
request gets the error (librdkafka's mock cluster scripts errors per request too).

Everything a rule is made from comes from outside (a test's code, the loopback control endpoint's
JSON): :func:`parse_rule` checks it and raises :class:`FaultSpecError` with a plain message.
The broker also keeps here what it received (:class:`Received`): requests per API, the batches of
Produce requests (producer id, epoch, sequences) and the offsets committed.
"""

from __future__ import annotations

import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.errors import ErrorCode, OdradekError
from odradek.protocol.messages import ApiKey
from odradek.records import iter_batch_headers

__all__ = [
    "KINDS",
    "PARTITION_APIS",
    "FaultRule",
    "FaultScript",
    "FaultSpecError",
    "Received",
    "api_key",
    "api_name",
    "error_code",
    "named_partitions",
    "parse_rule",
]

KINDS = ("error", "delay", "hold", "drop", "offline")
#: what a rule with no API never touches: the SASL exchange (a connection that cannot
#: authenticate tells a test nothing about the application)
_NEVER_WILDCARD = frozenset({int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)})
#: the APIs an offline partition answers with KAFKA_STORAGE_ERROR (those that read or write it)
PARTITION_APIS = frozenset(
    int(k) for k in (
        ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.DELETE_RECORDS,
    )
)
_MAX_TIMES = 1 << 31
_MAX_DELAY_MS = 3_600_000
_NAMES = {k.name.replace("_", "").lower(): int(k) for k in ApiKey}
_FIELDS = ("kind", "api", "error", "times", "topic", "partition", "client_id", "delay_ms")


class FaultSpecError(OdradekError, ValueError):
    """A fault rule that cannot be armed (unknown API or error, wrong type, out of range)."""


def api_key(value: object) -> int:
    """An API from its Kafka name (``"Produce"``, ``"OffsetCommit"``; Odradek's ``PRODUCE`` too)
    or its key."""
    if isinstance(value, bool):
        raise FaultSpecError(f"api: {value!r} is not an API name or key")
    if isinstance(value, int):
        if value not in {int(k) for k in ApiKey}:
            raise FaultSpecError(f"api: no API has key {value}")
        return value
    if isinstance(value, str):
        key = _NAMES.get(value.replace("_", "").lower())
        if key is None:
            raise FaultSpecError(f"api: unknown API {value!r} (Kafka's names: Produce, Fetch, OffsetCommit...)")
        return key
    raise FaultSpecError(f"api: {value!r} is not an API name or key")


def api_name(key: int) -> str:
    """Kafka's name of an API (``Produce``, ``OffsetCommit``)."""
    try:
        return "".join(part.title() for part in ApiKey(key).name.split("_"))
    except ValueError:
        return f"API{key}"


def error_code(value: object) -> ErrorCode:
    """A Kafka error from its name (``NOT_LEADER_OR_FOLLOWER``) or its code (6); never NONE."""
    if isinstance(value, bool):
        raise FaultSpecError(f"error: {value!r} is not a Kafka error name or code")
    try:
        if isinstance(value, int):
            code = ErrorCode(value)
        elif isinstance(value, str):
            code = ErrorCode[value.strip().upper()]
        else:
            raise FaultSpecError(f"error: {value!r} is not a Kafka error name or code")
    except (KeyError, ValueError):
        raise FaultSpecError(f"error: unknown Kafka error {value!r}") from None
    if code == ErrorCode.NONE:
        raise FaultSpecError("error: NONE is not an error")
    return code


def _optional_int(spec: Mapping[str, Any], name: str, low: int, high: int) -> int | None:
    value = spec.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FaultSpecError(f"{name}: {value!r} is not a whole number in [{low}, {high}]")
    return value


def _optional_str(spec: Mapping[str, Any], name: str) -> str | None:
    value = spec.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 32767:
        raise FaultSpecError(f"{name}: {value!r} is not a non-empty string")
    return value


@dataclass(slots=True)
class FaultRule:
    kind: str
    api: int | None = None
    error: ErrorCode | None = None
    #: how many more requests it applies to (None: until cleared)
    times: int | None = None
    topic: str | None = None
    partition: int | None = None
    client_id: str | None = None
    delay_ms: int = 0
    id: int = 0
    #: requests it applied to so far
    hits: int = 0

    def describe(self) -> dict[str, Any]:
        """The rule as JSON-ready data (the control endpoint's and the failure report's form)."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "hits": self.hits}
        if self.api is not None:
            out["api"] = api_name(self.api)
        if self.error is not None:
            out["error"] = self.error.name
        for name in ("times", "topic", "partition", "client_id"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.kind == "delay":
            out["delay_ms"] = self.delay_ms
        return out

    def matches_api(self, key: int) -> bool:
        if self.kind == "offline":
            return key in PARTITION_APIS
        if self.api is None:
            return key not in _NEVER_WILDCARD
        return self.api == key

    @property
    def scoped(self) -> bool:
        return self.topic is not None or self.partition is not None


def parse_rule(spec: object) -> FaultRule:
    """A rule from its data (``{"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER",
    "times": 3, "topic": "t"}``): every field checked; :class:`FaultSpecError` names what is wrong."""
    if not isinstance(spec, Mapping):
        raise FaultSpecError(f"a fault is a JSON object, not {type(spec).__name__}")
    unknown = sorted(str(k) for k in spec if k not in _FIELDS)
    if unknown:
        raise FaultSpecError(f"unknown field(s) {', '.join(unknown)} (a fault has: {', '.join(_FIELDS)})")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise FaultSpecError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    api = None if spec.get("api") is None else api_key(spec["api"])
    error = None if spec.get("error") is None else error_code(spec["error"])
    times = _optional_int(spec, "times", 1, _MAX_TIMES)
    topic = _optional_str(spec, "topic")
    partition = _optional_int(spec, "partition", 0, _MAX_TIMES)
    client_id = _optional_str(spec, "client_id")
    delay_ms = _optional_int(spec, "delay_ms", 0, _MAX_DELAY_MS)
    if kind == "error":
        if error is None:
            raise FaultSpecError("an error fault needs error (a Kafka error name or code)")
    elif error is not None and kind != "offline":
        raise FaultSpecError(f"error is for error faults, not {kind}")
    if kind == "delay":
        if delay_ms is None:
            raise FaultSpecError("a delay fault needs delay_ms")
    elif delay_ms is not None:
        raise FaultSpecError(f"delay_ms is for delay faults, not {kind}")
    if kind == "offline":
        if topic is None or partition is None:
            raise FaultSpecError("an offline fault names a topic and a partition")
        if api is not None:
            raise FaultSpecError("an offline fault applies to the APIs that read or write the partition: no api")
        error = error or ErrorCode.KAFKA_STORAGE_ERROR
    return FaultRule(kind, api, error, times, topic, partition, client_id, delay_ms or 0)


def _partition_index(item: Any) -> int | None:
    for name in ("index", "partition_index", "partition"):
        value = getattr(item, name, None)
        if isinstance(value, int):
            return value
    return None


def named_partitions(
    request: Any, topic_name: Callable[[uuid.UUID], str | None] | None = None
) -> Iterator[tuple[str | None, int | None]]:
    """The (topic, partition) pairs a request names (partition None for a topic named without
    partitions); topics named by id are looked up with ``topic_name``."""
    for attr in ("topic_data", "topics"):
        topics = getattr(request, attr, None)
        if isinstance(topics, list):
            break
    else:
        return
    for t in topics:
        name = t if isinstance(t, str) else getattr(t, "name", None) or getattr(t, "topic", None)
        if not isinstance(name, str) or not name:
            tid = getattr(t, "topic_id", None)
            name = topic_name(tid) if isinstance(tid, uuid.UUID) and topic_name is not None else None
        partitions = None
        for pattr in ("partition_data", "partitions", "partition_indexes"):
            partitions = getattr(t, pattr, None)
            if isinstance(partitions, list):
                break
        if not partitions:
            yield name, None
            continue
        for p in partitions:
            yield name, p if isinstance(p, int) else _partition_index(p)


@dataclass(slots=True)
class Received:
    """What a test broker received (bounded: the newest ``limit`` of each)."""

    limit: int = 100_000
    #: requests per API (Kafka's names)
    per_api: Counter[str] = field(default_factory=Counter)
    #: one entry per request: api, client_id, version
    requests: deque[dict[str, Any]] = field(default_factory=deque)
    #: one entry per produced batch: topic, partition, producer_id, producer_epoch, base_sequence,
    #: record_count, transactional
    batches: deque[dict[str, Any]] = field(default_factory=deque)
    #: one entry per committed offset: group, topic, partition, offset, api (OffsetCommit/TxnOffsetCommit)
    commits: deque[dict[str, Any]] = field(default_factory=deque)

    def record(self, key: int, version: int, client_id: str | None, request: Any) -> None:
        name = api_name(key)
        self.per_api[name] += 1
        _push(self.requests, {"api": name, "version": version, "client_id": client_id}, self.limit)
        if key == ApiKey.PRODUCE:
            self._batches(request)
        elif key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
            group = getattr(request, "group_id", None)
            for t in getattr(request, "topics", None) or ():
                for p in getattr(t, "partitions", None) or ():
                    _push(self.commits, {
                        "api": name, "group": group, "topic": getattr(t, "name", None),
                        "partition": _partition_index(p), "offset": getattr(p, "committed_offset", None),
                    }, self.limit)

    def _batches(self, request: Any) -> None:
        for t in getattr(request, "topic_data", None) or ():
            for p in getattr(t, "partition_data", None) or ():
                records = getattr(p, "records", None)
                if not records:
                    continue
                try:
                    headers = list(iter_batch_headers(records))
                except Exception:  # the handler answers what does not parse
                    continue
                for h in headers:
                    _push(self.batches, {
                        "topic": t.name, "partition": p.index, "producer_id": h.producer_id,
                        "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
                        "record_count": h.record_count, "transactional": bool(h.attributes & 0x10),
                    }, self.limit)

    def clear(self) -> None:
        self.per_api.clear()
        self.requests.clear()
        self.batches.clear()
        self.commits.clear()


def _push(queue: deque[dict[str, Any]], item: dict[str, Any], limit: int) -> None:
    if len(queue) >= limit:
        queue.popleft()
    queue.append(item)


class FaultScript:
    """The armed rules, in the order they were armed, and the record of what they did."""

    def __init__(self, injected_limit: int = 10_000) -> None:
        self.rules: list[FaultRule] = []
        self._next_id = 1
        #: what was injected, oldest first (rule id, kind, API, client id, correlation id)
        self.injected: deque[dict[str, Any]] = deque()
        self._limit = injected_limit
        self.received = Received()

    def arm(self, rule: FaultRule) -> FaultRule:
        rule.id = self._next_id
        self._next_id += 1
        self.rules.append(rule)
        return rule

    def clear(self, rule_id: int | None = None, *, kind: str | None = None) -> list[FaultRule]:
        """Remove one rule (by id), those of a kind, or all; returns the removed ones."""
        kept: list[FaultRule] = []
        removed: list[FaultRule] = []
        for r in self.rules:
            hit = (rule_id is None or r.id == rule_id) and (kind is None or r.kind == kind)
            (removed if hit else kept).append(r)
        self.rules = kept
        return removed

    def match(
        self,
        key: int,
        client_id: str | None,
        request: Any,
        topic_name: Callable[[uuid.UUID], str | None] | None = None,
        correlation_id: int = 0,
    ) -> FaultRule | None:
        """The rule that applies to this request (counted, recorded), or None."""
        named: list[tuple[str | None, int | None]] | None = None
        for rule in self.rules:
            if not rule.matches_api(key):
                continue
            if rule.client_id is not None and rule.client_id != client_id:
                continue
            if rule.scoped:
                if named is None:
                    named = list(named_partitions(request, topic_name))
                if not any(
                    (rule.topic is None or t == rule.topic) and (rule.partition is None or p == rule.partition)
                    for t, p in named
                ):
                    continue
            rule.hits += 1
            if rule.times is not None:
                rule.times -= 1
                if rule.times <= 0:
                    self.rules.remove(rule)
            _push(self.injected, {
                "rule": rule.id, "kind": rule.kind, "api": api_name(key), "client_id": client_id,
                "correlation_id": correlation_id,
                **({"error": rule.error.name} if rule.error is not None else {}),
                **({"delay_ms": rule.delay_ms} if rule.kind == "delay" else {}),
            }, self._limit)
            return rule
        return None

    def describe(self) -> dict[str, Any]:
        return {"rules": [r.describe() for r in self.rules], "injected": list(self.injected)}
