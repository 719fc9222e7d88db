"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68) v0-1 and ConsumerGroupDescribe (69) v0,
served by the group coordinator's consumer groups (:mod:`odradek.broker.coordinators.consumer_groups`).

ConsumerGroupHeartbeat needs READ on the group, and DESCRIBE on every topic a member subscribes
to by name (TOPIC_AUTHORIZATION_FAILED); a regular expression matches only the topics the member
may describe.  v1 (KIP-1082) requires the member to choose its member id; v0 lets the coordinator
give one.  ConsumerGroupDescribe needs DESCRIBE on each group, and on the topics its members are
assigned and subscribe to.  (Kafka 4.x serves ConsumerGroupDescribe v1, which only adds the
member type, KIP-1099: the message definitions Odradek generates from are Kafka 3.x's, at v0.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.handlers.metadata import authorized_operations
from odradek.cluster.consumer_group import ConsumerGroup, HeartbeatRequest, TopicsView
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from odradek.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from odradek.security.acl import Operation, ResourceType

NO_AUTHORIZED_OPERATIONS = -2147483648


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, versions=(0, 1))
async def consumer_group_heartbeat(
    ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    R = ConsumerGroupHeartbeatResponse
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    names = request.subscribed_topic_names
    if names:
        denied = sorted({t for t in names if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t)})
        if denied:
            return R(
                throttle_time_ms=0,
                error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"The member is not authorized to describe the topics {', '.join(denied)}.",
            )
    owned: dict[uuid.UUID, frozenset[int]] | None = None
    if request.topic_partitions is not None:
        merged: dict[uuid.UUID, set[int]] = {}
        for tp in request.topic_partitions:
            merged.setdefault(tp.topic_id, set()).update(tp.partitions)
        owned = {t: frozenset(ps) for t, ps in merged.items()}
    req = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.version >= 1 else None,
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=ctx.header.client_id or "",
        client_host="/" + ctx.client_host,
        version=ctx.version,
    )
    groups = ctx.ports.groups.groups
    resp = await groups.consumer.heartbeat(
        groups.shard, req,
        lambda topic: ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic, log_denied=False),
    )
    assignment = None
    if resp.assignment is not None:
        assignment = R.Assignment(topic_partitions=_partitions(R.TopicPartitions, resp.assignment))
    return R(
        throttle_time_ms=0,
        error_code=int(resp.error),
        error_message=resp.message,
        member_id=resp.member_id,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        assignment=assignment,
    )


def _partitions(cls: type, assignment: Mapping[uuid.UUID, Iterable[int]]) -> list:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))]


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, versions=(0, 0))
async def consumer_group_describe(
    ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    R = ConsumerGroupDescribeResponse
    groups = ctx.ports.groups.groups
    allowed = [g for g in request.group_ids if ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, g)]
    described = {d.group_id: d for d in await groups.consumer.describe(groups.shard, dict.fromkeys(allowed))}
    view = TopicsView(ctx.ports.groups.metadata.image)
    out = []
    for gid in request.group_ids:
        d = described.get(gid)
        if d is None:
            out.append(R.DescribedGroup(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), group_id=gid))
            continue
        if d.group is None:
            out.append(R.DescribedGroup(error_code=int(d.error), error_message=d.message, group_id=gid))
            continue
        topics = _group_topics(d.group, view)
        denied = sorted(t for t in topics if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t,
                                                               log_denied=False))
        if denied:
            out.append(R.DescribedGroup(
                error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), group_id=gid,
                error_message="The group has described topic(s) that the client is not authorized to describe.",
            ))
            continue
        out.append(_described(R, d.group, d.assignor, view, authorized_operations(ctx, ResourceType.GROUP, gid)
                              if request.include_authorized_operations else NO_AUTHORIZED_OPERATIONS))
    return R(throttle_time_ms=0, groups=out)


def _group_topics(group: ConsumerGroup, view: TopicsView) -> set[str]:
    names: set[str] = set()
    for m in group.members.values():
        names.update(m.subscribed_topic_names)
        names.update(view.by_name(m.assigned))
        names.update(view.by_name(group.target.get(m.member_id, {})))
    return names


def _described(R: type[ConsumerGroupDescribeResponse], group: ConsumerGroup, assignor: str, view: TopicsView,
               operations: int) -> ConsumerGroupDescribeResponse.DescribedGroup:
    def assignment(parts: Mapping[uuid.UUID, Iterable[int]]) -> ConsumerGroupDescribeResponse.Assignment:
        found = []
        for tid, ps in sorted(parts.items(), key=lambda kv: str(kv[0])):
            name = view.name_of(tid)
            if name is not None:
                found.append(R.TopicPartitions(topic_id=tid, topic_name=name, partitions=sorted(ps)))
        return R.Assignment(topic_partitions=found)

    members = [
        R.Member(
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=assignment(m.assigned),
            target_assignment=assignment(group.target.get(m.member_id, {})),
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]
    return R.DescribedGroup(
        error_code=0,
        group_id=group.group_id,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=assignor,
        members=members,
        authorized_operations=operations,
    )
