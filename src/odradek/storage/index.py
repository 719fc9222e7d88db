"""Sparse offset and time indexes of a log segment, memory-mapped, in Kafka's file formats.

``<base offset>.index`` — entries of 8 bytes: int32 offset relative to the segment's base offset,
int32 byte position of the batch in the ``.log`` file; big-endian; offsets strictly increasing.

``<base offset>.timeindex`` — entries of 12 bytes: int64 timestamp, int32 relative offset;
timestamps strictly increasing (an entry is added only when it would raise the maximum).

While a segment is active its index files are preallocated to ``segment.index.bytes`` (rounded
down to whole entries; sparse on disk) and memory-mapped; when the segment rolls or closes they
are trimmed to their entries.  Lookups binary-search the mapped entries.

Not thread-safe: the owning log serialises writers; readers of an immutable (rolled) segment's
index only read.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from odradek.storage.errors import CorruptIndexError

__all__ = ["OffsetIndex", "TimeIndex"]

_off_entry = struct.Struct(">ii")
_time_entry = struct.Struct(">qi")


class _Index:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_bytes // self.entry_size)
        self._mmap: mmap.mmap | None = None
        self._dirty = False
        self._fd = -1
        exists = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size if exists else 0
        self.entries = self._count_entries(size)
        # Kafka's index files always hold whole entries: anything else is corrupt (rebuilt)
        self.partial_bytes = size % self.entry_size
        self.writable = False
        self._closed = False
        if writable:
            self.make_writable()
        else:
            self._map(size - size % self.entry_size)
            self._release_fd()

    # -- mapping -------------------------------------------------------------------------
    def _map(self, length: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        if length > 0:
            self._mmap = mmap.mmap(self._fd, length)

    def _count_entries(self, size: int) -> int:
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
            data = os.pread(self._fd, min(n - count, 8192) * es, count * es)
            if not data:
                break
            at = data.find(zero)
            while at >= 0 and at % es:
                at = data.find(zero, at + 1)
            if at >= 0:
                return count + at // es
            count += len(data) // es
        return count

    def _release_fd(self) -> None:
        """A read-only index lives on in its mapping (which holds its own descriptor): close
        ours, so that sealed segments cost one descriptor per index instead of two."""
        if self._fd >= 0 and not self.writable and (self._mmap is not None or self.entries == 0):
            os.close(self._fd)
            self._fd = -1

    def _ensure_fd(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def make_writable(self) -> None:
        """Preallocate to the maximum size and map it for appends (the segment is active)."""
        os.ftruncate(self._ensure_fd(), self.max_entries * self.entry_size)
        self._map(self.max_entries * self.entry_size)
        self.writable = True
        self.partial_bytes = 0

    def trim(self) -> None:
        """Shrink the file to its entries (the segment rolled or is closing)."""
        length = self.entries * self.entry_size
        fd = self._ensure_fd()
        if self._dirty:
            os.fdatasync(fd)
            self._dirty = False
        self._map(0)
        os.ftruncate(fd, length)
        self._map(length)
        self.writable = False
        self._release_fd()

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry_size

    def flush(self) -> None:
        if self._dirty and self._fd >= 0:
            os.fdatasync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._closed:
            return
        if self.writable:
            self.trim()
        self._map(0)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._closed = True

    def delete(self) -> None:
        self._map(0)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._closed = True
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        used = self.entries * self.entry_size
        self.entries = 0
        if self.writable and used:
            os.pwrite(self._ensure_fd(), bytes(used), 0)
            self._dirty = True

    # -- entries ---------------------------------------------------------------------------
    def _entry(self, i: int) -> tuple[int, int]:
        assert self._mmap is not None
        a, b = self.ENTRY.unpack_from(self._mmap, i * self.entry_size)
        return a, b

    def _write(self, i: int, a: int, b: int) -> None:
        # Entries are written with pwrite and read through the shared mapping, which sees the
        # same page cache: a first store through the mapping into the sparse preallocated file
        # costs a page fault with block allocation (milliseconds here), pwrite microseconds.
        if not self.writable or self._mmap is None:
            raise CorruptIndexError(f"{self.path} is not writable")
        os.pwrite(self._fd, self.ENTRY.pack(a, b), i * self.entry_size)
        self._dirty = True

    def _search(self, key_of: int, target: int) -> int:
        """Index of the last entry whose key (field ``key_of``) is <= target, or -1."""
        lo, hi = 0, self.entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if self._entry(mid)[key_of] <= target:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found


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
        self.entries = i + 1

    def sanity_check(self, log_size: int) -> None:
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
        self.entries = n

    def sanity_check(self, log_size: int) -> None:
        if self.partial_bytes:
            raise CorruptIndexError(f"{self.path}: {self.partial_bytes} bytes after the last whole entry")
        prev_ts, prev_rel = -1, -1
        for i in range(self.entries):
            ts, rel = self._entry(i)
            if ts <= prev_ts or rel < prev_rel:
                raise CorruptIndexError(f"{self.path}: entry {i} ({ts}, {rel}) is invalid")
            prev_ts, prev_rel = ts, rel
