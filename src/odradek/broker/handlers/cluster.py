"""Cluster APIs: the controller's requests to brokers (LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6)), ControlledShutdown (7) and the admin APIs served by the controller:
ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46).

A controller request with an older controller epoch than one already seen gets
STALE_CONTROLLER_EPOCH; one addressed to an older registration of this broker (a broker epoch
below the current one) gets STALE_BROKER_EPOCH.  The admin APIs answer NOT_CONTROLLER on a broker
that is not the active controller.

A single-node broker (no ZooKeeper) names itself the controller, and answers them as Kafka's
controller would on a one-broker cluster: every partition's only replica already leads, so an
election is not needed (ELECTION_NOT_NEEDED per partition; with no partitions named, Kafka lists
only the partitions that needed one, so none); no reassignment is ever in progress; a reassignment
to the partition's current replicas is done at once, and one naming any other broker is refused
with INVALID_REPLICA_ASSIGNMENT.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from odradek.broker.dispatch import RequestContext, handles, require_cluster
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from odradek.protocol.messages.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from odradek.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from odradek.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from odradek.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from odradek.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from odradek.protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from odradek.security.acl import Operation

if TYPE_CHECKING:
    from odradek.broker.ports import ActiveController

TP = tuple[str, int]
_NOT_NEEDED = "Leader election not needed for topic partition"


@handles(ApiKey.LEADER_AND_ISR, versions=(0, 7))
async def leader_and_isr(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    require_cluster(ctx, Operation.CLUSTER_ACTION)
    R = LeaderAndIsrResponse
    port = ctx.ports.cluster
    err = port.replication.check_controller_request(request.controller_epoch, request.broker_epoch if ctx.version >= 2 else -1)
    states = list(request.ungrouped_partition_states)
    for t in request.topic_states:
        for ps in t.partition_states:
            ps.topic_name = t.topic_name
            states.append(ps)
    ids = {t.topic_name: t.topic_id for t in request.topic_states}
    results: dict[tuple[str, int], int] = {}
    if err is None:
        results = await port.replication.apply_leader_and_isr(states, ids, {(lead.broker_id): (lead.host_name, lead.port) for lead in request.live_leaders})
    code = int(err) if err is not None else 0
    if ctx.version >= 5:
        by_topic: dict[str, list[LeaderAndIsrResponse.LeaderAndIsrPartitionError]] = {}
        for (topic, p), e in results.items():
            by_topic.setdefault(topic, []).append(R.LeaderAndIsrPartitionError(partition_index=p, error_code=e))
        return R(
            error_code=code,
            topics=[
                R.LeaderAndIsrTopicError(topic_id=ids.get(t, uuid.UUID(int=0)), partition_errors=errs)
                for t, errs in by_topic.items()
            ],
        )
    return R(
        error_code=code,
        partition_errors=[
            R.LeaderAndIsrPartitionError(topic_name=t, partition_index=p, error_code=e) for (t, p), e in results.items()
        ],
    )


@handles(ApiKey.UPDATE_METADATA, versions=(0, 8))
async def update_metadata(ctx: RequestContext, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    require_cluster(ctx, Operation.CLUSTER_ACTION)
    port = ctx.ports.cluster
    err = port.replication.check_controller_request(request.controller_epoch, request.broker_epoch if ctx.version >= 5 else -1)
    if err is None:
        for ps in request.ungrouped_partition_states:
            topic = next((t for t in request.topic_states if t.topic_name == ps.topic_name), None)
            if topic is None:
                topic = UpdateMetadataRequest.UpdateMetadataTopicState(topic_name=ps.topic_name)
                request.topic_states.append(topic)
            topic.partition_states.append(ps)
        await port.replication.apply_update_metadata(request)
    return UpdateMetadataResponse(error_code=int(err) if err is not None else 0)


@handles(ApiKey.STOP_REPLICA, versions=(0, 4))
async def stop_replica(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
    require_cluster(ctx, Operation.CLUSTER_ACTION)
    R = StopReplicaResponse
    port = ctx.ports.cluster
    err = port.replication.check_controller_request(request.controller_epoch, request.broker_epoch if ctx.version >= 1 else -1)
    if err is not None:
        return R(error_code=int(err))
    items: list[tuple[str, int, bool]] = []
    if ctx.version >= 3:
        for t in request.topic_states:
            for ps in t.partition_states:
                items.append((t.topic_name, ps.partition_index, ps.delete_partition))
    elif ctx.version >= 1:
        for tt in request.topics:
            for idx in tt.partition_indexes:
                items.append((tt.name, idx, request.delete_partitions))
    else:
        for up in request.ungrouped_partitions:
            items.append((up.topic_name, up.partition_index, request.delete_partitions))
    errors = await port.replication.stop_replicas(items)
    return R(
        error_code=0,
        partition_errors=[R.StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=e) for (t, p), e in errors.items()],
    )


@handles(ApiKey.CONTROLLED_SHUTDOWN, versions=(0, 3))
async def controlled_shutdown(ctx: RequestContext, request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    require_cluster(ctx, Operation.CLUSTER_ACTION)
    R = ControlledShutdownResponse
    controller = ctx.ports.cluster.controller()
    if controller is None or not controller.active:
        return R(error_code=int(ErrorCode.NOT_CONTROLLER))
    epoch = request.broker_epoch if ctx.version >= 2 else -1
    try:
        remaining = await controller.call(lambda: controller.controlled_shutdown(request.broker_id, epoch))
    except KafkaError as exc:
        return R(error_code=int(exc.code))
    return R(
        error_code=0,
        remaining_partitions=[R.RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining],
    )


@handles(ApiKey.ELECT_LEADERS, versions=(0, 2))
async def elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    require_cluster(ctx, Operation.ALTER)
    R = ElectLeadersResponse
    etype = request.election_type if ctx.version >= 1 else 0
    tps = None
    if request.topic_partitions is not None:
        tps = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    controller = ctx.ports.cluster.controller()
    if controller is None or not controller.active:
        return R(throttle_time_ms=0, error_code=int(ErrorCode.NOT_CONTROLLER), replica_election_results=[])
    else:
        ctl = controller
        try:
            results = await ctl.call(lambda: ctl.elect_leaders(etype, tps))
        except KafkaError as exc:
            return R(throttle_time_ms=0, error_code=int(exc.code), replica_election_results=[])
    if tps is None:
        # Kafka: an election over all partitions reports only those that needed one (or failed)
        results = {tp: code for tp, code in results.items() if code != ErrorCode.ELECTION_NOT_NEEDED}
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for (topic, p), code in sorted(results.items()):
        message = None if code == 0 else _NOT_NEEDED if code == ErrorCode.ELECTION_NOT_NEEDED else code.name
        by_topic.setdefault(topic, []).append(R.PartitionResult(partition_id=p, error_code=int(code), error_message=message))
    return R(
        throttle_time_ms=0,
        error_code=0,
        replica_election_results=[R.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()],
    )


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, versions=(0, 1))
async def alter_partition_reassignments(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    require_cluster(ctx, Operation.ALTER)
    R = AlterPartitionReassignmentsResponse
    controller = ctx.ports.cluster.controller()
    changes = {
        (t.name, p.partition_index): (None if p.replicas is None else tuple(p.replicas))
        for t in request.topics
        for p in t.partitions
    }
    allow = request.allow_replication_factor_change if ctx.version >= 1 else True
    if controller is None or not controller.active:
        return R(throttle_time_ms=0, allow_replication_factor_change=allow, error_code=int(ErrorCode.NOT_CONTROLLER),
                 error_message="not the controller")  # fmt: skip
    else:
        ctl = controller
        try:
            results = await ctl.call(lambda: ctl.alter_reassignments(changes, allow))
        except KafkaError as exc:
            return R(throttle_time_ms=0, allow_replication_factor_change=allow, error_code=int(exc.code),
                     error_message=exc.message)  # fmt: skip
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for (topic, p), (code, msg) in results.items():
        by_topic.setdefault(topic, []).append(
            R.ReassignablePartitionResponse(partition_index=p, error_code=int(code), error_message=msg)
        )
    return R(
        throttle_time_ms=0,
        allow_replication_factor_change=allow,
        error_code=0,
        responses=[R.ReassignableTopicResponse(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, versions=(0, 0))
async def list_partition_reassignments(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    require_cluster(ctx, Operation.DESCRIBE)
    R = ListPartitionReassignmentsResponse
    controller = ctx.ports.cluster.controller()
    if controller is None or not controller.active:
        return R(throttle_time_ms=0, error_code=int(ErrorCode.NOT_CONTROLLER), error_message="not the controller")
    tps = None
    if request.topics is not None:
        tps = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    found = await controller.call(lambda: _list(controller, tps))
    by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    for (topic, p), (replicas, adding, removing) in sorted(found.items()):
        by_topic.setdefault(topic, []).append(
            R.OngoingPartitionReassignment(
                partition_index=p, replicas=list(replicas), adding_replicas=list(adding), removing_replicas=list(removing)
            )
        )
    return R(
        throttle_time_ms=0,
        error_code=0,
        topics=[R.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


async def _list(controller: ActiveController, tps: list[tuple[str, int]] | None) -> dict[Any, Any]:
    return dict(controller.list_reassignments(tps))
