"""Value types shared by the readers and builders."""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

__all__ = [
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "Header",
    "Record",
    "TimestampType",
]

#: Sentinels Kafka writes when a field does not apply.
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

Header = tuple[str, bytes | None]


class TimestampType(IntEnum):
    """Meaning of record timestamps (attribute bit 3 for magic >= 1)."""

    NO_TIMESTAMP_TYPE = -1  # magic 0 has no timestamps
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Record(NamedTuple):
    """One decoded record (or v0/v1 message).

    ``offset`` is absolute; ``timestamp`` is milliseconds since the epoch (-1 for
    magic 0, the batch's max timestamp for log-append-time batches); ``key`` and
    ``value`` are ``bytes`` or ``None``; ``headers`` lists ``(name, value)`` pairs
    in wire order (always empty for magic 0 and 1).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]
