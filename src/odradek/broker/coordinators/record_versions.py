"""Value versions of the coordinators' records that this Odradek reads.

A record of a type a coordinator reads (its key's record type, or key version for the oldest
types) whose value carries a version above the ones this Odradek knows was written by a newer
version: reading it by the fields this version knows could load wrong state.  Its partition's
load fails with :class:`UnknownRecordVersionError` (logged by the runtime as one ERROR line
naming the partition, offset, record and versions) and the partition stays unavailable; nothing
is skipped or deleted.  Kafka's coordinator loader fails a partition's load the same way.
Records of an unknown TYPE are another matter: they are skipped with a WARN, as Kafka does (left
over from an aborted upgrade, or a group type this version does not have).
"""

from __future__ import annotations

from odradek.errors import OdradekError

__all__ = ["UnknownRecordVersionError", "check_value_version"]


class UnknownRecordVersionError(OdradekError):
    """A record value in a version this Odradek does not read; ``offset`` is set by the
    runtime once it knows where the record is."""

    def __init__(self, record: str, version: int, known: tuple[int, int]) -> None:
        self.record = record
        self.version = version
        self.known = known
        self.offset = -1
        super().__init__(self.describe())

    def describe(self) -> str:
        low, high = self.known
        reads = f"version {low}" if low == high else f"versions {low}-{high}"
        where = f"the record at offset {self.offset}" if self.offset >= 0 else "a record"
        return (
            f"{where} is a {self.record} of value version {self.version}, which this Odradek does not read "
            f"(it reads {reads}): it was written by a newer Odradek"
        )


def check_value_version(record: str, version: int, known: tuple[int, int]) -> None:
    """Raise UnknownRecordVersionError unless ``known[0] <= version <= known[1]``."""
    if not known[0] <= version <= known[1]:
        raise UnknownRecordVersionError(record, version, known)
