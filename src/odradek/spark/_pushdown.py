"""Filter pushdown of batch reads: ``topic``, ``partition``, ``offset`` and ``timestamp``
predicates turned into per-partition offset ranges, on the driver, when the query is planned.

PySpark (4.1+) hands :meth:`DataSourceReader.pushFilters` the query's conjuncts that compare one
column with literals (``=``, ``<=>``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, ``IS [NOT] NULL``, string
prefix / suffix / contains, and ``NOT`` of those; ``BETWEEN`` arrives as ``>=`` and ``<=``).  What
the source does with them (:class:`Pushdown`):

* ``topic``, ``partition`` and ``offset`` predicates are applied exactly -- only the partitions
  and offsets they allow are planned -- so the source takes them and Spark does not evaluate them
  again (they disappear from the ``Filter`` above the scan in ``explain()``).  ``offset IN (...)``
  becomes one range per run of consecutive offsets (over 64 values: one range from the least to
  the largest, the predicate left to Spark).
* ``timestamp`` predicates narrow the offset ranges but are handed back to Spark, which applies
  them to the rows read: a pushed timestamp bound only ever reads a superset of the rows it
  selects.  A lower bound ``L`` becomes the start offset ListOffsets(``L``) gives -- the first
  offset whose record's timestamp is ``>= L``, found through the time index, whose entries carry
  the largest timestamp so far, so it is right whether or not timestamps increase along the log
  (CreateTime comes from the producers).  An upper bound ``U`` ends the range only where no later
  record can be older: on a topic with ``message.timestamp.type=LogAppendTime``, whose timestamps
  the broker assigns in log order, at ListOffsets(``U + 1``).  On a CreateTime topic a later record
  may always be older, and nothing the broker answers bounds the timestamps after an offset from
  below, so an upper bound there reads to the end of the range.
* Everything else (``NOT``, predicates on ``key``, ``value``, ``headers``, ...) goes back to Spark.

The bounds are intersected with what ``startingOffsets`` / ``endingOffsets`` and the timestamp
options give; an empty intersection plans nothing.  Timestamps are Spark's (microseconds), records'
are milliseconds: ``timestamp >= t`` holds for a record of ``ms`` when ``ms * 1000 >= t``.

PySpark 4.3 asks for pushdown only with ``spark.sql.python.filterPushdown.enabled=true``, and
fails every read of a source whose reader defines ``pushFilters`` when it is off
(DATA_SOURCE_PUSHDOWN_DISABLED).  The reader with ``pushFilters`` is therefore chosen only where
Spark plans with pushdown (:func:`pushdown_enabled`).
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Pushdown", "intersect", "push_filters", "pushdown_enabled"]

TopicPartition = tuple[str, int]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_US = _dt.timedelta(microseconds=1)
#: the PySpark worker that plans a read without asking for pushdown, and the one that asks
_PLAN_WORKER = "pyspark.sql.worker.plan_data_source_read"
#: ``offset IN (...)`` with more values than this is read as one range from the least to the
#: largest, Spark applying the predicate (not a task per run of offsets)
_MAX_OFFSET_VALUES = 64
_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"


def pushdown_enabled(depth: int = 12) -> bool:
    """Whether the PySpark worker calling ``DataSource.reader`` plans with filter pushdown.

    PySpark creates the reader in one of two planner workers and tells neither the reader nor the
    data source whether ``spark.sql.python.filterPushdown.enabled`` is on: the pushdown worker calls
    ``pushFilters``; the other worker holds the setting in a local variable ``enable_pushdown`` and
    refuses a reader defining ``pushFilters`` when it is false.  This looks up the calling frames for
    either; anywhere else (a test calling ``reader()``, another PySpark) it answers False, and the
    reader without ``pushFilters`` -- which every PySpark accepts -- is used."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        module = frame.f_globals.get("__name__")
        if module == _PUSHDOWN_WORKER:
            return True
        if module == _PLAN_WORKER and "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _micros(value: Any) -> int | None:
    """A timezone-aware datetime as microseconds since the epoch (None for anything else: a naive
    datetime's zone is unknown, so it is not used)."""
    if isinstance(value, _dt.datetime) and value.tzinfo is not None:
        return (value - _EPOCH) // _US
    return None


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


@dataclass(frozen=True)
class _TopicTest:
    """A predicate on the topic name (picklable, unlike a lambda)."""

    op: str
    value: str

    def __call__(self, topic: str) -> bool:
        v = self.value
        if self.op == "startswith":
            return topic.startswith(v)
        if self.op == "endswith":
            return topic.endswith(v)
        if self.op == "contains":
            return v in topic
        if self.op == ">":
            return topic > v
        if self.op == ">=":
            return topic >= v
        if self.op == "<":
            return topic < v
        return topic <= v


@dataclass
class Pushdown:
    """What the pushed filters allow; None is "no constraint".  Offsets: ``[offset_lo, offset_hi)``
    and, from ``=`` / ``IN``, a set of values; timestamps (ms, both ends included)."""

    topics: set[str] | None = None
    topic_tests: list[_TopicTest] = field(default_factory=list)
    partitions: set[int] | None = None
    partition_lo: int | None = None
    partition_hi: int | None = None  # inclusive
    offset_lo: int | None = None
    offset_hi: int | None = None  # exclusive
    offsets: set[int] | None = None
    ts_lo: int | None = None  # ms, inclusive
    ts_hi: int | None = None  # ms, inclusive
    empty: bool = False  # a contradiction (a = 1 AND a = 2, a NULL test on a non-null column)
    #: the filters taken, for the log and explain
    described: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        """Whether any pushed filter narrows the read."""
        return self.empty or any(
            v is not None
            for v in (self.topics, self.partitions, self.partition_lo, self.partition_hi, self.offset_lo,
                      self.offset_hi, self.offsets, self.ts_lo, self.ts_hi)
        ) or bool(self.topic_tests)

    # -- what the filters allow ----------------------------------------------------------------------
    def allows_topic(self, topic: str) -> bool:
        """Whether records of ``topic`` can pass the pushed filters."""
        if self.empty or (self.topics is not None and topic not in self.topics):
            return False
        return all(test(topic) for test in self.topic_tests)

    def allows_partition(self, tp: TopicPartition) -> bool:
        """Whether records of ``tp`` can pass the pushed filters."""
        p = tp[1]
        if not self.allows_topic(tp[0]):
            return False
        if self.partitions is not None and p not in self.partitions:
            return False
        if self.partition_lo is not None and p < self.partition_lo:
            return False
        return not (self.partition_hi is not None and p > self.partition_hi)

    def offset_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """``[start, end)`` cut to the pushed offset predicates: the runs of offsets they allow."""
        lo = start if self.offset_lo is None else max(start, self.offset_lo)
        hi = end if self.offset_hi is None else min(end, self.offset_hi)
        if lo >= hi:
            return []
        if self.offsets is None:
            return [(lo, hi)]
        runs: list[tuple[int, int]] = []
        for o in sorted(v for v in self.offsets if lo <= v < hi):
            if runs and runs[-1][1] == o:
                runs[-1] = (runs[-1][0], o + 1)
            else:
                runs.append((o, o + 1))
        return runs

    # -- taking filters ------------------------------------------------------------------------------
    def _ints(self, values: Iterable[Any]) -> list[int] | None:
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int):
                return None
            out.append(v)
        return out

    def _restrict_set(self, current: set[Any] | None, values: Iterable[Any]) -> set[Any]:
        vals = set(values)
        return vals if current is None else current & vals

    def take(self, f: Any) -> tuple[bool, bool]:
        """Record what ``f`` allows.  Returns ``(used, exact)``: whether it narrows the read, and whether
        the source applies it exactly (so that Spark need not evaluate it again)."""
        from pyspark.sql.datasource import (
            EqualNullSafe,
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            In,
            IsNotNull,
            IsNull,
            LessThan,
            LessThanOrEqual,
            StringContains,
            StringEndsWith,
            StringStartsWith,
        )

        attr = getattr(f, "attribute", None)
        if not isinstance(attr, tuple) or len(attr) != 1:
            return False, False
        col = attr[0]
        if col not in ("topic", "partition", "offset", "timestamp"):
            return False, False
        if isinstance(f, (IsNull, IsNotNull)):
            if col == "timestamp":
                return False, False
            if isinstance(f, IsNull):  # topic, partition and offset are never null
                self.empty = True
            return True, True
        value = getattr(f, "value", None)
        if value is None:  # a comparison with NULL: Spark decides
            return False, False
        if isinstance(f, (EqualTo, EqualNullSafe)):
            op, values = "=", [value]
        elif isinstance(f, In):
            op, values = "in", list(value)
            if not values or any(v is None for v in values):
                return False, False
        elif isinstance(f, GreaterThan):
            op, values = ">", [value]
        elif isinstance(f, GreaterThanOrEqual):
            op, values = ">=", [value]
        elif isinstance(f, LessThan):
            op, values = "<", [value]
        elif isinstance(f, LessThanOrEqual):
            op, values = "<=", [value]
        elif isinstance(f, (StringStartsWith, StringEndsWith, StringContains)) and col == "topic":
            if not isinstance(value, str):
                return False, False
            kind = {StringStartsWith: "startswith", StringEndsWith: "endswith", StringContains: "contains"}[type(f)]
            self.topic_tests.append(_TopicTest(kind, value))
            return True, True
        else:
            return False, False
        if col == "topic":
            return self._take_topic(op, values)
        if col == "timestamp":
            return self._take_timestamp(op, values)
        ints = self._ints(values)
        if ints is None:
            return False, False
        if col == "partition":
            self._take_partition(op, ints)
        elif op == "in" and len(ints) > _MAX_OFFSET_VALUES:  # one range over them all, Spark picks
            self._take_offset(">=", [min(ints)])
            self._take_offset("<=", [max(ints)])
            return True, False
        else:
            self._take_offset(op, ints)
        return True, True

    def _take_topic(self, op: str, values: list[Any]) -> tuple[bool, bool]:
        if not all(isinstance(v, str) for v in values):
            return False, False
        if op in ("=", "in"):
            self.topics = self._restrict_set(self.topics, values)
            return True, True
        self.topic_tests.append(_TopicTest(op, values[0]))
        return True, True

    def _take_partition(self, op: str, values: list[int]) -> None:
        if op in ("=", "in"):
            self.partitions = self._restrict_set(self.partitions, values)
            return
        v = values[0]
        lo = v + 1 if op == ">" else v if op == ">=" else None
        hi = v - 1 if op == "<" else v if op == "<=" else None
        if lo is not None:
            self.partition_lo = lo if self.partition_lo is None else max(self.partition_lo, lo)
        if hi is not None:
            self.partition_hi = hi if self.partition_hi is None else min(self.partition_hi, hi)

    def _take_offset(self, op: str, values: list[int]) -> None:
        if op in ("=", "in"):
            self.offsets = self._restrict_set(self.offsets, values)
            return
        v = values[0]
        lo = v + 1 if op == ">" else v if op == ">=" else None
        hi = v if op == "<" else v + 1 if op == "<=" else None
        if lo is not None:
            self.offset_lo = lo if self.offset_lo is None else max(self.offset_lo, lo)
        if hi is not None:
            self.offset_hi = hi if self.offset_hi is None else min(self.offset_hi, hi)

    def _take_timestamp(self, op: str, values: list[Any]) -> tuple[bool, bool]:
        micros = [_micros(v) for v in values]
        if any(m is None for m in micros):
            return False, False
        us = [m for m in micros if m is not None]
        lo: int | None = None  # ms, inclusive
        hi: int | None = None
        if op in ("=", "in"):
            lo, hi = _ceil_div(min(us), 1000), max(us) // 1000
        elif op == ">=":
            lo = _ceil_div(us[0], 1000)
        elif op == ">":
            lo = us[0] // 1000 + 1
        elif op == "<=":
            hi = us[0] // 1000
        else:  # <
            hi = _ceil_div(us[0], 1000) - 1
        if lo is not None:
            self.ts_lo = lo if self.ts_lo is None else max(self.ts_lo, lo)
        if hi is not None:
            self.ts_hi = hi if self.ts_hi is None else min(self.ts_hi, hi)
        return True, False  # a superset: Spark applies it to the rows


def push_filters(pushdown: Pushdown, filters: Iterable[Any]) -> Iterable[Any]:
    """``pushFilters``: record every usable filter in ``pushdown``; yield those Spark must still
    apply (all but the exactly applied ones, the very objects given)."""
    for f in filters:
        used, exact = pushdown.take(f)
        if used:
            pushdown.described.append(f"{f!r}" + ("" if exact else " (bound; Spark re-applies it)"))
        if not exact:
            yield f


def intersect(
    pushdown: Pushdown | None,
    tps: list[TopicPartition],
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    list_offsets: Callable[[Mapping[TopicPartition, int]], Mapping[TopicPartition, int]],
    log_append_time: Callable[[list[TopicPartition]], set[TopicPartition]],
) -> list[tuple[TopicPartition, int, int]]:
    """The ``(tp, start, end)`` ranges to read: the option-resolved ``[start, end)`` of each partition
    narrowed by the pushed filters.  ``list_offsets({tp: ms})`` answers ListOffsets by timestamp (the
    first offset whose timestamp is >= ms, -1 for none); ``log_append_time(tps)`` says which partitions'
    timestamps the broker assigned in log order."""
    if pushdown is None:
        return [(tp, start[tp], end[tp]) for tp in tps]
    tps = [tp for tp in tps if pushdown.allows_partition(tp)]
    lo = dict(start)
    hi = dict(end)
    if pushdown.ts_lo is not None and pushdown.ts_hi is not None and pushdown.ts_lo > pushdown.ts_hi:
        return []
    live = [tp for tp in tps if lo[tp] < hi[tp]]
    if pushdown.ts_lo is not None and pushdown.ts_lo > 0 and live:
        found = list_offsets(dict.fromkeys(live, pushdown.ts_lo))
        for tp in live:
            off = found.get(tp, -1)
            lo[tp] = hi[tp] if off < 0 else max(lo[tp], off)
        live = [tp for tp in live if lo[tp] < hi[tp]]
    if pushdown.ts_hi is not None and live:
        if pushdown.ts_hi < 0:
            cut = log_append_time(live)
            for tp in cut:  # every broker-assigned timestamp is >= 0
                hi[tp] = lo[tp]
        else:
            cut = log_append_time(live)
            if cut:
                found = list_offsets(dict.fromkeys(sorted(cut), pushdown.ts_hi + 1))
                for tp in cut:
                    off = found.get(tp, -1)
                    if off >= 0:
                        hi[tp] = min(hi[tp], off)
    out = []
    for tp in tps:
        for s, e in pushdown.offset_ranges(lo[tp], hi[tp]):
            out.append((tp, s, e))
    return out
