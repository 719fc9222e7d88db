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

import bisect
import contextlib
import errno
import logging
import re
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from odradek._clock import Clock, SystemClock
from odradek.errors import ErrorCode
from odradek.records import (
    BatchHeader,
    RecordsError,
    assign_offsets,
    control_marker,
    crc32c,
    iter_batch_headers,
    marker_batch,
    set_log_append_time,
)
from odradek.storage.config import LogConfig
from odradek.storage.epoch import LeaderEpochCache
from odradek.storage.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    ProducerStateError,
    RecordBatchTooLargeError,
    StorageError,
)
from odradek.storage.files import OS_FILES, FileOps
from odradek.storage.loader import LogLoader
from odradek.storage.producer_state import CompletedTxn, ProducerStateManager
from odradek.storage.segment import FileRegion, LogSegment
from odradek.storage.txn_index import AbortedTxn
from odradek.storage.validator import (
    V2_HEADER,
    check_batch_header,
    check_timestamps,
    fix_max_timestamps,
    new_header,
    timestamp_limits,
    validate_batches,
    validate_records,
)

__all__ = ["AppendInfo", "Log", "ReadResult", "parse_partition_dir"]

_log = logging.getLogger("odradek.storage.log")

_i64 = struct.Struct(">q")
_V2_HEADER = V2_HEADER
_new_header = new_header
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")
_RECENT_BATCHES = 32
#: reads that meet damage on disk are logged at most once per partition in this time
CORRUPT_READ_LOG_INTERVAL_MS = 60_000

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
    """The segments of one partition, with offsets, flushing, retention and recovery."""

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
        # the segment list and their base offsets, replaced together in one assignment so that a
        # reader's snapshot is always consistent (copy-on-write, see read())
        self._view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        # the last batches appended to the active segment, oldest first, consecutive:
        # (segment, base offset, last offset, file position, size).  A consumer that keeps up
        # reads from one of them: read() then needs no index lookup and no header read.
        # Cleared whenever the segment list changes (roll, truncation, retention, cleaning).
        self._recent: deque[tuple[LogSegment, int, int, int, int]] = deque(maxlen=_RECENT_BATCHES)
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # serializes changes of the segment list and the log start offset: appends, rolls and
        # reads run on the broker's event loop while retention, compaction and DeleteRecords'
        # segment removal run on a worker thread.  Held only for the swap (no file work), so the
        # loop never waits for a cleaning pass; readers take no lock (they use a snapshot, and a
        # replaced segment's files stay open until its delayed deletion).
        self._lock = _lock_factory()
        self._dir_dirty = False
        # written only through the methods below (advance_high_watermark, the log start offset's
        # moves, truncation), each keeping Kafka's rule: log start <= HW <= log end
        self._high_watermark = 0
        self._log_start_offset = 0
        self.recovered_bytes = 0
        #: flush inline when :meth:`flush_messages_due`; a broker turns this off (``flush_inline``)
        #: and flushes from a worker thread instead, by the same rule
        self.auto_flush = flush_inline
        self._limits: tuple[int, int] | None = None
        self._limits_for: LogConfig | None = None
        self._corrupt_logged_ms: int | None = None  # see _report_corrupt_read
        self._corrupt_unlogged = 0
        self.producers = ProducerStateManager(directory)
        loaded = LogLoader(directory, self.topic, self.partition, config, files, self.clock).load(
            recovery_point, log_start_offset, clean_shutdown, cleaned_to
        )
        self._set_segments(loaded.segments)
        self.recovery_point = loaded.recovery_point
        self.log_end_offset = loaded.log_end_offset
        self._log_start_offset = loaded.log_start_offset
        self._high_watermark = loaded.log_start_offset
        self.recovered_bytes = loaded.recovered_bytes
        self._dir_dirty = loaded.dir_dirty
        try:
            self._truncate_epochs_at_load()
            self._load_producer_state(loaded.names)
        except BaseException:
            self.abandon()
            raise
        self.last_flush_ms = self.clock.monotonic_ms()

    def _truncate_epochs_at_load(self) -> None:
        try:
            self.epochs.truncate_to_log(self.log_start_offset, self.log_end_offset)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # the cache in memory is right; the file is rewritten at its next change and cut to
            # the log again at every load, so a full disk need not keep the log from loading
            _log.warning(
                "partition %s-%d: leader-epoch checkpoint not rewritten at load (%s): the disk is full",
                self.topic, self.partition, exc.strerror,
            )

    # ------------------------------------------------------------------------------------
    # segment list (copy-on-write)

    def _set_segments(self, segments: Sequence[LogSegment], *, keep_recent: bool = False) -> None:
        # the recent batches belong to the active segment, which retention and cleaning never
        # replace (keep_recent): they stay valid
        if not keep_recent:
            self._recent.clear()
        self._view = (tuple(segments), tuple(s.base_offset for s in segments))

    @property
    def _segments(self) -> tuple[LogSegment, ...]:
        return self._view[0]

    @property
    def _bases(self) -> tuple[int, ...]:
        return self._view[1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

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
        compacted topic), InvalidTimestampError and ProducerStateError.
        """
        if self.closed:
            self._check_open()
        now = self.clock.now_ms() if now_ms is None else now_ms
        n = len(data)
        if n >= 61 and data[16] == 2 and self.config.message_timestamp_type == "CreateTime" and not data[22] & 0x20:
            fields = _V2_HEADER.unpack_from(data, 0)
            if fields[1] + 12 == n and fields[1] >= 49:
                return self._append_one_v2(data, fields, leader_epoch, now)
        headers = validate_batches(data, self.config, self.topic, self.partition, now_ms=now)
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
        if headers[0].producer_id >= 0 or len(headers) > 1:
            for h in headers:
                dup = self.producers.check(h)
                if dup is not None:
                    if len(headers) > 1:
                        raise CorruptRecordError("a retried idempotent batch must be sent alone")
                    return AppendInfo(
                        dup.first_offset, dup.last_offset, -1, -1, -1, self.log_start_offset,
                        dup.last_offset - dup.first_offset + 1, 0, [], duplicate=True,
                    )
        first = self.log_end_offset
        cfg = self.config
        log_append_time = -1
        if cfg.message_timestamp_type == "LogAppendTime" or any(h.magic < 2 for h in headers):
            buf = bytearray(data)
            if any(h.magic < 2 for h in headers):
                try:
                    assign_offsets(buf, first)
                except RecordsError as exc:
                    raise CorruptRecordError(str(exc)) from exc
            else:
                offset = first
                for h in headers:
                    _i64.pack_into(buf, h.position, offset)
                    offset += h.last_offset - h.base_offset + 1
            headers = list(iter_batch_headers(buf))
            if cfg.message_timestamp_type == "LogAppendTime":
                log_append_time = now
                for h in headers:
                    if h.magic > 0:
                        set_log_append_time(buf, h, now)
                headers = list(iter_batch_headers(buf))
            if leader_epoch is not None and leader_epoch >= 0:
                for h in headers:
                    if h.magic == 2:
                        _i32.pack_into(buf, h.position + 12, leader_epoch)
                headers = list(iter_batch_headers(buf))
            out: bytes | bytearray | memoryview = buf
        else:
            # v2 only: patch base offset and leader epoch (neither is covered by the CRC)
            writable = isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)
            out = data if writable else bytearray(data)
            headers = fix_max_timestamps(out, headers)
            epoch = leader_epoch if leader_epoch is not None and leader_epoch >= 0 else None
            offset = first
            shifted = []
            for h in headers:
                delta = h.last_offset - h.base_offset
                _i64.pack_into(out, h.position, offset)
                if epoch is not None:
                    _i32.pack_into(out, h.position + 12, epoch)
                shifted.append(
                    _new_header(
                        (h.position, h.size, 2, offset, offset + delta, h.crc, h.attributes, h.base_timestamp,
                         h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, h.record_count,
                         h.partition_leader_epoch if epoch is None else epoch)
                    )
                )
                offset += delta + 1
            headers = shifted
        limits = self._timestamp_limits
        if limits is not None:
            check_timestamps(headers, now, limits)
        if leader_epoch is not None and leader_epoch >= 0 and leader_epoch > self.epochs.latest_epoch:
            with self._lock:  # a worker thread may be moving the start of the epoch cache
                self.epochs.assign(leader_epoch, first)
        info = self._write(out, headers, now, log_append_time)
        for h in headers:
            if h.producer_id >= 0:
                self._update_producer(out, h, now)
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, *,
        leader_epoch: int | None = None, now_ms: int | None = None,
    ) -> AppendInfo:
        """Write a transaction's COMMIT or ABORT marker (WriteTxnMarkers on the partition leader).
        A marker of an older producer epoch, or from a coordinator older than the one that wrote
        the producer's last marker, is refused (a zombie coordinator's)."""
        entry = self.producers.entries.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise ProducerStateError.fenced(
                f"marker of producer {producer_id} at epoch {producer_epoch}, older than {entry.epoch}"
            )
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                f"marker from coordinator epoch {coordinator_epoch}, older than {entry.coordinator_epoch}",
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            )
        now = self.clock.now_ms() if now_ms is None else now_ms
        batch = bytearray(marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now))
        return self.append(batch, leader_epoch=leader_epoch, now_ms=now, from_coordinator=True)

    def _update_producer(self, data: bytes | bytearray | memoryview, h: BatchHeader, timestamp: int) -> None:
        """Producer state after a batch of ``data`` (at ``h.position``) was written; a marker
        ends a transaction, and an aborted one goes into the aborted-transaction index of the
        segment the marker is in (the active one)."""
        if not h.is_control:
            self.producers.update(h, timestamp)
            return
        ctype, coordinator_epoch = control_marker(memoryview(data)[h.position : h.position + h.size], h.record_count)
        txn = self.producers.update(h, timestamp, ctype, coordinator_epoch)
        if txn is not None and txn.aborted:
            self._index_aborted(self._view[0][-1], txn)

    def _index_aborted(self, seg: LogSegment, txn: CompletedTxn) -> None:
        if txn.last_offset <= seg.txn_index.last_offset:
            return  # already there (a replay after a restart or a truncation)
        others = [first for first, pid in self.producers.ongoing.items() if pid != txn.producer_id]
        lso = min(others) if others else txn.last_offset + 1
        seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

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
        segments, bases = self._view
        out: list[AbortedTxn] = []
        for seg in segments[max(self._segment_for(fetch_offset, segments, bases), 0) :]:
            if seg.base_offset >= upper:
                break
            for t in seg.txn_index.entries:
                if t.last_offset >= fetch_offset and t.first_offset < upper:
                    out.append(t)
                if t.last_stable_offset > upper:
                    return out  # every later entry is of a transaction that began at or above upper
        return out

    def _append_one_v2(
        self, data: bytes | bytearray | memoryview, fields: tuple[int, ...], leader_epoch: int | None, now: int
    ) -> AppendInfo:
        """The produce fast path: one v2 batch, validated with one unpack and one CRC, offsets
        patched in place, one write."""
        _base, length, ple, _m, crc, attrs, lod, bts, mts, pid, pep, bseq, count = fields
        size = length + 12
        cfg = self.config
        if crc32c(memoryview(data)[21:]) != crc:
            raise CorruptRecordError(f"CRC mismatch in the batch at offset {_base}")
        given = _new_header((0, size, 2, _base, _base + lod, crc, attrs, bts, mts, pid, pep, bseq, count, ple))
        check_batch_header(given, 2, self.topic, self.partition)
        if size > cfg.max_message_bytes:
            raise RecordBatchTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={cfg.max_message_bytes}")
        if size > cfg.segment_bytes:
            raise RecordBatchTooLargeError(f"batch of {size} bytes exceeds segment.bytes={cfg.segment_bytes}")
        # every record read against the header (Kafka's LogValidator); the batch's max timestamp
        # is its records'
        records_max = validate_records(data, given, cfg, self.topic, self.partition, now)
        producers = self.producers
        if pid >= 0:
            dup = producers.check(given)
            if dup is not None:
                return AppendInfo(
                    dup.first_offset, dup.last_offset, -1, -1, -1, self.log_start_offset,
                    dup.last_offset - dup.first_offset + 1, 0, [], duplicate=True,
                )
        if not (isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)):
            data = bytearray(data)
        first = self.log_end_offset
        last = first + lod
        _i64.pack_into(data, 0, first)
        if records_max != mts:
            mts = records_max
            _i64.pack_into(data, 35, mts)
            crc = crc32c(memoryview(data)[21:])
            _u32.pack_into(data, 17, crc)
        if leader_epoch is not None and leader_epoch >= 0:
            _i32.pack_into(data, 12, leader_epoch)
            ple = leader_epoch
            if leader_epoch > self.epochs.latest_epoch:
                with self._lock:
                    self.epochs.assign(leader_epoch, first)
        h = _new_header((0, size, 2, first, last, crc, attrs, bts, mts, pid, pep, bseq, count, ple))
        headers = [h]
        limits = self._timestamp_limits
        if limits is not None:
            check_timestamps(headers, now, limits)
        seg = self._view[0][-1]
        if seg.should_roll(size, mts, last, now):
            seg = self._roll(first, now)
        position = seg.append(data, headers)
        self._recent.append((seg, first, last, position, size))
        self.log_end_offset = last + 1
        if self.auto_flush and self.flush_messages_due():
            self.flush()
        if pid >= 0:
            producers.update(h, now)
        return AppendInfo(first, last, mts, last, -1, self.log_start_offset, count, size, headers)

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
            if h.magic == 2 and h.partition_leader_epoch > self.epochs.latest_epoch:
                with self._lock:
                    self.epochs.assign(h.partition_leader_epoch, h.base_offset)
        now = self.clock.now_ms()
        info = self._write(data, headers, now, -1)
        for h in headers:
            if h.producer_id >= 0:
                self._update_producer(data, h, h.max_timestamp)
        return info

    def _empty_info(self) -> AppendInfo:
        return AppendInfo(self.log_end_offset, self.log_end_offset - 1, -1, -1, -1, self.log_start_offset, 0, 0)

    @property
    def _timestamp_limits(self) -> tuple[int, int] | None:
        cfg = self.config
        if self._limits_for is not cfg:  # computed once per config
            self._limits = timestamp_limits(cfg)
            self._limits_for = cfg
        return self._limits

    def _write(
        self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], now: int, log_append_time: int
    ) -> AppendInfo:
        first = headers[0].base_offset if headers[0].base_offset >= 0 else self.log_end_offset
        last = headers[-1].last_offset
        if len(headers) == 1:
            h = headers[0]
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
            # a compressed v0/v1 wrapper does not know its count: its offsets tell it
            count = h.record_count if h.record_count >= 0 else h.last_offset - first + 1
        else:
            max_ts, offset_of_max = -1, first
            count, prev = 0, first - 1
            for h in headers:
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max = h.max_timestamp, h.last_offset
                count += h.record_count if h.record_count >= 0 else h.last_offset - prev
                prev = h.last_offset
        seg = self._view[0][-1]
        if seg.should_roll(len(buf), max_ts, last, now):
            seg = self._roll(first, now)
        position = seg.append(buf, headers)
        recent = self._recent
        for h in headers:
            if h.magic != 2:  # message sets: offsets of their own, not tracked
                recent.clear()
                break
            recent.append((seg, h.base_offset, h.last_offset, position + h.position, h.size))
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
            return self._roll_locked(base_offset, now)

    def _roll_locked(self, base_offset: int, now: int) -> LogSegment:
        old = self.active
        old.seal()
        if old.is_empty:
            # an empty active segment at a lower base (e.g. after truncation) is replaced
            old.delete_files()
            segments = list(self._segments[:-1])
            if not segments:  # the log held nothing: it now starts at the new segment
                self._raise_log_start(base_offset)
        else:
            segments = list(self._segments)
        try:
            seg = LogSegment(self.directory, base_offset, self.config, self.files, now_ms=now, active=True)
        except BaseException:
            # the new segment could not be created (ENOSPC, EMFILE): the old one stays active
            if not old.closed and not old.index.writable:
                old.index.make_writable()
                old.time_index.make_writable()
            raise
        segments.append(seg)
        self._set_segments(segments)
        self._dir_dirty = True
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
        segments = self._segments
        for seg in segments:
            if (seg.next_offset > self.recovery_point or seg is segments[-1]) and not seg.closed:
                seg.flush()
        if self._dir_dirty:
            self._dir_dirty = False
            self.files.sync_dir(self.directory)
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

    def _segment_for(self, offset: int, segments: tuple[LogSegment, ...], bases: tuple[int, ...]) -> int:
        return max(bisect.bisect_right(bases, offset) - 1, 0)

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
        segments, bases = self._view
        start = self.log_start_offset
        if offset < start or offset > end or offset < bases[0]:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {end}] for {self.topic}-{self.partition}"
            )
        limit = end if max_offset is None else min(max_offset, end)
        if offset >= limit:
            return ReadResult(None, offset, start, end)
        recent = self._recent
        if recent:
            region = self._read_recent(tuple(recent), segments[-1], offset, limit, max_bytes, min_one_message)
            if region is None or isinstance(region, FileRegion):
                return ReadResult(region, offset, start, end)
        i = self._segment_for(offset, segments, bases)
        try:
            while i < len(segments):
                seg = segments[i]
                if seg.closed:
                    i += 1
                    continue
                size = seg.size  # before next_offset, which an append raises first
                max_position = size if limit >= seg.next_offset else seg.position_of(limit)
                region = seg.read(offset, max_bytes, max_position, min_one_message)
                if region is not None:
                    return ReadResult(region, offset, start, end)
                i += 1
        except CorruptSegmentError as exc:
            self._report_corrupt_read(exc, offset)
            raise
        return ReadResult(None, offset, start, end)

    def _report_corrupt_read(self, exc: CorruptSegmentError, offset: int) -> None:
        """An ERROR line for a read that met damage on disk (the reader is answered CORRUPT_MESSAGE):
        the partition, the segment file, the position and the offset read.  At most one line per
        partition every :data:`CORRUPT_READ_LOG_INTERVAL_MS`, counting the reads not logged, so a
        consumer polling the damaged offset does not flood the log."""
        now = self.clock.monotonic_ms()
        last = self._corrupt_logged_ms
        if last is not None and now - last < CORRUPT_READ_LOG_INTERVAL_MS:
            self._corrupt_unlogged += 1
            return
        unlogged, self._corrupt_unlogged = self._corrupt_unlogged, 0
        self._corrupt_logged_ms = now
        segment = exc.segment.name if exc.segment is not None else "?"
        _log.error(
            "partition %s-%d: a read at offset %d met a corrupt entry in segment %s at position %s and was "
            "answered CORRUPT_MESSAGE (%s)%s",
            self.topic, self.partition, offset, segment, "?" if exc.position is None else exc.position,
            exc.message,
            f"; {unlogged} more reads met corrupt entries of this partition since the last such line" if unlogged else "",
        )

    @staticmethod
    def _read_recent(
        recent: tuple[tuple[LogSegment, int, int, int, int], ...],
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

    def iter_segments_from(self, offset: int) -> Iterator[LogSegment]:
        segments, bases = self._view
        yield from segments[self._segment_for(offset, segments, bases) :]

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start offset whose
        timestamp is >= ``timestamp`` (ListOffsets by time), or None."""
        self._check_open()
        start = self.log_start_offset
        for seg in self._segments:
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
        for seg in self._segments:
            if seg.max_timestamp > best[0]:
                best = (seg.max_timestamp, seg.offset_of_max_timestamp)
        return best

    def offsets_before(self, timestamp: int, max_num: int) -> list[int]:
        """The seeds' getOffsetsBefore (ListOffsets v0): segment base offsets of segments last
        written before ``timestamp`` (newest first), with the log end offset first when asked
        for the latest (-1); -2 asks for the earliest only."""
        segs = self._segments
        candidates: list[tuple[int, int]] = [(s.base_offset, s.largest_timestamp) for s in segs]
        if not self.active.is_empty:
            candidates.append((self.log_end_offset, self.clock.now_ms()))
        if timestamp == -1:
            idx = len(candidates) - 1
        elif timestamp == -2:
            idx = 0
        else:
            idx = -1
            for i, (_o, ts) in enumerate(candidates):
                if ts <= timestamp:
                    idx = i
        result = [max(o, self.log_start_offset) for o, _ in reversed(candidates[: idx + 1])]
        if timestamp == -2:
            result = [self.log_start_offset]
        return result[:max_num]

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
        new = min(max(offset, self._log_start_offset), self.log_end_offset)
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
        snapshot = self._segments  # one list throughout (a roll may replace it meanwhile)
        segs = list(snapshot[:-1])
        cfg = self.config
        result: list[LogSegment] = []
        size_excess = sum(s.size for s in snapshot) - cfg.retention_bytes if cfg.delete and cfg.retention_bytes >= 0 else 0
        for i, seg in enumerate(segs):
            next_base = snapshot[i + 1].base_offset
            by_start = next_base <= self.log_start_offset
            by_time = cfg.delete and cfg.retention_ms >= 0 and now - seg.largest_timestamp > cfg.retention_ms
            by_size = size_excess >= seg.size and size_excess > 0
            if not (by_start or by_time or by_size):
                break
            size_excess -= seg.size
            result.append(seg)
        return result

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
            new_start = self._segments[len(doomed)].base_offset
            if new_start > self._log_start_offset:
                self._raise_log_start(new_start)
                self.epochs.truncate_from_start(new_start)
            self._remove_segments(doomed)
        self.delete_pending()
        return len(doomed)

    def _remove_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Take sealed segments out of the list; their files are renamed ``.deleted`` and stay
        open for readers holding an older list until ``file.delete.delay.ms`` passed (as Kafka)."""
        ids = {id(s) for s in doomed}
        due = self.clock.monotonic_ms() + self.config.file_delete_delay_ms
        with self._lock:
            self._set_segments([s for s in self._segments if id(s) not in ids], keep_recent=True)
            for seg in doomed:
                seg.rename_suffix(".deleted")
                self._pending_deletes.append((due, seg))

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment) -> None:
        """Put ``new`` (a compacted ``.swap`` segment) in place of the consecutive ``old`` ones.

        Readers holding the previous segment list keep reading the old files, which stay open
        until their delayed deletion.
        """
        ids = {id(s) for s in old}
        due = self.clock.monotonic_ms() + self.config.file_delete_delay_ms
        with self._lock:
            segments = list(self._segments)
            if self.closed or not all(any(s is o for s in segments) for o in old):
                # retention or truncation removed some of them meanwhile (or the log was closed):
                # drop the cleaned copy
                with contextlib.suppress(OSError):
                    new.delete_files()
                return
            at = next(i for i, s in enumerate(segments) if id(s) in ids)
            kept = [s for s in segments if id(s) not in ids]
            kept.insert(at, new)
            for seg in old:
                seg.rename_suffix(".deleted")
                self._pending_deletes.append((due, seg))
            new.rename_suffix("")
            self._set_segments(kept, keep_recent=True)
        self.files.sync_dir(self.directory)

    def delete_pending(self, force: bool = False) -> int:
        """Delete files of removed segments whose delay has passed."""
        now = self.clock.monotonic_ms()
        with self._lock:
            due_now = [seg for due, seg in self._pending_deletes if force or now >= due]
            if not due_now:
                return 0
            self._pending_deletes = [(due, seg) for due, seg in self._pending_deletes if not (force or now >= due)]
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
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        keep = [s for s in self._segments if s.base_offset < offset or s.base_offset == offset == self._bases[0]]
        drop = [s for s in self._segments if s not in keep]
        for seg in drop:
            seg.seal()
            seg.delete_files()
        if drop:
            # durable before anything is written at the truncation point: a removed segment that
            # a power cut brought back would follow the new data after a gap
            self.files.sync_dir(self.directory)
        self._set_segments(keep)
        last = self.active
        if not last.index.writable:
            last.index.make_writable()
            last.time_index.make_writable()
        last.truncate_to(offset)
        self.log_end_offset = last.next_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        # truncation is the one move of the HW (and the log start) downwards
        self._high_watermark = min(self._high_watermark, self.log_end_offset)
        self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self._load_producer_state()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        with self._lock:
            self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._check_open()
        for seg in self._segments:
            seg.delete_files()
        now = self.clock.now_ms()
        self._set_segments([LogSegment(self.directory, offset, self.config, self.files, now_ms=now, active=True)])
        self.files.sync_dir(self.directory)  # the old segments must not come back after a power cut
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
        for seg in self._segments:
            seg.config = config

    def close(self) -> None:
        """Flush and close every file (the directory stays)."""
        with self._lock:  # not while a worker thread swaps segments
            self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.flush()
        for seg in self._segments:
            seg.close()
        self.delete_pending(force=True)
        self.closed = True

    def abandon(self) -> None:
        """Close every descriptor without flushing or writing anything (a load being undone, e.g.
        a start-up that ran out of descriptors): the files stay as they are for the next load."""
        with self._lock:
            for seg in self._segments:
                seg.abandon()
            for _, seg in self._pending_deletes:
                seg.abandon()
            self.closed = True

    def delete(self) -> None:
        """Close and remove the partition directory with everything in it."""
        with self._lock:
            self._delete()

    def _delete(self) -> None:
        if not self.closed:
            for seg in self._segments:
                seg.close()
            self.delete_pending(force=True)
            self.closed = True
        for path in self.directory.iterdir():
            path.unlink()
        self.directory.rmdir()

    # ------------------------------------------------------------------------------------
    # idempotent producers

    def _load_producer_state(self, names: Iterable[str] | None = None) -> None:
        """Newest snapshot at or below the log end, then the batch headers after it (``names``:
        the directory's file names, when the caller just listed it)."""
        producers = self.producers
        start = producers.load_snapshot(self.log_end_offset, names)
        start = max(start, self.log_start_offset, 0)
        for seg in self.iter_segments_from(start):
            for h in seg.headers():
                if h.last_offset >= start and h.producer_id >= 0:
                    if h.is_control:
                        ctype, cepoch = control_marker(seg.read_bytes(h.position, h.size), h.record_count)
                        txn = producers.update(h, h.max_timestamp, ctype, cepoch)
                        if txn is not None and txn.aborted:
                            # written again if a crash lost it, or kept (an entry is written once)
                            self._index_aborted(seg, txn)
                    else:
                        producers.update(h, h.max_timestamp)

    def take_producer_snapshot(self) -> None:
        """Write the producer state at the log end offset (clean shutdown)."""
        if self.producers.entries or self.producers.snapshots():
            self.producers.take_snapshot(self.log_end_offset)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )
