"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

One cleaning pass over a log:

1. The *dirty* section runs from the first dirty offset (``cleaner-offset-checkpoint``) to the
   first uncleanable offset: the active segment's base, or the first segment holding a record
   newer than ``min.compaction.lag.ms``.  A log is cleaned when its dirty bytes make up at least
   ``min.cleanable.dirty.ratio`` of the cleanable bytes.
2. An offset map ``key -> latest offset`` is built from the dirty section.
3. Every segment below the first uncleanable offset is recopied, in groups that fit one segment,
   keeping a record unless a later record has the same key.  Tombstones (null values) are kept
   while their segment is younger than ``delete.retention.ms`` so that consumers see them, and
   dropped afterwards.  Offsets never change; batches whose records all survive are copied
   byte for byte, others are rebuilt with the surviving records, codec and producer fields.
4. Crash safety: a group is written as ``<base>.log.cleaned`` (with its indexes), synced, then
   renamed to ``.swap`` — the commit point —; the replaced segments are renamed ``.deleted``
   and the swap takes the final name.  On open, :class:`~odradek.storage.log.Log` deletes
   ``.cleaned`` and ``.deleted`` files and completes any ``.log.swap``.

The active segment is never cleaned.  Not thread-safe: the owner runs one pass at a time per log,
with no concurrent appends to the segments being cleaned (appends to the active segment are fine).
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.records import Batch, BatchBuilder, LegacyBatchBuilder, Record, iter_batch_headers, read_batches
from odradek.storage.log import Log
from odradek.storage.segment import LogSegment

__all__ = ["CleanResult", "clean", "cleanable_range", "dirty_ratio"]


@dataclass(slots=True)
class CleanResult:
    first_dirty_offset: int  # where the next pass starts
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    segments_before: int = 0
    segments_after: int = 0


def cleanable_range(log: Log, first_dirty_offset: int, now_ms: int) -> tuple[int, int]:
    """``(first dirty offset, first uncleanable offset)`` of ``log`` at ``now_ms``."""
    segments = log.segments
    first_dirty = max(first_dirty_offset, log.log_start_offset)
    uncleanable = log.active.base_offset
    # nothing of a transaction that is not decided yet is cleaned (Kafka's first unstable offset)
    unstable = log.producers.first_unstable_offset(log.high_watermark)
    if unstable is not None:
        for seg in segments:
            if seg.next_offset > unstable:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for seg in segments[:-1]:
            if seg.max_timestamp >= 0 and seg.max_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    return min(first_dirty, uncleanable), uncleanable


def dirty_ratio(log: Log, first_dirty_offset: int, now_ms: int) -> float:
    """Dirty bytes / cleanable bytes (0 when there is nothing to clean)."""
    first_dirty, uncleanable = cleanable_range(log, first_dirty_offset, now_ms)
    clean_bytes = dirty_bytes = 0
    for seg in log.segments[:-1]:
        if seg.base_offset >= uncleanable:
            break
        if seg.next_offset <= first_dirty:
            clean_bytes += seg.size
        else:
            dirty_bytes += seg.size
    total = clean_bytes + dirty_bytes
    return dirty_bytes / total if total else 0.0


class _Aborted:
    """The aborted transactions of a log range: is a batch part of one? (Kafka's cleaner drops
    their records; they must not hide a committed value of the same key either.)"""

    def __init__(self, log: Log, start: int, end: int) -> None:
        self.by_producer: dict[int, list[tuple[int, int]]] = {}
        for t in log.aborted_transactions(start, end):
            self.by_producer.setdefault(t.producer_id, []).append((t.first_offset, t.last_offset))

    def holds(self, batch: Batch) -> bool:
        if not self.by_producer or not batch.is_transactional or batch.is_control:
            return False
        spans = self.by_producer.get(batch.producer_id)
        return spans is not None and any(first <= batch.base_offset <= last for first, last in spans)


def _offset_map(log: Log, first_dirty: int, uncleanable: int, aborted: _Aborted) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg in log.segments[:-1]:
        if seg.next_offset <= first_dirty:
            continue
        if seg.base_offset >= uncleanable:
            break
        data = seg.read_bytes(0, seg.size)
        for batch in read_batches(data):
            if batch.is_control or aborted.holds(batch):
                continue
            for rec in batch.records:
                if rec.offset >= first_dirty and rec.offset < uncleanable and rec.key is not None:
                    latest[rec.key] = rec.offset
    return latest


def _groups(segments: list[LogSegment], max_size: int) -> list[list[LogSegment]]:
    groups: list[list[LogSegment]] = []
    current: list[LogSegment] = []
    size = 0
    for seg in segments:
        fits = size + seg.size <= max_size and (not current or seg.next_offset - current[0].base_offset < 0x7FFFFFFF)
        if current and not fits:
            groups.append(current)
            current, size = [], 0
        current.append(seg)
        size += seg.size
    if current:
        groups.append(current)
    return groups


def clean(log: Log, first_dirty_offset: int, now_ms: int) -> CleanResult:
    """Run one cleaning pass over ``log``; returns stats and the next first dirty offset."""
    first_dirty, uncleanable = cleanable_range(log, first_dirty_offset, now_ms)
    result = CleanResult(first_dirty_offset=max(first_dirty, uncleanable), segments_before=len(log.segments))
    if uncleanable <= log.segments[0].base_offset or first_dirty >= uncleanable:
        result.first_dirty_offset = first_dirty
        result.segments_after = len(log.segments)
        return result
    aborted = _Aborted(log, log.segments[0].base_offset, uncleanable)
    latest = _offset_map(log, first_dirty, uncleanable, aborted)
    horizon = now_ms - log.config.delete_retention_ms
    cleanable = [s for s in log.segments[:-1] if s.base_offset < uncleanable]
    for group in _groups(cleanable, log.config.segment_bytes):
        _clean_group(log, group, latest, horizon, now_ms, result, aborted)
    result.segments_after = len(log.segments)
    return result


def _clean_group(
    log: Log,
    group: list[LogSegment],
    latest: dict[bytes, int],
    horizon: int,
    now_ms: int,
    result: CleanResult,
    aborted: _Aborted,
) -> None:
    base = group[0].base_offset
    cleaned = LogSegment(log.directory, base, log.config, log.files, now_ms=now_ms, active=True, suffix=".cleaned")
    committed = False
    try:
        for seg in group:
            retain_tombstones = seg.largest_timestamp > horizon
            data = seg.read_bytes(0, seg.size)
            result.bytes_read += len(data)
            for batch in read_batches(data):
                start, end = batch.position, batch.position + batch.size
                if batch.is_control:
                    # an ABORT marker goes once delete.retention.ms passed (its records went
                    # with the cleaning that saw them); COMMIT markers are kept
                    if not (retain_tombstones is False and _is_abort_marker(batch)):
                        _append(cleaned, data[start:end])
                    continue
                if aborted.holds(batch):
                    result.records_read += batch.record_count
                    result.records_removed += batch.record_count
                    continue
                records = batch.records
                result.records_read += len(records)
                kept = [
                    r
                    for r in records
                    if (r.key is None or latest.get(r.key, -1) <= r.offset)
                    and (r.value is not None or retain_tombstones)
                ]
                result.records_removed += len(records) - len(kept)
                if len(kept) == len(records):
                    _append(cleaned, data[start:end])
                elif kept:
                    for piece in _rebuild(batch, kept):
                        _append(cleaned, piece)
        # the aborted transactions stay known (their records and markers are kept for now)
        for seg in group:
            for txn in seg.txn_index.entries:
                cleaned.txn_index.append(txn)
        cleaned.seal()
        cleaned.flush()
        result.bytes_written += cleaned.size
        # commit point: .cleaned -> .swap (log last), then retire the old segments
        cleaned.rename_suffix(".swap")
        log.files.sync_dir(log.directory)
        committed = True  # from here on, reopening the log completes the swap
        log.replace_segments(group, cleaned)
    except BaseException:
        if not committed:
            cleaned.delete_files()
        raise


def _append(seg: LogSegment, data: bytes) -> None:
    seg.append(data, list(iter_batch_headers(data)))


def _rebuild(batch: Batch, kept: list[Record]) -> list[bytes]:
    if batch.magic == 2:
        builder = BatchBuilder(
            compression=batch.compression,
            base_offset=kept[0].offset,
            partition_leader_epoch=batch.partition_leader_epoch,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            log_append_time=batch.max_timestamp if batch.timestamp_type == 1 else None,
        )
        for r in kept:
            builder.append(r.timestamp, r.key, r.value, r.headers, offset_delta=r.offset - kept[0].offset)
        return [builder.build()]
    # v0/v1: one uncompressed message per surviving record, at its original offset
    pieces = []
    for r in kept:
        legacy = LegacyBatchBuilder(batch.magic, compression=0, base_offset=r.offset)
        legacy.append(r.timestamp, r.key, r.value)
        pieces.append(legacy.build())
    return pieces


def _is_abort_marker(batch: Batch) -> bool:
    records = batch.records
    return bool(records) and records[0].key is not None and len(records[0].key) >= 4 and records[0].key[2:4] == b"\x00\x00"
