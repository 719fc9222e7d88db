"""Share groups (KIP-932): ShareGroupHeartbeat (76) v1 and ShareGroupDescribe (77) v1, served by
the group coordinator's share groups (:mod:`odradek.broker.coordinators.share_groups`); advertised
and served only while ``share.version`` is finalized at 1 or more.

ShareGroupHeartbeat needs READ on the group and DESCRIBE on every topic the member subscribes to
(TOPIC_AUTHORIZATION_FAILED).  ShareGroupDescribe needs DESCRIBE on each group, and on the topics
its members subscribe to and are assigned.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.handlers.metadata import authorized_operations
from odradek.cluster.share_group import ASSIGNOR, ShareGroup, ShareHeartbeat
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from odradek.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from odradek.security.acl import Operation, ResourceType

NO_AUTHORIZED_OPERATIONS = -2147483648


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, versions=(1, 1))
async def share_group_heartbeat(ctx: RequestContext, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    R = ShareGroupHeartbeatResponse
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
    req = ShareHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        rack_id=request.rack_id,
        subscribed_topic_names=None if names is None else tuple(names),
        client_id=ctx.header.client_id or "",
        client_host="/" + ctx.client_host,
    )
    groups = ctx.ports.groups.groups
    try:
        resp = await groups.share.heartbeat(groups.shard, req)
    except KafkaError as exc:
        return R(throttle_time_ms=0, error_code=int(exc.code), error_message=exc.message or None)
    assignment = None
    if resp.assignment is not None:
        assignment = R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(resp.assignment.items(), key=lambda kv: str(kv[0]))
        ])
    return R(
        throttle_time_ms=0,
        error_code=0,
        member_id=resp.member_id,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        assignment=assignment,
    )


@handles(ApiKey.SHARE_GROUP_DESCRIBE, versions=(1, 1))
async def share_group_describe(ctx: RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    R = ShareGroupDescribeResponse
    groups = ctx.ports.groups.groups
    allowed = [g for g in request.group_ids if ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, g)]
    described = {d.group_id: d for d in await groups.share.describe(groups.shard, dict.fromkeys(allowed))}
    image = ctx.ports.groups.metadata.image
    by_id = {t.topic_id: t.name for t in image.topics.values()}
    out = []
    for gid in request.group_ids:
        d = described.get(gid)
        if d is None:
            out.append(R.DescribedGroup(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), group_id=gid))
            continue
        if d.group is None:
            out.append(R.DescribedGroup(error_code=int(d.error), error_message=d.message, group_id=gid))
            continue
        topics = _group_topics(d.group, by_id)
        denied = sorted(t for t in topics if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t,
                                                               log_denied=False))
        if denied:
            out.append(R.DescribedGroup(
                error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), group_id=gid,
                error_message="The group has described topic(s) that the client is not authorized to describe.",
            ))
            continue
        operations = (authorized_operations(ctx, ResourceType.GROUP, gid) if request.include_authorized_operations
                      else NO_AUTHORIZED_OPERATIONS)
        out.append(_described(R, d.group, by_id, operations))
    return R(throttle_time_ms=0, groups=out)


def _group_topics(group: ShareGroup, by_id: Mapping[uuid.UUID, str]) -> set[str]:
    names: set[str] = set()
    for m in group.members.values():
        names.update(m.subscribed_topic_names)
        names.update(by_id[t] for t in m.assigned if t in by_id)
    return names


def _described(R: type[ShareGroupDescribeResponse], group: ShareGroup, by_id: Mapping[uuid.UUID, str],
               operations: int) -> ShareGroupDescribeResponse.DescribedGroup:
    def assignment(parts: Mapping[uuid.UUID, Iterable[int]]) -> ShareGroupDescribeResponse.Assignment:
        return R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=tid, topic_name=by_id[tid], partitions=sorted(ps))
            for tid, ps in sorted(parts.items(), key=lambda kv: str(kv[0])) if tid in by_id
        ])

    members = [
        R.Member(
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=assignment(m.assigned),
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]
    return R.DescribedGroup(
        error_code=0,
        group_id=group.group_id,
        group_state=group.state,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=ASSIGNOR,
        members=members,
        authorized_operations=operations,
    )
