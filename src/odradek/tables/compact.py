"""Small-file compaction of a topic's Iceberg table, safe while the partitions' writers commit.

Each writer's commit adds a Parquet file per Iceberg partition it touches, so a table committed
every few seconds soon holds thousands of small files.  :func:`compact` rewrites them, per Iceberg
partition, into files of about the target size, through PyIceberg: the small files' rows are read
(PyIceberg's Arrow scan, projected to the table's current schema), sorted by Kafka partition and
offset, written as new data files (PyIceberg's writer, with the table's partition spec) and
committed in one ``overwrite`` snapshot that deletes exactly the files read and adds the files
written (PyIceberg 0.12 has no ``replace`` snapshot or rewrite action of its own).

The rows do not change: the rows written are counted against the files' record counts before
anything is committed.  The writers' record does not change either: the snapshot's summary
carries the parent snapshot's ``odradek.next-offset.*`` and ``odradek.topic-id`` forward as they
are, so a writer's fence (the table must still hold its partition up to the offset the writer read
from) passes after a compaction, and a writer started after one resumes where it would have.

The writers commit while the files are rewritten, so before it commits the compaction reads the
table again and checks that every file it read is still there.  When the snapshots since the one
it checked are all appends (the writers' commits only add files), the table's metadata says so
and no manifest is read: the window in which a writer's commit makes the compaction's fail is
then only PyIceberg's building of the snapshot and the catalog's commit, as short as it can be.
Otherwise (another compaction, an expiry of data) it reads every manifest, and when a file it
read is gone it deletes what it wrote and plans again.  It commits on top of the current
snapshot with that snapshot's summary.  A writer's commit inside the window makes the commit
fail (PyIceberg's commit asserts the parent snapshot, and its own retries are off on these
tables: a retry would carry the old summary onto the new parent); the compaction then checks
again and commits again, reusing the files it wrote.  After ``attempts`` lost races it fails
with nothing changed.

Every call blocks (the table's files, the catalog): it runs in ``odradek tables compact``, never on
the broker's event loop.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from odradek.errors import OdradekError
from odradek.tables.writer import NEXT_OFFSET, TOPIC_ID

log = logging.getLogger(__name__)

__all__ = [
    "COMPACTION",
    "DEFAULT_MIN_INPUT_FILES",
    "DEFAULT_TARGET_FILE_SIZE",
    "Compaction",
    "CompactionFailed",
    "compact",
]

#: Iceberg's ``write.target-file-size-bytes`` default (the table's property wins when it has one)
DEFAULT_TARGET_FILE_SIZE = 512 << 20
#: Iceberg's RewriteDataFiles ``min-input-files`` default: fewer small files in a partition stay
DEFAULT_MIN_INPUT_FILES = 5
#: a file is small below this share of the target (Iceberg's ``min-file-size-bytes``: 75 %)
SMALL_SHARE = 0.75
#: summary key of a compaction's snapshot: ``<files read> -> <files written>``
COMPACTION = "odradek.compaction"
_TARGET_PROPERTY = "write.target-file-size-bytes"
_ATTEMPTS = 20


class CompactionFailed(OdradekError):
    """The compaction committed nothing (lost every race, or what it wrote did not check out)."""


@dataclass
class Compaction:
    """What :func:`compact` did to one table."""

    table: str
    files_before: int = 0
    files_after: int = 0
    #: small files read and replaced, and the files written in their place
    files_rewritten: int = 0
    files_written: int = 0
    #: Iceberg partitions compacted
    partitions: int = 0
    rows_rewritten: int = 0
    rows: int = 0
    #: commits that lost a race with a writer's (and were made again on its snapshot), and plans
    #: given up because files they read were gone (another compaction's, an expiry's)
    races: int = 0
    snapshot_id: int | None = None
    #: the writers' record in the snapshot compacted and in the compaction's (the same)
    offsets: dict[int, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "files_before": self.files_before, "files_after": self.files_after,
            "files_rewritten": self.files_rewritten, "files_written": self.files_written,
            "partitions": self.partitions, "rows_rewritten": self.rows_rewritten, "rows": self.rows,
            "races": self.races, "snapshot_id": self.snapshot_id,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
        }


def compact(table: Any, *, target_file_size: int | None = None, min_input_files: int = DEFAULT_MIN_INPUT_FILES,
            attempts: int = _ATTEMPTS) -> Compaction:
    """Rewrite ``table``'s small data files, per Iceberg partition, into files of about
    ``target_file_size`` bytes (default: the table's ``write.target-file-size-bytes``, else 512
    MiB); a partition is compacted when it has at least ``min_input_files`` small files (smaller
    than 75 % of the target).  Returns what it did; CompactionFailed when it could not commit."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    from odradek.tables.catalog import _without_retries

    if min_input_files < 2:
        raise ValueError("min_input_files must be at least 2 (one file is not compacted into one)")
    table = _without_retries(table)
    table.refresh()
    target = target_file_size or int(table.properties.get(_TARGET_PROPERTY, DEFAULT_TARGET_FILE_SIZE))
    if target <= 0:
        raise ValueError("the target file size must be positive")
    out = Compaction(".".join(table.name()))
    for _ in range(attempts):
        snap = table.current_snapshot()
        live = _live_files(table)
        out.files_before = out.files_after = len(live)
        out.offsets = _offsets(snap)
        out.rows = _total_rows(snap)
        groups = _plan(table, live, target, min_input_files)
        if not groups:
            out.snapshot_id = snap.snapshot_id if snap is not None else None
            return out
        rewritten = _rewrite(table, groups, target)
        inputs = [f for group, _ in rewritten for f in group]
        outputs = [f for _, written in rewritten for f in written]
        checked = snap.snapshot_id  # the snapshot in which the inputs are known to be live
        while out.races < attempts:
            # the commit's window opens here: what the writers committed while the files were
            # rewritten (or during the last attempt) is looked at first, cheaply where it can be
            table.refresh()
            if not _inputs_live(table, checked, inputs):
                out.races += 1
                log.info("%s: files the compaction read are gone in snapshot %s; planning again", out.table,
                         getattr(table.current_snapshot(), "snapshot_id", None))
                _delete(table, outputs)
                break
            snap = table.current_snapshot()
            checked = snap.snapshot_id
            props = _carried(snap)
            props[COMPACTION] = f"{len(inputs)} -> {len(outputs)}"
            try:
                with table.transaction() as tx, tx.update_snapshot(snapshot_properties=props).overwrite() as ow:
                    from pyiceberg.expressions import AlwaysTrue

                    ow.delete_by_predicate(AlwaysTrue())  # the manifests are looked through for the files below
                    for f in inputs:
                        ow.delete_data_file(f)
                    for f in outputs:
                        ow.append_data_file(f)
            except (CommitFailedException, ValidationException) as exc:
                out.races += 1
                log.info("%s: compaction lost a race (%s); trying again", out.table, exc)
                continue  # on the new snapshot with its record, when the files read are still there
            table.refresh()
            new = table.current_snapshot()
            out.snapshot_id = new.snapshot_id
            out.offsets = _offsets(new)
            out.rows = _total_rows(new)
            out.files_after = len(_live_files(table))
            out.files_before = out.files_after + len(inputs) - len(outputs)
            out.files_rewritten, out.files_written = len(inputs), len(outputs)
            out.partitions = len(rewritten)
            out.rows_rewritten = sum(f.record_count for f in inputs)
            log.info("%s: compacted %d files into %d (%d rows, %d Iceberg partitions) in snapshot %d", out.table,
                     len(inputs), len(outputs), out.rows_rewritten, len(rewritten), new.snapshot_id)
            return out
        else:
            _delete(table, outputs)
            break
    raise CompactionFailed(f"{out.table}: compaction committed nothing: it lost the race with the table's writers "
                           f"{out.races} times (try again, or with a longer odradek.iceberg.commit.interval.ms)")


def _inputs_live(table: Any, checked: int, inputs: Sequence[Any]) -> bool:
    """Whether every file in ``inputs`` (live in snapshot ``checked``) is live in the table's current
    snapshot.  When the snapshots since ``checked`` are all appends (the writers' commits, which
    only add files) that is known from the table's metadata alone; otherwise (a compaction, a
    delete, an expired or rolled-back history) every manifest is read."""
    from pyiceberg.table.snapshots import Operation

    snap = table.current_snapshot()
    for _ in range(len(table.metadata.snapshots)):
        if snap is None:
            break
        if snap.snapshot_id == checked:
            return True
        if snap.summary is None or snap.summary.operation != Operation.APPEND or snap.parent_snapshot_id is None:
            break
        snap = table.snapshot_by_id(snap.parent_snapshot_id)
    return {f.file_path for f in inputs} <= {f.file_path for f in _live_files(table)}


def _live_files(table: Any) -> list[Any]:
    if table.current_snapshot() is None:
        return []
    return [task.file for task in table.scan().plan_files()]


def _offsets(snap: Any) -> dict[int, int]:
    props = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
    return {int(k[len(NEXT_OFFSET):]): int(v) for k, v in props.items() if k.startswith(NEXT_OFFSET)}


def _total_rows(snap: Any) -> int:
    props = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
    return int(props.get("total-records", 0))


def _carried(snap: Any) -> dict[str, str]:
    """The writers' record in ``snap``'s summary, as it is (the compaction added no offsets)."""
    props = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
    return {k: v for k, v in props.items() if k.startswith(NEXT_OFFSET) or k == TOPIC_ID}


def _plan(table: Any, live: Sequence[Any], target: int, min_input_files: int) -> list[list[Any]]:
    """The groups of small files to rewrite: per Iceberg partition (of the table's current spec),
    in groups of at most ``target`` bytes, each of at least ``min_input_files`` files."""
    spec_id = table.spec().spec_id
    small = SMALL_SHARE * target
    by_partition: dict[Any, list[Any]] = {}
    for f in live:
        if f.spec_id == spec_id and f.file_size_in_bytes < small:
            by_partition.setdefault(f.partition, []).append(f)
    groups: list[list[Any]] = []
    for files in by_partition.values():
        files.sort(key=lambda f: f.file_size_in_bytes)
        group: list[Any] = []
        size = 0
        for f in files:
            if group and size + f.file_size_in_bytes > target:
                groups.append(group)
                group, size = [], 0
            group.append(f)
            size += f.file_size_in_bytes
        groups.append(group)
    return [g for g in groups if len(g) >= min_input_files]


def _sort_columns(schema: pa.Schema) -> list[tuple[str, str]]:
    for names in (("partition", "offset"), ("kafka_partition", "kafka_offset")):
        if all(n in schema.names for n in names):
            return [(n, "ascending") for n in names]
    return []


def _rewrite(table: Any, groups: list[list[Any]], target: int) -> list[tuple[list[Any], list[Any]]]:
    """Each group's rows read and written as new data files (not committed)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
    from pyiceberg.table import FileScanTask

    meta = table.metadata
    write_meta = meta.model_copy(update={"properties": {**meta.properties, _TARGET_PROPERTY: str(target)}})
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    done: list[tuple[list[Any], list[Any]]] = []
    try:
        for group in groups:
            rows = ArrowScan(meta, table.io, meta.schema(), AlwaysTrue()).to_table([FileScanTask(f) for f in group])
            expected = sum(f.record_count for f in group)
            if rows.num_rows != expected:
                raise CompactionFailed(f"{'.'.join(table.name())}: read {rows.num_rows} rows from {len(group)} "
                                       f"files that record {expected}: nothing compacted")
            order = _sort_columns(rows.schema)
            if order:
                rows = rows.sort_by(order)
            written = list(_dataframe_to_data_files(write_meta, rows, table.io, write_uuid, counter))
            done.append((group, written))
            got = sum(f.record_count for f in written)
            if got != expected or any(f.partition != group[0].partition for f in written):
                raise CompactionFailed(f"{'.'.join(table.name())}: the files written hold {got} rows, not {expected}, "
                                       "or another partition: nothing compacted")
    except BaseException:
        _delete(table, list(itertools.chain.from_iterable(w for _, w in done)))
        raise
    return done


def _delete(table: Any, files: Sequence[Any]) -> None:
    """Data files written and not committed, deleted."""
    for f in files:
        try:
            table.io.delete(f.file_path)
        except Exception as exc:  # left behind: an orphan file, unreferenced by the table
            log.warning("could not delete the uncommitted file %s: %s", f.file_path, exc)
