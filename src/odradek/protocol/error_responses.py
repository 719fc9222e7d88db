"""The answer to a request that failed as a whole (Kafka's ``AbstractRequest.getErrorResponse``).

A handler that raises a Kafka error for a request whose response has no top-level error code
(Produce, Metadata, CreateTopics, ListOffsets, OffsetCommit, Fetch before v7, ...) must still be
answered: Kafka answers every topic, partition, resource or group the request named, with the
error code in each item's error field.  :func:`error_response` builds that answer from the
request; the builders are generated per API from the request's and the response's schemas (see
``tools/codegen/error_responses.py`` for the rules, and the few places where Kafka departs from
them), so a new API gets one without code written for it.
"""

from __future__ import annotations

from typing import Any

from odradek.errors import ErrorCode
from odradek.protocol._schema import Message, _load_codecs
from odradek.protocol.messages import ApiKey, RequestHeader

__all__ = ["error_response"]

_FIND_COORDINATOR = int(ApiKey.FIND_COORDINATOR)


def error_response(
    header: RequestHeader, request: Message, code: ErrorCode | int, message: str | None = None
) -> Message | None:
    """The response to ``request`` (sent with ``header``) failing with ``code``: the top-level
    error code where the response version has one, else every item the request named with the
    error in its error field (and ``message`` in its error message, where there is one).
    ``None`` when Kafka sends no answer at all: a Produce request with ``acks=0`` (the broker
    closes the connection instead, so that the producer notices)."""
    cls = type(request)
    build = cls.__dict__.get("_error_response_")
    if build is None:
        _load_codecs(cls)
        build = cls.__dict__["_error_response_"]
    response: Message | None = build(request, header.api_version, int(code), message)
    if header.api_key == _FIND_COORDINATOR and response is not None:
        _no_node(response, header.api_version)
    return response


def _no_node(response: Any, version: int) -> None:
    """FindCoordinator's error answer names no node (Kafka's ``Node.noNode()``: id -1, port -1), not
    node 0 at port 0, which a client could take for a broker's address."""
    if version < 4:  # one coordinator, at the top level
        response.node_id = response.port = -1
        return
    for c in response.coordinators:
        c.node_id = c.port = -1
