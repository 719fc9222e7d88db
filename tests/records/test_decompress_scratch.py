"""``decompress_scratch`` (the broker's validation decompresses lz4 and zstd into reused buffers)
gives what ``decompress`` gives, raises what it raises, and stays within the same bound."""

from __future__ import annotations

import struct

import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from odradek.records import Compression, DecompressionLimitExceeded, RecordsError, compress, decompress
from odradek.records.compression import SCRATCH_MAX, decompress_scratch, give_scratch, take_scratch

from .records_helpers import PROFILE

frames = st.one_of(
    st.binary(max_size=5000).map(lambda b: compress(Compression.LZ4, b * 3)),
    st.tuples(st.binary(max_size=3000), st.booleans(), st.booleans(), st.sampled_from([0, 4, 5])).map(
        lambda t: lz4.frame.compress(
            t[0] * 7, block_linked=t[1], content_checksum=t[2], block_size=t[3], store_size=False
        )
    ),
)

zstd_frames = st.one_of(
    st.binary(max_size=5000).map(lambda b: compress(Compression.ZSTD, b * 3)),
    st.lists(st.binary(max_size=2000), min_size=1, max_size=3).map(  # frames one after another
        lambda parts: b"".join(zstandard.ZstdCompressor().compress(p * 5) for p in parts)
    ),
    st.tuples(st.binary(max_size=3000), st.booleans(), st.integers(1, 19)).map(  # no content size
        lambda t: zstandard.ZstdCompressor(level=t[2], write_content_size=False, write_checksum=t[1]).compress(t[0] * 7)
    ),
)


def _outcome(f: object) -> object:
    try:
        return bytes(f())  # type: ignore[operator]
    except RecordsError as exc:
        return type(exc)


@given(frames, st.data())
@PROFILE
def test_lz4_alike(frame: bytes, data: st.DataObject) -> None:
    damaged = bytearray(frame)
    if data.draw(st.booleans()) and damaged:
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] ^= data.draw(st.integers(1, 255))
    tail = data.draw(st.sampled_from([b"", b"\x00", b"junk"]))
    payload = bytes(damaged) + tail
    limit = data.draw(st.sampled_from([1 << 26, 100, 20_000]))
    scratch = take_scratch()
    try:
        fast = _outcome(lambda: decompress_scratch(Compression.LZ4, payload, scratch, max_size=limit))
    finally:
        give_scratch(scratch)
    assert fast == _outcome(lambda: decompress(Compression.LZ4, payload, max_size=limit))


@given(zstd_frames, st.data())
@PROFILE
def test_zstd_alike(frame: bytes, data: st.DataObject) -> None:
    damaged = bytearray(frame)
    if data.draw(st.booleans()) and damaged:
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] ^= data.draw(st.integers(1, 255))
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"skip"  # a frame decoders pass over
    tail = data.draw(st.sampled_from([b"", b"\x00", b"junk", b"\x00" * 8, skippable]))
    payload = bytes(damaged) + tail
    limit = data.draw(st.sampled_from([1 << 26, 100, 20_000]))
    scratch = take_scratch()
    try:
        fast = _outcome(lambda: decompress_scratch(Compression.ZSTD, payload, scratch, max_size=limit))
    finally:
        give_scratch(scratch)
    assert fast == _outcome(lambda: decompress(Compression.ZSTD, payload, max_size=limit))


def test_a_larger_result_grows_the_buffer_for_the_next_time() -> None:
    big = compress(Compression.LZ4, bytes(range(256)) * 10_000)  # 2.5 MB
    scratch = bytearray(1000)
    assert bytes(decompress_scratch(Compression.LZ4, big, scratch)) == bytes(range(256)) * 10_000
    assert len(scratch) == 2_560_000
    out = decompress_scratch(Compression.LZ4, big, scratch)
    assert isinstance(out, memoryview) and out.obj is scratch  # decompressed in place this time
    with pytest.raises(DecompressionLimitExceeded):
        decompress_scratch(Compression.LZ4, big, scratch, max_size=1_000_000)
    assert SCRATCH_MAX >= 2_560_000
