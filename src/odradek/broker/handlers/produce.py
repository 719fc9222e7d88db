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

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.replica import Partition
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse
from odradek.records import RecordsError, iter_batch_headers

R = ProduceResponse


def _check_format(records: bytes | bytearray | memoryview, version: int) -> None:
    """Produce v3+ carries v2 batches only, v0-2 message sets only (magic byte at position 16
    of each entry; the log validates every batch fully when it appends)."""
    try:
        if len(records) > 16 and records[16] == 2 and len(records) == int.from_bytes(records[8:12], "big") + 12:
            magics = {2}  # a single v2 batch, the common case
        else:
            magics = {h.magic for h in iter_batch_headers(records)}
    except RecordsError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
    if version >= 3 and magics - {2}:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"produce v{version} requires v2 record batches")
    if version < 3 and 2 in magics:
        raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"produce v{version} cannot carry v2 record batches")


@handles(ApiKey.PRODUCE, versions=(0, 11))
async def produce(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    broker = ctx.broker
    version = ctx.version
    acks = request.acks
    pending: list[tuple[R.PartitionProduceResponse, asyncio.Future[None]]] = []
    flushes = []
    part_of: dict[int, Partition] = {}
    responses: list[R.TopicProduceResponse] = []
    for topic in request.topic_data:
        parts: list[R.PartitionProduceResponse] = []
        responses.append(R.TopicProduceResponse(name=topic.name, partition_responses=parts))
        for data in topic.partition_data:
            resp = R.PartitionProduceResponse(index=data.index, base_offset=-1)
            parts.append(resp)
            try:
                if acks not in (-1, 0, 1):
                    raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
                if request.transactional_id is not None:
                    raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported yet")
                p = broker.produce_partition(topic.name, data.index)
                raw = data.records
                records = raw if isinstance(raw, (bytes, bytearray, memoryview)) else b""
                _check_format(records, version)
                records = broker.recompress_for(p, records)
                info = broker.replicas.append(p, records, acks)
                resp.base_offset = info.first_offset
                resp.log_append_time_ms = info.log_append_time
                resp.log_start_offset = p.log.log_start_offset
                flushes.append(p)
                if acks == -1:
                    pending.append((resp, p.wait_for_hw(info.last_offset + 1)))
                    part_of[id(resp)] = p
            except KafkaError as exc:
                resp.error_code = int(exc.code)
                resp.error_message = exc.message or None
    if acks == 0:
        return None
    for p in flushes:
        await broker.replicas.wait_durable(p)
    if pending:
        timeout = max(request.timeout_ms, 0) / 1000
        futures = [f for _r, f in pending]
        _done, not_done = await asyncio.wait(futures, timeout=timeout)
        for resp, fut in pending:
            if fut in not_done:
                fut.cancel()
                resp.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
                resp.base_offset = -1
            elif (failure := fut.exception()) is not None:
                code = failure.code if isinstance(failure, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
                resp.error_code = int(code)
                resp.base_offset = -1
            elif len(part_of[id(resp)].state.isr) < part_of[id(resp)].log.config.min_insync_replicas:
                # the ISR shrank below min.insync.replicas while the batch was being replicated
                resp.error_code = int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    return R(responses=responses, throttle_time_ms=0)
