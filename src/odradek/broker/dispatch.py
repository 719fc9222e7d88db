"""Request dispatch: a registry of handlers per API key, and the versions the broker advertises.

A handler is ``async def handler(ctx, request) -> response | None`` registered with
``@handles(ApiKey.X, versions=(lo, hi))``; ``None`` means "no response" (``acks=0`` produce).
A hot handler may instead be a plain function that returns the response (or ``None``) when it
can answer at once, and when it must wait a coroutine giving it or a :class:`Deferred` (a wait
driven by callbacks, with no task): the common request then costs no coroutine at all.  Either
way the server runs a handler up to its first wait right away.
The ApiVersions answer is derived from this registry, so an API is advertised exactly when it
has a handler, at exactly the versions the handler accepts.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.broker import refusals
from odradek.broker.purgatory import Deferred
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey, Message, RequestHeader
from odradek.security.acl import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.authentication import Session
    from odradek.broker.ports import Ports

__all__ = [
    "HANDLERS", "Deferred", "Handler", "RequestContext", "SyncHandler", "handles", "require_cluster", "supported_versions",
]


@dataclass(slots=True)
class RequestContext:
    """One request: its header, where it came from, and the ports of the handlers (each handler
    uses its own area's: ``ctx.ports.produce``, ``ctx.ports.groups``...)."""

    ports: Ports
    header: RequestHeader
    client_host: str
    listener: str
    #: who the connection is (its principal) and its SASL state
    session: Session

    @property
    def version(self) -> int:
        return self.header.api_version

    def authorize(
        self, op: Operation, rtype: ResourceType, name: str, *, log_denied: bool = True, log_allowed: bool = True
    ) -> bool:
        """Whether this request's principal may do ``op`` on the resource (always, without an
        authorizer); the decision goes to the audit log."""
        authorizer = self.ports.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize(
            self.session.principal_name, self.client_host, op, rtype, name, self.header.api_key,
            log_denied=log_denied, log_allowed=log_allowed,
        )

    def authorize_cluster(self, op: Operation, *, log_denied: bool = True) -> bool:
        return self.authorize(op, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    def authorize_any(self, op: Operation, rtype: ResourceType) -> bool:
        """Whether the principal may do ``op`` on some resource of ``rtype`` (Kafka's
        ``authorizeByResourceType``)."""
        authorizer = self.ports.authorizer
        return authorizer is None or authorizer.authorize_any(self.session.principal_name, self.client_host, op, rtype)


def require_cluster(ctx: RequestContext, op: Operation) -> None:
    """Raise CLUSTER_AUTHORIZATION_FAILED (the whole request's answer) unless the principal may
    do ``op`` on the cluster."""
    if not ctx.authorize_cluster(op):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{op.title} on the cluster is not authorized")



Handler = Callable[[RequestContext, Any], Awaitable[Message | None]]
#: a plain-function handler: the response now, or a coroutine or Deferred that gives it
SyncHandler = Callable[[RequestContext, Any], "Message | Coroutine[Any, Any, Message | None] | Deferred | None"]


@dataclass(frozen=True, slots=True)
class _Entry:
    min_version: int
    max_version: int
    handler: Callable[[RequestContext, Any], Any]
    sync: bool  # a SyncHandler (else ``async def``)


HANDLERS: dict[int, _Entry] = {}
_H = TypeVar("_H", bound=Callable[..., Any])


def handles(api_key: ApiKey, versions: tuple[int, int]) -> Callable[[_H], _H]:
    """Register a handler; the refusals of the APIs in :data:`~odradek.broker.refusals.LOGGED_APIS`
    are logged by a wrapper around it (the function itself is returned unchanged)."""

    def register(fn: _H) -> _H:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for {api_key.name}")
        sync = not inspect.iscoroutinefunction(fn)
        handler: Callable[[RequestContext, Any], Any] = fn
        if not sync and api_key in refusals.LOGGED_APIS:
            handler = refusals.logged(ApiKey(api_key), fn)
        HANDLERS[int(api_key)] = _Entry(versions[0], versions[1], handler, sync)
        return fn

    return register


def supported_versions() -> dict[int, tuple[int, int]]:
    return {k: (e.min_version, e.max_version) for k, e in sorted(HANDLERS.items())}
