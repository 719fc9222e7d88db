"""Transactions: list and describe them (Kafka's kafka-transactions.sh list / describe)."""

from __future__ import annotations

from collections.abc import Iterable

from odradek.client._aio import AsyncBrokerConnection
from odradek.client.admin._base import _check, _Pending
from odradek.client.admin._groups import GroupAdmin
from odradek.client.admin.types import Node, TransactionDescription, TransactionListing
from odradek.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from odradek.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse


class TransactionAdmin(GroupAdmin):
    async def list_transactions(
        self, states: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> list[TransactionListing]:
        """Every transactional id the coordinators know (only those in ``states``, e.g.
        ``["Ongoing"]``, when given), sorted: ListTransactions asked of every broker."""
        dl = self._deadline(timeout)
        wanted = list(states or [])
        everyone = -1
        state: _Pending[int, list[TransactionListing]] = _Pending(
            {everyone: None}, lambda n: "list transactions" if n == everyone else f"list transactions on broker {n}"
        )
        Q = ListTransactionsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[int]) -> None:
            v = conn.version_for(Q)
            resp: ListTransactionsResponse = await self._request(conn, Q(state_filters=wanted), v, dl)
            for node in batch:
                if resp.error_code:
                    state.fail(node, resp.error_code)
                else:
                    state.done(node, [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                                      for t in resp.transaction_states])

        async def attempt() -> None:
            if everyone in state.todo:
                md = await self._metadata([], dl)
                state.todo.pop(everyone)
                state.last.pop(everyone, None)
                for b in md.brokers:
                    state.todo[b.node_id] = None
            await self._per_node(state, {n: [n] for n in state.todo}, send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        out = [t for listing in state.results.values() for t in listing]
        return sorted(out, key=lambda t: t.transactional_id)

    async def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, TransactionDescription]:
        """State, producer id and epoch, timeout, start and partitions of each transactional id,
        asked of its coordinator."""
        dl = self._deadline(timeout)
        ids = [transactional_ids] if isinstance(transactional_ids, str) else list(dict.fromkeys(transactional_ids))
        state: _Pending[str, TransactionDescription] = _Pending(
            {t: None for t in ids}, lambda t: f"describe transaction '{t}'"
        )
        nodes: dict[str, Node] = {}
        Q = DescribeTransactionsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            v = conn.version_for(Q)
            resp: DescribeTransactionsResponse = await self._request(conn, Q(transactional_ids=batch), v, dl)
            state.unanswered(batch, {t.transactional_id for t in resp.transaction_states})
            for t in resp.transaction_states:
                if t.transactional_id not in state.todo:
                    continue
                if t.error_code:
                    state.fail(t.transactional_id, t.error_code)
                    continue
                node = nodes.get(t.transactional_id)
                state.done(t.transactional_id, TransactionDescription(
                    t.transactional_id, t.transaction_state, t.producer_id, t.producer_epoch,
                    t.transaction_timeout_ms, t.transaction_start_time_ms, node.id if node is not None else -1,
                    [(d.topic, p) for d in t.topics for p in d.partitions],
                ))

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda t: t, dl, nodes, key_type=1), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {t: state.results[t] for t in ids}
