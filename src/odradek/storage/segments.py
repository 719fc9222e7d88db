"""The segments of a partition's log (Kafka's LogSegments, with the segment half of its LocalLog).

:class:`LogSegments` owns which segments exist: the ordered list readers take a snapshot of (with
their base offsets, replaced together in one assignment: copy-on-write), the last batches appended
to the active segment (a read of them needs no index lookup), and the segments taken out of the
list whose files stay open for readers of an older snapshot until their delayed deletion.  It rolls,
cuts and replaces segments and finds regions, offsets and aborted transactions across them; the
offsets of the log (start, end, high watermark) and the lock belong to the
:class:`~odradek.storage.log.Log` that calls it.

:class:`CorruptReads` owns the rate limit of the ERROR lines for reads that meet damage on disk.
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

from odradek._clock import Clock
from odradek.records import BatchHeader
from odradek.storage.config import LogConfig
from odradek.storage.errors import CorruptSegmentError
from odradek.storage.files import FileOps
from odradek.storage.segment import FileRegion, LogSegment
from odradek.storage.txn_index import AbortedTxn

__all__ = ["CORRUPT_READ_LOG_INTERVAL_MS", "CorruptReads", "LogSegments"]

#: the partition log's logger: these lines are the log's
_log = logging.getLogger("odradek.storage.log")

_RECENT_BATCHES = 32
#: reads that meet damage on disk are logged at most once per partition in this time
CORRUPT_READ_LOG_INTERVAL_MS = 60_000

#: a recent batch: (segment, base offset, last offset, file position, size)
Recent = tuple[LogSegment, int, int, int, int]


class LogSegments:
    """The segment list of one partition directory, its recent batches and its removed segments.

    Not locked: the owning log calls the changes (swap, roll, removal, truncation) under its lock;
    reads work on a snapshot (:attr:`view`) taken once.
    """

    def __init__(self, directory: Path, files: FileOps) -> None:
        self.directory = directory
        self.files = files
        #: the segments and their base offsets, replaced together (a reader's snapshot)
        self.view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        #: the last batches appended to the active segment, oldest first, consecutive.  A consumer
        #: that keeps up reads from one of them: read() then needs no index lookup and no header
        #: read.  Cleared whenever the segment list changes (roll, truncation, retention, cleaning).
        self.recent: deque[Recent] = deque(maxlen=_RECENT_BATCHES)
        #: (due on the monotonic clock, segment): out of the list, files renamed ``.deleted``
        self.removed: list[tuple[int, LogSegment]] = []
        #: a segment file was created since the directory's last fsync
        self.dir_dirty = False

    def swap(self, segments: Sequence[LogSegment], *, keep_recent: bool = False) -> None:
        """Replace the list.  The recent batches belong to the active segment, which retention and
        cleaning never replace (``keep_recent``): they stay valid."""
        if not keep_recent:
            self.recent.clear()
        self.view = (tuple(segments), tuple(s.base_offset for s in segments))

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self.view[0]

    @property
    def active(self) -> LogSegment:
        return self.view[0][-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.view[0])

    @staticmethod
    def index_of(bases: tuple[int, ...], offset: int) -> int:
        """Index of the segment that holds ``offset`` in a snapshot with these base offsets."""
        return max(bisect.bisect_right(bases, offset) - 1, 0)

    def iter_from(self, offset: int) -> Iterator[LogSegment]:
        segments, bases = self.view
        yield from segments[self.index_of(bases, offset) :]

    def note_written(self, seg: LogSegment, headers: list[BatchHeader], position: int) -> None:
        """Batches just appended to ``seg`` at ``position``; message sets (offsets of their own)
        are not tracked and drop the recent batches."""
        recent = self.recent
        for h in headers:
            if h.magic != 2:
                recent.clear()
                break
            recent.append((seg, h.base_offset, h.last_offset, position + h.position, h.size))

    # ------------------------------------------------------------------------------------
    # changes (under the log's lock)

    def seal_active(self) -> list[LogSegment]:
        """Seal the active segment before a roll; an empty one (e.g. after truncation) is deleted.
        Returns the segments the new active one follows (empty: the log held nothing)."""
        old = self.active
        old.seal()
        if old.is_empty:
            old.delete_files()
            return list(self.view[0][:-1])
        return list(self.view[0])

    def open_active(self, kept: list[LogSegment], base_offset: int, config: LogConfig, now: int) -> LogSegment:
        """A new active segment at ``base_offset`` after ``kept`` (:meth:`seal_active`'s)."""
        old = self.active
        try:
            seg = LogSegment(self.directory, base_offset, config, self.files, now_ms=now, active=True)
        except BaseException:
            # the new segment could not be created (ENOSPC, EMFILE): the old one stays active
            if not old.closed and not old.index.writable:
                old.index.make_writable()
                old.time_index.make_writable()
            raise
        kept.append(seg)
        self.swap(kept)
        self.dir_dirty = True
        return seg

    def remove(self, doomed: Sequence[LogSegment], due: int) -> None:
        """Take sealed segments out of the list; their files are renamed ``.deleted`` and stay
        open for readers holding an older list until ``due``."""
        ids = {id(s) for s in doomed}
        self.swap([s for s in self.view[0] if id(s) not in ids], keep_recent=True)
        for seg in doomed:
            seg.rename_suffix(".deleted")
            self.removed.append((due, seg))

    def holds(self, segments: Sequence[LogSegment]) -> bool:
        current = self.view[0]
        return all(any(s is o for s in current) for o in segments)

    def replace(self, old: Sequence[LogSegment], new: LogSegment, due: int) -> None:
        """Put ``new`` (a ``.swap`` segment) in place of the consecutive ``old`` ones, which go
        as :meth:`remove` takes them."""
        ids = {id(s) for s in old}
        segments = self.view[0]
        at = next(i for i, s in enumerate(segments) if id(s) in ids)
        kept = [s for s in segments if id(s) not in ids]
        kept.insert(at, new)
        for seg in old:
            seg.rename_suffix(".deleted")
            self.removed.append((due, seg))
        new.rename_suffix("")
        self.swap(kept, keep_recent=True)

    def take_due(self, now: int, force: bool) -> list[LogSegment]:
        """The removed segments whose delay has passed (all with ``force``), now forgotten here:
        the caller deletes their files."""
        due_now = [seg for due, seg in self.removed if force or now >= due]
        if due_now:
            self.removed = [(due, seg) for due, seg in self.removed if not (force or now >= due)]
        return due_now

    def truncate_to(self, offset: int) -> int:
        """Cut everything at or after ``offset`` (at or above the first base offset); returns the
        new end offset."""
        segments, bases = self.view
        keep = [s for s in segments if s.base_offset < offset or s.base_offset == offset == bases[0]]
        drop = [s for s in segments if s not in keep]
        for seg in drop:
            seg.seal()
            seg.delete_files()
        if drop:
            # durable before anything is written at the truncation point: a removed segment that
            # a power cut brought back would follow the new data after a gap
            self.files.sync_dir(self.directory)
        self.swap(keep)
        last = self.active
        if not last.index.writable:
            last.index.make_writable()
            last.time_index.make_writable()
        last.truncate_to(offset)
        return last.next_offset

    def reset(self, offset: int, config: LogConfig, now: int) -> None:
        """Delete every segment; one empty active segment at ``offset``."""
        for seg in self.view[0]:
            seg.delete_files()
        self.swap([LogSegment(self.directory, offset, config, self.files, now_ms=now, active=True)])
        self.files.sync_dir(self.directory)  # the old segments must not come back after a power cut

    def flush(self, recovery_point: int) -> None:
        """fdatasync the segments that may hold data at or after ``recovery_point`` (and the
        active one), then the directory if a segment file was created since its last fsync."""
        segments = self.view[0]
        for seg in segments:
            if (seg.next_offset > recovery_point or seg is segments[-1]) and not seg.closed:
                seg.flush()
        if self.dir_dirty:
            self.dir_dirty = False
            self.files.sync_dir(self.directory)

    def close(self) -> None:
        """Close every segment and delete the files of the removed ones now."""
        for seg in self.view[0]:
            seg.close()
        for seg in self.take_due(0, force=True):
            seg.delete_files()

    def remove_directory(self) -> None:
        """Remove the partition directory with everything in it (after :meth:`close`)."""
        for path in self.directory.iterdir():
            path.unlink()
        self.directory.rmdir()

    def abandon(self) -> None:
        """Close every descriptor, of the list and of the removed segments, writing nothing."""
        for seg in self.view[0]:
            seg.abandon()
        for _, seg in self.removed:
            seg.abandon()

    # ------------------------------------------------------------------------------------
    # lookups across segments

    def read(
        self,
        segments: tuple[LogSegment, ...],
        bases: tuple[int, ...],
        offset: int,
        limit: int,
        max_bytes: int,
        min_one: bool,
    ) -> FileRegion | None:
        """The region of :meth:`Log.read <odradek.storage.log.Log.read>` in the snapshot
        ``(segments, bases)``: from the batch holding ``offset``, below ``limit``."""
        recent = self.recent
        if recent:
            region = self._read_recent(tuple(recent), segments[-1], offset, limit, max_bytes, min_one)
            if region is None or isinstance(region, FileRegion):
                return region
        i = self.index_of(bases, offset)
        while i < len(segments):
            seg = segments[i]
            if seg.closed:
                i += 1
                continue
            size = seg.size  # before next_offset, which an append raises first
            max_position = size if limit >= seg.next_offset else seg.position_of(limit)
            found = seg.read(offset, max_bytes, max_position, min_one)
            if found is not None:
                return found
            i += 1
        return None

    @staticmethod
    def _read_recent(
        recent: tuple[Recent, ...],
        seg: LogSegment,
        offset: int,
        limit: int,
        max_bytes: int,
        min_one: bool,
    ) -> FileRegion | bool | None:
        """:meth:`LogSegment.read` of the active segment ``seg`` from the recent batches, when
        they hold ``offset`` (else False): the same region, without the index and the file."""
        first = recent[0]
        if first[0] is not seg or offset < first[1] or seg.closed:
            return False
        for entry in recent:
            if entry[2] >= offset:
                break
        else:
            return False
        position, size = entry[3], entry[4]
        seg_size = seg.size  # before next_offset, which an append raises first
        if limit >= seg.next_offset:
            max_position = seg_size
        elif limit >= first[1]:
            # the position of the first batch holding offsets at or above the limit
            max_position = seg_size
            for e in recent:
                if e[2] >= limit:
                    max_position = e[3]
                    break
        else:
            return False
        if position >= max_position:
            return None
        length = min(max_position - position, max(max_bytes, size) if min_one else max_bytes)
        if length <= 0:
            return None
        return FileRegion(seg, position, length)

    def offset_for_timestamp(self, timestamp: int, start: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``start`` whose timestamp is
        >= ``timestamp``, or None."""
        segments = self.view[0]
        for seg in segments:
            if seg.next_offset <= start:
                continue
            if seg.max_timestamp >= timestamp or seg is self.active:
                found = seg.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the record with the largest timestamp ((-1, -1) if none)."""
        best = (-1, -1)
        for seg in self.view[0]:
            if seg.max_timestamp > best[0]:
                best = (seg.max_timestamp, seg.offset_of_max_timestamp)
        return best

    def offsets_before(self, timestamp: int, max_num: int, log_start: int, log_end: int, now: int) -> list[int]:
        """The seeds' getOffsetsBefore, see :meth:`Log.offsets_before
        <odradek.storage.log.Log.offsets_before>`."""
        segs = self.view[0]
        candidates: list[tuple[int, int]] = [(s.base_offset, s.largest_timestamp) for s in segs]
        if not self.active.is_empty:
            candidates.append((log_end, now))
        if timestamp == -1:
            idx = len(candidates) - 1
        elif timestamp == -2:
            idx = 0
        else:
            idx = -1
            for i, (_o, ts) in enumerate(candidates):
                if ts <= timestamp:
                    idx = i
        result = [max(o, log_start) for o, _ in reversed(candidates[: idx + 1])]
        if timestamp == -2:
            result = [log_start]
        return result[:max_num]

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[fetch_offset, upper)``, from the segments'
        transaction indexes."""
        segments, bases = self.view
        out: list[AbortedTxn] = []
        for seg in segments[self.index_of(bases, fetch_offset) :]:
            if seg.base_offset >= upper:
                break
            for t in seg.txn_index.entries:
                if t.last_offset >= fetch_offset and t.first_offset < upper:
                    out.append(t)
                if t.last_stable_offset > upper:
                    return out  # every later entry is of a transaction that began at or above upper
        return out


class CorruptReads:
    """The ERROR lines for reads of one partition that met damage on disk (the reader is answered
    CORRUPT_MESSAGE): at most one every :data:`CORRUPT_READ_LOG_INTERVAL_MS`, counting the reads
    not logged, so a consumer polling the damaged offset does not flood the log."""

    def __init__(self, topic: str, partition: int, clock: Clock) -> None:
        self.topic = topic
        self.partition = partition
        self.clock = clock
        self._logged_ms: int | None = None
        self._unlogged = 0

    def report(self, exc: CorruptSegmentError, offset: int) -> None:
        """The partition, the segment file, the position and the offset read."""
        now = self.clock.monotonic_ms()
        last = self._logged_ms
        if last is not None and now - last < CORRUPT_READ_LOG_INTERVAL_MS:
            self._unlogged += 1
            return
        unlogged, self._unlogged = self._unlogged, 0
        self._logged_ms = now
        segment = exc.segment.name if exc.segment is not None else "?"
        _log.error(
            "partition %s-%d: a read at offset %d met a corrupt entry in segment %s at position %s and was "
            "answered CORRUPT_MESSAGE (%s)%s",
            self.topic, self.partition, offset, segment, "?" if exc.position is None else exc.position,
            exc.message,
            f"; {unlogged} more reads met corrupt entries of this partition since the last such line" if unlogged else "",
        )
