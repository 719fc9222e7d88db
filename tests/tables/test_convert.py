"""Records to rows: a value that is not what the schema reads becomes a dead letter with its reason,
never an exception and never a lost record (hypothesis over arbitrary value bytes)."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.records import BatchBuilder, Record
from odradek.tables.convert import KeyValueRows, ValueSchemaRows, committed_records

fastavro = pytest.importorskip("fastavro")

SCHEMA = {"type": "record", "name": "R", "fields": [
    {"name": "n", "type": "long"}, {"name": "s", "type": "string"},
    {"name": "m", "type": {"type": "map", "values": "int"}},
]}


@dataclass
class _Version:
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple[Any, ...] = ()


class _Registry:
    def __init__(self) -> None:
        self.v = _Version(7, json.dumps(SCHEMA))

    def versions(self, subject: str) -> list[_Version]:
        return [self.v] if subject == "t-value" else []

    def by_id(self, schema_id: int) -> _Version | None:
        return self.v if schema_id == 7 else None


def _framed(value: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), value)
    return b"\x00" + struct.pack(">i", 7) + buf.getvalue()


def _rows() -> ValueSchemaRows:
    registry = _Registry()
    return ValueSchemaRows("t", 0, lambda: registry)  # type: ignore[arg-type, return-value]


@given(st.lists(st.one_of(st.binary(max_size=40), st.builds(lambda b: b"\x00\x00\x00\x00\x07" + b, st.binary(max_size=30))),
                max_size=20))
def test_every_record_is_a_row_or_a_dead_letter_with_a_reason(values: list[bytes]) -> None:
    good = _framed({"n": 5, "s": "five", "m": {"a": 1}})
    records = [Record(i, 1_700_000_000_000, None, v, []) for i, v in enumerate([good, *values])]
    table, dead = _rows().convert(records)
    offsets = table["kafka_offset"].to_pylist() + [d.record.offset for d in dead]
    assert sorted(offsets) == list(range(len(records)))
    assert all(d.reason for d in dead)
    row = table.to_pylist()[0]
    assert (row["n"], row["s"], row["m"]) == (5, "five", [("a", 1)])


def test_committed_records_leave_out_aborted_transactions_and_control_batches() -> None:
    def batch(base: int, values: list[bytes], pid: int = -1) -> bytes:
        b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                         base_sequence=0 if pid >= 0 else -1, is_transactional=pid >= 0)
        for v in values:
            b.append(1_700_000_000_000, None, v)
        return b.build()

    def marker(base: int, pid: int, commit: bool) -> bytes:
        from odradek.records import end_txn_marker

        b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True)
        key, value = end_txn_marker(commit, 0)
        b.append(1_700_000_000_000, key, value)
        return b.build()

    data = (batch(0, [b"a0", b"a1"], pid=1) + batch(2, [b"n0"]) + batch(3, [b"b0"], pid=2)
            + marker(4, 1, False) + marker(5, 2, True) + batch(6, [b"a2"], pid=1) + batch(7, [b"n1"]))
    got, after = committed_records(data, [(1, 0)], 0, 8)
    assert [(r.offset, r.value) for r in got] == [(2, b"n0"), (3, b"b0"), (6, b"a2"), (7, b"n1")]
    assert after == 8
    # from the middle, and below a last stable offset
    got, after = committed_records(data, [], 3, 6)
    assert [(r.offset, r.value) for r in got] == [(3, b"b0")] and after == 6
    assert KeyValueRows("t", 0).convert(got)[0]["offset"].to_pylist() == [3]


def test_no_registry_view_converts_nothing_rather_than_dead_lettering_everything() -> None:
    from odradek.tables.convert import RegistryUnavailable

    rows = ValueSchemaRows("t", 0, lambda: None)
    with pytest.raises(RegistryUnavailable):
        rows.convert([Record(0, 1_700_000_000_000, None, _framed({"n": 1, "s": "a", "m": {}}), [])])


def test_key_value_columns_keep_timestamps_headers_and_nulls() -> None:
    from datetime import UTC, datetime

    records = [Record(5, 1_700_000_000_123, b"k", b"v", [("a", b"1"), ("b", None)]),  # type: ignore[list-item]
               Record(6, -1, None, None, [])]
    rows = KeyValueRows("t", 3).convert(records)[0].to_pylist()
    assert rows[0] == {"key": b"k", "value": b"v", "topic": "t", "partition": 3, "offset": 5,
                       "timestamp": datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
                       "headers": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]}
    assert rows[1] == {"key": None, "value": None, "topic": "t", "partition": 3, "offset": 6, "timestamp": None,
                       "headers": []}
