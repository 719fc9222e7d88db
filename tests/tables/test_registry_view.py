"""A writer on a broker that does not lead ``_schemas`` reads the registry view brought up to date:
that broker's view, as it is, holds only what its last catch-up replayed (a registry read through
its own listener), so a subject registered since would never be seen there and the partitions it
leads would never be written (found by tests/cluster/test_tables_done_when.py)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("fastavro")

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]})


class _State:
    def __init__(self, versions: list[Any]) -> None:
        self._versions = versions

    def versions(self, subject: str) -> list[Any]:
        return list(self._versions) if subject == "t-value" else []

    def by_id(self, schema_id: int) -> Any:
        return next((v for v in self._versions if v.id == schema_id), None)


class _FollowerView:
    """A view as a broker that does not lead ``_schemas`` keeps it: stale until synced."""

    def __init__(self) -> None:
        self.state = _State([])  # loaded before the subject was registered
        self.syncs = 0

    def current(self) -> _State:
        return self.state

    async def synced(self, timeout: float) -> _State:
        await asyncio.sleep(0)
        self.syncs += 1
        self.state = _State([SimpleNamespace(id=7, schema_type="AVRO", references=[], schema=SCHEMA)])
        return self.state


def test_a_writer_sees_a_subject_registered_after_its_brokers_view_was_loaded() -> None:
    from odradek.tables.convert import ValueSchemaRows
    from odradek.tables.service import TableWriters

    view = _FollowerView()

    async def latest() -> Any:
        writers = TableWriters(None, None, list, None, None, view.current, None, None,  # type: ignore[arg-type]
                               registry_synced=view.synced)
        rows = ValueSchemaRows("t", 0, writers._registry())
        # the writer's lookups run on a thread of their own, as the service runs its steps
        return await asyncio.get_running_loop().run_in_executor(None, rows.latest)

    found = asyncio.run(latest())
    assert found is not None, "the writer read the stale view: the table would never be created"
    assert found[0] == 7 and "id" in found[1].names
    assert view.syncs >= 1


def test_a_writer_waiting_for_its_schema_says_why_once(caplog: pytest.LogCaptureFixture) -> None:
    """A value_schema writer tries to create its table every commit interval; while it cannot (no
    registry view, no version of the subject) it says why in the log once per reason, not once
    per try and not never."""
    from odradek.tables.writer import PartitionWriter

    registry: list[Any] = [None]
    w = PartitionWriter(None, "ns", "t", 0, "value_schema", "none", None, lambda: registry[0])  # type: ignore[arg-type]

    def waits() -> list[tuple[int, str]]:
        lines = [(r.levelno, r.getMessage()) for r in caplog.records if "waits to create its table" in r.getMessage()]
        caplog.clear()
        return lines

    caplog.set_level("INFO", logger="odradek.tables.writer")
    for _ in range(3):
        assert w.open() is False
    assert waits() == [(30, "Iceberg writer of t-0 waits to create its table: no view of the schema registry (for the subject t-value)")]
    registry[0] = _State([])
    for _ in range(3):
        assert w.open() is False
    assert waits() == [(20, "Iceberg writer of t-0 waits to create its table: the subject t-value has no schema yet")]
    registry[0] = _State([SimpleNamespace(id=7, schema_type="AVRO", references=[], schema=SCHEMA)])
    assert w._table_schema() is not None
    assert waits() == []
    registry[0] = None  # waiting again after the schema was seen: said again
    assert w.open() is False
    assert [level for level, _ in waits()] == [30]
