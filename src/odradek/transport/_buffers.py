"""Buffers of large response frames, shared by every client connection of the process.

A response of :data:`SMALL_FRAME` bytes or more is read by the socket straight into a buffer of
its own size: the kernel's copy is the only one.  A fresh buffer is page-faulted in as it fills,
which costs about as much as reading the response, so buffers are kept and reused once nothing
refers to them any more (the decoded response and every ``records`` view of it gone): see
:class:`~odradek.protocol.connection.FrameBuffers`.  Connections come and go (a Spark task opens
its own), so the spares belong to the process, behind a lock: Spark tasks read in threads.
"""

from __future__ import annotations

import threading

from odradek.protocol.connection import FrameBuffers

__all__ = ["FRAMES", "SMALL_FRAME", "SharedFrameBuffers"]

#: Frames up to this size are read into a buffer of their own; larger ones into a reused one.
SMALL_FRAME = 1 << 16
#: At most this many bytes of buffers of large frames are kept for reuse (all connections).
_SPARE_BYTES = 32 << 20


class SharedFrameBuffers(FrameBuffers):
    """Spares of large frames for every connection of the process, behind a lock."""

    __slots__ = ("_lock",)

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self._lock = threading.Lock()

    def get(self, size: int) -> memoryview:
        with self._lock:
            return super().get(size)


#: the spares of the client connections (the broker's channels keep their own, see
#: :class:`~odradek.transport.Channel`)
FRAMES = SharedFrameBuffers(_SPARE_BYTES)
