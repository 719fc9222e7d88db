"""The aborted-transaction index of a segment: ``<base offset>.txnindex``, Kafka's format.

A read_committed consumer must drop the records of aborted transactions.  The broker tells it
which: a Fetch response lists ``(producer id, first offset)`` of every aborted transaction that
overlaps the data returned, collected from these files.  An entry is written when an ABORT
marker is appended, to the index of the segment the marker went to.

Entry (34 bytes, big-endian, no header): int16 version (0), int64 producer id, int64 first
offset, int64 last offset (the marker's), int64 last stable offset (the partition's LSO once the
transaction completed).  Entries are in the order of their last offsets.  A torn last entry (a
crash in the middle of a write) is cut off when the file is opened; the log's producer-state
replay after a crash writes again what was lost (see :meth:`ProducerStateManager.rebuild`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from odradek.storage.errors import CorruptIndexError
from odradek.storage.files import OS_FILES, FileOps

__all__ = ["AbortedTxn", "TransactionIndex"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The aborted transactions of one segment, loaded on first use; the file is created by the
    first entry (most segments never have one)."""

    def __init__(self, path: Path, files: FileOps = OS_FILES) -> None:
        self.path = path
        self.files = files
        self._entries: list[AbortedTxn] | None = None
        self._dirty = False  # the file has a torn last entry to cut off
        self._unsynced = False

    # -- reading ---------------------------------------------------------------------------
    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._load()
        return self._entries

    def _load(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % ENTRY_SIZE
        out: list[AbortedTxn] = []
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != 0:
                raise CorruptIndexError(f"{self.path}: entry at byte {pos} has version {version}, not 0")
            if out and last < out[-1].last_offset:
                raise CorruptIndexError(f"{self.path}: entry at byte {pos} ends before the one before it")
            out.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):  # a torn last entry: rewrite without it
            self._dirty = True
        return out

    @property
    def last_offset(self) -> int:
        e = self.entries
        return e[-1].last_offset if e else -1

    def overlapping(self, fetch_offset: int, upper: int) -> Iterator[AbortedTxn]:
        """The aborted transactions with data in ``[fetch_offset, upper)``."""
        for t in self.entries:
            if t.last_offset >= fetch_offset and t.first_offset < upper:
                yield t

    # -- writing ---------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise CorruptIndexError(
                f"{self.path}: aborted transaction ending at {txn.last_offset} after one ending at "
                f"{entries[-1].last_offset}"
            )
        entries.append(txn)
        if self._dirty:
            self._rewrite()
            return
        fd = self.files.open(self.path)
        try:
            self.files.write_at(fd, _pack(txn), (len(entries) - 1) * ENTRY_SIZE)
        finally:
            self.files.close(fd)
        self._unsynced = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions whose marker is at or after ``offset``."""
        entries = self.entries
        keep = [t for t in entries if t.last_offset < offset]
        if len(keep) != len(entries) or self._dirty:
            self._entries = keep
            self._rewrite()

    def flush(self) -> None:
        if self._dirty:
            self._rewrite()
        if self._unsynced:
            fd = self.files.open(self.path)
            try:
                self.files.datasync(fd)
            finally:
                self.files.close(fd)
            self._unsynced = False

    def _rewrite(self) -> None:
        entries = self._entries or []
        self._dirty = False
        if not entries:
            self.files.remove(self.path)
            self._unsynced = False
            return
        fd = self.files.open(self.path)
        try:
            self.files.truncate(fd, 0)
            self.files.write_at(fd, b"".join(map(_pack, entries)), 0)
        finally:
            self.files.close(fd)
        self._unsynced = True

    def rename(self, path: Path) -> None:
        if self.path.exists():
            self.files.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.files.remove(self.path)
        self._entries = []
        self._dirty = self._unsynced = False


def _pack(t: AbortedTxn) -> bytes:
    return _ENTRY.pack(0, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
