"""What a leader writes into validated batches before they are appended (the assigning half of
Kafka's LogValidator): offsets from the log end on, the leader epoch, ``LogAppendTime``
timestamps, and the figures an append reports.  Pure functions of the bytes and their headers."""

from __future__ import annotations

import struct

from odradek.records import (
    BatchHeader,
    RecordsError,
    assign_offsets,
    crc32c,
    iter_batch_headers,
    set_log_append_time,
)
from odradek.storage.errors import CorruptRecordError
from odradek.storage.validator import fix_max_timestamps, new_header

__all__ = ["assign", "assign_one_v2", "summarize"]

_i64 = struct.Struct(">q")
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")


def assign(
    data: bytes | bytearray | memoryview,
    headers: list[BatchHeader],
    first: int,
    log_append_time: bool,
    leader_epoch: int | None,
    now: int,
) -> tuple[bytes | bytearray | memoryview, list[BatchHeader]]:
    """The batches of ``data`` (``headers``, validated) with offsets from ``first``, the leader
    epoch when one is given and, with ``log_append_time``, ``now`` as their timestamps; returns
    the bytes to write and their headers.

    v2 batches get offsets by patching their base offset (no per-record work) — in place when
    ``data`` is writable (a bytearray or a view of one) — and v0/v1 messages per message."""
    if log_append_time or any(h.magic < 2 for h in headers):
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
        if log_append_time:
            for h in headers:
                if h.magic > 0:
                    set_log_append_time(buf, h, now)
            headers = list(iter_batch_headers(buf))
        if leader_epoch is not None and leader_epoch >= 0:
            for h in headers:
                if h.magic == 2:
                    _i32.pack_into(buf, h.position + 12, leader_epoch)
            headers = list(iter_batch_headers(buf))
        return buf, headers
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
            new_header(
                (h.position, h.size, 2, offset, offset + delta, h.crc, h.attributes, h.base_timestamp,
                 h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, h.record_count,
                 h.partition_leader_epoch if epoch is None else epoch)
            )
        )
        offset += delta + 1
    return out, shifted


def assign_one_v2(
    data: bytes | bytearray | memoryview,
    fields: tuple[int, ...],
    first: int,
    records_max: int,
    leader_epoch: int | None,
) -> tuple[bytes | bytearray | memoryview, BatchHeader]:
    """The produce fast path's :func:`assign`: one v2 batch (``fields``, its header unpacked)
    gets offsets from ``first``, its records' max timestamp ``records_max`` (with a new CRC when
    that differs from the header's) and the leader epoch, in place when ``data`` is writable."""
    _base, _length, ple, _m, crc, attrs, lod, bts, mts, pid, pep, bseq, count = fields
    if not (isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)):
        data = bytearray(data)
    _i64.pack_into(data, 0, first)
    if records_max != mts:
        mts = records_max
        _i64.pack_into(data, 35, mts)
        crc = crc32c(memoryview(data)[21:])
        _u32.pack_into(data, 17, crc)
    if leader_epoch is not None and leader_epoch >= 0:
        _i32.pack_into(data, 12, leader_epoch)
        ple = leader_epoch
    return data, new_header((0, _length + 12, 2, first, first + lod, crc, attrs, bts, mts, pid, pep, bseq, count, ple))


def summarize(headers: list[BatchHeader], first: int) -> tuple[int, int, int]:
    """``(max timestamp, offset of the max timestamp, record count)`` of batches about to be
    written from offset ``first``."""
    if len(headers) == 1:
        h = headers[0]
        # a compressed v0/v1 wrapper does not know its count: its offsets tell it
        return h.max_timestamp, h.last_offset, h.record_count if h.record_count >= 0 else h.last_offset - first + 1
    max_ts, offset_of_max = -1, first
    count, prev = 0, first - 1
    for h in headers:
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
        count += h.record_count if h.record_count >= 0 else h.last_offset - prev
        prev = h.last_offset
    return max_ts, offset_of_max, count
