"""Partitioners: the Java client's default (murmur2 of the key, sticky for null keys) and the
interface for custom ones.

A partitioner is a callable ``(topic, key_bytes, partitions, available) -> partition`` where
``partitions`` is the number of partitions and ``available`` the partitions with a leader.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

__all__ = ["DefaultPartitioner", "Partitioner", "murmur2", "murmur2_partition"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (MurmurHash2, seed 0x9747b28c) as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """``toPositive(murmur2(key)) % partitions``, as the Java client places keyed records."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Partitioner(Protocol):
    """What the producer's ``partitioner`` setting takes: called with the topic, the serialized
    key (None for none), the partition count and the ids of partitions with a leader; returns
    the partition to write to."""

    def __call__(self, topic: str, key: bytes | None, partitions: int, available: Sequence[int]) -> int: ...


class DefaultPartitioner:
    """Keyed records: murmur2, so a key lands on the same partition whichever client wrote it.
    Records without a key stick to one partition until its batch is sent (then another is
    chosen at random among the available ones)."""

    def __init__(self) -> None:
        self.sticky: dict[str, int] = {}  # topic -> its current partition for null keys

    def __call__(self, topic: str, key: bytes | None, partitions: int, available: Sequence[int]) -> int:
        if key is not None:
            return murmur2_partition(key, partitions)
        p = self.sticky.get(topic)
        if p is None or p >= partitions:
            p = self.new_batch(topic, partitions, available)
        return p

    def new_batch(self, topic: str, partitions: int, available: Sequence[int], previous: int | None = None) -> int:
        """Pick the next sticky partition for ``topic`` (when its current batch is full)."""
        choices = [p for p in (available or range(partitions)) if p != previous] or list(available or range(partitions))
        p = random.choice(choices)
        self.sticky[topic] = p
        return p
