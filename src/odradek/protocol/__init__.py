"""Sans-I/O Kafka wire protocol: generated message classes, request/response codec, connections.

This package never touches a socket (in the style of h11): bytes in, typed messages out.

* :func:`encode_request` / :func:`decode_request` and :func:`encode_response` /
  :func:`decode_response` work on whole requests and responses without the 4-byte size prefix.
* :mod:`odradek.protocol.connection` adds framing and per-connection state
  (:class:`ServerConnection`, :class:`ClientConnection`), which moves to
  :attr:`ConnectionState.ERROR` on any exception.
* :mod:`odradek.protocol.inspection` reads a request's topic count before decoding it, and
  :func:`error_response` builds the answer Kafka gives to a request that failed (every topic,
  partition, resource or group it named, with the error code).
* Errors are :class:`LocalProtocolError` (we tried something the protocol forbids) or
  :class:`RemoteProtocolError` (the peer did), each with the Kafka error code to answer with.
* :mod:`odradek.protocol.messages` holds one generated class per message (``ProduceRequest``,
  ``FetchResponse``, ...), covering all versions; attributes are the snake_case of Kafka's
  field names.  ``records`` fields decode to zero-copy ``memoryview`` slices.
"""

from odradek.protocol._api import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from odradek.protocol._schema import Data, Message, Struct
from odradek.protocol.connection import (
    NEED_DATA,
    BadRequest,
    ClientConnection,
    ConnectionClosed,
    ConnectionState,
    RequestReceived,
    ResponseReceived,
    SaslTokenReceived,
    ServerConnection,
)
from odradek.protocol.error_responses import error_response
from odradek.protocol.errors import (
    CorrelationIdMismatch,
    DecodeError,
    EncodeError,
    FrameTooLarge,
    InvalidFrame,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    UnknownApiKey,
    UnsupportedVersion,
)
from odradek.protocol.inspection import RequestTooLarge, TopicLimit, request_topic_count
from odradek.protocol.messages import ApiKey, RequestHeader, ResponseHeader, request_class, response_class

__all__ = [
    "NEED_DATA",
    "ApiKey",
    "BadRequest",
    "ClientConnection",
    "ConnectionClosed",
    "ConnectionState",
    "CorrelationIdMismatch",
    "Data",
    "DecodeError",
    "EncodeError",
    "FrameTooLarge",
    "InvalidFrame",
    "LocalProtocolError",
    "Message",
    "ProtocolError",
    "RemoteProtocolError",
    "RequestHeader",
    "RequestReceived",
    "RequestTooLarge",
    "ResponseHeader",
    "ResponseReceived",
    "SaslTokenReceived",
    "ServerConnection",
    "Struct",
    "TopicLimit",
    "UnknownApiKey",
    "UnsupportedVersion",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
    "request_class",
    "request_header_version",
    "request_topic_count",
    "response_class",
    "response_header_version",
]
