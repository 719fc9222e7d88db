"""Looking at a request before decoding it.

A server bounds what decoding a request would cost before it decodes it: a Metadata request of
a few megabytes can name a million topics, and decoding (then answering) them would hold the
event loop and memory for seconds.  :func:`request_topic_count` reads the count of a request's
top-level topic array from the raw frame, in a few operations, using the generated table
:data:`~odradek.protocol.messages._inspection.TOPIC_ARRAYS` (the types of the fields before the
array, by API and version); :class:`TopicLimit` refuses a frame naming too many topics, as the
``check`` of a :class:`~odradek.protocol.connection.ServerConnection`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from odradek._varint import decode_uvarint
from odradek.protocol._api import request_header_version
from odradek.protocol.errors import RemoteProtocolError
from odradek.protocol.messages import ApiKey
from odradek.protocol.messages._inspection import TOPIC_ARRAYS

__all__ = ["LIMITED_APIS", "RequestTooLarge", "TopicLimit", "request_topic_count"]

_hh = struct.Struct(">hh")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8, "uuid": 16}

#: the requests whose topic count :class:`TopicLimit` bounds by default: the client requests a
#: broker answers per topic by walking metadata (Produce, Fetch and the inter-broker requests
#: name what they carry, and a follower may fetch every partition it replicates)
LIMITED_APIS = frozenset(
    {ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.DELETE_RECORDS, ApiKey.LIST_OFFSETS}
)


class RequestTooLarge(RemoteProtocolError):
    """A request refused before it is decoded: it names more topics than the server allows."""


def _prefix(api_key: int, version: int) -> tuple[bool, tuple[str, ...]] | None:
    for first, last, flexible, types in TOPIC_ARRAYS.get(api_key, ()):
        if first <= version <= last:
            return flexible, types
    return None


def request_topic_count(payload: bytes | bytearray | memoryview) -> int | None:
    """The length of the request's top-level topic array, read from the raw frame (header and
    body, no size prefix) without decoding it; ``None`` for a request without such an array at
    its version (see ``TOPIC_ARRAYS``), a null array, or bytes that do not parse (the decoder
    then reports them)."""
    try:
        api_key, version = _hh.unpack_from(payload, 0)
        found = _prefix(api_key, version)
        if found is None:
            return None
        flexible, types = found
        header_version = request_header_version(api_key, version)
        pos = 8  # api key, api version, correlation id
        if header_version >= 1:  # client id: a nullable int16-length string in every version
            (n,) = _i16.unpack_from(payload, pos)
            pos += 2 + max(n, 0)
        if header_version >= 2:
            pos = _skip_tagged(payload, pos)
        for t in types:
            size = _FIXED.get(t)
            if size is not None:
                pos += size
            elif flexible:  # a compact string or bytes: length + 1, 0 for null
                n, pos = decode_uvarint(payload, pos)
                pos += max(n - 1, 0)
            else:
                (n,) = (_i16 if t == "string" else _i32).unpack_from(payload, pos)
                pos += 2 if t == "string" else 4
                pos += max(n, 0)
        if flexible:  # a compact array: count + 1, 0 for null
            n, pos = decode_uvarint(payload, pos)
            return n - 1 if n > 0 else None
        (n,) = _i32.unpack_from(payload, pos)
        return n if n >= 0 else None
    except (struct.error, IndexError, ValueError, KeyError):
        return None


def _skip_tagged(payload: bytes | bytearray | memoryview, pos: int) -> int:
    count, pos = decode_uvarint(payload, pos)
    for _ in range(min(count, 64)):
        _tag, pos = decode_uvarint(payload, pos)
        size, pos = decode_uvarint(payload, pos)
        pos += size
    return pos


class TopicLimit:
    """A :class:`~odradek.protocol.connection.ServerConnection` ``check`` refusing, before it is
    decoded, a request of ``apis`` naming more than ``max_topics`` topics (a
    :class:`RequestTooLarge`)."""

    __slots__ = ("apis", "max_topics")

    def __init__(self, max_topics: int, apis: Iterable[int] = LIMITED_APIS) -> None:
        self.max_topics = max_topics
        self.apis = frozenset(apis)

    def __call__(self, payload: bytes | bytearray | memoryview) -> None:
        if len(payload) < 4 or _hh.unpack_from(payload, 0)[0] not in self.apis:
            return
        n = request_topic_count(payload)
        if n is not None and n > self.max_topics:
            api_key, version = _hh.unpack_from(payload, 0)
            raise RequestTooLarge(
                f"{ApiKey(api_key).name} v{version} request names {n} topics, more than "
                f"request.max.topics={self.max_topics} ({len(payload)} bytes, not decoded)"
            )
