"""Encoding and decoding of whole requests and responses (header + body, no size prefix)."""

from __future__ import annotations

import struct

from odradek.protocol._schema import (
    DECODE_ERRORS,
    ENCODE_ERRORS,
    Buffer,
    DecodeFn,
    EncodeFn,
    Holes,
    Message,
    Region,
)
from odradek.protocol.errors import (
    CorrelationIdMismatch,
    DecodeError,
    EncodeError,
    UnknownApiKey,
    UnsupportedVersion,
)
from odradek.protocol.messages import (
    API_MODULES,
    ApiKey,
    RequestHeader,
    ResponseHeader,
    request_class,
    response_class,
)

__all__ = [
    "Holes",
    "Region",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "request_header_version",
    "response_header_version",
]

_api_version = struct.Struct(">hhi")
_api_key_version = struct.Struct(">hh")
_i32 = struct.Struct(">i")

#: api_key * 65536 + api_version -> (request class, header decoder, body decoder), for every
#: valid (api key, version) seen so far
_REQUEST_DECODERS: dict[int, tuple[type[Message], DecodeFn, DecodeFn]] = {}
#: api_key * 65536 + api_version -> (response class, flexible header, body encoder)
_RESPONSE_ENCODERS: dict[int, tuple[type[Message], bool, EncodeFn]] = {}


def request_header_version(api_key: int, api_version: int) -> int:
    """Header version a request of ``api_key`` at ``api_version`` uses (0, 1 or 2)."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0  # the one request whose header has no client id
    return 2 if request_class(api_key).is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Header version of the response to such a request (0 or 1).

    The ApiVersions response header never carries tagged fields, so that a client can read it
    before it knows which versions the server supports.
    """
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if response_class(api_key).is_flexible(api_version) else 0


def encode_request(header: RequestHeader, message: Message) -> bytes:
    """Encode a request: header (version chosen by the request's version) then body."""
    if header.api_key != message.API_KEY:
        raise EncodeError(f"header names API key {header.api_key} but the body is a {message.NAME}")
    type(message).encoder(header.api_version)  # an EncodeError for a version outside the range
    out = bytearray()
    header.encode_into(out, request_header_version(header.api_key, header.api_version))
    message.encode_into(out, header.api_version)
    return bytes(out)


def decode_request(data: Buffer) -> tuple[RequestHeader, Message]:
    """Decode a request into ``(header, body)``; ``records`` fields are views of ``data``.

    An unknown API key raises :class:`UnknownApiKey` and a version outside the API's range
    :class:`UnsupportedVersion`; both carry the header fields read so far (``api_key``,
    ``api_version``, ``correlation_id``) so that a server can answer.
    """
    buf = data if isinstance(data, memoryview) else memoryview(data)
    if len(buf) < 8:
        raise DecodeError(f"request of {len(buf)} bytes is shorter than a request header")
    api_key, api_version = _api_key_version.unpack_from(buf, 0)
    entry = _REQUEST_DECODERS.get(api_key * 65536 + api_version)
    if entry is None:
        entry = _request_decoders(buf, api_key, api_version)
    cls, decode_header, decode_body = entry
    try:
        header, pos = decode_header(buf, 0)
        body, _ = decode_body(buf, pos)
    except DecodeError:
        raise
    except DECODE_ERRORS as exc:
        raise DecodeError(f"cannot decode {cls.NAME} v{api_version}: {exc}") from exc
    return header, body


def _request_decoders(buf: memoryview, api_key: int, api_version: int) -> tuple[type[Message], DecodeFn, DecodeFn]:
    """Header and body decoders of a request at a version (cached), or the error to answer."""
    correlation_id = _api_version.unpack_from(buf, 0)[2]
    if api_key not in API_MODULES:
        raise UnknownApiKey(f"unknown API key {api_key}", _partial(api_key, api_version, correlation_id))
    cls = request_class(api_key)
    lo, hi = cls.VALID_VERSIONS
    if not lo <= api_version <= hi:
        raise UnsupportedVersion(
            f"{cls.NAME} version {api_version} is outside {lo}-{hi}", _partial(api_key, api_version, correlation_id)
        )
    header_version = request_header_version(api_key, api_version)
    entry = (cls, RequestHeader.decoder(header_version), cls.decoder(api_version))
    _REQUEST_DECODERS[api_key * 65536 + api_version] = entry
    return entry


def _partial(api_key: int, api_version: int, correlation_id: int) -> RequestHeader:
    return RequestHeader(api_key=api_key, api_version=api_version, correlation_id=correlation_id, client_id=None)


def encode_response(request_header: RequestHeader, message: Message) -> bytes:
    """Encode the response to ``request_header``'s request, in that request's version."""
    api_key, version = request_header.api_key, request_header.api_version
    if api_key != message.API_KEY:
        raise EncodeError(f"request was API key {api_key} but the response is a {message.NAME}")
    out = bytearray()
    ResponseHeader(correlation_id=request_header.correlation_id).encode_into(
        out, response_header_version(api_key, version)
    )
    message.encode_into(out, version)
    return bytes(out)


def encode_response_parts(request_header: RequestHeader, message: Message) -> Holes:
    """Like :func:`encode_response`, but ``records`` values that are file regions (objects with
    ``length`` and ``to_bytes()``) are not copied: the result's ``holes`` says where they go."""
    api_key, version = request_header.api_key, request_header.api_version
    out = Holes()
    entry = _RESPONSE_ENCODERS.get(api_key * 65536 + version)
    if entry is None or entry[0] is not type(message):
        if api_key != message.API_KEY:
            raise EncodeError(f"request was API key {api_key} but the response is a {message.NAME}")
        ResponseHeader(correlation_id=request_header.correlation_id).encode_into(
            out, response_header_version(api_key, version)
        )
        message.encode_into(out, version)
        # the same response type at this version again: header and body without the look-ups
        _RESPONSE_ENCODERS[api_key * 65536 + version] = (
            type(message),
            response_header_version(api_key, version) == 1,
            type(message).encoder(version),
        )
        return out
    _cls, flexible_header, encode_body = entry
    out += _i32.pack(request_header.correlation_id)
    if flexible_header:
        out.append(0)  # the response header's empty tagged-field section
    try:
        encode_body(out, message)
    except ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {message.NAME} v{version}: {exc}") from exc
    return out


def decode_response(request_header: RequestHeader, data: Buffer) -> Message:
    """Decode the response to ``request_header``'s request; its correlation id must match."""
    api_key, version = request_header.api_key, request_header.api_version
    header, pos = ResponseHeader.decode_from(data, 0, response_header_version(api_key, version))
    if header.correlation_id != request_header.correlation_id:
        raise CorrelationIdMismatch(
            f"response has correlation id {header.correlation_id}, expected {request_header.correlation_id}"
        )
    return response_class(api_key).decode_from(data, pos, version)[0]
