"""Response framing of the asyncio connection (``_FrameStream``: frames of every size in any
chunking, bad sizes) and the shared buffers of large frames."""

from __future__ import annotations

import random
import struct

import pytest

from odradek.protocol.connection import FrameReader
from odradek.transport import FRAMES, SMALL_FRAME
from odradek.transport.aio import _FrameStream


# -- framing ----------------------------------------------------------------------------------------
class _Conn:
    """What ``_FrameStream`` calls back: frames received, failure."""

    def __init__(self) -> None:
        self.node_id = 1
        self.who = "broker 1"
        self.max_frame_size = 1 << 26
        self.frames: list[bytes] = []
        self.closed = False
        self.error: BaseException | None = None

    def _on_frame(self, payload: bytearray | memoryview) -> None:
        assert isinstance(payload, bytearray | memoryview) and not memoryview(payload).readonly
        self.frames.append(bytes(payload))

    def _fail(self, exc: BaseException) -> None:
        self.closed = True
        self.error = exc


def _stream(conn: _Conn) -> _FrameStream:
    reader = FrameReader(conn.max_frame_size, receive_size=2 * SMALL_FRAME + 8, large=SMALL_FRAME, buffers=FRAMES)
    return _FrameStream(conn, reader)  # type: ignore[arg-type]


def _feed(stream: _FrameStream, data: bytes, rng: random.Random) -> None:
    """Deliver ``data`` as the transport would: into the buffers it hands out, in random chunks."""
    pos = 0
    while pos < len(data):
        buf = stream.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, rng.choice([1, 3, 4, 5, 100, 4096, 1 << 16, 1 << 22]))
        buf[:n] = data[pos : pos + n]
        stream.buffer_updated(n)
        pos += n


@pytest.mark.parametrize("seed", range(8))
def test_frames_of_every_size_in_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 7, 100, SMALL_FRAME - 5, SMALL_FRAME - 4, SMALL_FRAME, SMALL_FRAME + 1, 3 * SMALL_FRAME, 1 << 21])
             for _ in range(25)]
    payloads = [rng.randbytes(n) for n in sizes]
    conn = _Conn()
    stream = _stream(conn)
    _feed(stream, b"".join(struct.pack(">i", len(p)) + p for p in payloads), rng)
    assert conn.frames == payloads and not conn.closed


@pytest.mark.parametrize("size", [-1, (1 << 26) + 1])
def test_bad_frame_sizes_fail_the_connection(size: int) -> None:
    conn = _Conn()
    stream = _stream(conn)
    _feed(stream, struct.pack(">i", 3) + b"abc" + struct.pack(">i", size) + b"x" * 10, random.Random(0))
    assert conn.frames == [b"abc"] and conn.closed and isinstance(conn.error, ConnectionError)


def test_buffers_of_large_frames_are_reused_once_unreferenced() -> None:
    size = (1 << 20) + 12345
    first = FRAMES.get(size)
    first[:3] = b"abc"
    owner = id(first.obj)
    second = FRAMES.get(size)  # ``first`` is still referred to: another buffer
    assert id(second.obj) != owner and bytes(first[:3]) == b"abc"
    held = first[10:20]  # a view of a view keeps it too
    del first
    assert id(FRAMES.get(size - 100).obj) != owner
    del held
    again = FRAMES.get(size - 100)  # nothing refers to it now; a little smaller fits
    assert id(again.obj) == owner and len(again) == size - 100 and not again.readonly
    del again
    assert id(FRAMES.get(3 * size).obj) != owner  # too small for that
