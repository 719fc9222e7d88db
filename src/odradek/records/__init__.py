"""Record formats of the Kafka log: message sets v0/v1, record batches v2, codecs.

Pure functions and small classes over ``bytes`` / ``bytearray`` / ``memoryview``:
no I/O, no threads, no logging. Shared by the protocol, storage and client layers.

Reading records (clients, compaction, down-conversion)
------------------------------------------------------
``read_batches(data, *, verify_crc=True, strict=False, max_decompressed_size=64 MiB)``
    Iterate over :class:`Batch` objects in a buffer holding any mix of v0/v1
    message-set entries and v2 batches (a Fetch response's records, a ``.log``
    segment). A trailing incomplete entry is skipped silently (normal at the end
    of a fetch) unless ``strict``. Each :class:`Batch` exposes ``base_offset``,
    ``last_offset``, ``next_offset``, ``magic``, ``compression``
    (:class:`Compression`), ``timestamp_type`` (:class:`TimestampType`),
    ``base_timestamp``, ``max_timestamp``, ``producer_id``, ``producer_epoch``,
    ``base_sequence``, ``is_transactional``, ``is_control``,
    ``partition_leader_epoch``, ``record_count``, ``position``, ``size``, ``crc``,
    ``attributes``, its :class:`BatchHeader` as ``header``, and ``records``: a
    list of :class:`Record` ``(offset, timestamp, key, value, headers)`` decoded
    on first access. A top-level v0/v1 entry (one message, or a compressed
    wrapper) counts as one batch whose records are its inner messages.
    ``batch.record_columns()`` gives the same records as a list of
    :class:`RecordColumns` ``(count, offsets, timestamps, keys, values, headers)``:
    consecutive stretches as single-use column iterables, for readers that build
    their own per-record objects (runs of records with one layout are then
    decoded without Python work per record). ``decode_record_columns`` and
    ``decode_records`` do the same for one v2 batch's uncompressed records.

Header-only path (broker and storage: no per-record work)
---------------------------------------------------------
``iter_batch_headers(data, *, strict=False, verify=False, max_batch_size=None)``
    Yield a :class:`BatchHeader` per entry: ``position``, ``size``, ``magic``,
    ``base_offset``, ``last_offset``, ``crc``, ``attributes``,
    ``base_timestamp``, ``max_timestamp``, ``producer_id``, ``producer_epoch``,
    ``base_sequence``, ``record_count``, ``partition_leader_epoch`` plus derived
    ``end``, ``next_offset``, ``last_offset_delta``, ``compression``,
    ``timestamp_type``, ``is_transactional``, ``is_control``,
    ``has_delete_horizon``. (A compressed v0/v1 wrapper reports ``base_offset``
    and ``record_count`` as -1: they need decompression.)
``read_header(data, pos=0, *, max_batch_size=None) -> BatchHeader | None``
    The header at one position, ``None`` if that entry is incomplete.
``validate(data, header, *, produce=False)``
    Bounds plus CRC-32C (v2) or CRC-32 (v0/v1); ``produce`` adds Kafka's
    produce-request checks on the record count.
``check.check_records(buf, start, stop, count, base_timestamp, last_offset_delta, *, sequential)``
    Every record of a v2 batch read against its header in one pass with no object
    per record (compiled, or in Python: the same answers), as Kafka's LogValidator
    does on append: a :class:`~odradek.records.check.RecordsCheck` with the first
    problem, or the records' max and min timestamps and their null keys.
``patch_base_offset(buf, pos, base_offset)`` / ``patch_partition_leader_epoch(buf, pos, epoch)``
    In-place writes into a v2 batch; neither field is covered by the CRC.
``set_log_append_time(buf, header, timestamp)``
    Switch a v2 batch or v1 message to log-append time; recomputes the CRC.
``assign_offsets(buf, first_offset) -> next_offset``
    Offsets for a whole buffer of any magic: v2 base offsets and v0/v1 message
    offsets are patched in place; v0 (and unusual v1) compressed wrappers are
    rebuilt.

Writing
-------
``BatchBuilder(*, compression, base_offset, partition_leader_epoch, producer_id,
producer_epoch, base_sequence, is_transactional, is_control, log_append_time,
delete_horizon, compression_level)``
    ``append(timestamp, key, value, headers=None, *, offset_delta=None) -> int``
    then ``build() -> bytes``: one v2 batch, byte-identical to what Kafka's
    clients write for the same input (uncompressed). ``record_count`` and
    ``size_in_bytes`` (exact, uncompressed) tell a producer when it is full.
``LegacyBatchBuilder(magic, *, compression, base_offset, log_append_time, compression_level)``
    ``append(timestamp, key, value) -> offset`` then ``build() -> bytes``: a v0/v1
    message set, or one compressed wrapper message.
``end_txn_marker(commit, coordinator_epoch)`` / ``parse_control_key(key)``
    Control-record helpers for transaction markers.

Codecs
------
``compress(codec, data, *, magic=2, level=None)`` and
``decompress(codec, data, *, magic=2, max_size=...)`` for :class:`Compression`
NONE, GZIP, SNAPPY (xerial framing written, xerial or raw read), LZ4 (frame
format, Kafka 0.8 header checksum for magic 0) and ZSTD. Decompression never
produces more than ``max_size`` bytes (:data:`DEFAULT_MAX_DECOMPRESSED_SIZE`,
64 MiB); beyond it :class:`DecompressionLimitExceeded` is raised.

Errors
------
All problems with input bytes raise :class:`RecordsError` subclasses (see
:mod:`odradek.records.errors`): :class:`CorruptRecordError`
(:class:`TruncatedBatchError`, :class:`CrcMismatchError`,
:class:`DecompressionError`), :class:`UnsupportedMagicError`,
:class:`UnsupportedCodecError`, :class:`DecompressionLimitExceeded`.
"""

from __future__ import annotations

from ._crc import crc32, crc32c
from ._types import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Header,
    Record,
    TimestampType,
)
from ._varint import decode_varint, decode_varlong, encode_varint, encode_varlong, size_of_varint
from .batch import (
    BatchHeader,
    assign_offsets,
    iter_batch_headers,
    patch_base_offset,
    patch_partition_leader_epoch,
    peek_header,
    read_header,
    set_log_append_time,
    validate,
)
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .errors import (
    CorruptRecordError,
    CrcMismatchError,
    DecompressionError,
    DecompressionLimitExceeded,
    RecordsError,
    TruncatedBatchError,
    UnsupportedCodecError,
    UnsupportedMagicError,
)
from .legacy import LegacyBatchBuilder
from .read import Batch, read_batches
from .v2 import (
    BatchBuilder,
    ControlRecordType,
    RecordColumns,
    control_marker,
    decode_record_columns,
    end_txn_marker,
    marker_batch,
    parse_control_key,
)

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "Batch",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "ControlRecordType",
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionError",
    "DecompressionLimitExceeded",
    "Header",
    "LegacyBatchBuilder",
    "Record",
    "RecordColumns",
    "RecordsError",
    "TimestampType",
    "TruncatedBatchError",
    "UnsupportedCodecError",
    "UnsupportedMagicError",
    "assign_offsets",
    "compress",
    "control_marker",
    "crc32",
    "crc32c",
    "decode_record_columns",
    "decode_varint",
    "decode_varlong",
    "decompress",
    "encode_varint",
    "encode_varlong",
    "end_txn_marker",
    "iter_batch_headers",
    "marker_batch",
    "parse_control_key",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "peek_header",
    "read_batches",
    "read_header",
    "set_log_append_time",
    "size_of_varint",
    "validate",
]
