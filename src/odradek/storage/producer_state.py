"""Idempotent-producer state of a partition: per producer id, its epoch and last five batches.

A batch from an idempotent producer carries ``(producer id, producer epoch, base sequence)``.
Before a leader assigns offsets it checks the batch against the producer's entry:

* an epoch older than the entry's -> INVALID_PRODUCER_EPOCH;
* a new epoch (or an unknown producer) must start at sequence 0; an unknown producer with another
  sequence -> UNKNOWN_PRODUCER_ID, a known one -> OUT_OF_ORDER_SEQUENCE_NUMBER;
* a batch equal to one of the last five (same first and last sequence) is a retry: it is not
  written again and the append answers with the original offsets;
* otherwise the first sequence must follow the last one (wrapping at 2^31) ->
  OUT_OF_ORDER_SEQUENCE_NUMBER.

The state is rebuilt on open from the newest ``<offset>.snapshot`` file at or below the log end
plus the batch headers after it (no record is decoded).  Snapshots are written when a segment
rolls and at close.  Snapshot format (big-endian): int16 version (2), uint32 CRC-32C of the rest,
int32 entry count, then per producer int64 id, int16 epoch, int64 last timestamp, int8 batch count,
int64 first offset of its open transaction (-1: none), int32 coordinator epoch, and per batch int32
first sequence, int32 last sequence, int64 first offset, int64 last offset.  Version 1 (no
transaction fields) is read too.

Transactions: a transactional batch opens its producer's transaction (its first offset is
remembered); a COMMIT or ABORT marker closes it.  The last stable offset, below which a
read_committed consumer may read, is the high watermark or the first offset of the oldest
transaction that is open or whose marker is not yet below the high watermark.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode
from odradek.records import BatchHeader, control_marker
from odradek.records._crc import crc32c
from odradek.storage.checkpoint import write_atomic
from odradek.storage.errors import CorruptRecordError, ProducerStateError, UnknownFormatError
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.storage.segment import LogSegment

__all__ = ["BATCHES_TO_KEEP", "BatchMetadata", "CompletedTxn", "ProducerEntry", "ProducerStateManager"]

_log = logging.getLogger("odradek.storage.producer_state")

BATCHES_TO_KEEP = 5
_SEQ_MOD = 1 << 31
_head = struct.Struct(">hIi")
_entry = struct.Struct(">qhqb")
_batch = struct.Struct(">iiqq")
_txn = struct.Struct(">qi")
_VERSION = 2


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    last_timestamp: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_KEEP))
    #: the first offset of the producer's open transaction (-1: none)
    current_txn_first_offset: int = -1
    #: the epoch of the transaction coordinator that wrote the producer's last marker
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a COMMIT or ABORT marker (at ``last_offset``) ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def last_sequence(h: BatchHeader) -> int:
    return (h.base_sequence + (h.last_offset - h.base_offset)) % _SEQ_MOD


class ProducerStateManager:
    """The producer state of one partition, rebuilt from its snapshots and segments, and the
    aborted-transaction entries it writes to its segments' transaction indexes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.entries: dict[int, ProducerEntry] = {}
        #: open transactions: first offset -> producer id
        self.ongoing: dict[int, int] = {}
        #: transactions whose marker is written but maybe not yet below the high watermark
        #: (they still hold the last stable offset back): (last offset, first offset)
        self.unreplicated: deque[tuple[int, int]] = deque()

    # -- validation ----------------------------------------------------------------------
    def check(self, h: BatchHeader) -> BatchMetadata | None:
        """Validate a batch before offsets are assigned; returns the original batch if it is a
        retry of one of the last five, None if it is new.  Raises ProducerStateError."""
        if h.producer_id < 0 or h.magic < 2 or h.base_sequence < 0:
            return None
        entry = self.entries.get(h.producer_id)
        first = h.base_sequence
        last = last_sequence(h)
        if entry is None:
            if first != 0:
                raise ProducerStateError.unknown_producer(
                    f"producer {h.producer_id} is unknown and its first sequence is {first}, not 0"
                )
            return None
        if h.producer_epoch < entry.epoch:
            raise ProducerStateError.fenced(
                f"producer {h.producer_id} epoch {h.producer_epoch} is older than {entry.epoch}"
            )
        if h.producer_epoch > entry.epoch:
            if first != 0:
                raise ProducerStateError.out_of_order(
                    f"a new epoch {h.producer_epoch} of producer {h.producer_id} starts at sequence {first}, not 0"
                )
            return None
        for b in entry.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        expected = (entry.last_seq + 1) % _SEQ_MOD
        if first != expected:
            raise ProducerStateError.out_of_order(
                f"producer {h.producer_id}: sequence {first} does not follow {entry.last_seq}"
            )
        return None

    def duplicate_of(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """:meth:`check` of every batch of one append: the original of a retried batch, which must
        be sent alone (CorruptRecordError otherwise), or None."""
        if headers[0].producer_id >= 0 or len(headers) > 1:
            for h in headers:
                dup = self.check(h)
                if dup is not None:
                    if len(headers) > 1:
                        raise CorruptRecordError("a retried idempotent batch must be sent alone")
                    return dup
        return None

    def update(
        self, h: BatchHeader, timestamp: int, control: int = -1, coordinator_epoch: int = -1
    ) -> CompletedTxn | None:
        """Record a written batch (offsets assigned).  For a control batch, ``control`` is the
        type in its record's key (ControlRecordType: 0 ABORT, 1 COMMIT): the marker ends the
        producer's transaction, which is returned."""
        if h.producer_id < 0 or h.magic < 2:
            return None
        entry = self.entries.get(h.producer_id)
        if entry is None or h.producer_epoch > entry.epoch:
            # a new epoch: a transaction still open under the old one stays open (its marker,
            # written by the coordinator with the bumped epoch, ends it)
            txn_first = entry.current_txn_first_offset if entry is not None else -1
            entry = ProducerEntry(h.producer_id, h.producer_epoch, timestamp, current_txn_first_offset=txn_first,
                                  coordinator_epoch=entry.coordinator_epoch if entry is not None else -1)
            self.entries[h.producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if h.is_control:
            if control not in (0, 1):
                return None  # not a transaction marker
            first = entry.current_txn_first_offset
            if first >= 0:
                self.ongoing.pop(first, None)
            else:
                first = h.base_offset  # a marker for a transaction with no data here
            entry.current_txn_first_offset = -1
            if coordinator_epoch >= 0:
                entry.coordinator_epoch = coordinator_epoch
            self.unreplicated.append((h.last_offset, first))
            return CompletedTxn(h.producer_id, first, h.last_offset, aborted=control == 0)
        if h.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self.ongoing[h.base_offset] = h.producer_id
        if h.base_sequence >= 0:
            entry.batches.append(BatchMetadata(h.base_sequence, last_sequence(h), h.base_offset, h.last_offset))
        return None

    # -- transactions ----------------------------------------------------------------------
    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest transaction not yet decided below ``high_watermark``:
        an open one, or one whose marker is not yet replicated (None: none)."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0][0] < high_watermark:
            unreplicated.popleft()
        firsts = [first for _last, first in unreplicated]
        if self.ongoing:
            firsts.append(min(self.ongoing))
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Read_committed consumers read below this: the high watermark, or the first offset of
        the oldest undecided transaction if that is lower."""
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        """Headers only: a marker among them needs :meth:`update` with its type."""
        for h in headers:
            self.update(h, h.max_timestamp)

    # -- the log's appends and loads -----------------------------------------------------
    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a transaction marker of an older producer epoch, or from a coordinator older
        than the one that wrote the producer's last marker (a zombie coordinator's)."""
        entry = self.entries.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise ProducerStateError.fenced(
                f"marker of producer {producer_id} at epoch {producer_epoch}, older than {entry.epoch}"
            )
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                f"marker from coordinator epoch {coordinator_epoch}, older than {entry.coordinator_epoch}",
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            )

    def written(
        self, data: bytes | bytearray | memoryview, headers: Iterable[BatchHeader], timestamp: int | None,
        segment: LogSegment,
    ) -> None:
        """The state after batches of ``data`` (each at its ``position``) were written to
        ``segment`` (at ``timestamp``, or each batch's max timestamp); a marker ends a
        transaction, and an aborted one goes into the segment's aborted-transaction index."""
        for h in headers:
            if h.producer_id < 0:
                continue
            ts = h.max_timestamp if timestamp is None else timestamp
            if not h.is_control:
                self.update(h, ts)
                continue
            ctype, cepoch = control_marker(memoryview(data)[h.position : h.position + h.size], h.record_count)
            txn = self.update(h, ts, ctype, cepoch)
            if txn is not None and txn.aborted:
                self.index_aborted(segment, txn)

    def index_aborted(self, seg: LogSegment, txn: CompletedTxn) -> None:
        if txn.last_offset <= seg.txn_index.last_offset:
            return  # already there (a replay after a restart or a truncation)
        others = [first for first, pid in self.ongoing.items() if pid != txn.producer_id]
        lso = min(others) if others else txn.last_offset + 1
        seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    def rebuild(
        self,
        log_start: int,
        log_end: int,
        segments_from: Callable[[int], Iterable[LogSegment]],
        names: Iterable[str] | None = None,
    ) -> None:
        """Newest snapshot at or below ``log_end``, then the batch headers after it of the
        segments ``segments_from(offset)`` gives (``names``: the directory's file names, when
        the caller just listed it)."""
        start = self.load_snapshot(log_end, names)
        start = max(start, log_start, 0)
        for seg in segments_from(start):
            for h in seg.headers():
                if h.last_offset >= start and h.producer_id >= 0:
                    if h.is_control:
                        ctype, cepoch = control_marker(seg.read_bytes(h.position, h.size), h.record_count)
                        txn = self.update(h, h.max_timestamp, ctype, cepoch)
                        if txn is not None and txn.aborted:
                            # written again if a crash lost it, or kept (an entry is written once)
                            self.index_aborted(seg, txn)
                    else:
                        self.update(h, h.max_timestamp)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        # a producer with an open transaction does not expire (Kafka's rule)
        expired = [
            pid for pid, e in self.entries.items()
            if now_ms - e.last_timestamp > expiration_ms and e.current_txn_first_offset < 0
        ]
        for pid in expired:
            del self.entries[pid]
        return len(expired)

    # -- snapshots -----------------------------------------------------------------------
    def snapshots(self, names: Iterable[str] | None = None) -> list[int]:
        """Offsets of the snapshot files (``names``: the directory's file names, if known)."""
        if names is None:
            names = os.listdir(self.directory)
        stems = (n[: -len(".snapshot")] for n in names if n.endswith(".snapshot"))
        return sorted(int(s) for s in stems if s.isdigit())

    def take_snapshot(self, offset: int, keep: int = 2) -> Path:
        body = bytearray(struct.pack(">i", len(self.entries)))
        for e in self.entries.values():
            body += _entry.pack(e.producer_id, e.epoch, e.last_timestamp, len(e.batches))
            body += _txn.pack(e.current_txn_first_offset, e.coordinator_epoch)
            for b in e.batches:
                body += _batch.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
        data = struct.pack(">hI", _VERSION, crc32c(body)) + body
        path = self.directory / f"{offset:020d}.snapshot"
        write_atomic(path, data)
        for old in self.snapshots()[:-keep]:
            (self.directory / f"{old:020d}.snapshot").unlink(missing_ok=True)
        return path

    def load_snapshot(self, max_offset: int, names: Iterable[str] | None = None) -> int:
        """Load the newest valid snapshot at or below ``max_offset``; returns its offset (or -1)."""
        for offset in reversed(self.snapshots(names)):
            path = self.directory / f"{offset:020d}.snapshot"
            if offset > max_offset:
                path.unlink(missing_ok=True)  # beyond the log end after truncation: useless
                continue
            entries = self._read(path)
            if entries is None:
                # damaged (a known version whose checksum or length is wrong): the state is
                # rebuilt from the log instead, as Kafka does
                _log.warning("%s is damaged (checksum or length): deleting it; the producer state is rebuilt "
                             "from the log", path)
                path.unlink(missing_ok=True)
                continue
            self._set_entries(entries)
            return offset
        self._set_entries({})
        return -1

    def _set_entries(self, entries: dict[int, ProducerEntry]) -> None:
        self.entries = entries
        self.ongoing = {e.current_txn_first_offset: pid for pid, e in entries.items() if e.current_txn_first_offset >= 0}
        # markers before the snapshot were below the high watermark when it was taken, or
        # are replayed after it
        self.unreplicated.clear()

    def _read(self, path: Path) -> dict[int, ProducerEntry] | None:
        data = path.read_bytes()
        if len(data) < _head.size:
            return None
        version, crc, count = _head.unpack_from(data, 0)
        if version not in (1, _VERSION):
            # a newer format: deleting it and rebuilding from the log would lose the state of
            # producers whose batches retention already removed
            raise UnknownFormatError(
                path, "producer state snapshot format", version, f"1 and {_VERSION}", "",
                "remove it to rebuild the producer state from the log (the state of producers whose batches "
                "retention removed is then lost: their next writes may answer UNKNOWN_PRODUCER_ID)",
            )
        if crc32c(data[6:]) != crc:
            return None
        entries: dict[int, ProducerEntry] = {}
        pos = _head.size
        try:
            for _ in range(count):
                pid, epoch, ts, n = _entry.unpack_from(data, pos)
                pos += _entry.size
                e = ProducerEntry(pid, epoch, ts)
                if version >= 2:
                    e.current_txn_first_offset, e.coordinator_epoch = _txn.unpack_from(data, pos)
                    pos += _txn.size
                for _ in range(n):
                    e.batches.append(BatchMetadata(*_batch.unpack_from(data, pos)))
                    pos += _batch.size
                entries[pid] = e
        except struct.error:
            return None
        return entries

    def delete_snapshots_below(self, offset: int) -> None:
        for s in self.snapshots():
            if s < offset:
                (self.directory / f"{s:020d}.snapshot").unlink(missing_ok=True)

    def clear(self) -> None:
        self._set_entries({})
        for s in self.snapshots():
            (self.directory / f"{s:020d}.snapshot").unlink(missing_ok=True)
