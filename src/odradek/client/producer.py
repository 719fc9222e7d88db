"""Producer and AsyncProducer: batching, acks, retries, idempotence, compression, callbacks.

``send()`` serialises the key and value (the seeds' Encoder), picks a partition (the Java
client's murmur2 partitioner by default, sticky for null keys), and appends the record to the
open batch of that partition; it returns a future of the record's metadata.  A batch is sent when
it reaches ``batch.size``, after ``linger.ms``, or on ``flush()``.  A sender — a task on an event
loop, in a background thread for :class:`Producer` and on the caller's loop for
:class:`AsyncProducer` — groups ready batches by leader into Produce requests, retries retriable
errors with backoff until ``delivery.timeout.ms``, and completes the futures.  With
``enable.idempotence`` (the default, as in modern clients) the producer gets a producer id and
numbers each partition's batches so that the broker drops duplicates of retried batches; it keeps
one batch per partition in flight so ordering survives retries.  ``buffer.memory`` bounds the
bytes waiting to be sent: ``send()`` blocks (or awaits) up to ``max.block.ms`` for room.
Interceptors see every record at send and every result at acknowledgement (the seeds'
CallbackHandler).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple

from odradek._timeouts import wait_for
from odradek.client._config import PRODUCER_DEFAULTS, ClientConfigError, merge_config
from odradek.client._runner import LoopThread
from odradek.client._security import ClientSecurity
from odradek.client._txn import TxnManager, TxnState
from odradek.client.errors import worse_error
from odradek.client.partitioner import DefaultPartitioner, murmur2
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse
from odradek.records import Compression, crc32c
from odradek.records.appender import Appender, Pool, Receipt
from odradek.records.appender import build as build_batch
from odradek.records.v2 import encode_headers
from odradek.transport import AsyncCluster

__all__ = ["AsyncProducer", "Producer", "RecordMetadata"]

log = logging.getLogger(__name__)

_CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
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


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


class _Batch:
    """Records for one partition, sent together."""

    __slots__ = (
        "acc",
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "created",
        "data",
        "done",
        "error",
        "event",
        "log_append_time",
        "partition",
        "producer_id",
        "retry_at",
        "topic",
        "waiters",
    )

    def __init__(self, topic: str, partition: int, now: float) -> None:
        self.topic = topic
        self.partition = partition
        self.acc: Any = None  # its Appender: the records, their count and accounted size
        self.data: bytes | None = None
        self.created = now
        self.attempts = 0
        self.base_sequence = -1
        self.producer_id = -1  # the producer id its sequence number belongs to (idempotence)
        self.callbacks: list[tuple[Callable[..., Any], int, int, int, int]] | None = None
        self.done = False
        self.error: BaseException | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.retry_at = 0.0
        self.event: threading.Event | None = None
        self.waiters: list[asyncio.Future[None]] | None = None

    @property
    def record_count(self) -> int:
        return int(self.acc.record_count)

    @property
    def size(self) -> int:
        return int(self.acc.size)


class FutureRecordMetadata(Receipt):
    """The future of one record's metadata (cheap: it shares its batch's completion).

    ``FutureRecordMetadata(batch, index, timestamp, key size, value size)``; the compiled
    appender creates them itself (see :mod:`odradek.records.appender`)."""

    __slots__ = ()
    _batch: _Batch
    _index: int
    _timestamp: int
    _ksize: int
    _vsize: int

    def done(self) -> bool:
        return self._batch.done

    def _metadata(self) -> RecordMetadata:
        b = self._batch
        if b.error is not None:
            raise b.error
        ts = b.log_append_time if b.log_append_time >= 0 else self._timestamp
        return RecordMetadata(b.topic, b.partition, b.base_offset + self._index if b.base_offset >= 0 else -1, ts, self._ksize, self._vsize)

    def _wait(self, timeout: float | None) -> _Batch:
        b = self._batch
        if not b.done:
            event = b.event
            if (event is None or not event.wait(timeout)) and not b.done:
                raise FutureTimeout(f"no acknowledgement within {timeout}s")
        return b

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata; raises the record's error, or TimeoutError if it is not
        acknowledged within ``timeout`` seconds (``AsyncProducer``: await the future instead)."""
        self._wait(timeout)
        return self._metadata()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The record's error (None if it was written); TimeoutError as for :meth:`result`."""
        return self._wait(timeout).error

    def __await__(self) -> Any:
        b = self._batch
        if not b.done:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if b.waiters is None:
                b.waiters = []
            b.waiters.append(fut)
            yield from fut.__await__()
        return self._metadata()


class _Core:
    """The accumulator and the sender, shared by the sync and async faces."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(str(config["acks"]).lower())
        if acks is None:
            raise ClientConfigError(f"invalid acks {config['acks']!r}")
        self.acks: int = acks
        self.idempotent = bool(config["enable.idempotence"])
        if self.idempotent and self.acks != -1:
            raise ClientConfigError("enable.idempotence requires acks=all")
        codec = str(config["compression.type"]).lower()
        if codec not in _CODECS:
            raise ClientConfigError(f"invalid compression.type {codec!r}")
        self.codec = _CODECS[codec]
        self.level = config["compression.level"]
        self.batch_size = int(config["batch.size"])
        self.linger = int(config["linger.ms"]) / 1000
        self.buffer_memory = int(config["buffer.memory"])
        self.max_block = int(config["max.block.ms"]) / 1000
        self.delivery_timeout = int(config["delivery.timeout.ms"]) / 1000
        self.request_timeout_ms = int(config["request.timeout.ms"])
        self.retry_backoff = int(config["retry.backoff.ms"]) / 1000
        self.retries = int(config["retries"])
        self.max_in_flight = max(1, int(config["max.in.flight.requests.per.connection"]))
        self.max_request_size = int(config["max.request.size"])
        self.key_serializer = config["key.serializer"]
        self.value_serializer = config["value.serializer"]
        self.interceptors = list(config["interceptors"] or ())
        self.partitioner = config["partitioner"] or DefaultPartitioner()
        self._default_partitioner = type(self.partitioner) is DefaultPartitioner
        self.cluster = AsyncCluster(
            config["bootstrap.servers"],
            client_id=config["client.id"],
            request_timeout_ms=self.request_timeout_ms,
            metadata_max_age_ms=int(config["metadata.max.age.ms"]),
            retry_backoff_ms=int(config["retry.backoff.ms"]),
            socket_connection_setup_timeout_ms=int(config["socket.connection.setup.timeout.ms"]),
            allow_auto_create_topics=bool(config["allow.auto.create.topics"]),
            security=ClientSecurity.from_config(config),
        )
        #: the transactional producer's state (None: not transactional)
        self.txn: TxnManager | None = None
        if config["transactional.id"] is not None:
            if not self.idempotent:
                raise ClientConfigError("transactional.id requires enable.idempotence=true")
            self.txn = TxnManager(self.cluster, str(config["transactional.id"]),
                                  int(config["transaction.timeout.ms"]), self.retry_backoff)
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)
        self.open: dict[tuple[str, int], _Batch] = {}
        self.queues: dict[tuple[str, int], deque[_Batch]] = {}
        self.pool = Pool(self.buffer_memory)  # bytes buffered (buffer.memory)
        self.in_flight: dict[tuple[str, int], int] = {}
        self.node_in_flight: dict[int, int] = {}
        self.unacked = 0  # batches created and not completed
        self.partition_counts: dict[str, tuple[int, list[int]]] = {}
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}
        self.node_locks: dict[int, asyncio.Lock] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wake: asyncio.Event | None = None
        self.flushing = 0
        self.closed = False
        self.sender_task: asyncio.Task[None] | None = None
        self.fatal: BaseException | None = None
        #: set (on the sender's loop) when the sender stops for good: metadata waits end with it
        self.stopped: asyncio.Event | None = None
        self.all_done = threading.Condition(self.lock)
        # Fast-path flags for send(): records that need no interceptor or serializer.
        self.plain = not self.interceptors and self.key_serializer is None and self.value_serializer is None
        self.ignore_keys = bool(config["partitioner.ignore.keys"])
        self.fast = self.plain and self._default_partitioner
        self.sticky: dict[str, int] = self.partitioner.sticky if self._default_partitioner else {}
        # topic -> the appender of its sticky partition's open batch, for send() without a key:
        # its try_append() takes the record without the lock (compiled appender only)
        self.fast_open: dict[str, Any] = {}
        self.waiting_for_space = 0  # send() calls waiting for buffer.memory: send without lingering
        self.room_waiters: list[asyncio.Future[None]] = []  # completed when a batch frees memory
        self.blocking_waits = False  # the sync Producer: each batch gets an Event for result()

    @property
    def buffered(self) -> int:
        """Bytes buffered now (``buffer.memory`` bounds it)."""
        return int(self.pool.buffered)

    # -- user side (any thread) ----------------------------------------------------------------
    def serialize(self, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        if self.key_serializer is not None and key is not None:
            key = self.key_serializer(key) if not hasattr(self.key_serializer, "serialize") else self.key_serializer.serialize(topic, key)
        if self.value_serializer is not None and value is not None:
            value = (
                self.value_serializer(value)
                if not hasattr(self.value_serializer, "serialize")
                else self.value_serializer.serialize(topic, value)
            )
        if key is not None and not isinstance(key, (bytes, bytearray, memoryview)):
            if isinstance(key, str):
                key = key.encode()
            else:
                raise TypeError(f"key must be bytes (or set key.serializer), not {type(key).__name__}")
        if value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
            if isinstance(value, str):
                value = value.encode()
            else:
                raise TypeError(f"value must be bytes (or set value.serializer), not {type(value).__name__}")
        return (None if key is None else bytes(key)), (None if value is None else bytes(value))

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        callback: Callable[..., Any] | None,
        sticky: bool,
        ksize: int,
        vsize: int,
    ) -> tuple[FutureRecordMetadata, bool]:
        """Append under the lock; returns (future, whether to wake the sender: a batch is full
        or a new one started).

        ``ksize`` / ``vsize`` are the serialized sizes (-1 for null).  A record without a key
        (``sticky``) that would overflow its partition's open batch goes to the next sticky
        partition instead, as in the Java client: null-key records fill one batch at a time."""
        tp = (topic, partition)
        batch = self.open.get(tp)
        ready = False
        size = (ksize if ksize > 0 else 0) + (vsize if vsize > 0 else 0) + 32
        if batch is None:
            batch = self._new_batch(tp)
            ready = True  # the sender must learn when this batch's linger.ms ends
        elif batch.size + size > self.batch_size and batch.record_count:
            self._close_batch(tp, batch)
            ready = True
            if sticky and self._default_partitioner:
                partition = self.partitioner.new_batch(topic, *self.partition_counts.get(topic, (1, [])), previous=partition)
                tp = (topic, partition)
                other = self.open.get(tp)
                if other is not None and other.size + size > self.batch_size and other.record_count:
                    self._close_batch(tp, other)
                    other = None
                batch = other if other is not None else self._new_batch(tp)
            else:
                batch = self._new_batch(tp)
        index = batch.acc.append(timestamp, key, value, encode_headers(headers) if headers else None, size)
        if callback is not None:
            if batch.callbacks is None:
                batch.callbacks = []
            batch.callbacks.append((callback, index, timestamp, ksize, vsize))
        if batch.size >= self.batch_size:
            self._close_batch(tp, batch)
            ready = True
            if sticky and self._default_partitioner:
                self.partitioner.new_batch(topic, *self.partition_counts.get(topic, (1, [])), previous=partition)
        elif sticky and self.fast and not self.closed:
            self.fast_open[topic] = batch.acc
        return FutureRecordMetadata(batch, index, timestamp, ksize, vsize), ready

    def _new_batch(self, tp: tuple[str, int]) -> _Batch:
        batch = _Batch(tp[0], tp[1], time.monotonic())
        batch.acc = Appender(self.batch_size, self.max_request_size, self.pool, batch, FutureRecordMetadata)
        if self.blocking_waits:
            batch.event = threading.Event()
        self.open[tp] = batch
        self.unacked += 1
        return batch

    def _close_batch(self, tp: tuple[str, int], batch: _Batch) -> None:
        """No more records: build the bytes (sequence numbers are patched at send time)."""
        self._seal(tp, batch)
        self.queues.setdefault(tp, deque()).append(batch)

    def _seal(self, tp: tuple[str, int], batch: _Batch) -> None:
        """Under the lock: the batch leaves ``open`` and takes no more records."""
        if self.open.get(tp) is batch:
            del self.open[tp]
        acc = batch.acc
        acc.close()
        if self.fast_open.get(tp[0]) is acc:
            del self.fast_open[tp[0]]

    # -- sender (event loop) ---------------------------------------------------------------------
    def _build(self, batch: _Batch) -> bytes:
        if batch.data is None:
            if self.idempotent:
                # a transactional batch: attribute bit 4 beside the codec bits
                attrs = int(self.codec) | (0x10 if self.txn is not None else 0)
                batch.data = build_batch(
                    batch.acc, attrs, self.level, self.producer_id, self.producer_epoch, batch.base_sequence
                )
            else:
                batch.data = build_batch(batch.acc, self.codec, self.level)
            batch.acc.release()
        return batch.data

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
        while self.idempotent and self.producer_id < 0 and self.txn is None:
            try:
                await self._request_producer_id()
                return
            except (ConnectionError, TimeoutError, KafkaError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"could not get a producer id: {exc}") from exc
                self._expire_unsent(time.monotonic(), f"could not get a producer id: {exc}")
            with self.lock:
                if self.closed and self.unacked == 0:
                    return
            await asyncio.sleep(self.retry_backoff)

    async def wait_for_topic(self, topic: str) -> None:
        """Wait up to ``max.block.ms`` for ``topic``'s metadata (whatever the connection errors
        on the way), then record its partitions for the partitioner."""
        deadline = time.monotonic() + self.max_block
        last: BaseException | None = None
        while True:
            if self.fatal is not None:  # the sender stopped (e.g. InitProducerId refused): no use waiting
                raise self.fatal
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"topic {topic} not present in metadata after {self.max_block * 1000:.0f} ms"
                    + (f" ({last})" if last is not None else ""),
                )
            try:
                await self._unless_stopped(self.cluster.topic(topic, wait_ms=int(left * 1000)), left)
                self.update_counts(topic)
                return
            except (ConnectionError, TimeoutError, KafkaError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                last = worse_error(last, exc)
            await asyncio.sleep(min(self.retry_backoff, max(0.0, deadline - time.monotonic())))

    async def _unless_stopped(self, coro: Any, timeout: float) -> Any:
        """``coro``'s result within ``timeout``; the sender's fatal error if it stops first."""
        stopped = self.stopped
        if stopped is None:
            return await wait_for(coro, timeout)
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(stopped.wait())
        try:
            done, _ = await asyncio.wait({task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task in done:
            return task.result()
        task.cancel()
        if self.fatal is not None:
            raise self.fatal
        raise TimeoutError

    def update_counts(self, topic: str) -> None:
        """Partition count and partitions with a leader, from the cluster's metadata."""
        info = self.cluster.topics.get(topic)
        if info is None or not info.partitions:
            return
        count = max(info.partitions) + 1
        available = sorted(p for p, pi in info.partitions.items() if pi.leader >= 0)
        self.partition_counts[topic] = (count, available)

    def _expire_unsent(self, now: float, cause: str) -> None:
        """Fail batches never sent that are older than ``delivery.timeout.ms``."""
        expired: list[_Batch] = []
        with self.lock:
            for tp, b in list(self.open.items()):
                if now - b.created >= self.delivery_timeout:
                    self._seal(tp, b)
                    expired.append(b)
            for q in self.queues.values():
                while q and q[0].attempts == 0 and now - q[0].created >= self.delivery_timeout:
                    expired.append(q.popleft())
        for b in expired:
            self._complete(b, -1, -1, self._expiry_error(b, cause))

    def _expiry_error(self, batch: _Batch, cause: object) -> KafkaError:
        return KafkaError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
            f"{self.delivery_timeout * 1000:.0f} ms has passed since batch creation ({cause})",
        )

    def _ready(self, now: float) -> list[_Batch]:
        """Batches that may be sent now, at most one per partition (ordering with retries)."""
        out: list[_Batch] = []
        with self.lock:
            linger_cut = now - self.linger
            for tp, batch in list(self.open.items()):
                if batch.record_count and (
                    batch.created <= linger_cut or self.flushing or self.closed or self.waiting_for_space
                ):
                    self._close_batch(tp, batch)
            for tp, q in self.queues.items():
                if not q or self.in_flight.get(tp, 0) >= (1 if self.idempotent else self.max_in_flight):
                    continue
                head = q[0]
                if head.retry_at > now:
                    continue
                out.append(q.popleft())
        return out

    def next_wakeup(self, now: float) -> float:
        with self.lock:
            times = [b.created + self.linger for b in self.open.values() if b.record_count]
            times += [q[0].retry_at for q in self.queues.values() if q and q[0].retry_at > now]
        return max(0.0, min(times) - now) if times else 1.0

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.wake is None:
            self.wake = asyncio.Event()
        try:
            await self.init_producer_id()
        except BaseException as exc:
            self.fatal = exc
            self._fail_everything(exc)
            raise
        while True:
            if self.idempotent and self.producer_id < 0:
                # the broker forgot us (UNKNOWN_PRODUCER_ID): a new id before sending more
                try:
                    await self.init_producer_id()
                except BaseException as exc:
                    self.fatal = exc
                    self._fail_everything(exc)
                    raise
            txn = self.txn
            if txn is not None and txn.state is TxnState.IN_TRANSACTION:
                with self.lock:
                    fresh = [tp for tp, b in self.open.items() if b.record_count and tp not in txn.partitions]
                if fresh:
                    txn.add_early(fresh, self.delivery_timeout)
            now = time.monotonic()
            batches = self._ready(now)
            if batches:
                await self._send(batches)
            with self.lock:
                idle = self.closed and self.unacked == 0
            if idle:
                return
            wait = self.next_wakeup(time.monotonic()) if not batches else 0
            if wait > 0:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await wait_for(self.wake.wait(), wait)
            else:
                await asyncio.sleep(0)

    async def _send(self, batches: list[_Batch]) -> None:
        txn = self.txn
        if txn is not None:
            # a partition's first batch in a transaction goes out once the coordinator has it
            new = {(b.topic, b.partition) for b in batches} - txn.partitions
            if new:
                try:
                    await txn.add_partitions(new, self.delivery_timeout)
                except (KafkaError, ConnectionError, TimeoutError) as exc:
                    failure = exc if isinstance(exc, KafkaError) else KafkaError(ErrorCode.REQUEST_TIMED_OUT, str(exc))
                    for b in batches:
                        self._complete(b, -1, -1, failure)
                    return
        by_node: dict[int, list[_Batch]] = {}
        for batch in batches:
            topic = batch.topic
            if topic not in self.cluster.topics or self.cluster.metadata_stale():
                try:
                    await self.cluster.topic(topic)
                    self.update_counts(topic)
                except (KafkaError, ConnectionError, TimeoutError) as exc:
                    self._retry_or_fail(batch, exc)
                    continue
            leader = self.cluster.leader(topic, batch.partition)
            if leader < 0:
                self._retry_or_fail(batch, KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{batch.partition}"))
                continue
            by_node.setdefault(leader, []).append(batch)
        for node, group in by_node.items():
            for tp in ((b.topic, b.partition) for b in group):
                self.in_flight[tp] = self.in_flight.get(tp, 0) + 1
            asyncio.get_running_loop().create_task(self._produce_or_abandon(node, group))

    async def _produce_or_abandon(self, node: int, batches: list[_Batch]) -> None:
        try:
            await self._produce(node, batches)
        except asyncio.CancelledError:
            # close() gave up waiting: nobody must wait forever for these
            error = KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the producer was closed before the records were acknowledged")
            for b in batches:
                if not b.done:
                    self._complete(b, -1, -1, error)
            raise

    async def _produce(self, node: int, batches: list[_Batch]) -> None:
        if self.idempotent and self.producer_id < 0:
            # the producer id was dropped while these waited: back to their queues until the run
            # loop has a new one (a batch must never go out without one: no deduplication then)
            with self.lock:
                for b in batches:
                    self.queues.setdefault((b.topic, b.partition), deque()).appendleft(b)
            self._done_in_flight(batches)
            if self.wake is not None:
                self.wake.set()
            return
        topics: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for b in batches:
            if self.idempotent and (b.base_sequence < 0 or b.producer_id != self.producer_id):
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
            acks=self.acks,
            timeout_ms=self.request_timeout_ms,
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
                pending = conn.send(req, expect_response=self.acks != 0)
            if self.acks == 0:
                unwritten = pending.exception() if pending.done() else None
                if unwritten is not None:
                    raise unwritten  # the connection was already gone: nothing was written
                await conn.drain()
                for b in batches:
                    self._complete(b, -1, -1, None)
                self._done_in_flight(batches)
                return
            try:
                resp: ProduceResponse = await wait_for(pending, self.request_timeout_ms / 1000 + 5)
            except TimeoutError:
                await conn.close()  # the responses after this one cannot be trusted either
                raise TimeoutError(f"no produce response from broker {node} within {self.request_timeout_ms} ms") from None
        except (ConnectionError, TimeoutError, KafkaError) as exc:
            for b in batches:
                self._retry_or_fail(b, exc)
            self._done_in_flight(batches)
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
                    self._complete(b, pr.base_offset, pr.log_append_time_ms, None)
                    continue
                failure = KafkaError(err, pr.error_message or f"{t.name}-{pr.index}")
                if err in _RETRIABLE_REFRESH:
                    refresh = True
                if err is ErrorCode.UNKNOWN_PRODUCER_ID and self.idempotent:
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
        self._done_in_flight(batches)
        if refresh:
            with contextlib.suppress(Exception):
                await self.cluster.refresh()
                for topic in list(self.partition_counts):
                    self.update_counts(topic)
        if self.wake is not None:
            self.wake.set()

    def _done_in_flight(self, batches: Iterable[_Batch]) -> None:
        for b in batches:
            tp = (b.topic, b.partition)
            self.in_flight[tp] = max(0, self.in_flight.get(tp, 0) - 1)

    def _retry_or_fail(self, batch: _Batch, exc: BaseException, force: bool = False, rejected: bool = False) -> None:
        """Queue ``batch`` again, or fail it.  ``rejected``: the broker answered with an error, so
        this attempt was certainly not written."""
        now = time.monotonic()
        retriable = force or (
            isinstance(exc, (ConnectionError, TimeoutError)) or (isinstance(exc, KafkaError) and exc.retriable)
        )
        expired = now - batch.created >= self.delivery_timeout
        if retriable and not expired and batch.attempts <= self.retries:
            batch.retry_at = now + self.retry_backoff
            with self.lock:
                self.queues.setdefault((batch.topic, batch.partition), deque()).appendleft(batch)
            return
        if expired:
            exc = self._expiry_error(batch, exc)
        self._release_sequence(batch, rejected)
        self._complete(batch, -1, -1, exc)

    def _release_sequence(self, batch: _Batch, rejected: bool) -> None:
        """A numbered batch that fails for good must not leave a gap in its partition's
        sequence numbers, or every later batch gets OUT_OF_ORDER_SEQUENCE_NUMBER.  If the broker
        rejected it and nothing was numbered after it, its numbers are given back; if the broker
        may have written it (a timeout), the producer continues under a new producer id."""
        if not self.idempotent or batch.base_sequence < 0 or batch.producer_id != self.producer_id:
            return
        tp = (batch.topic, batch.partition)
        if rejected and self.sequences.get(tp) == (batch.base_sequence + batch.record_count) & 0x7FFFFFFF:
            self.sequences[tp] = batch.base_sequence
        else:
            self.producer_id = -1
            self.sequences.clear()

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        if error is not None and self.txn is not None:
            self.txn.fail(error if isinstance(error, KafkaError) else KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(error)))
        batch.base_offset = base_offset
        batch.log_append_time = log_append_time
        batch.error = error
        batch.done = True
        with self.lock:
            batch.acc.release()
            self.pool.add(-batch.size)
            self.unacked -= 1
            self.space.notify_all()
            room, self.room_waiters = self.room_waiters, []
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

    def _callbacks(self, batch: _Batch) -> None:
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

    def _fail_everything(self, exc: BaseException) -> None:
        with self.lock:
            batches = list(self.open.values()) + [b for q in self.queues.values() for b in q]
            for tp, b in list(self.open.items()):
                self._seal(tp, b)
            self.queues.clear()
        for b in batches:
            self._complete(b, -1, -1, exc)

    # -- transactions (the faces check the state first) ---------------------------------------------
    def _txn_manager(self) -> TxnManager:
        if self.txn is None:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "the producer has no transactional.id")
        return self.txn

    async def init_transactions(self, timeout: float) -> None:
        txn = self._txn_manager()
        txn.require(TxnState.UNINITIALIZED, TxnState.READY, action="init_transactions")
        pid, epoch = await txn.init(timeout)
        with self.lock:
            self.producer_id, self.producer_epoch = pid, epoch
            self.sequences.clear()

    def begin_transaction(self) -> None:
        txn = self._txn_manager()
        txn.require(TxnState.READY, action="begin_transaction")
        txn.state = TxnState.IN_TRANSACTION

    async def send_offsets(self, offsets: dict[tuple[str, int], int], group: Any, timeout: float) -> None:
        txn = self._txn_manager()
        txn.require(TxnState.IN_TRANSACTION, action="send_offsets_to_transaction")
        if isinstance(group, str):
            gid, generation, member, instance = group, -1, "", None
        else:  # the group metadata of Odradek's Consumer, or confluent-kafka's shape
            gid = group.group_id
            generation = getattr(group, "generation_id", -1)
            member = getattr(group, "member_id", "")
            instance = getattr(group, "group_instance_id", None)
        await txn.send_offsets(offsets, gid, generation, member, instance, timeout)

    async def end_transaction(self, commit: bool, timeout: float) -> None:
        txn = self._txn_manager()
        if commit:
            txn.require(TxnState.IN_TRANSACTION, action="commit_transaction")
            txn.state = TxnState.COMMITTING
        else:
            txn.require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING, action="abort_transaction")
            txn.state = TxnState.ABORTING
            txn.error = None
        try:
            await txn.end(commit, timeout)
        except BaseException:
            if txn.state in (TxnState.COMMITTING, TxnState.ABORTING):
                txn.state = TxnState.IN_TRANSACTION if commit else TxnState.ABORTING
            raise

    def drop_unsent(self, cause: KafkaError) -> None:
        """abort_transaction: batches not yet sent fail instead (they must not be written)."""
        with self.lock:
            unsent = list(self.open.values()) + [b for q in self.queues.values() for b in q]
            for tp, b in list(self.open.items()):
                self._seal(tp, b)
            self.queues.clear()
            self.fast_open.clear()
        for b in unsent:
            self._complete(b, -1, -1, cause)

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


_time_ns = time.time_ns


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


class _Face:
    """What Producer and AsyncProducer share: configuration, partitioning, interceptors."""

    _core: _Core

    def _append_fast(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Any,
        timestamp: int | None,
        on_delivery: Callable[..., Any] | None,
    ) -> FutureRecordMetadata | None:
        """``send()`` for the common case, without waiting: bytes (or None) in, no headers, a
        topic with known metadata, the default partitioner, room in the buffer and in the open
        batch.  Returns None when the general path must do it (nothing has happened then)."""
        core = self._core
        counts = core.partition_counts.get(topic)
        if (
            not core.fast
            or counts is None
            or headers is not None
            or (key is not None and type(key) is not bytes)
            or (value is not None and type(value) is not bytes)
            or core.closed
            or core.fatal is not None
        ):
            return None
        count = counts[0]
        ks = -1 if key is None else len(key)
        vs = -1 if value is None else len(value)
        if ks + vs + 72 > core.max_request_size:
            return None
        if partition is not None:
            if not 0 <= partition < count:
                return None
            p, sticky = partition, False
        elif key is None or core.ignore_keys:
            sticky = True
            p = core.sticky.get(topic, -1)
            if p < 0 or p >= count:
                p = core.partitioner.new_batch(topic, *counts)
        else:
            p, sticky = (murmur2(key) & 0x7FFFFFFF) % count, False
        ts = _time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        size = (ks if ks > 0 else 0) + (vs if vs > 0 else 0) + 32
        with core.lock:
            if core.pool.buffered + size > core.buffer_memory:
                return None
            batch = core.open.get((topic, p))
            if batch is None or on_delivery is not None or batch.acc.size + size >= core.batch_size:
                fut, ready = core.append(topic, p, ts, key, value, None, on_delivery, sticky, ks, vs)
            else:
                # the open batch takes the record and stays open: Core.append's simplest case
                index = batch.acc.append(ts, key, value, None, size)
                return FutureRecordMetadata(batch, index, ts, ks, vs)
        if ready:
            core.poke()
        return fut

    def _prepare(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None,
        timestamp: int | None,
    ) -> tuple[str, int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int, int]:
        """Interceptors, serializers, headers and timestamp of one record:
        ``(topic, timestamp, key, value, headers, key size, value size)``, sizes -1 for null."""
        core = self._core
        if core.closed:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
        if core.fatal is not None:
            raise core.fatal
        if core.plain and (key is None or type(key) is bytes) and (value is None or type(value) is bytes):
            kb, vb = key, value  # the common case: bytes in, nothing to call
        else:
            for interceptor in core.interceptors:
                on_send = getattr(interceptor, "on_send", None)
                if on_send is not None:
                    topic, value, key = on_send(topic, value, key) or (topic, value, key)
            kb, vb = core.serialize(topic, key, value)
        hs: list[tuple[str, bytes | None]] | None = None
        if headers:
            items = headers.items() if isinstance(headers, Mapping) else headers
            hs = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
        ts = _time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        ks = -1 if kb is None else len(kb)
        vs = -1 if vb is None else len(vb)
        if ks + vs + 72 > core.max_request_size:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the record is {ks + vs + 72} bytes when serialized, larger than max.request.size={core.max_request_size}",
            )
        return topic, ts, kb, vb, hs, ks, vs

    def _choose(self, topic: str, key: bytes | None, partition: int | None) -> tuple[int, bool]:
        """The record's partition, and whether it is sticky (no key, default partitioner)."""
        core = self._core
        count, available = core.partition_counts[topic]
        if partition is not None:
            if not 0 <= partition < count:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
            return partition, False
        if core.ignore_keys:
            key = None
        return int(core.partitioner(topic, key, count, available)), key is None


class Producer(_Face):
    """A thread-safe producer; a background thread runs the sender.

    ``Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5})`` or
    ``Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5)``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._core = _Core(merge_config(PRODUCER_DEFAULTS, config, kwargs))
        self._core.blocking_waits = True
        self._runner = LoopThread("odradek-producer")
        self._runner.start(self._main)

    async def _main(self, ready: Callable[[], None]) -> None:
        """The sender, until the producer closes (or fails: every record then fails with it)."""
        core = self._core
        core.loop = self._runner.loop
        core.wake = asyncio.Event()
        core.stopped = asyncio.Event()
        ready()
        try:
            await core.run()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and core.closed:
                exc = KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT, "the producer was closed before the records were acknowledged"
                )
            else:
                log.error("producer sender stopped: %s", exc)
            if core.fatal is None:
                core.fatal = exc
            core._fail_everything(exc)
        finally:
            core.stopped.set()
            await core.cluster.close()

    def _call(self, coro: Any, timeout: float | None = None) -> Any:
        """Run ``coro`` on the sender's loop and wait for it; when the sender stops for good
        meanwhile (its loop ends with it), its fatal error instead of waiting out ``timeout``."""
        if not self._runner.alive:
            coro.close()
            raise self._core.fatal or KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer's sender has stopped")
        fut = self._runner.submit(coro)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = 0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))
            try:
                return fut.result(step)
            except FutureTimeout:
                if fut.done():
                    raise
                if not self._runner.alive:
                    fut.cancel()
                    raise self._core.fatal or KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, "the producer's sender has stopped"
                    ) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def _metadata(self, topic: str) -> None:
        core = self._core
        if topic in core.partition_counts and not core.cluster.metadata_stale():
            return
        try:
            self._call(core.wait_for_topic(topic), core.max_block + 5)
        except FutureTimeout as exc:
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT, f"topic {topic} not present in metadata after {core.max_block * 1000:.0f} ms"
            ) from exc

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        *,
        on_delivery: Callable[[BaseException | None, RecordMetadata | None], Any] | None = None,
    ) -> FutureRecordMetadata:
        """Queue a record; the future resolves to its :class:`RecordMetadata`.

        ``on_delivery(error, metadata)`` is called from the sender thread when the record is
        acknowledged or has failed.  Blocks up to ``max.block.ms`` for metadata of a new topic
        and for room in ``buffer.memory``."""
        if self._core.txn is not None:
            self._core.txn.require(TxnState.IN_TRANSACTION, action="send outside a transaction")
        if key is None and partition is None and headers is None and timestamp is None and on_delivery is None:
            acc = self._core.fast_open.get(topic)
            if acc is not None:
                fut = acc.try_append(value)
                if fut is not None:
                    return fut
        fut = self._append_fast(topic, value, key, partition, headers, timestamp, on_delivery)
        if fut is not None:
            return fut
        core = self._core
        topic, ts, kb, vb, hs, ks, vs = self._prepare(topic, value, key, headers, timestamp)
        if topic not in core.partition_counts:
            self._metadata(topic)
        p, sticky = self._choose(topic, kb, partition)
        with core.lock:
            if core.pool.buffered + ks + vs > core.buffer_memory:
                self._wait_for_space(ks + vs)
            fut, ready = core.append(topic, p, ts, kb, vb, hs, on_delivery, sticky, ks, vs)
        if ready:
            core.poke()
        return fut

    produce = send

    def _wait_for_space(self, size: int) -> None:
        """Under the lock: wait up to ``max.block.ms`` until ``size`` more bytes fit."""
        core = self._core
        deadline = time.monotonic() + core.max_block
        core.waiting_for_space += 1
        try:
            while core.pool.buffered + size > core.buffer_memory:
                if core.fatal is not None:
                    raise core.fatal
                core.poke()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"buffer.memory ({core.buffer_memory} bytes) still full after "
                        f"max.block.ms={core.max_block * 1000:.0f}",
                    )
                core.space.wait(min(left, 0.05))
        finally:
            core.waiting_for_space -= 1

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it; returns the number of batches still pending."""
        core = self._core
        with core.lock:
            core.flushing += 1
        try:
            core.poke()
            deadline = None if timeout is None else time.monotonic() + timeout
            with core.lock:
                while core.unacked > 0:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    core.space.wait(0.05 if left is None else min(left, 0.05))
                    core.poke()
                return core.unacked
        finally:
            with core.lock:
                core.flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        core = self._core
        if core.closed:
            return
        self.flush(timeout)
        with core.lock:
            core.closed = True
            core.fast_open.clear()
        core.poke()
        if not self._runner.join(5 if timeout is None else timeout):
            self._runner.cancel_all()
        self._runner.close_when_ended(5)

    # -- transactions (``transactional.id``) ------------------------------------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator: older producers of the id are
        fenced and their open transaction aborted.  Call once, before the first transaction."""
        t = self._core.max_block if timeout is None else timeout
        self._call(self._core.init_transactions(t), t + 5)

    def begin_transaction(self) -> None:
        self._core.begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int] | Iterable[Any], group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Commit consumed offsets as part of the transaction (``offsets``: ``{(topic, partition):
        next offset}`` or TopicPartition-like objects; ``group_metadata``: the consumer's
        ``consumer_group_metadata()``, or a group id)."""
        t = self._core.max_block if timeout is None else timeout
        self._call(self._core.send_offsets(_offset_map(offsets), group_metadata, t), t + 5)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is buffered, then commit: it all becomes visible to read_committed
        consumers at once.  A failed send makes this raise; abort then."""
        core = self._core
        core._txn_manager().require(TxnState.IN_TRANSACTION, action="commit_transaction")
        t = core.max_block if timeout is None else timeout
        if self.flush(t):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the transaction's records were not all sent in time")
        self._call(core.end_transaction(True, t), t + 5)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop what is not sent yet, wait for what is in flight, and abort."""
        core = self._core
        core._txn_manager().require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING,
                                    action="abort_transaction")
        t = core.max_block if timeout is None else timeout
        core.drop_unsent(KafkaError(ErrorCode.TRANSACTION_ABORTABLE, "the transaction was aborted"))
        self.flush(t)
        self._call(core.end_transaction(False, t), t + 5)

    def partitions_for(self, topic: str) -> list[int]:
        self._metadata(topic)
        return list(range(self._core.partition_counts[topic][0]))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncProducer(_Face):
    """The asyncio producer: ``await producer.start()``, ``await producer.send(...)``."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._core = _Core(merge_config(PRODUCER_DEFAULTS, config, kwargs))
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        core = self._core
        core.loop = asyncio.get_running_loop()
        core.wake = asyncio.Event()
        await core.init_producer_id(time.monotonic() + core.max_block)
        self._task = asyncio.get_running_loop().create_task(core.run())

    async def _metadata(self, topic: str) -> None:
        core = self._core
        if topic in core.partition_counts and not core.cluster.metadata_stale():
            return
        await core.wait_for_topic(topic)

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        *,
        on_delivery: Callable[[BaseException | None, RecordMetadata | None], Any] | None = None,
    ) -> FutureRecordMetadata:
        """Queue a record (waiting up to ``max.block.ms`` for metadata of a new topic and for room
        in ``buffer.memory``); await the returned future for the record's metadata."""
        if self._core.txn is not None:
            self._core.txn.require(TxnState.IN_TRANSACTION, action="send outside a transaction")
        if self._task is not None:
            if key is None and partition is None and headers is None and timestamp is None and on_delivery is None:
                acc = self._core.fast_open.get(topic)
                if acc is not None:
                    fut = acc.try_append(value)
                    if fut is not None:
                        return fut
            fut = self._append_fast(topic, value, key, partition, headers, timestamp, on_delivery)
            if fut is not None:
                if self._wake_set():
                    await asyncio.sleep(0)  # a batch is ready: let the sender (this loop) run
                return fut
        else:
            await self.start()
        topic, ts, kb, vb, hs, ks, vs = self._prepare(topic, value, key, headers, timestamp)
        core = self._core
        if topic not in core.partition_counts:
            await self._metadata(topic)
        p, sticky = self._choose(topic, kb, partition)
        if core.pool.buffered + ks + vs > core.buffer_memory:
            await self._wait_for_space(ks + vs)
        with core.lock:
            fut, ready = core.append(topic, p, ts, kb, vb, hs, on_delivery, sticky, ks, vs)
        if ready:
            core.poke()
            await asyncio.sleep(0)
        return fut

    def _wake_set(self) -> bool:
        wake = self._core.wake
        return wake is not None and wake.is_set()

    async def _wait_for_space(self, size: int) -> None:
        core = self._core
        deadline = time.monotonic() + core.max_block
        core.waiting_for_space += 1
        try:
            while core.pool.buffered + size > core.buffer_memory:
                if core.fatal is not None:
                    raise core.fatal
                if self._task is not None and self._task.done():
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer's sender has stopped")
                core.poke()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"buffer.memory ({core.buffer_memory} bytes) still full after "
                        f"max.block.ms={core.max_block * 1000:.0f}",
                    )
                room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                with core.lock:
                    core.room_waiters.append(room)
                with contextlib.suppress(TimeoutError):
                    await wait_for(room, min(left, 0.1))
        finally:
            core.waiting_for_space -= 1

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> RecordMetadata:
        fut = await self.send(topic, value, key, **kwargs)
        result: RecordMetadata = await fut
        return result

    async def flush(self, timeout: float | None = None) -> int:
        core = self._core
        core.flushing += 1
        try:
            core.poke()
            deadline = None if timeout is None else time.monotonic() + timeout
            while core.unacked > 0 and (deadline is None or time.monotonic() < deadline):
                if self._task is not None and self._task.done():
                    break
                await asyncio.sleep(0.001)
            return core.unacked
        finally:
            core.flushing -= 1

    async def close(self, timeout: float | None = None) -> None:
        core = self._core
        if core.closed:
            return
        await self.flush(timeout)
        with core.lock:
            core.closed = True
            core.fast_open.clear()
        core.poke()
        if self._task is not None:
            try:
                await wait_for(self._task, 5 if timeout is None else timeout)
            except (TimeoutError, asyncio.CancelledError, Exception):
                self._task.cancel()
        await core.cluster.close()

    # -- transactions: as Producer's ------------------------------------------------------------------
    async def init_transactions(self, timeout: float | None = None) -> None:
        await self._core.init_transactions(self._core.max_block if timeout is None else timeout)

    def begin_transaction(self) -> None:
        self._core.begin_transaction()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int] | Iterable[Any], group_metadata: Any, timeout: float | None = None
    ) -> None:
        t = self._core.max_block if timeout is None else timeout
        await self._core.send_offsets(_offset_map(offsets), group_metadata, t)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        core = self._core
        core._txn_manager().require(TxnState.IN_TRANSACTION, action="commit_transaction")
        t = core.max_block if timeout is None else timeout
        if await self.flush(t):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the transaction's records were not all sent in time")
        await core.end_transaction(True, t)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        core = self._core
        core._txn_manager().require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING,
                                    action="abort_transaction")
        t = core.max_block if timeout is None else timeout
        core.drop_unsent(KafkaError(ErrorCode.TRANSACTION_ABORTABLE, "the transaction was aborted"))
        await self.flush(t)
        await core.end_transaction(False, t)

    async def partitions_for(self, topic: str) -> list[int]:
        await self._metadata(topic)
        return list(range(self._core.partition_counts[topic][0]))

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _offset_map(offsets: Mapping[tuple[str, int], int] | Iterable[Any]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from a mapping, or from TopicPartition-like objects
    (``topic``, ``partition``, ``offset`` as attributes or methods)."""
    if isinstance(offsets, Mapping):
        return {(str(t), int(p)): int(o) for (t, p), o in offsets.items()}
    out: dict[tuple[str, int], int] = {}
    for tp in offsets:
        fields = [getattr(tp, name) for name in ("topic", "partition", "offset")]
        t, p, o = (f() if callable(f) else f for f in fields)
        out[(str(t), int(p))] = int(o)
    return out
