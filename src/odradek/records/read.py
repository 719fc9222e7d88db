"""Decoding batches of any magic into records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import legacy, speedups, v2
from ._types import Record, TimestampType
from .batch import BatchHeader, iter_batch_headers, validate
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, decompress
from .errors import RecordsError

__all__ = ["Batch", "read_batches"]

Buffer = bytes | bytearray | memoryview


class Batch:
    """One v2 record batch, or one top-level v0/v1 entry (message or wrapper).

    Header fields are read eagerly; ``records`` is decoded (and decompressed) on
    first access and then kept. All record fields are built at that point:
    offsets and timestamps are ints, keys and values ``bytes`` or ``None``.
    """

    __slots__ = ("_data", "_max_decompressed_size", "_records", "_verify_crc", "header")

    def __init__(
        self,
        header: BatchHeader,
        data: Buffer,
        *,
        verify_crc: bool = True,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> None:
        self.header = header
        self._data = data
        self._verify_crc = verify_crc
        self._max_decompressed_size = max_decompressed_size
        self._records: list[Record] | None = None

    def __repr__(self) -> str:
        h = self.header
        return (
            f"Batch(magic={h.magic}, base_offset={h.base_offset}, last_offset={h.last_offset}, "
            f"compression={h.attributes & 7}, position={h.position}, size={h.size})"
        )

    # -- header fields ------------------------------------------------------------

    @property
    def magic(self) -> int:
        return self.header.magic

    @property
    def position(self) -> int:
        """Byte position of the batch in the buffer it was read from."""
        return self.header.position

    @property
    def size(self) -> int:
        """Bytes of the batch, including the 12-byte offset/size prefix."""
        return self.header.size

    @property
    def crc(self) -> int:
        return self.header.crc

    @property
    def attributes(self) -> int:
        return self.header.attributes

    @property
    def compression(self) -> Compression:
        return self.header.compression

    @property
    def timestamp_type(self) -> TimestampType:
        return self.header.timestamp_type

    @property
    def base_offset(self) -> int:
        """First offset (for a v0/v1 wrapper, the first inner message's offset)."""
        h = self.header
        if h.magic < 2 and h.attributes & 0x07:
            return self.records[0].offset
        return h.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return self.header.base_timestamp

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.header.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.header.base_sequence

    @property
    def partition_leader_epoch(self) -> int:
        return self.header.partition_leader_epoch

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def record_count(self) -> int:
        """Number of records (decodes a v0/v1 wrapper to count them)."""
        h = self.header
        if h.magic < 2:
            return len(self.records)
        return h.record_count

    # -- records ------------------------------------------------------------------

    @property
    def records(self) -> list[Record]:
        """The decoded records, in offset order."""
        records = self._records
        if records is None:
            records = self._records = self._decode()
        return records

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def record_columns(self) -> list[v2.RecordColumns]:
        """The records as :class:`~odradek.records.v2.RecordColumns`: consecutive stretches,
        in order, each column a single-use iterable (see :func:`v2.decode_record_columns`).

        For readers that build their own objects per record: this skips the :class:`Record`
        tuples (runs of records with one layout are decoded column-wise).  Every call decodes
        again (unless ``records`` was already read); errors are raised here, as for ``records``.
        """
        records = self._records
        h = self.header
        if records is None and h.magic >= 2:
            buf, count, base, base_ts, lat, lod = self._v2_args()
            return v2.decode_record_columns(buf, count, base, base_ts, lat, last_offset_delta=lod)
        if records is None:
            records = self.records
        if not records:
            return []
        offsets, timestamps, keys, values, headers = zip(*records)
        return [v2.RecordColumns(len(records), offsets, timestamps, keys, values, headers)]

    def compiled_records(self, record_type: type, topic: str, partition: int, timestamp_type: int) -> list[Any] | None:
        """The records as ``record_type(topic, partition, offset, timestamp, timestamp_type, key,
        value, headers)`` tuples, made by the compiled decoder (:mod:`odradek.records.speedups`)
        in one pass; None when it is not there, for magic 0/1 data, or when it finds anything
        wrong (then :meth:`record_columns` decodes and raises the precise error).  Any: the
        caller's record type (the clients' ConsumerRecord), whose third item is the offset."""
        compiled = speedups.compiled
        h = self.header
        if compiled is None or h.magic < 2 or self._records is not None:
            return None
        try:
            buf, start, stop, lat = self._records_span()
            records: list[Any] = compiled.decode_records(
                buf, start, stop, h.record_count, h.base_offset, h.base_timestamp, lat,
                record_type, topic, partition, timestamp_type,
            )
        except (ValueError, RecordsError):
            return None
        if records and records[-1][2] > h.last_offset:
            return None  # a record beyond the batch's last offset: record_columns says so
        return records

    def _records_span(self) -> tuple[Buffer, int, int, int | None]:
        """``(buf, start, stop, log_append_time)``: where this v2 batch's records lie, in the
        batch's own data (uncompressed: no copy) or in the decompressed bytes."""
        h = self.header
        start, stop = h.position + v2.HEADER_SIZE, h.position + h.size
        buf = self._data
        if h.compression:
            buf = decompress(h.compression, buf[start:stop], magic=2, max_size=self._max_decompressed_size)
            start, stop = 0, len(buf)
        return buf, start, stop, h.max_timestamp if h.attributes & v2.ATTR_TIMESTAMP_TYPE else None

    def _v2_args(self) -> tuple[bytes, int, int, int, int | None, int]:
        h = self.header
        buf, start, stop, lat = self._records_span()
        # decompressed: all of the new bytes; else a copy of the records out of the batch's data
        records = buf if h.compression and isinstance(buf, bytes) else bytes(buf[start:stop])
        return (records, h.record_count, h.base_offset, h.base_timestamp, lat, h.last_offset - h.base_offset)

    def _decode(self) -> list[Record]:
        h = self.header
        if h.magic < 2:
            return legacy.decode_wrapper(
                self._data,
                h.position,
                h.position + h.size,
                verify_crc=self._verify_crc,
                max_decompressed_size=self._max_decompressed_size,
            )
        return v2.decode_records(*self._v2_args())


def read_batches(
    data: Buffer,
    *,
    verify_crc: bool = True,
    strict: bool = False,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Batch]:
    """Iterate over the batches in ``data`` (any mix of v0/v1 entries and v2 batches).

    This is what a Fetch response's records field or a ``.log`` segment holds.
    An incomplete trailing entry is skipped silently unless ``strict`` (then
    ``TruncatedBatchError``). With ``verify_crc`` (the default) every batch's
    checksum is checked before it is yielded, and inner v0/v1 messages when they
    are decoded. Records are decoded lazily per batch (``batch.records``), each
    decompressed payload limited to ``max_decompressed_size`` bytes. Every
    problem with the data raises a :class:`~odradek.records.errors.RecordsError`.
    """
    for header in iter_batch_headers(data, strict=strict):
        if verify_crc:
            validate(data, header)
        yield Batch(header, data, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)
