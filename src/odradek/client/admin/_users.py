"""SCRAM users (KIP-554): describe, create or change, and delete their credentials.

The password never leaves the client: it is salted and hashed here (PBKDF2 with the mechanism's
hash, ``iterations`` rounds, a random salt) and only the salted password is sent, as Kafka's
Admin client does."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from odradek.client.admin._base import AdminBase
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from odradek.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from odradek.security import SCRAM_MECHANISMS

__all__ = ["UserAdmin"]

_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_NAMES = {v: k for k, v in _CODES.items()}


def _mechanism(name: str) -> int:
    code = _CODES.get(name.upper())
    if code is None:
        raise ValueError(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")
    return code


class UserAdmin(AdminBase):
    """:class:`AsyncAdmin`'s SCRAM user operations (KIP-554): ``describe_user_scram_credentials``,
    ``alter_user_scram_credentials``."""

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, dict[str, int]]:
        """``{user: {mechanism: iterations}}`` of ``users`` (None: every user with credentials);
        a user without any raises KafkaError RESOURCE_NOT_FOUND."""
        dl = self._deadline(timeout)
        conn = await self._node(None, dl)
        R = DescribeUserScramCredentialsRequest
        req = R(users=None if users is None else [R.UserName(name=u) for u in users])
        resp: DescribeUserScramCredentialsResponse = await self._request(conn, req, 0, dl)
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or "describing SCRAM users")
        out: dict[str, dict[str, int]] = {}
        for r in resp.results:
            if r.error_code:
                raise KafkaError(r.error_code, r.error_message or f"user {r.user}")
            out[r.user] = {_NAMES.get(i.mechanism, str(i.mechanism)): i.iterations for i in r.credential_infos}
        return out

    async def alter_user_scram_credentials(
        self,
        upsert: Iterable[tuple[str, str, str, int]] = (),
        delete: Iterable[tuple[str, str]] = (),
        *,
        timeout: float | None = None,
    ) -> None:
        """Create or change ``(user, mechanism, password, iterations)`` and remove ``(user,
        mechanism)``; the first refusal raises KafkaError with the broker's message."""
        dl = self._deadline(timeout)
        R = AlterUserScramCredentialsRequest
        ups = []
        for user, mechanism, password, iterations in upsert:
            code = _mechanism(mechanism)
            salt = secrets.token_bytes(32)
            hash_name = SCRAM_MECHANISMS[_NAMES[code]][0]
            salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
            ups.append(R.ScramCredentialUpsertion(
                name=user, mechanism=code, iterations=iterations, salt=salt, salted_password=salted
            ))
        dels = [R.ScramCredentialDeletion(name=u, mechanism=_mechanism(m)) for u, m in delete]
        conn = await self._node(None, dl)
        resp: AlterUserScramCredentialsResponse = await self._request(conn, R(deletions=dels, upsertions=ups), 0, dl)
        for r in resp.results:
            if r.error_code:
                raise KafkaError(r.error_code, r.error_message or f"user {r.user}")
        if not resp.results and (ups or dels):
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker answered no user")
