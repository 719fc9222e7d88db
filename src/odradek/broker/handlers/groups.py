"""Consumer-group APIs, served by the group coordinator (odradek.broker.coordinators.groups).

FindCoordinator (10) v0-4, JoinGroup (11) v0-9, SyncGroup (14) v0-5, Heartbeat (12) v0-4,
LeaveGroup (13) v0-5 (batched members from v3), OffsetCommit (8) v0-9 (generation -1 is a
standalone consumer's commit; a consumer group's generation is the member epoch, v9 for its
members using the consumer protocol), OffsetFetch (9) v0-9 (null topics = every committed
partition; several groups from v8; the member and its epoch checked from v9), DescribeGroups (15)
v0-5 (classic groups), ListGroups (16) v0-5 (state filter, type filter from v5),
DeleteGroups (42) v0-2, OffsetDelete (47) v0.  Transaction coordinator keys are answered with
COORDINATOR_NOT_AVAILABLE until transactions exist.
"""

from __future__ import annotations

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.handlers.metadata import authorized_operations
from odradek.broker.topics import SHARE_STATE_TOPIC, TRANSACTION_TOPIC
from odradek.cluster.group import OffsetAndMetadata
from odradek.cluster.share_state import parse_coordinator_key
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from odradek.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from odradek.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from odradek.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from odradek.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from odradek.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from odradek.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from odradek.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from odradek.security.acl import Operation, ResourceType

NO_AUTHORIZED_OPERATIONS = -2147483648


class _NothingToCommit(Exception):
    """Every partition of an OffsetCommit was refused before reaching the coordinator."""
GROUP_KEY, TRANSACTION_KEY, SHARE_KEY = 0, 1, 2


def _check(ctx: RequestContext, group_id: str, op: Operation) -> None:
    """The principal may do ``op`` on the group (GROUP_AUTHORIZATION_FAILED), and the group
    is this coordinator's and loaded."""
    if not ctx.authorize(op, ResourceType.GROUP, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    ctx.ports.groups.groups.check(group_id)


def _error_of(exc: BaseException) -> ErrorCode:
    return exc.code if isinstance(exc, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR


@handles(ApiKey.FIND_COORDINATOR, versions=(0, 4))
async def find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    R = FindCoordinatorResponse
    port = ctx.ports.groups
    keys = request.coordinator_keys if ctx.version >= 4 else [request.key]
    key_type = request.key_type if ctx.version >= 1 else GROUP_KEY
    results: list[FindCoordinatorResponse.Coordinator] = []
    for key in keys:
        res = R.Coordinator(key=key, node_id=-1, host="", port=-1, error_message=None)
        results.append(res)
        try:
            if key_type == TRANSACTION_KEY:
                if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                    raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                if not key:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
                await port.transactions.ensure_topic()
                topic, p = TRANSACTION_TOPIC, port.transactions.partition_for(key)
            elif key_type == SHARE_KEY:
                # a partition leader looking for a share-partition's coordinator (KIP-932)
                if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
                    raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                if port.shares is None:
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no share coordinator")
                parse_coordinator_key(key)
                await port.shares.ensure_topic()
                topic, p = SHARE_STATE_TOPIC, port.shares.partition_for(key)
                port.shares.check_storage(p)
            elif key_type != GROUP_KEY:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
            else:
                if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, key):
                    raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
                if not key:
                    raise KafkaError(ErrorCode.INVALID_GROUP_ID, "empty group id")
                await port.groups.ensure_topic()
                topic, p = "__consumer_offsets", port.groups.partition_for(key)
                port.groups.check_storage(p)
            state = port.metadata.image.partition(topic, p)
            leader = port.metadata.image.brokers.get(state.leader) if state is not None else None
            endpoint = (leader.endpoint(ctx.listener) or leader.endpoint()) if leader is not None else None
            if endpoint is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is not available")
            res.node_id, res.host, res.port = leader.broker_id, endpoint.host, endpoint.port  # type: ignore[union-attr]
        except KafkaError as exc:
            res.error_code = int(exc.code)
            res.error_message = exc.message or None
    if ctx.version >= 4:
        return R(throttle_time_ms=0, coordinators=results)
    only = results[0]
    return R(
        throttle_time_ms=0,
        error_code=only.error_code,
        error_message=only.error_message,
        node_id=only.node_id,
        host=only.host,
        port=only.port,
    )


@handles(ApiKey.JOIN_GROUP, versions=(0, 9))
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    R = JoinGroupResponse
    version = ctx.version
    empty_name = None if version >= 7 else ""
    try:
        _check(ctx, request.group_id, Operation.READ)
        result = await ctx.ports.groups.groups.join(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            client_id=ctx.header.client_id or "",
            client_host="/" + ctx.client_host,
            version=version,
        )
    except KafkaError as exc:
        return R(
            throttle_time_ms=0,
            error_code=int(exc.code),
            generation_id=-1,
            protocol_name=empty_name,
            leader="",
            member_id=request.member_id,
        )
    error = result.error
    if error is ErrorCode.MEMBER_ID_REQUIRED and version < 4:
        error = ErrorCode.UNKNOWN_MEMBER_ID
    return R(
        throttle_time_ms=0,
        error_code=int(error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type if version >= 7 else None,
        protocol_name=result.protocol_name if result.protocol_name is not None else empty_name,
        leader=result.leader,
        member_id=result.member_id,
        members=[
            R.JoinGroupResponseMember(member_id=mid, group_instance_id=iid if version >= 5 else None, metadata=meta)
            for mid, iid, meta in result.members
        ],
    )


@handles(ApiKey.SYNC_GROUP, versions=(0, 5))
async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    R = SyncGroupResponse
    try:
        _check(ctx, request.group_id, Operation.READ)
        result = await ctx.ports.groups.groups.sync(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
            assignments=[(a.member_id, a.assignment) for a in request.assignments],
        )
    except KafkaError as exc:
        return R(throttle_time_ms=0, error_code=int(exc.code), assignment=b"")
    v5 = ctx.version >= 5
    return R(
        throttle_time_ms=0,
        error_code=int(result.error),
        protocol_type=result.protocol_type if v5 else None,
        protocol_name=result.protocol_name if v5 else None,
        assignment=result.assignment,
    )


@handles(ApiKey.HEARTBEAT, versions=(0, 4))
async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    try:
        _check(ctx, request.group_id, Operation.READ)
        code = ctx.ports.groups.groups.heartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            generation_id=request.generation_id,
        )
    except KafkaError as exc:
        code = exc.code
    return HeartbeatResponse(throttle_time_ms=0, error_code=int(code))


@handles(ApiKey.LEAVE_GROUP, versions=(0, 5))
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    R = LeaveGroupResponse
    if ctx.version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    try:
        _check(ctx, request.group_id, Operation.READ)
        errors = await ctx.ports.groups.groups.leave(request.group_id, members)
    except KafkaError as exc:
        return R(throttle_time_ms=0, error_code=int(exc.code))
    if ctx.version < 3:
        return R(throttle_time_ms=0, error_code=int(errors[0]))
    return R(
        throttle_time_ms=0,
        error_code=0,
        members=[
            R.MemberResponse(member_id=mid, group_instance_id=iid, error_code=int(err))
            for (mid, iid), err in zip(members, errors)
        ],
    )


@handles(ApiKey.OFFSET_COMMIT, versions=(0, 9))
async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    R = OffsetCommitResponse
    port = ctx.ports.groups
    now = port.now_ms()
    version = ctx.version
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    expire = -1
    if 2 <= version <= 4 and request.retention_time_ms >= 0:
        expire = now + request.retention_time_ms
    unknown: dict[tuple[str, int], ErrorCode] = {}
    group_allowed = ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id)
    for t in request.topics:
        info = port.metadata.image.topics.get(t.name)
        topic_allowed = not group_allowed or ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not topic_allowed:
                unknown[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or p.partition_index not in info.partitions:
                unknown[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            ts = p.commit_timestamp if version == 1 and p.commit_timestamp >= 0 else now
            offsets[tp] = OffsetAndMetadata(
                p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", ts, expire
            )
    # v0 in a ZooKeeper cluster: /consumers/<group>/offsets, on any broker (Kafka 0.8.2-0.10)
    in_zookeeper = version == 0 and port.v0_offsets.stores_v0_offsets
    try:
        if not group_allowed:
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not in_zookeeper:
            port.groups.check(request.group_id)
        if not offsets and unknown:
            raise _NothingToCommit
        if in_zookeeper:
            await port.v0_offsets.commit_v0_offsets(request.group_id, {tp: om.offset for tp, om in offsets.items()})
            error, per = ErrorCode.NONE, dict[tuple[str, int], ErrorCode]()
        else:
            error, per = await port.groups.commit(
                request.group_id,
                request.generation_id_or_member_epoch,
                request.member_id,
                request.group_instance_id,
                offsets,
                api_version=version,
            )
    except KafkaError as exc:
        error, per = exc.code, {}
    except _NothingToCommit:
        error, per = ErrorCode.NONE, {}
    if group_allowed:
        per.update(unknown)
    topics = []
    for t in request.topics:
        topics.append(
            R.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    R.OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=int(per.get((t.name, p.partition_index), error)),
                    )
                    for p in t.partitions
                ],
            )
        )
    return R(throttle_time_ms=0, topics=topics)


async def _fetch_group(
    ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None, in_zookeeper: bool = False,
    require_stable: bool = False, member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, int, int, str | None, ErrorCode]]]]]:
    """(group error, [(topic, [(partition, offset, leader epoch, metadata, error)])]).
    ``in_zookeeper``: the offsets the 0.8 way, from /consumers/<group>/offsets (OffsetFetch v0
    in a ZooKeeper cluster, on any broker)."""
    groups = ctx.ports.groups.groups
    try:
        if in_zookeeper:
            if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
                raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        else:
            _check(ctx, group_id, Operation.DESCRIBE)
    except KafkaError as exc:
        failed: list[tuple[str, list[tuple[int, int, int, str | None, ErrorCode]]]] = [
            (t, [(p, -1, -1, "", exc.code) for p in ps]) for t, ps in (wanted or [])
        ]
        return exc.code, failed
    denied: set[str] = set()
    if wanted is not None and ctx.ports.groups.authorizer is not None:
        denied = {t for t, _ps in wanted if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t)}
    partitions = None if wanted is None else [(t, p) for t, ps in wanted for p in ps if t not in denied]
    if in_zookeeper:
        stored = await ctx.ports.groups.v0_offsets.fetch_v0_offsets(group_id, partitions or [])
        found = {tp: (OffsetAndMetadata(o, -1, "", -1, -1) if o >= 0 else None) for tp, o in stored.items()}
    else:
        try:
            found = groups.fetch_offsets(group_id, partitions, member_id=member[0], member_epoch=member[1])
        except KafkaError as exc:  # a consumer group's member or epoch that is not the group's
            return exc.code, [(t, [(p, -1, -1, "", exc.code) for p in ps]) for t, ps in (wanted or [])]
    by_topic: dict[str, list[tuple[int, int, int, str | None, ErrorCode]]] = {}
    for t in sorted(denied):
        by_topic[t] = [(p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in dict(wanted or [])[t]]
    for (topic, p), om in sorted(found.items()):
        if wanted is None and not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic, log_denied=False):
            continue  # every committed partition: those of topics the principal may Describe
        if require_stable and groups.pending_txn_offsets(group_id, [(topic, p)]):
            # KIP-447: a transaction not yet decided committed an offset here
            entry = (p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        elif om is None:
            entry = (p, -1, -1, "", ErrorCode.NONE)
        else:
            entry = (p, om.offset, om.leader_epoch, om.metadata, ErrorCode.NONE)
        by_topic.setdefault(topic, []).append(entry)
    if wanted is not None:
        return ErrorCode.NONE, [(t, by_topic.get(t, [])) for t, _ps in wanted]
    return ErrorCode.NONE, sorted(by_topic.items())


@handles(ApiKey.OFFSET_FETCH, versions=(0, 9))
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    R = OffsetFetchResponse
    version = ctx.version
    if version >= 8:
        groups = []
        for g in request.groups:
            wanted = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            member = (g.member_id, g.member_epoch) if version >= 9 else (None, -1)
            error, topics = await _fetch_group(ctx, g.group_id, wanted, require_stable=request.require_stable,
                                               member=member)
            groups.append(
                R.OffsetFetchResponseGroup(
                    group_id=g.group_id,
                    error_code=int(error),
                    topics=[
                        R.OffsetFetchResponseTopics(
                            name=t,
                            partitions=[
                                R.OffsetFetchResponsePartitions(
                                    partition_index=p, committed_offset=o, committed_leader_epoch=e,
                                    metadata=m, error_code=int(err),
                                )
                                for p, o, e, m, err in parts
                            ],
                        )
                        for t, parts in topics
                    ],
                )
            )
        return R(throttle_time_ms=0, groups=groups)
    wanted = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    in_zookeeper = version == 0 and ctx.ports.groups.v0_offsets.stores_v0_offsets
    stable = version >= 7 and request.require_stable
    error, topics = await _fetch_group(ctx, request.group_id, wanted, in_zookeeper, require_stable=stable)
    resp = R(
        throttle_time_ms=0,
        topics=[
            R.OffsetFetchResponseTopic(
                name=t,
                partitions=[
                    R.OffsetFetchResponsePartition(
                        partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                        error_code=int(err) if version < 2 or err is not error else 0,
                    )
                    for p, o, e, m, err in parts
                ],
            )
            for t, parts in topics
        ],
    )
    if version >= 2:
        resp.error_code = int(error)
    return resp


@handles(ApiKey.DESCRIBE_GROUPS, versions=(0, 5))
async def describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    R = DescribeGroupsResponse
    out = []
    for gid in request.groups:
        try:
            _check(ctx, gid, Operation.DESCRIBE)
        except KafkaError as exc:
            out.append(R.DescribedGroup(error_code=int(exc.code), group_id=gid, group_state="", protocol_type="", protocol_data=""))
            continue
        g = ctx.ports.groups.groups.describe(gid)
        if g is None:
            out.append(R.DescribedGroup(error_code=0, group_id=gid, group_state="Dead", protocol_type="", protocol_data=""))
            continue
        stable = g.state.value in ("Stable",)
        members = [
            R.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id if ctx.version >= 4 else None,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(g.protocol_name) if g.protocol_name else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in g.members.values()
        ]
        out.append(
            R.DescribedGroup(
                error_code=0,
                group_id=gid,
                group_state=g.state.value,
                protocol_type=g.protocol_type or "",
                protocol_data=g.protocol_name or "" if g.state.value != "PreparingRebalance" else "",
                members=members,
                authorized_operations=authorized_operations(ctx, ResourceType.GROUP, gid)
                if ctx.version >= 3 and request.include_authorized_operations
                else NO_AUTHORIZED_OPERATIONS,
            )
        )
    return R(throttle_time_ms=0, groups=out)


@handles(ApiKey.LIST_GROUPS, versions=(0, 5))
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    R = ListGroupsResponse
    states = set(request.states_filter) if ctx.version >= 4 else set()
    types = set(request.types_filter) if ctx.version >= 5 else set()
    groups = ctx.ports.groups.groups
    every = ctx.authorize_cluster(Operation.DESCRIBE, log_denied=False)
    listed = [
        R.ListedGroup(
            group_id=gid,
            protocol_type=protocol_type,
            group_state=state if ctx.version >= 4 else "",
            group_type=group_type if ctx.version >= 5 else "",
        )
        for gid, protocol_type, state, group_type in groups.list_all(states, types)
        if every or ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, gid, log_denied=False)
    ]
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if groups.loading else ErrorCode.NONE
    return R(throttle_time_ms=0, error_code=int(error), groups=sorted(listed, key=lambda g: g.group_id))


@handles(ApiKey.DELETE_GROUPS, versions=(0, 2))
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    R = DeleteGroupsResponse
    allowed = [g for g in request.groups_names if ctx.authorize(Operation.DELETE, ResourceType.GROUP, g)]
    result = await ctx.ports.groups.groups.delete_groups(allowed) if allowed else {}
    for g in request.groups_names:
        result.setdefault(g, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return R(
        throttle_time_ms=0,
        results=[R.DeletableGroupResult(group_id=g, error_code=int(result[g])) for g in request.groups_names],
    )


@handles(ApiKey.OFFSET_DELETE, versions=(0, 0))
async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    R = OffsetDeleteResponse
    readable = {t.name for t in request.topics if ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)}
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions if t.name in readable]
    try:
        _check(ctx, request.group_id, Operation.DELETE)
        error, per = await ctx.ports.groups.groups.delete_offsets(request.group_id, partitions)
    except KafkaError as exc:
        return R(throttle_time_ms=0, error_code=int(exc.code))
    for t in request.topics:
        if t.name not in readable:
            for p in t.partitions:
                per[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return R(
        throttle_time_ms=0,
        error_code=int(error),
        topics=[
            R.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    R.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index,
                        error_code=int(per.get((t.name, p.partition_index), ErrorCode.NONE)),
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
