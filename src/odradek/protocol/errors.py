"""Exceptions of the protocol layer.

Every error raised while decoding untrusted bytes is a :class:`ProtocolError`; nothing else
(``struct.error``, ``IndexError``, ``UnicodeDecodeError``) escapes the decoders.
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
    "ProtocolError",
    "UnknownApiKey",
    "UnsupportedVersion",
]


class ProtocolError(KafkaError):
    """Base of the protocol layer's errors."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(code, message)


class DecodeError(ProtocolError):
    """Bytes that do not decode as the message they claim to be (truncated, bad sizes, bad varints)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.CORRUPT_MESSAGE)


class EncodeError(ProtocolError):
    """A message that cannot be encoded in the requested version (bad values, missing fields)."""


class UnknownApiKey(ProtocolError):
    """A request whose API key is not in Kafka's definitions.

    ``header`` carries the fields read before the failure (api key, version, correlation id).
    """

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message, ErrorCode.UNSUPPORTED_VERSION)
        self.header = header


class UnsupportedVersion(ProtocolError):
    """A version outside a message's valid range, or a field that the version cannot carry.

    When raised by ``decode_request``, ``header`` holds the partly decoded request header so that
    a server can still answer (ApiVersions answers such a request with a v0 body and error 35).
    """

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message, ErrorCode.UNSUPPORTED_VERSION)
        self.header = header


class InvalidFrame(ProtocolError):
    """A size prefix that is negative or otherwise impossible."""


class FrameTooLarge(InvalidFrame):
    """A size prefix above the connection's maximum frame size."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class CorrelationIdMismatch(ProtocolError):
    """A response whose correlation id is not the one of the request it should answer."""
