"""TxnMetadata.copy builds the copy field by field: it must carry every field (a field added
to the dataclass and forgotten there would silently reset to its default)."""

from __future__ import annotations

import dataclasses

import pytest

from odradek.cluster.transactions import TxnMetadata, TxnState


def _full() -> TxnMetadata:
    """Metadata whose every field differs from its default."""
    return TxnMetadata(
        "id-1", 7, 3, 60_000, TxnState.ONGOING, {("t", 0), ("t", 1)}, 11, 12, 5, 2, TxnState.PREPARE_COMMIT, 2, 9
    )


def test_every_field_differs_from_its_default() -> None:
    meta, default = _full(), TxnMetadata("", 0, 0, 0)
    assert all(getattr(meta, f.name) != getattr(default, f.name) for f in dataclasses.fields(TxnMetadata))


def test_copy_keeps_every_field_and_owns_its_partitions() -> None:
    meta = _full()
    out = meta.copy()
    assert out == meta
    assert out.partitions is not meta.partitions
    out.partitions.add(("t", 9))
    assert ("t", 9) not in meta.partitions


def test_copy_applies_changes_and_refuses_unknown_names() -> None:
    meta = _full()
    parts = {("u", 3)}
    out = meta.copy(state=TxnState.PREPARE_ABORT, partitions=parts, update_ms=99)
    assert (out.state, out.partitions, out.update_ms) == (TxnState.PREPARE_ABORT, parts, 99)
    assert dataclasses.replace(meta, state=TxnState.PREPARE_ABORT, partitions=parts, update_ms=99) == out
    with pytest.raises(AttributeError):
        meta.copy(no_such_field=1)
