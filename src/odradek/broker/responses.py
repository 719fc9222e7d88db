"""How a connection's responses reach the socket: :class:`ResponseWriter`.

A response is a list of parts: encoded bytes and file regions of log segments (fetched record
data).  Responses of bytes only go to the transport joined in one write.  A big response with
file regions goes straight to an idle plaintext socket (``writev`` for the bytes, ``sendfile`` for
the record data: no copy into a buffer, none into the socket); a small one is read into bytes
with one ``pread`` per region; the rest (and what the socket could not take) is read straight
into a page-aligned buffer, which is kept for later responses once the transport has sent it.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from odradek.storage.segment import FileRegion

__all__ = ["ResponseWriter"]

_OUT_BUFFER = 1 << 20
# responses up to this size are assembled as bytes rather than in the page-aligned buffer
_SMALL_RESPONSE = 16 * 1024
# responses with file regions of this size or more go straight to an idle socket: bytes with one
# writev per run of them, record data with sendfile (the kernel hands the page-cache pages to the
# socket: no copy into a buffer, none into the socket); what the socket cannot take goes the
# buffered way
_SENDFILE_MIN = 128 * 1024
_EAGAIN = (BlockingIOError, InterruptedError)
_CORK = getattr(socket, "TCP_CORK", None)  # Linux
# page-aligned response buffers a connection keeps for reuse (a fresh one is zero-filled and
# page-faulted in by the kernel, which costs as much as reading the records into it)
_KEPT_OUT_BUFFERS = 2


def _size(parts: list[Any]) -> int:
    """Bytes in a response's parts (bytes and file regions)."""
    total = 0
    for p in parts:
        total += len(p) if type(p) is bytes else p.length
    return total


class ResponseWriter:
    """Owns what one connection needs to write its responses: the socket for ``sendfile`` (set
    with :meth:`use_socket` on plaintext connections; TLS encrypts in user space), the response
    buffers handed to the transport and the count of bytes handed over, which says which of them
    the transport has sent and may be reused.  ``on_broken`` is called when the peer is gone
    while writing to the socket directly (the connection closes)."""

    __slots__ = ("_handed", "_on_broken", "_outs", "_sock")

    def __init__(self, on_broken: Callable[[], None]) -> None:
        self._on_broken = on_broken
        self._sock: Any = None
        # response buffers handed to the transport, oldest first, each with the count of bytes
        # handed to the transport up to its end: free again once the transport has sent them
        self._outs: deque[tuple[mmap.mmap, int]] = deque()
        self._handed = 0  # bytes handed to the transport so far

    def use_socket(self, sock: Any) -> None:
        """Write big responses straight to ``sock`` when the transport holds nothing."""
        self._sock = sock

    def write(self, transport: asyncio.Transport, parts: list[Any]) -> None:
        """Write responses.  A big one with file regions goes straight to an idle plaintext
        socket (sendfile, :meth:`_send_direct`); otherwise, and for what the socket could not take,
        file regions are read straight into one page-aligned buffer (no Python bytes objects for
        record data) and the whole buffer goes out in one write."""
        for p in parts:
            if type(p) is not bytes:
                break
        else:
            self._hand(transport, parts[0] if len(parts) == 1 else b"".join(parts))
            return
        total = _size(parts)
        if total >= _SENDFILE_MIN and self._sock is not None and transport.get_write_buffer_size() == 0:
            # nothing is queued in the transport, so bytes written to the socket here go out in
            # order; what it cannot take now follows through the transport
            parts = self._send_direct(parts)
            if not parts:
                return
            total = _size(parts)
        if total <= _SMALL_RESPONSE:
            # a few KiB (a long-polling consumer's fetch): one pread per region, one join
            chunks = []
            for p in parts:
                if type(p) is bytes:
                    chunks.append(p)
                else:
                    data = os.pread(p.fd, p.length, p.position)
                    if len(data) != p.length:
                        raise OSError(f"short read of a log segment ({len(data)} of {p.length} bytes)")
                    chunks.append(data)
            self._hand(transport, b"".join(chunks))
            return
        out = self._free_out_buffer(total, transport)
        view = memoryview(out)
        pos = 0
        for p in parts:
            if type(p) is bytes:
                n = len(p)
                view[pos : pos + n] = p
            else:
                n = p.length
                got = os.preadv(p.fd, [view[pos : pos + n]], p.position)
                if got != n:
                    raise OSError(f"short read of a log segment ({got} of {n} bytes)")
            pos += n
        self._hand(transport, view[:total])
        outs = self._outs
        outs.append((out, self._handed))
        if len(outs) > _KEPT_OUT_BUFFERS:
            outs.popleft()  # the transport keeps its own reference while it still sends from it

    def _send_direct(self, parts: list[Any]) -> list[Any]:
        """Write ``parts`` to the socket until it would block; returns what is left (the first
        part cut where the socket stopped).  Corked meanwhile, so that the bytes between file
        regions do not leave as small segments of their own."""
        sock = self._sock
        fd = sock.fileno()
        count = len(parts)
        i = 0
        broken = False
        if _CORK is not None:
            sock.setsockopt(socket.IPPROTO_TCP, _CORK, 1)
        try:
            while i < count:
                p = parts[i]
                if type(p) is bytes:
                    j = i + 1
                    while j < count and type(parts[j]) is bytes:
                        j += 1
                    try:
                        sent = os.writev(fd, parts[i:j])
                    except _EAGAIN:
                        sent = 0
                    while i < j and sent >= len(parts[i]):
                        sent -= len(parts[i])
                        i += 1
                    if i < j:  # the socket is full
                        return [parts[i][sent:], *parts[i + 1 :]]
                    continue
                position, left = p.position, p.length
                while left:
                    try:
                        sent = os.sendfile(fd, p.fd, position, left)
                    except _EAGAIN:
                        return [FileRegion(p.segment, position, left), *parts[i + 1 :]]
                    if sent == 0:
                        raise OSError(f"short read of a log segment ({p.length - left} of {p.length} bytes)")
                    position += sent
                    left -= sent
                i += 1
            return []
        except (BrokenPipeError, ConnectionResetError):
            broken = True
            self._on_broken()  # the peer is gone: nothing more to send
            return []
        finally:
            if _CORK is not None and not broken:
                sock.setsockopt(socket.IPPROTO_TCP, _CORK, 0)

    def _hand(self, transport: asyncio.Transport, data: bytes | memoryview) -> None:
        """Write to the transport, counting the bytes handed over (see :meth:`_free_out_buffer`)."""
        transport.write(data)
        self._handed += len(data)

    def _free_out_buffer(self, size: int, transport: asyncio.Transport) -> mmap.mmap:
        """A page-aligned buffer of at least ``size`` bytes that the transport no longer sends
        from (it may hold on to a view of what it could not write yet): a kept one or a new one."""
        sent = self._handed - transport.get_write_buffer_size()
        outs = self._outs
        for i, (buf, end) in enumerate(outs):
            if end <= sent and len(buf) >= size:
                del outs[i]
                return buf
        return mmap.mmap(-1, max(_OUT_BUFFER, (size + _OUT_BUFFER - 1) // _OUT_BUFFER * _OUT_BUFFER))
