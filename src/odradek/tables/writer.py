"""One partition's writer: its committed records appended to the topic's Iceberg table, exactly once.

The table holds its own record of what it has: every snapshot's summary carries, for each Kafka
partition, the offset up to which the table holds that partition's records
(``odradek.next-offset.<partition>``, copied forward from the parent snapshot so that the current
snapshot alone answers) and the range this snapshot added (``odradek.offsets.<partition>``:
``start-end``, end exclusive).  A writer starts from the current snapshot's offset for its
partition (a restart, a leader change), reads the log from there below the last stable offset,
and commits only if the table still says what it read at the start (PyIceberg's commit asserts the
parent snapshot; the writer checks the offset in it): a commit that loses a race to another writer
of the same partition (an old leader still finishing) writes nothing, and this writer goes on from
what the winner recorded.  So no record is in the table twice and none is skipped.

Records that cannot be converted go to the dead-letter table ``<topic>~dlq`` with their reason,
committed before the rows of the same range, with the same offset record: a range written there
and then read again (the main commit failed or the broker died in between) is not written twice.

Every method blocks (the log's files, Parquet, the catalog): the broker runs them on a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from odradek.storage.errors import OffsetOutOfRangeError
from odradek.tables.catalog import create_table, dead_letter_identifier, set_aside, table_identifier
from odradek.tables.convert import (
    DEAD_LETTER_SCHEMA,
    CommittedRecords,
    ConversionError,
    DeadLetter,
    KeyValueRows,
    RegistryUnavailable,
    ValueSchemaRows,
    committed_records,
    dead_letter_table,
)

log = logging.getLogger(__name__)

__all__ = ["NEXT_OFFSET", "RANGE", "TOPIC_ID", "LogSource", "PartitionWriter", "Step", "recorded_offsets"]

#: summary key prefix: the offset up to which the table holds a partition (all partitions, cumulative)
NEXT_OFFSET = "odradek.next-offset."
#: summary key prefix: the range a snapshot added for a partition (``start-end``, end exclusive)
RANGE = "odradek.offsets."
#: summary key: the id of the topic whose offsets the summary records (a topic deleted and created
#: again under its name starts again at offset 0: the old topic's offsets do not hold for it)
TOPIC_ID = "odradek.topic-id"
#: commits retried after losing a race with another partition's writer of the same table
_COMMIT_ATTEMPTS = 20


class LogSource(Protocol):
    """The partition's log as the writer reads it (the leader's replica)."""

    def bounds(self) -> tuple[int, int, int]:
        """``(log start offset, last stable offset, high watermark)``."""

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from ``offset``, below the last stable offset."""

    def aborted(self, start: int, upper: int) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of the aborted transactions with records in ``[start, upper)``."""

    @property
    def topic_id(self) -> str | None:
        """The topic's id (None: unknown)."""


@dataclass(frozen=True, slots=True)
class Step:
    """What one step did: ``written`` rows, ``dead`` dead letters, ``more``: the log had more
    than one step reads (run again at once)."""

    written: int
    dead: int
    more: bool


def recorded_topic_id(table: Any) -> str | None:
    """The id of the topic whose offsets the table's current snapshot records (None: no snapshot,
    or one written before snapshots carried it)."""
    snap = table.current_snapshot()
    if snap is None or snap.summary is None:
        return None
    return snap.summary.additional_properties.get(TOPIC_ID)


def recorded_offsets(table: Any, topic_id: str | None = None) -> dict[int, int]:
    """The table's record of what it holds: partition -> the offset after its last record (with
    ``topic_id``: nothing when the record is of another topic of the same name)."""
    snap = table.current_snapshot()
    if snap is None or snap.summary is None:
        return {}
    props = snap.summary.additional_properties
    if topic_id is not None and props.get(TOPIC_ID, topic_id) != topic_id:
        return {}
    out = {}
    for k, v in props.items():
        if k.startswith(NEXT_OFFSET):
            out[int(k[len(NEXT_OFFSET):])] = int(v)
    return out


class PartitionWriter:
    """The writer of one partition led by this broker."""

    def __init__(
        self,
        catalog: Any,
        namespace: str,
        topic: str,
        partition: int,
        mode: str,
        partition_spec: str,
        source: LogSource,
        registry: Callable[[], Any] | None = None,
        *,
        max_bytes_per_step: int = 16 << 20,
    ) -> None:
        self.catalog, self.namespace = catalog, namespace
        self.topic, self.partition, self.mode, self.spec = topic, partition, mode, partition_spec
        self.source = source
        self.max_bytes = max_bytes_per_step
        self.rows: KeyValueRows | ValueSchemaRows = (
            ValueSchemaRows(topic, partition, registry or (lambda: None)) if mode == "value_schema"
            else KeyValueRows(topic, partition)
        )
        self.table: Any = None
        self.dead_table: Any = None
        #: the table's offset for this partition as last seen (what the next commit must find)
        self.committed = -1
        #: the dead-letter table's
        self.dead_committed = -1
        #: where the next read starts (past ``committed`` when records were read but not committed)
        self.next = -1
        self.written = 0
        self.dead = 0
        self._schema_id: int | None = None
        #: why the table cannot be created yet, as last logged (None: not waiting)
        self._waiting_for: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- the table -------------------------------------------------------------------------------

    def _columns(self) -> dict[str, str]:
        if self.mode == "value_schema":
            return {"timestamp": "kafka_timestamp", "partition": "kafka_partition"}
        return {"timestamp": "timestamp", "partition": "partition"}

    def open(self) -> bool:
        """Load (or create) the table and resume from its record; False if it cannot be created
        yet (value_schema mode before the subject has a schema)."""
        if self.table is None:
            schema = self._table_schema()
            if schema is None:
                return False
            identifier = table_identifier(self.namespace, self.topic)
            self.table = self._own_table(
                identifier, lambda: create_table(self.catalog, identifier, schema, self.spec, self._columns())
            )
        self.table.refresh()
        self.committed = recorded_offsets(self.table, self.source.topic_id).get(self.partition, 0)
        self.next = self.committed
        self.dead_committed = -1
        log.info("Iceberg table %s: %s resumes at offset %d", ".".join(table_identifier(self.namespace, self.topic)),
                 self.name, self.committed)
        return True

    def _own_table(self, identifier: tuple[str, str], load: Callable[[], Any]) -> Any:
        """The table at ``identifier`` (loaded or created by ``load``); a table an earlier topic of
        this name wrote (deleted and created again: its offsets start at 0 again) is first renamed
        to ``NAME~ID`` (its topic id's first 8 characters) and kept, so a table never holds two
        topics' records under the same offsets."""
        for _ in range(_COMMIT_ATTEMPTS):
            table = load()
            other = recorded_topic_id(table)
            if other is None or self.source.topic_id is None or other == self.source.topic_id:
                return table
            aside = (identifier[0], f"{identifier[1]}~{other[:8]}")
            if set_aside(self.catalog, identifier, aside):
                log.warning("Iceberg table %s was written for an earlier topic %s of that name (id %s): renamed to %s",
                            ".".join(identifier), self.topic, other, ".".join(aside))
        raise RuntimeError(f"{self.name}: the Iceberg table {'.'.join(identifier)} is another topic's")

    def _table_schema(self) -> pa.Schema | None:
        if isinstance(self.rows, ValueSchemaRows):
            try:
                latest = self.rows.latest()
            except RegistryUnavailable as exc:
                self._wait(str(exc), logging.WARNING)
                return None
            if latest is None:
                self._wait(f"the subject {self.rows.subject} has no schema yet", logging.INFO)
                return None
            self._waiting_for = None
            self._schema_id = latest[0]
            return latest[1]
        return self.rows.schema()

    def _wait(self, reason: str, level: int) -> None:
        """Say once (until the reason changes) why the table is not created yet: the writer
        tries again every commit interval, and a log line per try would flood the log."""
        if reason != self._waiting_for:
            self._waiting_for = reason
            log.log(level, "Iceberg writer of %s waits to create its table: %s", self.name, reason)

    def _evolve(self) -> None:
        """value_schema mode: the subject's latest version's new columns added to the table (the
        rows before them read as null there)."""
        if not isinstance(self.rows, ValueSchemaRows):
            return
        latest = self.rows.latest()
        if latest is None or latest[0] == self._schema_id:
            return
        self.table.refresh()
        with self.table.update_schema() as update:
            update.union_by_name(latest[1])
        self._schema_id = latest[0]
        log.info("Iceberg table %s.%s: schema follows schema id %d", self.namespace, self.topic, latest[0])

    def _open_dead_letters(self) -> None:
        if self.dead_table is None:
            identifier = dead_letter_identifier(self.namespace, self.topic)
            self.dead_table = self._own_table(
                identifier, lambda: create_table(self.catalog, identifier, DEAD_LETTER_SCHEMA, "none", {})
            )
        self.dead_table.refresh()
        self.dead_committed = recorded_offsets(self.dead_table, self.source.topic_id).get(self.partition, 0)

    # -- one step ----------------------------------------------------------------------------------

    def step(self) -> Step:
        """Read what the log has below its last stable offset (up to the step's size) and commit it."""
        if self.table is None and not self.open():
            return Step(0, 0, False)
        start_read = self.next
        log_start, stable, _ = self.source.bounds()
        if start_read < log_start:
            log.warning("%s: offsets %d to %d were deleted from the log before the Iceberg table had them",
                        self.name, start_read, log_start)
            start_read = log_start
        records = CommittedRecords()  # decoded to columns at once in key_value mode
        offset = start_read
        size = 0
        while offset < stable and size < self.max_bytes:
            try:
                data = self.source.read(offset, self.max_bytes - size)
            except OffsetOutOfRangeError:
                break
            if not data:
                break
            got, after = committed_records(data, self.source.aborted(offset, stable), offset, stable)
            if after <= offset:
                break
            records.extend(got)
            size += len(data)
            offset = after
        end = offset
        if not records:
            self.next = end
            return Step(0, 0, end < stable)
        try:
            self._evolve()
            rows, dead = self.rows.convert(records)
        except ConversionError as exc:  # the topic's schema cannot be a table: every record is a dead letter
            rows, dead = None, [DeadLetter(r, str(exc)) for r in records]
        if dead:
            self._commit_dead_letters(dead, end)
        if rows is not None and rows.num_rows and not self._commit(rows, end):
            return Step(0, len(dead), True)
        self.next = end
        self.written += rows.num_rows if rows is not None else 0
        self.dead += len(dead)
        return Step(rows.num_rows if rows is not None else 0, len(dead), end < stable)

    def _commit_dead_letters(self, dead: list[DeadLetter], end: int) -> None:
        self._open_dead_letters()
        for _ in range(_COMMIT_ATTEMPTS):
            fresh = [d for d in dead if d.record.offset >= self.dead_committed]
            if not fresh:
                return
            recorded = recorded_offsets(self.dead_table, self.source.topic_id)
            props = self._props(recorded)
            props[NEXT_OFFSET + str(self.partition)] = str(end)
            props[RANGE + str(self.partition)] = f"{fresh[0].record.offset}-{end}"
            if self._append(self.dead_table, dead_letter_table(fresh, self.topic, self.partition), props):
                for d in fresh:
                    log.warning("%s offset %d: to the dead-letter table: %s", self.name, d.record.offset, d.reason)
                self.dead_committed = end
                return
            self.dead_table.refresh()
            self.dead_committed = recorded_offsets(self.dead_table, self.source.topic_id).get(self.partition, 0)
        raise RuntimeError(f"{self.name}: could not commit to the dead-letter table in {_COMMIT_ATTEMPTS} attempts")

    def _commit(self, rows: pa.Table, end: int) -> bool:
        """Append ``rows`` as the range ``[committed, end)``; False (nothing written, the writer
        reset to the table's record) if the table no longer says ``committed`` for this partition."""
        for _ in range(_COMMIT_ATTEMPTS):
            recorded = recorded_offsets(self.table, self.source.topic_id)
            now = recorded.get(self.partition, 0)
            if now != self.committed:
                log.warning("%s: the Iceberg table holds it up to offset %d, not %d (another writer): going on from there",
                            self.name, now, self.committed)
                self.committed = self.next = now
                return False
            props = self._props(recorded)
            props[NEXT_OFFSET + str(self.partition)] = str(end)
            props[RANGE + str(self.partition)] = f"{self.committed}-{end}"
            if self._append(self.table, rows, props):
                self.committed = end
                return True
            self.table.refresh()
        raise RuntimeError(f"{self.name}: could not commit to the Iceberg table in {_COMMIT_ATTEMPTS} attempts")

    def _props(self, recorded: dict[int, int]) -> dict[str, str]:
        """The summary of a new snapshot: the record carried forward, with the topic's id."""
        props = {NEXT_OFFSET + str(p): str(o) for p, o in recorded.items()}
        if self.source.topic_id is not None:
            props[TOPIC_ID] = self.source.topic_id
        return props

    @staticmethod
    def _append(table: Any, rows: pa.Table, props: dict[str, str]) -> bool:
        from pyiceberg.exceptions import CommitFailedException

        try:
            table.append(rows, snapshot_properties=props)
        except CommitFailedException:
            return False
        return True
