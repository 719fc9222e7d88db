"""Produce (0), v0-11.

Versions 0-2 carry message sets of magic 0/1 (stored as produced, with offsets assigned per
message); v3+ must carry v2 record batches, whose offsets are assigned by patching each batch's
base offset.  ``acks=0`` gets no response, ``acks=1`` is answered after the leader's append and
``acks=-1`` once the high watermark passes the batch (through the purgatory, bounded by
``timeout_ms``).  A topic whose ``compression.type`` is a codec gets its batches recompressed;
``producer`` keeps them as sent.  Clients may not write to internal topics.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.refusals import produce_refused
from odradek.broker.replica import Partition
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics, TopicStats
from odradek.protocol import ApiKey
from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse
from odradek.records import RecordsError, iter_batch_headers
from odradek.security.acl import Operation, ResourceType
from odradek.storage import InvalidRecordError

if TYPE_CHECKING:
    from odradek.broker.services import Services

R = ProduceResponse
_NO_LEADER = R.LeaderIdAndEpoch()  # one instance for all responses (never modified)
# the response structs' constructors, without the class-call overhead
_produce_response = R.builder()
_topic_response = R.TopicProduceResponse.builder()
_partition_response = R.PartitionProduceResponse.builder()
_record_error = R.BatchIndexAndErrorMessage
_u32 = struct.Struct(">I")
_TOPIC_DENIED = KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _check_format(records: bytes | bytearray | memoryview, version: int) -> None:
    """Produce v3+ carries v2 batches only, v0-2 message sets only (magic byte at position 16
    of each entry; the log validates every batch fully when it appends)."""
    n = len(records)
    if n > 16 and records[16] == 2 and n == _u32.unpack_from(records, 8)[0] + 12 and version >= 3:
        return  # a single v2 batch, the common case
    try:
        if n > 16 and records[16] == 2 and n == _u32.unpack_from(records, 8)[0] + 12:
            magics = {2}
        else:
            magics = {h.magic for h in iter_batch_headers(records)}
    except RecordsError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
    if version >= 3 and magics - {2}:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"produce v{version} requires v2 record batches")
    if version < 3 and 2 in magics:
        raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"produce v{version} cannot carry v2 record batches")


@handles(ApiKey.PRODUCE, versions=(0, 11))
def produce(
    ctx: RequestContext, request: ProduceRequest
) -> ProduceResponse | Coroutine[Any, Any, ProduceResponse] | None:
    """Appends now; the response now too unless a flush (flush.messages) or acks=all makes it
    wait, then a coroutine that gives it."""
    svc = ctx.services
    version = ctx.header.api_version
    acks = request.acks
    refused: KafkaError | None = None
    if acks not in (-1, 0, 1):
        refused = KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
    elif request.transactional_id is not None and not ctx.authorize(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
    ):
        refused = KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    replicas = svc.replicas
    pending: list[tuple[R.PartitionProduceResponse, asyncio.Future[None], Partition]] = []
    appended: list[Partition] = []
    responses: list[R.TopicProduceResponse] = []
    authorizer = svc.authorizer
    metrics = svc.metrics
    for topic in request.topic_data:
        parts: list[R.PartitionProduceResponse] = []
        responses.append(_topic_response(name=topic.name, partition_responses=parts))
        stats = metrics.topic(topic.name) if metrics is not None else None
        topic_refused = refused
        if authorizer is not None and topic_refused is None and not authorizer.authorize(
            ctx.session.principal_name, ctx.client_host, Operation.WRITE, ResourceType.TOPIC, topic.name, 0
        ):
            topic_refused = _TOPIC_DENIED
        for data in topic.partition_data:
            resp = _partition_response(index=data.index, base_offset=-1, current_leader=_NO_LEADER)
            parts.append(resp)
            if topic_refused is not None:
                resp.error_code = int(topic_refused.code)
                resp.error_message = topic_refused.message or None
                produce_refused(ctx, topic.name, data.index, topic_refused)
                if stats is not None:
                    _count_failed(metrics, stats, data.records, topic_refused)
                continue
            try:
                p = svc.partitions.for_produce(topic.name, data.index)
                raw = data.records
                records = raw if isinstance(raw, (bytes, bytearray, memoryview)) else b""
                size = len(records)
                _check_format(records, version)
                records = svc.partitions.recompress_for(p, records)
                info = replicas.append(p, records, acks)
                resp.base_offset = info.first_offset
                resp.log_append_time_ms = info.log_append_time
                resp.log_start_offset = p.log.log_start_offset
                if stats is not None:  # one batch (or message set): counted whole, never per record
                    stats.produce_requests += 1
                    if not info.duplicate:
                        stats.messages_in += info.record_count
                        stats.bytes_in += size
                appended.append(p)
                if acks == -1:
                    pending.append((resp, p.wait_for_hw(info.last_offset + 1), p))
            except KafkaError as exc:
                resp.error_code = int(exc.code)
                resp.error_message = exc.message or None
                if isinstance(exc, InvalidRecordError) and exc.record_errors and version >= 8:
                    # KIP-467: the records that made the batch fail, by index within the batch
                    resp.record_errors = [
                        _record_error(batch_index=i, batch_index_error_message=m) for i, m in exc.record_errors
                    ]
                produce_refused(ctx, topic.name, data.index, exc)
                if stats is not None:
                    _count_failed(metrics, stats, data.records, exc)
    if acks == 0:
        return None
    response = _produce_response(responses=responses, throttle_time_ms=0)
    flushes: list[Partition] | None = None
    for p in appended:
        if p.log.flush_messages_due():  # wait_durable has something to wait for
            if flushes is None:
                flushes = []
            flushes.append(p)
    if flushes is not None or pending:
        return _after_append(svc, request, response, flushes or [], pending)
    return response


def _count_failed(metrics: BrokerMetrics | None, stats: TopicStats, records: object, exc: KafkaError) -> None:
    """A partition of a produce request refused: a failed produce request of its topic, its bytes
    rejected, its error counted for the Produce request metrics."""
    stats.produce_requests += 1
    stats.failed_produce += 1
    if isinstance(records, (bytes, bytearray, memoryview)):
        stats.rejected_bytes += len(records)
    if metrics is not None:
        metrics.error(ApiKey.PRODUCE, int(exc.code))


async def _after_append(
    svc: Services,
    request: ProduceRequest,
    response: ProduceResponse,
    flushes: list[Partition],
    pending: list[tuple[R.PartitionProduceResponse, asyncio.Future[None], Partition]],
) -> ProduceResponse:
    """The waiting part of a produce: flushes the log's flush.messages asks for, then (acks=all)
    the high watermark passing every batch, bounded by the request's timeout."""
    for p in flushes:
        try:
            await svc.replicas.wait_durable(p)
        except KafkaError as exc:
            # the flush failed (the log dir went offline through the failure channel): the
            # partition's batches are not known to be durable
            _fail_partition(response, p, exc)
    if pending:
        timeout = max(request.timeout_ms, 0) / 1000
        futures = [f for _r, f, _p in pending]
        _done, not_done = await asyncio.wait(futures, timeout=timeout)
        for resp, fut, p in pending:
            if fut in not_done:
                fut.cancel()
                resp.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
                resp.base_offset = -1
            elif (failure := fut.exception()) is not None:
                code = failure.code if isinstance(failure, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
                resp.error_code = int(code)
                resp.base_offset = -1
            elif len(p.state.isr) < p.log.config.min_insync_replicas:
                # the ISR shrank below min.insync.replicas while the batch was being replicated
                resp.error_code = int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    return response


def _fail_partition(response: ProduceResponse, p: Partition, exc: KafkaError) -> None:
    for topic in response.responses:
        if topic.name != p.topic:
            continue
        for resp in topic.partition_responses:
            if resp.index == p.index and not resp.error_code:
                resp.error_code = int(exc.code)
                resp.error_message = exc.message or None
                resp.base_offset = -1
