"""Header-only access to batches, for the broker and the storage layer.

Every entry of a Fetch response or a ``.log`` segment starts the same way in all
three formats: an int64 offset, an int32 size (bytes that follow), then four bytes
(CRC in v0/v1, partition leader epoch in v2) and the magic byte at position 16.
That is enough to walk a buffer entry by entry and read each header without
touching the records: :func:`iter_batch_headers` does only that, :func:`validate`
adds the size checks and checksum, and the ``patch_*`` / :func:`assign_offsets`
functions rewrite offsets, the leader epoch and log-append time in place.

For v0/v1 one *entry* (a single message, or a compressed wrapper holding many)
plays the role of a batch. A wrapper's first offset and message count are only
known after decompression, so the header path reports them as -1 (see
:class:`BatchHeader`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from . import legacy, v2
from ._crc import crc32, crc32c
from ._types import NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, TimestampType
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, codec_from_attributes
from .errors import CorruptRecordError, CrcMismatchError, TruncatedBatchError, UnsupportedMagicError

__all__ = [
    "BatchHeader",
    "assign_offsets",
    "iter_batch_headers",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "peek_header",
    "read_header",
    "set_log_append_time",
    "validate",
]

Buffer = bytes | bytearray | memoryview
WritableBuffer = bytearray | memoryview

LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
_MIN_SIZE = (legacy.MESSAGE_OVERHEAD_V0, legacy.MESSAGE_OVERHEAD_V1, v2.MIN_BATCH_LENGTH)
_PREFIX = struct.Struct(">qi")
_V2 = v2.HEADER
_V0 = legacy.ENTRY_V0
_V1 = legacy.ENTRY_V1
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_tuple_new = tuple.__new__


class BatchHeader(NamedTuple):
    """The header fields of one entry, read without touching its records.

    ``position`` is where the entry starts in the buffer and ``size`` its total
    length including the 12-byte offset/size prefix. Fields a format lacks hold
    Kafka's "none" sentinel: -1 for timestamps (magic 0), producer id, epoch and
    base sequence, and the partition leader epoch (magic 0 and 1). For a
    compressed v0/v1 wrapper ``base_offset`` and ``record_count`` are -1 because
    they need decompression; ``last_offset`` is the wrapper's offset.
    """

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    crc: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    partition_leader_epoch: int

    @property
    def end(self) -> int:
        """Position just after the entry."""
        return self.position + self.size

    @property
    def next_offset(self) -> int:
        """Offset following the entry's last offset."""
        return self.last_offset + 1

    @property
    def last_offset_delta(self) -> int:
        """``last_offset - base_offset`` (v2 only; -1 for a v0/v1 wrapper)."""
        if self.base_offset < 0 and self.magic < 2:
            return -1
        return self.last_offset - self.base_offset

    @property
    def compression(self) -> Compression:
        """Codec of the records; raises ``UnsupportedCodecError`` for unknown ids."""
        return codec_from_attributes(self.attributes, self.magic)

    @property
    def timestamp_type(self) -> TimestampType:
        """``CREATE_TIME`` or ``LOG_APPEND_TIME``; ``NO_TIMESTAMP_TYPE`` for magic 0."""
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType.LOG_APPEND_TIME if self.attributes & 0x08 else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        """Attribute bit 4 (v2)."""
        return self.magic >= 2 and bool(self.attributes & v2.ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """Attribute bit 5 (v2)."""
        return self.magic >= 2 and bool(self.attributes & v2.ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        """Attribute bit 6 (v2): ``base_timestamp`` is the compaction delete horizon."""
        return self.magic >= 2 and bool(self.attributes & v2.ATTR_DELETE_HORIZON)


def _header_at(data: Buffer, pos: int, size: int, magic: int) -> BatchHeader:
    if magic == 2:
        (
            base_offset,
            _length,
            leader_epoch,
            _magic,
            crc,
            attributes,
            last_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _V2.unpack_from(data, pos)
        return _tuple_new(
            BatchHeader,
            (
                pos,
                size,
                2,
                base_offset,
                base_offset + last_delta,
                crc,
                attributes,
                base_ts,
                max_ts,
                producer_id,
                producer_epoch,
                base_sequence,
                count,
                leader_epoch,
            ),
        )
    if magic == 1:
        offset, _size, crc, _magic, attributes, timestamp = _V1.unpack_from(data, pos)
    else:
        offset, _size, crc, _magic, attributes = _V0.unpack_from(data, pos)
        timestamp = NO_TIMESTAMP
    compressed = attributes & 0x07
    return _tuple_new(
        BatchHeader,
        (
            pos,
            size,
            magic,
            -1 if compressed else offset,
            offset,
            crc,
            attributes,
            timestamp,
            timestamp,
            NO_PRODUCER_ID,
            -1,
            NO_SEQUENCE,
            -1 if compressed else 1,
            NO_PARTITION_LEADER_EPOCH,
        ),
    )


def read_header(data: Buffer, pos: int = 0, *, max_batch_size: int | None = None) -> BatchHeader | None:
    """Header of the entry at ``pos``, or ``None`` when the entry is incomplete.

    Raises ``CorruptRecordError`` for a size below the format's minimum (or above
    ``max_batch_size`` when given) and ``UnsupportedMagicError`` for a magic
    other than 0, 1 or 2. Nothing beyond the header is read or checked.
    """
    n = len(data)
    if pos < 0 or n - pos < HEADER_SIZE_UP_TO_MAGIC:
        return None
    _offset, length = _PREFIX.unpack_from(data, pos)
    if length < legacy.MESSAGE_OVERHEAD_V0:
        raise CorruptRecordError(f"entry at byte {pos} has size {length}, below the minimum")
    size = length + LOG_OVERHEAD
    if max_batch_size is not None and size > max_batch_size:
        raise CorruptRecordError(f"entry at byte {pos} has size {size}, above {max_batch_size}")
    if pos + size > n:
        return None
    magic = data[pos + 16]
    if magic > 2:
        raise UnsupportedMagicError(f"entry at byte {pos} has unknown magic {magic}")
    if length < _MIN_SIZE[magic]:
        raise CorruptRecordError(f"entry at byte {pos} is too small ({length}) for magic {magic}")
    return _header_at(data, pos, size, magic)


def peek_header(data: Buffer, pos: int = 0) -> BatchHeader | None:
    """Header of the entry at ``pos`` read from its first bytes only.

    Unlike :func:`read_header` the rest of the entry need not be present: a reader that
    fetched just the first 61 bytes of an entry from a file gets its offsets, size and
    timestamps.  Returns ``None`` when fewer bytes than the format's fixed header are given.
    Nothing is validated beyond the size and magic checks of :func:`read_header`.
    """
    n = len(data)
    if pos < 0 or n - pos < HEADER_SIZE_UP_TO_MAGIC:
        return None
    _offset, length = _PREFIX.unpack_from(data, pos)
    magic = data[pos + 16]
    if magic > 2:
        raise UnsupportedMagicError(f"entry at byte {pos} has unknown magic {magic}")
    if length < _MIN_SIZE[magic]:
        raise CorruptRecordError(f"entry at byte {pos} is too small ({length}) for magic {magic}")
    fixed = (_V0.size, _V1.size, _V2.size)[magic]
    if n - pos < fixed:
        return None
    return _header_at(data, pos, length + LOG_OVERHEAD, magic)


def iter_batch_headers(
    data: Buffer,
    *,
    strict: bool = False,
    verify: bool = False,
    max_batch_size: int | None = None,
) -> Iterator[BatchHeader]:
    """Yield the header of every entry in ``data`` without decoding records.

    An incomplete entry at the end (a fetch response cut at its byte limit, a torn
    log tail) ends the iteration silently, or raises ``TruncatedBatchError`` when
    ``strict``. Sizes and magic are checked as in :func:`read_header`. With
    ``verify`` each entry is also checked with :func:`validate` before it is
    yielded.
    """
    n = len(data)
    pos = 0
    # A view only for checksums: holding one would stop a caller resizing a bytearray.
    view: Buffer = memoryview(data) if verify else data
    limit = max_batch_size if max_batch_size is not None else 1 << 62
    unpack_v2 = _V2.unpack_from
    unpack_size = _INT32.unpack_from
    tnew = _tuple_new
    crc_c = crc32c
    while pos < n:
        if n - pos >= v2.HEADER_SIZE:
            # Fast path for a complete v2 batch; anything else takes the general path.
            (length,) = unpack_size(data, pos + 8)
            size = length + LOG_OVERHEAD
            end = pos + size
            if data[pos + 16] == 2 and length >= v2.MIN_BATCH_LENGTH and end <= n and size <= limit:
                (
                    base_offset,
                    _length,
                    leader_epoch,
                    _magic,
                    crc,
                    attributes,
                    last_delta,
                    base_ts,
                    max_ts,
                    producer_id,
                    producer_epoch,
                    base_sequence,
                    count,
                ) = unpack_v2(data, pos)
                if verify and (count < 0 or crc_c(view[pos + 21 : end]) != crc):
                    validate(data, _header_at(data, pos, size, 2))
                yield tnew(
                    BatchHeader,
                    (
                        pos,
                        size,
                        2,
                        base_offset,
                        base_offset + last_delta,
                        crc,
                        attributes,
                        base_ts,
                        max_ts,
                        producer_id,
                        producer_epoch,
                        base_sequence,
                        count,
                        leader_epoch,
                    ),
                )
                pos = end
                continue
        header = read_header(data, pos, max_batch_size=max_batch_size)
        if header is None:
            if strict:
                raise TruncatedBatchError(f"data ends inside the entry at byte {pos} ({n - pos} bytes left)")
            return
        if verify:
            validate(data, header)
        yield header
        pos += header.size


def validate(data: Buffer, header: BatchHeader, *, produce: bool = False) -> None:
    """Check the entry described by ``header``: its bounds and its checksum.

    v2 batches are checked with CRC-32C over the bytes from the attributes to the
    end; v0/v1 messages with CRC-32 from the magic byte to the end. With
    ``produce`` the checks Kafka applies to batches in a produce request are
    added for v2: at least one record, and ``record_count == last_offset_delta + 1``.
    """
    view = memoryview(data)
    pos = header.position
    end = pos + header.size
    if not 0 <= header.magic <= 2:
        raise UnsupportedMagicError(f"entry at byte {pos} has unknown magic {header.magic}")
    if header.size < LOG_OVERHEAD + _MIN_SIZE[header.magic]:
        raise CorruptRecordError(f"entry at byte {pos} is too small ({header.size}) for magic {header.magic}")
    if pos < 0 or end > len(view):
        raise TruncatedBatchError(f"entry at byte {pos} does not fit the buffer")
    if header.magic == 2:
        computed = crc32c(view[pos + v2.ATTRIBUTES_OFFSET : end])
        if header.record_count < 0:
            raise CorruptRecordError(f"batch at byte {pos} has negative record count {header.record_count}")
        if produce:
            if header.record_count == 0:
                raise CorruptRecordError(f"batch at byte {pos} has no records")
            if header.record_count != header.last_offset - header.base_offset + 1:
                raise CorruptRecordError(
                    f"batch at byte {pos} has {header.record_count} records "
                    f"but last offset delta {header.last_offset - header.base_offset}"
                )
    else:
        computed = crc32(view[pos + legacy.MAGIC_OFFSET : end])
    if computed != header.crc:
        raise CrcMismatchError(
            f"CRC mismatch in entry at byte {pos} (offset {header.last_offset}): "
            f"stored {header.crc:#010x}, computed {computed:#010x}",
            stored=header.crc,
            computed=computed,
        )


def _magic_at(buf: Buffer, pos: int) -> int:
    if pos < 0 or len(buf) - pos < HEADER_SIZE_UP_TO_MAGIC:
        raise TruncatedBatchError(f"no entry header at byte {pos}")
    return buf[pos + 16]


def patch_base_offset(buf: WritableBuffer, pos: int, base_offset: int) -> None:
    """Set the base offset of the v2 batch at ``pos`` in place (the CRC does not cover it)."""
    magic = _magic_at(buf, pos)
    if magic != 2:
        raise UnsupportedMagicError(
            f"patch_base_offset needs a v2 batch, found magic {magic}; use assign_offsets"
        )
    _INT64.pack_into(buf, pos, base_offset)


def patch_partition_leader_epoch(buf: WritableBuffer, pos: int, epoch: int) -> None:
    """Set the partition leader epoch of the v2 batch at ``pos`` in place (not covered by the CRC)."""
    magic = _magic_at(buf, pos)
    if magic != 2:
        raise UnsupportedMagicError(f"only v2 batches carry a partition leader epoch, found magic {magic}")
    _INT32.pack_into(buf, pos + v2.PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: WritableBuffer, header: BatchHeader, timestamp: int) -> None:
    """Mark the entry as log-append-time with ``timestamp`` and recompute its CRC.

    v2: sets attribute bit 3 and the max timestamp. v1: sets bit 3 and the
    (wrapper) message timestamp. Magic 0 has no timestamps.
    """
    view = memoryview(buf)
    pos = header.position
    end = header.end
    if end > len(view):
        raise TruncatedBatchError(f"entry at byte {pos} does not fit the buffer")
    if header.magic == 2:
        attributes = header.attributes | v2.ATTR_TIMESTAMP_TYPE
        struct.pack_into(">h", view, pos + v2.ATTRIBUTES_OFFSET, attributes)
        _INT64.pack_into(view, pos + v2.MAX_TIMESTAMP_OFFSET, timestamp)
        _UINT32.pack_into(view, pos + v2.CRC_OFFSET, crc32c(view[pos + v2.ATTRIBUTES_OFFSET : end]))
    elif header.magic == 1:
        struct.pack_into(
            ">b", view, pos + legacy.ATTRIBUTES_OFFSET, header.attributes | legacy.ATTR_TIMESTAMP_TYPE
        )
        _INT64.pack_into(view, pos + legacy.TIMESTAMP_OFFSET, timestamp)
        _UINT32.pack_into(view, pos + legacy.CRC_OFFSET, crc32(view[pos + legacy.MAGIC_OFFSET : end]))
    else:
        raise UnsupportedMagicError("magic 0 messages have no timestamp")


def assign_offsets(
    buf: bytearray,
    first_offset: int,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> int:
    """Give the entries of ``buf`` consecutive offsets from ``first_offset``; return the next offset.

    The buffer must hold complete entries only. v2 batches get their base offset
    patched (offsets advance by ``last_offset_delta + 1``), v0/v1 messages get
    their offset field set; none of these touch a CRC. A magic 1 wrapper whose
    inner offsets are the usual 0..n-1 gets the wrapper offset ``first + n - 1``;
    magic 0 wrappers (absolute inner offsets) and magic 1 wrappers with other
    inner offsets are rebuilt with the same codec, which can change the size of
    ``buf`` (so it must be a ``bytearray`` with no exported views).
    """
    next_offset = first_offset
    pos = 0
    while pos < len(buf):
        h = read_header(buf, pos)
        if h is None:
            raise TruncatedBatchError(f"data ends inside the entry at byte {pos}")
        if h.magic == 2:
            _INT64.pack_into(buf, pos, next_offset)
            next_offset += h.last_offset - h.base_offset + 1
        elif not h.attributes & 0x07:
            _INT64.pack_into(buf, pos, next_offset)
            next_offset += 1
        else:
            entry = bytes(buf[pos : h.end])
            _wrapper, inner = legacy.unwrap(entry, 0, h.size, max_decompressed_size=max_decompressed_size)
            n = len(inner)
            if h.magic == 1 and all(m[0] == i for i, m in enumerate(inner)):
                _INT64.pack_into(buf, pos, next_offset + n - 1)
            else:
                log_append = h.magic == 1 and bool(h.attributes & legacy.ATTR_TIMESTAMP_TYPE)
                builder = legacy.LegacyBatchBuilder(
                    h.magic,
                    compression=h.attributes & 0x07,
                    base_offset=next_offset,
                    log_append_time=h.max_timestamp if log_append else None,
                )
                for _offset, _magic, _attributes, timestamp, key, value in inner:
                    builder.append(timestamp, key, value)
                rebuilt = builder.build()
                buf[pos : h.end] = rebuilt
                pos += len(rebuilt) - h.size
            next_offset += n
        pos += h.size
    return next_offset
