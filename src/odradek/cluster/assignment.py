"""Placement helpers: the coordinator partition of a group, and the consumer protocol's
subscription and assignment payloads (int16 version followed by the versioned struct)."""

from __future__ import annotations

import functools
import struct
from typing import TypeVar

from odradek.protocol import ProtocolError
from odradek.protocol.messages.data import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = [
    "decode_assignment",
    "decode_subscription",
    "decode_subscription_topics",
    "encode_assignment",
    "encode_subscription",
    "java_string_hash",
    "partition_for",
]

_version = struct.Struct(">h")
_P = TypeVar("_P", ConsumerProtocolSubscription, ConsumerProtocolAssignment)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@functools.lru_cache(maxsize=4096)
def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode()) % partitions`` (``abs`` maps Integer.MIN_VALUE to 0),
    the ``__consumer_offsets`` partition of a group id (or ``__transaction_state`` partition of
    a transactional id). Cached: the coordinators ask for it on every request of an id."""
    h = java_string_hash(key)
    h = 0 if h == -(1 << 31) else abs(h)
    return h % partitions


def _decode(cls: type[_P], data: bytes) -> tuple[int, _P] | None:
    if len(data) < 2:
        return None
    (version,) = _version.unpack_from(data, 0)
    if version < 0:
        return None
    lo, hi = cls.VALID_VERSIONS
    try:
        return version, cls.decode_from(data, 2, min(max(version, lo), hi))[0]
    except ProtocolError:
        return None


def decode_subscription(data: bytes) -> ConsumerProtocolSubscription | None:
    found = _decode(ConsumerProtocolSubscription, data)
    return None if found is None else found[1]


def decode_subscription_topics(data: bytes) -> set[str] | None:
    sub = decode_subscription(data)
    return None if sub is None else set(sub.topics)


def encode_subscription(sub: ConsumerProtocolSubscription, version: int = 3) -> bytes:
    return _version.pack(version) + sub.encode(version)


def decode_assignment(data: bytes) -> ConsumerProtocolAssignment | None:
    found = _decode(ConsumerProtocolAssignment, data)
    return None if found is None else found[1]


def encode_assignment(assignment: ConsumerProtocolAssignment, version: int = 3) -> bytes:
    return _version.pack(version) + assignment.encode(version)
