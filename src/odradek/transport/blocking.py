"""A connection to one broker over a blocking socket, in the caller's thread.

The blocking face of the transport: the same sans-I/O core as the asyncio connection
(:class:`~odradek.transport.session.Session`: codec, versions, handshake), with the caller's
thread as the I/O loop.  There is no event loop to hand each call to and back, which is what the
Spark executors' fetch path wants: it sends the next fetch before decoding the previous response
(:meth:`BrokerConnection.send` / :meth:`BrokerConnection.receive`), so the broker sends while
the task decodes.

A response of :data:`~odradek.transport._buffers.SMALL_FRAME` bytes or more is read straight
into a buffer of its size (a spare that no earlier response refers to any more), and its
``records`` are views of it.  A connection is used by one thread at a time; a failed one (broken,
timed out, a response that does not decode) is closed and raises ConnectionError or
TimeoutError.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Mapping
from typing import Any

from odradek.protocol import Message, ProtocolError
from odradek.protocol.connection import DEFAULT_MAX_FRAME_SIZE, frame_size_at

from ._buffers import FRAMES, SMALL_FRAME
from ._ops import drive_blocking
from .connect import BlockingStream, open_socket
from .session import Security, Session

__all__ = ["BrokerConnection"]


class BrokerConnection(Session):
    """``BrokerConnection(host, port)`` connects and runs the handshake (see :class:`Session`);
    ``request`` sends one request and waits for its answer, ``send`` and ``receive`` pipeline."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = "odradek",
        timeout: float = 30.0,
        security: Security | None = None,
        node_id: int = -1,
        versions: Mapping[int, tuple[int, int]] | None = None,
        handshake: bool = True,
        connect_timeout: float | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        super().__init__(
            node_id, host, port, client_id=client_id, timeout=timeout, security=security, versions=versions,
            handshake=handshake, max_frame_size=max_frame_size,
        )
        tls = security.tls if security is not None else None
        try:
            self.sock: BlockingStream = open_socket(
                host, port, tls=tls, timeout=timeout if connect_timeout is None else connect_timeout
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        try:
            drive_blocking(self.handshake(), conn=self)
        except BaseException:
            self.close()
            raise

    def request(self, message: Message, version: int | None = None, timeout: float | None = None) -> Any:
        """Send ``message`` (at the highest common version unless given) and return the response
        (waiting up to ``timeout`` s, default the connection's); Any: the response's class depends
        on the request's."""
        self.send(message, version)
        return self.receive(timeout)

    def send(self, message: Message, version: int | None = None) -> int:
        """Write a request without waiting for its response (see :meth:`receive`); returns its
        correlation id.  Requests are answered in the order they were sent."""
        if self.closed:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        v = self.version_for(type(message)) if version is None else version
        cid, data = self.codec.send_request(message, v)
        try:
            self.sock.settimeout(self.timeout)
            self.sock.sendall(data)
        except OSError as exc:
            self._fail(exc)
            raise ConnectionError(f"connection to {self.host}:{self.port} failed: {exc}") from exc
        return cid

    def receive(self, timeout: float | None = None) -> Any:
        """The response to the oldest request sent and not answered yet, waiting up to
        ``timeout`` s (default: the connection's timeout)."""
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        try:
            head = bytearray(4)
            self._read_into(memoryview(head), deadline)
            size = frame_size_at(head, 0, self.max_frame_size)
            payload = memoryview(bytearray(size)) if size <= SMALL_FRAME else FRAMES.get(size)
            self._read_into(payload, deadline)
            return self.receive_frame(payload).response
        except TimeoutError as exc:
            self._fail(exc)
            raise TimeoutError(f"no response from {self.host}:{self.port} within {wait:g} s") from None
        except ProtocolError as exc:
            self._fail(exc)
            raise ConnectionError(f"bad response from {self.host}:{self.port}: {exc}") from exc
        except OSError as exc:
            self._fail(exc)
            raise ConnectionError(f"connection to {self.host}:{self.port} failed: {exc}") from exc

    def _read_into(self, view: memoryview, deadline: float) -> None:
        got, n = 0, len(view)
        sock = self.sock
        while got < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sock.settimeout(remaining)
            k = sock.recv_into(view[got:])
            if not k:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            got += k

    def _fail(self, exc: BaseException) -> None:
        if not self.closed:
            self.error = exc
        self.close()

    def close(self) -> None:
        """Close the socket; requests after it fail with ConnectionError.  Closing twice is harmless."""
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()
