"""Topic administration and cluster information.

CreateTopics (19) v0-7, DeleteTopics (20) v0-6, CreatePartitions (37) v0-3, DeleteRecords (21)
v0-2, DescribeCluster (60) v0-1, DescribeLogDirs (35) v0-4, AlterReplicaLogDirs (34) v1-2, OffsetForLeaderEpoch (23) v0-4 and
InitProducerId (22) v0-4.  Topic changes go through the metadata backend; the broker applies the
new image to its partitions when the backend publishes it.
"""

from __future__ import annotations

import logging
import os
import uuid

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.handlers.configs import topic_config_entries, validate_topic_configs
from odradek.broker.handlers.metadata import authorized_operations
from odradek.broker.ports import Partition
from odradek.broker.topics import is_internal
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
from odradek.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from odradek.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from odradek.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from odradek.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from odradek.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from odradek.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from odradek.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from odradek.security.acl import CLUSTER_NAME, Operation, ResourceType

NO_AUTHORIZED_OPERATIONS = -2147483648

log = logging.getLogger(__name__)

_NO_TOPIC_ID = uuid.UUID(int=0)


class _Mutations:
    """KIP-599's controller mutation quota for one request: partitions created or deleted are
    charged to the principal's and client id's ``controller_mutation_rate``.  Versions that know
    THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) are
    strict: once over the quota, further topics are refused with it; older ones are charged and
    told to wait (``throttle_time_ms``)."""

    def __init__(self, ctx: RequestContext, strict_from: int) -> None:
        quotas = ctx.ports.admin.quotas
        self.quotas = quotas if quotas is not None and quotas.mutation.index else None
        self.clock = ctx.ports.admin.clock
        self.user = ctx.session.principal.name
        self.client_id = ctx.header.client_id or ""
        self.strict = ctx.version >= strict_from
        self.throttle_ms = 0

    def check(self) -> None:
        """Before a mutation: refuse it while over the quota (strict versions)."""
        q = self.quotas
        if q is None or not self.strict:
            return
        over = q.over(q.mutation, self.user, self.client_id, float(self.clock.monotonic_ms()))
        if over:
            self.throttle_ms = max(self.throttle_ms, over)
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")

    def charge(self, partitions: int) -> None:
        q = self.quotas
        if q is None or partitions <= 0:
            return
        throttle = q.record(q.mutation, self.user, self.client_id, float(partitions), float(self.clock.monotonic_ms()))
        self.throttle_ms = max(self.throttle_ms, throttle)


@handles(ApiKey.CREATE_TOPICS, versions=(0, 7))
async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    R = CreateTopicsResponse
    port = ctx.ports.admin
    version = ctx.version
    names = [t.name for t in request.topics]
    settings = port.settings()
    per_request = settings.max_partitions_per_request
    requested = 0
    results = []
    mutations = _Mutations(ctx, strict_from=6)
    cluster_create = ctx.authorize_cluster(Operation.CREATE, log_denied=False)
    for t in request.topics:
        res = R.CreatableTopicResult(name=t.name, error_message=None)
        results.append(res)
        try:
            if not cluster_create and not ctx.authorize(Operation.CREATE, ResourceType.TOPIC, t.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if names.count(t.name) > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"topic '{t.name}' appears more than once in the request")
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            validate_topic_configs(configs, topic=None if request.validate_only else t.name)
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
            if assignments and (t.num_partitions != -1 or t.replication_factor != -1):
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "num_partitions and replication_factor must be -1 when assignments are given",
                )
            partitions = t.num_partitions if t.num_partitions != -1 else settings.num_partitions
            rf = t.replication_factor if t.replication_factor != -1 else settings.default_replication_factor
            if assignments:
                partitions, rf = len(assignments), len(next(iter(assignments.values())))
            if partitions > 0 and requested + partitions > per_request:
                raise KafkaError(
                    ErrorCode.POLICY_VIOLATION,
                    f"this request asks for {requested + partitions} partitions with topic '{t.name}', "
                    f"more than max.partitions.per.request={per_request}",
                )
            requested += max(partitions, 0)
            mutations.check()
            info = await port.topics.create(
                t.name, partitions, rf, configs, assignments, validate_only=request.validate_only
            )
            if not request.validate_only:
                mutations.charge(info.partition_count)
            res.topic_id = info.topic_id if not request.validate_only else uuid.UUID(int=0)
            if version >= 5:
                res.num_partitions = info.partition_count
                res.replication_factor = len(next(iter(info.partitions.values())).replicas)
                res.configs = [
                    R.CreatableTopicConfigs(
                        name=e.name, value=e.value, read_only=e.read_only, config_source=e.config_source, is_sensitive=False
                    )
                    for e in topic_config_entries(port.configs, info.name, info.configs, version=1)
                ]
        except KafkaError as exc:
            res.error_code = int(exc.code)
            res.error_message = exc.message or None
    return R(throttle_time_ms=mutations.throttle_ms, topics=results)


@handles(ApiKey.DELETE_TOPICS, versions=(0, 6))
async def delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    R = DeleteTopicsResponse
    port = ctx.ports.admin
    version = ctx.version
    wanted: list[tuple[str | None, uuid.UUID]] = (
        [(t.name, t.topic_id) for t in request.topics] if version >= 6 else [(n, uuid.UUID(int=0)) for n in request.topic_names]
    )
    results = []
    mutations = _Mutations(ctx, strict_from=5)
    for name, topic_id in wanted:
        res = R.DeletableTopicResult(name=name if name is not None or version >= 6 else "", topic_id=topic_id)
        results.append(res)
        try:
            if name is not None and topic_id != _NO_TOPIC_ID:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id.")
            if name is None:
                if topic_id == _NO_TOPIC_ID:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
                found = port.metadata.image.topic_by_id(topic_id)
                if found is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic with id {topic_id}")
                if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, found.name):
                    # asked by id: the name stays unknown to a principal that may not describe it
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
                name = res.name = found.name
            if not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            info = port.metadata.image.topics.get(name)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
            res.topic_id = info.topic_id
            mutations.check()
            await port.topics.delete(name)
            mutations.charge(info.partition_count)
        except KafkaError as exc:
            res.error_code = int(exc.code)
            res.error_message = exc.message or None
            if exc.code is ErrorCode.TOPIC_DELETION_DISABLED and version < 3:
                res.error_code = int(ErrorCode.INVALID_REQUEST)  # the code came with v3, as Kafka answers
    return R(throttle_time_ms=mutations.throttle_ms, responses=results)


@handles(ApiKey.CREATE_PARTITIONS, versions=(0, 3))
async def create_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    R = CreatePartitionsResponse
    port = ctx.ports.admin
    per_request = port.settings().max_partitions_per_request
    requested = 0
    results = []
    mutations = _Mutations(ctx, strict_from=3)
    for t in request.topics:
        res = R.CreatePartitionsTopicResult(name=t.name)
        results.append(res)
        try:
            if not ctx.authorize(Operation.ALTER, ResourceType.TOPIC, t.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            info = port.metadata.image.topics.get(t.name)
            adding = t.count - info.partition_count if info is not None else 0
            if adding > 0 and requested + adding > per_request:
                raise KafkaError(
                    ErrorCode.POLICY_VIOLATION,
                    f"this request adds {requested + adding} partitions with topic '{t.name}', "
                    f"more than max.partitions.per.request={per_request}",
                )
            requested += max(adding, 0)
            assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None
            mutations.check()
            await port.topics.create_partitions(t.name, t.count, assignments, validate_only=request.validate_only)
            if not request.validate_only:
                mutations.charge(adding)
        except KafkaError as exc:
            res.error_code = int(exc.code)
            res.error_message = exc.message or None
    return R(throttle_time_ms=mutations.throttle_ms, results=results)


@handles(ApiKey.DELETE_RECORDS, versions=(0, 2))
async def delete_records(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    """Offsets are checked here; moving the log start offset (which rewrites the leader-epoch
    checkpoint) and removing the segments below it run on a worker thread."""
    R = DeleteRecordsResponse
    port = ctx.ports.admin
    topics = []
    moves: list[tuple[Partition, int, DeleteRecordsResponse.DeleteRecordsPartitionResult]] = []
    for t in request.topics:
        parts = []
        refused_internal: list[int] = []
        allowed = ctx.authorize(Operation.DELETE, ResourceType.TOPIC, t.name)
        for dp in t.partitions:
            res = R.DeleteRecordsPartitionResult(partition_index=dp.partition_index, low_watermark=-1)
            parts.append(res)
            if not allowed:
                res.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            try:
                if is_internal(t.name):
                    if port.metadata.image.partition(t.name, dp.partition_index) is None:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    # Kafka's ReplicaManager refuses these before it looks for the partition
                    refused_internal.append(dp.partition_index)
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION)
                p = port.replicas.leader_partition(t.name, dp.partition_index)
                offset = p.high_watermark if dp.offset == -1 else dp.offset
                if offset < 0 or offset > p.high_watermark:
                    raise KafkaError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"offset {dp.offset} is not in [0, high watermark {p.high_watermark}]",
                    )
                moves.append((p, offset, res))
            except KafkaError as exc:
                res.error_code = int(exc.code)
        if refused_internal:
            log.warning(
                "DeleteRecords from %s (client %s, %s) refused: cannot delete records of internal topic %s "
                "(partitions %s)",
                ctx.session.principal, ctx.header.client_id, ctx.client_host, t.name, refused_internal,
            )
        topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    if moves:

        def move() -> None:
            for p, offset, res in moves:
                lg = p.log
                try:
                    lg.maybe_increment_log_start_offset(offset)
                    lg.delete_old_segments()
                    res.low_watermark = lg.log_start_offset
                except KafkaError as exc:
                    res.error_code = int(exc.code)

        await port.files.run_io(move)
        port.files.checkpoint_soon()
    return R(throttle_time_ms=0, topics=topics)


@handles(ApiKey.DESCRIBE_CLUSTER, versions=(0, 2))
async def describe_cluster(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    R = DescribeClusterResponse
    image = ctx.ports.admin.metadata.image
    brokers = []
    for b in sorted(image.brokers.values(), key=lambda b: b.broker_id):
        e = b.endpoint(ctx.listener) or b.endpoint()
        if e is not None:
            brokers.append(R.DescribeClusterBroker(broker_id=b.broker_id, host=e.host, port=e.port, rack=b.rack))
    if ctx.version >= 1 and request.endpoint_type != 1:
        return R(error_code=int(ErrorCode.MISMATCHED_ENDPOINT_TYPE), error_message="only broker endpoints are served", cluster_id=image.cluster_id, endpoint_type=request.endpoint_type)
    return R(
        throttle_time_ms=0,
        error_code=0,
        cluster_id=image.cluster_id,
        controller_id=image.controller_id,
        brokers=brokers,
        cluster_authorized_operations=authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
        if request.include_cluster_authorized_operations
        else NO_AUTHORIZED_OPERATIONS,
    )


@handles(ApiKey.DESCRIBE_LOG_DIRS, versions=(0, 4))
async def describe_log_dirs(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    R = DescribeLogDirsResponse
    port = ctx.ports.admin
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), results=[])
    results = []
    failures = port.replicas.log_dirs
    for d in port.logs.dirs:
        # KAFKA_STORAGE_ERROR for a dir the failure channel took offline (as Kafka), with no
        # partitions, and for one that is full (its partitions still listed: they serve reads)
        code = failures.error_code(d)
        if failures.offline(d):
            results.append(R.DescribeLogDirsResult(error_code=int(code), log_dir=str(d.resolve()), topics=[]))
            continue
        by_topic: dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]] = {}
        for lg in port.logs.logs():
            if lg.directory.parent != d or (wanted is not None and (lg.topic, lg.partition) not in wanted):
                continue
            p = port.replicas.get(lg.topic, lg.partition)
            lag = 0 if p is None or p.is_leader else max(0, p.high_watermark - lg.log_end_offset)
            by_topic.setdefault(lg.topic, []).append(
                R.DescribeLogDirsPartition(partition_index=lg.partition, partition_size=lg.size_bytes, offset_lag=lag)
            )
        # moves in progress to this dir: the future replica, its lag the offsets still to copy
        for target, future, behind in port.replicas.dir_moves.future_logs():
            if target != d or (wanted is not None and (future.topic, future.partition) not in wanted):
                continue
            by_topic.setdefault(future.topic, []).append(R.DescribeLogDirsPartition(
                partition_index=future.partition, partition_size=future.size_bytes, offset_lag=behind,
                is_future_key=True,
            ))
        try:
            st = os.statvfs(d)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            total = usable = -1
        results.append(
            R.DescribeLogDirsResult(
                error_code=int(code),
                log_dir=str(d.resolve()),
                topics=[R.DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in sorted(by_topic.items())],
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return R(throttle_time_ms=0, error_code=0, results=results)


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS, versions=(1, 2))
async def alter_replica_log_dirs(ctx: RequestContext, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    """Move replicas of this broker between its log dirs (Alter on the Cluster); per partition:
    NONE (the move started, or the replica is there already, or it is created there when it
    comes), LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION."""
    R = AlterReplicaLogDirsResponse
    port = ctx.ports.admin
    allowed = ctx.authorize_cluster(Operation.ALTER)
    image = port.metadata.image
    results: dict[str, list[AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult]] = {}
    for d in request.dirs:
        for t in d.topics:
            for partition in t.partitions:
                if not allowed:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif t.name not in image.topics or partition not in image.topics[t.name].partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = port.replicas.dir_moves.request(t.name, partition, d.path)
                results.setdefault(t.name, []).append(
                    R.AlterReplicaLogDirPartitionResult(partition_index=partition, error_code=int(code)))
    return R(throttle_time_ms=0, results=[
        R.AlterReplicaLogDirTopicResult(topic_name=name, partitions=parts) for name, parts in results.items()
    ])


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, versions=(0, 4))
async def offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    R = OffsetForLeaderEpochResponse
    port = ctx.ports.admin
    topics = []
    # inter-broker at first, consumers too since KIP-320: ClusterAction, or Describe on the topic
    cluster_action = ctx.authorize_cluster(Operation.CLUSTER_ACTION, log_denied=False)
    for t in request.topics:
        parts = []
        allowed = cluster_action or ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.topic)
        for op in t.partitions:
            res = R.EpochEndOffset(partition=op.partition)
            parts.append(res)
            if not allowed:
                res.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            try:
                p = port.partitions.for_fetch(t.topic, op.partition, op.current_leader_epoch, request.replica_id)
                epoch, end = p.log.epochs.end_offset_for(op.leader_epoch, p.log.log_end_offset)
                res.leader_epoch, res.end_offset = epoch, end
            except KafkaError as exc:
                res.error_code = int(exc.code)
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


@handles(ApiKey.INIT_PRODUCER_ID, versions=(0, 5))
async def init_producer_id(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    R = InitProducerIdResponse
    if request.transactional_id is None and not (
        ctx.authorize_cluster(Operation.IDEMPOTENT_WRITE, log_denied=False)
        or ctx.authorize_any(Operation.WRITE, ResourceType.TOPIC)
    ):
        # KIP-679: IdempotentWrite on the cluster, or Write on some topic
        ctx.authorize_cluster(Operation.IDEMPOTENT_WRITE)  # the denial, in the audit log
        return R(
            throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), producer_id=-1, producer_epoch=-1
        )
    if request.transactional_id is not None and not ctx.authorize(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
    ):
        return R(
            throttle_time_ms=0,
            error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            producer_id=-1,
            producer_epoch=-1,
        )
    # KIP-360 (v3+): the producer id and epoch the producer has, both or neither
    expected_pid, expected_epoch = (request.producer_id, request.producer_epoch) if ctx.version >= 3 else (-1, -1)
    if (expected_pid == -1) != (expected_epoch == -1):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST), producer_id=-1, producer_epoch=-1)
    if request.transactional_id is None:
        # an idempotent producer: always a new producer id at epoch 0, whatever id and epoch it
        # gives (only a transactional id's coordinator knows an id to bump; an idempotent
        # producer bumps its own epoch, and asks for a new id once the epoch is exhausted)
        pid = await ctx.ports.admin.producer_ids.allocate()
        return R(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
    try:
        pid, epoch = await ctx.ports.admin.transactions.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected_pid, expected_epoch
        )
    except KafkaError as exc:
        code = exc.code
        if ctx.version < 4 and code is ErrorCode.PRODUCER_FENCED:
            code = ErrorCode.INVALID_PRODUCER_EPOCH  # before KIP-588
        return R(throttle_time_ms=0, error_code=int(code), producer_id=-1, producer_epoch=-1)
    return R(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch)
