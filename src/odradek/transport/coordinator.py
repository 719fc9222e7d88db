"""Finding the coordinator of a group or a transactional id (FindCoordinator), once for everyone.

:func:`find_coordinators` asks one broker about several keys: one batched request from v4 on
(KIP-699), one request per key before, pipelined on the connection.  :func:`coordinator` finds
the coordinator of one key and connects to it, asking again (after the cluster's retry backoff)
while the answer is retriable — COORDINATOR_NOT_AVAILABLE while ``__consumer_offsets`` /
``__transaction_state`` is created or its leader moves, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS
— or the broker asked cannot be reached, until a deadline.  The group member, the transactional
producer and the admin client's group operations all find coordinators here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

from ._ops import Call, Calls, Connect, Procedure, Sleep

if TYPE_CHECKING:
    from .cluster import ClusterView
    from .session import Session

C = TypeVar("C", bound="Session")

__all__ = ["GROUP", "TRANSACTION", "CoordinatorAnswer", "coordinator", "find_coordinators"]

log = logging.getLogger(__name__)

#: FindCoordinator key types
GROUP, TRANSACTION = 0, 1
#: the first FindCoordinator version that asks about several keys at once (KIP-699)
_BATCHED = 4


@dataclass(frozen=True, slots=True)
class CoordinatorAnswer:
    """One key's answer: the coordinator's id and address, or an error code (and the broker's
    message, from v1 on)."""

    key: str
    error_code: int
    error_message: str | None
    node_id: int
    host: str
    port: int


# conn: either face's connection (Any: see Call.conn)
def find_coordinators(
    conn: Any, keys: Sequence[str], key_type: int = GROUP, timeout: float | None = None
) -> Procedure[list[CoordinatorAnswer]]:
    """Ask ``conn``'s broker for the coordinators of ``keys`` (one attempt); the answers in the
    broker's order (a key the broker left out has none)."""
    Q = FindCoordinatorRequest
    v = conn.version_for(Q)
    if v >= _BATCHED:
        resp: FindCoordinatorResponse = yield Call(Q(key_type=key_type, coordinator_keys=list(keys)), v, timeout, conn)
        return [CoordinatorAnswer(c.key, c.error_code, c.error_message, c.node_id, c.host, c.port) for c in resp.coordinators]
    resps: list[FindCoordinatorResponse] = yield Calls(
        tuple(Call(Q(key=k, key_type=key_type), v, timeout, conn) for k in keys)
    )
    return [
        CoordinatorAnswer(k, r.error_code, r.error_message if v >= 1 else None, r.node_id, r.host, r.port)
        for k, r in zip(keys, resps)
    ]


def coordinator(
    view: ClusterView[C], key: str, key_type: int = GROUP, *, deadline: float, what: str | None = None
) -> Procedure[C]:
    """The connection to ``key``'s coordinator, retrying until ``deadline`` (``time.monotonic()``)
    as the module docstring says; a non-retriable answer raises its KafkaError at once, running
    out of time COORDINATOR_NOT_AVAILABLE."""
    what = what or f"{'group' if key_type == GROUP else 'transactional id'} {key}"
    while True:
        try:
            conn = yield Connect(None)
            answers = yield from find_coordinators(conn, [key], key_type)
            a = next((a for a in answers if a.key == key), None)
            if a is None:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"finding the coordinator of {what}: no answer")
            if a.error_code == 0:
                # the coordinator is a broker of the metadata; remember its address in case the
                # cached broker list is older than the answer
                view.brokers.setdefault(a.node_id, (a.host, a.port))
                found: C = yield Connect(a.node_id)
                return found
            err = ErrorCode.of(a.error_code)
            if not err.retriable:
                raise KafkaError(err, f"finding the coordinator of {what}")
            log.debug("coordinator of %s: %s; asking again", what, err.name)
        except (ConnectionError, TimeoutError) as exc:
            log.debug("coordinator lookup for %s failed: %s", what, exc)
        if time.monotonic() > deadline:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for {what}")
        yield Sleep(view.retry_backoff_ms / 1000)
