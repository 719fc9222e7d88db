"""Kafka's log on disk: segments, indexes, checkpoints, retention, compaction and recovery.

Files only: no sockets, no asyncio, no API messages.  The layout is Kafka's
(``<log.dir>/<topic>-<partition>/<20-digit base offset>.log|.index|.timeindex``), so a log
written here can be read by Kafka's tools and the other way round.

Entry points: :class:`LogManager` (all partitions of a broker), :class:`Log` (one partition),
:class:`LogConfig` (topic-level config with Kafka's names and defaults).
"""

from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSegmentError,
    DecompressionBudgetExceeded,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    LogClosedError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StorageError,
)
from odradek.storage.files import FileOps
from odradek.storage.log import AppendInfo, Log, ReadResult
from odradek.storage.manager import LogManager, kafka_uuid, parse_kafka_uuid
from odradek.storage.segment import FileRegion, LogSegment

__all__ = [
    "AppendInfo",
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptSegmentError",
    "DecompressionBudgetExceeded",
    "FileOps",
    "FileRegion",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "Log",
    "LogClosedError",
    "LogConfig",
    "LogDirLockedError",
    "LogManager",
    "LogSegment",
    "OffsetOutOfRangeError",
    "ReadResult",
    "RecordBatchTooLargeError",
    "StorageError",
    "kafka_uuid",
    "parse_kafka_uuid",
]
