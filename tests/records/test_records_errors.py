"""Bad input raises typed errors, never anything else, and never hangs."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

import odradek.records as odr
from odradek.records import legacy, v2
from odradek.records._crc import crc32, crc32c

from .records_helpers import PROFILE, TS0, odr_build_legacy, odr_build_v2

V2_RECORDS = [
    (TS0 + i, b"key-%d" % i, b"value-%d" % i * 5, [("h", b"v")] if i % 3 == 0 else []) for i in range(30)
]


def v2_batch(codec: int = 0, **kwargs: object) -> bytes:
    return odr_build_v2(V2_RECORDS, compression=codec, **kwargs)  # type: ignore[arg-type]


def legacy_set(magic: int, codec: int = 0) -> bytes:
    return odr_build_legacy(magic, V2_RECORDS, compression=codec)


def consume(data: bytes | bytearray, **kwargs: object) -> None:
    """Read everything read_batches offers: headers, records and derived fields."""
    for batch in odr.read_batches(data, **kwargs):  # type: ignore[arg-type]
        _ = (
            batch.base_offset,
            batch.last_offset,
            batch.record_count,
            batch.compression,
            batch.timestamp_type,
        )
        for record in batch.records:
            _ = (record.offset, record.timestamp, record.key, record.value, record.headers)


def consume_headers(data: bytes | bytearray) -> None:
    for header in odr.iter_batch_headers(data):
        _ = (header.compression, header.timestamp_type, header.is_control, header.last_offset_delta)
        odr.validate(data, header)


def fix_v2_crc(buf: bytearray, pos: int = 0) -> bytearray:
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 17, crc32c(buf[pos + 21 : pos + 12 + length]))
    return buf


def fix_legacy_crc(buf: bytearray, pos: int = 0) -> bytearray:
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 12, crc32(buf[pos + 16 : pos + 12 + length]))
    return buf


# --- truncation -------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: v2_batch(), lambda: legacy_set(1), lambda: legacy_set(0, 1)])
def test_trailing_partial_entry_is_ignored_unless_strict(make) -> None:  # type: ignore[no-untyped-def]
    data = make()
    whole = [tuple(r) for b in odr.read_batches(data) for r in b.records]
    first_size = odr.read_header(data).size  # type: ignore[union-attr]
    for cut in (1, 5, 16, 17, 30, first_size - 1):
        if cut >= len(data):
            continue
        truncated = data + data[:cut]
        assert [tuple(r) for b in odr.read_batches(truncated) for r in b.records] == whole
        assert len(list(odr.iter_batch_headers(truncated))) == len(list(odr.iter_batch_headers(data)))
        with pytest.raises(odr.TruncatedBatchError):
            consume(truncated, strict=True)
        with pytest.raises(odr.TruncatedBatchError):
            list(odr.iter_batch_headers(truncated, strict=True))


def test_read_header_returns_none_for_incomplete() -> None:
    data = v2_batch()
    assert odr.read_header(data[:10]) is None
    assert odr.read_header(data[:-1]) is None
    assert odr.read_header(data, len(data)) is None
    assert odr.read_header(data) is not None


# --- wrong sizes, magic, codec ----------------------------------------------------


@pytest.mark.parametrize("size", [-1, 0, 13, -(2**31)])
def test_entry_size_below_minimum(size: int) -> None:
    data = bytearray(v2_batch())
    struct.pack_into(">i", data, 8, size)
    with pytest.raises(odr.CorruptRecordError):
        consume(data)
    with pytest.raises(odr.CorruptRecordError):
        list(odr.iter_batch_headers(data))


def test_size_below_format_minimum() -> None:
    data = bytearray(v2_batch())
    struct.pack_into(">i", data, 8, 30)  # >= 14 but < 49 for magic 2
    with pytest.raises(odr.CorruptRecordError):
        list(odr.iter_batch_headers(data))


def test_max_batch_size() -> None:
    data = v2_batch()
    assert len(list(odr.iter_batch_headers(data, max_batch_size=len(data)))) == 1
    with pytest.raises(odr.CorruptRecordError):
        list(odr.iter_batch_headers(data, max_batch_size=len(data) - 1))


@pytest.mark.parametrize("magic", [3, 4, 0x7F, 0x80, 0xFF])
def test_unknown_magic(magic: int) -> None:
    data = bytearray(v2_batch())
    data[16] = magic
    with pytest.raises(odr.UnsupportedMagicError):
        consume(data)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_v2(codec: int) -> None:
    data = bytearray(v2_batch())
    (attributes,) = struct.unpack_from(">h", data, 21)
    struct.pack_into(">h", data, 21, (attributes & ~7) | codec)
    fix_v2_crc(data)
    [batch] = list(odr.read_batches(data))
    with pytest.raises(odr.UnsupportedCodecError):
        _ = batch.records


@pytest.mark.parametrize(("magic", "codec"), [(0, 4), (1, 4), (1, 6)])
def test_unknown_codec_legacy(magic: int, codec: int) -> None:
    data = bytearray(legacy_set(magic, 1))
    data[17] = (data[17] & ~7) | codec
    fix_legacy_crc(data)
    with pytest.raises(odr.UnsupportedCodecError):
        consume(data)


def test_record_count_mismatch() -> None:
    for count in (0, 29, 31, 1000, 2**31 - 1):
        data = bytearray(v2_batch())
        struct.pack_into(">i", data, 57, count)
        fix_v2_crc(data)
        with pytest.raises(odr.CorruptRecordError):
            consume(data)
    data = bytearray(v2_batch())
    struct.pack_into(">i", data, 57, -1)
    fix_v2_crc(data)
    with pytest.raises(odr.CorruptRecordError):
        consume(data)


def test_batch_length_covering_less_than_the_records() -> None:
    data = bytearray(v2_batch())
    (length,) = struct.unpack_from(">i", data, 8)
    struct.pack_into(">i", data, 8, length - 10)
    del data[-10:]
    fix_v2_crc(data)
    with pytest.raises(odr.CorruptRecordError):
        consume(data)


# --- invalid varints and record fields ---------------------------------------------


def single_record_batch(record_body: bytes, count: int = 1) -> bytes:
    """A v2 batch around hand-made record bytes, with a correct CRC."""
    header = v2.HEADER.pack(0, 49 + len(record_body), -1, 2, 0, 0, count - 1, TS0, TS0, -1, -1, -1, count)
    buf = bytearray(header + record_body)
    return bytes(fix_v2_crc(buf))


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff\xff\xff",  # record length varint longer than 5 bytes
        b"\x0e\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # varlong longer than 10 bytes
        b"\x0c\x00\x00\x00\x80",  # varint cut by the end of data
        b"\x10\x00\x00\x00\x02ab\x02",  # key shorter than its length says / truncated
        b"\x0a\x00\x00\x00\x01\x01\x00",  # length says 5, record has 6 bytes
        b"\x0e\x00\x00\x00\x01\x01\x01",  # header count -1
        b"\x10\x00\x00\x00\x01\x01\x02\x01\x00",  # header key length -1
        b"\x14\x00\x00\x00\x01\x01\x02\x04\xff\xfe\x01",  # header key not UTF-8
        b"\x0c\x00\x00\x00\x01\x01\x00\x00",  # a byte left after the last record
        b"",  # no record at all
    ],
)
def test_corrupt_records(body: bytes) -> None:
    data = single_record_batch(body)
    [batch] = list(odr.read_batches(data))
    with pytest.raises(odr.CorruptRecordError):
        _ = batch.records


def test_valid_hand_made_record() -> None:
    # length 6: attributes, tsDelta 0, offsetDelta 0, key null, value null, 0 headers
    [batch] = list(odr.read_batches(single_record_batch(b"\x0c\x00\x00\x00\x01\x01\x00")))
    assert [tuple(r) for r in batch.records] == [(0, TS0, None, None, [])]


def test_fast_path_rejects_corrupt_record_in_uniform_run() -> None:
    """A record that differs from its neighbours only in a varint's width or a
    length must not slip through the fixed-layout path."""
    records = [(TS0 + 100 + i, b"key-%03d" % i, b"v" * 100, []) for i in range(200)]
    good = odr_build_v2(records)
    assert [r.value for b in odr.read_batches(good) for r in b.records] == [b"v" * 100] * 200
    # find record 150 and change its key-length varint to claim one more byte
    records_bytes = bytearray(good[61:])
    pos = 0
    for _ in range(150):
        length, p = odr.decode_varint(records_bytes, pos)
        pos = p + length
    start = pos
    _, p = odr.decode_varint(records_bytes, pos)
    p += 1  # attributes
    _, p = odr.decode_varlong(records_bytes, p)
    _, p = odr.decode_varint(records_bytes, p)
    assert records_bytes[p] == 14  # key length 7
    for new_key_len in (16, 12, 0x81):
        mutated = bytearray(records_bytes)
        mutated[p] = new_key_len
        data = single_record_batch(bytes(mutated), count=200)
        [batch] = list(odr.read_batches(data))
        with pytest.raises(odr.CorruptRecordError):
            _ = batch.records
    assert start > 0


# --- checksums ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [lambda: v2_batch(), lambda: v2_batch(1), lambda: legacy_set(0), lambda: legacy_set(1, 2)],
)
def test_crc_mismatch(make) -> None:  # type: ignore[no-untyped-def]
    data = bytearray(make())
    data[-1] ^= 0x01
    with pytest.raises(odr.CrcMismatchError) as info:
        consume(data)
    assert info.value.stored != info.value.computed
    with pytest.raises(odr.CrcMismatchError):
        list(odr.iter_batch_headers(data, verify=True))
    header = list(odr.iter_batch_headers(data))[-1]
    with pytest.raises(odr.CrcMismatchError):
        odr.validate(data, header)
    # verify_crc=False reads whatever is there (the flipped byte is in a value or
    # in compressed data, which then fails with a typed error)
    with contextlib.suppress(odr.RecordsError):
        consume(data, verify_crc=False)


def test_crc_excludes_base_offset_and_leader_epoch() -> None:
    data = bytearray(v2_batch())
    struct.pack_into(">q", data, 0, 123456789)
    struct.pack_into(">i", data, 12, 77)
    consume(data)


def test_inner_message_crc_is_checked() -> None:
    inner = bytearray(legacy.encode_message(0, 1, 0, TS0, b"k", b"value"))
    inner[-1] ^= 0xFF
    payload = odr.compress(odr.Compression.GZIP, bytes(inner), magic=1)
    wrapper = legacy.encode_message(0, 1, 1, TS0, None, payload)
    with pytest.raises(odr.CrcMismatchError):
        consume(wrapper)
    consume(wrapper, verify_crc=False)


@pytest.mark.parametrize(
    "inner",
    [
        b"",  # wrapper with no inner messages
        legacy.encode_message(0, 0, 0, -1, None, b"v"),  # magic differs from wrapper
        legacy.encode_message(0, 1, 1, TS0, None, b"v"),  # compressed again
        legacy.encode_message(0, 1, 0, TS0, None, b"value")[:-2],  # truncated inner message
    ],
)
def test_bad_inner_message_sets(inner: bytes) -> None:
    payload = odr.compress(odr.Compression.GZIP, inner, magic=1)
    wrapper = legacy.encode_message(5, 1, 1, TS0, None, payload)
    with pytest.raises(odr.CorruptRecordError):
        consume(wrapper, verify_crc=False)


def test_wrapper_with_null_value() -> None:
    with pytest.raises(odr.CorruptRecordError):
        consume(legacy.encode_message(5, 1, 1, TS0, None, None))


@pytest.mark.parametrize("key_len", [-2, 1000])
def test_legacy_bad_key_length(key_len: int) -> None:
    data = bytearray(legacy.encode_message(0, 1, 0, TS0, b"key", b"value"))
    struct.pack_into(">i", data, 26, key_len)
    fix_legacy_crc(data)
    with pytest.raises(odr.CorruptRecordError):
        consume(data)


# --- fuzzing -----------------------------------------------------------------------

SEEDS = [
    v2_batch(),
    v2_batch(odr.Compression.GZIP),
    v2_batch(odr.Compression.SNAPPY),
    v2_batch(odr.Compression.LZ4),
    v2_batch(odr.Compression.ZSTD),
    legacy_set(0),
    legacy_set(1),
    legacy_set(0, odr.Compression.LZ4),
    legacy_set(1, odr.Compression.SNAPPY),
    odr_build_v2([(TS0 + i, b"k" * 7, b"v" * 100, []) for i in range(100)]),
]


def _only_records_errors(data: bytes) -> None:
    for kwargs in ({}, {"verify_crc": False}, {"strict": True}):
        with contextlib.suppress(odr.RecordsError):
            consume(data, max_decompressed_size=1 << 20, **kwargs)
    with contextlib.suppress(odr.RecordsError):
        consume_headers(data)
    with contextlib.suppress(odr.RecordsError):
        odr.assign_offsets(bytearray(data), 10, max_decompressed_size=1 << 20)


@given(st.binary(max_size=2000))
@PROFILE
def test_random_bytes_raise_only_records_errors(data: bytes) -> None:
    _only_records_errors(data)


@given(
    st.sampled_from(SEEDS),
    st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=6),
    st.booleans(),
    st.integers(0, 1 << 20),
)
@PROFILE
def test_mutated_batches_raise_only_records_errors(
    seed: bytes, flips: list[tuple[int, int]], fix_crc: bool, cut: int
) -> None:
    data = bytearray(seed)
    for where, byte in flips:
        data[where % len(data)] = byte
    if fix_crc and data[16] == 2:
        with contextlib.suppress(struct.error, ValueError):
            fix_v2_crc(data)
    _only_records_errors(bytes(data))
    _only_records_errors(bytes(data[: cut % (len(data) + 1)]))


@given(st.sampled_from(SEEDS), st.integers(1, 60), st.binary(min_size=1, max_size=40))
@PROFILE
def test_mutated_record_region_with_valid_crc(seed: bytes, offset: int, junk: bytes) -> None:
    """Corrupt the records of an uncompressed v2 batch but keep its CRC valid, so
    the record decoder itself sees the damage."""
    if seed[16] != 2 or seed[22] & 7:
        return
    data = bytearray(seed)
    start = 61 + (offset * 37) % (len(data) - 61)
    data[start : start + len(junk)] = junk
    data = data[: len(seed)]
    data += b"\x00" * (len(seed) - len(data))
    fix_v2_crc(data)
    _only_records_errors(bytes(data))
