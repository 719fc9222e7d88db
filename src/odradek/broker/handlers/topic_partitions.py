"""DescribeTopicPartitions (75), v0: the topics' partitions in pages (KIP-966), as Kafka 4's
admin client describes topics (``kafka-topics.sh --describe``) instead of Metadata.

Topics come sorted by name, from the request's cursor on (its topic, from its partition); one
answer carries at most ``ResponsePartitionLimit`` partitions, capped by the broker's
``max.request.partition.size.limit`` (and at least one), and when partitions are left its
``NextCursor`` names the topic and partition to ask from next.  An empty topic list means every
topic (those the principal may not Describe are left out silently); a named topic the principal
may not Describe is answered TOPIC_AUTHORIZATION_FAILED without its id, an unknown one
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name).  A cursor whose topic
is not among the named ones, or whose partition is negative, makes the request INVALID_REQUEST.
Odradek keeps no eligible leader replicas (ELR is not enabled): those lists are empty.
"""

from __future__ import annotations

import uuid

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.handlers.metadata import authorized_operations
from odradek.cluster.metadata import validate_topic_name
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from odradek.security.acl import Operation, ResourceType

R = DescribeTopicPartitionsResponse
_ZERO_UUID = uuid.UUID(int=0)


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, versions=(0, 0))
async def describe_topic_partitions(
    ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    port = ctx.ports.metadata
    image = port.metadata.image
    all_topics = not request.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    if all_topics:
        names = {n for n in image.topics if n >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: {cursor.topic_name}",
            )
    if cursor is not None and cursor.partition_index < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "DescribeTopicPartitionsRequest cursor partition must be valid")
    denied: list[R.DescribeTopicPartitionsResponseTopic] = []
    allowed: list[str] = []
    for name in sorted(names):
        if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name, log_denied=not all_topics):
            allowed.append(name)
        elif not all_topics:
            denied.append(R.DescribeTopicPartitionsResponseTopic(
                error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), name=name, topic_id=_ZERO_UUID,
            ))
    limit = max(min(port.settings.max_request_partition_size_limit, request.response_partition_limit), 1)
    remaining = limit
    response = R(throttle_time_ms=0)
    for name in allowed:
        info = image.topics.get(name)
        if remaining == 0:
            # the cursor points to the start of the next topic (which may not exist)
            response.next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        if info is None:
            if not all_topics:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except KafkaError:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                response.topics.append(R.DescribeTopicPartitionsResponseTopic(error_code=int(code), name=name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        count = info.partition_count
        upper = min(count, start + remaining)
        partitions = []
        for index in range(start, upper):
            p = info.partitions.get(index)
            if p is None:
                continue
            partitions.append(R.DescribeTopicPartitionsResponsePartition(
                partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas), isr_nodes=list(p.isr), offline_replicas=list(p.offline_replicas),
                eligible_leader_replicas=[], last_known_elr=[],
            ))
        response.topics.append(R.DescribeTopicPartitionsResponseTopic(
            name=name, topic_id=info.topic_id, is_internal=info.internal, partitions=partitions,
            topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, name),
        ))
        if upper < count:
            response.next_cursor = R.Cursor(topic_name=name, partition_index=upper)
            break
        remaining -= len(partitions)
    response.topics.extend(denied)
    return response
