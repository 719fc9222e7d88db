"""Filter pushdown's planning (:mod:`odradek.spark._pushdown`), without Spark or a broker: random
logs (timestamps that go backwards now and then, LogAppendTime partitions whose timestamps never
do) and random conjunctions of predicates, checked against the predicates evaluated record by
record.  Every record the query selects must be in a planned range, every record in a planned
range must pass the filters the source took, and Spark must get back every filter it did not take.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

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
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from odradek.spark._pushdown import Pushdown, intersect, push_filters, pushdown_enabled

UTC = dt.UTC
TS0 = 1_700_000_000_000
TOPICS = ("a", "b")
PARTITIONS = 3


def _dt(micros: int, aware: bool = True) -> dt.datetime:
    value = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=micros)
    return value if aware else value.replace(tzinfo=None)


@st.composite
def logs(draw: Any) -> dict[tuple[str, int], list[int]]:
    """Per partition, its records' timestamps (ms) by offset; partitions of topic "b" are LogAppendTime."""
    out = {}
    for topic in TOPICS:
        for p in range(PARTITIONS):
            n = draw(st.integers(0, 25))
            ts, stamps = TS0, []
            for _ in range(n):
                step = draw(st.integers(0, 5_000))
                if topic == "a" and draw(st.integers(0, 4)) == 0:
                    step = -draw(st.integers(0, 20_000))  # a producer's clock went back
                ts = max(ts + step, 0)
                stamps.append(ts)
            out[(topic, p)] = stamps
    return out


def _ts_value(draw: Any) -> Any:
    micros = draw(st.integers(TS0 * 1000 - 30_000_000, TS0 * 1000 + 200_000_000))
    if draw(st.integers(0, 2)) == 0:
        micros = micros // 1_000_000 * 1_000_000  # on whole seconds: often a record's timestamp
    return _dt(micros, aware=draw(st.integers(0, 15)) != 0)


@st.composite
def filters(draw: Any) -> list[Any]:
    out: list[Any] = []
    for _ in range(draw(st.integers(0, 5))):
        col = draw(st.sampled_from(["topic", "partition", "offset", "timestamp", "key"]))
        kind = draw(st.sampled_from(["=", "<=>", "<", "<=", ">", ">=", "in", "notnull", "null", "not", "prefix", "suffix", "contains"]))
        if col == "topic":
            value: Any = draw(st.sampled_from(["a", "b", "c", ""]))
        elif col == "partition":
            value = draw(st.integers(-1, PARTITIONS + 1))
        elif col == "offset":
            value = draw(st.integers(-2, 30))
        elif col == "timestamp":
            value = _ts_value(draw)
        else:
            value = b"k"
        attr = (col,)
        if kind == "in":
            values = [value] + [
                _ts_value(draw) if col == "timestamp" else value if col in ("topic", "key") else draw(st.integers(-2, 30))
                for _ in range(draw(st.integers(0, 3)))
            ]
            out.append(In(attr, tuple(values)))
        elif kind == "notnull":
            out.append(IsNotNull(attr))
        elif kind == "null":
            out.append(IsNull(attr))
        elif kind == "not":
            out.append(Not(EqualTo(attr, value)))
        elif kind in ("prefix", "suffix", "contains"):
            cls_s = {"prefix": StringStartsWith, "suffix": StringEndsWith, "contains": StringContains}[kind]
            out.append(cls_s(attr, draw(st.sampled_from(["a", "b", "", "x"]))))
        else:
            cls = {"=": EqualTo, "<=>": EqualNullSafe, "<": LessThan, "<=": LessThanOrEqual, ">": GreaterThan, ">=": GreaterThanOrEqual}[kind]
            out.append(cls(attr, value))
    return out


def _column(record: dict[str, Any], col: str) -> Any:
    if col == "timestamp":
        return record["timestamp"] * 1000  # Spark's microseconds
    return record[col]


def _literal(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)  # a naive value's meaning is Spark's
        return (aware - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    return value


def holds(f: Any, record: dict[str, Any]) -> bool:
    """``f`` evaluated on one record, as Spark would (no nulls: every column here has a value)."""
    if isinstance(f, Not):
        return not holds(f.child, record)
    col = f.attribute[0]
    v = _column(record, col)
    if isinstance(f, IsNotNull):
        return True
    if isinstance(f, IsNull):
        return False
    if isinstance(f, StringStartsWith):
        return isinstance(v, str) and v.startswith(f.value)
    if isinstance(f, StringEndsWith):
        return isinstance(v, str) and v.endswith(f.value)
    if isinstance(f, StringContains):
        return isinstance(v, str) and f.value in v
    if isinstance(f, In):
        return v in [_literal(x) for x in f.value]
    lit = _literal(f.value)
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return bool(v == lit)
    if isinstance(f, LessThan):
        return bool(v < lit)
    if isinstance(f, LessThanOrEqual):
        return bool(v <= lit)
    if isinstance(f, GreaterThan):
        return bool(v > lit)
    assert isinstance(f, GreaterThanOrEqual)
    return bool(v >= lit)


def _records(log: dict[tuple[str, int], list[int]]) -> list[dict[str, Any]]:
    return [
        {"topic": t, "partition": p, "offset": o, "timestamp": ts, "key": b"k"}
        for (t, p), stamps in sorted(log.items())
        for o, ts in enumerate(stamps)
    ]


def _plan(
    log: dict[tuple[str, int], list[int]], fs: list[Any], start: dict[tuple[str, int], int] | None = None
) -> tuple[list[tuple[tuple[str, int], int, int]], list[Any], list[dict[str, int]]]:
    pushdown = Pushdown()
    returned = list(push_filters(pushdown, fs))
    tps = sorted(log)
    lookups: list[dict[str, int]] = []

    def list_offsets(specs: Any) -> dict[tuple[str, int], int]:
        lookups.append(dict(specs))
        out = {}
        for tp, ts in specs.items():
            out[tp] = next((o for o, t in enumerate(log[tp]) if t >= ts), -1)
        return out

    def log_append_time(tps: list[tuple[str, int]]) -> set[tuple[str, int]]:
        return {tp for tp in tps if tp[0] == "b"}

    begin = start or dict.fromkeys(tps, 0)
    end = {tp: len(log[tp]) for tp in tps}
    return intersect(pushdown, tps, begin, end, list_offsets, log_append_time), returned, lookups


@given(logs(), filters())
def test_planned_ranges_hold_every_selected_record_and_only_what_taken_filters_allow(
    log: dict[tuple[str, int], list[int]], fs: list[Any]
) -> None:
    planned, returned, _ = _plan(log, fs)
    assert all(any(r is f for f in fs) for r in returned)  # the very objects Spark gave
    taken = [f for f in fs if not any(r is f for r in returned)]
    in_range: dict[tuple[str, int, int], int] = {}
    for (t, p), s, e in planned:
        assert s < e
        for o in range(s, e):
            in_range[(t, p, o)] = in_range.get((t, p, o), 0) + 1
    assert all(n == 1 for n in in_range.values()), "overlapping ranges"
    for rec in _records(log):
        key = (rec["topic"], rec["partition"], rec["offset"])
        if all(holds(f, rec) for f in fs):
            assert key in in_range, (rec, fs, planned)
        if key in in_range:
            assert all(holds(f, rec) for f in taken), (rec, taken)


@given(logs(), filters())
def test_without_filters_or_with_unusable_ones_everything_is_planned(
    log: dict[tuple[str, int], list[int]], fs: list[Any]
) -> None:
    unusable = [Not(f) for f in fs] + [EqualTo(("key",), b"k"), GreaterThan(("timestamp",), _dt(TS0 * 1000, aware=False))]
    planned, returned, lookups = _plan(log, unusable)
    assert returned == unusable
    assert not lookups
    assert planned == [(tp, 0, len(stamps)) for tp, stamps in sorted(log.items()) if stamps]


def test_timestamp_bounds_between_records_and_past_either_end() -> None:
    log = {("a", 0): [TS0, TS0 + 10, TS0 + 5, TS0 + 20], ("b", 0): [TS0, TS0 + 10, TS0 + 20, TS0 + 30]}
    us = lambda ms, extra=0: _dt(ms * 1000 + extra)  # noqa: E731
    # between records (a microsecond after TS0 + 10): "a" starts after the first record at or past it
    planned, returned, _ = _plan(log, [GreaterThanOrEqual(("timestamp",), us(TS0 + 10, 1))])
    assert planned == [(("a", 0), 3, 4), (("b", 0), 2, 4)]
    assert len(returned) == 1  # a bound: Spark applies it to the rows
    # an upper bound cuts the LogAppendTime partition only
    planned, _, _ = _plan(log, [LessThan(("timestamp",), us(TS0 + 10))])
    assert planned == [(("a", 0), 0, 4), (("b", 0), 0, 1)]
    # past the end / before the start
    planned, _, _ = _plan(log, [GreaterThan(("timestamp",), us(TS0 + 30))])
    assert planned == []
    planned, _, _ = _plan(log, [LessThan(("timestamp",), us(TS0))])
    assert planned == [(("a", 0), 0, 4)]
    planned, _, _ = _plan(log, [GreaterThan(("timestamp",), us(TS0 + 5)), LessThan(("timestamp",), us(TS0 + 5))])
    assert planned == []


def test_partition_offset_and_topic_predicates_are_taken_exactly() -> None:
    log = {(t, p): [TS0] * 10 for t in TOPICS for p in range(PARTITIONS)}
    fs = [
        In(("partition",), (0, 2)),
        EqualTo(("topic",), "a"),
        GreaterThanOrEqual(("offset",), 3),
        LessThan(("offset",), 8),
        In(("offset",), (1, 3, 4, 5, 7, 9)),
        IsNotNull(("offset",)),
    ]
    planned, returned, _ = _plan(log, fs)
    assert returned == []
    assert planned == [(("a", 0), 3, 6), (("a", 0), 7, 8), (("a", 2), 3, 6), (("a", 2), 7, 8)]
    planned, _, _ = _plan(log, [EqualTo(("partition",), 0), EqualTo(("partition",), 1)])
    assert planned == []
    many = In(("offset",), tuple(range(2, 200, 2)))  # too many runs for a task each: one range, Spark picks
    planned, returned, _ = _plan(log, [many, EqualTo(("partition",), 1), EqualTo(("topic",), "b")])
    assert planned == [(("b", 1), 2, 10)] and returned == [many]


def test_bounds_intersect_the_options_ranges() -> None:
    log = {("a", 0): [TS0 + i for i in range(10)]}
    planned, _, _ = _plan(log, [GreaterThanOrEqual(("timestamp",), _dt((TS0 + 2) * 1000))], start={("a", 0): 5})
    assert planned == [(("a", 0), 5, 10)]
    planned, _, _ = _plan(log, [GreaterThanOrEqual(("timestamp",), _dt((TS0 + 7) * 1000))], start={("a", 0): 5})
    assert planned == [(("a", 0), 7, 10)]


def test_outside_a_spark_planner_worker_no_pushdown_is_offered() -> None:
    assert pushdown_enabled() is False

    def planner(enabled: bool) -> bool:  # what PySpark's planner worker holds in its frame
        enable_pushdown = enabled  # noqa: F841
        return pushdown_enabled()

    def in_module(name: str) -> Any:
        return type(planner)(planner.__code__, {"__name__": name, "pushdown_enabled": pushdown_enabled})

    assert in_module("pyspark.sql.worker.plan_data_source_read")(False) is False
    assert in_module("pyspark.sql.worker.plan_data_source_read")(True) is True
    assert in_module("pyspark.sql.worker.data_source_pushdown_filters")(False) is True
    assert in_module("somewhere.else")(True) is False


def test_small_ranges_are_packed_into_tasks_of_a_minimum_size() -> None:
    from odradek.spark.source import OdradekPartition, PackedPartitions, _offsets, _pack

    def part(p: int, start: int, end: int) -> OdradekPartition:
        return OdradekPartition("t", p, start, end, {}, True, False, 1000, 1 << 20)

    def layout(parts: list[Any]) -> list[list[tuple[int, int, int]]]:
        return [
            [(x.partition, x.start, x.end) for x in (t.parts if isinstance(t, PackedPartitions) else [t])]
            for t in parts
        ]

    # three 1 % ranges: one task, in order
    assert layout(_pack([part(0, 0, 10), part(1, 5, 15), part(2, 0, 10)], _offsets, records=100)) == [
        [(0, 0, 10), (1, 5, 15), (2, 0, 10)]
    ]
    # a large range stays alone; small ones group until a task has ``records``; the rest is the last task
    assert layout(_pack([part(0, 0, 60), part(1, 0, 500), part(2, 0, 50), part(3, 0, 1), part(4, 0, 3)], _offsets, records=100)) == [
        [(1, 0, 500)],
        [(0, 0, 60), (2, 0, 50)],
        [(3, 0, 1), (4, 0, 3)],
    ]
    # every record range is kept exactly once
    many = [part(p, 0, p + 1) for p in range(40)]
    assert sorted(r for task in layout(_pack(many, _offsets, records=100)) for r in task) == sorted(
        (p, 0, p + 1) for p in range(40)
    )
    assert layout(_pack([], _offsets, records=100)) == []
