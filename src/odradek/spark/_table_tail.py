"""The "table + tail" batch read (``option("source", "table+tail")``): a topic's Iceberg table for
what it holds, the log for the rest, as one DataFrame of the source's columns.

A topic with ``odradek.iceberg.mode=key_value`` is appended to its Iceberg table by each
partition's leader (:mod:`odradek.tables.writer`); every snapshot's summary records, per Kafka
partition, the offset up to which the table holds it (``odradek.next-offset.<partition>``).  The
read pins one snapshot per topic when the query is planned and, per partition ``p`` whose
snapshot says ``N``:

* the table's rows of ``p`` below ``N`` (and within ``startingOffsets`` / ``endingOffsets``),
  read from the snapshot's data files by PyIceberg on the executors, the files bin-packed into
  Spark partitions;
* the log's records of ``p`` from ``N`` up to the ending offset, fetched read_committed as the
  normal read fetches them.

The snapshot is pinned before the ending offsets are listed, so the table never holds a record
the log's range also covers, and the log's range starts exactly where the snapshot ends: every
record once, whatever the writers and producers do meanwhile.  A partition the table has never
written is read from the log only (from its start); a log whose start offset moved past ``N``
(retention) lost the records in between (``failOnDataLoss``); a log whose start moved past
records the table holds is no loss -- the table has them.

Only committed records are returned: the table holds what a read_committed consumer sees, and
the log is read read_committed.  Rows from the table carry the topic's current
``message.timestamp.type`` as ``timestampType`` (the table does not keep each record's).

The catalog: the ``odradek.iceberg.*`` options, named and read as the broker's settings of the
same names; those not given come from the broker (DescribeConfigs of its settings, ``log.dirs``
for the default SQLite catalog under its first data dir) -- so a broker with the default catalog
on this machine needs none.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from odradek.errors import OdradekError

from ._arrow import arrow_schema
from ._dataloss import report_data_loss
from ._offsets import OffsetRange, OffsetReader, check_range
from ._options import CATALOG_OPTIONS, EARLIEST, LATEST, SourceOptions

__all__ = ["TablePlan", "TableSplit", "TableTailError", "plan_table_tail", "read_table_split"]

log = logging.getLogger(__name__)

#: the table's bytes per Spark partition, at most (Spark's spark.sql.files.maxPartitionBytes)
SPLIT_BYTES = 128 << 20
#: the columns of a key_value table the read needs
_TABLE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")


class TableTailError(OdradekError, ValueError):
    """The table + tail read cannot be planned: no catalog, no table for a topic, a table of another mode."""


@dataclass(frozen=True)
class TableSplit:
    """One Spark task's share of a topic's table: data files of one pinned snapshot, and per Kafka
    partition the offsets ``[lo, hi)`` of its rows to return."""

    topic: str
    snapshot_id: int
    metadata: Any  # pyiceberg TableMetadata
    metadata_location: str
    io_properties: dict[str, str]
    tasks: tuple[Any, ...]  # pyiceberg FileScanTasks
    bounds: dict[int, tuple[int, int]]
    timestamp_type: int
    include_headers: bool

    @property
    def size(self) -> int:
        return sum(t.file.file_size_in_bytes for t in self.tasks)


@dataclass(frozen=True)
class TablePlan:
    """What a table + tail read reads: table splits and the log's offset ranges."""

    splits: list[TableSplit] = field(default_factory=list)
    tail: list[OffsetRange] = field(default_factory=list)
    #: per topic-partition: the offset the pinned snapshot holds it up to (0: never written)
    boundary: dict[tuple[str, int], int] = field(default_factory=dict)


# -- the catalog ---------------------------------------------------------------------------------


def catalog_settings(given: Mapping[str, str], admin: Any) -> tuple[Any, Path | None]:
    """The catalog's settings (a :class:`odradek.settings.TableSettings`) and the data dir its
    default SQLite file is under: each ``odradek.iceberg.*`` option given wins, the others are the
    broker's settings (DescribeConfigs).  TableTailError when there is no catalog to open."""
    from odradek.settings import TableSettings

    values: dict[str, str | None] = {"odradek.iceberg.catalog.type": "sql", "odradek.iceberg.namespace": "odradek"}
    data_dir: Path | None = None
    explicit = "odradek.iceberg.catalog.uri" in given or given.get("odradek.iceberg.catalog.type") == "rest"
    try:
        broker, hidden = _broker_settings(admin)
        values.update(broker)
        dirs = values.pop("log.dirs", None) or values.pop("log.dir", None)
        if dirs:
            data_dir = Path(dirs.split(",")[0].strip())
    except Exception as exc:  # a broker that is not Odradek, or no DescribeConfigs permission
        if not explicit:
            raise TableTailError(
                "source=table+tail cannot find the Iceberg catalog: the broker's settings could not be described "
                f"({type(exc).__name__}: {exc}); give the catalog as options (odradek.iceberg.catalog.uri, "
                "odradek.iceberg.warehouse, odradek.iceberg.namespace; odradek.iceberg.catalog.type=rest for a REST catalog)"
            ) from None
        log.info("odradek table+tail: the broker's catalog settings could not be described (%s); using the options", exc)
    else:
        secret = [name for name in hidden if name not in given]
        if secret:
            raise TableTailError(
                f"source=table+tail: the broker's {', '.join(secret)} is sensitive and not described: give it as an option"
            )
    values.update(given)
    settings = TableSettings(
        catalog_type=str(values["odradek.iceberg.catalog.type"] or "sql").lower(),
        catalog_uri=values.get("odradek.iceberg.catalog.uri") or None,
        warehouse=values.get("odradek.iceberg.warehouse") or None,
        namespace=str(values["odradek.iceberg.namespace"] or "odradek"),
    )
    return settings, data_dir


def _broker_settings(admin: Any) -> tuple[dict[str, str | None], list[str]]:
    """The broker's catalog settings and data dirs (DescribeConfigs), and the names of those set
    but sensitive (their values not described)."""
    from odradek.client.admin import ConfigResource

    cluster = admin.describe_cluster()
    node = cluster.controller or cluster.brokers[0]
    described = admin.describe_configs(
        [ConfigResource("broker", str(node.id))], keys=[*CATALOG_OPTIONS, "log.dirs", "log.dir"], include_synonyms=False
    )
    out: dict[str, str | None] = {}
    hidden = []
    for entries in described.values():
        for name, entry in entries.items():
            if entry.is_sensitive and name in CATALOG_OPTIONS:
                hidden.append(name)
            elif entry.value is not None:
                out[name] = entry.value
    return out, hidden


def open_reader_catalog(given: Mapping[str, str], admin: Any, topics: Sequence[str] = ()) -> tuple[Any, str]:
    """The catalog (PyIceberg) and the namespace of the tables of ``topics``."""
    try:
        import pyiceberg  # noqa: F401
    except ImportError:
        raise TableTailError("source=table+tail reads the topic's Iceberg table through PyIceberg: pip install 'odradek[tables]'") from None
    from odradek.tables.catalog import open_catalog

    settings, data_dir = catalog_settings(given, admin)
    if settings.catalog_type not in ("sql", "rest"):
        raise TableTailError(f"odradek.iceberg.catalog.type must be sql or rest, not {settings.catalog_type!r}")
    if settings.catalog_type == "sql" and settings.catalog_uri is None and data_dir is None:
        raise TableTailError(
            "source=table+tail cannot find the Iceberg catalog: the broker did not say its data dir; "
            "give odradek.iceberg.catalog.uri (sqlite:///DATA_DIR/iceberg/catalog.db for the broker's default) "
            "and odradek.iceberg.warehouse"
        )
    try:
        catalog = open_catalog(settings, data_dir or Path("."), create=False)
    except FileNotFoundError as exc:
        raise TableTailError(
            f"source=table+tail: {', '.join(map(repr, topics))} has no Iceberg table: {exc}; set the topic config "
            "odradek.iceberg.mode=key_value to have one written (the broker's default catalog is on the broker's "
            "machine: from elsewhere give odradek.iceberg.catalog.uri and odradek.iceberg.warehouse)"
        ) from None
    except Exception as exc:  # a URL PyIceberg or the database refuses
        raise TableTailError(f"source=table+tail cannot open the Iceberg catalog: {type(exc).__name__}: {exc}") from None
    return catalog, settings.namespace


# -- planning (driver) -----------------------------------------------------------------------------


def snapshot_offsets(snapshot: Any) -> tuple[dict[int, int], str | None]:
    """A snapshot's record of what the table holds (partition -> offset after its last row) and
    the topic id it is of."""
    from odradek.tables.writer import NEXT_OFFSET, TOPIC_ID

    if snapshot is None or snapshot.summary is None:
        return {}, None
    props = snapshot.summary.additional_properties
    offsets = {int(k[len(NEXT_OFFSET):]): int(v) for k, v in props.items() if k.startswith(NEXT_OFFSET)}
    return offsets, props.get(TOPIC_ID)


@dataclass
class _Pinned:
    table: Any
    snapshot: Any
    offsets: dict[int, int]


def _pin(catalog: Any, namespace: str, topic: str, topic_id: str | None) -> _Pinned:
    """The topic's table and its current snapshot, checked to be a key_value table of this topic."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    name = f"{namespace}.{topic}"
    try:
        table = catalog.load_table((namespace, topic))
    except (NoSuchTableError, NoSuchNamespaceError):
        raise TableTailError(
            f"source=table+tail: topic {topic!r} has no Iceberg table ({name} is not in the catalog): set the topic "
            "config odradek.iceberg.mode=key_value to have one written, or check the odradek.iceberg.* options"
        ) from None
    except Exception as exc:  # the catalog's database or service cannot be read
        raise TableTailError(f"source=table+tail cannot open the Iceberg catalog: {type(exc).__name__}: {exc}") from None
    columns = {f.name for f in table.schema().fields}
    missing = [c for c in _TABLE_COLUMNS if c not in columns]
    if missing:
        raise TableTailError(
            f"source=table+tail: the table {name} lacks the columns {missing} of a key_value table (a value_schema "
            "table does not keep the records' value bytes): read it with PyIceberg or Spark's Iceberg source instead"
        )
    snapshot = table.current_snapshot()
    offsets, of_topic = snapshot_offsets(snapshot)
    if snapshot is not None and not offsets and int(snapshot.summary.additional_properties.get("total-records", 0) or 0):
        raise TableTailError(f"source=table+tail: the current snapshot of {name} has rows but no record of the offsets they hold")
    if of_topic is not None and topic_id is not None and of_topic != topic_id:
        raise TableTailError(
            f"source=table+tail: the table {name} was written from an earlier topic of that name (topic id {of_topic}, "
            f"now {topic_id}): its offsets are not this topic's"
        )
    return _Pinned(table, snapshot, offsets)


def _topic_ids(reader: OffsetReader, topics: Sequence[str]) -> dict[str, str | None]:
    try:
        described = reader.admin.describe_topics(list(topics))
    except Exception:
        return {}
    out: dict[str, str | None] = {}
    for name, d in described.items():
        tid = getattr(d, "topic_id", None)
        out[name] = str(tid) if tid is not None else None
    return out


def _timestamp_types(reader: OffsetReader, topics: Sequence[str]) -> dict[str, int]:
    """Per topic: 1 where ``message.timestamp.type=LogAppendTime``, else 0 (CreateTime)."""
    from odradek.client.admin import ConfigResource

    try:
        described = reader.admin.describe_configs(
            [ConfigResource("topic", t) for t in topics], keys=["message.timestamp.type"], include_synonyms=False
        )
    except Exception as exc:
        log.info("odradek table+tail: cannot describe the topics' timestamp type (%s): table rows say CreateTime", exc)
        return {}
    out = {}
    for resource, entries in described.items():
        entry = entries.get("message.timestamp.type")
        out[resource.name] = 1 if entry is not None and entry.value == "LogAppendTime" else 0
    return out


def plan_table_tail(opts: SourceOptions, reader: OffsetReader) -> TablePlan:
    """Pin each topic's table at its current snapshot, then list the log's ends: the table's rows
    below the snapshot's offsets, the log from there (see the module docstring)."""
    tps = reader.topic_partitions()
    if not tps:
        return TablePlan()
    topics = sorted({t for t, _ in tps})
    catalog, namespace = open_reader_catalog(opts.iceberg, reader.admin, topics)
    ids = _topic_ids(reader, topics)
    # first the snapshots, then the log's ends: the snapshot never holds past the ends listed after it
    pinned = {t: _pin(catalog, namespace, t, ids.get(t)) for t in topics}
    end = reader.resolve(opts.ending, tps, starting=False, streaming=False)
    log_start = reader.earliest(tps)
    start = _starting(opts, tps)
    stamp_types = _timestamp_types(reader, topics)
    plan = TablePlan()
    bounds: dict[str, dict[int, tuple[int, int]]] = {t: {} for t in topics}
    for tp in tps:
        topic, p = tp
        held = pinned[topic].offsets.get(p, 0)
        plan.boundary[tp] = held
        first = start[tp]  # EARLIEST: the table's first row, or the log's
        e = end[tp]
        if first != EARLIEST:
            check_range(tp, first, e)
        lo = 0 if first == EARLIEST else first
        if held > lo and min(held, e) > lo:
            bounds[topic][p] = (lo, min(held, e))
        begin = max(held, lo)
        if begin < log_start[tp]:
            if held > 0 or first != EARLIEST:
                report_data_loss(
                    f"Partition {topic}-{p}: offsets {begin} to {log_start[tp]} are in neither the Iceberg table "
                    f"(which holds it below offset {held}) nor the log (which starts at {log_start[tp]})",
                    opts.fail_on_data_loss,
                )
            begin = log_start[tp]
        if e > begin:
            plan.tail.append(OffsetRange(topic, p, begin, e))
    for topic in topics:
        if bounds[topic]:
            plan.splits.extend(_table_splits(pinned[topic], topic, bounds[topic], stamp_types.get(topic, 0), opts))
    return plan


def _starting(opts: SourceOptions, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
    spec = opts.starting
    if spec.kind == "earliest":
        return dict.fromkeys(tps, EARLIEST)
    if spec.kind != "offsets":  # refused by parse_source_options
        raise TableTailError(f"source=table+tail: startingOffsets of kind {spec.kind} is not supported")
    if set(spec.offsets) != set(tps):
        raise ValueError(
            "If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
            "Use -2 for earliest.\n"
            f"Specified: {sorted(spec.offsets)} Assigned: {sorted(tps)}"
        )
    for tp, o in spec.offsets.items():
        if o == LATEST or o < EARLIEST:
            raise ValueError(f"startingOffsets for {tp[0]}-{tp[1]} is {o}: use an offset >= 0 or -2 (earliest)")
    return dict(spec.offsets)


def _table_splits(
    pinned: _Pinned, topic: str, bounds: dict[int, tuple[int, int]], timestamp_type: int, opts: SourceOptions
) -> list[TableSplit]:
    """The snapshot's data files holding rows in ``bounds``, in Spark partitions of at most
    SPLIT_BYTES (and at least ``minPartitions`` when there are files enough)."""
    from pyiceberg import expressions

    ex: Any = expressions  # PyIceberg's predicates are pydantic models mypy reads as taking keywords only
    table, snapshot = pinned.table, pinned.snapshot
    row_filter: Any = ex.AlwaysTrue()
    if not set(bounds) >= set(pinned.offsets):  # files of partitions not read are skipped by their column stats
        row_filter = ex.In("partition", sorted(bounds))
    tasks = list(table.scan(snapshot_id=snapshot.snapshot_id, row_filter=row_filter).plan_files())
    if not tasks:
        return []
    total = sum(t.file.file_size_in_bytes for t in tasks)
    count = min(len(tasks), max(math.ceil(total / SPLIT_BYTES), opts.min_partitions or 1))
    bins: list[list[Any]] = [[] for _ in range(count)]
    sizes = [0] * count
    for t in sorted(tasks, key=lambda t: (-t.file.file_size_in_bytes, t.file.file_path)):
        i = sizes.index(min(sizes))
        bins[i].append(t)
        sizes[i] += t.file.file_size_in_bytes
    io_properties = dict(table.io.properties)
    return [
        TableSplit(topic, snapshot.snapshot_id, table.metadata, table.metadata_location, io_properties, tuple(b),
                   dict(bounds), timestamp_type, opts.include_headers)
        for b in bins if b
    ]


# -- reading (executors) ---------------------------------------------------------------------------


def read_table_split(split: TableSplit) -> Iterator[pa.RecordBatch]:
    """The split's rows as record batches of the source's columns (``arrow_schema``)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import ArrowScan

    io = load_file_io(split.io_properties, split.metadata_location)
    scan = ArrowScan(split.metadata, io, split.metadata.schema(), AlwaysTrue())
    schema = arrow_schema(split.include_headers)
    for batch in scan.to_record_batches(split.tasks):
        out = to_source_batch(batch, split.bounds, split.timestamp_type, schema)
        if out.num_rows:
            yield out


def to_source_batch(
    batch: pa.RecordBatch, bounds: Mapping[int, tuple[int, int]], timestamp_type: int, schema: pa.Schema
) -> pa.RecordBatch:
    """A table's rows as the source's columns: those of each partition ``p`` with offsets in
    ``bounds[p]`` (none of the other partitions)."""
    part, offset = batch.column("partition"), batch.column("offset")
    keep: Any = None
    for p, (lo, hi) in bounds.items():
        this = pc.and_(pc.equal(part, p), pc.and_(pc.greater_equal(offset, lo), pc.less(offset, hi)))
        keep = this if keep is None else pc.or_(keep, this)
    if keep is None:
        return pa.RecordBatch.from_pylist([], schema=schema)
    rows = batch.filter(pc.fill_null(keep, False))
    columns = []
    for f in schema:
        if f.name == "timestampType":
            columns.append(pa.array([timestamp_type] * rows.num_rows, pa.int32()))
        else:
            columns.append(rows.column(f.name).cast(f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
