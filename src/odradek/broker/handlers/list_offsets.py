"""ListOffsets (2), v0-11.

v0 is the seeds' getOffsetsBefore: up to ``max_num_offsets`` segment start offsets at or before a
time, newest first (-1 latest, -2 earliest).  v1+: one offset per partition — -1 latest (the
high watermark for consumers), -2 earliest (log start), -3 the record with the largest
timestamp (v7+), -4 earliest local (v8+: the log start, all of a log being local here),
-5 latest tiered (v9+, KIP-1005) and -6 earliest pending upload (v11+, KIP-1023) answered as
Kafka answers them without tiered storage (offset -1, timestamp -1, leader epoch -1), otherwise
the first offset whose timestamp is at or after the one given (-1 when there is none).  As in
Kafka, a special timestamp the request's version does not know (or an unknown negative one) is
UNSUPPORTED_VERSION for its partition.  v10's ``timeout_ms`` bounds remote reads, of which there
are none here.
"""

from __future__ import annotations

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.ports import Partition
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from odradek.security.acl import Operation, ResourceType

R = ListOffsetsResponse
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
#: the first version that may ask for each special timestamp (Kafka's timestampMinSupportedVersion)
_SPECIAL_SINCE = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                  EARLIEST_PENDING_UPLOAD: 11}


def _epoch_at(p: Partition, offset: int) -> int:
    epoch = -1
    for e, start in p.log.epochs.entries:
        if start <= offset:
            epoch = e
    return epoch


def _lookup(p: Partition, timestamp: int, replica_id: int, version: int, committed: bool) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) for a v1+ request; a read_committed one (v2+
    ``isolation_level`` 1) sees up to the last stable offset."""
    lg = p.log
    if replica_id >= 0:
        visible = lg.log_end_offset
    else:
        visible = min(p.high_watermark, lg.last_stable_offset) if committed else p.high_watermark
    if timestamp == LATEST:
        return -1, visible, p.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, lg.log_start_offset, _epoch_at(p, lg.log_start_offset)
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1  # nothing is tiered
    if timestamp == MAX_TIMESTAMP and version >= 7:
        ts, offset = lg.max_timestamp_and_offset()
        # storage keeps the last offset of the batch holding the largest timestamp; Kafka (since
        # KAFKA-16310) answers with the first record that carries it
        exact = lg.offset_for_timestamp(ts) if offset >= 0 else None
        if exact is not None and exact[1] == ts:
            offset = exact[0]
        if offset < 0 or offset >= visible:
            return -1, -1, -1
        return ts, offset, _epoch_at(p, offset)
    if timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported special timestamp {timestamp}")
    found = lg.offset_for_timestamp(timestamp)
    if found is None or found[0] >= visible:
        return -1, -1, -1
    return found[1], found[0], _epoch_at(p, found[0])


@handles(ApiKey.LIST_OFFSETS, versions=(0, 11))
async def list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    port = ctx.ports.list_offsets
    version = ctx.version
    topics = []
    for t in request.topics:
        parts = []
        allowed = ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        for lp in t.partitions:
            pr = R.ListOffsetsPartitionResponse(partition_index=lp.partition_index)
            parts.append(pr)
            if not allowed:
                pr.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            if version >= 1 and lp.timestamp < 0 and _SPECIAL_SINCE.get(lp.timestamp, 1 << 15) > version:
                pr.error_code = int(ErrorCode.UNSUPPORTED_VERSION)
                pr.timestamp = pr.offset = -1
                continue
            try:
                p = port.partitions.for_fetch(t.name, lp.partition_index, lp.current_leader_epoch, -1)
                if version == 0:
                    offsets = p.log.offsets_before(lp.timestamp, lp.max_num_offsets)
                    if lp.timestamp == LATEST:
                        offsets = [min(o, p.high_watermark) for o in offsets]
                    pr.old_style_offsets = offsets
                else:
                    committed = version >= 2 and request.isolation_level == 1
                    pr.timestamp, pr.offset, epoch = _lookup(p, lp.timestamp, request.replica_id, version, committed)
                    if version >= 4:
                        pr.leader_epoch = epoch
            except KafkaError as exc:
                pr.error_code = int(exc.code)
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
