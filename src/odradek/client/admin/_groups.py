"""Consumer groups: list, describe, offsets, lag, delete, alter offsets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from odradek.client.admin._base import (
    _GROUP_MESSAGES,
    _GROUP_STATES,
    K,
    T,
    _check,
    _consumer_group_description,
    _Deadline,
    _error,
    _group_description,
    _partition_message,
    _Pending,
    _rest,
    _retriable,
    _settle_partitions,
)
from odradek.client.admin._records import RecordAdmin
from odradek.client.admin.types import (
    AdminError,
    GroupDescription,
    GroupListing,
    MemberDescription,
    Node,
    OffsetAndMetadata,
    PartitionLag,
    TopicPartition,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from odradek.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from odradek.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from odradek.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from odradek.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from odradek.transport import AsyncBrokerConnection


class GroupAdmin(RecordAdmin):
    """:class:`AsyncAdmin`'s consumer-group operations, sent to each group's coordinator:
    ``list_groups``, ``describe_groups``, ``list_group_offsets``, ``group_lag`` (which asks the
    partitions' end offsets through :class:`RecordAdmin`), ``delete_groups``,
    ``alter_group_offsets``, ``delete_group_offsets``."""

    async def _find_coordinators(
        self, groups: list[str], dl: _Deadline, key_type: int = 0
    ) -> dict[str, Node | KafkaError]:
        """Each group's (``key_type`` 1: transactional id's) coordinator, or the error finding it,
        asked of any broker: one FindCoordinator for all of them from v4, one per key before."""
        what = "group" if key_type == 0 else "transactional id"
        conn = await self._node(None, dl)
        answers = await self._cluster.find_coordinators(conn, groups, key_type, self._request_time(dl))
        found: dict[str, Node | KafkaError] = {}
        for a in answers:
            if a.key not in groups:
                continue
            if a.error_code:
                found[a.key] = _error(a.error_code, f"find the coordinator of {what} '{a.key}'", a.error_message)
            else:
                # the coordinator is a broker of the metadata; remember its address in case the
                # cached broker list is older than the answer
                self._cluster.brokers.setdefault(a.node_id, (a.host, a.port))
                found[a.key] = Node(a.node_id, a.host, a.port)
        for g in groups:
            if g not in found:
                found[g] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"find the coordinator of {what} '{g}': no answer")
        return found

    async def _coordinators(
        self,
        state: _Pending[K, T],
        group_of: Callable[[K], str],
        dl: _Deadline,
        nodes: dict[str, Node] | None = None,
        key_type: int = 0,
    ) -> dict[int | None, list[K]]:
        """Group the pending items by the coordinator of their group; items whose coordinator
        cannot be found get that error (retried when retriable: the next attempt finds again).
        ``nodes`` receives each group's coordinator."""
        groups = sorted({group_of(k) for k in state.todo})
        found = await self._find_coordinators(groups, dl, key_type) if groups else {}
        by_node: dict[int | None, list[K]] = {}
        for key in list(state.todo):
            c = found[group_of(key)]
            if isinstance(c, KafkaError):
                state.failed(key, c)
                continue
            if nodes is not None:
                nodes[group_of(key)] = c
            by_node.setdefault(c.id, []).append(key)
        return by_node

    async def list_groups(
        self, states: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> list[GroupListing]:
        """Every group of the cluster (only those in ``states``, e.g. ``["Stable", "Empty"]``, when
        given), sorted by id: ListGroups is asked of every broker and the answers merged.  A broker
        that keeps failing makes this raise :class:`AdminError` keyed by broker id, whose
        ``results`` hold the other brokers' listings."""
        dl = self._deadline(timeout)
        wanted = None
        if states is not None:
            names = [states] if isinstance(states, str) else list(states)
            wanted = [_GROUP_STATES.get(s.lower().replace("_", "").replace("-", ""), s) for s in names]
        everyone = -1  # until the metadata names the brokers
        state: _Pending[int, list[GroupListing]] = _Pending(
            {everyone: None}, lambda n: "list groups" if n == everyone else f"list groups on broker {n}"
        )
        Q = ListGroupsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[int]) -> None:
            v = conn.version_for(Q, maximum=4)  # v5's type filter is not needed
            if wanted and v < 4:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot filter groups by state (ListGroups < v4)")
            resp: ListGroupsResponse = await self._request(conn, Q(states_filter=wanted or []), v, dl)
            for node in batch:
                if resp.error_code:
                    state.fail(node, resp.error_code)
                else:
                    state.done(
                        node,
                        [GroupListing(g.group_id, g.protocol_type, g.group_state if v >= 4 else None) for g in resp.groups],
                    )

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
        merged: dict[str, GroupListing] = {}
        for node in sorted(state.results):
            for g in state.results[node]:
                merged.setdefault(g.group_id, g)
        return [merged[g] for g in sorted(merged)]

    async def describe_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        """State, protocol type, assignor, coordinator and members of each group; a member's
        ``assignment`` is the list of its ``(topic, partition)`` (decoded from the consumer
        protocol; empty while the group rebalances).  As in Kafka, a group that does not exist is
        described as ``Dead`` with no members.  A group of the consumer protocol (KIP-848), which
        DescribeGroups does not describe, is described by ConsumerGroupDescribe: ``group_type``
        ``consumer``, its epochs, and each member's epoch and target assignment.  For committed
        offsets see :meth:`list_group_offsets`, for the lag :meth:`group_lag`."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys([group_ids] if isinstance(group_ids, str) else group_ids))
        state: _Pending[str, GroupDescription] = _Pending({g: None for g in wanted}, lambda g: f"describe group '{g}'")
        coordinators: dict[str, Node] = {}
        Q = DescribeGroupsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            v = conn.version_for(Q)
            resp: DescribeGroupsResponse = await self._request(conn, Q(groups=batch), v, dl)
            state.unanswered(batch, {g.group_id for g in resp.groups})
            for g in resp.groups:
                if g.group_id not in state.todo:
                    continue
                if g.error_code:
                    state.fail(g.group_id, g.error_code, _GROUP_MESSAGES.get(ErrorCode.of(g.error_code)))
                elif g.group_state == "Dead" and conn.versions.get(ConsumerGroupDescribeRequest.API_KEY):
                    await consumer_groups(conn, g.group_id, g)
                else:
                    state.done(g.group_id, _group_description(g, coordinators.get(g.group_id)))

        async def consumer_groups(conn: AsyncBrokerConnection, gid: str, dead: Any) -> None:
            """A group DescribeGroups calls Dead may be a consumer group (KIP-848)."""
            C = ConsumerGroupDescribeRequest
            resp = await self._request(conn, C(group_ids=[gid]), conn.version_for(C), dl)
            for cg in resp.groups:
                if cg.group_id != gid or gid not in state.todo:
                    continue
                if cg.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                    state.done(gid, _group_description(dead, coordinators.get(gid)))
                elif cg.error_code:
                    state.fail(gid, cg.error_code, cg.error_message or _GROUP_MESSAGES.get(ErrorCode.of(cg.error_code)))
                else:
                    state.done(gid, _consumer_group_description(cg, coordinators.get(gid)))

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda g: g, dl, coordinators), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {g: state.results[g] for g in wanted}

    async def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets: of every partition it committed (``partitions`` None),
        or of the partitions given; partitions without a committed offset are left out.  Each is
        ``(offset, metadata, leader_epoch)``.  ``require_stable`` waits for pending transactional
        commits (OffsetFetch v7+)."""
        dl = self._deadline(timeout)
        parts = None if partitions is None else list(dict.fromkeys((t, int(p)) for t, p in partitions))
        state: _Pending[str, dict[TopicPartition, OffsetAndMetadata]] = _Pending(
            {group_id: None}, lambda g: f"fetch the offsets of group '{g}'"
        )
        partition_errors: dict[TopicPartition, KafkaError] = {}
        Q = OffsetFetchRequest

        async def send(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            v = conn.version_for(Q)
            if parts is None and v < 2:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot list all of a group's offsets (OffsetFetch < v2)")
            if require_stable and v < 7:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot wait for stable offsets (OffsetFetch < v7)")
            by_topic: dict[str, list[int]] = {}
            for t, p in parts or ():
                by_topic.setdefault(t, []).append(p)
            if v >= 8:
                topics8 = None if parts is None else [Q.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
                req = Q(groups=[Q.OffsetFetchRequestGroup(group_id=group_id, topics=topics8)], require_stable=require_stable)
            else:
                topics = None if parts is None else [Q.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
                req = Q(group_id=group_id, topics=topics, require_stable=require_stable)
            resp: OffsetFetchResponse = await self._request(conn, req, v, dl)
            answered: list[tuple[str, Any]]
            if v >= 8:
                g = next((g for g in resp.groups if g.group_id == group_id), None)
                if g is None:
                    state.fail(group_id, ErrorCode.UNKNOWN_SERVER_ERROR, "no result in the response")
                    return
                code = g.error_code
                answered = [(t.name, p) for t in g.topics for p in t.partitions]
            else:
                code = resp.error_code if v >= 2 else 0
                answered = [(t.name, p) for t in resp.topics for p in t.partitions]
            if code:
                state.fail(group_id, code, _GROUP_MESSAGES.get(ErrorCode.of(code)))
                return
            offsets: dict[TopicPartition, OffsetAndMetadata] = {}
            errors: dict[TopicPartition, KafkaError] = {}
            for topic, p in answered:
                tp = (topic, p.partition_index)
                if p.error_code:
                    exc = _error(p.error_code, f"fetch the offset of {topic}-{p.partition_index} for group '{group_id}'")
                    if _retriable(exc):  # e.g. the coordinator moved, or an unstable commit
                        state.failed(group_id, exc)
                        return
                    errors[tp] = exc
                elif p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch if v >= 5 else -1
                    offsets[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", epoch)
            partition_errors.clear()
            partition_errors.update(errors)
            state.done(group_id, dict(sorted(offsets.items())))

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda g: g, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        result = state.results[group_id]
        _check(partition_errors, result)
        return result

    async def group_lag(
        self, group_id: str, *, isolation_level: str = "read_uncommitted", timeout: float | None = None
    ) -> dict[TopicPartition, PartitionLag]:
        """How far the group is behind, per partition, like ``kafka-consumer-groups --describe``:
        every partition the group has committed or has assigned to a member, with its committed
        offset, its log end offset (the high watermark; the last stable offset with
        ``read_committed``) and the lag, log end minus committed (at least 0), and the member
        that owns it.  It describes the group, fetches its offsets (:meth:`list_group_offsets`)
        and the log ends (:meth:`list_offsets`) within one ``timeout``."""
        dl = self._deadline(timeout)
        described, committed = await asyncio.gather(
            self.describe_groups([group_id], timeout=_rest(dl)),
            self.list_group_offsets(group_id, timeout=_rest(dl)),
        )
        owners: dict[TopicPartition, MemberDescription] = {}
        for m in described[group_id].members:
            for tp in m.assignment:
                owners[tp] = m
        keys = sorted(set(committed) | set(owners))
        if not keys:
            return {}
        try:
            ends = await self.list_offsets({tp: "latest" for tp in keys}, isolation_level=isolation_level, timeout=_rest(dl))
        except AdminError as exc:
            # committed offsets can outlive their topic: those partitions have no log end
            if any(e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for e in exc.errors.values()):
                raise
            ends = exc.results
        out: dict[TopicPartition, PartitionLag] = {}
        for tp in keys:
            cur = committed[tp].offset if tp in committed else None
            end = ends[tp].offset if tp in ends else None
            lag = None if cur is None or end is None else max(end - cur, 0)
            out[tp] = PartitionLag(cur, end, lag, owners.get(tp))
        return out

    async def delete_groups(self, group_ids: Iterable[str], *, timeout: float | None = None) -> None:
        """Delete groups with their committed offsets.  Only a group without members can be
        deleted: an active one fails with NON_EMPTY_GROUP, an unknown one with
        GROUP_ID_NOT_FOUND (several groups: :class:`AdminError` keyed by group id)."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys([group_ids] if isinstance(group_ids, str) else group_ids))
        state: _Pending[str, None] = _Pending({g: None for g in wanted}, lambda g: f"delete group '{g}'")
        Q = DeleteGroupsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            v = conn.version_for(Q)
            resp: DeleteGroupsResponse = await self._request(conn, Q(groups_names=batch), v, dl)
            state.unanswered(batch, {r.group_id for r in resp.results})
            for r in resp.results:
                if r.group_id not in state.todo:
                    continue
                if r.error_code:
                    state.fail(r.group_id, r.error_code, _GROUP_MESSAGES.get(ErrorCode.of(r.error_code)))
                else:
                    state.done(r.group_id, None)

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda g: g, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout: float | None = None,
    ) -> None:
        """Set the group's committed offsets: ``{("orders", 0): 42}`` (or an
        :class:`OffsetAndMetadata` to also set metadata and leader epoch).  Committed as an admin
        (generation -1, no member id), which the coordinator accepts only while the group has no
        members: an active group fails with UNKNOWN_MEMBER_ID ("the group has active members").
        A group that does not exist is created (Empty) with these offsets."""
        dl = self._deadline(timeout)
        wanted: dict[TopicPartition, OffsetAndMetadata] = {}
        for (topic, partition), o in offsets.items():
            wanted[(topic, int(partition))] = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
        state: _Pending[TopicPartition, None] = _Pending(
            wanted, lambda tp: f"alter the offset of {tp[0]}-{tp[1]} for group '{group_id}'"
        )
        Q = OffsetCommitRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                om = state.todo[(topic, partition)]
                by_topic.setdefault(topic, []).append(
                    Q.OffsetCommitRequestPartition(
                        partition_index=partition,
                        committed_offset=om.offset,
                        committed_leader_epoch=om.leader_epoch,
                        committed_metadata=om.metadata,
                    )
                )
            req = Q(
                group_id=group_id,
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[Q.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            )
            resp: OffsetCommitResponse = await self._request(conn, req, v, dl)
            _settle_partitions(state, batch, resp.topics)

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda _tp: group_id, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def delete_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> None:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete).  Refused with
        GROUP_SUBSCRIBED_TO_TOPIC for the topics an active consumer group is subscribed to (other
        topics' offsets can go), with GROUP_ID_NOT_FOUND when the group does not exist."""
        dl = self._deadline(timeout)
        wanted = {(t, int(p)): None for t, p in partitions}
        state: _Pending[TopicPartition, None] = _Pending(
            wanted, lambda tp: f"delete the offset of {tp[0]}-{tp[1]} for group '{group_id}'"
        )
        Q = OffsetDeleteRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                by_topic.setdefault(topic, []).append(Q.OffsetDeleteRequestPartition(partition_index=partition))
            req = Q(group_id=group_id, topics=[Q.OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
            resp: OffsetDeleteResponse = await self._request(conn, req, v, dl)
            if resp.error_code:
                for tp in batch:
                    state.fail(tp, resp.error_code, _partition_message(resp.error_code, tp))
                return
            _settle_partitions(state, batch, resp.topics)

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda _tp: group_id, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)


