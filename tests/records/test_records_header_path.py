"""The header-only path: BatchHeader fields, validate, in-place patches, offsets."""

from __future__ import annotations

import pytest
from kafka.record import MemoryRecords

import odradek.records as odr
from odradek.records import legacy

from .records_helpers import TS0, kafka_build, kafka_read, odr_build_legacy, odr_build_v2

RECORDS = [(TS0 + 10 * i, b"k%d" % i, b"v" * 50, []) for i in range(10)]


def test_v2_header_fields() -> None:
    data = odr_build_v2(
        RECORDS,
        compression=odr.Compression.LZ4,
        base_offset=500,
        partition_leader_epoch=7,
        producer_id=99,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
    )
    [h] = list(odr.iter_batch_headers(data, verify=True))
    assert h.position == 0 and h.size == len(data) and h.end == len(data)
    assert h.magic == 2
    assert (h.base_offset, h.last_offset, h.next_offset, h.last_offset_delta) == (500, 509, 510, 9)
    assert h.record_count == 10
    assert h.compression == odr.Compression.LZ4
    assert h.timestamp_type == odr.TimestampType.CREATE_TIME
    assert h.is_transactional and not h.is_control and not h.has_delete_horizon
    assert (h.base_timestamp, h.max_timestamp) == (TS0, TS0 + 90)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (99, 2, 40)
    assert h.partition_leader_epoch == 7
    [batch] = list(odr.read_batches(data))
    for name in (
        "base_offset",
        "last_offset",
        "magic",
        "compression",
        "timestamp_type",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "is_transactional",
        "is_control",
        "partition_leader_epoch",
        "record_count",
    ):
        assert getattr(batch, name) == getattr(h, name), name
    assert batch.header == h
    # same values as kafka-python's reader
    [kb] = list(MemoryRecords(data))
    assert (kb.base_offset, kb.last_offset, kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.crc) == (
        h.base_offset,
        h.last_offset,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.crc,
    )


def test_legacy_header_fields() -> None:
    data = odr_build_legacy(1, RECORDS[:2], base_offset=3)
    headers = list(odr.iter_batch_headers(data, verify=True))
    assert [(h.base_offset, h.last_offset, h.record_count) for h in headers] == [(3, 3, 1), (4, 4, 1)]
    assert headers[1].position == headers[0].size
    assert headers[0].base_timestamp == headers[0].max_timestamp == TS0
    assert headers[0].producer_id == -1 and headers[0].partition_leader_epoch == -1
    assert not headers[0].is_transactional and not headers[0].is_control
    h0 = next(odr.iter_batch_headers(odr_build_legacy(0, RECORDS[:1])))
    assert h0.timestamp_type == odr.TimestampType.NO_TIMESTAMP_TYPE and h0.max_timestamp == -1
    wrapped = next(odr.iter_batch_headers(odr_build_legacy(1, RECORDS, compression=odr.Compression.GZIP)))
    assert (wrapped.base_offset, wrapped.last_offset, wrapped.record_count, wrapped.last_offset_delta) == (
        -1,
        9,
        -1,
        -1,
    )


def test_header_walk_over_many_batches() -> None:
    parts = [odr_build_v2(RECORDS, base_offset=i * 10) for i in range(20)]
    data = b"".join(parts)
    headers = list(odr.iter_batch_headers(memoryview(data), verify=True))
    assert [h.base_offset for h in headers] == [i * 10 for i in range(20)]
    assert [h.position for h in headers] == [sum(map(len, parts[:i])) for i in range(20)]


def test_validate_produce_checks() -> None:
    good = odr_build_v2(RECORDS)
    odr.validate(good, odr.read_header(good), produce=True)  # type: ignore[arg-type]
    gaps = odr.BatchBuilder()
    gaps.append(TS0, None, b"a")
    gaps.append(TS0, None, b"b", offset_delta=5)
    data = gaps.build()
    header = odr.read_header(data)
    assert header is not None
    odr.validate(data, header)
    with pytest.raises(odr.CorruptRecordError):
        odr.validate(data, header, produce=True)
    empty = odr.BatchBuilder().build()
    with pytest.raises(odr.CorruptRecordError):
        odr.validate(empty, odr.read_header(empty), produce=True)  # type: ignore[arg-type]


def test_patch_base_offset_and_leader_epoch_keep_crc_valid() -> None:
    data = bytearray(odr_build_v2(RECORDS) + odr_build_v2(RECORDS))
    second = odr.read_header(data, odr.read_header(data).size)  # type: ignore[union-attr]
    assert second is not None
    odr.patch_base_offset(data, 0, 1000)
    odr.patch_base_offset(memoryview(data), second.position, 2000)
    odr.patch_partition_leader_epoch(data, second.position, 12)
    headers = list(odr.iter_batch_headers(data, verify=True))
    assert [h.base_offset for h in headers] == [1000, 2000]
    assert headers[1].partition_leader_epoch == 12
    assert [r[0] for r in kafka_read(bytes(data))] == list(range(1000, 1010)) + list(range(2000, 2010))


def test_patch_rejects_legacy() -> None:
    data = bytearray(odr_build_legacy(1, RECORDS[:1]))
    with pytest.raises(odr.UnsupportedMagicError):
        odr.patch_base_offset(data, 0, 5)
    with pytest.raises(odr.UnsupportedMagicError):
        odr.patch_partition_leader_epoch(data, 0, 5)
    with pytest.raises(odr.TruncatedBatchError):
        odr.patch_base_offset(data, len(data) - 3, 5)


@pytest.mark.parametrize("magic", [1, 2])
@pytest.mark.parametrize("codec", [odr.Compression.NONE, odr.Compression.GZIP])
def test_set_log_append_time(magic: int, codec: int) -> None:
    if magic == 2:
        data = bytearray(odr_build_v2(RECORDS, compression=codec))
    else:
        data = bytearray(odr_build_legacy(1, RECORDS, compression=codec))
    for header in list(odr.iter_batch_headers(data)):
        odr.set_log_append_time(data, header, TS0 + 12345)
    for header in odr.iter_batch_headers(data, verify=True):
        assert header.timestamp_type == odr.TimestampType.LOG_APPEND_TIME
        assert header.max_timestamp == TS0 + 12345
    assert {r[1] for r in kafka_read(bytes(data))} == {TS0 + 12345}
    assert {r.timestamp for b in odr.read_batches(data) for r in b.records} == {TS0 + 12345}


def test_set_log_append_time_magic0() -> None:
    data = bytearray(odr_build_legacy(0, RECORDS[:1]))
    with pytest.raises(odr.UnsupportedMagicError):
        odr.set_log_append_time(data, odr.read_header(data), 5)  # type: ignore[arg-type]


def test_assign_offsets_over_mixed_formats() -> None:
    kafka_v1_wrapper = kafka_build(1, odr.Compression.SNAPPY, RECORDS[:3])  # inner 0..2, wrapper 0
    parts = [
        odr_build_v2(RECORDS),  # 10
        odr_build_legacy(0, RECORDS[:2]),  # 2 plain messages
        odr_build_legacy(1, RECORDS[:4], compression=odr.Compression.GZIP),  # 4, in place
        odr_build_legacy(0, RECORDS[:3], compression=odr.Compression.LZ4),  # 3, rebuilt
        kafka_v1_wrapper,  # 3, in place
        odr_build_v2(RECORDS[:5], compression=odr.Compression.ZSTD),  # 5
    ]
    buf = bytearray(b"".join(parts))
    assert odr.assign_offsets(buf, 1000) == 1027
    got = [r.offset for b in odr.read_batches(buf) for r in b.records]
    assert got == list(range(1000, 1027))
    assert [r[0] for r in kafka_read(bytes(buf))] == list(range(1000, 1027))
    for h in odr.iter_batch_headers(buf, verify=True, strict=True):
        assert h.last_offset >= 1000


def test_assign_offsets_rebuilds_unusual_v1_wrapper() -> None:
    inner = b"".join(legacy.encode_message(off, 1, 0, TS0, None, b"x") for off in (3, 7, 9))
    wrapper = bytearray(
        legacy.encode_message(
            9, 1, odr.Compression.GZIP, TS0, None, odr.compress(odr.Compression.GZIP, inner)
        )
    )
    assert odr.assign_offsets(wrapper, 50) == 53
    assert [r.offset for b in odr.read_batches(wrapper) for r in b.records] == [50, 51, 52]


def test_assign_offsets_rejects_partial_data() -> None:
    data = bytearray(odr_build_v2(RECORDS))
    with pytest.raises(odr.TruncatedBatchError):
        odr.assign_offsets(data[:-1], 0)
