"""Sparse offset and time indexes of a log segment, memory-mapped, in Kafka's file formats.

``<base offset>.index`` — entries of 8 bytes: int32 offset relative to the segment's base offset,
int32 byte position of the batch in the ``.log`` file; big-endian; offsets strictly increasing.

``<base offset>.timeindex`` — entries of 12 bytes: int64 timestamp, int32 relative offset;
timestamps strictly increasing (an entry is added only when it would raise the maximum).

While a segment is active its index files are preallocated to ``segment.index.bytes`` (rounded
down to whole entries; sparse on disk) and their entries are kept in memory, written out by
flushes; when the segment rolls or closes they are trimmed to their entries.  An active segment
found at start-up is preallocated at its first write-out, not at load: a broker with thousands
of idle partitions neither grows nor trims their files at every start and stop.  Lookups
binary-search the entries.  No index holds a descriptor of its own (see :class:`_Index`).

Not thread-safe: the owning log serialises writers; readers of an immutable (rolled) segment's
index only read.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path

from odradek.storage.errors import CorruptIndexError

__all__ = ["OffsetIndex", "TimeIndex", "last_entry_at_or_below"]

_off_entry = struct.Struct(">ii")
_time_entry = struct.Struct(">qi")


_IN_MEMORY_MAX = 64 * 1024  # sealed indexes up to this size are read into memory, larger ones mapped



def last_entry_at_or_below(entry: Callable[[int], tuple[int, int]], count: int, key_of: int, target: int) -> int:
    """Binary search of an index's ``count`` sorted entries: the position of the last one whose
    field ``key_of`` is <= ``target``, or -1 (shared by the writable indexes and the read-only
    reader)."""
    lo, hi = 0, count - 1
    found = -1
    while lo <= hi:
        mid = (lo + hi) >> 1
        if entry(mid)[key_of] <= target:
            found = mid
            lo = mid + 1
        else:
            hi = mid - 1
    return found

class _Index:
    """Entries of one index file, held without an open descriptor wherever possible.

    - Active (writable): the entries live in a bytearray; the file is preallocated (Kafka's
      layout) and the entries not yet on disk are written by :meth:`flush` / :meth:`trim`, each
      opening the file for the write.  An active segment therefore costs no descriptor for its
      indexes (only its ``.log``).  After a crash its indexes are rebuilt by recovery, as before.
    - Sealed (read-only): loaded on first use — read into memory when small, else memory-mapped
      (a mapping keeps one duplicated descriptor; Python < 3.13 cannot map without it) — and the
      file's own descriptor is closed at once.  :meth:`release` drops a sealed index's memory or
      mapping until its next use.
    """

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int, writable: bool, exists: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_bytes // self.entry_size)
        self._buf: bytes | bytearray | mmap.mmap | None = None
        self._entries = 0
        self.partial_bytes = 0
        self._synced = 0  # entries known to be on disk as in _buf (writable)
        self._disk_entries = 0  # entries the file may hold (stale ones after a truncation)
        self._dirty = False
        self.writable = False
        self._file_size = 0  # the file's size when last loaded or written out
        self._closed = False
        if not exists and not path.exists():  # exists: the caller listed the directory
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            os.close(fd)
        if writable:
            self.make_writable()

    # -- loading ---------------------------------------------------------------------------
    def _load(self) -> bytes | bytearray | mmap.mmap:
        """The entries' buffer, read from the file on first use."""
        buf = self._buf
        if buf is not None:
            return buf
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            # removed under a reader of an old segment list (retention, cleaning): without its
            # index a lookup scans the segment from its start, through the open .log
            self._entries, self._buf = 0, b""
            return self._buf
        try:
            size = self._file_size = os.fstat(fd).st_size
            entries = self._count_entries(fd, size)
            self.partial_bytes = size % self.entry_size
            length = entries * self.entry_size
            if length == 0:
                buf = b""
            elif length <= _IN_MEMORY_MAX:
                buf = os.pread(fd, length, 0)
            else:
                buf = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self._entries = entries
        self._buf = buf
        return buf

    @property
    def entries(self) -> int:
        if self._buf is None:
            self._load()
        return self._entries

    @entries.setter
    def entries(self, value: int) -> None:
        if self._buf is None:
            self._load()
        self._entries = value

    def release(self) -> None:
        """Forget a sealed index's entries (memory or mapping) until they are needed again."""
        if self.writable or self._buf is None:
            return
        buf, self._buf = self._buf, None
        if isinstance(buf, mmap.mmap):
            buf.close()

    def _count_entries(self, fd: int, size: int) -> int:
        """Entries in an existing file: stop at the first all-zero entry (a preallocated file that
        was not trimmed before a crash is zero-filled past its entries).  No real entry is all
        zero: the first batch of a segment is never indexed, so no entry has position 0.

        Read in chunks and searched in C: an untrimmed file is ``segment.index.bytes`` long (10 MiB
        by default) and reading all of it for every partition made a start after a crash slow."""
        es = self.entry_size
        n = size // es
        zero = bytes(es)
        count = 0
        while count < n:
            data = os.pread(fd, min(n - count, 8192) * es, count * es)
            if not data:
                break
            at = data.find(zero)
            while at >= 0 and at % es:
                at = data.find(zero, at + 1)
            if at >= 0:
                return count + at // es
            count += len(data) // es
        return count

    def make_writable(self, preallocate: bool = True) -> None:
        """Hold the entries in memory for appends and preallocate the file (the segment is
        active); ``preallocate=False`` leaves the file as it is until the first write-out."""
        buf = self._load()
        entries = self._entries
        self._buf = bytearray(buf[: entries * self.entry_size])
        if isinstance(buf, mmap.mmap):
            buf.close()
        size = self._file_size
        if preallocate:
            fd = os.open(self.path, os.O_RDWR)
            try:
                self._preallocate(fd)
            finally:
                os.close(fd)
        # whatever lies past the entries (a partial entry, stale ones) is zeroed by the next flush
        self._synced = entries
        self._disk_entries = max(entries, -(-size // self.entry_size))
        self.writable = True
        self.partial_bytes = 0

    def _preallocate(self, fd: int) -> None:
        """Grow the open file to ``segment.index.bytes`` (whole entries)."""
        self._file_size = self.max_entries * self.entry_size
        os.ftruncate(fd, self._file_size)

    def _write_out(self, length: int | None) -> None:
        """Write the entries not on disk yet, zero stale ones, optionally truncate to ``length``,
        and sync."""
        es = self.entry_size
        entries = self._entries
        buf = self._buf
        assert buf is not None
        fd = os.open(self.path, os.O_RDWR)
        try:
            if length is None and self._file_size < self.max_entries * self.entry_size:
                self._preallocate(fd)
            if entries > self._synced:
                os.pwrite(fd, bytes(buf[self._synced * es : entries * es]), self._synced * es)
            if length is None and self._disk_entries > entries:
                os.pwrite(fd, bytes((self._disk_entries - entries) * es), entries * es)
            if length is not None:
                os.ftruncate(fd, length)
                self._file_size = length
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self._synced = self._disk_entries = entries
        self._dirty = False

    def trim(self) -> None:
        """Write out and shrink the file to its entries (the segment rolled or is closing); the
        entries stay in memory when small."""
        if not self.writable:
            return
        length = self._entries * self.entry_size
        if self._dirty or self._file_size != length:
            self._write_out(length)
        # else: nothing written since it was loaded, and the file holds exactly the entries
        self.writable = False
        buf = self._buf
        assert buf is not None
        self._buf = bytes(buf[:length]) if length <= _IN_MEMORY_MAX else None

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry_size

    def flush(self) -> None:
        if self.writable and self._dirty:
            self._write_out(None)

    def close(self) -> None:
        if self._closed:
            return
        if self.writable:
            self.trim()
        self.release()
        self._closed = True

    def abandon(self) -> None:
        """Forget the entries and write nothing: the file stays as it is."""
        self.writable = False
        self.release()
        self._closed = True

    def delete(self) -> None:
        self.abandon()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.entries = 0
        if self.writable:
            assert isinstance(self._buf, bytearray)
            del self._buf[:]
            self._synced = 0
            self._dirty = True

    def _truncate_entries(self, n: int) -> None:
        self.entries = n
        if self.writable:
            assert isinstance(self._buf, bytearray)
            del self._buf[n * self.entry_size :]
            self._synced = min(self._synced, n)
            self._dirty = True

    # -- entries ---------------------------------------------------------------------------
    def _entry(self, i: int) -> tuple[int, int]:
        buf = self._buf if self._buf is not None else self._load()
        a, b = self.ENTRY.unpack_from(buf, i * self.entry_size)
        return a, b

    def _write(self, i: int, a: int, b: int) -> None:
        if not self.writable:
            raise CorruptIndexError(f"{self.path} is not writable")
        buf = self._buf
        assert isinstance(buf, bytearray)
        es = self.entry_size
        del buf[i * es :]
        buf += self.ENTRY.pack(a, b)
        self._synced = min(self._synced, i)
        self._dirty = True

    def _search(self, key_of: int, target: int) -> int:
        """Index of the last entry whose key (field ``key_of``) is <= target, or -1."""
        return last_entry_at_or_below(self._entry, self.entries, key_of, target)


class OffsetIndex(_Index):
    """``.index``: relative offset -> file position."""

    ENTRY = _off_entry

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must increase."""
        rel = offset - self.base_offset
        if self.entries and rel <= self._entry(self.entries - 1)[0]:
            raise CorruptIndexError(f"offset {offset} does not follow the last entry of {self.path}")
        if self.is_full:
            raise CorruptIndexError(f"{self.path} is full")
        self._write(self.entries, rel, position)
        self.entries += 1

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._entry(self.entries - 1)[0] if self.entries else self.base_offset

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``; ``(base, 0)`` if none."""
        i = self._search(0, offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self._entry(i)
        return self.base_offset + rel, pos

    def entry(self, i: int) -> tuple[int, int]:
        rel, pos = self._entry(i)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        i = self._search(0, offset - self.base_offset)
        # keep entries strictly below offset
        while i >= 0 and self._entry(i)[0] >= offset - self.base_offset:
            i -= 1
        self._truncate_entries(i + 1)

    def sanity_check(self, log_size: int) -> None:
        self._load()
        if self.partial_bytes:
            raise CorruptIndexError(f"{self.path}: {self.partial_bytes} bytes after the last whole entry")
        prev = -1
        for i in range(self.entries):
            rel, pos = self._entry(i)
            if rel <= prev or pos < 0 or pos > log_size:
                raise CorruptIndexError(f"{self.path}: entry {i} ({rel}, {pos}) is invalid")
            prev = rel


class TimeIndex(_Index):
    """``.timeindex``: timestamp -> relative offset."""

    ENTRY = _time_entry

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base)``."""
        if not self.entries:
            return -1, self.base_offset
        ts, rel = self._entry(self.entries - 1)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is above the last one's (timestamps only increase)."""
        if self.entries:
            last_ts, last_rel = self._entry(self.entries - 1)
            if timestamp <= last_ts:
                return
            if offset - self.base_offset < last_rel:
                raise CorruptIndexError(f"offset {offset} goes backwards in {self.path}")
        if self.is_full:
            raise CorruptIndexError(f"{self.path} is full")
        self._write(self.entries, timestamp, offset - self.base_offset)
        self.entries += 1

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry with a timestamp <= ``timestamp``;
        ``(-1, base)`` when there is none."""
        i = self._search(0, timestamp)
        if i < 0:
            return -1, self.base_offset
        ts, rel = self._entry(i)
        return ts, self.base_offset + rel

    def entry(self, i: int) -> tuple[int, int]:
        ts, rel = self._entry(i)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        n = self.entries
        while n > 0 and self._entry(n - 1)[1] >= offset - self.base_offset:
            n -= 1
        self._truncate_entries(n)

    def sanity_check(self, log_size: int) -> None:
        self._load()
        if self.partial_bytes:
            raise CorruptIndexError(f"{self.path}: {self.partial_bytes} bytes after the last whole entry")
        prev_ts, prev_rel = -1, -1
        for i in range(self.entries):
            ts, rel = self._entry(i)
            if ts <= prev_ts or rel < prev_rel:
                raise CorruptIndexError(f"{self.path}: entry {i} ({ts}, {rel}) is invalid")
            prev_ts, prev_rel = ts, rel
