"""Executor side: read one offset range of one partition as Arrow record batches.

:func:`read_range` is what ``DataSourceReader.read`` / ``DataSourceStreamReader.read`` run on
the executors.  It is stateless: everything it needs comes in the (pickled) input partition.

A range is first read directly (:func:`_read_direct`): one blocking connection to the
partition's leader (the transport's blocking face), in the task's own thread, each fetch sent
before the previous response is decoded so that the broker sends while this thread decodes
(measured here: ~8 % more rows/s in Spark than the same work split between this thread and an
event loop's, which competed for the GIL and the two cores).  It stops at the first thing that
is not plain records (an error, an empty or truncated response, a connection or timeout problem)
and hands the rest of the range to the general path.

The general path fetches through :class:`odradek.client.AsyncSimpleConsumer` (connections,
metadata, leader changes, retries, version negotiation), run on a private event loop in a
background thread where a task keeps fetches ahead of the decoding.  The consumer runs with
``raw=True``: it hands over each partition's bytes as they came (:class:`~odradek.client.RawFetched`)
and :mod:`odradek.spark._arrow` decodes them column-wise.

Data loss (``failOnDataLoss``) is judged as Spark's Kafka source does: the range's records
are missing when the log now starts after the offset to read (retention, ``DeleteRecords``,
a recreated topic) or ends before the range does (truncation).  Gaps between offsets inside
the log are compaction and not a loss.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from odradek.client import AsyncSimpleConsumer, ClientSecurity, OffsetOutOfRangeError, RawFetched
from odradek.errors import KafkaError
from odradek.protocol.messages.fetch import FetchRequest
from odradek.records import iter_batch_headers
from odradek.transport import Cluster

from ._arrow import Decoded, decode_partition_data
from ._dataloss import DataLossError, report_data_loss
from ._options import DEFAULT_FETCH_BYTES

__all__ = ["DataLossError", "read_range"]

log = logging.getLogger(__name__)

_MAX_FETCH_BYTES = 64 * 1024 * 1024
#: Fetch addresses topics by name up to this version (ids from 13 on).
_FETCH_BY_NAME = 12

#: the direct read's first fetch of a range: small, so that a short range (pushed-down filters,
#: ``endingOffsets``) is not read on into a whole ``max.partition.fetch.bytes`` beyond its end; the
#: next fetches are sized from the bytes per offset it brought (the broker sends at least one whole
#: batch however small the size asked)
_FIRST_FETCH_BYTES = 64 * 1024


def _sized(size: int, per_offset: float, remaining: int) -> int:
    """The fetch size for ``remaining`` offsets at ``per_offset`` bytes each (10 % more and a little
    room), at most ``size`` and at least the first fetch's."""
    return int(min(size, max(_FIRST_FETCH_BYTES, per_offset * remaining * 1.1 + 4096)))


def _next_fetch_offset(data: Any, offset: int) -> int:
    """Offset after the last complete batch in ``data`` (``offset`` when there is none)."""
    nxt = offset
    for h in iter_batch_headers(data):
        if h.last_offset >= nxt:
            nxt = h.last_offset + 1
    return nxt


class _Loop:
    """An event loop in a daemon thread; closed by :meth:`close` (or with the process)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="odradek-spark-fetch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self, consumer: AsyncSimpleConsumer, pump: _Pump | None = None) -> None:
        if pump is not None:
            pump.stop()
        try:
            self.submit(consumer.close()).result(10)
        except Exception:  # closing anyway
            log.debug("closing the consumer failed", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


class _Pump:
    """Fetches run ahead of the reader: a task on the event loop fetches from an offset and on,
    each next fetch starting after the last complete batch of the previous one, and queues up
    to ``depth`` results (or the error that stopped it).  It stops at ``end``, on an error and
    after a fetch that returned no complete batch (the reader decides what that means).

    The next fetch request goes out before a response is decoded, and ``decode`` (when set)
    turns each raw response into its record batch right there, on the event loop's thread: the
    reader's thread then only hands batches on to Spark, and the two threads rarely want the
    GIL at the same time (a thread that waits for it can wait a whole switch interval, 5 ms,
    which used to slow every fetch down)."""

    def __init__(
        self, runner: _Loop, consumer: AsyncSimpleConsumer, topic: str, partition: int, end: int, fetch_bytes: int
    ) -> None:
        self.runner = runner
        self.consumer = consumer
        self.topic = topic
        self.partition = partition
        self.end = end
        self.fetch_bytes = fetch_bytes
        #: ``decode(result, offset)`` for raw results; what it returns (or raises) is queued too
        self.decode: Callable[[RawFetched, int], Any] | None = None
        self.queue: asyncio.Queue[tuple[int, Any, Any]] | None = None
        self.task: Future[Any] | None = None

    def start(self, offset: int, size: int | None = None, depth: int = 4) -> None:
        self.stop()
        self.queue = asyncio.Queue(maxsize=depth)
        self.task = self.runner.submit(self._run(self.queue, offset, size or self.fetch_bytes))

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self.queue = None

    async def _run(self, queue: asyncio.Queue[tuple[int, Any, Any]], offset: int, size: int) -> None:
        fetch = self.consumer.fetch
        ahead: asyncio.Future[Any] | None = None
        try:
            while offset < self.end:
                try:
                    if ahead is not None:
                        res = await ahead
                        ahead = None
                    else:
                        res = await fetch(self.topic, self.partition, offset, size)
                except Exception as exc:
                    await queue.put((offset, exc, None))
                    return
                try:
                    nxt = _next_fetch_offset(res.raw, offset)
                except Exception:  # unreadable data: the decoder reports it
                    nxt = offset
                if offset < nxt < self.end:
                    ahead = asyncio.ensure_future(fetch(self.topic, self.partition, nxt, size))
                    ahead.add_done_callback(_retrieve)
                decoded: Any = None
                if self.decode is not None:
                    try:
                        decoded = self.decode(res, offset)
                    except Exception as exc:  # corrupt data: raised where the reader gets to it
                        decoded = exc
                    res.raw = b""  # decoded: the response's buffer can go
                await queue.put((offset, res, decoded))
                if nxt <= offset:
                    return
                offset = nxt
        finally:
            if ahead is not None:
                ahead.cancel()

    def get(self) -> tuple[int, Any, Any]:
        """The next ``(offset, result, decoded)``: ``decoded`` is ``None`` when not decoded."""
        assert self.queue is not None
        return self.runner.submit(self.queue.get()).result()


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # a fetch ahead that is not awaited any more must not log its error


def read_range(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = True,
    include_headers: bool = False,
    poll_timeout_ms: int = 120000,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
    direct: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``topic``-``partition`` with offsets ``start <= o < end``.

    ``config`` is the consumer configuration (Kafka names).  Records missing from the log are
    reported as data loss (raise or skip, per ``fail_on_data_loss``); a range that cannot make
    progress for ``poll_timeout_ms`` raises ``TimeoutError``.  ``direct=False`` skips the
    direct read (see the module docstring) and reads everything through the general path.
    """
    if start >= end:
        return
    consumer = AsyncSimpleConsumer(dict(config), raw=True)  # checks the configuration; connects when used
    if direct:
        start = yield from _read_direct(consumer, topic, partition, start, end, include_headers, fetch_bytes)
        if start >= end:
            return
    runner = _Loop()
    pump = _Pump(runner, consumer, topic, partition, end, fetch_bytes)
    verify = consumer.check_crcs

    def decode(res: RawFetched, offset: int) -> Decoded:
        return decode_partition_data(
            res.raw,
            topic,
            partition,
            offset,
            end,
            include_headers=include_headers,
            aborted=res.aborted,
            verify_crc=verify,
        )

    pump.decode = decode
    try:
        yield from _read(
            consumer, pump, topic, partition, start, end, fail_on_data_loss, include_headers, poll_timeout_ms
        )
    finally:
        runner.close(consumer, pump)


#: the direct read's clusters (their open connections) kept between the tasks a process runs,
#: by consumer configuration: Spark reuses its Python workers, and a task then asks for fresh
#: metadata on an open connection instead of connecting twice (bootstrap, leader) and
#: handshaking on each -- per task, and so per micro-batch of a stream.  A cluster is taken out
#: while a read uses it (one reader at a time) and put back only when the read ended with no
#: request in flight.
_IDLE_CLUSTERS: dict[tuple[tuple[str, str], ...], Cluster] = {}
_IDLE_LOCK = threading.Lock()
_MAX_IDLE_CLUSTERS = 4


def _cluster_key(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), repr(v)) for k, v in config.items()))


def _take_cluster(consumer: AsyncSimpleConsumer) -> tuple[Cluster, bool]:
    """An idle cluster for ``consumer``'s configuration (and True), or a new one (and False)."""
    with _IDLE_LOCK:
        idle = _IDLE_CLUSTERS.pop(_cluster_key(consumer.config), None)
    if idle is not None:
        return idle, True
    timeout = (consumer.request_timeout_ms + consumer.max_wait_ms) / 1000
    cluster = Cluster(
        consumer.config["bootstrap.servers"],
        client_id=consumer.config["client.id"],
        timeout=timeout,
        security=ClientSecurity.from_config(consumer.config),
    )
    return cluster, False


def _put_back(consumer: AsyncSimpleConsumer, cluster: Cluster) -> None:
    """Keep ``cluster`` for the next read with this configuration (closed when one is kept already,
    or when as many configurations as :data:`_MAX_IDLE_CLUSTERS` are)."""
    key = _cluster_key(consumer.config)
    with _IDLE_LOCK:
        if key not in _IDLE_CLUSTERS and len(_IDLE_CLUSTERS) < _MAX_IDLE_CLUSTERS:
            _IDLE_CLUSTERS[key] = cluster
            return
    cluster.close()


def close_idle_clusters() -> None:
    """Close the connections kept between reads (at exit, and for tests)."""
    with _IDLE_LOCK:
        idle = list(_IDLE_CLUSTERS.values())
        _IDLE_CLUSTERS.clear()
    for cluster in idle:
        cluster.close()


atexit.register(close_idle_clusters)


def _leader(consumer: AsyncSimpleConsumer, topic: str, partition: int) -> tuple[Cluster, Any, int] | None:
    """A cluster, the connection to the partition's leader (from fresh metadata) and the Fetch
    version to use; a kept cluster whose connections went away (closed by the broker while idle)
    is replaced by a new one.  None when the leader cannot be reached."""
    for _ in range(2):
        cluster, kept = _take_cluster(consumer)
        try:
            conn = cluster.leader_connection(topic, partition)
            return cluster, conn, conn.version_for(FetchRequest, maximum=_FETCH_BY_NAME)
        except (KafkaError, ConnectionError, TimeoutError, OSError):
            cluster.close()
            if not kept:
                return None
    return None


def _read_direct(
    consumer: AsyncSimpleConsumer, topic: str, partition: int, start: int, end: int, include_headers: bool, size: int
) -> Generator[pa.RecordBatch, None, int]:
    """Yield the records from ``start`` on, fetched over one blocking connection to the leader
    with the next fetch always sent before a response is decoded; return the offset where it
    stopped: ``end``, or where anything but complete batches of records came back (an error
    code, nothing, a batch larger than ``size``, a failed or slow connection), which the
    general path then reads with its retries and data-loss rules."""
    found = _leader(consumer, topic, partition)
    if found is None:
        return start
    cluster, conn, version = found

    def request(offset: int, want: int = size) -> FetchRequest:
        return consumer.fetch_request([(topic, None, partition, -1, offset, want)], by_id=False)

    offset = start
    in_flight = False  # a fetch sent and not received: the connection cannot be kept
    done = False
    try:
        conn.send(request(offset, min(size, _FIRST_FETCH_BYTES)), version)
        in_flight = True
        while offset < end:
            resp = conn.receive()
            in_flight = False
            parts = [pd for t in resp.responses if t.topic == topic for pd in t.partitions]
            if resp.error_code or len(parts) != 1 or parts[0].partition_index != partition or parts[0].error_code:
                return offset
            fetched = RawFetched.from_partition(topic, partition, offset, parts[0], consumer.isolation_level)
            data, aborted = fetched.raw, fetched.aborted
            del resp, parts, fetched
            try:
                ahead = _next_fetch_offset(data, offset)
            except Exception:  # unreadable data: the decoder says what is wrong
                ahead = offset
            if offset < ahead < end:
                conn.send(request(ahead, _sized(size, len(data) / (ahead - offset), end - ahead)), version)
                in_flight = True
            decoded = decode_partition_data(
                data,
                topic,
                partition,
                offset,
                end,
                include_headers=include_headers,
                aborted=aborted,
                verify_crc=consumer.check_crcs,
            )
            del data
            if not decoded.complete or decoded.next_offset <= offset:
                return offset
            if decoded.batch is not None:
                yield decoded.batch
            offset = decoded.next_offset
            if offset < end and offset != ahead:  # the fetch sent ahead asked for another offset
                return offset
        done = True
        return offset
    except (ConnectionError, TimeoutError) as exc:  # sending or receiving failed
        log.debug("direct read of %s-%d stopped at offset %d: %s", topic, partition, offset, exc)
        return offset
    finally:
        if done and not in_flight:
            _put_back(consumer, cluster)  # for the next task of this worker
        else:
            cluster.close()  # its connections, ``conn`` among them


def _read(
    consumer: AsyncSimpleConsumer,
    pump: _Pump,
    topic: str,
    partition: int,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    include_headers: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    offset = start
    size = pump.fetch_bytes
    stalled_since: float | None = None
    pump.start(offset)
    running = True  # the pump is fetching from ``offset`` on
    while offset < end:
        if not running:
            pump.start(offset, size)
        at, res, decoded = pump.get()
        running = True
        if at != offset:  # cannot happen: the pump follows the batches as the decoder does
            pump.start(offset, size)
            continue
        if isinstance(res, OffsetOutOfRangeError):
            running = False
            if res.earliest >= 0 and offset < res.earliest:
                report_data_loss(
                    f"Cannot fetch offset {offset} of {topic}-{partition}: the log now starts at offset {res.earliest}",
                    fail_on_data_loss,
                )
                offset = res.earliest
                continue
            report_data_loss(
                f"Cannot fetch offsets {offset}..{end - 1} of {topic}-{partition}: "
                f"the log now ends at offset {res.latest}",
                fail_on_data_loss,
            )
            return
        if isinstance(res, BaseException):
            raise res
        if decoded is None:  # the pump left it to the reader
            assert pump.decode is not None
            decoded = pump.decode(res, offset)
        elif isinstance(decoded, BaseException):
            raise decoded
        decoded_next, complete = decoded.next_offset, decoded.complete
        if decoded.batch is not None:
            yield decoded.batch
        if not complete:  # the batch at ``offset`` is larger than the fetch size
            if size >= _MAX_FETCH_BYTES:
                raise RuntimeError(
                    f"a record batch of {topic}-{partition} at offset {offset} is larger than {size} bytes"
                )
            size = min(size * 2, _MAX_FETCH_BYTES)
            running = False
            continue
        size = pump.fetch_bytes
        if decoded_next > offset:
            offset = decoded_next
            stalled_since = None
            continue
        # nothing at ``offset``: the log ends before the range does, or data is not visible yet
        running = False
        visible_end = (
            res.last_stable_offset
            if consumer.isolation_level and res.last_stable_offset >= 0
            else res.high_watermark
        )
        if 0 <= visible_end <= offset and res.high_watermark >= 0:
            report_data_loss(
                f"Cannot fetch offsets {offset}..{end - 1} of {topic}-{partition}: the log ends at offset {visible_end}",
                fail_on_data_loss,
            )
            return
        now = time.monotonic()
        if stalled_since is None:
            stalled_since = now
        elif (now - stalled_since) * 1000 > poll_timeout_ms:
            raise TimeoutError(
                f"Failed to get records for {topic}-{partition} at offset {offset} after polling for {poll_timeout_ms} ms"
            )
