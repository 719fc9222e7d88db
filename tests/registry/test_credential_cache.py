"""The registry remembers a verified user and password for a minute on the broker's clock (SCRAM's
PBKDF2 is slow; Basic authentication sends the password with every request): within the minute
the credentials are not checked again, at the minute and after a change of the user's
credentials they are, and a wrong password is never remembered. On fake time, with no waiting."""

from __future__ import annotations

import asyncio
import base64

import pytest

from odradek._clock import FakeClock
from odradek.registry.errors import RestError
from odradek.registry.http import Request
from odradek.registry.security import REMEMBER_S, RegistrySecurity


class _Users:
    def __init__(self) -> None:
        self.passwords = {"alice": "secret"}
        self.versions = {"alice": 1}
        self.checks = 0

    def check(self, user: str, password: str) -> bool:
        self.checks += 1
        return self.passwords.get(user) == password

    def version(self, user: str) -> object:
        return self.versions.get(user)


def _request(user: str, password: str) -> Request:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return Request("GET", "/subjects", {}, {"authorization": f"Basic {token}"}, b"", "127.0.0.1")


async def _no_sleep(_seconds: float) -> None:
    return None


def test_a_verified_password_is_remembered_for_a_minute_of_the_brokers_clock() -> None:
    clock = FakeClock()
    users = _Users()
    security = RegistrySecurity("BASIC", users, None, failure_delay_s=0, clock=clock, sleep=_no_sleep)

    async def main() -> None:
        caller = await security.authenticate(_request("alice", "secret"))
        assert caller.principal == "User:alice"
        assert users.checks == 1
        clock.advance(int(REMEMBER_S * 1000) - 1)
        await security.authenticate(_request("alice", "secret"))
        assert users.checks == 1, "checked again within the minute"
        clock.advance(1)
        await security.authenticate(_request("alice", "secret"))
        assert users.checks == 2, "not checked again when the minute was up"
        users.versions["alice"] = 2  # the user's SCRAM credentials were altered
        await security.authenticate(_request("alice", "secret"))
        assert users.checks == 3, "a remembered password outlived a change of the credentials"

    asyncio.run(main())


def test_a_wrong_password_is_never_remembered() -> None:
    clock = FakeClock()
    users = _Users()
    security = RegistrySecurity("BASIC", users, None, failure_delay_s=0, clock=clock, sleep=_no_sleep)

    async def main() -> None:
        await security.authenticate(_request("alice", "secret"))
        for _ in range(2):
            with pytest.raises(RestError):
                await security.authenticate(_request("alice", "wrong"))
        assert users.checks == 3, "a refused password was answered from the cache"
        assert security.failures == 2
        await security.authenticate(_request("alice", "secret"))  # the right one is still remembered
        assert users.checks == 3

    asyncio.run(main())
