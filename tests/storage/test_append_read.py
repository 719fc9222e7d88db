"""Appends (offsets, validation, timestamps) and reads (by offset, bytes, high watermark, time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.records import Compression, TimestampType, iter_batch_headers, read_batches
from odradek.storage import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    Log,
    LogConfig,
    LogManager,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)

from .storage_helpers import TS0, legacy_batch, read_all, record_offsets, records, v2_batch


def _log(tmp_path: Path, clock: FakeClock | None = None, **config: object) -> Log:
    return Log(
        tmp_path / "t-0", LogConfig.from_dict(config), clock=clock or FakeClock(TS0), clean_shutdown=True
    )


def test_v2_offsets_are_assigned_by_patching_the_base_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    infos = [log.append(v2_batch(n, base_offset=999, tag=f"{n}-")) for n in (1, 5, 2, 7)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 0), (1, 5), (6, 7), (8, 14)]
    assert [i.record_count for i in infos] == [1, 5, 2, 7]
    assert log.log_end_offset == 15
    batches = read_all(log)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 0), (1, 5), (6, 7), (8, 14)]
    assert record_offsets(batches) == list(range(15))
    assert [r[2] for r in records(batches)][1:6] == [b"k5-0", b"k5-1", b"k5-2", b"k5-3", b"k5-4"]
    # several batches in one append
    info = log.append(v2_batch(2, tag="x") + v2_batch(3, tag="y"))
    assert (info.first_offset, info.last_offset, info.record_count) == (15, 19, 5)
    assert record_offsets(read_all(log, 15)) == list(range(15, 20))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_legacy_offsets_are_assigned_for_messages_and_compressed_wrappers(
    tmp_path: Path, magic: int, codec: int
) -> None:
    log = _log(tmp_path)
    log.append(v2_batch(2))
    infos = [log.append(legacy_batch(magic, n, compression=codec, tag=f"{n}-")) for n in (3, 1, 4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(2, 4), (5, 5), (6, 9)]
    assert [i.record_count for i in infos] == [3, 1, 4]
    both = log.append(legacy_batch(magic, 2, compression=codec) + legacy_batch(magic, 3, compression=codec))
    assert (both.first_offset, both.last_offset, both.record_count) == (10, 14, 5)
    batches = read_all(log)
    assert record_offsets(batches) == list(range(15))
    keys = [r[2] for r in records(batches)]
    assert keys[2:5] == [b"k3-0", b"k3-1", b"k3-2"]
    for b in batches[1:]:
        assert b.magic == magic and b.compression == codec
    # reading from an offset inside a compressed wrapper returns that wrapper
    got = list(read_batches(log.read(7, 1 << 20).to_bytes()))
    if codec == Compression.NONE:
        assert got[0].last_offset == 7 and record_offsets(got[:1]) == [7]
    else:
        assert got[0].last_offset == 9 and record_offsets(got[:1]) == [6, 7, 8, 9]


def test_read_returns_the_batch_holding_the_offset(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"index.interval.bytes": 100})
    for i in range(50):
        log.append(v2_batch(4, value=b"z" * 30, tag=str(i)))
    for offset in range(0, 200, 7):
        result = log.read(offset, 300)
        first = next(read_batches(result.to_bytes()))
        assert first.base_offset <= offset <= first.last_offset
        assert result.region is not None
        assert os.pread(result.region.fd, result.region.length, result.region.position) == result.to_bytes()
        assert (result.log_start_offset, result.log_end_offset) == (0, 200)


def test_max_bytes_and_min_one_message(tmp_path: Path) -> None:
    log = _log(tmp_path)
    small = v2_batch(1, value=b"s" * 10)
    big = v2_batch(3, value=b"B" * 5000)
    log.append(small)
    log.append(big)
    log.append(small)
    log.append(small)
    # max_bytes caps the region at whole or partial batches
    r = log.read(0, len(small) + 10)
    assert r.size == len(small) + 10
    assert [b.base_offset for b in read_batches(r.to_bytes())] == [0]
    # a first batch larger than max_bytes is returned whole (Fetch v3+) ...
    r = log.read(1, 100)
    assert r.size == len(big)
    assert [b.last_offset for b in read_batches(r.to_bytes())] == [3]
    # ... or cut at max_bytes without min_one_message (the client retries bigger)
    r = log.read(1, 100, min_one_message=False)
    assert r.size == 100
    assert list(read_batches(r.to_bytes())) == []
    r = log.read(2, 1 << 20)
    assert [b.base_offset for b in read_batches(r.to_bytes())] == [1, 4, 5]


def test_a_regions_batch_headers_are_read_without_its_records(tmp_path: Path) -> None:
    """FileRegion.headers: the complete entries of the region (what iter_batch_headers finds in its
    bytes), with their file positions; an entry the region cuts ends them; slice keeps a part."""
    log = _log(tmp_path)
    for n in (1, 5, 2, 7):
        log.append(v2_batch(n, value=b"r" * 40))
    whole = log.read(0, 1 << 20).region
    assert whole is not None
    from_bytes = list(iter_batch_headers(whole.to_bytes()))
    heads = whole.headers()
    assert [(h.base_offset, h.last_offset, h.size) for h in heads] == [
        (h.base_offset, h.last_offset, h.size) for h in from_bytes
    ] == [(0, 0, from_bytes[0].size), (1, 5, from_bytes[1].size), (6, 7, from_bytes[2].size), (8, 14, from_bytes[3].size)]
    assert [h.position for h in heads] == [whole.position + h.position for h in from_bytes]
    # a region cut inside its third entry: two headers
    cut = log.read(0, heads[2].end - whole.position - 1, min_one_message=False).region
    assert cut is not None and [h.last_offset for h in cut.headers()] == [0, 5]
    # the second and third batches alone
    part = whole.slice(heads[1].position, heads[2].end)
    assert [(b.base_offset, b.last_offset) for b in read_batches(part.to_bytes())] == [(1, 5), (6, 7)]
    with pytest.raises(ValueError):
        whole.slice(heads[1].position, whole.position + whole.length + 1)


def test_max_offset_is_respected(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 600})
    for i in range(30):
        log.append(v2_batch(2, value=b"h" * 40, tag=str(i)))
    assert len(log.segments) > 3
    for hw in (0, 2, 10, 24, 40, 60):
        log.advance_high_watermark(hw)
        got: list[int] = []
        offset = 0
        while True:
            batches = list(read_batches(log.read(offset, 1 << 20, max_offset=hw).to_bytes()))
            if not batches:
                break
            got += record_offsets(batches)
            offset = batches[-1].last_offset + 1
        assert got == list(range(hw))
    assert log.read(10, 1 << 20, max_offset=10).size == 0


def test_max_offset_inside_a_segment_never_returns_later_segments(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(v2_batch(10))
    log.roll()
    log.append(v2_batch(10))
    # a high watermark inside the first batch: nothing is visible from offset 5
    result = log.read(5, 1 << 20, max_offset=8)
    assert result.size == 0, [(b.base_offset, b.last_offset) for b in read_batches(result.to_bytes())]


def test_offsets_outside_the_log_are_out_of_range(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 500})
    for i in range(20):
        log.append(v2_batch(3, value=b"o" * 50, tag=str(i)))
    log.maybe_increment_log_start_offset(13)
    log.delete_old_segments()
    assert log.log_start_offset == 13
    with pytest.raises(OffsetOutOfRangeError):
        log.read(12, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(61, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    end = log.read(60, 1000)
    assert end.size == 0 and end.to_bytes() == b""
    # the start offset may be inside a batch: that batch is returned
    first = next(read_batches(log.read(13, 1000).to_bytes()))
    assert first.base_offset == 12 and first.last_offset == 14


def test_reads_across_segment_boundaries(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 700})
    expected = []
    for i in range(40):
        info = log.append(v2_batch(1 + i % 3, value=b"q" * 60, tag=str(i)))
        expected += list(range(info.first_offset, info.last_offset + 1))
    assert len(log.segments) >= 5
    for seg in log.segments:
        # a read at a segment's base offset starts with that segment's first batch
        batches = list(read_batches(log.read(seg.base_offset, 1 << 20).to_bytes()))
        assert batches[0].base_offset == seg.base_offset
        # one region never spans two segments
        assert batches[-1].last_offset < seg.next_offset
    assert record_offsets(read_all(log, max_bytes=150)) == expected


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.bytes": 800, "index.interval.bytes": 50})
    # batch i holds records with timestamps TS0 + 100*i + {0, 10, 20}
    for i in range(40):
        log.append(v2_batch(3, ts=TS0 + 100 * i, ts_step=10, value=b"t" * 30, tag=str(i)))
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(TS0 - 5) == (0, TS0)
    assert log.offset_for_timestamp(TS0) == (0, TS0)
    # inside a batch: the first record whose timestamp is >= the target (Kafka's ListOffsets)
    assert log.offset_for_timestamp(TS0 + 100 * 17 + 5) == (17 * 3 + 1, TS0 + 100 * 17 + 10)
    assert log.offset_for_timestamp(TS0 + 100 * 17 + 20) == (17 * 3 + 2, TS0 + 100 * 17 + 20)
    assert log.offset_for_timestamp(TS0 + 100 * 17 + 21) == (18 * 3, TS0 + 100 * 18)
    assert log.offset_for_timestamp(TS0 + 100 * 39 + 21) is None
    assert log.max_timestamp_and_offset() == (TS0 + 100 * 39 + 20, 119)


def test_offset_for_timestamp_with_timestamps_out_of_order(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"index.interval.bytes": 1})
    stamps = [50, 10, 70, 30, 90, 20, 60]
    for s in stamps:
        log.append(v2_batch(1, ts=TS0 + s))
    for target in range(0, 100, 5):
        found = log.offset_for_timestamp(TS0 + target)
        expected = next(((o, TS0 + s) for o, s in enumerate(stamps) if s >= target), None)
        assert found == expected, target
    assert log.max_timestamp_and_offset() == (TS0 + 90, 4)


def test_offsets_before_is_the_seeds_get_offsets_before(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"segment.bytes": 400})
    for i in range(12):
        log.append(v2_batch(2, ts=TS0 + 1000 * i, value=b"w" * 60, tag=str(i)))
    bases = [s.base_offset for s in log.segments]
    largest = [s.max_timestamp for s in log.segments]
    assert len(bases) >= 3
    clock.advance(100_000)
    # latest: the log end offset first, then segment bases, newest first
    assert log.offsets_before(-1, 100) == [24, *reversed(bases)]
    assert log.offsets_before(-1, 1) == [24]
    assert log.offsets_before(-2, 100) == [0]
    # a time: bases of segments last written at or before it
    t = largest[1]
    assert log.offsets_before(t, 100) == [bases[1], bases[0]]
    assert log.offsets_before(TS0 - 1, 100) == []


def test_log_append_time_rewrites_timestamps_and_crc(tmp_path: Path) -> None:
    clock = FakeClock(TS0 + 5_000)
    log = _log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    info = log.append(v2_batch(3, ts=TS0, ts_step=1))
    assert info.log_append_time == TS0 + 5_000
    clock.advance(10)
    log.append(legacy_batch(1, 2, ts=TS0))
    log.append(legacy_batch(1, 2, ts=TS0, compression=Compression.GZIP))
    batches = read_all(log)  # every CRC still validates
    assert [b.timestamp_type for b in batches] == [TimestampType.LOG_APPEND_TIME] * 4
    assert batches[0].max_timestamp == TS0 + 5_000
    stamps = [r[1] for r in records(batches)]
    assert stamps == [TS0 + 5_000] * 3 + [TS0 + 5_010] * 4
    assert log.max_timestamp_and_offset()[0] == TS0 + 5_010


def test_timestamps_too_far_from_the_broker_clock_are_rejected(tmp_path: Path) -> None:
    log = _log(tmp_path, FakeClock(TS0), **{"message.timestamp.difference.max.ms": 1000})
    log.append(v2_batch(1, ts=TS0 - 1000))
    with pytest.raises(InvalidTimestampError):
        log.append(v2_batch(1, ts=TS0 - 1001))
    with pytest.raises(InvalidTimestampError):
        log.append(v2_batch(1, ts=TS0 + 1001))
    assert log.log_end_offset == 1


def test_max_message_bytes_counts_the_whole_batch(tmp_path: Path) -> None:
    fits = v2_batch(1, value=b"m" * 1000)
    too_big = v2_batch(1, value=b"m" * 1001)
    log = _log(tmp_path, **{"max.message.bytes": len(fits)})
    log.append(fits)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(too_big)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(v2_batch(1, value=b"m" * 2000))
    assert log.log_end_offset == 1
    # a batch larger than a segment never fits
    small_segments = _log(tmp_path / "b", **{"segment.bytes": 500})
    with pytest.raises(RecordBatchTooLargeError):
        small_segments.append(v2_batch(1, value=b"x" * 600))


@pytest.mark.parametrize("where", [30, 61, -1])
def test_crc_corrupted_input_is_rejected_and_nothing_written(tmp_path: Path, where: int) -> None:
    log = _log(tmp_path)
    log.append(v2_batch(2))
    good = bytearray(v2_batch(2, value=b"payload" * 5))
    good[where] ^= 0x40
    size_before = log.active.size
    with pytest.raises(CorruptRecordError):
        log.append(bytes(good))
    with pytest.raises(CorruptRecordError):
        log.append(legacy_batch(1, 2)[:-3])  # truncated input
    bad_legacy = bytearray(legacy_batch(1, 1, compression=Compression.GZIP))
    bad_legacy[-2] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad_legacy))
    with pytest.raises(CorruptRecordError):
        log.append(b"")
    assert log.log_end_offset == 2
    assert log.active.size == size_before
    assert record_offsets(read_all(log)) == [0, 1]


def test_compacted_topics_reject_null_keys(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"cleanup.policy": "compact"})
    log.append(v2_batch(3))
    with pytest.raises(InvalidRecordError):
        log.append(v2_batch(2, key=None))
    with pytest.raises(InvalidRecordError):
        log.append(v2_batch(1) + v2_batch(1, key=None, compression=Compression.GZIP))
    assert log.log_end_offset == 3
    # null keys are fine when the topic also deletes
    plain = _log(tmp_path / "p", **{"cleanup.policy": "delete"})
    plain.append(v2_batch(2, key=None))


def test_manager_entry_points(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "a", tmp_path / "b"], {"segment.bytes": 1000})
    logs = [manager.get_or_create("m", p, {"retention.ms": 1000}) for p in range(4)]
    assert manager.get_or_create("m", 2) is logs[2]
    assert {log.directory.parent.name for log in logs} == {"a", "b"}
    assert logs[0].config.retention_ms == 1000 and logs[0].config.segment_bytes == 1000
    for log in logs:
        info = log.append(v2_batch(2))
        assert (info.first_offset, info.last_offset) == (0, 1)
        log.flush()
    manager.shutdown()
    for log in logs:
        log.close()  # closing twice is harmless
    again = LogManager([tmp_path / "a", tmp_path / "b"], {"segment.bytes": 1000})
    assert sorted((log.topic, log.partition, log.log_end_offset) for log in again.logs()) == [
        ("m", p, 2) for p in range(4)
    ]
    again.shutdown()


def test_a_read_in_the_middle_of_an_append_sees_nothing_past_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader thread scheduled while an append updates the segment (here: while it adds the
    index entry) must not get the new batch: it is past the log end (and the high watermark)."""
    log = _log(tmp_path, **{"index.interval.bytes": 1})
    log.append(v2_batch(2))
    log.append(v2_batch(2))
    seen = []
    index = log.active.index
    append_entry = index.append

    def reader_runs_here(offset: int, position: int) -> None:
        append_entry(offset, position)
        end = log.log_end_offset
        data = log.read(0, 1 << 20).to_bytes()
        seen.append((end, [b.last_offset for b in read_batches(data)]))

    monkeypatch.setattr(index, "append", reader_runs_here)
    log.append(v2_batch(2))
    assert seen == [(4, [1, 3])]
    assert [b.last_offset for b in read_all(log)] == [1, 3, 5]
