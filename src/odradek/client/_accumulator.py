"""The producer's record accumulator (Kafka's RecordAccumulator): the open batch of each
partition, the closed batches queued for the sender, and the bytes they hold against
``buffer.memory``.  ``send()`` appends under its lock from any thread; the sender takes the
batches that are ready (full, lingered long enough, or flushed) and gives back their memory when
they complete.  The records of a batch are held by an appender (:mod:`odradek.records.appender`),
compiled when the extension is built."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple

from odradek.records.appender import Appender, Pool, Receipt
from odradek.records.v2 import encode_headers

__all__ = ["FutureRecordMetadata", "ProducerBatch", "RecordAccumulator", "RecordMetadata"]

TopicPartition = tuple[str, int]
#: a delivery callback and what it reports: (callback, index in the batch, timestamp, key size, value size)
Callback = tuple[Callable[..., Any], int, int, int, int]


class RecordMetadata(NamedTuple):
    """Where an acknowledged record went: topic, partition, offset (-1 with ``acks=0``), its
    timestamp (the broker's with ``message.timestamp.type=LogAppendTime``), and the sizes of its
    serialized key and value (-1 for none)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


class ProducerBatch:
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
        self.acc: Appender[FutureRecordMetadata]  # its records, their count and accounted size
        self.data: bytes | None = None
        self.created = now
        self.attempts = 0
        self.base_sequence = -1
        self.producer_id = -1  # the producer id its sequence number belongs to (idempotence)
        self.callbacks: list[Callback] | None = None
        self.done = False
        self.error: BaseException | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.retry_at = 0.0
        self.event: threading.Event | None = None
        self.waiters: list[asyncio.Future[None]] | None = None

    @property
    def record_count(self) -> int:
        """How many records the batch holds so far."""
        return int(self.acc.record_count)

    @property
    def size(self) -> int:
        """The batch's size in bytes so far (what ``batch.size`` bounds)."""
        return int(self.acc.size)


class FutureRecordMetadata(Receipt):
    """The future of one record's metadata (cheap: it shares its batch's completion).

    ``FutureRecordMetadata(batch, index, timestamp, key size, value size)``; the compiled
    appender creates them itself (see :mod:`odradek.records.appender`)."""

    __slots__ = ()
    _batch: ProducerBatch
    _index: int
    _timestamp: int
    _ksize: int
    _vsize: int

    def done(self) -> bool:
        """Whether the record's batch has been acknowledged or has failed (result() will not wait)."""
        return self._batch.done

    def _metadata(self) -> RecordMetadata:
        b = self._batch
        if b.error is not None:
            raise b.error
        ts = b.log_append_time if b.log_append_time >= 0 else self._timestamp
        return RecordMetadata(b.topic, b.partition, b.base_offset + self._index if b.base_offset >= 0 else -1, ts, self._ksize, self._vsize)

    def _wait(self, timeout: float | None) -> ProducerBatch:
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


class RecordAccumulator:
    """The open and queued batches of one producer, and the memory they hold.

    ``batch_size``, ``max_request_size`` and ``buffer_memory`` in bytes, ``linger`` in seconds;
    ``max_in_flight``: batches of a partition sent at a time (1 with idempotence, so ordering
    survives retries); ``next_sticky(topic, previous)``: the default partitioner's next partition
    for null-key records when one's batch fills (None with another partitioner); ``fast``: records
    need no serializer, interceptor or custom partitioner, so ``send()`` may use
    :attr:`fast_open`.
    """

    def __init__(
        self,
        *,
        batch_size: int,
        linger: float,
        buffer_memory: int,
        max_request_size: int,
        max_in_flight: int,
        next_sticky: Callable[[str, int], int] | None,
        fast: bool,
    ) -> None:
        self.batch_size = batch_size
        self.linger = linger
        self.buffer_memory = buffer_memory
        self.max_request_size = max_request_size
        self.max_in_flight = max_in_flight
        self.next_sticky = next_sticky
        self.fast = fast
        self.lock = threading.Lock()
        #: notified when a batch completes (memory freed, one fewer unacknowledged)
        self.space = threading.Condition(self.lock)
        self.open: dict[TopicPartition, ProducerBatch] = {}
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.pool = Pool(buffer_memory)  # bytes buffered (buffer.memory)
        #: batches of each partition being sent
        self.in_flight: dict[TopicPartition, int] = {}
        self.unacked = 0  # batches created and not completed
        self.flushing = 0
        self.closed = False
        # topic -> the appender of its sticky partition's open batch, for send() without a key:
        # its try_append() takes the record without the lock (compiled appender only)
        self.fast_open: dict[str, Appender[FutureRecordMetadata]] = {}
        self.waiting_for_space = 0  # send() calls waiting for buffer.memory: send without lingering
        self.room_waiters: list[asyncio.Future[None]] = []  # completed when a batch frees memory
        self.blocking_waits = False  # the sync Producer: each batch gets an Event for result()

    @property
    def buffered(self) -> int:
        """Bytes buffered now (``buffer.memory`` bounds it)."""
        return int(self.pool.buffered)

    # -- appending (any thread, under the lock) ---------------------------------------------------
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
            self.close_batch(tp, batch)
            ready = True
            if sticky and self.next_sticky is not None:
                partition = self.next_sticky(topic, partition)
                tp = (topic, partition)
                other = self.open.get(tp)
                if other is not None and other.size + size > self.batch_size and other.record_count:
                    self.close_batch(tp, other)
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
            self.close_batch(tp, batch)
            ready = True
            if sticky and self.next_sticky is not None:
                self.next_sticky(topic, partition)
        elif sticky and self.fast and not self.closed:
            self.fast_open[topic] = batch.acc
        return FutureRecordMetadata(batch, index, timestamp, ksize, vsize), ready

    def _new_batch(self, tp: TopicPartition) -> ProducerBatch:
        batch = ProducerBatch(tp[0], tp[1], time.monotonic())
        batch.acc = Appender(self.batch_size, self.max_request_size, self.pool, batch, FutureRecordMetadata)
        if self.blocking_waits:
            batch.event = threading.Event()
        self.open[tp] = batch
        self.unacked += 1
        return batch

    def close_batch(self, tp: TopicPartition, batch: ProducerBatch) -> None:
        """No more records: queued for the sender (sequence numbers are given at send time)."""
        self._seal(tp, batch)
        self.queues.setdefault(tp, deque()).append(batch)

    def _seal(self, tp: TopicPartition, batch: ProducerBatch) -> None:
        """Under the lock: the batch leaves ``open`` and takes no more records."""
        if self.open.get(tp) is batch:
            del self.open[tp]
        acc = batch.acc
        acc.close()
        if self.fast_open.get(tp[0]) is acc:
            del self.fast_open[tp[0]]

    # -- the sender's side -----------------------------------------------------------------------
    def ready(self, now: float) -> list[ProducerBatch]:
        """Batches that may be sent now, at most one per partition (ordering with retries)."""
        out: list[ProducerBatch] = []
        with self.lock:
            linger_cut = now - self.linger
            for tp, batch in list(self.open.items()):
                if batch.record_count and (
                    batch.created <= linger_cut or self.flushing or self.closed or self.waiting_for_space
                ):
                    self.close_batch(tp, batch)
            for tp, q in self.queues.items():
                if not q or self.in_flight.get(tp, 0) >= self.max_in_flight:
                    continue
                head = q[0]
                if head.retry_at > now:
                    continue
                out.append(q.popleft())
        return out

    def next_wakeup(self, now: float) -> float:
        """Seconds until a batch lingers long enough or its retry backoff ends (1 when none)."""
        with self.lock:
            times = [b.created + self.linger for b in self.open.values() if b.record_count]
            times += [q[0].retry_at for q in self.queues.values() if q and q[0].retry_at > now]
        return max(0.0, min(times) - now) if times else 1.0

    def open_partitions(self) -> list[TopicPartition]:
        """The partitions with records in an open batch."""
        with self.lock:
            return [tp for tp, b in self.open.items() if b.record_count]

    def expired(self, now: float, delivery_timeout: float) -> list[ProducerBatch]:
        """The batches never sent and older than ``delivery_timeout`` seconds, taken out."""
        expired: list[ProducerBatch] = []
        with self.lock:
            for tp, b in list(self.open.items()):
                if now - b.created >= delivery_timeout:
                    self._seal(tp, b)
                    expired.append(b)
            for q in self.queues.values():
                while q and q[0].attempts == 0 and now - q[0].created >= delivery_timeout:
                    expired.append(q.popleft())
        return expired

    def take_all(self, *, fast_too: bool = False) -> list[ProducerBatch]:
        """Every batch not sent yet, taken out (``fast_too``: and no fast path to open batches)."""
        with self.lock:
            batches = list(self.open.values()) + [b for q in self.queues.values() for b in q]
            for tp, b in list(self.open.items()):
                self._seal(tp, b)
            self.queues.clear()
            if fast_too:
                self.fast_open.clear()
        return batches

    def requeue(self, batches: list[ProducerBatch]) -> None:
        """Batches back at the head of their partitions' queues (to be sent again)."""
        with self.lock:
            for b in batches:
                self.queues.setdefault((b.topic, b.partition), deque()).appendleft(b)

    def sent(self, batches: list[ProducerBatch]) -> None:
        """``batches`` go out: each counts against its partition's in-flight limit."""
        for tp in ((b.topic, b.partition) for b in batches):
            self.in_flight[tp] = self.in_flight.get(tp, 0) + 1

    def answered(self, batches: list[ProducerBatch]) -> None:
        """``batches``' request is over (answered or failed)."""
        for b in batches:
            tp = (b.topic, b.partition)
            self.in_flight[tp] = max(0, self.in_flight.get(tp, 0) - 1)

    def release(self, batch: ProducerBatch) -> list[asyncio.Future[None]]:
        """A completed batch gives back its memory; returns the async waiters for room, to wake."""
        with self.lock:
            batch.acc.release()
            self.pool.add(-batch.size)
            self.unacked -= 1
            self.space.notify_all()
            room, self.room_waiters = self.room_waiters, []
        return room
