"""Request dispatch: a registry of handlers per API key, and the versions the broker advertises.

A handler is ``async def handler(ctx, request) -> response | None`` registered with
``@handles(ApiKey.X, versions=(lo, hi))``; ``None`` means "no response" (``acks=0`` produce).
The ApiVersions answer is derived from this registry, so an API is advertised exactly when it
has a handler, at exactly the versions the handler accepts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol import ApiKey, Message, RequestHeader

if TYPE_CHECKING:
    from odradek.broker.app import Broker

__all__ = ["HANDLERS", "Handler", "RequestContext", "handles", "supported_versions"]


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    client_host: str
    listener: str

    @property
    def version(self) -> int:
        return self.header.api_version


Handler = Callable[[RequestContext, Any], Awaitable[Message | None]]


@dataclass(frozen=True, slots=True)
class _Entry:
    min_version: int
    max_version: int
    handler: Handler


HANDLERS: dict[int, _Entry] = {}


def handles(api_key: ApiKey, versions: tuple[int, int]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for {api_key.name}")
        HANDLERS[int(api_key)] = _Entry(versions[0], versions[1], fn)
        return fn

    return register


def supported_versions() -> dict[int, tuple[int, int]]:
    return {k: (e.min_version, e.max_version) for k, e in sorted(HANDLERS.items())}
