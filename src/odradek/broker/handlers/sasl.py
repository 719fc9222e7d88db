"""SaslHandshake (17) v0-1 and SaslAuthenticate (36) v0-2: the SASL exchange of a connection on a
SASL listener (its :class:`~odradek.broker.authentication.Session` decides; see there; after a
v0 handshake the tokens come as bare size-prefixed frames, which the connection hands to the
session itself).  A failed step is answered late: the connection holds the response back for
``connection.failed.authentication.delay.ms``, reading nothing meanwhile, then closes; and
DescribeUserScramCredentials (50) / AlterUserScramCredentials (51), which keep the SCRAM users
(in ZooKeeper's ``/config/users`` or the embedded store, for every broker).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from odradek.broker.dispatch import RequestContext, handles
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from odradek.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from odradek.security import SCRAM_MECHANISMS, ScramCredential
from odradek.security.acl import Operation
from odradek.security.sasl import MAX_SCRAM_ITERATIONS

log = logging.getLogger(__name__)


@handles(ApiKey.SASL_HANDSHAKE, versions=(0, 1))
def sasl_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    session = ctx.session
    out = session.handshake(request.mechanism, ctx.version, ctx.client_host)
    if ctx.version == 0 and not out.error_code:
        session.raw_tokens = True  # v0: the tokens follow as size-prefixed bytes, not SaslAuthenticate
    return SaslHandshakeResponse(error_code=out.error_code, mechanisms=list(session.security.mechanisms))


@handles(ApiKey.SASL_AUTHENTICATE, versions=(0, 2))
def sasl_authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    session = ctx.session
    out = session.authenticate(bytes(request.auth_bytes), ctx.client_host)
    lifetime = session.lifetime_ms if out.completed else 0
    return SaslAuthenticateResponse(
        error_code=out.error_code, error_message=out.message, auth_bytes=out.data, session_lifetime_ms=lifetime
    )


# -- SCRAM credentials (KIP-554) ------------------------------------------------------------------

#: Kafka's ScramMechanism codes
_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_MECHANISM_CODES = {v: k for k, v in _MECHANISMS.items()}


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, versions=(0, 0))
def describe_user_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    """The users' mechanisms and iterations (never salts or keys); no users asked: all of them."""
    R = DescribeUserScramCredentialsResponse
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return R(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=None, results=[])
    stored = ctx.ports.sasl.metadata.image.user_scram
    names = [u.name for u in request.users or ()]
    results = []
    if not names:
        names = sorted(stored)
    counts = Counter(names)
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
            ))
            continue
        creds = stored.get(name)
        if not creds:
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: {name}",
            ))
            continue
        infos = [
            R.CredentialInfo(mechanism=_MECHANISM_CODES[m], iterations=ScramCredential.from_text(t).iterations)
            for m, t in sorted(creds.items()) if m in _MECHANISM_CODES
        ]
        results.append(R.DescribeUserScramCredentialsResult(user=name, error_message=None, credential_infos=infos))
    return R(error_message=None, results=results)


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, versions=(0, 0))
async def alter_user_scram_credentials(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    """Upsert and delete credentials; the client sends the salted password, never the password.
    Kafka's rules: a user with any bad alteration gets that error and none of its changes apply."""
    R = AlterUserScramCredentialsResponse
    if not ctx.authorize_cluster(Operation.ALTER):
        users = dict.fromkeys([*(d.name for d in request.deletions), *(u.name for u in request.upsertions)])
        return R(results=[
            R.AlterUserScramCredentialsResult(
                user=u, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=None
            ) for u in users
        ])
    port = ctx.ports.sasl
    stored = port.metadata.image.user_scram
    errors: dict[str, tuple[int, str]] = {}
    seen: Counter[tuple[str, int]] = Counter(
        [(d.name, d.mechanism) for d in request.deletions] + [(u.name, u.mechanism) for u in request.upsertions]
    )
    order: list[str] = []

    def fail(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    items: list[Any] = [*request.deletions, *request.upsertions]
    for item in items:
        order.append(item.name)
        mech = _MECHANISMS.get(item.mechanism)
        if not item.name:
            fail(item.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            fail(item.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {item.mechanism}")
        elif seen[(item.name, item.mechanism)] > 1:
            fail(item.name, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for d in request.deletions:
        mech = _MECHANISMS.get(d.mechanism)
        if mech is not None and mech not in stored.get(d.name, {}):
            fail(d.name, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    for u in request.upsertions:
        minimum = SCRAM_MECHANISMS.get(_MECHANISMS.get(u.mechanism, ""), ("", 4096))[1]
        if u.iterations < minimum:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: {u.iterations} (at least {minimum})")
        elif u.iterations > MAX_SCRAM_ITERATIONS:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                 f"Too many iterations: {u.iterations} (at most {MAX_SCRAM_ITERATIONS})")
        elif not u.salt or not u.salted_password:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Credential has an empty salt or salted password")
    results = []
    for user in dict.fromkeys(order):
        if user in errors:
            code, message = errors[user]
            results.append(R.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message))
            continue
        creds = dict(stored.get(user, {}))
        for d in request.deletions:
            if d.name == user:
                creds.pop(_MECHANISMS[d.mechanism], None)
        for u in request.upsertions:
            if u.name == user:
                mech = _MECHANISMS[u.mechanism]
                cred = ScramCredential.from_salted_password(mech, bytes(u.salted_password), bytes(u.salt), u.iterations)
                creds[mech] = cred.to_text()
        try:
            await port.credentials.set_user_scram(user, creds)
        except KafkaError as exc:
            results.append(R.AlterUserScramCredentialsResult(user=user, error_code=exc.code, error_message=exc.message))
            continue
        log.info("SCRAM credentials of user %s: %s", user, ", ".join(sorted(creds)) or "none left")
        results.append(R.AlterUserScramCredentialsResult(user=user, error_message=None))
    return R(results=results)
