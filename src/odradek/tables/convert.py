"""Records of a partition's log as Arrow tables: the rows a topic's Iceberg table receives.

:func:`committed_records` reads a stretch of the log's bytes as a read_committed consumer does
(control batches and the records of aborted transactions left out).  :class:`KeyValueRows` and
:class:`ValueSchemaRows` turn records into Arrow tables for the two modes: key_value rows straight
from the batches' bytes by the compiled column decoder where it is built (no Python object per
record: :meth:`CommittedRecords.key_value_columns`), value_schema rows (and key_value rows without
the compiled decoder) from the records one by one; a record that cannot be
converted (a value not framed for the registry, an unknown schema id, bytes the schema does not
read) becomes a :class:`DeadLetter` with its reason, never silently dropped.
"""

from __future__ import annotations

import io
import itertools
import json
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc

from odradek.errors import OdradekError
from odradek.records import (
    Batch,
    Record,
    RecordsError,
    decompress,
    iter_batch_headers,
    parse_control_key,
    speedups,
    validate,
)
from odradek.schemas.framing import FramingError, read_header

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "KEY_VALUE_SCHEMA",
    "CommittedRecords",
    "ConversionError",
    "DeadLetter",
    "KeyValueRows",
    "RegistryUnavailable",
    "ValueSchemaRows",
    "avro_to_arrow",
    "committed_records",
    "dead_letter_table",
]

_TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
#: the columns of a key_value table
KEY_VALUE_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", _TIMESTAMP),
    pa.field("headers", HEADERS_TYPE),
])
#: the Kafka columns of a value_schema table, beside the value's fields
KAFKA_COLUMNS = [
    pa.field("kafka_key", pa.binary()),
    pa.field("kafka_topic", pa.string()),
    pa.field("kafka_partition", pa.int32()),
    pa.field("kafka_offset", pa.int64()),
    pa.field("kafka_timestamp", _TIMESTAMP),
    pa.field("kafka_headers", HEADERS_TYPE),
]
#: the columns of a topic's dead-letter table: the record as it was and why it is there
DEAD_LETTER_SCHEMA = pa.schema([
    *KEY_VALUE_SCHEMA,
    pa.field("reason", pa.string()),
])

_TIMESTAMP_TYPE = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_ABORT = 0
_HEADER_SIZE = 61  # a v2 batch's header: its records follow
_INT32 = struct.Struct("<i")


class ConversionError(OdradekError):
    """A record (or the topic's schema) that cannot become a row of the table."""


class RegistryUnavailable(OdradekError):
    """The broker has no view of the schema registry now: try again later (nothing is converted)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    record: Record
    reason: str


class CommittedRecords(Sequence[Record]):
    """The records a read_committed consumer sees in some whole batches of a partition's log (see
    :func:`committed_records`): a sequence of :class:`Record`, decoded on first use, or, for
    key_value rows, Arrow columns decoded straight from the batches' bytes by the compiled decoder
    (:meth:`key_value_columns`) with no Python object per record."""

    __slots__ = ("_parts", "_records")

    def __init__(self) -> None:
        #: (batch, the bytes it lies in, first offset kept, offset kept below)
        self._parts: list[tuple[Batch, Any, int, int]] = []
        self._records: list[Record] | None = None

    def _add(self, batch: Batch, data: Any, lo: int, hi: int) -> None:
        self._parts.append((batch, data, lo, hi))
        self._records = None

    def extend(self, other: CommittedRecords) -> None:
        """``other``'s records after these (the next stretch of the log)."""
        self._parts.extend(other._parts)
        self._records = None

    def _all(self) -> list[Record]:
        if self._records is None:
            self._records = [r for batch, _, lo, hi in self._parts for r in batch.records if lo <= r.offset < hi]
        return self._records

    def __bool__(self) -> bool:  # without decoding: a batch kept holds records (or a gap compaction left)
        return bool(self._parts)

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, i: int) -> Record: ...
    @overload
    def __getitem__(self, i: slice) -> list[Record]: ...
    def __getitem__(self, i: int | slice) -> Record | list[Record]:
        return self._all()[i]

    def __iter__(self) -> Iterator[Record]:
        return iter(self._all())

    def key_value_columns(self) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array] | None:
        """``(key, value, offset, timestamp in microseconds, headers)`` of the records, decoded by the
        compiled decoder from the batches' bytes; None when it is not there, for magic 0/1 data,
        or when it finds anything wrong (the records then decode one by one, which says what)."""
        compiled = speedups.compiled
        if compiled is None or self._records is not None:
            return None
        specs: list[tuple[Any, int, int, int, int, int, int | None]] = []
        kept: list[tuple[int, int, int]] = []  # per batch decoded: (records, first offset kept, offset kept below)
        whole = True
        try:
            for batch, data, lo, hi in self._parts:
                h = batch.header
                if h.magic < 2:
                    return None
                if h.record_count <= 0:
                    continue
                start, stop = h.position + _HEADER_SIZE, h.position + h.size
                buf = data
                if h.compression:
                    buf = decompress(h.compression, memoryview(data)[start:stop], magic=2)
                    start, stop = 0, len(buf)
                lat = h.max_timestamp if h.attributes & _TIMESTAMP_TYPE else None
                specs.append((buf, start, stop, h.record_count, h.base_offset, h.base_timestamp, lat))
                kept.append((h.record_count, lo, hi))
                whole = whole and lo <= h.base_offset and h.last_offset < hi
            if not specs:
                return None
            n, offsets, stamps, key, value, headers = compiled.decode_columns(specs, True, pa.allocate_buffer)
            assert headers is not None
            list_offsets, _validity, _nulls, count, hkeys, hvalues = headers
            items = pa.StructArray.from_arrays([_binary(count, hkeys, pa.string()), _binary(count, hvalues)],
                                               fields=list(HEADERS_TYPE.value_type))
            # no list is null: a record without headers has an empty list (as the records give)
            header_array = pa.Array.from_buffers(HEADERS_TYPE, n, [None, list_offsets], null_count=0, children=[items])
            header_array.validate(full=True)  # header keys are strings: UTF-8 checked here
            columns = [_binary(n, key), _binary(n, value), pa.Array.from_buffers(pa.int64(), n, [None, offsets]),
                       pa.Array.from_buffers(pa.int64(), n, [None, stamps]), header_array]
        except (ValueError, RecordsError, pa.ArrowInvalid):
            return None
        if n != sum(k for k, _, _ in kept) or (n and pc.max(columns[2]).as_py() > max(
                b.header.last_offset for b, _, _, _ in self._parts)):
            return None  # not the batches' record counts, or beyond their last offset: the records say what
        if not whole:  # the first or last batch read in part (a last stable offset, a resumed writer)
            columns = [c.filter(_kept(columns[2], kept)) for c in columns]
        return columns[0], columns[1], columns[2], columns[3], columns[4]


def _binary(n: int, column: tuple[Any, Any, Any, int], typ: pa.DataType | None = None) -> pa.Array:
    """A binary (or string) array of the compiled decoder's buffers (its data buffer was sized by
    a bound: cut to what the offsets use)."""
    offsets, data, validity, nulls = column
    used = _INT32.unpack_from(offsets, 4 * n)[0]
    if used < data.size:
        data = data.slice(0, used)
    return pa.Array.from_buffers(typ or pa.binary(), n, [validity, offsets, data], null_count=nulls)


def _kept(offsets: pa.Array, kept: list[tuple[int, int, int]]) -> pa.Array:
    """The mask of the rows their batch keeps: ``(records, lo, hi)`` per batch in order, the
    rows of each kept at ``lo <= offset < hi`` (a batch may be decoded twice: read in two parts)."""
    lo = pa.concat_arrays([pa.repeat(pa.scalar(b, pa.int64()), k) for k, b, _ in kept])
    hi = pa.concat_arrays([pa.repeat(pa.scalar(e, pa.int64()), k) for k, _, e in kept])
    return pc.and_(pc.greater_equal(offsets, lo), pc.less(offsets, hi))


def committed_records(
    data: bytes | bytearray | memoryview, aborted: Iterable[tuple[int, int]], start: int, limit: int
) -> tuple[CommittedRecords, int]:
    """The records at ``start <= offset < limit`` of the whole batches in ``data`` that a
    read_committed consumer sees, and the offset after the last batch examined (``start`` when
    none was whole).  ``aborted`` lists ``(producer_id, first_offset)`` of the aborted
    transactions in the range (the log's transaction index): a transactional batch of a producer
    whose aborted transaction began at or before it is left out up to that producer's ABORT marker.
    The batches' checksums are checked here; their records are decoded when used."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    out = CommittedRecords()
    next_offset = start
    for h in iter_batch_headers(data):
        validate(data, h)
        batch = Batch(h, data)
        if batch.base_offset >= limit:
            break
        last = batch.last_offset
        if last < start:
            continue
        attrs = batch.attributes
        if attrs & (_TRANSACTIONAL | _CONTROL):
            while pending and pending[0][1] <= last:
                aborting.add(pending.pop(0)[0])
            if attrs & _CONTROL:
                if batch.producer_id in aborting:
                    recs = batch.records
                    if recs and recs[0].key is not None and parse_control_key(recs[0].key)[1] == _ABORT:
                        aborting.discard(batch.producer_id)
                next_offset = last + 1
                continue
            if batch.producer_id in aborting:
                next_offset = last + 1
                continue
        out._add(batch, data, start, limit)
        next_offset = min(last + 1, limit)
    return out, next_offset


def _timestamps_us(us: pa.Array) -> pa.Array:
    """Record timestamps in microseconds (negative: none, as magic 0 has) as UTC timestamps."""
    none = pc.less(us, 0)
    if pc.any(none).as_py():
        us = pc.if_else(none, pa.scalar(None, pa.int64()), us)
    return us.cast(_TIMESTAMP)


def _timestamps(records: Sequence[Record]) -> pa.Array:
    return _timestamps_us(pc.multiply(pa.array([r.timestamp for r in records], pa.int64()), 1000))


def _headers(records: Sequence[Record]) -> pa.Array:
    counts = [len(r.headers) for r in records]
    offsets = pa.array([0, *itertools.accumulate(counts)], pa.int32())
    names = [k for r in records for k, _ in r.headers]
    values = [v for r in records for _, v in r.headers]
    items = pa.StructArray.from_arrays([pa.array(names, pa.string()), pa.array(values, pa.binary())], ["key", "value"])
    return pa.ListArray.from_arrays(offsets, items, type=HEADERS_TYPE)


def _kafka_columns(records: Sequence[Record], topic: str, partition: int) -> list[pa.Array]:
    n = len(records)
    return [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        _timestamps(records),
        _headers(records),
    ]


def _repeat(value: Any, typ: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, typ), n)


def dead_letter_table(letters: Sequence[DeadLetter], topic: str, partition: int) -> pa.Table:
    recs = [d.record for d in letters]
    kafka = _kafka_columns(recs, topic, partition)
    columns = [kafka[0], pa.array([r.value for r in recs], pa.binary()), *kafka[1:],
               pa.array([d.reason for d in letters], pa.string())]
    return pa.Table.from_arrays(columns, schema=DEAD_LETTER_SCHEMA)


class KeyValueRows:
    """key_value mode: every committed record is a row (nothing to fail on)."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition

    def schema(self) -> pa.Schema:
        return KEY_VALUE_SCHEMA

    def convert(self, records: Sequence[Record]) -> tuple[pa.Table, list[DeadLetter]]:
        fast = records.key_value_columns() if isinstance(records, CommittedRecords) else None
        if fast is not None:
            key, value, offsets, us, headers = fast
            n = len(offsets)
            columns = [key, value, _repeat(self.topic, pa.string(), n), _repeat(self.partition, pa.int32(), n),
                       offsets, _timestamps_us(us), headers]
            return pa.Table.from_arrays(columns, schema=KEY_VALUE_SCHEMA), []
        kafka = _kafka_columns(records, self.topic, self.partition)
        columns = [kafka[0], pa.array([r.value for r in records], pa.binary()), *kafka[1:]]
        return pa.Table.from_arrays(columns, schema=KEY_VALUE_SCHEMA), []


# -- value_schema mode ---------------------------------------------------------------------------

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}


def avro_to_arrow(schema_text: str) -> pa.Schema:
    """The Arrow schema of an Avro record schema's fields (every column nullable, so that a
    later compatible version may add columns); ConversionError for what Iceberg cannot hold
    (a top-level type other than a record, unions of several types, recursive types)."""
    try:
        node = json.loads(schema_text)
    except ValueError as exc:
        raise ConversionError(f"the schema is not JSON: {exc}") from None
    named: dict[str, Any] = {}
    if not isinstance(node, dict) or node.get("type") != "record":
        raise ConversionError("value_schema mode needs a record schema (its fields become the table's columns)")
    return pa.schema([pa.field(f["name"], _arrow_type(f["type"], named, node.get("namespace"), 0))
                      for f in node["fields"]])


def _arrow_type(t: Any, named: dict[str, Any], space: str | None, depth: int) -> pa.DataType:
    if depth > 32:
        raise ConversionError("the schema nests too deeply")
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        full = t if "." in t or space is None else f"{space}.{t}"
        found = named.get(full, named.get(t))
        if found is None:
            raise ConversionError(f"the schema refers to {t!r}, a type this writer does not know (recursive or a reference)")
        return found
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        if len(branches) != 1:
            raise ConversionError(f"a union of {len(branches)} non-null types has no Iceberg column type")
        return _arrow_type(branches[0], named, space, depth + 1)
    if not isinstance(t, dict):
        raise ConversionError(f"unexpected type {t!r}")
    kind, logical = t.get("type"), t.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return _TIMESTAMP
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(t["precision"]), int(t.get("scale", 0)))
    if kind == "record":
        ns = t.get("namespace", space)
        name = t["name"] if "." in t["name"] or ns is None else f"{ns}.{t['name']}"
        fields = [pa.field(f["name"], _arrow_type(f["type"], named, ns, depth + 1)) for f in t["fields"]]
        out = named[name] = pa.struct(fields)
        return out
    if kind == "enum":
        ns = t.get("namespace", space)
        named[t["name"] if ns is None else f"{ns}.{t['name']}"] = pa.string()
        return pa.string()
    if kind == "fixed":
        ns = t.get("namespace", space)
        named[t["name"] if ns is None else f"{ns}.{t['name']}"] = pa.binary()
        return pa.binary()
    if kind == "array":
        return pa.list_(pa.field("element", _arrow_type(t["items"], named, space, depth + 1)))
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(t["values"], named, space, depth + 1))
    return _arrow_type(kind, named, space, depth + 1)


def _plain(value: Any, t: pa.DataType) -> Any:
    """A decoded Avro value as Arrow takes it (maps as key/value pairs)."""
    if value is None:
        return None
    if pa.types.is_map(t):
        return [(k, _plain(v, t.item_type)) for k, v in value.items()]
    if pa.types.is_struct(t):
        return {f.name: _plain(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t):
        return [_plain(v, t.value_type) for v in value]
    return value


@dataclass
class ValueSchemaRows:
    """value_schema mode: values framed for the schema registry (magic byte 0, a 4-byte schema id,
    Avro binary) decoded with their writer's schema and read as the subject's latest version
    (Avro's resolution: a field the writer did not have takes its default)."""

    topic: str
    partition: int
    #: the registry's view (None: this broker has none now); ``versions(subject)`` and ``by_id(id)``
    registry: Callable[[], Any]
    subject: str = ""
    _parsed: dict[int, Any] = field(default_factory=dict)
    _latest: tuple[int, Any, pa.Schema] | None = None

    def __post_init__(self) -> None:
        self.subject = self.subject or f"{self.topic}-value"

    def latest(self) -> tuple[int, pa.Schema] | None:
        """``(schema id, Arrow schema of the table)`` of the subject's latest version (None: the
        subject has no version); RegistryUnavailable when the broker has no registry view now,
        ConversionError if the schema cannot be a table."""
        import fastavro

        state = self.registry()
        if state is None:
            raise RegistryUnavailable(f"no view of the schema registry (for the subject {self.subject})")
        versions = state.versions(self.subject)
        if not versions:
            return None
        v = versions[-1]
        if v.schema_type != "AVRO":
            raise ConversionError(f"the subject {self.subject} holds a {v.schema_type} schema; value_schema mode reads Avro")
        if v.references:
            raise ConversionError(f"the subject {self.subject}'s schema has references, which value_schema mode does not read")
        if self._latest is None or self._latest[0] != v.id:
            arrow = avro_to_arrow(v.schema)
            clash = {f.name for f in KAFKA_COLUMNS} & set(arrow.names)
            if clash:
                raise ConversionError(f"the schema's fields {sorted(clash)} clash with the table's Kafka columns")
            self._latest = (v.id, fastavro.parse_schema(json.loads(v.schema)), pa.schema([*arrow, *KAFKA_COLUMNS]))
        return self._latest[0], self._latest[2]

    def schema(self) -> pa.Schema:
        latest = self.latest()
        if latest is None:
            raise ConversionError(f"the subject {self.subject} has no schema yet")
        return latest[1]

    def _writer(self, schema_id: int) -> Any:
        import fastavro

        parsed = self._parsed.get(schema_id)
        if parsed is None:
            state = self.registry()
            if state is None:
                raise RegistryUnavailable(f"no view of the schema registry (for schema id {schema_id})")
            found = state.by_id(schema_id)
            if found is None:
                raise ConversionError(f"schema id {schema_id} is not in the registry")
            if found.schema_type != "AVRO" or found.references:
                raise ConversionError(f"schema id {schema_id} is not a self-contained Avro schema")
            parsed = self._parsed[schema_id] = fastavro.parse_schema(json.loads(found.schema))
        return parsed

    def _decode(self, rec: Record, reader: Any) -> dict[str, Any]:
        import fastavro

        if rec.value is None:
            raise ConversionError("the value is null (a tombstone)")
        try:
            schema_id = read_header(rec.value)
        except FramingError as exc:
            raise ConversionError(f"the value is not framed for the schema registry: {exc}") from None
        writer = self._writer(schema_id)
        try:
            buf = io.BytesIO(memoryview(rec.value)[5:])
            value = fastavro.schemaless_reader(buf, writer, reader)
        except Exception as exc:  # fastavro raises many kinds on bad bytes
            raise ConversionError(f"the value does not decode with schema id {schema_id}: {type(exc).__name__}: {exc}") from None
        if buf.tell() != len(rec.value) - 5:
            raise ConversionError(f"the value has {len(rec.value) - 5 - buf.tell()} bytes after its Avro record")
        if not isinstance(value, dict):
            raise ConversionError("the value is not an Avro record")
        return value

    def convert(self, records: Sequence[Record]) -> tuple[pa.Table, list[DeadLetter]]:
        latest = self.latest()
        if latest is None or self._latest is None:
            raise ConversionError(f"the subject {self.subject} has no schema yet")
        _, reader, schema = self._latest
        good: list[Record] = []
        rows: list[dict[str, Any]] = []
        dead: list[DeadLetter] = []
        value_fields = [f for f in schema if not f.name.startswith("kafka_")]
        for rec in records:
            try:
                value = self._decode(rec, reader)
                row = {f.name: _plain(value.get(f.name), f.type) for f in value_fields}
                # the row must become Arrow values: checked per record so one bad record fails alone
                pa.array([row], pa.struct(value_fields))
            except ConversionError as exc:
                dead.append(DeadLetter(rec, str(exc)))
                continue
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                dead.append(DeadLetter(rec, f"the value does not fit the table's columns: {exc}"))
                continue
            good.append(rec)
            rows.append(row)
        columns = [pa.array([r[f.name] for r in rows], f.type) for f in value_fields]
        columns += _kafka_columns(good, self.topic, self.partition)
        return pa.Table.from_arrays(columns, schema=schema), dead

