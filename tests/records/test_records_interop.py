"""Interoperability with kafka-python's record builders and readers (the oracle)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

import odradek.records as odr

from .records_helpers import (
    PROFILE,
    TS0,
    RecordInput,
    kafka_build,
    kafka_read,
    odr_build_legacy,
    odr_build_v2,
    odr_read,
    record_lists,
)

CODECS = [
    odr.Compression.NONE,
    odr.Compression.GZIP,
    odr.Compression.SNAPPY,
    odr.Compression.LZ4,
    odr.Compression.ZSTD,
]
CASES = [
    (magic, codec)
    for magic in (0, 1, 2)
    for codec in CODECS
    if not (codec == odr.Compression.ZSTD and magic < 2)
]


def sample_records(magic: int, n: int = 60, seed: int = 7) -> list[RecordInput]:
    rnd = random.Random(seed)
    out: list[RecordInput] = []
    for i in range(n):
        key = None if i % 4 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else rnd.randbytes(rnd.choice([0, 5, 100, 300])) + b"x" * 200
        headers: list[tuple[str, bytes | None]] = []
        if magic == 2 and i % 3:
            headers = [("trace", b"%d" % i), ("null", None), ("ünï", b"")]
        out.append((TS0 + i * 5 - (i % 3) * 7, key, value, headers))
    return out


def expected(magic: int, records: list[RecordInput], *, first: int = 0, kafka: bool = False) -> list[tuple]:
    no_ts = None if kafka else -1
    return [
        (first + i, ts if magic else no_ts, key, value, headers if magic == 2 else [])
        for i, (ts, key, value, headers) in enumerate(records)
    ]


@pytest.mark.parametrize(("magic", "codec"), CASES)
def test_kafka_built_batches_decode(magic: int, codec: int) -> None:
    records = sample_records(magic)
    data = kafka_build(magic, codec, records, offset=1000)
    batches = list(odr.read_batches(data))
    assert batches
    for batch in batches:
        assert batch.magic == magic
        # kafka-python keeps v2 data uncompressed when compression does not pay.
        assert batch.compression in (codec, odr.Compression.NONE)
    assert odr_read(data) == expected(magic, records, first=1000)
    # kafka-python's v2 builder writes base offset 0 with the offsets as deltas.
    assert batches[0].base_offset == (0 if magic == 2 else 1000)
    if magic == 2 or codec == odr.Compression.NONE:
        assert batches[-1].last_offset == 1000 + len(records) - 1
    else:
        # kafka-python leaves the wrapper offset at 0, as a producer does before
        # the broker assigns offsets; the wrapper offset is what last_offset reports.
        assert batches[-1].last_offset == 0


@pytest.mark.parametrize(("magic", "codec"), CASES)
def test_odradek_built_batches_decode_with_kafka_python(magic: int, codec: int) -> None:
    records = sample_records(magic)
    if magic == 2:
        data = odr_build_v2(records, compression=codec, base_offset=50)
    else:
        data = odr_build_legacy(magic, records, compression=codec, base_offset=50)
    assert kafka_read(data) == expected(magic, records, first=50, kafka=True)
    assert odr_read(data) == expected(magic, records, first=50)
    for batch in odr.read_batches(data):
        assert batch.compression == codec


@pytest.mark.parametrize(
    "producer",
    [
        {},
        {"producer_id": 12345, "producer_epoch": 3, "base_sequence": 77},
        {"producer_id": 9, "producer_epoch": 0, "base_sequence": 0, "transactional": True},
    ],
)
def test_v2_uncompressed_is_byte_identical(producer: dict) -> None:
    records = sample_records(2, n=200)
    theirs = kafka_build(2, 0, records, **producer)
    ours = odr_build_v2(
        records,
        partition_leader_epoch=0,  # kafka-python writes 0, the Java client -1
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        is_transactional=producer.get("transactional", False),
    )
    assert ours == theirs


@given(record_lists())
@PROFILE
def test_v2_byte_identical_property(records: list[RecordInput]) -> None:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, ts, key, value, headers)
    theirs = bytes(builder.build())
    ours = odr_build_v2(records, partition_leader_epoch=0)
    assert ours == theirs
    assert odr_read(ours) == kafka_read(theirs)


@given(record_lists(), st.sampled_from(CODECS))
@PROFILE
def test_v2_round_trip_property(records: list[RecordInput], codec: int) -> None:
    data = odr_build_v2(records, compression=codec)
    assert odr_read(data) == expected(2, records)
    assert kafka_read(data) == expected(2, records, kafka=True)


@pytest.mark.parametrize("codec", [odr.Compression.SNAPPY, odr.Compression.ZSTD])
def test_v2_compressed_byte_identical_where_codec_settings_match(codec: int) -> None:
    """Snappy (xerial, 32 KiB blocks) and zstd (level 3) are written the same way
    by both; gzip (kafka-python: level 9) and lz4 (content size stored) differ."""
    records = [(TS0 + i, b"k%d" % i, b"v" * 200, []) for i in range(100)]
    theirs = kafka_build(2, codec, records)
    ours = odr_build_v2(records, compression=codec, partition_leader_epoch=0)
    assert ours == theirs


def test_mixed_magic_buffer_reads_in_order() -> None:
    r0 = sample_records(0, n=5)
    r1 = sample_records(1, n=5)
    r2 = sample_records(2, n=5)
    data = (
        kafka_build(0, 0, r0, offset=0)
        + kafka_build(1, odr.Compression.GZIP, r1, offset=5)
        + kafka_build(2, odr.Compression.LZ4, r2, offset=10)
    )
    got = odr_read(data)
    assert [r[0] for r in got] == list(range(15))
    assert [b.magic for b in odr.read_batches(data)] == [0] * 5 + [1, 2]


def test_control_batch_interop() -> None:
    key, value = odr.end_txn_marker(commit=True, coordinator_epoch=5)
    builder = odr.BatchBuilder(
        producer_id=42, producer_epoch=1, base_sequence=-1, is_transactional=True, is_control=True
    )
    builder.append(TS0, key, value)
    data = builder.build()
    [batch] = list(odr.read_batches(data))
    assert batch.is_control and batch.is_transactional
    assert odr.parse_control_key(batch.records[0].key) == (0, odr.ControlRecordType.COMMIT)
    [kbatch] = list(MemoryRecords(data))
    assert kbatch.is_control_batch and kbatch.is_transactional
    [krec] = list(kbatch)
    assert krec.commit and krec.version == 0


def test_log_append_time_batches_report_max_timestamp() -> None:
    records = sample_records(2, n=10)
    data = odr_build_v2(records, log_append_time=TS0 + 99_999)
    [batch] = list(odr.read_batches(data))
    assert batch.timestamp_type == odr.TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == TS0 + 99_999
    assert {r.timestamp for r in batch.records} == {TS0 + 99_999}
    assert {r[1] for r in kafka_read(data)} == {TS0 + 99_999}
    # v1 wrapper
    data = odr_build_legacy(1, records, compression=odr.Compression.GZIP, log_append_time=TS0 + 5)
    [batch] = list(odr.read_batches(data))
    assert batch.timestamp_type == odr.TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in batch.records} == {TS0 + 5}
    assert {r[1] for r in kafka_read(data)} == {TS0 + 5}


def test_legacy_wrapper_offsets_and_timestamps() -> None:
    records = sample_records(1, n=4)
    data = odr_build_legacy(1, records, compression=odr.Compression.SNAPPY, base_offset=100)
    [header] = list(odr.iter_batch_headers(data))
    assert header.last_offset == 103 and header.base_offset == -1 and header.record_count == -1
    assert header.max_timestamp == max(r[0] for r in records)
    [batch] = list(odr.read_batches(data))
    assert batch.base_offset == 100 and batch.last_offset == 103 and batch.record_count == 4
    # magic 0: absolute inner offsets, no timestamps
    data = odr_build_legacy(0, records, compression=odr.Compression.GZIP, base_offset=100)
    [batch] = list(odr.read_batches(data))
    assert [r.offset for r in batch.records] == [100, 101, 102, 103]
    assert batch.timestamp_type == odr.TimestampType.NO_TIMESTAMP_TYPE
    assert {r.timestamp for r in batch.records} == {-1}


def test_kafka_python_relative_wrapper_without_assigned_offsets() -> None:
    """kafka-python writes magic-1 wrappers with offset 0 (a producer batch): the
    computed base would be negative, so inner offsets are reported as written."""
    records = sample_records(1, n=3)
    data = kafka_build(1, odr.Compression.GZIP, records)
    assert [r[0] for r in odr_read(data)] == [0, 1, 2]
