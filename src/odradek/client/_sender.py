"""The producer's sender (Kafka's Sender): a task on an event loop that takes the batches the
accumulator has ready, groups them by leader into Produce requests, retries retriable errors
with backoff until ``delivery.timeout.ms``, and completes the records' futures and callbacks.

With idempotence it holds the producer id and numbers each partition's batches, so that the
broker drops duplicates of retried batches; a batch that fails for good gives its sequence
numbers back, or the producer continues under a new id (Kafka's TransactionManager does both)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek._timeouts import wait_for
from odradek.client._accumulator import ProducerBatch, RecordAccumulator, RecordMetadata
from odradek.client._txn import TxnManager, TxnState
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse
from odradek.records import Compression, crc32c
from odradek.records.appender import build as build_batch
from odradek.transport import TXN_V2_VERSIONS, AsyncCluster

if TYPE_CHECKING:
    from odradek.client._topic_metadata import TopicMetadata

__all__ = ["SendSettings", "Sender"]

log = logging.getLogger("odradek.client.producer")

# v2 batch header: crc at 17 covers attributes (21) to the end; producer id, epoch, base
# sequence at 43, 51, 53.
_CRC_OFFSET, _ATTRIBUTES_OFFSET, _PRODUCER_ID_OFFSET = 17, 21, 43
_CRC = struct.Struct(">I")
_PRODUCER_FIELDS = struct.Struct(">qhi")
# errors that come with the batch appended to the leader's log all the same
_WRITTEN_ANYWAY = {ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT}
_RETRIABLE_REFRESH = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR,
}


@dataclass(frozen=True, slots=True)
class SendSettings:
    """The producer's settings the sender uses (times in seconds)."""

    acks: int
    idempotent: bool
    codec: Compression
    level: int | None
    request_timeout_ms: int
    delivery_timeout: float
    retry_backoff: float
    retries: int


class Sender:
    """Sends the batches of ``acc`` over ``cluster``; ``txn``: the transactional producer's state."""

    def __init__(
        self, settings: SendSettings, acc: RecordAccumulator, cluster: AsyncCluster, topics: TopicMetadata,
        txn: TxnManager | None, interceptors: list[Any],
    ) -> None:
        self.settings = settings
        self.acc = acc
        self.cluster = cluster
        self.topics = topics
        self.txn = txn
        self.interceptors = interceptors
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}
        self.node_locks: dict[int, asyncio.Lock] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wake: asyncio.Event | None = None
        #: why the sender stopped for good (every record fails with it)
        self.fatal: BaseException | None = None
        #: set (on the sender's loop) when the sender stops for good: metadata waits end with it
        self.stopped: asyncio.Event | None = None

    def poke(self) -> None:
        """Wake the sender (from any thread)."""
        loop, wake = self.loop, self.wake
        if loop is None or wake is None:
            return
        try:
            if loop is _running_loop():
                wake.set()
            else:
                loop.call_soon_threadsafe(wake.set)
        except RuntimeError:
            pass

    # -- producer id (idempotence) -----------------------------------------------------------------
    async def _request_producer_id(self) -> None:
        """One InitProducerId round trip; raises on failure."""
        conn = await self.cluster.any_connection()
        v = conn.version_for(InitProducerIdRequest)
        req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
        resp = await conn.request(req, v)
        if resp.error_code:
            raise KafkaError(ErrorCode.of(resp.error_code), "InitProducerId failed")
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self.sequences.clear()

    async def init_producer_id(self, deadline: float | None = None) -> None:
        """Get a producer id (idempotence), retrying retriable failures until ``deadline``
        (monotonic seconds); without one, until it succeeds or the producer is closed with
        nothing left to send.  While it waits, records older than ``delivery.timeout.ms``
        expire."""
        while self.settings.idempotent and self.producer_id < 0 and self.txn is None:
            try:
                await self._request_producer_id()
                return
            except (ConnectionError, TimeoutError, KafkaError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"could not get a producer id: {exc}") from exc
                self._expire_unsent(time.monotonic(), f"could not get a producer id: {exc}")
            with self.acc.lock:
                if self.acc.closed and self.acc.unacked == 0:
                    return
            await asyncio.sleep(self.settings.retry_backoff)

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """The sender's loop, until the producer closes and nothing is left in flight: send ready batches,
        complete their futures, retry what may be retried."""
        self.loop = asyncio.get_running_loop()
        if self.wake is None:
            self.wake = asyncio.Event()
        acc = self.acc
        try:
            await self.init_producer_id()
        except BaseException as exc:
            self.fatal = exc
            self.fail_everything(exc)
            raise
        while True:
            if self.settings.idempotent and self.producer_id < 0:
                # the broker forgot us (UNKNOWN_PRODUCER_ID): a new id before sending more
                try:
                    await self.init_producer_id()
                except BaseException as exc:
                    self.fatal = exc
                    self.fail_everything(exc)
                    raise
            txn = self.txn
            if txn is not None and txn.state is TxnState.IN_TRANSACTION:
                fresh = [tp for tp in acc.open_partitions() if tp not in txn.partitions]
                if fresh:
                    txn.add_early(fresh, self.settings.delivery_timeout)
            now = time.monotonic()
            batches = acc.ready(now)
            if batches:
                await self._send(batches)
            with acc.lock:
                idle = acc.closed and acc.unacked == 0
            if idle:
                return
            wait = acc.next_wakeup(time.monotonic()) if not batches else 0
            if wait > 0:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await wait_for(self.wake.wait(), wait)
            else:
                await asyncio.sleep(0)

    def _expire_unsent(self, now: float, cause: str) -> None:
        """Fail batches never sent that are older than ``delivery.timeout.ms``."""
        for b in self.acc.expired(now, self.settings.delivery_timeout):
            self.complete(b, -1, -1, self._expiry_error(b, cause))

    def _expiry_error(self, batch: ProducerBatch, cause: object) -> KafkaError:
        return KafkaError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
            f"{self.settings.delivery_timeout * 1000:.0f} ms has passed since batch creation ({cause})",
        )

    # -- sending -----------------------------------------------------------------------------------
    def _build(self, batch: ProducerBatch) -> bytes:
        if batch.data is None:
            s = self.settings
            if s.idempotent:
                # a transactional batch: attribute bit 4 beside the codec bits
                attrs = int(s.codec) | (0x10 if self.txn is not None else 0)
                batch.data = build_batch(
                    batch.acc, attrs, s.level, self.producer_id, self.producer_epoch, batch.base_sequence
                )
            else:
                batch.data = build_batch(batch.acc, s.codec, s.level)
            batch.acc.release()
        return batch.data

    async def _send(self, batches: list[ProducerBatch]) -> None:
        txn = self.txn
        if txn is not None:
            # a partition's first batch in a transaction goes out once the coordinator has it
            new = {(b.topic, b.partition) for b in batches} - txn.partitions
            if new:
                try:
                    await txn.add_partitions(new, self.settings.delivery_timeout)
                except (KafkaError, ConnectionError, TimeoutError) as exc:
                    failure = exc if isinstance(exc, KafkaError) else KafkaError(ErrorCode.REQUEST_TIMED_OUT, str(exc))
                    for b in batches:
                        self.complete(b, -1, -1, failure)
                    return
        by_node: dict[int, list[ProducerBatch]] = {}
        for batch in batches:
            topic = batch.topic
            if topic not in self.cluster.topics or self.cluster.metadata_stale():
                try:
                    await self.cluster.topic(topic)
                    self.topics.update_counts(topic)
                except (KafkaError, ConnectionError, TimeoutError) as exc:
                    self._retry_or_fail(batch, exc)
                    continue
            leader = self.cluster.leader(topic, batch.partition)
            if leader < 0:
                self._retry_or_fail(batch, KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{batch.partition}"))
                continue
            by_node.setdefault(leader, []).append(batch)
        for node, group in by_node.items():
            self.acc.sent(group)
            asyncio.get_running_loop().create_task(self._produce_or_abandon(node, group))

    async def _produce_or_abandon(self, node: int, batches: list[ProducerBatch]) -> None:
        try:
            await self._produce(node, batches)
        except asyncio.CancelledError:
            # close() gave up waiting: nobody must wait forever for these
            error = KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the producer was closed before the records were acknowledged")
            for b in batches:
                if not b.done:
                    self.complete(b, -1, -1, error)
            raise

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        s = self.settings
        if s.idempotent and self.producer_id < 0:
            # the producer id was dropped while these waited: back to their queues until the run
            # loop has a new one (a batch must never go out without one: no deduplication then)
            self.acc.requeue(batches)
            self.acc.answered(batches)
            if self.wake is not None:
                self.wake.set()
            return
        topics: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for b in batches:
            if s.idempotent and (b.base_sequence < 0 or b.producer_id != self.producer_id):
                # first send, or a resend after the producer id changed: number it now
                tp = (b.topic, b.partition)
                b.base_sequence = self.sequences.get(tp, 0)
                self.sequences[tp] = (b.base_sequence + b.record_count) & 0x7FFFFFFF
                b.producer_id = self.producer_id
                if b.data is not None:
                    b.data = _restamp(b.data, self.producer_id, self.producer_epoch, b.base_sequence)
            b.attempts += 1
            topics.setdefault(b.topic, []).append(
                ProduceRequest.PartitionProduceData(index=b.partition, records=self._build(b))
            )
        req = ProduceRequest(
            transactional_id=self.txn.transactional_id if self.txn is not None else None,
            acks=s.acks,
            timeout_ms=s.request_timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()],
        )
        by_tp = {(b.topic, b.partition): b for b in batches}
        try:
            # Requests go on the wire in the order the sender made them (a partition's batches
            # stay in order): the lock is fair, and the write itself does not wait.
            lock = self.node_locks.get(node)
            if lock is None:
                lock = self.node_locks[node] = asyncio.Lock()
            async with lock:
                conn = await self.cluster.connection(node)
                # transactions v2: Produce v12 adds the partitions to the transaction
                v = conn.version_for(ProduceRequest, caps=TXN_V2_VERSIONS) if self.txn is not None and self.txn.v2 else None
                pending = conn.send(req, v, expect_response=s.acks != 0)
            if s.acks == 0:
                unwritten = pending.exception() if pending.done() else None
                if unwritten is not None:
                    raise unwritten  # the connection was already gone: nothing was written
                await conn.drain()
                for b in batches:
                    self.complete(b, -1, -1, None)
                self.acc.answered(batches)
                return
            try:
                resp: ProduceResponse = await wait_for(pending, s.request_timeout_ms / 1000 + 5)
            except TimeoutError:
                await conn.close()  # the responses after this one cannot be trusted either
                raise TimeoutError(f"no produce response from broker {node} within {s.request_timeout_ms} ms") from None
        except (ConnectionError, TimeoutError, KafkaError) as exc:
            for b in batches:
                self._retry_or_fail(b, exc)
            self.acc.answered(batches)
            return
        refresh = False
        for t in resp.responses:
            for pr in t.partition_responses:
                found = by_tp.pop((t.name, pr.index), None)
                if found is None:
                    continue
                b = found
                err = ErrorCode.of(pr.error_code)
                if err is ErrorCode.NONE or err is ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    self.complete(b, pr.base_offset, pr.log_append_time_ms, None)
                    continue
                failure = KafkaError(err, pr.error_message or f"{t.name}-{pr.index}")
                if err in _RETRIABLE_REFRESH:
                    refresh = True
                if err is ErrorCode.UNKNOWN_PRODUCER_ID and s.idempotent:
                    # the broker lost our state (e.g. expiry): the run loop gets a new producer
                    # id, and the batch is renumbered under it when it is sent again
                    if b.producer_id == self.producer_id:
                        self.producer_id = -1
                        self.sequences.clear()
                    self._retry_or_fail(b, failure, force=True)
                    continue
                self._retry_or_fail(b, failure, rejected=err not in _WRITTEN_ANYWAY)
        for b in by_tp.values():
            self._retry_or_fail(b, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "no response for the partition"))
        self.acc.answered(batches)
        if refresh:
            with contextlib.suppress(Exception):
                await self.cluster.refresh()
                self.topics.update_all_counts()
        if self.wake is not None:
            self.wake.set()

    def _retry_or_fail(self, batch: ProducerBatch, exc: BaseException, force: bool = False, rejected: bool = False) -> None:
        """Queue ``batch`` again, or fail it.  ``rejected``: the broker answered with an error, so
        this attempt was certainly not written."""
        s = self.settings
        now = time.monotonic()
        retriable = force or (
            isinstance(exc, (ConnectionError, TimeoutError)) or (isinstance(exc, KafkaError) and exc.retriable)
        )
        expired = now - batch.created >= s.delivery_timeout
        if retriable and not expired and batch.attempts <= s.retries:
            batch.retry_at = now + s.retry_backoff
            self.acc.requeue([batch])
            return
        if expired:
            exc = self._expiry_error(batch, exc)
        self._release_sequence(batch, rejected)
        self.complete(batch, -1, -1, exc)

    def _release_sequence(self, batch: ProducerBatch, rejected: bool) -> None:
        """A numbered batch that fails for good must not leave a gap in its partition's
        sequence numbers, or every later batch gets OUT_OF_ORDER_SEQUENCE_NUMBER.  If the broker
        rejected it and nothing was numbered after it, its numbers are given back; if the broker
        may have written it (a timeout), the producer continues under a new producer id."""
        if not self.settings.idempotent or batch.base_sequence < 0 or batch.producer_id != self.producer_id:
            return
        tp = (batch.topic, batch.partition)
        if rejected and self.sequences.get(tp) == (batch.base_sequence + batch.record_count) & 0x7FFFFFFF:
            self.sequences[tp] = batch.base_sequence
        else:
            self.producer_id = -1
            self.sequences.clear()

    # -- completion --------------------------------------------------------------------------------
    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """The batch is done (written at ``base_offset``, or failed with ``error``): its memory
        given back, its futures resolved, its callbacks and the interceptors called."""
        if error is not None and self.txn is not None:
            self.txn.fail(error if isinstance(error, KafkaError) else KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(error)))
        batch.base_offset = base_offset
        batch.log_append_time = log_append_time
        batch.error = error
        batch.done = True
        room = self.acc.release(batch)
        for fut in room:  # AsyncProducer.send() calls waiting for buffer.memory (this loop)
            if not fut.done():
                fut.set_result(None)
        if batch.event is not None:
            batch.event.set()
        if batch.waiters:
            for fut in batch.waiters:
                loop = fut.get_loop()
                if loop is self.loop:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    loop.call_soon_threadsafe(_resolve, fut)
        if batch.callbacks or self.interceptors:
            self._callbacks(batch)

    def _callbacks(self, batch: ProducerBatch) -> None:
        results: list[tuple[Callable[..., Any], RecordMetadata | None, BaseException | None]] = []
        for cb, index, ts, ks, vs in batch.callbacks or ():
            if batch.error is None:
                md = RecordMetadata(
                    batch.topic, batch.partition, batch.base_offset + index if batch.base_offset >= 0 else -1,
                    batch.log_append_time if batch.log_append_time >= 0 else ts, ks, vs,
                )
                results.append((cb, md, None))
            else:
                results.append((cb, None, batch.error))
        for cb, result, err in results:
            try:
                cb(err, result)
            except Exception:
                log.exception("delivery callback failed")
        for interceptor in self.interceptors:
            on_ack = getattr(interceptor, "on_acknowledgement", None)
            if on_ack is None:
                continue
            for i in range(batch.record_count):
                ack: RecordMetadata | None = None if batch.error else RecordMetadata(batch.topic, batch.partition, batch.base_offset + i if batch.base_offset >= 0 else -1, -1, -1, -1)
                try:
                    on_ack(ack, batch.error)
                except Exception:
                    log.exception("interceptor on_acknowledgement failed")

    def fail_everything(self, exc: BaseException) -> None:
        """Every batch not sent yet fails with ``exc`` (the sender stops)."""
        for b in self.acc.take_all():
            self.complete(b, -1, -1, exc)


def _restamp(data: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """A built v2 batch with new producer id, epoch and base sequence (CRC recomputed)."""
    buf = bytearray(data)
    _PRODUCER_FIELDS.pack_into(buf, _PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence)
    _CRC.pack_into(buf, _CRC_OFFSET, crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
