"""Codecs: round trips, xerial snappy, the LZ4 magic-0 checksum quirk, limits."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st
from kafka import codec as kcodec

import odradek.records as odr
from odradek.records import compression as c
from odradek.records._xxh32 import xxh32

from .records_helpers import PROFILE

ALL = list(odr.Compression)
PAYLOADS = [b"", b"x", b"hello world " * 1000, bytes(range(256)) * 700]


@pytest.mark.parametrize("codec", ALL)
@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("payload", PAYLOADS, ids=["empty", "one", "text", "binary"])
def test_round_trip(codec: int, magic: int, payload: bytes) -> None:
    if codec == odr.Compression.ZSTD and magic < 2:
        with pytest.raises(odr.UnsupportedCodecError):
            odr.compress(codec, payload, magic=magic)
        with pytest.raises(odr.UnsupportedCodecError):
            odr.decompress(codec, b"xx", magic=magic)
        return
    packed = odr.compress(codec, payload, magic=magic)
    assert odr.decompress(codec, packed, magic=magic) == payload


@given(st.binary(max_size=5000), st.sampled_from(ALL))
@PROFILE
def test_round_trip_property(payload: bytes, codec: int) -> None:
    assert odr.decompress(codec, odr.compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids(codec: int) -> None:
    with pytest.raises(odr.UnsupportedCodecError):
        odr.compress(codec, b"x")
    with pytest.raises(odr.UnsupportedCodecError):
        odr.decompress(codec, b"x")


# --- gzip -----------------------------------------------------------------------


def test_gzip_reads_stdlib_and_concatenated_members() -> None:
    assert odr.decompress(odr.Compression.GZIP, gzip.compress(b"abc")) == b"abc"
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert odr.decompress(odr.Compression.GZIP, two) == b"abcdef"
    assert gzip.decompress(odr.compress(odr.Compression.GZIP, b"xyz" * 100)) == b"xyz" * 100


def test_gzip_kafka_python_interop() -> None:
    data = b"some data " * 500
    assert odr.decompress(odr.Compression.GZIP, kcodec.gzip_encode(data)) == data
    assert kcodec.gzip_decode(odr.compress(odr.Compression.GZIP, data)) == data


# --- snappy ---------------------------------------------------------------------


def test_xerial_layout() -> None:
    data = bytes(range(256)) * 300  # > 32 KiB: several blocks
    framed = c.snappy_compress_xerial(data)
    assert framed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", framed[8:16]) == (1, 1)
    pos, blocks, out = 16, 0, b""
    while pos < len(framed):
        (size,) = struct.unpack_from(">i", framed, pos)
        out += bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + size]))
        pos += 4 + size
        blocks += 1
    assert out == data
    assert blocks == -(-len(data) // (32 * 1024))


def test_snappy_reads_raw_and_xerial_from_kafka_python() -> None:
    data = b"snappy data " * 5000
    assert c.snappy_decompress(kcodec.snappy_encode(data)) == data  # xerial
    assert c.snappy_decompress(kcodec.snappy_encode(data, xerial_compatible=False)) == data  # raw
    assert c.snappy_decompress(bytes(cramjam.snappy.compress_raw(data))) == data
    assert kcodec.snappy_decode(c.snappy_compress_xerial(data)) == data


def test_xerial_little_endian_version_fields_are_accepted() -> None:
    framed = bytearray(c.snappy_compress_xerial(b"abc" * 10))
    framed[8:16] = struct.pack("<ii", 1, 1)
    assert c.snappy_decompress(bytes(framed)) == b"abc" * 10


def test_xerial_with_no_blocks_is_empty() -> None:
    assert c.snappy_decompress(c.XERIAL_HEADER + struct.pack(">ii", 1, 1)) == b""


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00\x00",
        struct.pack(">i", -5),
        struct.pack(">i", 1000) + b"abc",
        struct.pack(">i", 3) + b"\xff\xff\xff",
    ],
)
def test_xerial_corrupt_blocks(tail: bytes) -> None:
    with pytest.raises(odr.DecompressionError):
        c.snappy_decompress(c.XERIAL_HEADER + struct.pack(">ii", 1, 1) + tail)


def test_raw_snappy_garbage() -> None:
    with pytest.raises(odr.DecompressionError):
        c.snappy_decompress(b"\x05abc")
    with pytest.raises(odr.DecompressionError):
        c.snappy_decompress(b"\xff\xff\xff\xff\xff\xff")


# --- lz4 ------------------------------------------------------------------------


def _hc_pos(frame: bytes) -> int:
    return 6 + (8 if frame[4] & 0x08 else 0)


def test_lz4_frame_matches_java_settings() -> None:
    frame = c.lz4_compress(b"abc" * 1000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] == 0x60  # version 1, independent blocks, no size, no checksums
    assert frame[5] == 0x40  # 64 KiB blocks
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF
    assert lz4.frame.decompress(frame) == b"abc" * 1000


def test_lz4_magic0_quirk_round_trip() -> None:
    data = b"old kafka " * 700
    legacy = odr.compress(odr.Compression.LZ4, data, magic=0)
    assert legacy[6] == (xxh32(legacy[0:6]) >> 8) & 0xFF  # checksum over magic + descriptor
    assert legacy[6] != (xxh32(legacy[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(legacy)  # a standard reader rejects it
    assert odr.decompress(odr.Compression.LZ4, legacy, magic=0) == data
    # magic 0 also reads the standard form; magic 1/2 insist on it
    standard = odr.compress(odr.Compression.LZ4, data, magic=1)
    assert odr.decompress(odr.Compression.LZ4, standard, magic=0) == data
    assert odr.decompress(odr.Compression.LZ4, standard, magic=2) == data
    with pytest.raises(odr.DecompressionError):
        odr.decompress(odr.Compression.LZ4, legacy, magic=1)


def test_lz4_quirk_interop_with_kafka_python() -> None:
    data = b"interop " * 900
    assert kcodec.lz4_decode_old_kafka(odr.compress(odr.Compression.LZ4, data, magic=0)) == data
    theirs = kcodec.lz4_encode_old_kafka(data)
    assert odr.decompress(odr.Compression.LZ4, theirs, magic=0) == data
    # kafka-python's modern frames store the content size; that is read too
    modern = kcodec.lz4_encode(data)
    assert modern[4] & 0x08
    assert odr.decompress(odr.Compression.LZ4, modern, magic=2) == data
    assert kcodec.lz4_decode(odr.compress(odr.Compression.LZ4, data)) == data


def test_lz4_truncated_and_garbage() -> None:
    frame = c.lz4_compress(b"0123456789" * 1000)
    for bad in (frame[:5], frame[:-3], b"\x04\x22\x4d\x18\x60\x40\x00\x05\x00\x00\x00abc", b"not lz4 at all"):
        with pytest.raises(odr.DecompressionError):
            odr.decompress(odr.Compression.LZ4, bad)


# --- zstd -----------------------------------------------------------------------


def test_zstd_concatenated_frames_and_kafka_python() -> None:
    z = zstandard.ZstdCompressor()
    two = z.compress(b"abc" * 100) + z.compress(b"def" * 100)
    assert odr.decompress(odr.Compression.ZSTD, two) == b"abc" * 100 + b"def" * 100
    assert kcodec.zstd_decode(odr.compress(odr.Compression.ZSTD, b"q" * 999)) == b"q" * 999
    assert odr.decompress(odr.Compression.ZSTD, kcodec.zstd_encode(b"r" * 999)) == b"r" * 999


def test_zstd_truncated_and_garbage() -> None:
    frame = odr.compress(odr.Compression.ZSTD, bytes(range(256)) * 100)
    for bad in (frame[:-4], frame[:6], b"", b"garbage!", frame + b"junk"):
        with pytest.raises(odr.DecompressionError):
            odr.decompress(odr.Compression.ZSTD, bad)


def test_gzip_truncated_and_garbage() -> None:
    blob = odr.compress(odr.Compression.GZIP, bytes(range(256)) * 100)
    for bad in (blob[:-4], blob[:10], b"", b"\x1f\x8bgarbage"):
        with pytest.raises(odr.DecompressionError):
            odr.decompress(odr.Compression.GZIP, bad)


# --- decompression limits ---------------------------------------------------------

BOMB_SIZE = 8 * 1024 * 1024
LIMIT = 256 * 1024


def _bomb(codec: int) -> bytes:
    zeros = bytes(BOMB_SIZE)
    if codec == odr.Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(zeros))
    if codec == odr.Compression.LZ4:
        # A frame that declares its content size, and one that does not.
        return lz4.frame.compress(zeros, store_size=False)
    if codec == odr.Compression.GZIP:
        co = zlib.compressobj(9, zlib.DEFLATED, 31)
        return co.compress(zeros) + co.flush()
    return zstandard.ZstdCompressor(write_content_size=False).compress(zeros)


@pytest.mark.parametrize(
    "codec", [odr.Compression.GZIP, odr.Compression.SNAPPY, odr.Compression.LZ4, odr.Compression.ZSTD]
)
def test_small_bombs_hit_the_limit(codec: int) -> None:
    bomb = _bomb(codec)
    assert len(bomb) < BOMB_SIZE // (20 if codec == odr.Compression.SNAPPY else 100)
    with pytest.raises(odr.DecompressionLimitExceeded) as info:
        odr.decompress(codec, bomb, max_size=LIMIT)
    assert info.value.limit == LIMIT
    assert len(odr.decompress(codec, bomb, max_size=BOMB_SIZE)) == BOMB_SIZE


def test_limits_on_declared_sizes() -> None:
    # snappy: the declared length is refused before decompression
    with pytest.raises(odr.DecompressionLimitExceeded):
        c.snappy_decompress(b"\xff\xff\xff\xff\x0f" + b"\x00" * 10, 1000)
    framed = c.snappy_compress_xerial(bytes(100_000))
    with pytest.raises(odr.DecompressionLimitExceeded):
        c.snappy_decompress(framed, 50_000)
    # lz4: a declared content size above the limit is refused up front
    with pytest.raises(odr.DecompressionLimitExceeded):
        odr.decompress(
            odr.Compression.LZ4, lz4.frame.compress(bytes(100_000), store_size=True), max_size=1000
        )
    # zstd with content size in the header
    with pytest.raises(odr.DecompressionLimitExceeded):
        odr.decompress(
            odr.Compression.ZSTD, zstandard.ZstdCompressor().compress(bytes(100_000)), max_size=1000
        )
    # exactly at the limit is fine
    for codec in (odr.Compression.GZIP, odr.Compression.SNAPPY, odr.Compression.LZ4, odr.Compression.ZSTD):
        assert len(odr.decompress(codec, odr.compress(codec, bytes(5000)), max_size=5000)) == 5000


def test_limit_applies_to_batches() -> None:
    builder = odr.BatchBuilder(compression=odr.Compression.ZSTD)
    builder.append(1, None, bytes(200_000))
    data = builder.build()
    [batch] = list(odr.read_batches(data, max_decompressed_size=100_000))
    with pytest.raises(odr.DecompressionLimitExceeded):
        _ = batch.records
    legacy = odr.LegacyBatchBuilder(1, compression=odr.Compression.GZIP)
    legacy.append(1, None, bytes(200_000))
    [batch] = list(odr.read_batches(legacy.build(), max_decompressed_size=100_000))
    with pytest.raises(odr.DecompressionLimitExceeded):
        _ = batch.records


def test_xxh32_reference_vectors() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_xxh32_against_xxhash_package() -> None:
    import xxhash
    for n in range(0, 70):
        data = bytes((i * 37 + n) & 0xFF for i in range(n))
        assert xxh32(data) == xxhash.xxh32_intdigest(data)
        assert xxh32(data, 12345) == xxhash.xxh32_intdigest(data, 12345)


def test_the_codec_libraries_load_when_a_batch_first_needs_them() -> None:
    """A broker that never sees a compressed batch does not load cramjam, lz4 or zstandard (about
    4 MB and 5 ms of its start); the first batch of each codec loads what it needs, and works."""
    probe = (
        "import sys\n"
        "import odradek.broker.app, odradek.cli.serve\n"
        "from odradek.records.compression import compress, decompress, decompress_scratch, take_scratch\n"
        "libs = lambda: ','.join(m for m in ('cramjam', 'lz4', 'zstandard') if m in sys.modules) or '-'\n"
        "print(libs())\n"
        "data = bytes(range(256)) * 64\n"
        "for codec in (2, 3, 4):\n"
        "    assert decompress(codec, compress(codec, data)) == data, codec\n"
        "    assert bytes(decompress_scratch(codec, compress(codec, data), take_scratch())) == data, codec\n"
        "    print(libs())\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["-", "cramjam", "cramjam,lz4", "cramjam,lz4,zstandard"]
