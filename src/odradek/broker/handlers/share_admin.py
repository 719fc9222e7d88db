"""The share-group offset admin APIs (KIP-932): DescribeShareGroupOffsets (90) v0-1,
AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0, advertised and served only
while ``share.version`` is finalized at 1 or more.

They are served by the group's coordinator (NOT_COORDINATOR elsewhere), which asks the share
coordinator through the persister (:mod:`odradek.broker.share_persister`):

* describe reads each share-partition's state summary: its start offset (the group's "committed"
  offset; -1, not an error, when it has no state, its state cannot be read or the topic does not
  exist, as Kafka answers) and leader epoch; v1 adds the lag, the high watermark less the
  start offset less the records already acknowledged or archived past it (Kafka's
  KIP-1226 definition), -1 when it is unknown (no state, or the partition's high watermark could not be
  had: this broker's when it leads the partition, else asked of the leader with ListOffsets).  A null topic list
  is every topic the group has state for (found by asking the share coordinator about every
  partition of every topic the principal may describe).  DESCRIBE on the group and on the topics;
* alter initializes each share-partition again at the given start offset with a new state epoch,
  so that a partition leader's cached state is fenced (its next write is FENCED_STATE_EPOCH, on
  which it drops its cache and reads the new state); the cache of this broker is dropped at once;
* delete deletes the share-partitions' state (every partition of each topic).

Alter and delete need READ on the group and on the topics, and an empty group: a group with
members is NON_EMPTY_GROUP (the group's ``share.auto.offset.reset`` then decides where a deleted
share-partition starts again).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from odradek.broker.coordinators.share_groups import other_type
from odradek.broker.dispatch import RequestContext, handles
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from odradek.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)
from odradek.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from odradek.security.acl import Operation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.share_partitions import SharePartitionManager
    from odradek.cluster.metadata import MetadataImage

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
#: the delivery states of records that count as done for the lag (acknowledged, archived)
_DONE_STATES = (2, 4)


def _error(exc: BaseException) -> tuple[int, str | None]:
    if isinstance(exc, KafkaError):
        return int(exc.code), exc.message or None
    log.warning("share-group offsets: %s", exc, exc_info=exc)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR), str(exc) or None


def _shares(ctx: RequestContext) -> SharePartitionManager:
    shares = ctx.ports.groups.share_partitions
    if shares is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no share partitions")
    return shares


def _persister(ctx: RequestContext) -> Any:
    persister = _shares(ctx).persister
    if persister is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no share coordinator")
    return persister


def _coordinated(ctx: RequestContext, group_id: str, *, empty: bool) -> None:
    """Raise unless this broker coordinates ``group_id`` (NOT_COORDINATOR...) and, when ``empty``
    (alter, delete), the id is no group of another kind (GROUP_ID_NOT_FOUND) and the share group
    has no members (NON_EMPTY_GROUP)."""
    groups = ctx.ports.groups.groups
    shard = groups.shard(group_id)
    if not empty:
        return
    group = shard.share.group(group_id)
    if group is None:
        if other_type(shard, group_id) is not None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        return
    if empty and group.members:
        raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"The group {group_id} is not empty: it has active members.")


async def _high_watermark(ctx: RequestContext, persister: Any, topic: str, index: int) -> int | None:
    """The partition's high watermark: this broker's when it leads the partition, else its
    leader's (ListOffsets over the inter-broker listener); None when unknown."""
    partitions = ctx.ports.groups.partitions
    try:
        if partitions is not None:
            return partitions.for_fetch(topic, index, -1, -1).log.high_watermark
    except KafkaError:
        pass
    end_offset = getattr(persister, "end_offset", None)
    return None if end_offset is None else await end_offset(topic, index)


async def _describe_partition(
    ctx: RequestContext, group_id: str, topic: str, topic_id: uuid.UUID, index: int, version: int,
) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition:
    """A share-partition's start offset, leader epoch and lag.  As Kafka answers it: no state, or
    a state the share coordinator could not read, is start offset -1 without an error (the
    absence of an offset, as OffsetFetch answers it); the lag is -1 unless both the start offset
    and the high watermark are known."""
    R = DescribeShareGroupOffsetsResponse
    try:
        persister = _persister(ctx)
        summary = await persister.summary(group_id, topic_id, index)
    except Exception as exc:
        log.warning("share group %s: the state of %s-%d could not be read: %s", group_id, topic, index, exc)
        return R.DescribeShareGroupOffsetsResponsePartition(
            partition_index=index, start_offset=-1, leader_epoch=0, lag=-1, error_code=0,
        )
    if summary is None or summary.start_offset < 0:
        return R.DescribeShareGroupOffsetsResponsePartition(
            partition_index=index, start_offset=-1, leader_epoch=-1 if summary is None else summary.leader_epoch,
            lag=-1, error_code=0,
        )
    lag = -1
    hw = await _high_watermark(ctx, persister, topic, index) if version >= 1 else None
    if hw is not None:
        # Kafka's lag: the partition's end less the start offset less the records past the start
        # offset whose delivery is complete (acknowledged or archived)
        start = summary.start_offset
        done = 0
        try:
            state = await persister.read(group_id, topic_id, index)
        except Exception as exc:
            log.warning("share group %s: the state of %s-%d could not be read: %s", group_id, topic, index, exc)
            state = None
        if state is not None:
            done = sum(b.last_offset - max(b.first_offset, start) + 1
                       for b in state.batches if b.state in _DONE_STATES and b.last_offset >= start)
            lag = hw - start - done
    return R.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=summary.start_offset, leader_epoch=summary.leader_epoch, lag=lag,
        error_code=0,
    )


async def _describe_group(
    ctx: RequestContext, g: DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup, version: int,
) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup:
    R = DescribeShareGroupOffsetsResponse
    gid = g.group_id
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, gid):
        return R.DescribeShareGroupOffsetsResponseGroup(
            group_id=gid, topics=[], error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
        )
    try:
        _coordinated(ctx, gid, empty=False)
        _persister(ctx)
    except Exception as exc:
        code, message = _error(exc)
        return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=[], error_code=code, error_message=message)
    image: MetadataImage = ctx.ports.groups.metadata.image
    out: list[DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseTopic] = []
    if g.topics is None:
        # every topic the group has state for, among those the principal may describe
        for name in sorted(image.topics):
            info = image.topics[name]
            if name.startswith("__") or not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name,
                                                          log_denied=False):
                continue
            found = await asyncio.gather(*(
                _describe_partition(ctx, gid, name, info.topic_id, i, version) for i in sorted(info.partitions)
            ))
            parts = [p for p in found if p.start_offset >= 0]
            if parts:
                out.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=info.topic_id,
                                                                    partitions=parts))
        return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=out, error_code=0)
    for rt in g.topics:
        t = image.topics.get(rt.topic_name)
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, rt.topic_name):
            out.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=rt.topic_name, topic_id=ZERO_UUID, partitions=[
                R.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=i, start_offset=-1, leader_epoch=-1, lag=-1,
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                ) for i in rt.partitions
            ]))
            continue
        if t is None:
            # as Kafka answers an unknown topic: no offset (-1), not an error
            out.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=rt.topic_name, topic_id=ZERO_UUID, partitions=[
                R.DescribeShareGroupOffsetsResponsePartition(partition_index=i, start_offset=-1, leader_epoch=-1, lag=-1,
                                                            error_code=0)
                for i in rt.partitions
            ]))
            continue
        found = await asyncio.gather(*(
            _describe_partition(ctx, gid, rt.topic_name, t.topic_id, i, version) for i in rt.partitions
        ))
        out.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=rt.topic_name, topic_id=t.topic_id,
                                                            partitions=list(found)))
    return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=out, error_code=0)


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, versions=(0, 1))
async def describe_share_group_offsets(
    ctx: RequestContext, request: DescribeShareGroupOffsetsRequest
) -> DescribeShareGroupOffsetsResponse:
    version = ctx.version
    groups = [await _describe_group(ctx, g, version) for g in request.groups]
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=groups)


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, versions=(0, 0))
async def alter_share_group_offsets(
    ctx: RequestContext, request: AlterShareGroupOffsetsRequest
) -> AlterShareGroupOffsetsResponse:
    R = AlterShareGroupOffsetsResponse
    gid = request.group_id
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, gid):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), responses=[])
    try:
        _coordinated(ctx, gid, empty=True)
        persister = _persister(ctx)
    except Exception as exc:
        code, message = _error(exc)
        return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[])
    image: MetadataImage = ctx.ports.groups.metadata.image
    shares = _shares(ctx)
    out = []
    for rt in request.topics:
        t = image.topics.get(rt.topic_name)
        error: ErrorCode | None = None
        if not ctx.authorize(Operation.READ, ResourceType.TOPIC, rt.topic_name):
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif t is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        parts = []
        for rp in rt.partitions:
            index = rp.partition_index
            if error is not None or t is None or index not in t.partitions:
                parts.append(R.AlterShareGroupOffsetsResponsePartition(
                    partition_index=index, error_code=int(error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                ))
                continue
            if rp.start_offset < -1:
                parts.append(R.AlterShareGroupOffsetsResponsePartition(
                    partition_index=index, error_code=int(ErrorCode.INVALID_REQUEST),
                    error_message=f"invalid start offset {rp.start_offset}",
                ))
                continue
            try:
                current = await persister.summary(gid, t.topic_id, index)
                epoch = current.state_epoch + 1 if current is not None else 1
                await persister.initialize(gid, t.topic_id, index, rp.start_offset, epoch)
            except Exception as exc:
                code, message = _error(exc)
                parts.append(R.AlterShareGroupOffsetsResponsePartition(
                    partition_index=index, error_code=code, error_message=message,
                ))
                continue
            shares.forget((gid, t.topic_id, index))
            log.info("share group %s: start offset of %s-%d set to %d (state epoch %d)", gid, rt.topic_name, index,
                     rp.start_offset, epoch)
            parts.append(R.AlterShareGroupOffsetsResponsePartition(partition_index=index, error_code=0))
        out.append(R.AlterShareGroupOffsetsResponseTopic(
            topic_name=rt.topic_name, topic_id=t.topic_id if t is not None and error is None else ZERO_UUID,
            partitions=parts,
        ))
    return R(throttle_time_ms=0, error_code=0, responses=out)


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, versions=(0, 0))
async def delete_share_group_offsets(
    ctx: RequestContext, request: DeleteShareGroupOffsetsRequest
) -> DeleteShareGroupOffsetsResponse:
    R = DeleteShareGroupOffsetsResponse
    gid = request.group_id
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, gid):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), responses=[])
    try:
        _coordinated(ctx, gid, empty=True)
        persister = _persister(ctx)
    except Exception as exc:
        code, message = _error(exc)
        return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[])
    image: MetadataImage = ctx.ports.groups.metadata.image
    shares = _shares(ctx)
    out = []
    for rt in request.topics:
        name = rt.topic_name
        t = image.topics.get(name)
        if not ctx.authorize(Operation.READ, ResourceType.TOPIC, name):
            out.append(R.DeleteShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=ZERO_UUID, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            continue
        if t is None:
            out.append(R.DeleteShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=ZERO_UUID, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
            continue
        indexes: Sequence[int] = sorted(t.partitions)
        try:
            errors = await persister.delete(gid, {t.topic_id: indexes})
        except Exception as exc:
            code, message = _error(exc)
            out.append(R.DeleteShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=t.topic_id, error_code=code, error_message=message))
            continue
        for i in indexes:
            shares.forget((gid, t.topic_id, i))
        failed = [e for e in errors.values() if e != ErrorCode.NONE]
        if failed:
            out.append(R.DeleteShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=t.topic_id, error_code=int(failed[0]),
                error_message=f"the state of {len(failed)} partition(s) was not deleted"))
            continue
        log.info("share group %s: offsets of %s deleted", gid, name)
        out.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=name, topic_id=t.topic_id, error_code=0))
    return R(throttle_time_ms=0, error_code=0, responses=out)
