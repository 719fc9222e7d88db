"""FrameReader gives back the frames of a stream whatever the chunks it arrives in."""

from __future__ import annotations

import os
import random
import struct

import pytest

from odradek.protocol.connection import FrameBuffers, FrameReader
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


def _receive(reader: FrameReader, stream: bytes, rng: random.Random) -> None:
    """Hand ``stream`` to ``reader`` as a BufferedProtocol would: into the buffers it gives, a
    random number of bytes at a time (never more than the buffer holds)."""
    pos = 0
    while pos < len(stream):
        buf = reader.buffer()
        assert len(buf) > 0 and not buf.readonly
        n = min(len(buf), len(stream) - pos, rng.choice([1, 3, 4, 7, 50, 1000, 70_000, 1 << 20]))
        buf[:n] = stream[pos : pos + n]
        reader.filled(n)
        pos += n


@pytest.mark.parametrize("seed", range(20))
def test_frames_received_into_its_buffers_survive_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [0, 1, 5, 100, 3000, 1023, 1024, 1025, 5000, 300_000]
    payloads = [rng.randbytes(rng.choice(sizes)) for _ in range(rng.randint(1, 30))]
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    reader = FrameReader(receive_size=4096, large=1024, buffers=FrameBuffers())
    got: list[bytes] = []
    _receive(reader, stream, rng)
    assert reader.buffered == len(stream)
    while (frame := reader.next_frame()) is not None:
        # small frames are copied out of the receive buffer; large ones have buffers of their own
        assert type(frame) is (memoryview if len(frame) >= 1024 else bytearray)
        assert not memoryview(frame).readonly  # records are patched in place
        got.append(bytes(frame))
    assert got == payloads
    assert reader.buffered == 0


def test_a_large_frame_is_read_straight_into_its_own_buffer() -> None:
    reader = FrameReader(receive_size=4096, large=1024)
    payload = bytes(range(256)) * 40
    first = reader.buffer()
    head = struct.pack(">i", len(payload)) + payload[:96]
    first[: len(head)] = head
    reader.filled(len(head))
    rest = reader.buffer()  # the frame's own buffer, after the bytes that came with its size
    assert len(rest) == len(payload) - 96
    rest[:] = payload[96:]
    reader.filled(len(rest))
    frame = reader.next_frame()
    assert frame is not None and bytes(frame) == payload
    assert reader.next_frame() is None


def test_large_frame_buffers_are_reused_once_nothing_refers_to_them() -> None:
    pool = FrameBuffers()
    a = pool.get(5000)
    view = a[10:20]
    del a
    b = pool.get(5000)  # the first is still referred to (``view``)
    assert b.obj is not view.obj
    second = id(b.obj)
    del b
    c = pool.get(4800)  # the second is free, and big enough without being twice too big
    assert len(c) == 4800
    assert id(c.obj) == second
    d = pool.get(100_000)  # nothing spare fits: a new one
    assert len(d) == 100_000 and d.obj is not c.obj


def test_spare_buffers_are_bounded() -> None:
    pool = FrameBuffers(max_bytes=50_000)
    for _ in range(10):
        pool.get(20_000)
    assert sum(len(b) for b in pool._spare) <= 50_000 + 21_250


def test_a_bad_size_received_into_its_buffers_is_raised_after_the_frames_before_it() -> None:
    rng = random.Random(1)
    good = struct.pack(">i", 3) + b"abc"
    big = struct.pack(">i", 2000) + b"y" * 2000
    for bad, error in ((struct.pack(">i", -1), InvalidFrame), (struct.pack(">i", 10_001), FrameTooLarge)):
        reader = FrameReader(max_frame_size=10_000, receive_size=4096, large=1024)
        _receive(reader, good + big + bad + b"x" * 10, rng)
        assert reader.next_frame() == b"abc"
        frame = reader.next_frame()
        assert frame is not None and bytes(frame) == b"y" * 2000
        with pytest.raises(error):
            reader.next_frame()


def test_a_receive_buffer_too_small_for_its_large_frames_is_refused() -> None:
    with pytest.raises(ValueError):
        FrameReader(receive_size=4096, large=4000)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("pooled", [False, True])
def test_announcing_a_huge_frame_costs_only_the_bytes_sent(pooled: bool) -> None:
    """A peer that sends the size prefix of a frame of the maximum size and nothing more must not
    make the reader commit that much memory (with bytearrays it would: they are zero-filled)."""
    size = 64 << 20
    readers = [
        FrameReader(max_frame_size=size, receive_size=4096, large=1024, buffers=FrameBuffers(1 << 30) if pooled else None)
        for _ in range(12)
    ]
    before = _rss()
    for reader in readers:
        reader.feed(struct.pack(">i", size) + b"z" * 100)
        assert len(reader.buffer()) == size - 100  # the frame's own buffer waits for the rest
    grown = _rss() - before
    assert grown < 32 << 20, f"{grown >> 20} MiB committed for 12 frames of which 1,200 bytes arrived"


def test_a_lowered_limit_refuses_a_large_frame_before_any_buffer_is_made_and_a_raised_one_reads_it() -> None:
    """A broker holds unauthenticated connections to a small limit: a declared frame above it is
    refused on its size prefix (no buffer of that size); raised again, the frame is read."""
    pool = FrameBuffers()
    reader = FrameReader(max_frame_size=100 << 20, receive_size=4096, large=1024, buffers=pool)
    reader.set_max_frame_size(2000)
    reader.feed(struct.pack(">i", 3) + b"abc" + struct.pack(">i", 50 << 20) + b"z" * 100)
    assert reader.next_frame() == b"abc"
    assert pool._spare == [] and reader._frame is None
    with pytest.raises(FrameTooLarge) as info:
        reader.next_frame()
    assert (info.value.size, info.value.limit) == (50 << 20, 2000)
    # the same stream, the limit raised before the large frame is reached: it is read
    reader = FrameReader(max_frame_size=100 << 20, receive_size=4096, large=1024)
    reader.set_max_frame_size(2000)
    payload = bytes(range(256)) * 20
    reader.feed(struct.pack(">i", 3) + b"abc" + struct.pack(">i", len(payload)) + payload[:1000])
    assert reader.next_frame() == b"abc"
    reader.set_max_frame_size(100 << 20)
    reader.feed(payload[1000:])
    frame = reader.next_frame()
    assert frame is not None and bytes(frame) == payload
