"""Driver side: which partitions to read, where their offsets stand, and how ranges are planned.

Offsets are Spark's Kafka source JSON, ``{"topic": {"0": 123, "1": 456}}``: for a micro-batch
the offset of each partition is the next offset to read, so a batch covers
``start <= offset < end`` per partition.

Determinism.  Spark replays a micro-batch that was planned (its end written to
``offsets/N``) but not committed by calling ``partitions(start, end)`` again after a
restart, so :func:`plan_ranges` is a pure function of the two offsets and the options: it
never asks the broker anything.  Two rules make that possible:

* a partition in ``end`` but not in ``start`` (added to a topic, or a new topic matching
  ``subscribePattern``) is read from offset 0, where every partition begins; if retention
  already removed its first records, the executor reports the loss (``failOnDataLoss``), as
  Spark's Kafka source does for a partition that "starts from X instead of 0";
* the initial offset of ``startingOffsets=latest`` is the marker -1 (per partition), meaning
  "nothing before the end of the first batch": the first batch reads nothing from those
  partitions whichever end it was planned with, and the next one starts at that end.

``latestOffset`` is a function of its ``start``, the read limit and the broker's current log
ends; it keeps no state between calls except the target of ``Trigger.AvailableNow``.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ._dataloss import report_data_loss
from ._options import EARLIEST, LATEST, OffsetSpec, SourceOptions

__all__ = [
    "OffsetRange",
    "OffsetReader",
    "check_range",
    "from_json_offsets",
    "plan_ranges",
    "rate_limit",
    "split_ranges",
    "to_json_offsets",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


class OffsetRange(NamedTuple):
    """One task's share of a partition: offsets ``start`` (included) to ``end`` (excluded)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """How many offsets the range covers."""
        return self.end - self.start


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> ``{"t": {"p": o}}``, topics and partitions in order (the JSON text
    must be the same for the same offsets: Spark compares offsets by their JSON)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(off)
    return out


def from_json_offsets(data: Mapping[str, Mapping[str, Any]] | None) -> PartitionOffsets:
    """Spark's Kafka offset JSON ``{"t": {"p": o}}`` -> ``{(t, p): o}`` (empty for None)."""
    if not data:
        return {}
    return {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


# ---------------------------------------------------------------------------------------------
# pure planning functions


def rate_limit(
    limit: int, start: Mapping[TopicPartition, int], until: Mapping[TopicPartition, int]
) -> PartitionOffsets:
    """Spread ``limit`` offsets over the partitions in proportion to what each has to read
    (Spark's ``KafkaMicroBatchStream.rateLimit``): a partition with little data still gets at
    least one offset; none goes past its ``until``.  ``start`` holds the resolved begin of
    every partition of ``until``."""
    sizes = {}
    for tp, end in until.items():
        begin = start.get(tp)
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out: PartitionOffsets = {}
    for tp, end in until.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out


def _divide(parts: int, r: OffsetRange) -> list[OffsetRange]:
    remaining = r.size
    start = r.start
    out = []
    for part in range(parts):
        this = remaining // (parts - part)  # the last part takes the rounding
        remaining -= this
        end = min(start + this, r.end)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Spark's ``KafkaOffsetRangeCalculator``: empty ranges dropped; ranges larger than
    ``maxRecordsPerPartition`` cut into equal pieces; then, when there are fewer pieces than
    ``minPartitions``, each is cut into ``round(size / (total / minPartitions))`` pieces."""
    todo = sorted(r for r in ranges if r.size > 0)
    if max_records_per_partition:
        todo = [piece for r in todo for piece in _divide(math.ceil(r.size / max_records_per_partition), r)]
    if min_partitions and min_partitions > len(todo):
        total = sum(r.size for r in todo)
        ideal = total / min_partitions
        todo = [piece for r in todo for piece in _divide(max(_java_round(r.size / ideal), 1), r)]
    return todo


def _java_round(x: float) -> int:
    return math.floor(x + 0.5)


def plan_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], options: SourceOptions
) -> list[OffsetRange]:
    """The offset ranges of a micro-batch, a pure function of its two offsets (see the module
    docstring).  Partitions that disappeared, or whose log end went back, are data loss."""
    ranges = []
    gone = sorted(tp for tp in start if tp not in end)
    if gone:
        report_data_loss(
            f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone. Some data may have been missed",
            options.fail_on_data_loss,
        )
    for tp in sorted(end):
        until = end[tp]
        begin = start.get(tp, 0)  # a new partition: from its beginning
        if begin == LATEST:
            begin = until
        elif begin == EARLIEST:
            begin = 0
        if until < begin:
            report_data_loss(
                f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin} to {until}, some data may have been missed",
                options.fail_on_data_loss,
            )
            continue
        ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return split_ranges(ranges, options.min_partitions, options.max_records_per_partition)


# ---------------------------------------------------------------------------------------------
# talking to the cluster


class OffsetReader:
    """Partition discovery and offset look-ups for the driver, through :class:`odradek.client.Admin`
    (created on first use, closed by :meth:`close`; never pickled)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_admin": None}

    @property
    def admin(self) -> Any:
        """The admin client the look-ups use, made on first use from the ``kafka.*`` options (never pickled to
        executors)."""
        if self._admin is None:
            from odradek.client import Admin

            self._admin = Admin(self.options.admin_config)
        return self._admin

    def close(self) -> None:
        """Close the admin client, if one was made."""
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()

    # -- partitions ------------------------------------------------------------------------------
    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions to read now: those assigned, or those of the subscribed topics that
        exist, or of the existing topics matching the pattern (internal topics excluded)."""
        opts = self.options
        if opts.strategy == "assign":
            return list(opts.assignment)
        existing = self.admin.list_topics(include_internal=False)
        if opts.strategy == "subscribe":
            names = [t for t in opts.topics if t in existing]
        else:
            pattern = re.compile(opts.pattern)
            names = sorted(t for t in existing if pattern.fullmatch(t))
        if not names:
            return []
        described = self.admin.describe_topics(names)
        return sorted((name, p.partition) for name, d in described.items() for p in d.partitions)

    # -- offsets ---------------------------------------------------------------------------------
    def list_offsets(self, specs: Mapping[TopicPartition, str | int]) -> PartitionOffsets:
        """``{tp: "earliest" | "latest" | timestamp}`` -> offsets, by ListOffsets at the source's
        ``kafka.isolation.level``."""
        if not specs:
            return {}
        result = self.admin.list_offsets(dict(specs), isolation_level=self.options.isolation_level)
        return {tp: int(info.offset) for tp, info in result.items()}

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """The partitions' end offsets (the high watermark, or the last stable offset under read_committed)."""
        return self.list_offsets({tp: "latest" for tp in tps})

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """The partitions' log start offsets."""
        return self.list_offsets({tp: "earliest" for tp in tps})

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, starting: bool, streaming: bool
    ) -> PartitionOffsets:
        """Concrete offsets for ``spec`` (the marker -1 kept for "latest" in a streaming start)."""
        what = "startingOffsets" if starting else "endingOffsets"
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return dict.fromkeys(tps, LATEST) if streaming and starting else self.latest(tps)
        if spec.kind == "offsets":
            if set(spec.offsets) != set(tps):
                raise ValueError(
                    f"If {what} contains specific offsets, you must specify all TopicPartitions.\n"
                    "Use -1 for latest, -2 for earliest.\n"
                    f"Specified: {_names(spec.offsets)} Assigned: {_names(tps)}"
                )
            out = dict(spec.offsets)
            earliest = [tp for tp, o in out.items() if o == EARLIEST]
            latest = [tp for tp, o in out.items() if o == LATEST]
            out.update(self.earliest(earliest))
            if not (streaming and starting):
                out.update(self.latest(latest))
            for tp, o in out.items():
                if o < LATEST:
                    raise ValueError(
                        f"{what} for {tp[0]}-{tp[1]} is {o}: use an offset >= 0, -1 (latest) or -2 (earliest)"
                    )
            return out
        # timestamps
        if spec.kind == "timestamp":
            stamps = dict.fromkeys(tps, spec.timestamp)
        else:
            if set(spec.offsets) != set(tps):
                option = "startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp"
                raise ValueError(
                    f"If {option} contains specific offsets, you must specify all TopicPartitions.\n"
                    f"Specified: {_names(spec.offsets)} Assigned: {_names(tps)}"
                )
            stamps = dict(spec.offsets)
        for tp, ts in stamps.items():
            if ts < 0:
                raise ValueError(f"The timestamp for {tp[0]}-{tp[1]} must be >= 0, not {ts}")
        found = self.list_offsets(stamps)
        out = {}
        missing = []
        for tp, off in found.items():
            if off >= 0:
                out[tp] = off
            elif starting and not self.options.no_match_latest:
                raise ValueError(
                    f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and timestamp {stamps[tp]}."
                )
            else:
                missing.append(tp)
        if missing:
            if streaming and starting:
                out.update(dict.fromkeys(missing, LATEST))
            else:
                out.update(self.latest(missing))
        return out


def check_range(tp: TopicPartition, start: int, end: int) -> None:
    """A planned batch range must not begin after it ends (Spark's Kafka source's message)."""
    if start > end:
        raise ValueError(
            f"Beginning offset {start} is after the ending offset {end} for topic {tp[0]} partition {tp[1]}. "
            "You either provided an invalid fromOffset, or the Kafka topic has been damaged"
        )


def _names(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"
