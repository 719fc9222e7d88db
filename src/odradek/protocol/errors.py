"""Exceptions of the protocol layer, split by whose fault they are (as h11 does).

* :class:`LocalProtocolError`: *we* tried to do something the protocol does not allow (encode a
  message at a version that cannot carry it, answer a request that is not waiting, use a
  connection after it failed).  A bug on this side; the peer did nothing wrong.
* :class:`RemoteProtocolError`: *the peer* did (bytes that do not decode, a frame size that is
  negative or too large, an API key or version we do not know, a response to no request).

Each carries ``code``, the Kafka error code to answer with (and ``retriable``, from it).  Every
error raised while decoding untrusted bytes is a :class:`RemoteProtocolError`; nothing else
(``struct.error``, ``IndexError``, ``UnicodeDecodeError``) escapes the decoders.
:class:`ProtocolError`, the base of both, cannot be raised itself.

Hierarchy::

    ProtocolError
    ├── LocalProtocolError           (UNKNOWN_SERVER_ERROR, -1)
    │   └── EncodeError              a message that cannot be encoded (UNSUPPORTED_VERSION, 35,
    │                                when the version cannot carry it)
    └── RemoteProtocolError          (INVALID_REQUEST, 42)
        ├── DecodeError              bytes that are not the message they claim (CORRUPT_MESSAGE, 2)
        ├── UnknownApiKey            (UNSUPPORTED_VERSION, 35)
        ├── UnsupportedVersion       a version outside the API's range (UNSUPPORTED_VERSION, 35)
        ├── InvalidFrame             a negative frame size
        │   └── FrameTooLarge        a frame above the connection's limit
        ├── CorrelationIdMismatch    a response that answers no request in flight
        └── RequestTooLarge          (odradek.protocol.inspection) refused before decoding
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.protocol.messages import RequestHeader

__all__ = [
    "CorrelationIdMismatch",
    "DecodeError",
    "EncodeError",
    "FrameTooLarge",
    "InvalidFrame",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "UnknownApiKey",
    "UnsupportedVersion",
]


class ProtocolError(KafkaError):
    """Base of the protocol layer's errors: raise :class:`LocalProtocolError` or
    :class:`RemoteProtocolError` (or one of theirs), never this class itself."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        if type(self) is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError, not ProtocolError")
        super().__init__(code, message)


class LocalProtocolError(ProtocolError):
    """We tried to do something the protocol does not allow."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> None:
        super().__init__(message, code)


class RemoteProtocolError(ProtocolError):
    """The peer did something the protocol does not allow."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message, code)


class EncodeError(LocalProtocolError):
    """A message that cannot be encoded in the requested version: a version outside the message's
    range or a field the version cannot carry (code UNSUPPORTED_VERSION), or values that do not
    fit their types."""


class DecodeError(RemoteProtocolError):
    """Bytes that do not decode as the message they claim to be (truncated, bad sizes, bad varints)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.CORRUPT_MESSAGE)


class UnknownApiKey(RemoteProtocolError):
    """A request whose API key is not in Kafka's definitions.

    ``header`` carries the fields read before the failure (api key, version, correlation id).
    """

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message, ErrorCode.UNSUPPORTED_VERSION)
        self.header = header


class UnsupportedVersion(RemoteProtocolError):
    """A message at a version outside its API's valid range.

    When raised by ``decode_request``, ``header`` holds the partly decoded request header so that
    a server can still answer (ApiVersions answers such a request with a v0 body and error 35).
    """

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message, ErrorCode.UNSUPPORTED_VERSION)
        self.header = header


class InvalidFrame(RemoteProtocolError):
    """A size prefix that is negative or otherwise impossible."""


class FrameTooLarge(InvalidFrame):
    """A size prefix above the connection's maximum frame size."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class CorrelationIdMismatch(RemoteProtocolError):
    """A response whose correlation id is not the one of the request it should answer."""
