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


#: what may follow a frame: nothing, zeros, junk, or a frame zstd decoders pass over
_TAILS = [b"", b"\x00", b"junk", b"\x00" * 8, struct.pack("<II", 0x184D2A50, 4) + b"skip"]


def _check_alike(codec: Compression, frame: bytes, data: st.DataObject) -> None:
    """The frame, perhaps damaged, with a tail, under one of three limits: the scratch path gives
    what :func:`decompress` gives, or raises what it raises."""
    damaged = bytearray(frame)
    if data.draw(st.booleans()) and damaged:
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] ^= data.draw(st.integers(1, 255))
    payload = bytes(damaged) + data.draw(st.sampled_from(_TAILS))
    limit = data.draw(st.sampled_from([1 << 26, 100, 20_000]))
    scratch = take_scratch()
    try:
        fast = _outcome(lambda: decompress_scratch(codec, payload, scratch, max_size=limit))
    finally:
        give_scratch(scratch)
    assert fast == _outcome(lambda: decompress(codec, payload, max_size=limit))


@given(frames, st.data())
@PROFILE
def test_lz4_alike(frame: bytes, data: st.DataObject) -> None:
    _check_alike(Compression.LZ4, frame, data)


@given(zstd_frames, st.data())
@PROFILE
def test_zstd_alike(frame: bytes, data: st.DataObject) -> None:
    _check_alike(Compression.ZSTD, frame, data)


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
