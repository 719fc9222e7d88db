"""Sans-I/O Kafka connections: framing, and the server and client state of one connection.

Nothing here touches a socket.  The caller feeds received bytes with ``receive_data`` (``b""``
for end of stream), or receives them straight into the buffers ``buffer()`` gives and says how
many with ``filled(n)``, pulls events with ``next_event`` until it returns :data:`NEED_DATA`, and
writes whatever bytes the ``send_*`` methods return.

Framing: every request and response is preceded by a big-endian int32 giving the size of what
follows.  A size above ``max_frame_size`` (the broker's ``socket.request.max.bytes``) or below
zero cannot be recovered from: :class:`~odradek.protocol.errors.FrameTooLarge` /
:class:`~odradek.protocol.errors.InvalidFrame` are raised and the connection must be closed.

Any exception raised by a connection's method moves it to :attr:`ConnectionState.ERROR` (as h11
does: no half-corrupted state); every later call then raises a
:class:`~odradek.protocol.errors.LocalProtocolError`, and the caller closes the connection.  The
one exception: a request the client cannot encode is refused before anything changed.
Requests that do not decode are not exceptions: they are :class:`BadRequest` events, and the
connection stays in sync.

Kafka answers the requests of one connection in the order they arrived.  The server side keeps
that order for the caller: responses may be handed to :meth:`ServerConnection.send_response` in
any order, and bytes are released only once every earlier request has been answered (or marked
as needing no answer, as ``acks=0`` produce requests are).
"""

from __future__ import annotations

import enum
import mmap
import struct
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from odradek.protocol._api import (
    Region,
    decode_request,
    decode_response,
    encode_request,
    encode_response_parts,
)
from odradek.protocol._schema import Buffer, Message
from odradek.protocol.errors import (
    CorrelationIdMismatch,
    DecodeError,
    FrameTooLarge,
    InvalidFrame,
    LocalProtocolError,
    ProtocolError,
    UnknownApiKey,
    UnsupportedVersion,
)
from odradek.protocol.messages import RequestHeader

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NEED_DATA",
    "BadRequest",
    "ClientConnection",
    "ConnectionClosed",
    "ConnectionState",
    "FrameBuffers",
    "FrameReader",
    "RequestReceived",
    "ResponseReceived",
    "SaslTokenReceived",
    "ServerConnection",
    "frame",
    "frame_size_at",
]

#: Kafka's default ``socket.request.max.bytes`` (100 MiB)
DEFAULT_MAX_FRAME_SIZE: Final = 104857600

_size = struct.Struct(">i")


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: ``next_event`` has nothing more until more bytes are received
NEED_DATA: Final = _Sentinel("NEED_DATA")


class ConnectionState(enum.Enum):
    """A connection is ``OPEN`` until one of its methods raises; then ``ERROR`` for good."""

    OPEN = "OPEN"
    ERROR = "ERROR"


_OPEN: Final = ConnectionState.OPEN
_ERROR: Final = ConnectionState.ERROR
_API_VERSIONS: Final = 18  # ApiVersions' api key
_UNSUPPORTED_VERSION: Final = 35  # the error code of KIP-511's v0 answer


def _unusable(conn: object) -> LocalProtocolError:
    return LocalProtocolError(f"{type(conn).__name__} is in the ERROR state after an earlier error: it cannot be used")


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed its side; ``clean`` is false when it left a partial frame behind."""

    clean: bool = True


@dataclass(slots=True)
class RequestReceived:
    """A complete, decoded request."""

    header: RequestHeader
    #: a :class:`Message`, typed Any on purpose: its class depends on ``header.api_key``, and the
    #: server hands it to the handler registered for that key, which declares the precise class
    message: Any
    size: int


@dataclass(slots=True)
class BadRequest:
    """A complete frame that did not decode as a request.

    ``header`` is what could be read of the request header (``None`` when not even that), and
    ``error`` the reason.  The frame is consumed; the connection itself is still in sync, so a
    server may answer (as ApiVersions does for an unsupported version) or close it.
    """

    header: RequestHeader | None
    error: ProtocolError
    size: int


@dataclass(frozen=True, slots=True)
class SaslTokenReceived:
    """A SASL token sent without Kafka framing (after a SaslHandshake v0), while
    :attr:`ServerConnection.raw_tokens` is set."""

    token: bytes


@dataclass(slots=True)
class ResponseReceived:
    """A decoded response and the request it answers."""

    correlation_id: int
    request_header: RequestHeader
    request: Message
    response: Message


def frame_size_at(buf: Buffer, pos: int, max_frame_size: int) -> int:
    """The size prefix at ``pos`` of ``buf``, checked: a negative size is an
    :class:`InvalidFrame`, one above ``max_frame_size`` a :class:`FrameTooLarge`."""
    size: int = _size.unpack_from(buf, pos)[0]
    if size < 0:
        raise InvalidFrame(f"negative frame size {size}")
    if size > max_frame_size:
        raise FrameTooLarge(size, max_frame_size)
    return size


def frame(payload: Buffer) -> bytes:
    """``payload`` preceded by its 4-byte size."""
    return _size.pack(len(payload)) + payload


class FrameBuffers:
    """Buffers for large frames, kept for reuse: a frame read straight into a fresh buffer would
    have every page of it faulted in by the kernel, which costs as much as the copy.  A spare is
    reused once nothing refers to it any more (the frame's decoded ``records`` are views of it).
    Not thread-safe: one event loop's connections share one, or the caller holds a lock.

    A new buffer is anonymous memory (``mmap``): only the pages the frame's bytes fill are ever
    committed, so a peer that announces a frame of ``socket.request.max.bytes`` and sends its
    size prefix alone costs no more memory than the bytes it sent (as when frames were
    accumulated as they arrived)."""

    __slots__ = ("_spare", "max_bytes")

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        #: at most this many bytes of spares are kept (all the connections using this pool)
        self.max_bytes = max_bytes
        self._spare: list[mmap.mmap] = []  # most recently used last

    def get(self, size: int) -> memoryview:
        """A writable buffer of ``size`` bytes."""
        spare = self._spare
        for i in range(len(spare)):
            b = spare[i]
            # references: the list, ``b`` and getrefcount's argument; a view of it adds one
            if size <= len(b) <= 2 * size and sys.getrefcount(b) == 3:
                spare.append(spare.pop(i))
                return memoryview(b)[:size]
        b = mmap.mmap(-1, max(size + (size >> 4), 1))  # frames of the same kind differ a little in size
        spare.append(b)
        total = sum(len(s) for s in spare)
        while total > self.max_bytes and len(spare) > 1:
            total -= len(spare.pop(0))
        return memoryview(b)[:size]


class FrameReader:
    """Splits a byte stream into size-prefixed frames.

    Bytes come in through :meth:`feed`, or, for a reader that receives into buffers it is given
    (asyncio's ``BufferedProtocol``), through :meth:`buffer` and :meth:`filled`.  A frame of
    ``large`` bytes or more is then read straight into a buffer of its own (from ``buffers``), so
    the kernel's copy is the only one; smaller frames arrive through a receive buffer of
    ``receive_size`` bytes (page-aligned: the kernel copies into it fastest) and are copied out.

    A frame's payload is a writable buffer the caller owns (a ``bytearray``, or for a large
    frame a ``memoryview``): decoded ``records`` fields are writable views of it, so a broker can
    patch offsets in place without another copy.  A bad size prefix is raised by
    :meth:`next_frame` once the frames before it have been taken."""

    __slots__ = (
        "_buffers", "_done", "_done_bytes", "_end", "_error", "_frame", "_got", "_large", "_mem",
        "_receive_size", "_start", "_view", "max_frame_size",
    )

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        *,
        receive_size: int = 1 << 16,
        large: int = 1 << 14,
        buffers: FrameBuffers | None = None,
    ) -> None:
        if large + 4 > receive_size // 2:
            raise ValueError("large frames must fit twice in the receive buffer")
        self.max_frame_size = max_frame_size
        self._receive_size = receive_size
        self._large = large
        self._buffers = buffers
        self._mem: mmap.mmap | None = None  # the receive buffer, made on first use
        self._view = memoryview(b"")
        self._start = self._end = 0  # the bytes of ``_view`` received and not yet split
        self._frame: memoryview | None = None  # a large frame's payload being filled
        self._got = 0  # bytes of it filled
        self._done: deque[bytearray | memoryview] = deque()  # whole frames not yet taken
        self._done_bytes = 0
        self._error: ProtocolError | None = None

    def set_max_frame_size(self, limit: int) -> None:
        """Change the largest frame accepted from now on (a broker accepts less before a client
        has authenticated).  A frame already refused for its size and not yet reported is
        looked at again under the new limit."""
        self.max_frame_size = limit
        error = self._error
        if isinstance(error, FrameTooLarge) and error.size <= limit and self._frame is None:
            self._error = None
            self._split()

    def feed(self, data: Buffer) -> None:
        """Bytes received: copied into :meth:`buffer` as they fit."""
        src = memoryview(data).cast("B")
        pos, n = 0, len(src)
        while pos < n:
            dst = self.buffer()
            k = min(len(dst), n - pos)
            dst[:k] = src[pos : pos + k]
            self.filled(k)
            pos += k

    def buffer(self) -> memoryview:
        """Where the next bytes received go (then say how many with :meth:`filled`): the rest of
        a large frame's payload, or the free end of the receive buffer."""
        frame = self._frame
        if frame is not None:
            return frame[self._got :]
        if self._mem is None:
            self._mem = mmap.mmap(-1, self._receive_size)
            self._view = memoryview(self._mem)
        start, end = self._start, self._end
        if start == end:
            self._start = self._end = 0
        elif self._receive_size - end < self._receive_size // 2:
            # what is left is less than a large frame's size prefix and payload: move it to the front
            self._view[: end - start] = self._view[start:end]
            self._start, self._end = 0, end - start
        return self._view[self._end :]

    def filled(self, n: int) -> None:
        """``n`` bytes were received into the last :meth:`buffer`."""
        frame = self._frame
        if frame is not None:
            self._got += n
            if self._got == len(frame):
                self._done.append(frame)
                self._done_bytes += 4 + len(frame)
                self._frame = None
            return
        self._end += n
        if self._error is None:
            self._split()

    def _split(self) -> None:
        view, start, end = self._view, self._start, self._end
        done = self._done
        large = self._large
        while end - start >= 4:
            try:
                size = frame_size_at(view, start, self.max_frame_size)
            except ProtocolError as exc:
                self._error = exc
                break
            if size >= large:
                payload = self._buffers.get(size) if self._buffers is not None else memoryview(mmap.mmap(-1, size))
                have = min(end - start - 4, size)
                payload[:have] = view[start + 4 : start + 4 + have]
                start += 4 + have
                if have < size:  # the rest is read straight into it (start == end now)
                    self._frame, self._got = payload, have
                    break
                done.append(payload)
                self._done_bytes += 4 + size
                continue
            if end - start - 4 < size:
                break
            done.append(bytearray(view[start + 4 : start + 4 + size]))
            self._done_bytes += 4 + size
            start += 4 + size
        self._start, self._end = start, end

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        partial = 4 + self._got if self._frame is not None else 0
        return self._done_bytes + partial + self._end - self._start

    def next_frame(self) -> bytearray | memoryview | None:
        """The next complete frame's payload, or ``None`` until more bytes arrive."""
        if self._done:
            payload = self._done.popleft()
            self._done_bytes -= 4 + len(payload)
            return payload
        if self._error is not None:
            raise self._error
        return None


class ServerConnection:
    """The broker's side of one connection."""

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        check: Callable[[bytearray | memoryview], None] | None = None,
        *,
        receive_size: int = 1 << 16,
        large: int = 1 << 14,
        buffers: FrameBuffers | None = None,
    ) -> None:
        """``receive_size``, ``large``, ``buffers``: see :class:`FrameReader`."""
        self._reader = FrameReader(max_frame_size, receive_size=receive_size, large=large, buffers=buffers)
        # looks at a frame before it is decoded and raises a ProtocolError to refuse it (a
        # BadRequest without header): a bound on what decoding the frame would cost
        self._check = check
        self._closed: ConnectionClosed | None = None
        # requests in arrival order: the correlation id of one not answered yet (no object per
        # request), an _Pending with its response for one answered before an earlier one
        self._pending: deque[int | _Pending] = deque()
        #: frames are SASL tokens, not requests (set by the server after a SaslHandshake v0,
        #: cleared when authentication completes): see :class:`SaslTokenReceived`
        self.raw_tokens = False
        #: OPEN, or ERROR once a method raised (then every method raises)
        self.state = _OPEN

    @property
    def max_frame_size(self) -> int:
        """The largest frame (size prefix) accepted; a larger one is a :class:`FrameTooLarge`
        once the frames before it have been taken, and no buffer is made for it."""
        return self._reader.max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, limit: int) -> None:
        self._reader.set_max_frame_size(limit)

    def receive_data(self, data: Buffer) -> None:
        """Bytes from the peer; ``b""`` means the peer closed its side."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            if not data:
                self._closed = ConnectionClosed(clean=self._reader.buffered == 0)
            else:
                self._reader.feed(data)
        except BaseException:
            self.state = _ERROR
            raise

    def buffer(self) -> memoryview:
        """Where to receive the next bytes from the peer, for a caller that receives into
        buffers (then :meth:`filled`): see :meth:`FrameReader.buffer`."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            return self._reader.buffer()
        except BaseException:
            self.state = _ERROR
            raise

    def filled(self, n: int) -> None:
        """``n`` bytes from the peer were received into the last :meth:`buffer`."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            self._reader.filled(n)
        except BaseException:
            self.state = _ERROR
            raise

    def next_event(self) -> RequestReceived | BadRequest | SaslTokenReceived | ConnectionClosed | _Sentinel:
        """The next event; a bad frame size raises (a RemoteProtocolError) and moves the
        connection to ERROR."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            payload = self._reader.next_frame()
            if payload is None:
                return self._closed if self._closed is not None else NEED_DATA
            if self.raw_tokens:
                return SaslTokenReceived(bytes(payload))
            try:
                if self._check is not None:
                    self._check(payload)
                header, message = decode_request(payload)
            except (UnknownApiKey, UnsupportedVersion) as exc:
                if exc.header is not None:
                    self._pending.append(exc.header.correlation_id)
                return BadRequest(exc.header, exc, len(payload))
            except ProtocolError as exc:
                return BadRequest(None, exc, len(payload))
            self._pending.append(header.correlation_id)
            return RequestReceived(header, message, len(payload))
        except BaseException:
            self.state = _ERROR
            raise

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered."""
        return len(self._pending)

    @property
    def peer_closed(self) -> bool:
        """The peer closed its side of the stream (``receive_data(b"")``)."""
        return self._closed is not None

    def send_response(self, request_header: RequestHeader, message: Message) -> bytes:
        """Encode and queue the response; returns the bytes now ready to write, in order."""
        return _join(self.send_response_parts(request_header, message))

    def send_response_parts(self, request_header: RequestHeader, message: Message) -> list[bytes | Region]:
        """Like :meth:`send_response`, but file regions given as ``records`` values are not read:
        the result is a list of ``bytes`` and regions (``length``, ``to_bytes()``, and whatever the
        caller's region type offers, e.g. a file descriptor and position) to write in order."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            buf = encode_response_parts(request_header, message)
            if not buf.holes:
                return self._complete(request_header.correlation_id, [frame(buf)])
            total = len(buf) + sum(r.length for _pos, r in buf.holes)
            parts: list[bytes | Region] = []
            prev = 0
            head = _size.pack(total)
            for pos, region in buf.holes:
                parts.append(head + bytes(buf[prev:pos]))
                head = b""
                parts.append(region)
                prev = pos
            parts.append(bytes(buf[prev:]))
            return self._complete(request_header.correlation_id, parts)
        except BaseException:
            self.state = _ERROR
            raise

    def send_raw_response(self, request_header: RequestHeader, payload: Buffer) -> bytes:
        """Queue an already encoded response (header + body, no size prefix)."""
        return _join(self._completed(request_header.correlation_id, [frame(payload)]))

    def no_response(self, request_header: RequestHeader) -> bytes:
        """Mark a request that gets no response (produce with ``acks=0``)."""
        return _join(self._completed(request_header.correlation_id, []))

    def no_response_parts(self, request_header: RequestHeader) -> list[bytes | Region]:
        return self._completed(request_header.correlation_id, [])

    def _completed(self, correlation_id: int, parts: list[bytes | Region]) -> list[bytes | Region]:
        """:meth:`_complete`, guarded by the connection's state."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            return self._complete(correlation_id, parts)
        except BaseException:
            self.state = _ERROR
            raise

    def _complete(self, correlation_id: int, parts: list[bytes | Region]) -> list[bytes | Region]:
        pending = self._pending
        if pending:
            first = pending[0]
            if first == correlation_id and type(first) is int:
                # the oldest request, as when requests are answered in order
                pending.popleft()
                if not pending or type(pending[0]) is int:
                    return parts
                following = list(parts)
                while pending and type(pending[0]) is not int:
                    following.extend(pending.popleft().parts)  # type: ignore[union-attr]
                return following
        for i, slot in enumerate(pending):
            if type(slot) is int and slot == correlation_id:
                pending[i] = _Pending(correlation_id, parts)
                break
        else:
            raise LocalProtocolError(f"no request with correlation id {correlation_id} awaits a response")
        ready: list[bytes | Region] = []
        while pending and type(pending[0]) is not int:
            ready.extend(pending.popleft().parts)  # type: ignore[union-attr]
        return ready


class _Pending:
    """A request answered before one received earlier: its response waits here for theirs."""

    __slots__ = ("correlation_id", "parts")

    def __init__(self, correlation_id: int, parts: list[bytes | Region]) -> None:
        self.correlation_id = correlation_id
        self.parts = parts


def _join(parts: list[bytes | Region]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.to_bytes() for p in parts)


class ClientConnection:
    """A client's side of one connection: correlation ids and the in-flight queue."""

    def __init__(
        self,
        client_id: str | None = "odradek",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        *,
        receive_size: int = 1 << 16,
        large: int = 1 << 14,
        buffers: FrameBuffers | None = None,
    ) -> None:
        """``receive_size``, ``large``, ``buffers``: see :class:`FrameReader`."""
        self.client_id = client_id
        self._reader = FrameReader(max_frame_size, receive_size=receive_size, large=large, buffers=buffers)
        self._next_id = 0
        self._closed: ConnectionClosed | None = None
        self._in_flight: deque[tuple[RequestHeader, Message]] = deque()
        #: OPEN, or ERROR once a method raised (then every method raises)
        self.state = _OPEN

    def send_request(self, message: Message, api_version: int, expect_response: bool = True) -> tuple[int, bytes]:
        """Encode a request; returns ``(correlation id, framed bytes)``.

        ``expect_response=False`` is for requests the server does not answer (``acks=0``).
        A message that cannot be encoded (an :class:`~odradek.protocol.errors.EncodeError`) is
        refused before anything changes: the connection stays usable, nothing was sent.
        """
        if self.state is not _OPEN:
            raise _unusable(self)
        correlation_id = self._next_id
        header = RequestHeader(
            api_key=message.API_KEY, api_version=api_version, correlation_id=correlation_id, client_id=self.client_id
        )
        data = frame(encode_request(header, message))
        try:
            self._next_id = (correlation_id + 1) & 0x7FFFFFFF
            if expect_response:
                self._in_flight.append((header, message))
            return correlation_id, data
        except BaseException:
            self.state = _ERROR
            raise

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def receive_data(self, data: Buffer) -> None:
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            if not data:
                self._closed = ConnectionClosed(clean=self._reader.buffered == 0 and not self._in_flight)
            else:
                self._reader.feed(data)
        except BaseException:
            self.state = _ERROR
            raise

    def buffer(self) -> memoryview:
        """Where to receive the next bytes (then :meth:`filled`): see :meth:`FrameReader.buffer`."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            return self._reader.buffer()
        except BaseException:
            self.state = _ERROR
            raise

    def filled(self, n: int) -> None:
        """``n`` bytes were received into the last :meth:`buffer`."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            self._reader.filled(n)
        except BaseException:
            self.state = _ERROR
            raise

    def next_event(self) -> ResponseReceived | ConnectionClosed | _Sentinel:
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            payload = self._reader.next_frame()
        except BaseException:
            self.state = _ERROR
            raise
        if payload is None:
            return self._closed if self._closed is not None else NEED_DATA
        return self.receive_frame(payload)

    def receive_frame(self, payload: Buffer) -> ResponseReceived:
        """A whole response (the frame without its size), for a caller that reads the frames
        itself: decoded as the answer to the oldest request in flight."""
        if self.state is not _OPEN:
            raise _unusable(self)
        try:
            if not self._in_flight:
                raise CorrelationIdMismatch("received a response while no request is in flight")
            header, request = self._in_flight.popleft()
            try:
                response = decode_response(header, payload)
            except DecodeError:
                if header.api_key != _API_VERSIONS or header.api_version == 0:
                    raise
                # KIP-511: a broker that does not know the ApiVersions version asked for answers
                # with a v0 body and UNSUPPORTED_VERSION, as Kafka's clients read it
                header = RequestHeader(
                    api_key=header.api_key, api_version=0, correlation_id=header.correlation_id,
                    client_id=header.client_id,
                )
                response = decode_response(header, payload)
                if getattr(response, "error_code", 0) != _UNSUPPORTED_VERSION:
                    raise
            return ResponseReceived(header.correlation_id, header, request, response)
        except BaseException:
            self.state = _ERROR
            raise
