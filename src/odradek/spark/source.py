"""The ``odradek`` Python data source: batch and streaming reads and writes.

This module imports pyspark; :mod:`odradek.spark` imports it only when asked
(:func:`odradek.spark.register`).  See :mod:`odradek.spark` for usage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek.client import ADMIN_DEFAULTS

from ._offsets import (
    OffsetRange,
    OffsetReader,
    check_range,
    from_json_offsets,
    plan_ranges,
    rate_limit,
    split_ranges,
    to_json_offsets,
)
from ._options import (
    EARLIEST,
    LATEST,
    SinkOptions,
    SourceOptions,
    is_offline,
    parse_sink_options,
    parse_source_options,
)
from ._pushdown import Pushdown, intersect, push_filters, pushdown_enabled
from ._typed import (
    SinkColumn,
    TypedColumn,
    TypedOptions,
    apply_typed,
    encode_typed,
    resolve_typed,
    resolve_typed_sink,
)

if TYPE_CHECKING:
    from ._offline import OfflineOptions, OfflineRange
    from ._table_tail import TableSplit

# The executors' read path (:mod:`._fetch`), the offline read (:mod:`._offline`), table + tail
# (:mod:`._table_tail`) and the sink (:mod:`._write`) are imported where they are used: Spark's
# planner workers import this module to plan a read (schema, filters, partitions), and each of
# them pays for every import once per process.

__all__ = [
    "OdradekBatchReader",
    "OdradekCommitMessage",
    "OdradekDataSource",
    "OdradekOfflineReader",
    "OdradekPartition",
    "OdradekPushdownBatchReader",
    "OdradekPushdownOfflineReader",
    "OdradekStreamReader",
    "OdradekStreamWriter",
    "OdradekTableTailReader",
    "OdradekWriter",
    "source_schema",
]

log = logging.getLogger(__name__)

_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(
    include_headers: bool = False, typed: tuple[TypedColumn, ...] = (), typed_options: TypedOptions | None = None
) -> StructType:
    """The fixed columns of Spark's Kafka source; with ``keyFormat`` / ``valueFormat``, the key
    or value a struct of its schema (and, PERMISSIVE, the corrupt-record column last)."""
    types: dict[str, Any] = {}
    if typed:
        from pyspark.sql.pandas.types import from_arrow_type

        types = {c.part: from_arrow_type(c.arrow_type) for c in typed}
    fields = [
        StructField("key", types.get("key", BinaryType())),
        StructField("value", types.get("value", BinaryType())),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS))
    if typed and typed_options is not None and typed_options.mode == "PERMISSIVE":
        fields.append(StructField(typed_options.corrupt_column, BinaryType()))
    return StructType(fields)


class OdradekPartition(InputPartition):
    """One task's work: the records ``start <= offset < end`` of one partition, with all the
    executor needs (pickled to it)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        config: dict[str, Any],
        fail_on_data_loss: bool,
        include_headers: bool,
        poll_timeout_ms: int,
        fetch_bytes: int,
        typed: tuple[TypedColumn, ...] = (),
        typed_options: TypedOptions | None = None,
    ) -> None:
        super().__init__((topic, partition, start, end))
        self.typed = typed
        self.typed_options = typed_options
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.config = config
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.poll_timeout_ms = poll_timeout_ms
        self.fetch_bytes = fetch_bytes

    def __repr__(self) -> str:
        return f"OdradekPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _partition(r: OffsetRange, opts: SourceOptions, typed: tuple[TypedColumn, ...] = ()) -> OdradekPartition:
    return OdradekPartition(
        r.topic,
        r.partition,
        r.start,
        r.end,
        dict(opts.consumer_config),
        opts.fail_on_data_loss,
        opts.include_headers,
        opts.poll_timeout_ms,
        opts.fetch_bytes,
        typed,
        opts.typed,
    )


#: pushed-down filters that leave ranges smaller than this (records) get them read together, in
#: as few tasks as make this many records each: a task's fixed cost (scheduling, a Python worker,
#: the leader's connection or the segment files) is then paid once, not once per partition (see
#: :func:`_pack`)
PACKED_TASK_RECORDS = 100_000


class PackedPartitions(InputPartition):
    """One task reading several small offset ranges one after the other (see :func:`_pack`)."""

    def __init__(self, parts: list[InputPartition]) -> None:
        super().__init__(tuple(p.value for p in parts))
        self.parts = parts

    def __repr__(self) -> str:
        return f"PackedPartitions({', '.join(repr(p) for p in self.parts)})"


def _pack(
    parts: Sequence[InputPartition], size: Callable[[Any], int], records: int = PACKED_TASK_RECORDS
) -> list[InputPartition]:
    """``parts`` with the ranges of under ``records`` records (``size``) grouped, in order, into
    tasks of at least that many (the last group may hold fewer); larger ranges stay tasks of their
    own.  Used where pushdown narrowed the read: a 1 % query over three partitions is then one
    task, one wave on the executors, instead of three tasks of a few thousand records each."""
    out: list[InputPartition] = []
    group: list[InputPartition] = []
    total = 0
    for part in parts:
        n = size(part)
        if n >= records:
            out.append(part)
            continue
        group.append(part)
        total += n
        if total >= records:
            out.append(group[0] if len(group) == 1 else PackedPartitions(group))
            group, total = [], 0
    if group:
        out.append(group[0] if len(group) == 1 else PackedPartitions(group))
    return out


def _packs(pushdown: Pushdown | None, layout_asked: bool) -> bool:
    """Whether a read's tasks are packed (see :func:`_pack`): only where pushdown narrowed the
    read, and never when the options ask for a task layout (``minPartitions``,
    ``maxRecordsPerPartition``, the offline ``maxBytesPerPartition``): that layout is kept."""
    return pushdown is not None and pushdown.active and not layout_asked


def _layout_asked(opts: SourceOptions) -> bool:
    return bool(opts.min_partitions or opts.max_records_per_partition)


def _each(partition: InputPartition, read: Callable[[InputPartition], Iterator[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    """``read`` of a task: of each of its ranges in turn when it is packed."""
    if isinstance(partition, PackedPartitions):
        return (batch for part in partition.parts for batch in read(part))
    return read(partition)


def _offsets(part: OdradekPartition) -> int:
    return part.end - part.start


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, OdradekPartition):  # Spark's placeholder when nothing is planned
        return iter(())
    from ._fetch import read_range

    batches = read_range(
        partition.config,
        partition.topic,
        partition.partition,
        partition.start,
        partition.end,
        fail_on_data_loss=partition.fail_on_data_loss,
        include_headers=partition.include_headers,
        poll_timeout_ms=partition.poll_timeout_ms,
        fetch_bytes=partition.fetch_bytes,
    )
    typed, typed_options = partition.typed, partition.typed_options
    if not typed or typed_options is None:
        return batches
    return (apply_typed(b, typed, typed_options, partition.partition) for b in batches)


def _typed_topics(opts: SourceOptions) -> tuple[str, ...]:
    if opts.strategy == "assign":
        return tuple(dict.fromkeys(t for t, _ in opts.assignment))
    if opts.strategy == "subscribepattern":
        raise ValueError("keyFormat / valueFormat other than binary need one topic: use 'subscribe' or 'assign', not 'subscribePattern'")
    return opts.topics


def _resolve_typed(opts: SourceOptions) -> tuple[TypedColumn, ...]:
    """The typed columns' reader schemas: the subjects' latest, from the registry."""
    if not opts.typed.typed:
        return ()
    return resolve_typed(opts.typed, _typed_topics(opts), opts.admin_config)


def _check_schema(schema: StructType, opts: SourceOptions, typed: tuple[TypedColumn, ...] = ()) -> None:
    expected = source_schema(opts.include_headers, typed, opts.typed)
    if typed and [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
        raise ValueError(
            "The latest schema of the typed columns' subjects changed while the query was planned "
            f"(now ids {', '.join(f'{c.subject}: {c.schema_id}' for c in typed)}): define the DataFrame again"
        )
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
        raise ValueError("Kafka source has a fixed schema and cannot be set with a custom one")


class OdradekBatchReader(DataSourceReader):
    """``spark.read.format("odradek")``: offsets resolved once, when the query is planned."""

    #: the filters Spark pushed (:class:`OdradekPushdownBatchReader`); None without pushdown
    pushdown: Pushdown | None = None

    def __init__(self, options: SourceOptions, typed: tuple[TypedColumn, ...] = ()) -> None:
        self.options = options
        self.typed = typed

    def partitions(self) -> Sequence[InputPartition]:
        """The read's tasks: the topic partitions' offset ranges, resolved once from ``startingOffsets`` /
        ``endingOffsets`` (and the timestamp options), narrowed by the pushed filters, split by
        ``minPartitions`` and ``maxRecordsPerPartition``."""
        opts = self.options
        reader = OffsetReader(opts)
        try:
            tps = reader.topic_partitions()
            start = reader.resolve(opts.starting, tps, starting=True, streaming=False)
            end = reader.resolve(opts.ending, tps, starting=False, streaming=False)
            for tp in tps:
                check_range(tp, start[tp], end[tp])
            planned_ranges = intersect(
                self.pushdown, tps, start, end, reader.list_offsets, lambda tps: _log_append_time(reader, tps)
            )
        finally:
            reader.close()
        ranges = [OffsetRange(tp[0], tp[1], s, e) for tp, s, e in planned_ranges]
        if self.pushdown is not None and self.pushdown.active:
            log.info(
                "odradek: pushed %s; reading %s",
                "; ".join(self.pushdown.described),
                ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in ranges) or "nothing",
            )
        planned = split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
        parts = [_partition(r, opts, self.typed) for r in planned]
        return _pack(parts, _offsets) if _packs(self.pushdown, _layout_asked(opts)) else parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch one task's offset ranges from their leaders, as Arrow record batches of the source's columns."""
        return _each(partition, _read)


class OdradekPushdownBatchReader(OdradekBatchReader):
    """The batch reader where Spark plans with filter pushdown (see :mod:`odradek.spark._pushdown`)."""

    def __init__(self, options: SourceOptions, typed: tuple[TypedColumn, ...] = ()) -> None:
        super().__init__(options, typed)
        self.pushdown = Pushdown()

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
        """Take the ``topic``, ``partition`` and ``offset`` predicates (applied exactly), use the
        ``timestamp`` ones as bounds of the offset ranges, and hand Spark back every filter but the
        exactly applied ones."""
        assert self.pushdown is not None
        return list(push_filters(self.pushdown, filters))


def _log_append_time(reader: OffsetReader, tps: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """The partitions of ``tps`` whose topic has ``message.timestamp.type=LogAppendTime`` (none when
    the configs cannot be described: no range is then cut by an upper timestamp bound)."""
    from odradek.client.admin import ConfigResource

    topics = sorted({t for t, _ in tps})
    try:
        described = reader.admin.describe_configs(
            [ConfigResource("topic", t) for t in topics], keys=["message.timestamp.type"], include_synonyms=False
        )
    except Exception as exc:  # no cut then: never a wrong answer
        log.info("odradek: cannot describe the topics' timestamp type (%s): upper timestamp bounds not pushed", exc)
        return set()
    append = set()
    for resource, entries in described.items():
        entry = entries.get("message.timestamp.type")
        if entry is not None and entry.value == "LogAppendTime":
            append.add(resource.name)
    return {tp for tp in tps if tp[0] in append}


class OdradekTablePartition(InputPartition):
    """One task of a table + tail read's table side: data files of a pinned snapshot."""

    def __init__(self, split: TableSplit) -> None:
        super().__init__((split.topic, split.snapshot_id, tuple(t.file.file_path for t in split.tasks)))
        self.split = split

    def __repr__(self) -> str:
        s = self.split
        return f"OdradekTablePartition({s.topic} snapshot {s.snapshot_id}, {len(s.tasks)} files)"


class OdradekTableTailReader(DataSourceReader):
    """``option("source", "table+tail")``: the topic's Iceberg table (one snapshot) for what it
    holds, the log read_committed from the snapshot's offsets on (:mod:`odradek.spark._table_tail`)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """The table's data files in Spark partitions, then the log's ranges past the table's offsets
        (split by ``minPartitions`` and ``maxRecordsPerPartition``)."""
        from ._table_tail import plan_table_tail

        opts = self.options
        reader = OffsetReader(opts)
        try:
            plan = plan_table_tail(opts, reader)
        finally:
            reader.close()
        log.info(
            "odradek table+tail: %d table splits; the log from %s",
            len(plan.splits),
            ", ".join(f"{t}-{p} {o}" for (t, p), o in sorted(plan.boundary.items())) or "nothing",
        )
        tail = split_ranges(plan.tail, opts.min_partitions, opts.max_records_per_partition)
        return [*(OdradekTablePartition(s) for s in plan.splits), *(_partition(r, opts) for r in tail)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """A table split's rows, or a log range fetched read_committed, as the source's columns."""
        if isinstance(partition, OdradekTablePartition):
            from ._table_tail import read_table_split

            return read_table_split(partition.split)
        return _read(partition)


class OdradekOfflinePartition(InputPartition):
    """One task of an offline read: an :class:`~odradek.spark._offline.OfflineRange` and how to
    read it."""

    def __init__(self, r: OfflineRange, include_headers: bool, fail_on_data_loss: bool, stop_at_corruption: bool) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))
        self.range = r
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.stop_at_corruption = stop_at_corruption

    def __repr__(self) -> str:
        r = self.range
        return f"OdradekOfflinePartition({r.topic}-{r.partition} [{r.start}, {r.end}) in {r.directory})"


def _offline_offsets(part: OdradekOfflinePartition) -> int:
    return part.range.end - part.range.start


class OdradekOfflineReader(DataSourceReader):
    """``spark.read.format("odradek").option("path", DIR)``: partitions read from their segment
    files, with no broker (:mod:`odradek.spark._offline`); offsets resolved from the files when
    the query is planned."""

    #: the filters Spark pushed (:class:`OdradekPushdownOfflineReader`); None without pushdown
    pushdown: Pushdown | None = None

    def __init__(self, options: OfflineOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """The read's tasks: ranges of the partitions' segment files found under ``path`` / ``logDirs``, at
        most ``maxBytesPerPartition`` of whole segments each, narrowed by the pushed filters."""
        from ._offline import plan_offline

        opts = self.options
        parts = [
            OdradekOfflinePartition(r, opts.source.include_headers, opts.source.fail_on_data_loss, opts.stop_at_corruption)
            for r in plan_offline(opts, self.pushdown)
        ]
        layout_asked = _layout_asked(opts.source) or opts.max_bytes_per_partition is not None
        return _pack(parts, _offline_offsets) if _packs(self.pushdown, layout_asked) else parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one task's ranges from the segment files, as Arrow record batches (nothing for Spark's
        placeholder when nothing was planned)."""
        return _each(partition, self._read_one)

    def _read_one(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OdradekOfflinePartition):  # Spark's placeholder when nothing is planned
            return iter(())
        from ._offline import read_offline

        r = partition.range
        return read_offline(
            r.directory,
            r.topic,
            r.partition,
            r.start,
            r.end,
            include_headers=partition.include_headers,
            fail_on_data_loss=partition.fail_on_data_loss,
            stop_at_corruption=partition.stop_at_corruption,
        )


class OdradekPushdownOfflineReader(OdradekOfflineReader):
    """The offline reader where Spark plans with filter pushdown: the same filters as the network
    read's, timestamps resolved through the segment files' time indexes."""

    def __init__(self, options: OfflineOptions) -> None:
        super().__init__(options)
        self.pushdown = Pushdown()

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
        """As :meth:`OdradekPushdownBatchReader.pushFilters`."""
        assert self.pushdown is not None
        return list(push_filters(self.pushdown, filters))


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("odradek")``.

    ``initialOffset``: ``startingOffsets`` resolved (-1 per partition for "latest", see
    :mod:`odradek.spark._offsets`).  ``latestOffset(start, limit)``: the current log ends
    (or the ``Trigger.AvailableNow`` target), rate-limited by ``ReadMaxRows`` (from
    ``maxOffsetsPerTrigger``).  ``partitions(start, end)``: a pure function of its offsets.
    """

    def __init__(self, options: SourceOptions, typed: tuple[TypedColumn, ...] = ()) -> None:
        self.options = options
        self.typed = typed
        self._offsets = OffsetReader(options)
        self._target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow
        self._latest: dict[tuple[str, int], int] | None = None  # for progress reports
        self._initial: dict | None = None
        self._last_trigger_ms = 0.0  # for minOffsetsPerTrigger / maxTriggerDelay

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_offsets"] = OffsetReader(self.options)  # never ship a live client
        return state

    def initialOffset(self) -> dict:
        """The first micro-batch's start: ``startingOffsets`` resolved for every partition, as Spark's Kafka
        offset JSON; the same answer for the rest of the run."""
        # Spark asks again when it runs the first batch: answer the same within this run
        if self._initial is None:
            tps = self._offsets.topic_partitions()
            offsets = self._offsets.resolve(self.options.starting, tps, starting=True, streaming=True)
            self._initial = to_json_offsets(offsets)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as Spark's ReadMaxRows, or ReadAllAvailable without it."""
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: fix the current log ends as the run's target."""
        self._target = self._offsets.latest(self._offsets.topic_partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The next micro-batch's end offsets: the log ends (or the AvailableNow target), rate-limited by
        ``limit``; ``start`` itself while ``minOffsetsPerTrigger`` holds the batch back."""
        begin = from_json_offsets(start)
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = self._offsets.latest(self._offsets.topic_partitions())
        self._latest = latest
        minimum = self.options.min_offsets_per_trigger if self._target is None else None
        if isinstance(limit, ReadMaxRows) or minimum is not None:
            resolved = {}
            earliest_needed = [tp for tp in latest if begin.get(tp) == EARLIEST]
            earliest = self._offsets.earliest(earliest_needed) if earliest_needed else {}
            for tp, end in latest.items():
                b = begin.get(tp, 0)
                resolved[tp] = end if b == LATEST else earliest[tp] if b == EARLIEST else b
            if minimum is not None and self._delay_batch(minimum, resolved, latest):
                return start
            end_offsets = rate_limit(limit.max_rows, resolved, latest) if isinstance(limit, ReadMaxRows) else latest
        else:
            end_offsets = latest
        out = to_json_offsets(end_offsets)
        if out == start:
            return start  # the same JSON text when nothing is new
        self._last_trigger_ms = time.time() * 1000
        return out

    def _delay_batch(self, minimum: int, start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int]) -> bool:
        """Spark's ``minOffsetsPerTrigger``: no batch while fewer new offsets than that are
        there, unless ``maxTriggerDelay`` has passed since the last batch (the first batch of a
        run is never delayed)."""
        available = sum(max(end - start.get(tp, end), 0) for tp, end in latest.items())
        if available >= minimum:
            return False
        waited = time.time() * 1000 - self._last_trigger_ms
        if waited >= self.options.max_trigger_delay_ms:
            return False
        log.debug("delaying the batch: %d new offsets < minOffsetsPerTrigger %d, %d ms since the last", available, minimum, waited)
        return True

    def reportLatestOffset(self) -> dict | None:
        """The log ends seen last, for the query's progress report (None before the first look)."""
        return to_json_offsets(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """A micro-batch's tasks between offsets ``start`` and ``end`` (the same offsets always give the same
        tasks: a replayed batch reads the same ranges)."""
        ranges = plan_ranges(from_json_offsets(start), from_json_offsets(end), self.options)
        return [_partition(r, self.options, self.typed) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch one task's offset range from its leader, as Arrow record batches of the source's columns."""
        return _read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: like Spark's Kafka source, offsets live in the checkpoint only."""

    def stop(self) -> None:
        """Close the driver's client (the query stopped)."""
        self._offsets.close()


@dataclass
class OdradekCommitMessage(WriterCommitMessage):
    """What a sink task reports to the driver: how many records it wrote, and whether an exactly-once task
    found its partition committed already and wrote nothing."""

    records: int = 0
    #: exactly-once: the partition had been committed by an earlier attempt and was not written
    skipped: bool = False


class _Writing:
    options: SinkOptions
    typed: tuple[SinkColumn, ...] = ()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Produce one task's rows (``value``, optional ``key``, ``topic``, ``headers``,
        ``partition``) and flush; the first delivery error fails the task (Spark retries it).  With
        ``exactlyOnce``: one transaction per task and micro-batch."""
        from ._write import write_batches, write_batches_exactly_once

        opts = self.options
        if self.typed:
            typed = self.typed
            iterator = (encode_typed(b, typed) for b in iterator)
        if not opts.exactly_once:
            return OdradekCommitMessage(write_batches(iterator, opts.producer_config, opts.topic))
        from pyspark import TaskContext

        task = TaskContext.get()
        batch = task.getLocalProperty("streaming.sql.batchId") if task is not None else None
        if task is None or batch is None:
            raise RuntimeError("the exactly-once sink runs in a streaming query's tasks only")
        assert opts.topic is not None and opts.transactional_id_prefix is not None
        written = write_batches_exactly_once(
            iterator, opts.producer_config, opts.topic, opts.transactional_id_prefix, int(batch), task.partitionId()
        )
        return OdradekCommitMessage(written or 0, skipped=written is None)


class OdradekWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("odradek")``: at-least-once, as Spark's Kafka sink."""

    def __init__(self, options: SinkOptions, typed: tuple[SinkColumn, ...] = ()) -> None:
        self.options = options
        self.typed = typed

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job succeeded: log how many records its tasks wrote (they were acknowledged already)."""
        written = sum(m.records for m in messages if isinstance(m, OdradekCommitMessage))
        log.info("odradek sink: %d records written", written)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records already acknowledged stay in the log (Kafka has no rollback outside transactions)."""


class OdradekStreamWriter(_Writing, DataSourceStreamArrowWriter):
    """``df.writeStream.format("odradek")``: at-least-once, as Spark's Kafka sink; exactly once
    with ``exactlyOnce=true`` (one transaction per task, see ``write_batches_exactly_once``)."""

    def __init__(self, options: SinkOptions, typed: tuple[SinkColumn, ...] = ()) -> None:
        self.options = options
        self.typed = typed

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Micro-batch ``batchId`` succeeded: log how many records its tasks wrote (and, exactly once, how
        many partitions an earlier attempt had committed)."""
        written = sum(m.records for m in messages if isinstance(m, OdradekCommitMessage))
        skipped = sum(1 for m in messages if isinstance(m, OdradekCommitMessage) and m.skipped)
        if skipped:
            log.info("odradek sink: batch %d, %d records written, %d partitions already committed", batchId, written, skipped)
        else:
            log.info("odradek sink: batch %d, %d records written", batchId, written)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At least once: records already acknowledged stay in the log (Kafka has no rollback
        outside transactions).  Exactly once: each task committed its transaction or left it to
        be aborted by the next attempt's fencing (or by ``transaction.timeout.ms``)."""


def _sink_typed(schema: StructType, opts: SinkOptions) -> tuple[SinkColumn, ...]:
    """Check the sink's columns; typed key / value columns get their schema ids (on the driver)."""
    from ._write import check_sink_schema

    typed = opts.typed
    formats = {"key": typed.key_format, "value": typed.value_format}
    untyped = StructType([f for f in schema.fields if formats.get(f.name, "binary") == "binary"])
    if "value" in schema.fieldNames() and formats["value"] != "binary":
        untyped = StructType([*untyped.fields, StructField("value", BinaryType())])
    check_sink_schema(untyped, opts.topic)
    if not typed.typed:
        return ()
    from pyspark.sql.pandas.types import to_arrow_type

    types = {f.name: to_arrow_type(f.dataType) for f in schema.fields if f.name in ("key", "value")}
    admin = {k: v for k, v in opts.producer_config.items() if k in ADMIN_DEFAULTS}
    return resolve_typed_sink(typed, opts.topic, types, admin)


class OdradekDataSource(DataSource):
    """Spark's Kafka source and sink, for Odradek (and any Kafka-protocol broker): format
    ``"odradek"``, the same options and columns as ``format("kafka")``."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("odradek")``."""
        return "odradek"

    def schema(self) -> StructType:
        """The source's columns: ``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
        ``timestampType`` (and ``headers`` with ``includeHeaders``); typed key / value structs with
        ``keyFormat`` / ``valueFormat``."""
        if is_offline(self.options):
            from ._offline import parse_offline_options

            return source_schema(parse_offline_options(self.options).source.include_headers)
        opts = parse_source_options(self.options, streaming=None)
        return source_schema(opts.include_headers, _resolve_typed(opts), opts.typed)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader for these options: from the brokers, or from segment files with ``path`` /
        ``logDirs``; ValueError for invalid options or a custom schema.  Where Spark plans the read
        with filter pushdown (``spark.sql.python.filterPushdown.enabled=true``), a reader that takes
        the pushed filters (:mod:`odradek.spark._pushdown`)."""
        if is_offline(self.options):
            from ._offline import parse_offline_options

            offline = parse_offline_options(self.options)
            _check_schema(schema, offline.source)
            if pushdown_enabled():
                return OdradekPushdownOfflineReader(offline)
            return OdradekOfflineReader(offline)
        opts = parse_source_options(self.options, streaming=False)
        if opts.source == "table+tail":
            _check_schema(schema, opts)
            return OdradekTableTailReader(opts)
        typed = _resolve_typed(opts)
        _check_schema(schema, opts, typed)
        if pushdown_enabled():
            return OdradekPushdownBatchReader(opts, typed)
        return OdradekBatchReader(opts, typed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The streaming reader for these options; ValueError for invalid options, a custom schema, or an
        offline ``path``."""
        if is_offline(self.options):
            raise ValueError(
                "The offline read (option 'path' or 'logDirs': segment files, no broker) is a batch read: "
                "use spark.read, not spark.readStream"
            )
        opts = parse_source_options(self.options, streaming=True)
        typed = _resolve_typed(opts)
        _check_schema(schema, opts, typed)
        return OdradekStreamReader(opts, typed)

    def writer(self, schema: StructType, overwrite: bool) -> OdradekWriter:
        """The batch writer for these options (``mode("append")`` only: ValueError for Overwrite, and for
        ``exactlyOnce``, which is for streaming writes)."""
        if overwrite:
            raise ValueError(
                "Save mode Overwrite not allowed for Kafka: a topic is append-only. Use .mode(\"append\"), "
                "the only save mode a Python data source can accept (Spark itself refuses ErrorIfExists, "
                "its default, and Ignore for them)."
            )
        opts = parse_sink_options(self.options)
        if opts.exactly_once:
            raise ValueError(
                "exactlyOnce is for streaming writes (df.writeStream), whose micro-batches it commits once each"
            )
        typed = _sink_typed(schema, opts)
        return OdradekWriter(opts, typed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> OdradekStreamWriter:
        """The streaming writer for these options: at least once, or one transaction per task with
        ``exactlyOnce=true``."""
        opts = parse_sink_options(self.options)
        typed = _sink_typed(schema, opts)
        return OdradekStreamWriter(opts, typed)
