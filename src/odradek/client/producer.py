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

The parts, shared by both faces through :class:`_Core`: the accumulator of open and queued
batches (``_accumulator``), the sender (``_sender``), the topics' partition counts for the
partitioner (``_topic_metadata``) and the transaction calls (``_txn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from odradek._timeouts import wait_for
from odradek.client._accumulator import FutureRecordMetadata, RecordAccumulator, RecordMetadata
from odradek.client._config import PRODUCER_DEFAULTS, ClientConfigError, merge_config
from odradek.client._runner import LoopThread
from odradek.client._security import ClientSecurity
from odradek.client._sender import Sender, SendSettings
from odradek.client._topic_metadata import TopicMetadata
from odradek.client._txn import ProducerTransactions, TxnManager, TxnState
from odradek.client.partitioner import DefaultPartitioner, murmur2
from odradek.errors import ErrorCode, KafkaError
from odradek.records import Compression
from odradek.transport import AsyncCluster

__all__ = ["AsyncProducer", "FutureRecordMetadata", "Producer", "RecordMetadata"]

log = logging.getLogger(__name__)

_CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


class _Core:
    """One producer's parts, built from its configuration and shared by the sync and async
    faces: ``acc`` (the accumulator), ``sender``, ``topics`` (partition counts), ``txns`` (the
    transaction calls) over one ``cluster``."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(str(config["acks"]).lower())
        if acks is None:
            raise ClientConfigError(f"invalid acks {config['acks']!r}")
        idempotent = bool(config["enable.idempotence"])
        if idempotent and acks != -1:
            raise ClientConfigError("enable.idempotence requires acks=all")
        codec = str(config["compression.type"]).lower()
        if codec not in _CODECS:
            raise ClientConfigError(f"invalid compression.type {codec!r}")
        self.max_block = int(config["max.block.ms"]) / 1000
        self.max_request_size = int(config["max.request.size"])
        retry_backoff = int(config["retry.backoff.ms"]) / 1000
        request_timeout_ms = int(config["request.timeout.ms"])
        self.key_serializer = config["key.serializer"]
        self.value_serializer = config["value.serializer"]
        #: an asyncio serializer (``async def serialize(topic, value)``, such as
        #: odradek.client.serde's Async* classes) is awaited by AsyncProducer.send before the rest
        self.async_key = _is_async_serializer(self.key_serializer)
        self.async_value = _is_async_serializer(self.value_serializer)
        self.interceptors = list(config["interceptors"] or ())
        self.partitioner = config["partitioner"] or DefaultPartitioner()
        default_partitioner = type(self.partitioner) is DefaultPartitioner
        self.cluster = AsyncCluster(
            config["bootstrap.servers"],
            client_id=config["client.id"],
            request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=int(config["metadata.max.age.ms"]),
            retry_backoff_ms=int(config["retry.backoff.ms"]),
            socket_connection_setup_timeout_ms=int(config["socket.connection.setup.timeout.ms"]),
            allow_auto_create_topics=bool(config["allow.auto.create.topics"]),
            security=ClientSecurity.from_config(config),
        )
        #: the transactional producer's state (None: not transactional)
        self.txn: TxnManager | None = None
        if config["transactional.id"] is not None:
            if not idempotent:
                raise ClientConfigError("transactional.id requires enable.idempotence=true")
            self.txn = TxnManager(self.cluster, str(config["transactional.id"]),
                                  int(config["transaction.timeout.ms"]), retry_backoff)
        # Fast-path flags for send(): records that need no interceptor or serializer.
        self.plain = not self.interceptors and self.key_serializer is None and self.value_serializer is None
        self.ignore_keys = bool(config["partitioner.ignore.keys"])
        self.fast = self.plain and default_partitioner
        self.sticky: dict[str, int] = self.partitioner.sticky if default_partitioner else {}
        self.topics = TopicMetadata(self.cluster, max_block=self.max_block, retry_backoff=retry_backoff)
        #: topic -> (partition count, the partitions with a leader)
        self.partition_counts = self.topics.counts
        self.acc = RecordAccumulator(
            batch_size=int(config["batch.size"]),
            linger=int(config["linger.ms"]) / 1000,
            buffer_memory=int(config["buffer.memory"]),
            max_request_size=self.max_request_size,
            max_in_flight=1 if idempotent else max(1, int(config["max.in.flight.requests.per.connection"])),
            next_sticky=self._next_sticky if default_partitioner else None,
            fast=self.fast,
        )
        settings = SendSettings(
            acks=acks,
            idempotent=idempotent,
            codec=_CODECS[codec],
            level=config["compression.level"],
            request_timeout_ms=request_timeout_ms,
            delivery_timeout=int(config["delivery.timeout.ms"]) / 1000,
            retry_backoff=retry_backoff,
            retries=int(config["retries"]),
        )
        self.sender = Sender(settings, self.acc, self.cluster, self.topics, self.txn, self.interceptors)
        self.topics.sender = self.sender
        self.txns = ProducerTransactions(self.txn, self.sender, self.acc)

    def _next_sticky(self, topic: str, previous: int) -> int:
        return int(self.partitioner.new_batch(topic, *self.partition_counts.get(topic, (1, [])), previous=previous))

    @property
    def buffered(self) -> int:
        """Bytes buffered now (``buffer.memory`` bounds it)."""
        return self.acc.buffered

    @property
    def producer_id(self) -> int:
        return self.sender.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.sender.producer_epoch

    def intercept(self, topic: str, key: Any, value: Any) -> tuple[str, Any, Any]:
        for interceptor in self.interceptors:
            on_send = getattr(interceptor, "on_send", None)
            if on_send is not None:
                topic, value, key = on_send(topic, value, key) or (topic, value, key)
        return topic, key, value

    async def serialize_async(self, topic: str, key: Any, value: Any) -> tuple[Any, Any]:
        """The asyncio serializers' part of :meth:`serialize` (the blocking ones run after)."""
        if self.async_key and key is not None:
            key = await self.key_serializer.serialize(topic, key)
        if self.async_value and value is not None:
            value = await self.value_serializer.serialize(topic, value)
        return key, value

    def serialize(self, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        if self.key_serializer is not None and key is not None and not self.async_key:
            key = self.key_serializer(key) if not hasattr(self.key_serializer, "serialize") else self.key_serializer.serialize(topic, key)
        if self.value_serializer is not None and value is not None and not self.async_value:
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


_time_ns = time.time_ns


def _is_async_serializer(serializer: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(serializer, "serialize", None))


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
        acc = core.acc
        counts = core.partition_counts.get(topic)
        if (
            not core.fast
            or counts is None
            or headers is not None
            or (key is not None and type(key) is not bytes)
            or (value is not None and type(value) is not bytes)
            or acc.closed
            or core.sender.fatal is not None
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
        with acc.lock:
            if acc.pool.buffered + size > acc.buffer_memory:
                return None
            batch = acc.open.get((topic, p))
            if batch is None or on_delivery is not None or batch.acc.size + size >= acc.batch_size:
                fut, ready = acc.append(topic, p, ts, key, value, None, on_delivery, sticky, ks, vs)
            else:
                # the open batch takes the record and stays open: RecordAccumulator.append's simplest case
                index = batch.acc.append(ts, key, value, None, size)
                return FutureRecordMetadata(batch, index, ts, ks, vs)
        if ready:
            core.sender.poke()
        return fut

    def _prepare(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None,
        timestamp: int | None,
        intercepted: bool = False,
    ) -> tuple[str, int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int, int]:
        """Interceptors, serializers, headers and timestamp of one record:
        ``(topic, timestamp, key, value, headers, key size, value size)``, sizes -1 for null.
        ``intercepted``: the interceptors ran already (before asyncio serializers)."""
        core = self._core
        if core.acc.closed:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
        if core.sender.fatal is not None:
            raise core.sender.fatal
        if core.plain and (key is None or type(key) is bytes) and (value is None or type(value) is bytes):
            kb, vb = key, value  # the common case: bytes in, nothing to call
        else:
            if not intercepted:
                topic, key, value = core.intercept(topic, key, value)
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
        cfg = merge_config(PRODUCER_DEFAULTS, config, kwargs)
        if _is_async_serializer(cfg["key.serializer"]) or _is_async_serializer(cfg["value.serializer"]):
            raise ClientConfigError("an asyncio serializer (async def serialize) needs AsyncProducer; "
                                    "Producer takes blocking ones")
        self._core = _Core(cfg)
        self._core.acc.blocking_waits = True
        self._runner = LoopThread("odradek-producer")
        self._runner.start(self._main)

    async def _main(self, ready: Callable[[], None]) -> None:
        """The sender, until the producer closes (or fails: every record then fails with it)."""
        core = self._core
        core.sender.loop = self._runner.loop
        core.sender.wake = asyncio.Event()
        core.sender.stopped = asyncio.Event()
        ready()
        try:
            await core.sender.run()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and core.acc.closed:
                exc = KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT, "the producer was closed before the records were acknowledged"
                )
            else:
                log.error("producer sender stopped: %s", exc)
            if core.sender.fatal is None:
                core.sender.fatal = exc
            core.sender.fail_everything(exc)
        finally:
            core.sender.stopped.set()
            await core.cluster.close()

    def _call(self, coro: Any, timeout: float | None = None) -> Any:
        """Run ``coro`` on the sender's loop and wait for it; when the sender stops for good
        meanwhile (its loop ends with it), its fatal error instead of waiting out ``timeout``."""
        if not self._runner.alive:
            coro.close()
            raise self._core.sender.fatal or KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer's sender has stopped")
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
                    raise self._core.sender.fatal or KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, "the producer's sender has stopped"
                    ) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def _metadata(self, topic: str) -> None:
        core = self._core
        if topic in core.partition_counts and not core.cluster.metadata_stale():
            return
        try:
            self._call(core.topics.wait_for_topic(topic), core.max_block + 5)
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
            acc = self._core.acc.fast_open.get(topic)
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
        with core.acc.lock:
            if core.acc.pool.buffered + ks + vs > core.acc.buffer_memory:
                self._wait_for_space(ks + vs)
            fut, ready = core.acc.append(topic, p, ts, kb, vb, hs, on_delivery, sticky, ks, vs)
        if ready:
            core.sender.poke()
        return fut

    produce = send

    def _wait_for_space(self, size: int) -> None:
        """Under the lock: wait up to ``max.block.ms`` until ``size`` more bytes fit."""
        core = self._core
        deadline = time.monotonic() + core.max_block
        core.acc.waiting_for_space += 1
        try:
            while core.acc.pool.buffered + size > core.acc.buffer_memory:
                if core.sender.fatal is not None:
                    raise core.sender.fatal
                core.sender.poke()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"buffer.memory ({core.acc.buffer_memory} bytes) still full after "
                        f"max.block.ms={core.max_block * 1000:.0f}",
                    )
                core.acc.space.wait(min(left, 0.05))
        finally:
            core.acc.waiting_for_space -= 1

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it; returns the number of batches still pending."""
        core = self._core
        with core.acc.lock:
            core.acc.flushing += 1
        try:
            core.sender.poke()
            deadline = None if timeout is None else time.monotonic() + timeout
            with core.acc.lock:
                while core.acc.unacked > 0:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    core.acc.space.wait(0.05 if left is None else min(left, 0.05))
                    core.sender.poke()
                return core.acc.unacked
        finally:
            with core.acc.lock:
                core.acc.flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (waiting up to ``timeout`` seconds, unbounded by default), stop the
        sender and release the connections.  Closing twice is harmless."""
        core = self._core
        if core.acc.closed:
            return
        self.flush(timeout)
        with core.acc.lock:
            core.acc.closed = True
            core.acc.fast_open.clear()
        core.sender.poke()
        if not self._runner.join(5 if timeout is None else timeout):
            self._runner.cancel_all()
        self._runner.close_when_ended(5)

    # -- transactions (``transactional.id``) ------------------------------------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator: older producers of the id are
        fenced and their open transaction aborted.  Call once, before the first transaction."""
        t = self._core.max_block if timeout is None else timeout
        self._call(self._core.txns.init(t), t + 5)

    def begin_transaction(self) -> None:
        """Start a transaction (after init_transactions()): what is sent until commit_transaction() or
        abort_transaction() is in it. Raises if one is open already."""
        self._core.txns.begin()

    def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int] | Iterable[Any], group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Commit consumed offsets as part of the transaction (``offsets``: ``{(topic, partition):
        next offset}`` or TopicPartition-like objects; ``group_metadata``: the consumer's
        ``consumer_group_metadata()``, or a group id)."""
        t = self._core.max_block if timeout is None else timeout
        self._call(self._core.txns.send_offsets(_offset_map(offsets), group_metadata, t), t + 5)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is buffered, then commit: it all becomes visible to read_committed
        consumers at once.  A failed send makes this raise; abort then."""
        core = self._core
        core.txns.manager().require(TxnState.IN_TRANSACTION, action="commit_transaction")
        t = core.max_block if timeout is None else timeout
        if self.flush(t):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the transaction's records were not all sent in time")
        self._call(core.txns.end(True, t), t + 5)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop what is not sent yet, wait for what is in flight, and abort."""
        core = self._core
        core.txns.manager().require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING,
                                    action="abort_transaction")
        t = core.max_block if timeout is None else timeout
        core.txns.drop_unsent(KafkaError(ErrorCode.TRANSACTION_ABORTABLE, "the transaction was aborted"))
        self.flush(t)
        self._call(core.txns.end(False, t), t + 5)

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (its metadata is fetched first if the producer does not have it)."""
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
        """Get a producer id (idempotence, ``transactional.id``) and start the sender on the
        running loop.  The first send() calls it if you did not; ``async with`` does too."""
        core = self._core
        core.sender.loop = asyncio.get_running_loop()
        core.sender.wake = asyncio.Event()
        await core.sender.init_producer_id(time.monotonic() + core.max_block)
        self._task = asyncio.get_running_loop().create_task(core.sender.run())

    async def _metadata(self, topic: str) -> None:
        core = self._core
        if topic in core.partition_counts and not core.cluster.metadata_stale():
            return
        await core.topics.wait_for_topic(topic)

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
                acc = self._core.acc.fast_open.get(topic)
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
        intercepted = False
        if self._core.async_key or self._core.async_value:
            topic, key, value = self._core.intercept(topic, key, value)
            key, value = await self._core.serialize_async(topic, key, value)
            intercepted = True
        topic, ts, kb, vb, hs, ks, vs = self._prepare(topic, value, key, headers, timestamp, intercepted)
        core = self._core
        if topic not in core.partition_counts:
            await self._metadata(topic)
        p, sticky = self._choose(topic, kb, partition)
        if core.acc.pool.buffered + ks + vs > core.acc.buffer_memory:
            await self._wait_for_space(ks + vs)
        with core.acc.lock:
            fut, ready = core.acc.append(topic, p, ts, kb, vb, hs, on_delivery, sticky, ks, vs)
        if ready:
            core.sender.poke()
            await asyncio.sleep(0)
        return fut

    def _wake_set(self) -> bool:
        wake = self._core.sender.wake
        return wake is not None and wake.is_set()

    async def _wait_for_space(self, size: int) -> None:
        core = self._core
        deadline = time.monotonic() + core.max_block
        core.acc.waiting_for_space += 1
        try:
            while core.acc.pool.buffered + size > core.acc.buffer_memory:
                if core.sender.fatal is not None:
                    raise core.sender.fatal
                if self._task is not None and self._task.done():
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer's sender has stopped")
                core.sender.poke()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"buffer.memory ({core.acc.buffer_memory} bytes) still full after "
                        f"max.block.ms={core.max_block * 1000:.0f}",
                    )
                room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                with core.acc.lock:
                    core.acc.room_waiters.append(room)
                with contextlib.suppress(TimeoutError):
                    await wait_for(room, min(left, 0.1))
        finally:
            core.acc.waiting_for_space -= 1

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> RecordMetadata:
        """send() and await the record's acknowledgement: its :class:`RecordMetadata` (partition, offset,
        timestamp), or the error the send failed with."""
        fut = await self.send(topic, value, key, **kwargs)
        result: RecordMetadata = await fut
        return result

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it (up to ``timeout`` seconds); returns the number of batches
        still pending."""
        core = self._core
        core.acc.flushing += 1
        try:
            core.sender.poke()
            deadline = None if timeout is None else time.monotonic() + timeout
            while core.acc.unacked > 0 and (deadline is None or time.monotonic() < deadline):
                if self._task is not None and self._task.done():
                    break
                await asyncio.sleep(0.001)
            return core.acc.unacked
        finally:
            core.acc.flushing -= 1

    async def close(self, timeout: float | None = None) -> None:
        """Send what is queued (waiting up to ``timeout`` seconds), stop the sender and release the
        connections. Closing twice is harmless."""
        core = self._core
        if core.acc.closed:
            return
        await self.flush(timeout)
        with core.acc.lock:
            core.acc.closed = True
            core.acc.fast_open.clear()
        core.sender.poke()
        if self._task is not None:
            try:
                await wait_for(self._task, 5 if timeout is None else timeout)
            except (TimeoutError, asyncio.CancelledError, Exception):
                self._task.cancel()
        await core.cluster.close()

    # -- transactions: as Producer's ------------------------------------------------------------------
    async def init_transactions(self, timeout: float | None = None) -> None:
        """Register the ``transactional.id`` with its coordinator: older producers of the id are fenced and
        their open transaction aborted. Call once, before the first transaction."""
        await self._core.txns.init(self._core.max_block if timeout is None else timeout)

    def begin_transaction(self) -> None:
        """Start a transaction (after init_transactions()): what is sent until commit_transaction() or
        abort_transaction() is in it."""
        self._core.txns.begin()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int] | Iterable[Any], group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Commit consumed offsets as part of the transaction (``{(topic, partition): next offset}`` or
        TopicPartition-like objects; ``group_metadata``: the consumer's ``consumer_group_metadata()``, or a
        group id)."""
        t = self._core.max_block if timeout is None else timeout
        await self._core.txns.send_offsets(_offset_map(offsets), group_metadata, t)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is buffered, then commit: it all becomes visible to read_committed consumers at once. A
        failed send makes this raise; abort then."""
        core = self._core
        core.txns.manager().require(TxnState.IN_TRANSACTION, action="commit_transaction")
        t = core.max_block if timeout is None else timeout
        if await self.flush(t):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the transaction's records were not all sent in time")
        await core.txns.end(True, t)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop what is not sent yet, wait for what is in flight, and abort: read_committed consumers never
        see the transaction's records."""
        core = self._core
        core.txns.manager().require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING,
                                    action="abort_transaction")
        t = core.max_block if timeout is None else timeout
        core.txns.drop_unsent(KafkaError(ErrorCode.TRANSACTION_ABORTABLE, "the transaction was aborted"))
        await self.flush(t)
        await core.txns.end(False, t)

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (its metadata is fetched first if the producer does not have it)."""
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
