"""Transactions: list and describe them, the producers of a partition, and aborting a hanging
transaction (Kafka's kafka-transactions.sh list / describe / describe-producers / abort)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from odradek.client.admin._base import _check, _Pending
from odradek.client.admin._groups import GroupAdmin
from odradek.client.admin.types import (
    Node,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from odradek.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from odradek.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from odradek.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from odradek.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from odradek.transport import AsyncBrokerConnection


class TransactionAdmin(GroupAdmin):
    """:class:`AsyncAdmin`'s transaction operations: ``list_transactions``, ``describe_transactions``,
    ``describe_producers`` and ``abort_transaction`` (a hanging transaction's marker, KIP-664)."""

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

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The idempotent and transactional producers each partition's leader knows, with the
        first offset of each one's open transaction (DescribeProducers)."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys((t, int(p)) for t, p in partitions))
        state: _Pending[TopicPartition, list[ProducerState]] = _Pending(
            dict.fromkeys(wanted), lambda tp: f"describe the producers of {tp[0]}-{tp[1]}"
        )
        Q = DescribeProducersRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            by_topic: dict[str, list[int]] = {}
            for topic, partition in batch:
                by_topic.setdefault(topic, []).append(partition)
            req = Q(topics=[Q.TopicRequest(name=t, partition_indexes=ps) for t, ps in by_topic.items()])
            resp: DescribeProducersResponse = await self._request(conn, req, v, dl)
            state.unanswered(batch, {(t.name, p.partition_index) for t in resp.topics for p in t.partitions})
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in state.todo:
                        continue
                    if p.error_code:
                        state.fail(tp, p.error_code, p.error_message)
                        continue
                    state.done(tp, [
                        ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                      s.coordinator_epoch, s.current_txn_start_offset)
                        for s in p.active_producers
                    ])

        async def attempt() -> None:
            await self._per_node(state, await self._leaders(state, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {tp: state.results[tp] for tp in wanted}

    async def abort_transaction(
        self,
        partition: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """Write an ABORT marker for ``producer_id``'s open transaction on one partition, as
        its coordinator would (WriteTxnMarkers to the partition's leader; needs ClusterAction):
        the way out of a hanging transaction, one whose coordinator no longer knows it and which
        holds back the last stable offset.  Take the producer's epochs from
        :meth:`describe_producers`."""
        dl = self._deadline(timeout)
        tp = (partition[0], int(partition[1]))
        state: _Pending[TopicPartition, None] = _Pending({tp: None}, lambda _tp: f"abort the transaction on {tp[0]}-{tp[1]}")
        Q = WriteTxnMarkersRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            marker = Q.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
                topics=[Q.WritableTxnMarkerTopic(name=tp[0], partition_indexes=[tp[1]])],
                coordinator_epoch=coordinator_epoch,
            )
            resp: WriteTxnMarkersResponse = await self._request(conn, Q(markers=[marker]), v, dl)
            answered: dict[TopicPartition, Any] = {
                (t.name, p.partition_index): p for m in resp.markers for t in m.topics for p in t.partitions
            }
            state.unanswered(batch, set(answered))
            p = answered.get(tp)
            if p is not None and tp in state.todo:
                if p.error_code:
                    state.fail(tp, p.error_code)
                else:
                    state.done(tp, None)

        async def attempt() -> None:
            await self._per_node(state, await self._leaders(state, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
