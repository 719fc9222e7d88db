"""FrameReader gives back the frames of a stream whatever the chunks it arrives in."""

from __future__ import annotations

import random
import struct

import pytest

from odradek.protocol.connection import FrameReader
from odradek.protocol.errors import FrameTooLarge, InvalidFrame


@pytest.mark.parametrize("seed", range(20))
def test_frames_survive_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    payloads = [rng.randbytes(rng.choice([0, 1, 5, 100, 3000])) for _ in range(rng.randint(1, 40))]
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    reader = FrameReader()
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        n = rng.choice([1, 3, 4, 7, 50, 1000, 10_000])
        chunk = stream[pos : pos + n]
        reader.feed(memoryview(bytearray(chunk)) if rng.random() < 0.5 else chunk)
        pos += len(chunk)
        assert reader.buffered == pos - sum(4 + len(p) for p in got)
        while rng.random() < 0.8:
            frame = reader.next_frame()
            if frame is None:
                break
            assert type(frame) is bytearray
            got.append(bytes(frame))
    while (frame := reader.next_frame()) is not None:
        got.append(bytes(frame))
    assert got == payloads
    assert reader.buffered == 0


def test_bad_sizes_are_refused_when_their_frame_is_reached() -> None:
    good = struct.pack(">i", 3) + b"abc"
    for bad, error in ((struct.pack(">i", -1), InvalidFrame), (struct.pack(">i", 101), FrameTooLarge)):
        reader = FrameReader(max_frame_size=100)
        reader.feed(good + bad + b"x" * 10)
        assert reader.next_frame() == b"abc"
        with pytest.raises(error):
            reader.next_frame()
