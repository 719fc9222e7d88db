"""The share coordinator's inter-broker APIs (KIP-932), served by
:mod:`odradek.broker.coordinators.share_state`: InitializeShareGroupState (83) v0,
ReadShareGroupState (84) v0, WriteShareGroupState (85) v0-1, DeleteShareGroupState (86) v0,
ReadShareGroupStateSummary (87) v0-1.

Partition leaders send them to the leader of the share-partition's ``__share_group_state``
partition; they need ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED for every
partition otherwise), as Kafka's.  Each partition is answered on its own: NOT_COORDINATOR when this
broker does not lead its ``__share_group_state`` partition, COORDINATOR_LOAD_IN_PROGRESS while it
loads, INVALID_REQUEST for an empty group id, a zero topic id, a negative partition or a malformed
state batch (nothing is written), FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for a stale writer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.ports import ShareStateCoordinator
from odradek.cluster.share_state import ShareKey, StateBatch
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.delete_share_group_state import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
)
from odradek.protocol.messages.initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
)
from odradek.protocol.messages.read_share_group_state import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
)
from odradek.protocol.messages.read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
)
from odradek.protocol.messages.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from odradek.security.acl import Operation

log = logging.getLogger(__name__)

T = TypeVar("T")


def _coordinator(ctx: RequestContext) -> ShareStateCoordinator:
    """The share coordinator, if the principal may use it (ClusterAction)."""
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    coordinator = ctx.ports.share_state
    if coordinator is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no share coordinator")
    return coordinator


async def _one(op: Awaitable[T]) -> tuple[T | None, ErrorCode, str | None]:
    """Await one partition's operation: its result, or its error code and message."""
    try:
        return await op, ErrorCode.NONE, None
    except KafkaError as exc:
        return None, exc.code, exc.message or None
    except Exception:
        log.exception("a share-state operation failed")
        return None, ErrorCode.UNKNOWN_SERVER_ERROR, None


async def _each(
    ctx: RequestContext, group_id: str, topics: list[Any],
    op: Callable[[ShareStateCoordinator, ShareKey, Any], Awaitable[T]],
) -> list[tuple[Any, list[tuple[Any, T | None, ErrorCode, str | None]]]]:
    """Run ``op`` on every partition of the request's topics (in order), against the share
    coordinator the principal may use (else every partition gets the refusal): per topic, per
    partition, the partition's request part, its result and its error."""
    try:
        coordinator: ShareStateCoordinator | None = _coordinator(ctx)
        denied: KafkaError | None = None
    except KafkaError as exc:
        coordinator, denied = None, exc
    out: list[tuple[Any, list[tuple[Any, T | None, ErrorCode, str | None]]]] = []
    for topic in topics:
        parts: list[tuple[Any, T | None, ErrorCode, str | None]] = []
        for p in topic.partitions:
            if coordinator is None:
                assert denied is not None
                parts.append((p, None, denied.code, denied.message or None))
            else:
                key = ShareKey(group_id, topic.topic_id, p.partition)
                parts.append((p, *await _one(op(coordinator, key, p))))
        out.append((topic, parts))
    return out


@handles(ApiKey.INITIALIZE_SHARE_GROUP_STATE, versions=(0, 0))
async def initialize_share_group_state(
    ctx: RequestContext, request: InitializeShareGroupStateRequest
) -> InitializeShareGroupStateResponse:
    R = InitializeShareGroupStateResponse
    done = await _each(ctx, request.group_id, request.topics,
                       lambda c, key, p: c.initialize(key, state_epoch=p.state_epoch, start_offset=p.start_offset))
    return R(results=[R.InitializeStateResult(topic_id=topic.topic_id, partitions=[
        R.PartitionResult(partition=p.partition, error_code=int(code), error_message=msg) for p, _r, code, msg in parts
    ]) for topic, parts in done])


@handles(ApiKey.READ_SHARE_GROUP_STATE, versions=(0, 0))
async def read_share_group_state(ctx: RequestContext, request: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse
    done = await _each(ctx, request.group_id, request.topics,
                       lambda c, key, p: c.read(key, leader_epoch=p.leader_epoch))
    results = []
    for topic, parts in done:
        out = []
        for p, state, code, msg in parts:
            res = R.PartitionResult(partition=p.partition, state_epoch=0, start_offset=-1, state_batches=[],
                                    error_code=int(code), error_message=msg)
            if state is not None:
                res.state_epoch, res.start_offset = state.state_epoch, state.start_offset
                res.state_batches = [
                    R.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=b.state,
                                 delivery_count=b.delivery_count)
                    for b in state.batches
                ]
            out.append(res)
        results.append(R.ReadStateResult(topic_id=topic.topic_id, partitions=out))
    return R(results=results)


@handles(ApiKey.WRITE_SHARE_GROUP_STATE, versions=(0, 1))
async def write_share_group_state(
    ctx: RequestContext, request: WriteShareGroupStateRequest
) -> WriteShareGroupStateResponse:
    R = WriteShareGroupStateResponse

    def write(c: ShareStateCoordinator, key: ShareKey, p: Any) -> Awaitable[Any]:
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_count, b.delivery_state) for b in p.state_batches]
        return c.write(key, leader_epoch=p.leader_epoch, state_epoch=p.state_epoch, start_offset=p.start_offset,
                       batches=batches)

    done = await _each(ctx, request.group_id, request.topics, write)
    return R(results=[R.WriteStateResult(topic_id=topic.topic_id, partitions=[
        R.PartitionResult(partition=p.partition, error_code=int(code), error_message=msg) for p, _r, code, msg in parts
    ]) for topic, parts in done])


@handles(ApiKey.DELETE_SHARE_GROUP_STATE, versions=(0, 0))
async def delete_share_group_state(
    ctx: RequestContext, request: DeleteShareGroupStateRequest
) -> DeleteShareGroupStateResponse:
    R = DeleteShareGroupStateResponse
    done = await _each(ctx, request.group_id, request.topics, lambda c, key, _p: c.delete(key))
    return R(results=[R.DeleteStateResult(topic_id=topic.topic_id, partitions=[
        R.PartitionResult(partition=p.partition, error_code=int(code), error_message=msg) for p, _r, code, msg in parts
    ]) for topic, parts in done])


@handles(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, versions=(0, 1))
async def read_share_group_state_summary(
    ctx: RequestContext, request: ReadShareGroupStateSummaryRequest
) -> ReadShareGroupStateSummaryResponse:
    R = ReadShareGroupStateSummaryResponse
    done = await _each(ctx, request.group_id, request.topics, lambda c, key, _p: c.summary(key))
    results = []
    for topic, parts in done:
        out = []
        for p, state, code, msg in parts:
            res = R.PartitionResult(partition=p.partition, state_epoch=0, leader_epoch=-1, start_offset=-1,
                                    error_code=int(code), error_message=msg)
            if state is not None:
                res.state_epoch, res.leader_epoch, res.start_offset = (
                    state.state_epoch, state.leader_epoch, state.start_offset
                )
            out.append(res)
        results.append(R.ReadStateSummaryResult(topic_id=topic.topic_id, partitions=out))
    return R(results=results)
