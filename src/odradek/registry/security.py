"""Who calls the registry, and what they may do.

**Authentication** (``schema.registry.authentication.method``): ``NONE`` — every caller is
``User:ANONYMOUS``; ``BASIC`` — every request but the root needs HTTP Basic credentials of one of
the broker's own users: a SASL/PLAIN user of a listener's JAAS config, or a user with SCRAM
credentials (either mechanism).  Unset, the registry uses ``BASIC`` as soon as the broker is
secured (a SASL listener or an authorizer) and ``NONE`` otherwise.  A request without credentials
gets 401 and a ``WWW-Authenticate`` challenge; wrong credentials get 401 after
``connection.failed.authentication.delay.ms``, as a failed SASL authentication does, and the
failure is logged (the user name, never the password).  A verified user and password are
remembered for a minute (a keyed hash of the password, never the password), so that checking a
SCRAM password's PBKDF2 is not paid on every request.

**Authorization**, when the broker runs an authorizer, uses Kafka's ACLs on the topic a subject
names (``TopicNameStrategy``: subject ``orders-value`` or ``orders-key`` is topic ``orders``; any
other subject names the topic of its own name, so that prefixed ACLs cover ``RecordNameStrategy``
subjects):

==========================================================  =================================
request                                                     needs
==========================================================  =================================
read a subject's versions, schemas, config, mode; lookup;   DESCRIBE on the topic (READ or
compatibility checks; ``/schemas/ids/{id}`` (any subject    WRITE imply it)
holding the id)
register a schema                                           WRITE on the topic
delete a version or a subject                               DELETE on the topic
change a subject's config or mode                           ALTER_CONFIGS on the topic
read the global config or mode                              DESCRIBE_CONFIGS on the cluster
change the global config or mode                            ALTER_CONFIGS on the cluster
==========================================================  =================================

Listings (``/subjects``, ``/schemas``, an id's subjects) show only the subjects the caller may
describe; a denied request gets 403 (error code 40301).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from odradek._clock import Clock, SystemClock
from odradek.registry.errors import RestError
from odradek.registry.http import Request

__all__ = ["ANONYMOUS", "Caller", "Credentials", "RegistryAuthorizer", "RegistrySecurity", "topic_of"]

log = logging.getLogger("odradek.registry.auth")

ANONYMOUS = "User:ANONYMOUS"
#: how long a verified user and password are remembered
REMEMBER_S = 60.0
REMEMBERED = 10000


def topic_of(subject: str) -> str:
    """The topic whose ACLs govern ``subject`` (see the module docstring)."""
    for suffix in ("-value", "-key"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


class Credentials(Protocol):
    """The broker's users: ``check(user, password)`` says whether they match (it may be slow:
    PBKDF2 for SCRAM); ``version(user)`` changes when the user's credentials do."""

    def check(self, user: str, password: str) -> bool: ...

    def version(self, user: str) -> object: ...


class RegistryAuthorizer(Protocol):
    """The broker's ACL decisions: ``allowed(principal, host, operation, resource_type, name)``
    with Kafka's names (``DESCRIBE``, ``TOPIC``...)."""

    def allowed(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str
    host: str


class RegistrySecurity:
    """Authentication and authorization of the registry's requests."""

    def __init__(
        self,
        method: str,
        credentials: Credentials | None,
        authorizer: RegistryAuthorizer | None,
        *,
        failure_delay_s: float,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.method = method
        self.credentials = credentials
        self.authorizer = authorizer
        self.failure_delay_s = failure_delay_s
        #: the broker's clock: when a user's credentials were last verified
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.sleep = sleep
        self._key = secrets.token_bytes(32)
        #: (user, keyed hash of the password) -> (when verified, the credentials' version)
        self._verified: dict[tuple[str, bytes], tuple[float, object]] = {}
        self.failures = 0

    @property
    def authenticating(self) -> bool:
        return self.method == "BASIC"

    async def authenticate(self, request: Request) -> Caller:
        """The caller of ``request``; RestError 401 when it must authenticate and did not."""
        if not self.authenticating:
            return Caller(ANONYMOUS, request.peer)
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.strip().partition(" ")
        if not header or scheme.lower() != "basic":
            raise RestError.unauthorized()
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            await self._failed(request, "?", "the Authorization header is not Basic credentials")
            raise RestError.unauthorized() from None
        user, sep, password = decoded.partition(":")
        if not sep or not user:
            await self._failed(request, user or "?", "the credentials have no user name")
            raise RestError.unauthorized()
        if not await self._verify(user, password):
            await self._failed(request, user, "invalid credentials")
            raise RestError.unauthorized()
        return Caller(f"User:{user}", request.peer)

    async def _verify(self, user: str, password: str) -> bool:
        if self.credentials is None:
            return False
        digest = hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest()
        key = (user, digest)
        now = self.clock.monotonic_ms() / 1000
        version = self.credentials.version(user)
        hit = self._verified.get(key)
        if hit is not None and now - hit[0] < REMEMBER_S and hit[1] == version:
            return True
        ok = await asyncio.to_thread(self.credentials.check, user, password)
        if ok:
            if len(self._verified) >= REMEMBERED:
                self._verified.clear()
            self._verified[key] = (now, version)
        else:
            self._verified.pop(key, None)
        return ok

    async def _failed(self, request: Request, user: str, reason: str) -> None:
        self.failures += 1
        log.info("Failed authentication with /%s on the schema registry (user %s: %s)", request.peer, user[:100], reason)
        if self.failure_delay_s > 0:
            await self.sleep(self.failure_delay_s)

    # -- authorization -------------------------------------------------------------------------

    @property
    def authorizing(self) -> bool:
        return self.authorizer is not None

    def may(self, caller: Caller, operation: str, subject: str | None) -> bool:
        """Whether ``caller`` may do ``operation`` on ``subject``'s topic (None: on the cluster)."""
        if self.authorizer is None:
            return True
        if subject is None:
            return self.authorizer.allowed(caller.principal, caller.host, operation, "CLUSTER", "kafka-cluster")
        return self.authorizer.allowed(caller.principal, caller.host, operation, "TOPIC", topic_of(subject))

    def require(self, caller: Caller, operation: str, subject: str | None) -> None:
        if not self.may(caller, operation, subject):
            what = f"Subject: {subject}" if subject is not None else "Cluster: kafka-cluster"
            raise RestError.forbidden(f"User is denied operation {operation.title()} on {what}")
