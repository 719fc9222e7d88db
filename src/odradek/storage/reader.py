"""Read-only access to a partition's segment files, for readers outside the broker.

``odradek dump-log`` and Spark's offline read (:mod:`odradek.spark._offline`) read ``.log``,
``.index`` and ``.timeindex`` files with what is here, and check entries the same way:
:func:`check_entries` walks the entries of a stretch of a ``.log`` file and says what is wrong
with each bad one (length, magic, offsets within the segment and increasing, CRC, a torn tail),
in the words of :func:`~odradek.storage.segment.entry_problem`, which recovery uses too.

Nothing here writes, creates or locks a file, so these readers are safe on a directory that a
broker is writing (they may see a torn tail: an entry being appended) and on read-only copies.
:class:`SegmentReader` opens a ``.log`` with ``O_RDONLY``; its indexes are read on demand,
only as far as a lookup needs, and an index entry is used only after the entry it points at is
found in the ``.log`` (an active segment's index on disk may be stale or zero-filled; a missing
or damaged index only makes the lookup scan from the segment's start).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from odradek.records import BatchHeader, RecordsError, peek_header, read_batches, validate
from odradek.storage.errors import CorruptSegmentError
from odradek.storage.index import last_entry_at_or_below
from odradek.storage.segment import entry_problem
from odradek.storage.validator import records_problem

__all__ = [
    "LARGEST_ENTRY",
    "EntryCheck",
    "SegmentDamageError",
    "SegmentReader",
    "TailScan",
    "check_entries",
    "find_next_entry",
    "list_segments",
]

_SEGMENT = re.compile(r"^(\d{20})\.log$")
_SWAP = re.compile(r"^\d{20}\.log\.swap$")
_HEADER_PEEK = 61  # a v2 batch header: enough for every format's offsets and timestamps
_WALK_FIRST_CHUNK = 4096
_WALK_CHUNK = 256 * 1024
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF
#: the largest entry believed possible: a longer length is garbage rather than a torn tail
#: (Kafka's largest usual ``log.segment.bytes``)
LARGEST_ENTRY = 1 << 30


def _first(h: BatchHeader) -> int:
    """First offset of an entry (a compressed v0/v1 wrapper knows only its last)."""
    return h.base_offset if h.base_offset >= 0 else h.last_offset


class SegmentDamageError(CorruptSegmentError):
    """An invalid entry in a ``.log`` file: ``path``, byte ``position``, the offset expected
    there (``offset``) and what is wrong (``problem``)."""

    def __init__(self, path: Path, position: int, offset: int, problem: str, hint: str = "") -> None:
        self.path = path
        self.position = position
        self.offset = offset
        self.problem = problem
        message = f"corrupt segment {path} at byte position {position} (after offset {offset - 1}): {problem}"
        super().__init__(message + (f"; {hint}" if hint else ""), path, position)


@dataclass(frozen=True, slots=True)
class EntryCheck:
    """One entry examined by :func:`check_entries`: its file ``position``, its ``header``
    (None when no sound entry frame is there) and what is wrong with it (None: nothing)."""

    position: int
    header: BatchHeader | None
    problem: str | None
    #: the problem is in the records only: the header (offsets, CRC) is sound
    records_only: bool = False


def check_entries(
    data: bytes | bytearray | memoryview,
    *,
    base_offset: int,
    expected: int,
    position: int = 0,
    file_size: int | None = None,
    check_crc: bool = True,
    max_size: int = LARGEST_ENTRY,
    check_records: bool = False,
) -> Iterator[EntryCheck]:
    """Check the entries of ``data``: the bytes of a ``.log`` file from ``position`` on, of a
    segment with base offset ``base_offset``, the first entry's offsets being ``expected`` or
    more.  Yields one :class:`EntryCheck` per entry, with absolute file positions.

    An entry whose frame is sound but that is otherwise bad (CRC, offsets) is reported and the
    walk goes on after it; bytes that do not form an entry (garbage, a torn tail) are reported
    and end the walk (:func:`find_next_entry` finds where sound entries may start again).
    ``file_size`` (default: the end of ``data``) says whether the file goes on after ``data``:
    then an entry that ``data`` holds only the beginning of ends the walk without a problem, for
    the caller to read on from there.  Entry lengths above ``max_size`` (and past the end of the
    file) are garbage, shorter ones past the end a torn tail.  ``check_records`` (with
    ``check_crc``): the records of each entry whose CRC is right are read against its header too
    (:func:`~odradek.storage.validator.records_problem`: a batch that lies about its records
    under a valid CRC); such an entry is reported and the walk goes on after it.
    """
    n = len(data)
    view = memoryview(data)
    end_of_file = position + n if file_size is None else file_size
    pos = 0
    base = base_offset
    while pos < n:
        remaining = end_of_file - position - pos  # bytes of the file from this entry on
        h = None
        with contextlib.suppress(RecordsError):
            h = peek_header(view, pos)
        if h is not None and h.size <= remaining:
            first = _first(h)
            if expected <= first <= h.last_offset and h.last_offset - base <= _MAX_RELATIVE_OFFSET:
                if pos + h.size > n:
                    return  # complete in the file, not in ``data``: the caller reads on
                problem = None
                if check_crc:
                    try:
                        validate(view, h._replace(position=pos))
                    except RecordsError:
                        _h, problem = entry_problem(
                            view[pos : pos + h.size],
                            remaining,
                            base_offset=base,
                            expected=expected,
                            max_size=remaining,
                        )
                        problem = problem or "invalid entry"
                    trusted = problem is None  # the header's offsets: its CRC is right
                    if trusted and check_records:
                        lie = records_problem(view[pos : pos + h.size], h._replace(position=0))
                        problem = None if lie is None else f"records do not match the batch header: {lie}"
                else:
                    trusted = True
                yield EntryCheck(position + pos, h._replace(position=position + pos), problem, trusted and bool(problem))
                if trusted:
                    expected = h.last_offset + 1
                pos += h.size
                continue
        if h is None and n - pos < min(_HEADER_PEEK, remaining):
            return  # the header itself is cut by the end of ``data``: the caller reads on
        whole = h is not None and pos + h.size <= n
        h, problem = entry_problem(
            view[pos:],
            remaining,
            base_offset=base,
            expected=expected,
            max_size=max(remaining, max_size),
            check_crc=check_crc and whole,
        )
        if problem is None:  # only possible for an entry beyond ``data``: the caller reads on
            return
        yield EntryCheck(position + pos, None if h is None else h._replace(position=position + pos), problem)
        if h is None or pos + h.size > n:
            return
        pos += h.size


def find_next_entry(data: bytes | bytearray, start: int, expected: int, base_offset: int) -> int | None:
    """Position in ``data`` (a whole ``.log`` file) of the next plausible v2 batch at or after
    ``start``: a sound header, offsets not going backwards, a correct CRC.  None if there is none."""
    view = memoryview(data)
    n = len(data)
    q = start
    while True:
        at = data.find(b"\x02", q + 16)
        if at < 0 or at - 16 + _HEADER_PEEK > n:
            return None
        cand = at - 16
        h, problem = entry_problem(
            view[cand:], n - cand, base_offset=base_offset, expected=expected, max_size=n - cand
        )
        if problem is None and h is not None:
            return cand
        q = cand + 1


def list_segments(directory: Path) -> tuple[list[tuple[int, Path]], bool]:
    """The ``(base offset, path)`` of the ``.log`` files of a partition directory, by base
    offset, and whether a compaction's swap is under way there (a ``.log.swap`` file: the
    segments it replaces may be missing from the listing for a moment)."""
    found = []
    swapping = False
    for name in os.listdir(directory):
        m = _SEGMENT.match(name)
        if m is not None:
            found.append((int(m.group(1)), directory / name))
        elif _SWAP.match(name):
            swapping = True
    found.sort()
    return found, swapping


class _IndexFile:
    """Entries of an ``.index`` or ``.timeindex`` file, read with ``pread`` as lookups need them.

    The file is opened on first use.  An active segment's index is preallocated and zero-filled
    after its entries: its entries end at the first all-zero one (found by bisection)."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd: int | None = None
        self._entries: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self._fd = -1
        return self._fd

    def _raw(self, i: int) -> bytes:
        size = self.ENTRY.size
        return os.pread(self._open(), size, i * size)

    @property
    def entries(self) -> int:
        if self._entries is None:
            fd = self._open()
            if fd < 0:
                self._entries = 0
            else:
                zero = bytes(self.ENTRY.size)
                lo, hi = 0, os.fstat(fd).st_size // self.ENTRY.size
                while lo < hi:  # entries before lo are set, from hi on zero
                    mid = (lo + hi) // 2
                    if self._raw(mid) == zero:
                        hi = mid
                    else:
                        lo = mid + 1
                self._entries = lo
        return self._entries

    def entry(self, i: int) -> tuple[int, int]:
        a, b = self.ENTRY.unpack(self._raw(i))
        return a, b

    def search(self, key_of: int, target: int) -> int:
        """Index of the last entry whose field ``key_of`` is <= ``target`` (-1: none)."""
        return last_entry_at_or_below(self.entry, self.entries, key_of, target)

    def close(self) -> None:
        if self._fd is not None and self._fd >= 0:
            os.close(self._fd)
        self._fd = None


class _OffsetIndexFile(_IndexFile):
    ENTRY = struct.Struct(">ii")

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``; ``(-1, 0)`` if none."""
        i = self.search(0, offset - self.base_offset)
        if i < 0:
            return -1, 0
        rel, pos = self.entry(i)
        return self.base_offset + rel, pos


class _TimeIndexFile(_IndexFile):
    ENTRY = struct.Struct(">qi")

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry with a timestamp <= ``timestamp`` (the base offset if none)."""
        i = self.search(0, timestamp)
        if i < 0:
            return self.base_offset
        _ts, rel = self.entry(i)
        return self.base_offset + rel


@dataclass(frozen=True, slots=True)
class TailScan:
    """Where the complete entries of a segment end (:meth:`SegmentReader.scan_tail`):
    ``end`` (a file position) and ``next_offset`` (after the last complete entry's last
    offset; the base offset when there is none), and the first thing after them that is not a
    complete, sound entry (``problem`` at ``problem_position``; None when the file ends there)."""

    end: int
    next_offset: int
    problem: str | None = None
    problem_position: int = -1


class SegmentReader:
    """One ``<base offset>.log`` file opened read-only, with its indexes.

    ``size`` is the file's size when opened: reads never go beyond it (a broker may be
    appending).  ``bytes_read`` and ``reads`` count what was read from the ``.log``."""

    def __init__(self, path: Path) -> None:
        m = _SEGMENT.match(path.name)
        if m is None:
            raise ValueError(f"{path} is not a segment file (<20-digit base offset>.log)")
        self.path = path
        self.base_offset = int(m.group(1))
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.index = _OffsetIndexFile(path.with_suffix(".index"), self.base_offset)
        self.time_index = _TimeIndexFile(path.with_suffix(".timeindex"), self.base_offset)
        self.bytes_read = 0
        self.reads = 0

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SegmentReader({self.path.name}, size={self.size})"

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.index.close()
        self.time_index.close()

    def read(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position``, never past :attr:`size`."""
        length = max(min(length, self.size - position), 0)
        if length == 0:
            return b""
        data = os.pread(self.fd, length, position)
        self.bytes_read += len(data)
        self.reads += 1
        return data

    def read_into(self, buffer: bytearray, position: int, length: int) -> memoryview:
        """Read up to ``length`` bytes at ``position`` (never past :attr:`size`) into the start of
        ``buffer``; returns a view of the bytes read (of new memory when ``buffer`` is too small).
        For readers that go through a file a large chunk at a time: one buffer, no new
        allocation per chunk (measured here: a fresh 8 MiB ``bytes`` per chunk cost a third of
        the time of reading and decoding a partition)."""
        length = max(min(length, self.size - position), 0)
        if len(buffer) < length:
            return memoryview(self.read(position, length))
        view = memoryview(buffer)[:length]
        done = 0
        while done < length:
            n = os.preadv(self.fd, [view[done:]], position + done)
            if n <= 0:
                break
            done += n
        self.bytes_read += done
        self.reads += 1
        return view[:done]

    # -- headers ---------------------------------------------------------------------------
    def peek(self, position: int) -> BatchHeader | None:
        """Header of the entry at ``position``, if a complete entry within the file is there."""
        head = self.read(position, _HEADER_PEEK)
        try:
            h = peek_header(head)
        except RecordsError:
            return None
        if h is None or position + h.size > self.size:
            return None
        return h._replace(position=position)

    def headers(self, start: int = 0, expected: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the entries from ``start`` on, read a chunk at a time (4 KiB first, larger
        while entries are small, 4 KiB again after an entry larger than a chunk), skipping the
        entries' bodies (no CRC check).  Ends at the end of
        the file, or quietly at the first thing that is not a sound entry frame
        (:meth:`scan_tail` says what it is)."""
        pos = start
        expected = self.base_offset if expected is None else expected
        chunk = b""
        at = pos  # file position of chunk[0]
        want = _WALK_FIRST_CHUNK
        while pos < self.size:
            if pos - at + _HEADER_PEEK > len(chunk) and at + len(chunk) < self.size:
                if pos >= at + len(chunk):  # past the chunk: entries larger than it, read headers only
                    want = _WALK_FIRST_CHUNK
                at, chunk = pos, self.read(pos, want)
                want = min(want * 4, _WALK_CHUNK)
            try:
                h = peek_header(chunk, pos - at)
            except RecordsError:
                return
            if h is None or pos + h.size > self.size:
                return
            first = _first(h)
            if (
                not expected <= first <= h.last_offset
                or h.last_offset - self.base_offset > _MAX_RELATIVE_OFFSET
            ):
                return
            yield h._replace(position=pos)
            expected = h.last_offset + 1
            pos += h.size

    def position_of(self, offset: int) -> tuple[int, int]:
        """``(position, expected)``: where to start reading for ``offset`` (the entry holding it,
        or the end of the scan) and the offset expected there, found through the offset index:
        its floor entry for ``offset`` when the ``.log`` confirms it, then a scan of headers."""
        indexed, position = self.index.lookup(offset)
        expected = self.base_offset
        if indexed >= 0 and 0 < position < self.size:
            h = self.peek(position)
            if h is not None and h.last_offset == indexed:
                expected = _first(h)
            else:
                position = 0  # a stale or damaged index: scan from the start
        else:
            position = 0
        for h in self.headers(position, expected):
            if h.last_offset >= offset:
                return h.position, _first(h)
            position, expected = h.end, h.last_offset + 1
        return position, expected

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int, end_offset: int
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``start_offset`` and before
        ``end_offset`` whose timestamp is >= ``timestamp`` (ListOffsets' rule, as the broker's
        segment applies it): the time index and the offset index find the batch to start from,
        and only batches whose largest timestamp reaches ``timestamp`` are decoded."""
        offset = self.time_index.lookup(timestamp)
        position, expected = self.position_of(max(offset, start_offset))
        for h in self.headers(position, expected):
            if _first(h) >= end_offset:
                return None
            if h.max_timestamp < timestamp or h.last_offset < start_offset:
                continue
            data = self.read(h.position, h.size)
            for batch in read_batches(data, verify_crc=False):
                for record in batch.records:
                    if record.offset >= end_offset:
                        return None
                    if record.offset >= start_offset and record.timestamp >= timestamp:
                        return record.offset, record.timestamp
        return None

    def scan_tail(self, check_last_crc: bool = True) -> TailScan:
        """Where the complete entries end: a walk of the headers from the last index entry the
        ``.log`` confirms (the start when none), then a CRC check of the last entry.  The first
        thing after them that is not a sound entry frame, or a last entry whose CRC fails, is
        the ``problem`` (a torn tail while a broker appends, or damage)."""
        index = self.index
        position, expected = 0, self.base_offset
        if index.entries:
            indexed, at = index.entry(index.entries - 1)
            indexed += self.base_offset
            if 0 < at < self.size:
                h = self.peek(at)
                if h is not None and h.last_offset == indexed:
                    position, expected = at, _first(h)
        last: BatchHeader | None = None
        end, next_offset = position, expected
        for h in self.headers(position, expected):
            last = h
            end, next_offset = h.end, h.last_offset + 1
        problem = None
        problem_position = -1
        if end < self.size:
            head = self.read(end, _HEADER_PEEK)
            _h, problem = entry_problem(
                head,
                self.size - end,
                base_offset=self.base_offset,
                expected=next_offset,
                max_size=max(self.size - end, LARGEST_ENTRY),
                check_crc=False,
            )
            problem = problem or "invalid entry"
            problem_position = end
        if check_last_crc and last is not None:
            data = self.read(last.position, last.size)
            _h, crc_problem = entry_problem(
                data, last.size, base_offset=self.base_offset, expected=_first(last), max_size=last.size
            )
            if crc_problem is not None:
                return TailScan(last.position, _first(last), crc_problem, last.position)
        return TailScan(end, next_offset, problem, problem_position)
