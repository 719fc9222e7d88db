"""The one mechanism behind both faces of the transport: an operation made of several round trips
is written once, as a generator of :data:`Step` s, and run by either driver.

A procedure yields what it needs done — a request answered (:class:`Call`, :class:`Calls`), a
connection of the cluster to a broker (:class:`Connect`), a new connection opened (:class:`Open`)
or connections closed (:class:`Close`), a pause (:class:`Sleep`) — and
gets the result sent back in, or the failure raised at the ``yield``.  :func:`drive` does the
steps on an asyncio event loop, :func:`drive_blocking` on blocking sockets in the caller's thread.
The handshake of a connection (ApiVersions, SASL), a metadata refresh, waiting for a topic,
finding a coordinator and connecting to any broker are such procedures, so the asyncio clients,
the broker's channels and the blocking face (the CLI, the Spark executors) share one
implementation of each and differ only in the loop that moves the bytes::

    def handshake(self) -> Procedure[None]:
        resp = yield Call(ApiVersionsRequest(), 3)
        ...

    await drive(conn.handshake(), conn=conn)      # asyncio
    drive_blocking(conn.handshake(), conn=conn)   # blocking
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from odradek.protocol import Message

__all__ = ["Call", "Calls", "Close", "Connect", "Open", "Procedure", "Sleep", "Step", "drive", "drive_blocking"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Call:
    """Send ``message`` and wait for its response, which the step returns.

    ``version`` None: the highest version both sides support; ``timeout`` None: the
    connection's request timeout; ``conn`` None: the connection the procedure runs on."""

    message: Message
    version: int | None = None
    timeout: float | None = None
    #: Any: a procedure is written once for both faces, so this is an asynchronous connection
    #: under :func:`drive` and a blocking one under :func:`drive_blocking` (likewise ``conn`` and
    #: ``cluster`` of the drivers, and the connections of :class:`Close`)
    conn: Any = None


@dataclass(frozen=True, slots=True)
class Calls:
    """Several requests pipelined (all written before the first answer is read); returns their
    responses in order.  The first failure is raised."""

    calls: tuple[Call, ...]


@dataclass(frozen=True, slots=True)
class Connect:
    """The cluster's connection to broker ``node_id`` (None: to any broker), opened if needed;
    returns it."""

    node_id: int | None


@dataclass(frozen=True, slots=True)
class Open:
    """A new connection to ``host:port``, its handshake done (``node_id`` -1: a bootstrap server
    whose id is not known yet); returns it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Close:
    """Close these connections."""

    conns: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` (a retry's backoff)."""

    seconds: float


Step = Call | Calls | Connect | Open | Close | Sleep
#: an operation of several steps, returning ``R`` (what each step gives back depends on the step:
#: a response, whose class depends on the request, a list of them, a connection, or None)
Procedure = Generator[Step, Any, R]


async def drive(proc: Procedure[R], *, conn: Any = None, cluster: Any = None) -> R:
    """Run ``proc`` on the running event loop: ``conn`` answers the calls that name no connection,
    ``cluster`` (an :class:`~odradek.transport.AsyncCluster`) connects to brokers."""
    value: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                step = proc.send(value) if error is None else proc.throw(error)
            except StopIteration as stop:
                result: R = stop.value
                return result
            value, error = None, None
            try:
                value = await _step(step, conn, cluster)
            except Exception as exc:  # raised inside the procedure; a cancellation ends it
                error = exc
    finally:
        proc.close()


async def _step(step: Step, conn: Any, cluster: Any) -> Any:
    if isinstance(step, Call):
        return await (step.conn or conn).request(step.message, step.version, step.timeout)
    if isinstance(step, Calls):
        return list(await asyncio.gather(*(
            (c.conn or conn).request(c.message, c.version, c.timeout) for c in step.calls
        )))
    if isinstance(step, Connect):
        return await (cluster.any_connection() if step.node_id is None else cluster.connection(step.node_id))
    if isinstance(step, Open):
        return await cluster.open(step.node_id, step.host, step.port)
    if isinstance(step, Close):
        for c in step.conns:
            await c.close()
        return None
    await asyncio.sleep(step.seconds)
    return None


def drive_blocking(proc: Procedure[R], *, conn: Any = None, cluster: Any = None) -> R:
    """Run ``proc`` in this thread over blocking connections (as :func:`drive`; ``cluster`` a
    :class:`~odradek.transport.Cluster`)."""
    value: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                step = proc.send(value) if error is None else proc.throw(error)
            except StopIteration as stop:
                result: R = stop.value
                return result
            value, error = None, None
            try:
                value = _step_blocking(step, conn, cluster)
            except Exception as exc:
                error = exc
    finally:
        proc.close()


def _step_blocking(step: Step, conn: Any, cluster: Any) -> Any:
    if isinstance(step, Call):
        return (step.conn or conn).request(step.message, step.version, step.timeout)
    if isinstance(step, Calls):
        targets = [c.conn or conn for c in step.calls]
        for c, target in zip(step.calls, targets):
            target.send(c.message, c.version)
        return [target.receive(c.timeout) for c, target in zip(step.calls, targets)]
    if isinstance(step, Connect):
        return cluster.any_connection() if step.node_id is None else cluster.connection(step.node_id)
    if isinstance(step, Open):
        return cluster.open(step.node_id, step.host, step.port)
    if isinstance(step, Close):
        for c in step.conns:
            c.close()
        return None
    time.sleep(step.seconds)
    return None
