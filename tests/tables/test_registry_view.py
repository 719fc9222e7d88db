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
