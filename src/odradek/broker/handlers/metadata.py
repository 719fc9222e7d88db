"""Metadata (3), v0-13 (v13: a top-level error code, KIP-1102, always 0 here).

v0: an empty topic list means every topic; v1+: null means every topic and an empty list none.
v4+ carries ``allow_auto_topic_creation``; below it, auto-creation follows the broker's
``auto.create.topics.enable``.  v10+ may name topics by id (a null name and a topic id).
Internal topics are listed only when asked for by name or when every topic is requested.

One request auto-creates at most ``auto.create.topics.max.per.request`` topics; the other unknown
topics it names are answered LEADER_NOT_AVAILABLE (retriable: a client asking again creates the
next ones), and the handler yields to the event loop between creations, so other clients keep
their latency while one client creates many topics.  (``request.max.topics`` bounds the names
a request may carry at all; see :mod:`odradek.broker.server`.)

A named topic this broker's image lacks while the cluster may have it is answered
LEADER_NOT_AVAILABLE (retriable), never UNKNOWN_TOPIC_OR_PARTITION: before the controller's first
metadata reached a just-restarted ZooKeeper broker, and when auto-creating finds the topic already
exists (as Kafka answers).  librdkafka takes "unknown topic" for a deleted topic and drops every
partition of it at once, stranding a producer's records until they time out.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from odradek.broker.dispatch import RequestContext, handles
from odradek.cluster.metadata import MetadataImage, TopicInfo, validate_topic_name
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse
from odradek.security.acl import CLUSTER_NAME, RESOURCE_OPERATIONS, Operation, ResourceType
from odradek.security.acl import authorized_operations as acl_operations

R = MetadataResponse
log = logging.getLogger(__name__)
# version -> (the metadata image, its topics' responses) of the last whole-cluster request
_ALL_TOPICS: dict[int, tuple[MetadataImage, list[MetadataResponse.MetadataResponseTopic]]] = {}
NO_AUTHORIZED_OPERATIONS = -2147483648


def topic_response(t: TopicInfo, version: int) -> MetadataResponse.MetadataResponseTopic:
    partitions = [
        R.MetadataResponsePartition(
            error_code=0,
            partition_index=p.partition,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            offline_replicas=list(p.offline_replicas),
        )
        for p in sorted(t.partitions.values(), key=lambda p: p.partition)
    ]
    return R.MetadataResponseTopic(
        error_code=0,
        name=t.name,
        topic_id=t.topic_id,
        is_internal=t.internal,
        partitions=partitions,
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


@handles(ApiKey.METADATA, versions=(0, 13))
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    port = ctx.ports.metadata
    version = ctx.version
    requested = request.topics
    if version == 0 and requested == []:
        requested = None
    allow_create = port.settings.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
    create_budget = port.settings.auto_create_topics_max_per_request
    refused = 0
    known = port.metadata_known()
    image = port.metadata.image
    topics: list[R.MetadataResponseTopic] = []
    if requested is None:
        # every topic: built once per metadata image and version (images are immutable; the
        # response objects are only read by the encoder), not per request
        cached = _ALL_TOPICS.get(version)
        if cached is not None and cached[0] is image:
            topics = list(cached[1])
        else:
            for info in sorted(image.topics.values(), key=lambda t: t.name):
                topics.append(topic_response(info, version))
            _ALL_TOPICS[version] = (image, list(topics))
    else:
        for req in requested:
            name = req.name
            if name is None:
                found = image.topic_by_id(req.topic_id) if req.topic_id != uuid.UUID(int=0) else None
                if found is None:
                    topics.append(
                        R.MetadataResponseTopic(
                            error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                            name=None if version >= 12 else "",
                            topic_id=req.topic_id,
                            is_internal=False,
                        )
                    )
                    continue
                if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, found.name):
                    topics.append(
                        R.MetadataResponseTopic(
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            name=None if version >= 12 else "",
                            topic_id=req.topic_id,
                            is_internal=False,
                        )
                    )
                    continue
                topics.append(topic_response(found, version))
                continue
            if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name):
                # whether it exists is not disclosed
                topics.append(_denied(name))
                continue
            t: TopicInfo | None = image.topics.get(name)
            if t is None:
                try:
                    validate_topic_name(name)
                except KafkaError as exc:
                    topics.append(R.MetadataResponseTopic(error_code=exc.code, name=name, is_internal=False))
                    continue
                if not known:
                    # this broker serves before the controller's first metadata reached it (just
                    # restarted): the topic may well exist.  Retriable, never "unknown topic",
                    # which librdkafka takes for a deleted topic and drops all its partitions
                    topics.append(
                        R.MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, is_internal=False)
                    )
                    continue
                if allow_create and create_budget <= 0:
                    refused += 1
                    topics.append(
                        R.MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, is_internal=False)
                    )
                    continue
                if allow_create and not (
                    ctx.authorize_cluster(Operation.CREATE, log_denied=False)
                    or ctx.authorize(Operation.CREATE, ResourceType.TOPIC, name)
                ):
                    topics.append(_denied(name))
                    continue
                if allow_create:
                    create_budget -= 1
                    await asyncio.sleep(0)  # let other clients in between creations
                    t = port.metadata.image.topics.get(name)
                    try:
                        if t is None:
                            t = await port.topics.auto_create(name)
                    except KafkaError as exc:
                        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                            topics.append(R.MetadataResponseTopic(error_code=exc.code, name=name, is_internal=False))
                            continue
                        t = port.metadata.image.topics.get(name)
                        if t is None:
                            # it exists in the cluster but not yet in this broker's image (a
                            # broker just restarted, before the controller's metadata reached
                            # it): retriable, as Kafka answers; UNKNOWN_TOPIC_OR_PARTITION
                            # makes librdkafka drop every partition of the topic at once
                            topics.append(
                                R.MetadataResponseTopic(
                                    error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, is_internal=False
                                )
                            )
                            continue
                if t is None:
                    topics.append(
                        R.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False)
                    )
                    continue
            topics.append(topic_response(t, version))
    if refused:
        log.warning(
            "Metadata v%d from %s (client %s): %d unknown topics not auto-created, over "
            "auto.create.topics.max.per.request=%d (answered LEADER_NOT_AVAILABLE)",
            version,
            ctx.client_host,
            ctx.header.client_id,
            refused,
            port.settings.auto_create_topics_max_per_request,
        )
    authorizer = port.authorizer
    if requested is None and authorizer is not None:
        # every topic: those the principal may Describe, silently
        topics = [
            t for t in topics
            if t.name is not None and ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.name, log_denied=False)
        ]
    if version >= 8 and request.include_topic_authorized_operations:
        topics = [_with_operations(ctx, t) for t in topics]
    cluster_ops = NO_AUTHORIZED_OPERATIONS
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_ops = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    image = port.metadata.image
    brokers = []
    for b in sorted(image.brokers.values(), key=lambda b: b.broker_id):
        e = b.endpoint(ctx.listener) or b.endpoint()
        if e is not None:
            brokers.append(R.MetadataResponseBroker(node_id=b.broker_id, host=e.host, port=e.port, rack=b.rack))
    return R(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=image.cluster_id,
        controller_id=image.controller_id,
        topics=topics,
        cluster_authorized_operations=cluster_ops,
    )


def _denied(name: str) -> MetadataResponse.MetadataResponseTopic:
    return R.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, is_internal=False)


def authorized_operations(ctx: RequestContext, rtype: ResourceType, name: str) -> int:
    """KIP-430's bit set of the operations the principal may do on the resource (all of the
    resource type's without an authorizer)."""
    authorizer = ctx.ports.authorizer
    if authorizer is None:
        return sum(1 << op.value for op in RESOURCE_OPERATIONS[rtype])
    return acl_operations(authorizer.index, ctx.session.principal_name, ctx.client_host, rtype, name)


def _with_operations(ctx: RequestContext, t: MetadataResponse.MetadataResponseTopic) -> MetadataResponse.MetadataResponseTopic:
    """A copy of a topic's answer (the cached ones are shared) with its authorized operations."""
    if t.error_code or t.name is None:
        return t
    return R.MetadataResponseTopic(
        error_code=t.error_code,
        name=t.name,
        topic_id=t.topic_id,
        is_internal=t.is_internal,
        partitions=t.partitions,
        topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, t.name),
    )
