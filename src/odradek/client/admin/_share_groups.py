"""Share groups (KIP-932): list, describe, their share-partition start offsets and lag, reset and
delete them; each request goes to the group's coordinator (retried elsewhere on NOT_COORDINATOR)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.client.admin._base import _check, _Deadline, _error, _Pending
from odradek.client.admin._groups import GroupAdmin
from odradek.client.admin.types import Node, TopicPartition
from odradek.errors import KafkaError
from odradek.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest
from odradek.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest
from odradek.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest
from odradek.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from odradek.transport import AsyncBrokerConnection

__all__ = ["ShareGroupAdmin", "ShareGroupDescription", "ShareMemberDescription", "SharePartitionOffset"]


@dataclass(slots=True)
class ShareMemberDescription:
    """A member of a share group (ShareGroupDescribe): its ids, host, epoch, the topics it
    subscribes to and the partitions assigned to it."""

    member_id: str
    client_id: str
    host: str
    member_epoch: int
    rack_id: str | None
    subscribed_topics: list[str]
    assignment: list[TopicPartition]


@dataclass(slots=True)
class ShareGroupDescription:
    """A share group (ShareGroupDescribe): its state (Empty, Stable), epochs, assignor, members
    and coordinator."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMemberDescription] = field(default_factory=list)
    coordinator: Node | None = None


@dataclass(slots=True)
class SharePartitionOffset:
    """A share-partition's start offset (-1: the group has no state for it), the leader epoch the
    share coordinator recorded, and its lag (-1 when unknown: the broker does not know the high
    watermark, or before DescribeShareGroupOffsets v1)."""

    start_offset: int
    leader_epoch: int
    lag: int


class ShareGroupAdmin(GroupAdmin):
    """:class:`AsyncAdmin`'s share-group operations."""

    async def list_share_groups(self, *, timeout: float | None = None) -> list[str]:
        """The ids of the cluster's share groups, sorted."""
        return sorted(g.group_id for g in await self.list_groups(timeout=timeout) if g.protocol_type == "share")

    async def _to_coordinator(self, group_id: str, what: str, send: Any, timeout: float | None) -> Any:
        """Run ``send(conn, state, dl)`` at the coordinator of ``group_id`` until it answers;
        its result, or the KafkaError it ended with."""
        dl: _Deadline = self._deadline(timeout)
        state: _Pending[str, Any] = _Pending({group_id: None}, lambda g: what)
        nodes: dict[str, Node] = {}

        async def one(conn: AsyncBrokerConnection, batch: list[str]) -> None:
            await send(conn, state, dl, nodes.get(group_id))

        async def attempt() -> None:
            await self._per_node(state, await self._coordinators(state, lambda g: g, dl, nodes), one, dl)

        await self._drive(state, dl, attempt)
        if group_id in state.errors:
            raise state.errors[group_id]
        return state.results[group_id]

    async def describe_share_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, ShareGroupDescription]:
        """ShareGroupDescribe of each group (an unknown one: GROUP_ID_NOT_FOUND, in an
        :class:`AdminError` keyed by group id)."""
        results: dict[str, ShareGroupDescription] = {}
        errors: dict[str, KafkaError] = {}
        for gid in dict.fromkeys([group_ids] if isinstance(group_ids, str) else group_ids):
            async def send(conn: AsyncBrokerConnection, state: _Pending[str, Any], dl: _Deadline, node: Node | None,
                           gid: str = gid) -> None:
                resp = await self._request(conn, ShareGroupDescribeRequest(group_ids=[gid]), 1, dl)
                g = resp.groups[0]
                if g.error_code:
                    state.fail(gid, g.error_code, g.error_message)
                    return
                members = [ShareMemberDescription(
                    m.member_id, m.client_id, m.client_host, m.member_epoch, m.rack_id, list(m.subscribed_topic_names),
                    sorted((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions),
                ) for m in g.members]
                state.done(gid, ShareGroupDescription(gid, g.group_state, g.group_epoch, g.assignment_epoch,
                                                      g.assignor_name, members, node))
            try:
                results[gid] = await self._to_coordinator(gid, f"describe share group '{gid}'", send, timeout)
            except KafkaError as exc:
                errors[gid] = exc
        _check(errors, results)
        return results

    async def describe_share_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, *, timeout: float | None = None
    ) -> dict[TopicPartition, SharePartitionOffset]:
        """The start offset and lag of the group's share-partitions (``partitions``; None: every
        one the group has state for).  A partition's error raises :class:`AdminError` keyed by
        partition."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(int(p))
            topics = [DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                      for t, ps in sorted(by_topic.items())]
        Q = DescribeShareGroupOffsetsRequest

        async def send(conn: AsyncBrokerConnection, state: _Pending[str, Any], dl: _Deadline, node: Node | None) -> None:
            v = conn.version_for(Q, maximum=1)
            resp = await self._request(conn, Q(groups=[Q.DescribeShareGroupOffsetsRequestGroup(
                group_id=group_id, topics=topics)]), v, dl)
            g = resp.groups[0]
            if g.error_code:
                state.fail(group_id, g.error_code, g.error_message)
                return
            state.done(group_id, g.topics)

        answered = await self._to_coordinator(group_id, f"describe the offsets of share group '{group_id}'", send,
                                              timeout)
        results: dict[TopicPartition, SharePartitionOffset] = {}
        errors: dict[TopicPartition, KafkaError] = {}
        for t in answered:
            for p in t.partitions:
                tp = (t.topic_name, p.partition_index)
                if p.error_code:
                    errors[tp] = _error(p.error_code, f"describe the offset of {tp[0]}-{tp[1]}", p.error_message)
                else:
                    results[tp] = SharePartitionOffset(p.start_offset, p.leader_epoch, getattr(p, "lag", -1))
        _check(errors, results)
        return results

    async def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> None:
        """Set the start offsets of the group's share-partitions; the group must be empty
        (NON_EMPTY_GROUP).  A partition's error raises :class:`AdminError` keyed by partition."""
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in offsets.items():
            by_topic.setdefault(t, []).append((int(p), int(o)))
        Q = AlterShareGroupOffsetsRequest
        req = Q(group_id=group_id, topics=[Q.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=[
            Q.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in sorted(ps)
        ]) for t, ps in sorted(by_topic.items())])

        async def send(conn: AsyncBrokerConnection, state: _Pending[str, Any], dl: _Deadline, node: Node | None) -> None:
            resp = await self._request(conn, req, 0, dl)
            if resp.error_code:
                state.fail(group_id, resp.error_code, resp.error_message)
                return
            state.done(group_id, resp.responses)

        answered = await self._to_coordinator(group_id, f"alter the offsets of share group '{group_id}'", send, timeout)
        errors = {(t.topic_name, p.partition_index): _error(p.error_code, f"alter the offset of {t.topic_name}-"
                                                            f"{p.partition_index}", p.error_message)
                  for t in answered for p in t.partitions if p.error_code}
        _check(errors, {})

    async def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str], *, timeout: float | None = None
    ) -> None:
        """Delete the group's share-partition state of ``topics`` (the group must be empty:
        NON_EMPTY_GROUP).  A topic's error raises :class:`AdminError` keyed by topic."""
        Q = DeleteShareGroupOffsetsRequest
        req = Q(group_id=group_id, topics=[Q.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                           for t in dict.fromkeys(topics)])

        async def send(conn: AsyncBrokerConnection, state: _Pending[str, Any], dl: _Deadline, node: Node | None) -> None:
            resp = await self._request(conn, req, 0, dl)
            if resp.error_code:
                state.fail(group_id, resp.error_code, resp.error_message)
                return
            state.done(group_id, resp.responses)

        answered = await self._to_coordinator(group_id, f"delete the offsets of share group '{group_id}'", send,
                                              timeout)
        errors = {t.topic_name: _error(t.error_code, f"delete the offsets of {t.topic_name}", t.error_message)
                  for t in answered if t.error_code}
        _check(errors, {})

