"""Transactions (KIP-98, KIP-447, KIP-664): AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions, ListTransactions, DescribeProducers.

Transactions v2 (KIP-890 part 2) come with the request versions, as Kafka infers them: EndTxn v5
bumps the producer epoch and answers the new id and epoch; TxnOffsetCommit v5 adds the group's
offsets partition to the transaction (no AddOffsetsToTxn before it); AddPartitionsToTxn v5
without verify_only is a partition leader's implicit add for a Produce v12+.

Authorization as Kafka's KafkaApis checks it: Write on the TransactionalId for the producer's
requests, Write on each topic added, Read on the group for offsets, ClusterAction for the
coordinators' WriteTxnMarkers, Describe on the TransactionalId to describe or list one.
"""

from __future__ import annotations

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.topics import OFFSETS_TOPIC, is_internal
from odradek.cluster.group import OffsetAndMetadata
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from odradek.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from odradek.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from odradek.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from odradek.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from odradek.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from odradek.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from odradek.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from odradek.security.acl import Operation, ResourceType

_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
           "PrepareEpochFence")


def _code(exc: BaseException) -> ErrorCode:
    return exc.code if isinstance(exc, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR


def _fenced_as_known(code: ErrorCode, version: int) -> ErrorCode:
    """KIP-588: AddPartitionsToTxn, AddOffsetsToTxn and EndTxn before v2 (and InitProducerId
    before v4) were defined before PRODUCER_FENCED; Kafka answers them INVALID_PRODUCER_EPOCH,
    which their clients treat as fatal, as they must (librdkafka's AddOffsetsToTxn v0 takes
    PRODUCER_FENCED for an abortable error; aiokafka's AddPartitionsToTxn v0 does not know it)."""
    return ErrorCode.INVALID_PRODUCER_EPOCH if code is ErrorCode.PRODUCER_FENCED and version < 2 else code


def _txn_write_allowed(ctx: RequestContext, transactional_id: str) -> None:
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, versions=(0, 5))
async def add_partitions_to_txn(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    R = AddPartitionsToTxnResponse
    version = ctx.version
    if version <= 3:
        txns = [AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=request.v3_and_below_transactional_id,
            producer_id=request.v3_and_below_producer_id,
            producer_epoch=request.v3_and_below_producer_epoch,
            topics=request.v3_and_below_topics,
        )]
    else:
        # v4+: the batched form brokers send to verify (KIP-890) needs ClusterAction
        if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
            return R(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        txns = request.transactions
    results = []
    for txn in txns:
        results.append(R.AddPartitionsToTxnResult(
            transactional_id=txn.transactional_id, topic_results=await _add_one(ctx, txn, from_client=version <= 3)
        ))
    if version <= 3:
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=results[0].topic_results)
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=results)


async def _add_one(
    ctx: RequestContext, txn: AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction, *, from_client: bool
) -> list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
    R = AddPartitionsToTxnResponse
    port = ctx.ports.transactions
    wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    try:
        _txn_write_allowed(ctx, txn.transactional_id)
        for topic, p in wanted:
            if is_internal(topic) and from_client:
                # Kafka leaves internal topics out of the ones a client's request may write
                errors[(topic, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, topic):
                errors[(topic, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                info = port.metadata.image.topics.get(topic)
                if info is None or not 0 <= p < info.partition_count:
                    errors[(topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if errors:
            # Kafka: the others are not attempted
            for tp in wanted:
                errors.setdefault(tp, ErrorCode.OPERATION_NOT_ATTEMPTED)
        else:
            await port.transactions.add_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted, verify_only=txn.verify_only,
                client_tv=2 if ctx.version > 3 and not txn.verify_only else 0,
            )
    except KafkaError as exc:
        errors = dict.fromkeys(wanted, _fenced_as_known(exc.code, ctx.version))
    by_topic: dict[str, list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = {}
    for topic, p in wanted:
        by_topic.setdefault(topic, []).append(R.AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=int(errors.get((topic, p), ErrorCode.NONE))
        ))
    return [R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=rs) for t, rs in by_topic.items()]


@handles(ApiKey.ADD_OFFSETS_TO_TXN, versions=(0, 4))
async def add_offsets_to_txn(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    try:
        _txn_write_allowed(ctx, request.transactional_id)
        if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        await ctx.ports.transactions.groups.ensure_topic()
        await ctx.ports.transactions.transactions.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
        code = ErrorCode.NONE
    except KafkaError as exc:
        code = _fenced_as_known(exc.code, ctx.version)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=int(code))


@handles(ApiKey.END_TXN, versions=(0, 5))
async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    pid, epoch = -1, -1
    try:
        _txn_write_allowed(ctx, request.transactional_id)
        pid, epoch = await ctx.ports.transactions.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
            client_tv=2 if ctx.version >= 5 else 0,
        )
        code = ErrorCode.NONE
    except KafkaError as exc:
        code = _fenced_as_known(exc.code, ctx.version)
    return EndTxnResponse(throttle_time_ms=0, error_code=int(code), producer_id=pid, producer_epoch=epoch)


@handles(ApiKey.TXN_OFFSET_COMMIT, versions=(0, 5))
async def txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    R = TxnOffsetCommitResponse
    port = ctx.ports.transactions
    wanted = [(t, p) for t in request.topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    try:
        _txn_write_allowed(ctx, request.transactional_id)
        if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        port.groups.check(request.group_id)
        now = port.now_ms()
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        for t, p in wanted:
            if not ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name):
                errors[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif port.metadata.image.partition(t.name, p.partition_index) is None:
                errors[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", now, -1
                )
        error = await _verified(ctx, request) if offsets else ErrorCode.NONE
        if error is not ErrorCode.NONE:
            errors.update(dict.fromkeys(offsets, error))
        elif offsets:
            error, per = await port.groups.txn_commit(
                request.group_id, request.producer_id, request.producer_epoch, request.generation_id_or_member_epoch,
                request.member_id, request.group_instance_id, offsets,
            )
            if error is not ErrorCode.NONE:
                errors.update(dict.fromkeys(offsets, error))
            else:
                errors.update(per)
    except KafkaError as exc:
        errors = {(t.name, p.partition_index): exc.code for t, p in wanted}
    if ctx.version < 2:
        # clients before Kafka 2.0 could crash on COORDINATOR_LOAD_IN_PROGRESS here (KAFKA-7296):
        # Kafka answers them COORDINATOR_NOT_AVAILABLE, which they retry
        for tp, code in errors.items():
            if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                errors[tp] = ErrorCode.COORDINATOR_NOT_AVAILABLE
    topics = []
    for t in request.topics:
        topics.append(R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            R.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=int(errors.get((t.name, p.partition_index), ErrorCode.NONE)),
            )
            for p in t.partitions
        ]))
    return R(throttle_time_ms=0, topics=topics)


# a verification's answers as the group coordinator reports them (Kafka's coordinator runtime)
_VERIFY_AS_COMMIT = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,  # the coordinator to retry
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


async def _verified(ctx: RequestContext, request: TxnOffsetCommitRequest) -> ErrorCode:
    """KIP-890, as Kafka verifies transactional offset commits: the group's offsets partition must
    be in the producer's ongoing transaction at that epoch, as its transaction coordinator says.
    A fenced producer (its transaction aborted, say, for its timeout) is refused
    INVALID_PRODUCER_EPOCH, one that never called AddOffsetsToTxn INVALID_TXN_STATE; without the
    check their offsets were written in a transaction no marker would ever end, and the group's
    offsets stayed unstable (KIP-447's OffsetFetch) for good."""
    port = ctx.ports.transactions
    add = ctx.version >= 5  # transactions v2: the commit adds the group to the transaction itself
    if not add and not port.verify_transactions:
        return ErrorCode.NONE
    tp = (OFFSETS_TOPIC, port.groups.partition_for(request.group_id))
    try:
        code = await port.transactions.verify(
            request.transactional_id, request.producer_id, request.producer_epoch, [tp], add=add
        )
    except KafkaError as exc:
        code = exc.code
    return _VERIFY_AS_COMMIT.get(code, code)


@handles(ApiKey.WRITE_TXN_MARKERS, versions=(0, 2))
async def write_txn_markers(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    R = WriteTxnMarkersResponse
    allowed = ctx.authorize_cluster(Operation.CLUSTER_ACTION)
    results = []
    for marker in request.markers:
        tps = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        if not allowed:
            errors = dict.fromkeys(tps, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            errors = await ctx.ports.transactions.markers.write(
                marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch, tps
            )
        results.append(R.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=int(errors[(t.name, p)]))
                for p in t.partition_indexes
            ])
            for t in marker.topics
        ]))
    return R(markers=results)


@handles(ApiKey.DESCRIBE_TRANSACTIONS, versions=(0, 0))
async def describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    R = DescribeTransactionsResponse
    states = []
    for txn_id in request.transactional_ids:
        st = R.TransactionState(transactional_id=txn_id, transaction_state="", producer_id=-1, producer_epoch=-1)
        states.append(st)
        try:
            if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
                raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            d = ctx.ports.transactions.transactions.describe(txn_id)
        except KafkaError as exc:
            st.error_code = int(exc.code)
            continue
        st.transaction_state = d.state
        st.transaction_timeout_ms = d.timeout_ms
        st.transaction_start_time_ms = d.start_ms
        st.producer_id, st.producer_epoch = d.producer_id, d.producer_epoch
        by_topic: dict[str, list[int]] = {}
        for t, p in d.partitions:
            if t != OFFSETS_TOPIC:
                by_topic.setdefault(t, []).append(p)
        st.topics = [R.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
    return R(throttle_time_ms=0, transaction_states=states)


@handles(ApiKey.LIST_TRANSACTIONS, versions=(0, 1))
async def list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    R = ListTransactionsResponse
    wanted_states = set(request.state_filters)
    unknown = [s for s in request.state_filters if s not in _STATES]
    pids = set(request.producer_id_filters)
    now = ctx.ports.transactions.now_ms()
    duration = request.duration_filter if ctx.version >= 1 else -1
    out = []
    for d in ctx.ports.transactions.transactions.list_all():
        if wanted_states and d.state not in wanted_states:
            continue
        if pids and d.producer_id not in pids:
            continue
        if duration >= 0 and (d.start_ms < 0 or now - d.start_ms < duration):
            continue
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, d.transactional_id, log_denied=False):
            continue
        out.append(R.TransactionState(transactional_id=d.transactional_id, producer_id=d.producer_id,
                                      transaction_state=d.state))
    return R(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=out)


@handles(ApiKey.DESCRIBE_PRODUCERS, versions=(0, 0))
async def describe_producers(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    """KIP-664: the idempotent and transactional producers a partition leader knows (Read on
    the topic), with the start of each one's open transaction."""
    R = DescribeProducersResponse
    port = ctx.ports.transactions
    topics = []
    for t in request.topics:
        parts = []
        allowed = ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)
        for idx in t.partition_indexes:
            pr = R.PartitionResponse(partition_index=idx)
            parts.append(pr)
            try:
                if not allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                p = port.replicas.leader_partition(t.name, idx)
            except KafkaError as exc:
                pr.error_code, pr.error_message = int(exc.code), exc.message or None
                continue
            pr.active_producers = [
                R.ProducerState(
                    producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                    last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                    current_txn_start_offset=e.current_txn_first_offset,
                )
                for e in list(p.log.producers.entries.values())
            ]
        topics.append(R.TopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
