"""One log segment: ``<base>.log`` with its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of entries (v2 record batches or v0/v1 messages) as
they travel in produce and fetch requests, each starting with an int64 offset and an int32 size.
A segment's name is its base offset, zero-padded to 20 digits.  An index entry is added for a
batch once more than ``index.interval.bytes`` have been appended since the previous entry; it
maps the batch's last offset to the batch's position, so a floor lookup followed by a short scan
of batch headers finds any offset.

Not thread-safe for writers (the owning :class:`~odradek.storage.log.Log` serialises them);
reads use ``pread`` on the file descriptor and may run concurrently with appends.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from odradek.records import (
    BatchHeader,
    CrcMismatchError,
    RecordsError,
    iter_batch_headers,
    peek_header,
    read_batches,
    validate,
)
from odradek.records import legacy as _legacy
from odradek.records import v2 as _v2
from odradek.storage.config import LogConfig
from odradek.storage.errors import CorruptIndexError, CorruptSegmentError, StorageError, UnknownFormatError
from odradek.storage.files import FileOps
from odradek.storage.index import OffsetIndex, TimeIndex
from odradek.storage.txn_index import TransactionIndex

__all__ = ["FileRegion", "LogSegment", "RecoveryReport", "entry_problem", "segment_name"]

LOG_OVERHEAD = 12
_HEADER_PEEK = 61  # a v2 batch header; enough for every format's offsets and timestamps
_SCAN_CHUNK = 1 << 20
_HEADER_UP_TO_MAGIC = 17
_MIN_LENGTH = (_legacy.MESSAGE_OVERHEAD_V0, _legacy.MESSAGE_OVERHEAD_V1, _v2.MIN_BATCH_LENGTH)
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF


def entry_problem(
    data: bytes | bytearray | memoryview,
    remaining: int,
    *,
    base_offset: int,
    expected: int,
    max_size: int,
    check_crc: bool = True,
) -> tuple[BatchHeader | None, str | None]:
    """Sanity check of the entry at the start of ``data``: ``(header, None)`` when it is sound,
    else ``(header or None, what is wrong)``.

    ``data`` holds at least the entry's first 61 bytes (or all ``remaining`` bytes of the file
    from the entry on, when fewer); the CRC is checked when it holds the whole entry and
    ``check_crc``.  Checked: a complete header, magic 0-2, batch length between the format's
    minimum and ``max_size`` and within the ``remaining`` bytes, offsets within the segment
    (``base_offset`` and 32-bit relative offsets) and not below ``expected``.
    """
    if remaining < _HEADER_UP_TO_MAGIC:
        return None, f"torn tail: {remaining} bytes that do not form an entry header"
    length = int.from_bytes(data[8:12], "big", signed=True)
    magic = data[16]
    if magic > 2:
        return None, f"bad magic {magic} (a record batch format this Odradek does not read: it reads magic 0-2)"
    minimum = _MIN_LENGTH[magic]
    if length < minimum:
        return None, f"bad batch length {length} (the minimum for magic {magic} is {minimum})"
    size = length + LOG_OVERHEAD
    if size > max_size:
        return None, (
            f"bad batch length {length} (an entry of {size} bytes is impossible here: "
            f"{remaining} bytes left in the file, at most {max_size} bytes per entry)"
        )
    if size > remaining:
        return None, f"torn tail: an entry of {size} bytes with only {remaining} bytes left in the file"
    try:
        h = peek_header(data)
    except RecordsError as exc:
        return None, str(exc)
    if h is None:
        return None, f"torn tail: {remaining} bytes that do not form an entry header"
    first = h.base_offset if h.base_offset >= 0 else h.last_offset
    if first < base_offset:
        return h, f"offset {first} is below the segment's base offset {base_offset}"
    if h.last_offset < first:
        return h, f"last offset {h.last_offset} is below the first offset {first}"
    if h.last_offset - base_offset > _MAX_RELATIVE_OFFSET:
        return h, f"offset {h.last_offset} is out of the segment's range (base {base_offset})"
    if first < expected:
        return h, f"offsets go backwards: the entry starts at {first}, after offset {expected - 1}"
    if check_crc and len(data) >= size:
        try:
            validate(data, h)
        except CrcMismatchError as exc:
            return h, f"CRC mismatch (stored {exc.stored:#010x}, computed {exc.computed:#010x})"
        except RecordsError as exc:
            return h, str(exc)
    return h, None


_MAX_RANGES = 8


def _add_range(ranges: tuple[tuple[int, int], ...], lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """``ranges`` (disjoint, sorted) with ``[lo, hi)`` added and touching ranges merged; at most
    ``_MAX_RANGES`` of them (the smallest go: those bytes are checked again when read)."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted((*ranges, (lo, hi))):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    if len(merged) > _MAX_RANGES:
        keep = sorted(merged, key=lambda r: r[1] - r[0], reverse=True)[:_MAX_RANGES]
        merged = sorted(keep)
    return tuple(merged)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What :meth:`LogSegment.recover` found at the first invalid entry and truncated."""

    position: int  # file position of the first invalid entry (the new size)
    problem: str
    truncated_bytes: int
    first_offset: int  # the first offset that is gone (the expected next offset)
    records: int  # complete entries' records after the position that were dropped (best effort)


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of a segment file, for ``sendfile`` or ``pread``."""

    segment: LogSegment
    position: int
    length: int

    @property
    def fd(self) -> int:
        return self.segment.fd

    def to_bytes(self) -> bytes:
        return self.segment.read_bytes(self.position, self.length)

    def __len__(self) -> int:
        return self.length

    def headers(self) -> list[BatchHeader]:
        """The headers of the complete entries in the region (positions in the segment file), one
        small read each, the records untouched; an entry the region cuts ends the list (as
        :func:`~odradek.records.iter_batch_headers` over the region's bytes would)."""
        out: list[BatchHeader] = []
        pos, end = self.position, self.position + self.length
        read = self.segment.read_bytes
        while end - pos >= _HEADER_UP_TO_MAGIC:
            h = peek_header(read(pos, min(_HEADER_PEEK, end - pos)))
            if h is None or pos + h.size > end:
                break
            out.append(h._replace(position=pos))
            pos += h.size
        return out

    def slice(self, position: int, end: int) -> FileRegion:
        """The part of the region from file position ``position`` to ``end``."""
        if not self.position <= position <= end <= self.position + self.length:
            raise ValueError(f"{position}..{end} is not inside the region {self.position}+{self.length}")
        return FileRegion(self.segment, position, end - position)


class LogSegment:
    """A segment file and its indexes."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        files: FileOps,
        *,
        now_ms: int,
        active: bool,
        suffix: str = "",
        indexes_exist: bool = False,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.files = files
        self.suffix = suffix
        self.log_path = directory / segment_name(base_offset, ".log" + suffix)
        self.fd = files.open(self.log_path)
        try:
            self.size = files.size(self.fd)
            self.index = OffsetIndex(
                directory / segment_name(base_offset, ".index" + suffix),
                base_offset,
                config.segment_index_bytes,
                active,
                indexes_exist,
            )
            self.time_index = TimeIndex(
                directory / segment_name(base_offset, ".timeindex" + suffix),
                base_offset,
                config.segment_index_bytes,
                active,
                indexes_exist,
            )
        except BaseException:
            files.close(self.fd)  # e.g. out of descriptors: the .log's must not stay open
            raise
        #: bytes that were in the file when it was opened and that no one validated since: reads
        #: CRC-check them (appends are validated before they are written, recovery validates)
        self.unchecked_end = self.size
        self.txn_index = TransactionIndex(directory / segment_name(base_offset, ".txnindex" + suffix), files)
        self.created_ms = now_ms
        self.bytes_since_index_entry = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self.next_offset = base_offset  # offset after the last entry (base offset when empty)
        # Kafka: a random part of min(segment.jitter.ms, segment.ms), so that a segment never
        # becomes due at creation
        jitter_bound = min(config.segment_jitter_ms, config.segment_ms)
        self.jitter_ms = random.randrange(jitter_bound) if jitter_bound > 0 else 0
        self.closed = False
        #: (first offset, file position) of the last append: a lower bound for offset lookups
        self._hint: tuple[int, int] = (1 << 63, 0)
        #: file ranges whose entries a read already CRC-checked (data found at start-up)
        self._verified: tuple[tuple[int, int], ...] = ()
        #: where load_state() found bytes that do not form a valid entry (None: it did not)
        self.scan_stopped_at: int | None = None
        #: what the last recover() truncated, and why
        self.recovery_report: RecoveryReport | None = None

    # -- state ---------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp in the segment (creation time when it has none)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.created_ms

    def read_bytes(self, position: int, length: int) -> bytes:
        return self.files.read_at(self.fd, length, position)

    def headers(self, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the complete entries from ``start``, read in large chunks (full scans)."""
        end = self.size if end is None else end
        pos = start
        while pos < end:
            chunk = self.read_bytes(pos, min(_SCAN_CHUNK, end - pos))
            consumed = 0
            try:
                for h in iter_batch_headers(chunk):
                    yield h._replace(position=pos + h.position)
                    consumed = h.end
            except RecordsError:
                return  # garbage after the last valid entry (an unclean shutdown; recovery truncates it)
            if consumed == 0:
                # an entry larger than the chunk, or a torn tail
                h0 = self.peek(pos, end)
                if h0 is None:
                    return
                yield h0
                consumed = h0.size
            pos += consumed

    def peek(self, position: int, end: int | None = None) -> BatchHeader | None:
        """Header of the entry at ``position`` from its first bytes (None past a torn tail)."""
        end = self.size if end is None else end
        if end - position < 17:
            return None
        try:
            h = peek_header(self.read_bytes(position, min(_HEADER_PEEK, end - position)))
        except RecordsError:
            return None
        if h is None or position + h.size > end:
            return None
        return h._replace(position=position)

    def peek_headers(self, start: int) -> Iterator[BatchHeader]:
        """Headers from ``start``, one small read each (short scans after an index lookup).

        Reads trust nothing: an entry whose header is impossible (length past the end of the
        segment or out of bounds, unknown magic, offsets outside the segment or going backwards)
        raises CorruptSegmentError, so that a fetch answers CORRUPT_MESSAGE instead of silently
        skipping to the next segment."""
        pos, end = start, self.size
        base = self.base_offset
        expected = base
        while pos < end:
            remaining = end - pos
            head = self.read_bytes(pos, min(_HEADER_PEEK, remaining))
            h = None
            with contextlib.suppress(RecordsError):
                h = peek_header(head)
            # the common case checked inline; entry_problem says what is wrong otherwise
            if h is not None and h.size <= remaining:
                first = h.base_offset if h.base_offset >= 0 else h.last_offset
                if expected <= first <= h.last_offset and h.last_offset - base <= _MAX_RELATIVE_OFFSET:
                    yield h._replace(position=pos)
                    expected = h.last_offset + 1
                    pos += h.size
                    continue
            _h, problem = entry_problem(
                head, remaining, base_offset=base, expected=expected, max_size=remaining, check_crc=False
            )
            raise CorruptSegmentError(
                f"corrupt entry in {self.log_path} at position {pos}: {problem or 'invalid entry'}; "
                "run `odradek dump-log --verify` on the partition directory",
                self.log_path,
                pos,
            )

    # -- writes --------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> int:
        """Append complete entries (offsets already assigned); returns their file position."""
        position = self.size
        index, time_index = self.index, self.time_index
        saved = (
            self._hint, self.max_timestamp, self.offset_of_max_timestamp, self.first_batch_timestamp,
            self.bytes_since_index_entry, index.entries, time_index.entries,
        )
        if headers:
            first = headers[0]
            self._hint = (first.base_offset if first.base_offset >= 0 else first.last_offset, position)
        try:
            self.files.write_at(self.fd, data, position)
            interval = self.config.index_interval_bytes
            for h in headers:
                if h.max_timestamp > self.max_timestamp:
                    self.max_timestamp = h.max_timestamp
                    self.offset_of_max_timestamp = h.last_offset
                if self.first_batch_timestamp is None:
                    self.first_batch_timestamp = h.max_timestamp
                if self.bytes_since_index_entry > interval:
                    index.append(h.last_offset, position + h.position)
                    time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                    self.bytes_since_index_entry = 0
                self.bytes_since_index_entry += h.size
        except BaseException:
            # a failed write (ENOSPC, EIO) may have left part of the data in the file: cut it
            # off, so that no half entry stays in the log for a later append or a restart to
            # find, and forget what this append had noted
            (self._hint, self.max_timestamp, self.offset_of_max_timestamp, self.first_batch_timestamp,
             self.bytes_since_index_entry, index.entries, time_index.entries) = saved
            with contextlib.suppress(OSError):
                self.files.truncate(self.fd, position)
            raise
        if headers:
            self.next_offset = headers[-1].last_offset + 1
        # size last: a reader in another thread takes the size before the next offset (see
        # Log.read), so bytes it sees are never beyond the offsets it believes are here
        self.size = position + len(data)
        return position

    def should_roll(self, size: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        """Whether appending ``size`` bytes up to ``last_offset`` needs a new segment first."""
        # offsets that do not fit 32-bit relative offsets need a new segment even when this one
        # is empty (a follower's log can start far from this segment's base offset)
        if last_offset - self.base_offset > 0x7FFFFFFF:
            return True
        if self.is_empty:
            return False
        config = self.config
        if self.size + size > config.segment_bytes:
            return True
        if self.index.is_full or self.time_index.is_full:
            return True
        if self.first_batch_timestamp is not None and self.first_batch_timestamp >= 0 and max_timestamp >= 0:
            waited = max_timestamp - self.first_batch_timestamp
        else:
            waited = now_ms - self.created_ms
        return waited > config.segment_ms - self.jitter_ms

    def flush(self) -> None:
        self.files.datasync(self.fd)
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def seal(self) -> None:
        """The segment stops being active: trim its indexes to their entries."""
        self.index.trim()
        self.time_index.trim()

    def release_indexes(self) -> None:
        """Drop a sealed segment's index entries from memory until their next use."""
        self.index.release()
        self.time_index.release()

    def close(self) -> None:
        if self.closed:
            return
        self.index.close()
        self.time_index.close()
        self.files.close(self.fd)
        self.closed = True

    def abandon(self) -> None:
        """Close the descriptors and write nothing (a load being undone): the files stay as they
        are on disk, for the next load."""
        if self.closed:
            return
        self.files.close(self.fd)
        self.index.abandon()
        self.time_index.abandon()
        self.closed = True

    def rename_suffix(self, suffix: str) -> None:
        """Rename the three files to carry ``suffix`` (``.deleted``, ``.swap``, ``""``)."""
        for path_attr in ("log_path",):
            old = getattr(self, path_attr)
            new = self.directory / segment_name(self.base_offset, ".log" + suffix)
            self.files.rename(old, new)
            setattr(self, path_attr, new)
        self.index.rename(self.directory / segment_name(self.base_offset, ".index" + suffix))
        self.time_index.rename(self.directory / segment_name(self.base_offset, ".timeindex" + suffix))
        self.txn_index.rename(self.directory / segment_name(self.base_offset, ".txnindex" + suffix))
        self.suffix = suffix

    def delete_files(self) -> None:
        self.close()
        self.files.remove(self.log_path)
        self.index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    # -- reads ---------------------------------------------------------------------------
    def translate_offset(self, offset: int, start: int = 0) -> BatchHeader | None:
        """Header of the first entry whose last offset is >= ``offset``, or None."""
        _o, position = self.index.lookup(offset)
        hint_offset, hint_position = self._hint
        if hint_offset <= offset and hint_position > position:
            # every entry before the last append's start ends below its first offset: a
            # consumer reading the newest batch skips the scan from the index entry
            position = hint_position
        for h in self.peek_headers(max(position, start)):
            if h.last_offset >= offset:
                return h
        return None

    def read(self, offset: int, max_bytes: int, max_position: int, min_one: bool) -> FileRegion | None:
        """Region from the entry holding ``offset`` up to ``max_bytes`` and ``max_position``."""
        h = self.translate_offset(offset)
        if h is None or h.position >= max_position:
            return None
        limit = max(max_bytes, h.size) if min_one else max_bytes
        length = min(max_position - h.position, limit)
        if length <= 0:
            return None
        if h.position < self.unchecked_end:
            length = self._checked_length(h.position, length)
        return FileRegion(self, h.position, length)

    def _checked_length(self, position: int, length: int) -> int:
        """A region of data found on disk at start-up is CRC-checked before it is served (once per
        byte while consumers read forward): the region is cut before the first bad entry, and a
        bad first entry raises CorruptSegmentError (CORRUPT_MESSAGE), so that damage on disk
        reaches no client as data, whether or not the client checks CRCs.  (Entries appended
        since were validated on append; recovery validates what it scans.)"""
        end = position + length
        for lo, hi in self._verified:
            if lo <= position and end <= hi:
                return length
        data = self.read_bytes(position, length)
        base = self.base_offset
        expected = base
        good = 0
        bad = False
        try:
            for h in iter_batch_headers(data, verify=True):
                first = h.base_offset if h.base_offset >= 0 else h.last_offset
                if first < expected or h.last_offset < first or h.last_offset - base > _MAX_RELATIVE_OFFSET:
                    bad = True
                    break
                expected = h.last_offset + 1
                good = h.position + h.size
        except RecordsError:
            bad = True
        remaining = self.size - (position + good)
        rest = memoryview(data)[good:]
        if not bad and good < len(data) and len(rest) >= min(_HEADER_PEEK, remaining):
            # the scan stopped at an entry that does not fit the region: cut by max_bytes (the
            # client asks again), or an impossible length
            _h, problem = entry_problem(
                rest, remaining, base_offset=base, expected=expected, max_size=remaining, check_crc=False
            )
            bad = problem is not None
        if bad and good == 0:
            _h, problem = entry_problem(rest, remaining, base_offset=base, expected=expected, max_size=remaining)
            raise CorruptSegmentError(
                f"corrupt entry in {self.log_path} at position {position}: {problem or 'invalid entry'}; "
                "run `odradek dump-log --verify` on the partition directory",
                self.log_path,
                position,
            )
        if good:
            self._verified = _add_range(self._verified, position, position + good)
        return good if good else length

    def position_of(self, offset: int) -> int:
        """File position of the first entry whose last offset is >= ``offset`` (size if none)."""
        h = self.translate_offset(offset)
        return self.size if h is None else h.position

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int = 0) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``start_offset`` whose timestamp
        is >= ``timestamp``: the time index finds the batch, then only that batch is decoded."""
        _ts, offset = self.time_index.lookup(timestamp)
        _o, position = self.index.lookup(max(offset, start_offset))
        for h in self.peek_headers(position):
            if h.max_timestamp < timestamp or h.last_offset < start_offset:
                continue
            for batch in read_batches(self.read_bytes(h.position, h.size), verify_crc=False):
                for record in batch.records:
                    if record.offset >= start_offset and record.timestamp >= timestamp:
                        return record.offset, record.timestamp
        return None

    # -- recovery ------------------------------------------------------------------------
    def load_state(self) -> None:
        """Recompute next offset and max timestamp from the tail after the last index entry."""
        ts, ts_offset = self.time_index.last_entry
        if ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = ts, ts_offset
        start = self.index.lookup(self.index.last_offset)[1] if self.index.entries else 0
        first = True
        end = start
        for h in self.headers(start):
            if first and start == 0:
                self.first_batch_timestamp = h.max_timestamp
            first = False
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            self.next_offset = h.last_offset + 1
            self.bytes_since_index_entry += h.size
            end = h.position + h.size
        self.scan_stopped_at = end if end < self.size else None
        if self.scan_stopped_at is not None:
            self.check_known_format(end, self.size, self.next_offset)
        if self.first_batch_timestamp is None and self.size:
            for h in self.headers(0):
                self.first_batch_timestamp = h.max_timestamp
                break

    def check_indexes(self) -> bool:
        return self.index_problem() is None

    def index_problem(self) -> str | None:
        """What is wrong with the indexes (None when both pass their sanity checks)."""
        try:
            self.index.sanity_check(self.size)
            self.time_index.sanity_check(self.size)
        except CorruptIndexError as exc:
            return exc.message
        return None

    def recover(self, max_batch_size: int, min_offset: int) -> int:
        """Validate every entry, rebuild both indexes, truncate at the first invalid entry.

        Returns the number of bytes truncated; :attr:`recovery_report` then says what was found
        where and what was dropped (None when nothing was truncated).
        """
        self._hint = (1 << 63, 0)
        self.recovery_report = None
        return self._recover(max_batch_size, min_offset)

    def _recover(self, max_batch_size: int, min_offset: int) -> int:
        """Validate every entry, rebuild both indexes, truncate at the first invalid entry.

        Returns the number of bytes truncated.  An entry is invalid when its size is out of
        bounds, its checksum fails, or its offsets go backwards (or below ``min_offset``).
        """
        writable = self.index.writable
        if not writable:
            self.index.make_writable()
            self.time_index.make_writable()
        self.index.reset()
        self.time_index.reset()
        self.bytes_since_index_entry = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self.next_offset = self.base_offset
        valid = 0
        expected = max(min_offset, self.base_offset)
        pos = 0
        end = self.files.size(self.fd)
        done = False
        want = _SCAN_CHUNK
        while pos < end and not done:
            # 1 MiB at a time (one whole entry when a larger one starts the chunk): recovering a
            # segment of segment.bytes must not hold all of it in memory at once
            chunk = self.read_bytes(pos, min(want, end - pos))
            want = _SCAN_CHUNK
            consumed = 0
            try:
                for h in iter_batch_headers(chunk, verify=True, max_batch_size=max_batch_size + LOG_OVERHEAD):
                    first = h.base_offset if h.base_offset >= 0 else h.last_offset
                    if first < expected or h.last_offset < first:
                        done = True
                        break
                    self.append_index_only(h._replace(position=pos + h.position))
                    expected = h.last_offset + 1
                    consumed = h.end
            except RecordsError:
                done = True
            if consumed == 0:
                large = None if done else self.peek(pos, end)
                if large is None or large.size <= len(chunk) or large.size > max_batch_size + LOG_OVERHEAD:
                    break
                want = large.size
                continue
            pos += consumed
            valid = pos
        self.size = valid
        self.unchecked_end = 0
        truncated = end - valid
        if truncated:
            self.check_known_format(valid, end, expected)
            self.recovery_report = self._diagnose(valid, end, expected, max_batch_size + LOG_OVERHEAD)
            self.files.truncate(self.fd, valid)
        if not writable:
            self.seal()
        return truncated

    def check_known_format(self, position: int, end: int, expected: int) -> None:
        """Raise UnknownFormatError when the entry at ``position`` is a whole entry of a record
        batch format newer than this Odradek reads (magic above 2) that starts at ``expected``,
        the offset due there: written by a newer version, it is refused rather than truncated
        away by recovery or hidden behind CORRUPT_MESSAGE.  A damaged entry (a torn write,
        garbage) fails these checks and is left to recovery."""
        remaining = end - position
        if remaining < _HEADER_PEEK:
            return
        head = self.read_bytes(position, _HEADER_PEEK)
        magic = head[16]
        base = int.from_bytes(head[0:8], "big", signed=True)
        length = int.from_bytes(head[8:12], "big", signed=True)
        if magic <= 2 or base != expected or not _v2.MIN_BATCH_LENGTH <= length <= remaining - LOG_OVERHEAD:
            return
        raise UnknownFormatError(
            self.log_path, "record batch format (magic byte)", magic, "magic 0, 1 and 2",
            f" at position {position} (offset {base})",
        )

    def _diagnose(self, position: int, end: int, expected: int, max_size: int) -> RecoveryReport:
        """What is wrong with the entry at ``position`` (where recovery stopped), and how many
        records of complete entries after it go with the truncation (best effort)."""
        remaining = end - position
        head = self.read_bytes(position, min(_HEADER_PEEK, remaining))
        h, problem = entry_problem(
            head, remaining, base_offset=self.base_offset, expected=expected, max_size=max_size, check_crc=False
        )
        if problem is None and h is not None:
            whole = self.read_bytes(position, h.size)
            h, problem = entry_problem(
                whole, remaining, base_offset=self.base_offset, expected=expected, max_size=max_size
            )
        records = 0
        if h is not None:
            records = h.last_offset - (h.base_offset if h.base_offset >= 0 else h.last_offset) + 1
            try:
                for later in self.headers(position + h.size, end):
                    first = later.base_offset if later.base_offset >= 0 else later.last_offset
                    records += max(later.last_offset - first + 1, 0)
            except (RecordsError, StorageError):
                pass
        return RecoveryReport(position, problem or "invalid entry", remaining, expected, records)

    def append_index_only(self, h: BatchHeader) -> None:
        """Account for an entry already in the file (recovery): indexes and timestamps."""
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = h.last_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = h.max_timestamp
        if self.bytes_since_index_entry > self.config.index_interval_bytes:
            self.index.append(h.last_offset, h.position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += h.size
        self.next_offset = h.last_offset + 1

    def truncate_to(self, offset: int) -> int:
        self._hint = (1 << 63, 0)
        return self._truncate_to(offset)

    def _truncate_to(self, offset: int) -> int:
        """Drop entries whose last offset is >= ``offset``; returns bytes removed."""
        h = self.translate_offset(offset)
        if h is None:
            return 0
        position = h.position
        removed = self.size - position
        self.index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.files.truncate(self.fd, position)
        self.size = position
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.next_offset = self.base_offset
        self.bytes_since_index_entry = 0
        self.first_batch_timestamp = None
        self.load_state_full()
        return removed

    def load_state_full(self) -> None:
        """Recompute next offset, timestamps and index spacing from every entry."""
        self.max_timestamp = -1
        self.next_offset = self.base_offset
        last_index_pos = self.index.entry(self.index.entries - 1)[1] if self.index.entries else -1
        for h in self.headers(0):
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = h.max_timestamp
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            self.next_offset = h.last_offset + 1
            if h.position >= last_index_pos:
                self.bytes_since_index_entry = (
                    0 if h.position == last_index_pos else self.bytes_since_index_entry
                ) + h.size

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next_offset={self.next_offset})"


def check_fits(size: int, config: LogConfig) -> None:
    if size > config.segment_bytes:
        raise StorageError(f"entry of {size} bytes is larger than segment.bytes={config.segment_bytes}")
