"""A partition's log: an ordered list of segments in ``<log dir>/<topic>-<partition>/``.

Appends go to the last (active) segment; a new segment is rolled when the active one would pass
``segment.bytes``, is older than ``segment.ms`` (minus jitter), has a full index, or would need
a relative offset beyond 32 bits.  Reads locate the segment by binary search over base offsets,
then the batch through the segment's sparse index.  Retention and compaction remove or replace
whole segments.

Concurrency: one writer at a time (the broker serialises appends, truncation, retention and
cleaning per partition).  Readers work on an immutable snapshot of the segment list, which
writers replace rather than mutate (copy-on-write), so deletion and compaction never block or
break a read in progress; a removed segment's file stays open until its delayed deletion.
:meth:`Log.flush` may run in another thread while appends continue: it only syncs files and
moves the recovery point forward to what it captured before syncing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from odradek._clock import Clock, SystemClock
from odradek.records import DEFAULT_MAX_DECOMPRESSED_SIZE, BatchHeader, marker_batch
from odradek.storage.assign import assign, assign_one_v2, summarize
from odradek.storage.config import LogConfig
from odradek.storage.epoch import LeaderEpochCache
from odradek.storage.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    StorageError,
)
from odradek.storage.files import OS_FILES, FileOps
from odradek.storage.loader import LogLoader
from odradek.storage.producer_state import BatchMetadata, ProducerStateManager
from odradek.storage.retention import deletable_segments
from odradek.storage.segment import FileRegion, LogSegment
from odradek.storage.segments import CorruptReads, LogSegments
from odradek.storage.txn_index import AbortedTxn
from odradek.storage.validator import (
    V2_HEADER,
    check_produced,
    check_produced_one_v2,
    check_timestamps,
    new_header,
    produced_check_args,
    timestamp_limits,
    validate_batches,
)

__all__ = ["AppendInfo", "Log", "ReadResult", "parse_partition_dir"]

_V2_HEADER = V2_HEADER

_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a directory named ``<topic>-<partition>``."""
    m = _DIR_RE.match(name)
    if m is None:
        return None
    return m.group("topic"), int(m.group("partition"))


@dataclass(slots=True)
class AppendInfo:
    """What an append did: offsets assigned, timestamps, and the batches as written."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    size: int
    batches: list[BatchHeader] = field(default_factory=list)
    duplicate: bool = False  # a retried idempotent batch: nothing written, original offsets

    @classmethod
    def of_duplicate(cls, dup: BatchMetadata, log_start_offset: int) -> AppendInfo:
        """A retried idempotent batch's: nothing written, the original's offsets."""
        count = dup.last_offset - dup.first_offset + 1
        return cls(dup.first_offset, dup.last_offset, -1, -1, -1, log_start_offset, count, 0, [], duplicate=True)


@dataclass(slots=True)
class ReadResult:
    """Result of :meth:`Log.read`: a file region (possibly empty) and the log's bounds."""

    region: FileRegion | None
    fetch_offset: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self) -> int:
        return self.region.length if self.region is not None else 0

    def to_bytes(self) -> bytes:
        return self.region.to_bytes() if self.region is not None else b""


_lock_factory: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext


def set_lock_factory(factory: Callable[[], AbstractContextManager[object]]) -> None:
    """What makes the lock of each log opened from now on.  The storage layer has no threads
    of its own and a log used from one thread needs no lock (the default does nothing); an
    owner that runs retention or compaction on worker threads installs a reentrant lock
    (``threading.RLock``) before opening logs."""
    global _lock_factory
    _lock_factory = factory


class Log:
    """The segments of one partition, with offsets, flushing, retention and recovery.

    The log owns its offsets (log start, high watermark, log end, recovery point), the lock, the
    leader epochs and the append path; it delegates the segment list and the lookups across it to
    :class:`~odradek.storage.segments.LogSegments`, the producer state and the aborted-transaction
    index entries to :class:`~odradek.storage.producer_state.ProducerStateManager`, the retention
    rules to :func:`~odradek.storage.retention.deletable_segments` and the rewriting of batches on
    a leader's append to :mod:`odradek.storage.assign`.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        clock: Clock | None = None,
        files: FileOps = OS_FILES,
        flush_inline: bool = True,
        cleaned_to: int = 0,
    ) -> None:
        parsed = parse_partition_dir(directory.name)
        if parsed is None:
            raise StorageError(f"{directory.name} is not a <topic>-<partition> directory name")
        self.topic, self.partition = parsed
        self.directory = directory
        self.config = config
        self.clock = clock or SystemClock()
        self.files = files
        self.closed = False
        directory.mkdir(parents=True, exist_ok=True)
        self.epochs = LeaderEpochCache(directory)
        self._segs = LogSegments(directory, files)
        self._corrupt_reads = CorruptReads(self.topic, self.partition, self.clock)
        # serializes changes of the segment list and the log start offset: appends, rolls and
        # reads run on the broker's event loop while retention, compaction and DeleteRecords'
        # segment removal run on a worker thread.  Held only for the swap (no file work), so the
        # loop never waits for a cleaning pass; readers take no lock (they use a snapshot, and a
        # replaced segment's files stay open until its delayed deletion).
        self._lock = _lock_factory()
        #: flush inline when :meth:`flush_messages_due`; a broker turns this off (``flush_inline``)
        #: and flushes from a worker thread instead, by the same rule
        self.auto_flush = flush_inline
        self._limits: tuple[int, int] | None = None  # these two per config: see _timestamp_limits
        self._fast_check: tuple[int, bool, bool, int | None, int | None] = (0, False, True, None, None)
        self._limits_for: LogConfig | None = None
        self.producers = ProducerStateManager(directory)
        loaded = LogLoader(directory, self.topic, self.partition, config, files, self.clock).load(
            recovery_point, log_start_offset, clean_shutdown, cleaned_to
        )
        self._segs.swap(loaded.segments)
        self.recovery_point = loaded.recovery_point
        self.log_end_offset = loaded.log_end_offset
        # written only through the methods below (advance_high_watermark, the log start offset's
        # moves, truncation), each keeping Kafka's rule: log start <= HW <= log end
        self._log_start_offset = loaded.log_start_offset
        self._high_watermark = loaded.log_start_offset
        self.recovered_bytes = loaded.recovered_bytes
        self._segs.dir_dirty = loaded.dir_dirty
        try:
            self.epochs.truncate_to_log_at_load(self.log_start_offset, self.log_end_offset)
            self.producers.rebuild(self.log_start_offset, self.log_end_offset, self.iter_segments_from, loaded.names)
        except BaseException:
            self.abandon()
            raise
        self.last_flush_ms = self.clock.monotonic_ms()

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segs.view[0]

    @property
    def active(self) -> LogSegment:
        return self._segs.view[0][-1]

    @property
    def size_bytes(self) -> int:
        return self._segs.size_bytes

    def _check_open(self) -> None:
        if self.closed:
            raise LogClosedError(f"log {self.directory.name} is closed")

    # ------------------------------------------------------------------------------------
    # appends

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        leader_epoch: int | None = None,
        now_ms: int | None = None,
        from_coordinator: bool = False,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> AppendInfo:
        """Append batches as a leader: validate them, assign offsets, write.

        Control batches (transaction markers) come only from a transaction coordinator
        (``from_coordinator``); a client's are refused with InvalidRecordError, as Kafka does.

        v2 batches get offsets by patching their base offset (no per-record work) — in place
        when ``data`` is writable (a bytearray or a view of one), so the batch is never copied —
        and v0/v1 messages per message.  A batch from an idempotent producer that repeats one of
        its last five is not written again: the result carries the original offsets and
        ``duplicate=True``.  Raises CorruptRecordError (bad sizes or CRC),
        RecordBatchTooLargeError (``max.message.bytes``), InvalidRecordError (null key on a
        compacted topic), InvalidTimestampError and ProducerStateError.  ``max_decompressed``: a
        budget below Kafka's bound for decompressing a batch to validate its records; beyond it
        DecompressionBudgetExceeded, and nothing is written (see ``validate_batches``).
        """
        if self.closed:
            self._check_open()
        now = self.clock.now_ms() if now_ms is None else now_ms
        n = len(data)
        if n >= 61 and data[16] == 2 and self.config.message_timestamp_type == "CreateTime" and not data[22] & 0x20:
            fields = _V2_HEADER.unpack_from(data, 0)
            if fields[1] + 12 == n and fields[1] >= 49:
                return self._append_one_v2(data, fields, leader_epoch, now, max_decompressed)
        headers = validate_batches(
            data, self.config, self.topic, self.partition, now_ms=now, max_decompressed=max_decompressed
        )
        return self._append_valid(data, headers, leader_epoch, now, from_coordinator)

    def append_validated(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        config: LogConfig,
        *,
        leader_epoch: int | None = None,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append as a leader batches that :func:`~odradek.storage.validator.validate_batches`
        accepted with ``config`` (``headers``, its result): the per-record validation of a large
        batch can so run elsewhere (another thread or process) before the append, which does the
        rest of :meth:`append` (producer state, offsets, timestamps, the write).  Should the log's
        config have changed meanwhile, the batches are validated again."""
        if self.closed:
            self._check_open()
        now = self.clock.now_ms() if now_ms is None else now_ms
        if config is not self.config:
            headers = validate_batches(data, self.config, self.topic, self.partition, now_ms=now)
        return self._append_valid(data, headers, leader_epoch, now, False)

    def _append_valid(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        leader_epoch: int | None,
        now: int,
        from_coordinator: bool,
    ) -> AppendInfo:
        if not from_coordinator and any(h.is_control for h in headers):
            raise InvalidRecordError("Clients are not allowed to write control records")
        dup = self.producers.duplicate_of(headers)
        if dup is not None:
            return AppendInfo.of_duplicate(dup, self.log_start_offset)
        first = self.log_end_offset
        log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        out, headers = assign(data, headers, first, log_append_time, leader_epoch, now)
        limits = self._timestamp_limits
        if limits is not None:
            check_timestamps(headers, now, limits)
        if leader_epoch is not None:
            self._note_epoch(leader_epoch, first)
        info = self._write(out, headers, now, now if log_append_time else -1)
        self.producers.written(out, headers, now, self._segs.view[0][-1])
        return info

    def _note_epoch(self, epoch: int, start_offset: int) -> None:
        """A leader epoch newer than the cache's starts at ``start_offset``."""
        if epoch > self.epochs.latest_epoch:
            with self._lock:  # a worker thread may be moving the start of the epoch cache
                self.epochs.assign(epoch, start_offset)

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, *,
        leader_epoch: int | None = None, now_ms: int | None = None,
    ) -> AppendInfo:
        """Write a transaction's COMMIT or ABORT marker (WriteTxnMarkers on the partition leader).
        A marker of an older producer epoch, or from a coordinator older than the one that wrote
        the producer's last marker, is refused (a zombie coordinator's)."""
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = self.clock.now_ms() if now_ms is None else now_ms
        batch = bytearray(marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now))
        return self.append(batch, leader_epoch=leader_epoch, now_ms=now, from_coordinator=True)

    def _append_one_v2(
        self, data: bytes | bytearray | memoryview, fields: tuple[int, ...], leader_epoch: int | None, now: int,
        max_decompressed: int,
    ) -> AppendInfo:
        """The produce fast path: one v2 batch, validated with one unpack and one CRC, offsets
        patched in place, one write."""
        limits = self._timestamp_limits  # and self._fast_check, for this config
        # the header, the CRC and every record read against it (Kafka's LogValidator), in one
        # compiled call when it all passes; the batch's max timestamp is its records'
        max_size, compact, create_time, before, after = self._fast_check
        records_max = check_produced(data, max_size, compact, create_time, now, before, after)
        if records_max is None:  # compressed, or something to refuse: the general checks say what
            cfg, topic, partition = self.config, self.topic, self.partition
            records_max = check_produced_one_v2(data, fields, cfg, topic, partition, now, limits, max_decompressed)
        producers = self.producers
        if fields[9] >= 0:  # an idempotent producer's batch
            base, length, ple, _m, crc, attrs, lod, bts, mts, pid, pep, bseq, count = fields
            given = new_header((0, length + 12, 2, base, base + lod, crc, attrs, bts, mts, pid, pep, bseq, count, ple))
            dup = producers.check(given)
            if dup is not None:
                return AppendInfo.of_duplicate(dup, self.log_start_offset)
        first = self.log_end_offset
        last = first + fields[6]
        data, h = assign_one_v2(data, fields, first, records_max, leader_epoch)
        if leader_epoch is not None and leader_epoch > self.epochs.latest_epoch:
            self._note_epoch(leader_epoch, first)
        headers = [h]
        if limits is not None:
            check_timestamps(headers, now, limits)
        segs = self._segs
        seg = segs.view[0][-1]
        if seg.should_roll(h.size, h.max_timestamp, last, now):
            seg = self._roll(first, now)
        position = seg.append(data, headers)
        segs.recent.append((seg, first, last, position, h.size))
        self.log_end_offset = last + 1
        if self.auto_flush and self.flush_messages_due():
            self.flush()
        if h.producer_id >= 0:
            producers.update(h, now)
        return AppendInfo(first, last, h.max_timestamp, last, -1, self.log_start_offset, h.record_count, h.size, headers)

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry the leader's offsets and epochs."""
        self._check_open()
        headers = validate_batches(data, self.config, self.topic, self.partition, produce=False)
        first = headers[0].base_offset if headers[0].base_offset >= 0 else headers[0].last_offset
        if first < self.log_end_offset:
            raise CorruptRecordError(
                f"follower append at offset {first} is below the log end offset {self.log_end_offset}"
            )
        prev = first - 1
        for h in headers:
            if h.last_offset <= prev:
                raise CorruptRecordError(f"offsets go backwards at {h.last_offset}")
            prev = h.last_offset
            if h.magic == 2:
                self._note_epoch(h.partition_leader_epoch, h.base_offset)
        info = self._write(data, headers, self.clock.now_ms(), -1)
        self.producers.written(data, headers, None, self._segs.view[0][-1])
        return info

    @property
    def _timestamp_limits(self) -> tuple[int, int] | None:
        cfg = self.config
        if self._limits_for is not cfg:  # computed once per config, with the fast path's check's arguments
            limits = self._limits = timestamp_limits(cfg)
            self._fast_check, self._limits_for = produced_check_args(cfg, limits), cfg
        return self._limits

    def _write(
        self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], now: int, log_append_time: int
    ) -> AppendInfo:
        first = headers[0].base_offset if headers[0].base_offset >= 0 else self.log_end_offset
        last = headers[-1].last_offset
        max_ts, offset_of_max, count = summarize(headers, first)
        seg = self._segs.view[0][-1]
        if seg.should_roll(len(buf), max_ts, last, now):
            seg = self._roll(first, now)
        position = seg.append(buf, headers)
        self._segs.note_written(seg, headers, position)
        self.log_end_offset = last + 1
        if self.auto_flush and self.flush_messages_due():
            self.flush()
        return AppendInfo(
            first, last, max_ts, offset_of_max, log_append_time, self.log_start_offset, count, len(buf), headers
        )

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (if the active one has data)."""
        self._check_open()
        if self.active.is_empty:
            return self.active
        return self._roll(self.log_end_offset, self.clock.now_ms() if now_ms is None else now_ms)

    def _roll(self, base_offset: int, now: int) -> LogSegment:
        with self._lock:
            kept = self._segs.seal_active()
            if not kept:  # the log held nothing: it now starts at the new segment
                self._raise_log_start(base_offset)
            seg = self._segs.open_active(kept, base_offset, self.config, now)
            if self.producers.entries:
                # the state up to the new segment, so that recovery replays at most one segment
                self.producers.take_snapshot(base_offset)
            return seg

    def maybe_roll_for_time(self, now_ms: int | None = None) -> bool:
        """Roll the active segment when it is older than ``segment.ms`` (scheduler hook)."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        seg = self.active
        if not seg.is_empty and now - seg.created_ms > self.config.segment_ms - seg.jitter_ms:
            self._roll(self.log_end_offset, now)
            return True
        return False

    # ------------------------------------------------------------------------------------
    # flush

    def flush(self) -> int:
        """fdatasync every segment that may hold unflushed data; returns the new recovery point.

        The recovery point moves only after the syncs completed, to the log end offset captured
        before they started.
        """
        if self.closed:
            return self.recovery_point
        target = self.log_end_offset
        self._segs.flush(self.recovery_point)
        if target > self.recovery_point:
            self.recovery_point = target
        self.last_flush_ms = self.clock.monotonic_ms()
        return self.recovery_point

    def start_epoch(self, epoch: int) -> None:
        """A new leader epoch starts at the log end offset (a leader's first step; only a newer
        epoch is recorded).  Writes the checkpoint, under the log's lock: a worker thread may
        call it while the event loop reads the cache."""
        with self._lock:
            self.epochs.assign(epoch, self.log_end_offset)

    # The flush policy, in one place: whoever flushes (this log inline, or a broker from a worker
    # thread and a timer) asks these two rules.

    def flush_messages_due(self) -> bool:
        """``flush.messages`` records or more are not yet flushed (checked after appends)."""
        return self.log_end_offset - self.recovery_point >= self.config.flush_messages

    def flush_time_due(self, now_ms: int) -> bool:
        """Records are unflushed and ``flush.ms`` passed since the last flush (checked by a timer);
        ``now_ms`` on the log's monotonic clock."""
        return self.log_end_offset > self.recovery_point and now_ms - self.last_flush_ms >= self.config.flush_ms

    # ------------------------------------------------------------------------------------
    # reads

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        *,
        min_one_message: bool = True,
    ) -> ReadResult:
        """Read from ``offset`` up to ``max_bytes`` and below ``max_offset`` (exclusive).

        Returns a region of one segment file that starts at the batch holding ``offset``.  With
        ``min_one_message`` (Fetch v3+) the first batch is returned whole even when larger than
        ``max_bytes``; without, the region is cut at ``max_bytes`` and the client retries with a
        larger buffer.  An offset outside ``[log start, log end]`` raises OffsetOutOfRangeError.
        """
        self._check_open()
        # Order matters with a writer running alongside: the end offset is read before the
        # snapshot (appends roll a segment into the list before raising it), the start offset
        # after it (retention raises it before taking segments out of the list).
        end = self.log_end_offset
        segments, bases = self._segs.view
        start = self.log_start_offset
        if offset < start or offset > end or offset < bases[0]:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {end}] for {self.topic}-{self.partition}"
            )
        limit = end if max_offset is None else min(max_offset, end)
        if offset >= limit:
            return ReadResult(None, offset, start, end)
        try:
            region = self._segs.read(segments, bases, offset, limit, max_bytes, min_one_message)
        except CorruptSegmentError as exc:
            self._corrupt_reads.report(exc, offset)
            raise
        return ReadResult(region, offset, start, end)

    def iter_segments_from(self, offset: int) -> Iterator[LogSegment]:
        return self._segs.iter_from(offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start offset whose
        timestamp is >= ``timestamp`` (ListOffsets by time), or None."""
        self._check_open()
        return self._segs.offset_for_timestamp(timestamp, self.log_start_offset)

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the record with the largest timestamp ((-1, -1) if none)."""
        return self._segs.max_timestamp_and_offset()

    def offsets_before(self, timestamp: int, max_num: int) -> list[int]:
        """The seeds' getOffsetsBefore (ListOffsets v0): segment base offsets of segments last
        written before ``timestamp`` (newest first), with the log end offset first when asked
        for the latest (-1); -2 asks for the earliest only."""
        return self._segs.offsets_before(
            timestamp, max_num, self.log_start_offset, self.log_end_offset, self.clock.now_ms()
        )

    # ------------------------------------------------------------------------------------
    # transactions (read_committed)

    @property
    def last_stable_offset(self) -> int:
        """read_committed consumers read below this offset: the high watermark, or the first
        offset of the oldest transaction not yet decided below it."""
        return self.producers.last_stable_offset(self.high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[fetch_offset, upper)``: what a Fetch at
        read_committed lists so that the consumer drops their records."""
        return self._segs.aborted_transactions(fetch_offset, upper)

    # ------------------------------------------------------------------------------------
    # high watermark and log start offset: written only here

    @property
    def high_watermark(self) -> int:
        """The offset below which records are replicated to the ISR (consumers read up to it).
        Always between the log start offset and the log end offset; it moves back only when the
        log is truncated."""
        return self._high_watermark

    @property
    def log_start_offset(self) -> int:
        """The first offset of the log (retention, DeleteRecords and the leader move it forward)."""
        return self._log_start_offset

    def advance_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (a leader's: the smallest log end offset in
        the ISR; a follower's: its leader's; at load: the checkpointed one), clamped to the log
        (never below the log start offset nor above the log end offset) and never backwards
        (only truncation lowers it).  True when it moved."""
        # min(max(offset, log start), log end) without the two calls: once per produce request
        new = offset if offset > self._log_start_offset else self._log_start_offset
        if new > self.log_end_offset:
            new = self.log_end_offset
        if new <= self._high_watermark:
            return False
        self._high_watermark = new
        return True

    def _raise_log_start(self, offset: int) -> None:
        """The log start offset moves up to ``offset`` (under the lock); a high watermark below
        it follows (Kafka's rule: nothing below the log start is readable)."""
        self._log_start_offset = offset
        if self._high_watermark < offset:
            self._high_watermark = min(offset, self.log_end_offset)

    # ------------------------------------------------------------------------------------
    # retention and log start offset

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset forward (DeleteRecords, follower); never backwards."""
        self._check_open()
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"log start offset {offset} is beyond the log end {self.log_end_offset}")
        with self._lock:
            if offset <= self._log_start_offset:
                return False
            self._raise_log_start(offset)
            self.epochs.truncate_from_start(offset)
        return True

    def deletable_segments(self, now_ms: int | None = None) -> list[LogSegment]:
        """Segments to delete by retention (time, size) and the log start offset; never the
        active segment, always a prefix of the log."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        # one list throughout (a roll may replace it meanwhile)
        return deletable_segments(self._segs.view[0], self.config, self.log_start_offset, now)

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention: remove segments from the list now, files after ``file.delete.delay.ms``."""
        self._check_open()
        with self._lock:
            if self.closed:  # closed (topic deleted) by its owner while a worker waited
                return 0
            doomed = self.deletable_segments(now_ms)
            if not doomed:
                return 0
            # the start offset moves before the segments leave the list: a concurrent reader never
            # passes the range check for an offset its snapshot no longer holds
            new_start = self._segs.view[0][len(doomed)].base_offset
            if new_start > self._log_start_offset:
                self._raise_log_start(new_start)
                self.epochs.truncate_from_start(new_start)
            self._segs.remove(doomed, self.clock.monotonic_ms() + self.config.file_delete_delay_ms)
        self.delete_pending()
        return len(doomed)

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment) -> None:
        """Put ``new`` (a compacted ``.swap`` segment) in place of the consecutive ``old`` ones.

        Readers holding the previous segment list keep reading the old files, which stay open
        until their delayed deletion.
        """
        due = self.clock.monotonic_ms() + self.config.file_delete_delay_ms
        with self._lock:
            if self.closed or not self._segs.holds(old):
                # retention or truncation removed some of them meanwhile (or the log was closed):
                # drop the cleaned copy
                with contextlib.suppress(OSError):
                    new.delete_files()
                return
            self._segs.replace(old, new, due)
        self.files.sync_dir(self.directory)

    def delete_pending(self, force: bool = False) -> int:
        """Delete files of removed segments whose delay has passed."""
        now = self.clock.monotonic_ms()
        with self._lock:
            due_now = self._segs.take_due(now, force)
        for seg in due_now:
            seg.delete_files()
        return len(due_now)

    # ------------------------------------------------------------------------------------
    # truncation (followers)

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after ``offset`` (follower truncation). True if it did."""
        with self._lock:
            return self._truncate_to(offset)

    def _truncate_to(self, offset: int) -> bool:
        self._check_open()
        if offset >= self.log_end_offset:
            return False
        if offset < self._segs.view[1][0]:
            self.truncate_fully_and_start_at(offset)
            return True
        self.log_end_offset = self._segs.truncate_to(offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        # truncation is the one move of the HW (and the log start) downwards
        self._high_watermark = min(self._high_watermark, self.log_end_offset)
        self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.producers.rebuild(self.log_start_offset, self.log_end_offset, self.iter_segments_from)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        with self._lock:
            self._check_open()
            self._segs.reset(offset, self.config, self.clock.now_ms())
            self.log_end_offset = offset
            self._log_start_offset = offset
            self.recovery_point = offset
            self._high_watermark = offset
            self.epochs.clear()
            self.producers.clear()

    # ------------------------------------------------------------------------------------
    # config, closing

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segs.view[0]:
            seg.config = config

    def close(self) -> None:
        """Flush and close every file (the directory stays)."""
        with self._lock:  # not while a worker thread swaps segments
            if self.closed:
                return
            self.flush()
            self._segs.close()
            self.closed = True

    def abandon(self) -> None:
        """Close every descriptor without flushing or writing anything (a load being undone, e.g.
        a start-up that ran out of descriptors): the files stay as they are for the next load."""
        with self._lock:
            self._segs.abandon()
            self.closed = True

    def delete(self) -> None:
        """Close and remove the partition directory with everything in it."""
        with self._lock:
            if not self.closed:
                self._segs.close()
                self.closed = True
            self._segs.remove_directory()

    def take_producer_snapshot(self) -> None:
        """Write the producer state at the log end offset (clean shutdown)."""
        if self.producers.entries or self.producers.snapshots():
            self.producers.take_snapshot(self.log_end_offset)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segs.view[0])})"
        )
