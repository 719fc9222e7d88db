"""Fault scripting on a test broker: where the rules of :mod:`odradek.cluster.faults` are applied.

Only a broker started in test mode has a :class:`FaultInjector` (``odradek serve --test-mode``,
or ``running_broker(test_mode=True)``); every other broker's connections skip it with one
``None`` check.  The connection asks :meth:`FaultInjector.gate` for every request before its
handler runs (the request-dispatch boundary): an injected error is answered without running the
handler, so it writes nothing; a delayed or held request runs its handler later, unchanged.

Besides the rules, the injector carries out the faults that are actions on the broker's state:
closing a client's connections, fencing a transactional producer (an InitProducerId of its id, as
a new instance of the producer would send) and expiring a group member's session (the group
coordinator's own expiry path, as when the session timeout passes).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from odradek._scheduler import Scheduler
from odradek.cluster.faults import FaultRule, FaultScript, api_name, parse_rule
from odradek.errors import ErrorCode, KafkaError

__all__ = ["FaultConnection", "FaultInjector", "Verdict"]

log = logging.getLogger("odradek.faults")


class FaultConnection(Protocol):
    """What the injector needs of a connection: who it is and how to close it."""

    client_id: str | None
    peer: str

    def close(self) -> None: ...


class Verdict:
    """What to do with a request a rule applies to: answer ``error``, close the connection
    (``close``), or run the handler after ``wait`` (a delay or a hold)."""

    __slots__ = ("close", "error", "rule", "wait")

    def __init__(
        self, rule: FaultRule, *, error: KafkaError | None = None, close: bool = False,
        wait: Awaitable[None] | None = None,
    ) -> None:
        self.rule = rule
        self.error = error
        self.close = close
        self.wait = wait


class FaultInjector:
    def __init__(
        self,
        timers: Scheduler,
        connections: Iterable[FaultConnection],
        topic_name: Callable[[uuid.UUID], str | None] | None = None,
        *,
        fence: Callable[[str], Awaitable[Any]] | None = None,
        expire: Callable[[str, str | None], Awaitable[int]] | None = None,
    ) -> None:
        """``connections``: the broker's open connections (for :meth:`drop`); ``topic_name``: a
        topic's name from its id (requests that name topics by id); ``fence`` and ``expire``: the
        broker's coordinators' actions (see :meth:`fence`, :meth:`expire_member`)."""
        self.timers = timers
        self.script = FaultScript()
        self._connections = connections
        self._topic_name = topic_name
        self._fence = fence
        self._expire = expire
        # hold rules' releases: rule id -> future set when the rule is cleared
        self._held: dict[int, asyncio.Future[None]] = {}

    # -- the dispatch boundary -----------------------------------------------------------------
    def gate(self, conn: FaultConnection, key: int, version: int, client_id: str | None, correlation_id: int,
             request: Any) -> Verdict | None:
        """Record the request; the verdict of the rule that applies to it (None: handle it)."""
        conn.client_id = client_id
        script = self.script
        script.received.record(key, version, client_id, request)
        if not script.rules:
            return None
        rule = script.match(key, client_id, request, self._topic_name, correlation_id)
        if rule is None:
            return None
        name = api_name(key)
        if rule.kind in ("error", "offline"):
            assert rule.error is not None
            log.info("fault rule %d: %s request %d from %s answered %s (not handled)",
                     rule.id, name, correlation_id, conn.peer, rule.error.name)
            return Verdict(rule, error=KafkaError(rule.error, f"injected by fault rule {rule.id}"))
        if rule.kind == "drop":
            log.info("fault rule %d: closing %s's connection %s at its %s request", rule.id, client_id, conn.peer, name)
            return Verdict(rule, close=True)
        if rule.kind == "delay":
            return Verdict(rule, wait=self.timers.sleep(rule.delay_ms))
        return Verdict(rule, wait=self._hold(rule))  # hold

    async def _hold(self, rule: FaultRule) -> None:
        released = self._held.get(rule.id)
        if released is None:
            released = self._held[rule.id] = asyncio.get_running_loop().create_future()
        await asyncio.shield(released)

    # -- arming and clearing -------------------------------------------------------------------
    def arm(self, spec: object) -> FaultRule:
        """Arm a rule from its data (see :func:`~odradek.cluster.faults.parse_rule`)."""
        rule = self.script.arm(parse_rule(spec))
        log.info("fault rule %d armed: %s", rule.id, rule.describe())
        return rule

    def clear(self, rule_id: int | None = None, *, kind: str | None = None) -> int:
        """Clear one rule, a kind of rule, or all; held requests go on.  The count cleared."""
        removed = self.script.clear(rule_id, kind=kind)
        ids = {r.id for r in removed}
        if rule_id is not None:
            ids.add(rule_id)  # a hold rule used up by its count still holds its requests
        for rid, released in list(self._held.items()):
            if (rule_id is None and kind in (None, "hold")) or rid in ids:
                del self._held[rid]
                if not released.done():
                    released.set_result(None)
        if removed:
            log.info("fault rules cleared: %s", ", ".join(str(r.id) for r in removed))
        return len(removed)

    def reset(self) -> None:
        """Clear every rule and forget what was received and injected."""
        self.clear()
        self.script.injected.clear()
        self.script.received.clear()

    # -- actions -------------------------------------------------------------------------------
    def drop(self, client_id: str | None = None) -> int:
        """Close the open connections of ``client_id`` (every client's: None); the count."""
        closed = 0
        for conn in list(self._connections):
            if client_id is None or conn.client_id == client_id:
                conn.close()
                closed += 1
        log.info("fault: closed %d connection(s) of %s", closed, client_id or "every client")
        return closed

    async def fence(self, transactional_id: str) -> None:
        """Fence the producer of ``transactional_id``: its epoch is bumped (and an open
        transaction of it aborted), as when a new instance of the producer starts; the fenced
        producer's next request gets PRODUCER_FENCED or INVALID_PRODUCER_EPOCH from the broker."""
        if self._fence is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no transaction coordinator")
        await self._fence(transactional_id)
        log.info("fault: fenced the producer of transactional id %r", transactional_id)

    async def expire_member(self, group_id: str, member_id: str | None = None) -> int:
        """Expire the session of a member of ``group_id`` (every member: None), as when its
        session timeout passes; the count expired."""
        if self._expire is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no group coordinator")
        count = await self._expire(group_id, member_id)
        log.info("fault: expired %d member session(s) of group %r", count, group_id)
        return count

    def describe(self) -> dict[str, Any]:
        received = self.script.received
        return {**self.script.describe(), "received": dict(received.per_api)}
