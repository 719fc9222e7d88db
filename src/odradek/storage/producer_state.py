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
rolls and at close.  Snapshot format (big-endian): int16 version (1), uint32 CRC-32C of the rest,
int32 entry count, then per producer int64 id, int16 epoch, int64 last timestamp, int8 batch count
and per batch int32 first sequence, int32 last sequence, int64 first offset, int64 last offset.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from odradek.records import BatchHeader
from odradek.records._crc import crc32c
from odradek.storage.checkpoint import write_atomic
from odradek.storage.errors import ProducerStateError

__all__ = ["BATCHES_TO_KEEP", "BatchMetadata", "ProducerEntry", "ProducerStateManager"]

BATCHES_TO_KEEP = 5
_SEQ_MOD = 1 << 31
_head = struct.Struct(">hIi")
_entry = struct.Struct(">qhqb")
_batch = struct.Struct(">iiqq")


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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def last_sequence(h: BatchHeader) -> int:
    return (h.base_sequence + (h.last_offset - h.base_offset)) % _SEQ_MOD


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.entries: dict[int, ProducerEntry] = {}

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

    def update(self, h: BatchHeader, timestamp: int) -> None:
        """Record a written batch (offsets assigned)."""
        if h.producer_id < 0 or h.magic < 2:
            return
        entry = self.entries.get(h.producer_id)
        if entry is None or h.producer_epoch > entry.epoch:
            entry = ProducerEntry(h.producer_id, h.producer_epoch, timestamp)
            self.entries[h.producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if h.base_sequence >= 0:
            entry.batches.append(BatchMetadata(h.base_sequence, last_sequence(h), h.base_offset, h.last_offset))

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        for h in headers:
            self.update(h, h.max_timestamp)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        expired = [pid for pid, e in self.entries.items() if now_ms - e.last_timestamp > expiration_ms]
        for pid in expired:
            del self.entries[pid]
        return len(expired)

    # -- snapshots -----------------------------------------------------------------------
    def snapshots(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob("*.snapshot") if p.stem.isdigit())

    def take_snapshot(self, offset: int, keep: int = 2) -> Path:
        body = bytearray(struct.pack(">i", len(self.entries)))
        for e in self.entries.values():
            body += _entry.pack(e.producer_id, e.epoch, e.last_timestamp, len(e.batches))
            for b in e.batches:
                body += _batch.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
        data = struct.pack(">hI", 1, crc32c(body)) + body
        path = self.directory / f"{offset:020d}.snapshot"
        write_atomic(path, data)
        for old in self.snapshots()[:-keep]:
            (self.directory / f"{old:020d}.snapshot").unlink(missing_ok=True)
        return path

    def load_snapshot(self, max_offset: int) -> int:
        """Load the newest valid snapshot at or below ``max_offset``; returns its offset (or -1)."""
        for offset in reversed(self.snapshots()):
            path = self.directory / f"{offset:020d}.snapshot"
            if offset > max_offset:
                path.unlink(missing_ok=True)  # beyond the log end after truncation: useless
                continue
            entries = self._read(path)
            if entries is None:
                path.unlink(missing_ok=True)
                continue
            self.entries = entries
            return offset
        self.entries = {}
        return -1

    def _read(self, path: Path) -> dict[int, ProducerEntry] | None:
        data = path.read_bytes()
        if len(data) < _head.size:
            return None
        version, crc, count = _head.unpack_from(data, 0)
        if version != 1 or crc32c(data[6:]) != crc:
            return None
        entries: dict[int, ProducerEntry] = {}
        pos = _head.size
        try:
            for _ in range(count):
                pid, epoch, ts, n = _entry.unpack_from(data, pos)
                pos += _entry.size
                e = ProducerEntry(pid, epoch, ts)
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
        self.entries = {}
        for s in self.snapshots():
            (self.directory / f"{s:020d}.snapshot").unlink(missing_ok=True)
