"""Produce (0), v0-13.

Versions 0-2 carry message sets of magic 0/1, which are written as v2 batches (Kafka writes
message format v2 only: magic 0's messages get no timestamp, -1; a log-append-time topic gives
them its time); v3+ must carry v2 record batches.  Offsets are assigned by patching each batch's
base offset.  ``acks=0`` gets no response, ``acks=1`` is answered after the leader's append and
``acks=-1`` once the high watermark passes the batch (through the purgatory, bounded by
``timeout_ms``).  A topic whose ``compression.type`` is a codec gets its batches recompressed;
``producer`` keeps them as sent.  Clients may not write to internal topics.

A batch whose per-record work is large (more than ``INLINE_RECORDS`` records to recompress,
inflate or key-check, ``INLINE_DECOMPRESS_RECORDS`` to decompress with a fast codec and validate,
or ``INLINE_PLAIN_RECORDS`` plain ones to validate) is
validated and recompressed in a worker process (:mod:`odradek.broker.offload`), never on the
event loop; the request waits for it (and the connection's later requests behind it), and then,
back on the loop, the partition is looked up again (still led here?) and the log appends the
prepared batch: its producer-state (idempotence, sequence) and timestamp checks are made at that
moment, as for any append.  A batch refused by the worker writes nothing.  Other batches take the
synchronous path with no executor hop.

Produce v12+ is transactions v2 (KIP-890 part 2): a transactional batch that opens a transaction
on its partition has the transaction coordinator *add* the partition to the producer's
transaction (the producer sent no AddPartitionsToTxn), where before v12 it only verifies it is
there (``transaction.partition.verification.enable``).  Produce v13 names topics by id
(UNKNOWN_TOPIC_ID for an id no topic has); its answers carry the ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Coroutine
from typing import Any

from odradek.broker.compat import CODECS, prepare_append
from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.handlers.fetch import _topic_by_id
from odradek.broker.offload import LOOP_DECOMPRESSED_BYTES, Spool
from odradek.broker.ports import (
    AppendInfo,
    DecompressionBudgetExceeded,
    InvalidRecordError,
    Partition,
    ProducePort,
)
from odradek.broker.purgatory import wait_all
from odradek.broker.refusals import produce_refused
from odradek.broker.schema_validation import SchemaValidation
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics, TopicStats
from odradek.protocol import ApiKey
from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse
from odradek.records import RecordsError, iter_batch_headers, speedups
from odradek.security.acl import Operation, ResourceType

R = ProduceResponse
_NO_LEADER = R.LeaderIdAndEpoch()  # one instance for all responses (never modified)
# the response structs' constructors, without the class-call overhead
_produce_response = R.builder()
_topic_response = R.TopicProduceResponse.builder()
_partition_response = R.PartitionProduceResponse.builder()
_record_error = R.BatchIndexAndErrorMessage
_u32 = struct.Struct(">I")
_i32 = struct.Struct(">i")
_TOPIC_DENIED = KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_UNKNOWN_TOPIC_ID = KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "no topic has this id")

#: records of a batch that the loop may recompress, decompress and validate, or key-check for a
#: compacted topic (2-5 microseconds of Python each, measured on this 2-core VM under load: about
#: a millisecond); a larger batch is prepared in a worker
INLINE_RECORDS = 256
#: records of an uncompressed batch that needs none of that which the loop may validate (record
#: by record, compiled when the extension is built)
INLINE_PLAIN_RECORDS = 16384 if speedups.compiled is not None else 2048
#: records of a batch compressed with a fast codec (snappy, lz4, zstd) that needs only to be
#: decompressed and validated (no conversion, not compacted): with the compiled check 12-25
#: nanoseconds each (lz4 12, snappy and zstd 24-25: 10,000 records of 80 bytes in 0.12-0.25 ms),
#: so the loop takes up to about a millisecond of them.  librdkafka's batches hold up to 10,000
#: records (``batch.num.messages``): at the earlier 8,192 every full batch of small records went
#: to a worker, through a spool file and a pipe, which cost far more than the work (lz4 produce
#: at 0.55x of the inline path, its p99 acknowledgement 4x).  gzip's inflate is slower and stays
#: at ``INLINE_RECORDS``
INLINE_DECOMPRESS_RECORDS = 32768 if speedups.compiled is not None else INLINE_RECORDS
_GZIP = 1
#: a v0/v1 compressed wrapper does not say how many records it holds: its bytes bound them
_LEGACY_RECORD_BYTES = 16


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


@handles(ApiKey.PRODUCE, versions=(0, 13))
def produce(
    ctx: RequestContext, request: ProduceRequest
) -> ProduceResponse | Coroutine[Any, Any, ProduceResponse | None] | None:
    """Appends now; the response now too unless a flush (flush.messages) or acks=all makes it
    wait, or a batch that opens a transaction on a partition must first be verified with its
    transaction coordinator (KIP-890), then a coroutine that gives it."""
    port = ctx.ports.produce
    version = ctx.header.api_version
    acks = request.acks
    refused: KafkaError | None = None
    if acks not in (-1, 0, 1):
        refused = KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
    elif request.transactional_id is not None and not ctx.authorize(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
    ):
        refused = KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # v12+: transactions v2, the partitions join the transaction through the leader (always)
    verifying = request.transactional_id is not None and (version >= 12 or port.verify_transactions)
    work = _Appends(ctx, port, acks, version)
    unverified: list[tuple[R.PartitionProduceResponse, Partition, Any, TopicStats | None]] = []
    responses: list[R.TopicProduceResponse] = []
    authorizer = port.authorizer
    metrics = port.metrics
    for topic in request.topic_data:
        parts: list[R.PartitionProduceResponse] = []
        name = topic.name
        topic_refused = refused
        if version >= 13:
            info = _topic_by_id(port.metadata.image, topic.topic_id)
            name = info.name if info is not None else ""
            if info is None and topic_refused is None:
                topic_refused = _UNKNOWN_TOPIC_ID
            # the name is not sent (v13 has none: ignorable) but finds the partitions again below
            responses.append(_topic_response(name=name, topic_id=topic.topic_id, partition_responses=parts))
        else:
            responses.append(_topic_response(name=name, partition_responses=parts))
        stats = metrics.topic(name) if metrics is not None and name else None
        if authorizer is not None and topic_refused is None and not authorizer.authorize(
            ctx.session.principal_name, ctx.client_host, Operation.WRITE, ResourceType.TOPIC, name, 0
        ):
            topic_refused = _TOPIC_DENIED
        for data in topic.partition_data:
            resp = _partition_response(index=data.index, base_offset=-1, current_leader=_NO_LEADER)
            parts.append(resp)
            if topic_refused is not None:
                work.refuse(resp, name, data.index, data.records, stats, topic_refused)
                continue
            try:
                p = port.partitions.for_produce(name, data.index)
            except KafkaError as exc:
                work.refuse(resp, name, data.index, data.records, stats, exc)
                continue
            if verifying and _opens_transaction(p, data.records):
                unverified.append((resp, p, data.records, stats))
                continue
            work.append(resp, p, data.records, stats)
    if acks == 0 and not unverified and not work.deferred:
        return None
    response = _produce_response(responses=responses, throttle_time_ms=0)
    if unverified:
        assert request.transactional_id is not None
        return _verify_then_append(port, work, request, request.transactional_id, response, unverified)
    if work.deferred:
        return _prepare_then_append(work, request, response)
    return work.finish(request, response)


#: what a batch needs before the log appends it (see _preparation)
_PLAIN, _CONVERT, _OFF_LOOP = 0, 1, 2
#: the topics' compression.type values under which an uncompressed batch is written as sent
_KEPT_UNCOMPRESSED = frozenset(name for name, codec in CODECS.items() if not codec)


def _preparation(p: Partition, records: bytes | bytearray | memoryview) -> int:
    """_PLAIN: nothing (the log validates it as it appends); _CONVERT: a conversion for the log
    (the topic's codec, or a message set to format v2), done here; _OFF_LOOP: too much
    per-record work for the event loop (see the module), done in a worker."""
    cfg = p.log.config
    target = CODECS.get(cfg.compression_type)
    n = len(records)
    if n > 61 and records[16] == 2 and n == _u32.unpack_from(records, 8)[0] + 12:  # one v2 batch
        codec = records[22] & 0x07
        count = _i32.unpack_from(records, 57)[0]
        converts = target is not None and codec != target
        inflates = codec == _GZIP
    else:
        try:
            headers = list(iter_batch_headers(records))
        except RecordsError:
            return _PLAIN  # refused by the log's validation
        converts = inflates = False
        codec = 0
        count = 0
        for h in headers:
            if h.magic < 2 or (target is not None and h.compression != target):
                converts = True
            codec |= h.compression
            inflates |= h.compression == _GZIP
            count += h.record_count if h.record_count >= 0 else h.size // _LEGACY_RECORD_BYTES
    if converts or cfg.compact or inflates:
        limit = INLINE_RECORDS
    elif codec != 0:
        limit = INLINE_DECOMPRESS_RECORDS
    else:
        limit = INLINE_PLAIN_RECORDS
    if count > limit:
        return _OFF_LOOP
    return _CONVERT if converts else _PLAIN


class _Appends:
    """The appends of one produce request, and what the response must wait for."""

    __slots__ = ("acks", "appended", "ctx", "deferred", "pending", "port", "version")

    def __init__(self, ctx: RequestContext, port: ProducePort, acks: int, version: int) -> None:
        self.ctx = ctx
        self.port = port
        self.acks = acks
        self.version = version
        self.appended: list[Partition] = []
        self.pending: list[tuple[R.PartitionProduceResponse, asyncio.Future[None], Partition]] = []
        #: batches prepared in a worker before their append, in request order
        self.deferred: list[tuple[R.PartitionProduceResponse, Partition, Any, TopicStats | None]] = []

    def refuse(
        self, resp: R.PartitionProduceResponse, topic: str, index: int, records: Any, stats: TopicStats | None,
        exc: KafkaError,
    ) -> None:
        resp.error_code = int(exc.code)
        resp.error_message = exc.message or None
        if isinstance(exc, InvalidRecordError) and exc.record_errors and self.version >= 8:
            # KIP-467: the records that made the batch fail, by index within the batch
            resp.record_errors = [_record_error(batch_index=i, batch_index_error_message=m) for i, m in exc.record_errors]
        produce_refused(self.ctx, topic, index, exc)
        if stats is not None:
            _count_failed(self.port.metrics, stats, records, exc)

    def append(self, resp: R.PartitionProduceResponse, p: Partition, raw: Any, stats: TopicStats | None) -> None:
        """Append now, or (a batch with much per-record work, or one behind such a batch of the
        same partition in this request) leave it to :meth:`append_deferred`."""
        try:
            records = raw if isinstance(raw, (bytes, bytearray, memoryview)) else b""
            size = len(records)
            config = p.log.config
            if (
                size > 61 and records[16] == 2 and size == _u32.unpack_from(records, 8)[0] + 12 and self.version >= 3
                and not records[22] & 0x07 and config.compression_type in _KEPT_UNCOMPRESSED and not config.compact
                and _i32.unpack_from(records, 57)[0] <= INLINE_PLAIN_RECORDS
            ):
                # one uncompressed v2 batch that the topic keeps so, of few records (the common
                # case): what _check_format and _preparation would find of it
                prepare = _PLAIN
            else:
                _check_format(records, self.version)
                prepare = _preparation(p, records)
            if (
                prepare == _OFF_LOOP or config.schema_validation
                or (self.deferred and any(d[1] is p for d in self.deferred))
            ):
                self.deferred.append((resp, p, records, stats))
                return
            if prepare == _PLAIN:
                info = self.port.replicas.append(p, records, self.acks, max_decompressed=LOOP_DECOMPRESSED_BYTES)
            else:
                info = self._append_now(p, records, prepare)
        except DecompressionBudgetExceeded:
            # too much to decompress on the loop: a worker validates it (nothing was written)
            self.deferred.append((resp, p, records, stats))
            return
        except KafkaError as exc:
            self.refuse(resp, p.topic, p.index, raw, stats, exc)
            return
        self._appended(resp, p, info, size, stats)

    def _append_now(self, p: Partition, records: bytes | bytearray | memoryview, prepare: int) -> AppendInfo:
        """The append on the loop; DecompressionBudgetExceeded (nothing written) for a batch that
        decompresses to more than ``LOOP_DECOMPRESSED_BYTES``."""
        if prepare == _CONVERT:
            config = p.log.config
            written, headers = prepare_append(
                records, config, p.topic, p.index, p.log.clock.now_ms(), LOOP_DECOMPRESSED_BYTES
            )
            return self.port.replicas.append(p, records if written is None else written, self.acks, (headers, config))
        return self.port.replicas.append(p, records, self.acks, max_decompressed=LOOP_DECOMPRESSED_BYTES)

    async def append_deferred(self) -> None:
        """The deferred batches, in order: each validated and recompressed in a worker (a
        topic's schema validation first), then appended here, on the loop, if its partition is
        still led here."""
        port = self.port
        deferred, self.deferred = self.deferred, []
        for resp, p, records, stats in deferred:
            size = len(records)
            try:
                config = p.log.config
                if config.schema_validation:  # broker/schema_validation.py (no validator: none passes)
                    await (port.schemas or SchemaValidation(None, port.offload)).check(p.topic, config, records)
                    p = port.partitions.for_produce(p.topic, p.index)
                    config = p.log.config
                    if (prepare := _preparation(p, records)) != _OFF_LOOP:
                        with contextlib.suppress(DecompressionBudgetExceeded):  # else to a worker, below
                            self._appended(resp, p, self._append_now(p, records, prepare), size, stats)
                            continue
                written, headers = await port.offload.run(
                    prepare_append, records, config, p.topic, p.index, p.log.clock.now_ms(), cost=3 * size
                )
                if isinstance(written, Spool):
                    written = await asyncio.to_thread(written.to_bytes)
                p = port.partitions.for_produce(p.topic, p.index)  # the leadership may have moved meanwhile
                info = port.replicas.append(p, records if written is None else written, self.acks, (headers, config))
            except KafkaError as exc:
                self.refuse(resp, p.topic, p.index, records, stats, exc)
                continue
            self._appended(resp, p, info, size, stats)

    def _appended(
        self, resp: R.PartitionProduceResponse, p: Partition, info: AppendInfo, size: int, stats: TopicStats | None
    ) -> None:
        resp.base_offset = info.first_offset
        resp.log_append_time_ms = info.log_append_time
        resp.log_start_offset = p.log.log_start_offset
        if stats is not None:  # one batch (or message set): counted whole, never per record
            stats.produce_requests += 1
            if not info.duplicate:
                stats.messages_in += info.record_count
                stats.bytes_in += size
        self.appended.append(p)
        if self.acks == -1 and p.log.high_watermark <= info.last_offset:  # not yet on every ISR member
            self.pending.append((resp, p.wait_for_hw(info.last_offset + 1), p))

    def finish(
        self, request: ProduceRequest, response: ProduceResponse
    ) -> ProduceResponse | Coroutine[Any, Any, ProduceResponse]:
        flushes: list[Partition] | None = None
        for p in self.appended:
            if p.log.flush_messages_due():  # wait_durable has something to wait for
                if flushes is None:
                    flushes = []
                flushes.append(p)
        if flushes is not None or self.pending:
            return _after_append(self.port, request, response, flushes or [], self.pending)
        return response


_TRANSACTIONAL = 0x10  # v2 batch attributes: the batch belongs to a transaction
_v2_producer = struct.Struct(">21xH20xqh")  # attributes, producer id, epoch


def _opens_transaction(p: Partition, records: Any) -> bool:
    """Whether the produced batch is transactional and its producer has no transaction open on
    ``p`` yet (with this epoch): the batches KIP-890 has the leader verify first."""
    if not isinstance(records, (bytes, bytearray, memoryview)) or len(records) < 61 or records[16] != 2:
        return False
    attributes, producer_id, epoch = _v2_producer.unpack_from(records, 0)
    if not attributes & _TRANSACTIONAL:
        return False
    entry = p.log.producers.entries.get(producer_id)
    return entry is None or entry.current_txn_first_offset < 0 or entry.epoch != epoch


async def _verify_then_append(
    port: ProducePort,
    work: _Appends,
    request: ProduceRequest,
    transactional_id: str,
    response: ProduceResponse,
    unverified: list[tuple[R.PartitionProduceResponse, Partition, Any, TopicStats | None]],
) -> ProduceResponse | None:
    """Ask the coordinator whether the partitions are in the producer's ongoing transaction,
    then append the batches it confirms (and refuse the others with its answer)."""
    by_producer: dict[tuple[int, int], list[int]] = {}
    for i, (_resp, _p, records, _stats) in enumerate(unverified):
        _attributes, producer_id, epoch = _v2_producer.unpack_from(records, 0)
        by_producer.setdefault((producer_id, epoch), []).append(i)
    answers: dict[int, ErrorCode] = {}
    add = work.version >= 12  # transactions v2: the coordinator adds the partitions
    for (producer_id, epoch), indexes in by_producer.items():
        tps = [(unverified[i][1].topic, unverified[i][1].index) for i in indexes]
        try:
            code = await port.transactions.verify(transactional_id, producer_id, epoch, tps, add=add)
        except KafkaError as exc:
            code = ErrorCode.NOT_ENOUGH_REPLICAS if exc.code == ErrorCode.COORDINATOR_NOT_AVAILABLE else exc.code
        answers.update(dict.fromkeys(indexes, code))
    for i, (resp, p, records, stats) in enumerate(unverified):
        code = answers[i]
        if code != ErrorCode.NONE:
            message = (
                "the partition is not in an ongoing transaction of this producer (checked with its transaction "
                "coordinator)" if code == ErrorCode.INVALID_TXN_STATE else ""
            )
            work.refuse(resp, p.topic, p.index, records, stats, KafkaError(code, message))
            continue
        work.append(resp, p, records, stats)
    if work.deferred:
        await work.append_deferred()
    if work.acks == 0:
        return None
    done = work.finish(request, response)
    if isinstance(done, ProduceResponse):
        return done
    return await done


async def _prepare_then_append(work: _Appends, request: ProduceRequest, response: ProduceResponse) -> ProduceResponse | None:
    """The batches left to a worker (the others are appended already), then the answer."""
    await work.append_deferred()
    if work.acks == 0:
        return None
    done = work.finish(request, response)
    if isinstance(done, ProduceResponse):
        return done
    return await done


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
    port: ProducePort,
    request: ProduceRequest,
    response: ProduceResponse,
    flushes: list[Partition],
    pending: list[tuple[R.PartitionProduceResponse, asyncio.Future[None], Partition]],
) -> ProduceResponse:
    """The waiting part of a produce: flushes the log's flush.messages asks for, then (acks=all)
    the high watermark passing every batch, bounded by the request's timeout."""
    for p in flushes:
        try:
            await port.replicas.wait_durable(p)
        except KafkaError as exc:
            # the flush failed (the log dir went offline through the failure channel): the
            # partition's batches are not known to be durable
            _fail_partition(response, p, exc)
    if pending:
        not_done = await wait_all(port.timers, [f for _r, f, _p in pending], max(request.timeout_ms, 0))
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
