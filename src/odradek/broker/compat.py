"""Down-conversion of v2 record batches for clients that fetch with old versions.

Fetch v0-1 returns message format v0 and v2-3 message format v1 (Kafka's rule).  Each v2 batch
is rewritten as legacy messages: one compressed wrapper with relative inner offsets when its
records have consecutive offsets and the codec exists for the old format, otherwise one
uncompressed message per record at its own offset.  Control batches (transaction markers) are
dropped; zstd, unknown to old formats, becomes uncompressed.

Fetch v0-2 read with a hard byte limit, so the data may end inside its first batch.  Such a
fragment is passed on unconverted: old clients see an entry longer than the response and report
"record too large" (Kafka sends an over-long "overflow" entry for the same reason) instead of
receiving nothing and fetching the same offset forever.
"""

from __future__ import annotations

from odradek.records import Compression, LegacyBatchBuilder, iter_batch_headers, read_batches

__all__ = ["down_convert", "magic_for_fetch_version"]


def magic_for_fetch_version(version: int) -> int:
    return 0 if version <= 1 else 1 if version <= 3 else 2


def down_convert(data: bytes, magic: int) -> bytes:
    if next(iter_batch_headers(data), None) is None:
        return data  # only a fragment of the first batch: let the client see it is too large
    out = bytearray()
    for batch in read_batches(data, verify_crc=False):
        raw = data[batch.position : batch.position + batch.size]
        if batch.magic <= magic:
            out += raw
            continue
        if batch.is_control:
            continue
        records = batch.records
        if not records:
            continue
        codec = batch.compression if batch.compression != Compression.ZSTD else Compression.NONE
        consecutive = all(r.offset == records[0].offset + i for i, r in enumerate(records))
        log_append = batch.max_timestamp if batch.timestamp_type == 1 else None
        if codec != Compression.NONE and consecutive:
            builder = LegacyBatchBuilder(magic, compression=codec, base_offset=records[0].offset, log_append_time=log_append)
            for r in records:
                builder.append(r.timestamp, r.key, r.value)
            out += builder.build()
            continue
        for r in records:
            single = LegacyBatchBuilder(magic, compression=0, base_offset=r.offset, log_append_time=log_append)
            single.append(r.timestamp, r.key, r.value)
            out += single.build()
    return bytes(out)
