"""SimpleConsumer and AsyncSimpleConsumer: the seeds' low-level, stateless consumer.

The caller says where to read; nothing is remembered between calls (no group, no committed
offsets, no positions)::

    with SimpleConsumer(bootstrap_servers="127.0.0.1:9092") as c:
        offset = c.earliest_offset("events", 0)
        while True:
            records = c.fetch("events", 0, offset)
            for r in records:
                handle(r.key, r.value)
            offset = records.next_offset

``fetch`` returns the records of one partition at or after an offset; ``multi_fetch`` reads many
partitions with one Fetch request per leader; ``offsets_before`` is the seeds'
``getOffsetsBefore`` (ListOffsets v0: segment start offsets before a time, newest first; -1 the
latest offset, -2 the earliest), with ``earliest_offset`` / ``latest_offset`` /
``offset_for_time`` as one-offset helpers (ListOffsets v1+).

The blocking :class:`SimpleConsumer` sends a partition's next fetch as soon as one returns with
more records in the log (see :meth:`SimpleConsumer.fetch`): a loop like the one above then finds
the next records fetched (and decoded) while it worked through the previous ones.  Records are
decoded a whole batch at a time (:meth:`odradek.records.Batch.record_columns`), each
:class:`ConsumerRecord` built by C iterators over the batch's columns.

Fetches use the highest Fetch version both sides support, addressing topics by id (v13+) when
the metadata has topic ids and by name (up to v12) otherwise, and wait ``fetch.max.wait.ms`` for
``fetch.min.bytes``.  A fetch result is a :class:`FetchedRecords` (a list of
:class:`ConsumerRecord`) that also carries ``next_offset`` (where to fetch next: past the last
complete batch, including control batches and records skipped before the requested offset),
``high_watermark``, ``last_stable_offset`` and ``log_start_offset``.

``AsyncSimpleConsumer(config, raw=True)`` skips the decoding: each fetch result is a
:class:`RawFetched`, an empty ``FetchedRecords`` carrying the partition's record-batch bytes as
they came (``raw``) and the aborted transactions (``aborted``), for readers that decode batches
their own way (the Spark source decodes them column-wise into Arrow).  ``next_offset`` is then
the requested offset: where the next fetch starts is for the caller's decoder to say.

Errors: an offset outside the log raises :class:`~odradek.client.errors.OffsetOutOfRangeError`
(saying the valid range); leader changes, unknown topics and lost connections refresh metadata
and retry until ``request.timeout.ms`` has passed, then raise (``KafkaError``, ``TimeoutError``
or ``ConnectionError``); errors that cannot succeed on retry raise :class:`KafkaError` at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

from odradek._timeouts import wait_for
from odradek.client._config import CONSUMER_DEFAULTS, ClientConfigError, merge_config
from odradek.client._runner import LoopThread
from odradek.client._security import ClientSecurity
from odradek.client.errors import OffsetOutOfRangeError, worse_error
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.fetch import FetchRequest, FetchResponse
from odradek.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from odradek.records import Header, RecordsError, TimestampType, parse_control_key, read_batches
from odradek.transport import AsyncBrokerConnection, AsyncCluster, TopicInfo

__all__ = ["AsyncSimpleConsumer", "ConsumerRecord", "FetchedRecords", "SimpleConsumer"]

T = TypeVar("T")
TopicPartition = tuple[str, int]

LATEST, EARLIEST = -1, -2
#: Fetch versions that address topics by name; 13+ use topic ids.
_MAX_FETCH_BY_NAME = 12
#: The largest partition buffer tried when a batch does not fit (Kafka's default max frame size).
_MAX_GROWN_FETCH = 104857600
_INT32_MAX = 2147483647
_REFRESH_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
_ABORT = 0


class ConsumerRecord(NamedTuple):
    """One record as a consumer sees it.

    ``timestamp`` is milliseconds since the epoch (-1 for magic-0 data); ``timestamp_type`` a
    :class:`~odradek.records.TimestampType` (CREATE_TIME, LOG_APPEND_TIME, or
    NO_TIMESTAMP_TYPE for magic 0); ``key`` and ``value`` are ``bytes`` or ``None`` (or what the
    configured deserializers return); ``headers`` lists ``(name, value)`` pairs in wire order.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[Header]


class FetchedRecords(list[ConsumerRecord]):
    """The records of one partition from one fetch, plus where the log stood.

    ``next_offset`` is the offset to fetch next (it moves past control batches and aborted
    transactions even when no record is returned); ``high_watermark``, ``last_stable_offset``
    and ``log_start_offset`` are the broker's figures at the time of the fetch (-1 if unknown).
    """

    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "next_offset", "partition", "topic")

    def __init__(self, topic: str, partition: int, next_offset: int, high_watermark: int = -1) -> None:
        super().__init__()
        self.topic = topic
        self.partition = partition
        self.next_offset = next_offset
        self.high_watermark = high_watermark
        self.last_stable_offset = -1
        self.log_start_offset = -1

    @property
    def lag(self) -> int:
        """Records between ``next_offset`` and the high watermark (-1 if unknown)."""
        return max(self.high_watermark - self.next_offset, 0) if self.high_watermark >= 0 else -1

    def __repr__(self) -> str:
        return (
            f"FetchedRecords({self.topic}-{self.partition}, {len(self)} records, next_offset={self.next_offset}, "
            f"high_watermark={self.high_watermark})"
        )


class RawFetched(FetchedRecords):
    """One partition's fetched data, undecoded (``AsyncSimpleConsumer(raw=True)``).

    ``raw`` holds the record batches as the broker sent them (possibly ending in a partial
    batch); ``aborted`` the ``(producer_id, first_offset)`` of the aborted transactions in it
    under ``read_committed``, ``None`` under ``read_uncommitted``.
    """

    __slots__ = ("aborted", "raw")

    def __init__(self, topic: str, partition: int, next_offset: int, high_watermark: int = -1) -> None:
        super().__init__(topic, partition, next_offset, high_watermark)
        self.raw: bytes | bytearray | memoryview = b""
        self.aborted: list[tuple[int, int]] | None = None

    @classmethod
    def from_partition(
        cls, topic: str, partition: int, offset: int, pd: FetchResponse.PartitionData, isolation_level: int
    ) -> RawFetched:
        """A Fetch response partition's bytes and watermarks, as fetched at ``offset``."""
        out = cls(topic, partition, offset, pd.high_watermark)
        out.last_stable_offset = pd.last_stable_offset
        out.log_start_offset = pd.log_start_offset
        data: Any = pd.records
        if data is None:
            data = b""
        elif not isinstance(data, (bytes, bytearray, memoryview)):  # a broker-side file Region
            data = data.to_bytes()
        out.raw = data
        if isolation_level:
            out.aborted = [(a.producer_id, a.first_offset) for a in pd.aborted_transactions or ()]
        return out

    def __repr__(self) -> str:
        return (
            f"RawFetched({self.topic}-{self.partition}, {len(self.raw)} bytes at {self.next_offset}, "
            f"high_watermark={self.high_watermark})"
        )


class _BatchTooLarge(Exception):
    """The partition's data held only part of a batch: fetch it again with a larger buffer."""


class _Retry(Exception):
    def __init__(self, error: BaseException, refresh: bool = True) -> None:
        super().__init__(str(error))
        self.error = error
        self.refresh = refresh


def _deserializer(d: Any) -> Callable[[str, bytes], Any] | None:
    if d is None:
        return None
    method: Callable[[str, bytes], Any] | None = getattr(d, "deserialize", None)
    if inspect.iscoroutinefunction(method):
        raise ClientConfigError("an asyncio deserializer (async def deserialize) is awaited by the group "
                                "consumers (AsyncConsumer, Consumer); the simple consumers take blocking ones")
    if method is not None:
        return method
    return lambda _topic, data: d(data)


class AsyncSimpleConsumer:
    """The asyncio low-level consumer (see the module docstring).

    ``AsyncSimpleConsumer({"bootstrap.servers": "127.0.0.1:9092"})`` or
    ``AsyncSimpleConsumer(bootstrap_servers="127.0.0.1:9092", fetch_max_wait_ms=100)``; it
    connects on first use; ``await close()`` (or ``async with``) releases the connections.
    ``raw=True``: fetches return :class:`RawFetched` (undecoded batches).
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *, raw: bool = False, **kwargs: Any) -> None:
        cfg = merge_config(CONSUMER_DEFAULTS, config, kwargs)
        self.config = cfg
        self.raw = raw
        isolation = str(cfg["isolation.level"]).lower()
        if isolation not in _ISOLATION:
            raise ClientConfigError(f"invalid isolation.level {cfg['isolation.level']!r}")
        self.isolation_level = _ISOLATION[isolation]
        self.max_wait_ms = int(cfg["fetch.max.wait.ms"])
        self.min_bytes = int(cfg["fetch.min.bytes"])
        self.partition_max_bytes = int(cfg["max.partition.fetch.bytes"])
        #: which partition goes first in the next multi-partition Fetch (see :meth:`_fetch_from`)
        self._fetch_turn = 0
        self.fetch_max_bytes = int(cfg["fetch.max.bytes"])
        self.check_crcs = bool(cfg["check.crcs"])
        self.request_timeout_ms = int(cfg["request.timeout.ms"])
        self.retry_backoff = int(cfg["retry.backoff.ms"]) / 1000
        self.retry_backoff_max = max(int(cfg["retry.backoff.max.ms"]) / 1000, self.retry_backoff)
        for name in ("fetch.max.wait.ms", "request.timeout.ms", "max.partition.fetch.bytes", "fetch.max.bytes"):
            if int(cfg[name]) < (0 if name == "fetch.max.wait.ms" else 1):
                raise ClientConfigError(f"invalid {name} {cfg[name]!r}")
        self._key_deserializer = _deserializer(cfg["key.deserializer"])
        self._value_deserializer = _deserializer(cfg["value.deserializer"])
        self._cluster = AsyncCluster(
            cfg["bootstrap.servers"],
            client_id=cfg["client.id"],
            request_timeout_ms=self.request_timeout_ms,
            metadata_max_age_ms=int(cfg["metadata.max.age.ms"]),
            retry_backoff_ms=int(cfg["retry.backoff.ms"]),
            socket_connection_setup_timeout_ms=int(cfg["socket.connection.setup.timeout.ms"]),
            allow_auto_create_topics=bool(cfg["allow.auto.create.topics"]),
            security=ClientSecurity.from_config(cfg),
        )
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to a bootstrap server now (otherwise the first call does)."""
        await self._retrying(lambda remaining: self._cluster.any_connection(), self._deadline(), "connect")

    async def close(self) -> None:
        """Close the connections; later calls raise.  Closing twice is harmless."""
        self._closed = True
        await self._cluster.close()

    async def __aenter__(self) -> AsyncSimpleConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- metadata ------------------------------------------------------------------------------
    async def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The partition ids of ``topic`` (waiting up to ``timeout_ms``, default
        ``request.timeout.ms``, for it to appear); ``KafkaError`` if it does not exist."""
        deadline = self._deadline(timeout_ms)
        info = await self._retrying(lambda _remaining: self._topic(topic, deadline), deadline, f"metadata of {topic}")
        return sorted(info.partitions)

    # -- fetch ---------------------------------------------------------------------------------
    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None) -> FetchedRecords:
        """Records of ``topic``-``partition`` at or after ``offset``, up to about ``max_bytes``
        (default ``max.partition.fetch.bytes``; a first batch larger than that is still returned
        whole).  Empty when there is nothing yet after waiting ``fetch.max.wait.ms``."""
        result = await self.multi_fetch({(topic, partition): offset}, max_bytes)
        return result[(topic, partition)]

    async def multi_fetch(
        self, offsets: Mapping[TopicPartition, int], max_bytes: int | None = None
    ) -> dict[TopicPartition, FetchedRecords]:
        """Fetch many partitions at once, one Fetch request per leader; ``max_bytes`` is per
        partition.  Every partition asked for has an entry in the result."""
        self._check_open()
        sizes: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            if offset < 0:
                raise ValueError(f"fetch offset must be >= 0, not {offset} ({tp[0]}-{tp[1]})")
            sizes[tp] = min(max_bytes if max_bytes is not None else self.partition_max_bytes, _INT32_MAX)
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        started = time.monotonic()
        deadline = self._deadline(self.request_timeout_ms + self.max_wait_ms)
        pending = dict(offsets)
        results: dict[TopicPartition, FetchedRecords] = {}
        attempt = 0
        last: BaseException | None = None
        while pending:
            outcome = await self._fetch_round(pending, sizes, deadline)
            retry: dict[TopicPartition, int] = {}
            refresh: set[str] = set()
            grown = False
            for tp, res in outcome.items():
                if isinstance(res, FetchedRecords):
                    results[tp] = res
                elif isinstance(res, _BatchTooLarge):
                    if sizes[tp] >= _MAX_GROWN_FETCH:
                        raise KafkaError(
                            ErrorCode.RECORD_LIST_TOO_LARGE,
                            f"the batch at offset {pending[tp]} of {tp[0]}-{tp[1]} is larger than {sizes[tp]} bytes",
                        )
                    sizes[tp] = min(sizes[tp] * 2, _MAX_GROWN_FETCH)
                    retry[tp] = pending[tp]
                    grown = True
                elif isinstance(res, _Retry):
                    retry[tp] = pending[tp]
                    last = worse_error(last, res.error)
                    if res.refresh:
                        refresh.add(tp[0])
                else:
                    raise res
            pending = retry
            if not pending:
                break
            if time.monotonic() >= deadline:
                raise self._give_up(last, "fetch", started)
            if refresh or not grown:
                attempt += 1
                await self._backoff(attempt, deadline)
                if refresh:
                    await self._refresh(refresh, deadline)
        return {tp: results[tp] for tp in offsets}

    async def _fetch_round(
        self, offsets: Mapping[TopicPartition, int], sizes: Mapping[TopicPartition, int], deadline: float
    ) -> dict[TopicPartition, FetchedRecords | BaseException]:
        """One Fetch request per leader; per partition its records or why it needs a retry."""
        out: dict[TopicPartition, FetchedRecords | BaseException] = {}
        by_leader: dict[int, list[tuple[TopicPartition, Any, int]]] = {}
        for tp in offsets:
            topic, partition = tp
            try:
                info = await self._with_deadline(self._topic(topic, deadline), deadline)
            except (ConnectionError, TimeoutError, OSError) as exc:
                out[tp] = _Retry(exc)
                continue
            except KafkaError as exc:
                out[tp] = _Retry(exc) if exc.retriable else exc
                continue
            pinfo = info.partitions.get(partition)
            if pinfo is None or pinfo.leader < 0:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if pinfo is None else ErrorCode.LEADER_NOT_AVAILABLE
                out[tp] = _Retry(KafkaError(code, f"{topic}-{partition}"))
                continue
            by_leader.setdefault(pinfo.leader, []).append((tp, info.topic_id, pinfo.leader_epoch))
        if by_leader:
            tasks = [self._fetch_from(node, parts, offsets, sizes, deadline) for node, parts in by_leader.items()]
            for node_result in await asyncio.gather(*tasks):
                out.update(node_result)
        return out

    async def _fetch_from(
        self,
        node: int,
        parts: list[tuple[TopicPartition, Any, int]],
        offsets: Mapping[TopicPartition, int],
        sizes: Mapping[TopicPartition, int],
        deadline: float,
    ) -> dict[TopicPartition, FetchedRecords | BaseException]:
        if len(parts) > 1:
            # a different partition first each time, as librdkafka and the Java client do: a
            # broker fills its answer in request order and may stop before the last partitions
            # (fetch.max.bytes; Odradek's fetch.response.target.bytes), which would then wait
            # for as long as the first ones have data
            turn = self._fetch_turn % len(parts)
            self._fetch_turn += 1
            parts = parts[turn:] + parts[:turn]
        tps = [tp for tp, _id, _epoch in parts]
        try:
            conn = await self._with_deadline(self._cluster.connection(node), deadline)
            with_ids = all(getattr(topic_id, "int", 0) for _tp, topic_id, _epoch in parts)
            version = conn.version_for(FetchRequest, maximum=None if with_ids else _MAX_FETCH_BY_NAME)
        except (ConnectionError, TimeoutError, OSError) as exc:
            return {tp: _Retry(exc) for tp in tps}
        except KafkaError as exc:
            return {tp: (_Retry(exc) if exc.retriable else exc) for tp in tps}
        by_id = version >= 13
        names = {topic_id: tp[0] for tp, topic_id, _epoch in parts} if by_id else {}
        request = self.fetch_request(
            [(tp[0], topic_id, tp[1], epoch, offsets[tp], sizes[tp]) for tp, topic_id, epoch in parts], by_id
        )
        timeout = min((self.request_timeout_ms + self.max_wait_ms) / 1000, max(deadline - time.monotonic(), 0.001))
        try:
            resp: FetchResponse = await conn.request(request, version, timeout=timeout)
        except (ConnectionError, TimeoutError, OSError) as exc:
            return {tp: _Retry(exc) for tp in tps}
        if resp.error_code:
            err = KafkaError(resp.error_code, f"fetch from broker {node}")
            return {tp: (_Retry(err, refresh=False) if err.retriable else err) for tp in tps}
        out: dict[TopicPartition, FetchedRecords | BaseException] = {}
        for tr in resp.responses:
            topic = names.get(tr.topic_id, "") if by_id else tr.topic
            for pd in tr.partitions:
                tp = (topic, pd.partition_index)
                if tp not in offsets:
                    continue
                if pd.error_code:
                    out[tp] = await self._partition_error(tp, offsets[tp], pd.error_code, deadline)
                    continue
                if self.raw:
                    out[tp] = RawFetched.from_partition(topic, pd.partition_index, offsets[tp], pd, self.isolation_level)
                    continue
                try:
                    out[tp] = self._decode(topic, pd.partition_index, offsets[tp], pd)
                except _BatchTooLarge as exc:
                    out[tp] = exc
        for tp in tps:
            if tp not in out:
                missing = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no data for {tp[0]}-{tp[1]} in the fetch response")
                out[tp] = _Retry(missing)
        return out

    def fetch_request(self, wanted: Iterable[tuple[str, Any, int, int, int, int]], by_id: bool) -> FetchRequest:
        """The Fetch request this consumer sends for ``(topic, topic_id, partition, leader_epoch,
        offset, max_bytes)`` entries, topics addressed by id (Fetch v13 on) or by name; for
        callers that send it over a connection of their own."""
        R = FetchRequest
        topics: dict[str, FetchRequest.FetchTopic] = {}
        largest = 1
        for topic, topic_id, partition, leader_epoch, offset, size in wanted:
            ft = topics.get(topic)
            if ft is None:
                ft = topics[topic] = R.FetchTopic(topic_id=topic_id) if by_id else R.FetchTopic(topic=topic)
            ft.partitions.append(
                R.FetchPartition(
                    partition=partition,
                    current_leader_epoch=leader_epoch,
                    fetch_offset=offset,
                    partition_max_bytes=size,
                )
            )
            largest = max(largest, size)
        return R(
            replica_id=-1,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=min(max(self.fetch_max_bytes, largest), _INT32_MAX),
            isolation_level=self.isolation_level,
            topics=list(topics.values()),
        )

    async def _partition_error(self, tp: TopicPartition, offset: int, code: int, deadline: float) -> BaseException:
        err = ErrorCode.of(code)
        if err == ErrorCode.OFFSET_OUT_OF_RANGE:
            earliest = latest = -1
            try:
                earliest = await self._list_one(tp[0], tp[1], EARLIEST, deadline)
                latest = await self._list_one(tp[0], tp[1], LATEST, deadline)
            except (KafkaError, ConnectionError, TimeoutError):
                pass
            return OffsetOutOfRangeError(tp[0], tp[1], offset, earliest, latest)
        exc = KafkaError(err, f"fetch {tp[0]}-{tp[1]} at offset {offset}")
        if err in _REFRESH_ERRORS:
            return _Retry(exc, refresh=True)
        if err.retriable:
            return _Retry(exc, refresh=False)
        return exc

    def _decode(self, topic: str, partition: int, offset: int, pd: FetchResponse.PartitionData) -> FetchedRecords:
        """Records at or after ``offset`` in one partition's data: one pass over the batches,
        control batches and aborted transactions skipped, a truncated last batch ignored."""
        out = FetchedRecords(topic, partition, offset, pd.high_watermark)
        out.last_stable_offset = pd.last_stable_offset
        out.log_start_offset = pd.log_start_offset
        data = pd.records
        if not data:
            return out
        if not isinstance(data, (bytes, bytearray, memoryview)):  # a broker-side file Region
            data = data.to_bytes()
        tn = tuple.__new__
        cr = ConsumerRecord
        kd, vd = self._key_deserializer, self._value_deserializer
        aborted_txns = sorted(pd.aborted_transactions or (), key=lambda a: a.first_offset) if self.isolation_level else ()
        aborted_pids: set[int] = set()
        next_offset = offset
        useful = False  # a complete batch reaching ``offset`` was seen
        end = 0  # where the last complete batch ends
        # Decoding builds many small tuples at once; the cyclic collector would scan them again and
        # again while they are being made (about a third of the time), and none can form a cycle.
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            for batch in read_batches(data, verify_crc=self.check_crcs):
                h = batch.header
                end = h.position + h.size
                last = h.last_offset
                if last < offset:
                    continue
                useful = True
                attrs = h.attributes
                if h.magic >= 2 and attrs & 0x30:  # transactional (0x10) or control (0x20)
                    if aborted_txns and attrs & 0x10:
                        while aborted_txns and aborted_txns[0].first_offset <= last:
                            aborted_pids.add(aborted_txns.pop(0).producer_id)
                    if attrs & 0x20:
                        if aborted_pids and h.producer_id in aborted_pids:
                            recs = batch.records
                            if recs and parse_control_key(recs[0].key)[1] == _ABORT:
                                aborted_pids.discard(h.producer_id)
                        next_offset = last + 1
                        continue
                    if h.producer_id in aborted_pids:
                        next_offset = last + 1
                        continue
                tt = TimestampType((attrs >> 3) & 1) if h.magic > 0 else TimestampType.NO_TIMESTAMP_TYPE
                first = len(out)
                compiled = None if kd is not None or vd is not None else batch.compiled_records(cr, topic, partition, tt)
                for cols in () if compiled is not None else batch.record_columns():
                    n = cols.num_records
                    keys, values = cols.keys, cols.values
                    if kd is not None:
                        keys = [k if k is None else kd(topic, k) for k in keys]
                    if vd is not None:
                        values = [v if v is None else vd(topic, v) for v in values]
                    # the records are built by C iterators: no Python code runs per record
                    out += map(
                        tn,
                        repeat(cr, n),
                        zip(
                            repeat(topic, n),
                            repeat(partition, n),
                            cols.offsets,
                            cols.timestamps,
                            repeat(tt, n),
                            keys,
                            values,
                            cols.headers,
                        ),
                    )
                if compiled is not None:
                    out += compiled
                if (h.magic < 2 or h.base_offset < offset) and len(out) > first and out[first][2] < offset:
                    out[first:] = [r for r in out[first:] if r[2] >= offset]
                next_offset = last + 1
        except RecordsError as exc:
            if out or next_offset > offset:
                # return what decoded cleanly; the next fetch starts at the bad batch and raises
                out.next_offset = next_offset
                return out
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{topic}-{partition} at offset {offset}: {exc}") from exc
        finally:
            if collecting:
                gc.enable()
        if not useful and end < len(data):
            raise _BatchTooLarge()  # only part of the batch holding ``offset`` fitted
        out.next_offset = next_offset
        return out

    # -- offsets -------------------------------------------------------------------------------
    async def offsets_before(self, topic: str, partition: int, time: int, max_num: int = 1) -> list[int]:
        """The seeds' getOffsetsBefore: up to ``max_num`` offsets, newest first, of segment
        starts before ``time`` (ms since the epoch); ``time`` -1 gives the latest offset
        (the log end) first, -2 the earliest.  With a broker that lacks ListOffsets v0 the
        answer is the single offset of ListOffsets v1+ (the first offset at or after ``time``)."""
        self._check_open()
        if max_num < 1:
            raise ValueError(f"max_num must be >= 1, not {max_num}")
        deadline = self._deadline()

        async def attempt(conn: AsyncBrokerConnection) -> list[int]:
            lo, _hi = conn.versions.get(ListOffsetsRequest.API_KEY, (0, 0))
            if lo == 0:
                part = await self._list_request(conn, topic, partition, time, 0, max_num, deadline)
                return list(part.old_style_offsets)
            part = await self._list_request(conn, topic, partition, time, None, 1, deadline)
            return [part.offset] if part.offset >= 0 else []

        return await self._on_leader(topic, partition, attempt, deadline, "list offsets")

    async def earliest_offset(self, topic: str, partition: int) -> int:
        """The log start offset: the first offset still in the log."""
        self._check_open()
        return await self._list_one(topic, partition, EARLIEST, self._deadline())

    async def latest_offset(self, topic: str, partition: int) -> int:
        """The high watermark (the last stable offset for ``read_committed``): the offset the
        next record will get, as far as consumers can see."""
        self._check_open()
        return await self._list_one(topic, partition, LATEST, self._deadline())

    async def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        """The first offset whose record timestamp is at or after ``timestamp`` (ms since the
        epoch), or ``None`` when every record is older."""
        self._check_open()
        if timestamp < 0:
            raise ValueError("timestamp must be >= 0 (use earliest_offset / latest_offset for -2 / -1)")
        offset = await self._list_one(topic, partition, timestamp, self._deadline())
        return offset if offset >= 0 else None

    async def _list_one(self, topic: str, partition: int, timestamp: int, deadline: float) -> int:
        async def attempt(conn: AsyncBrokerConnection) -> int:
            hi = conn.versions.get(ListOffsetsRequest.API_KEY, (0, 0))[1]
            if hi == 0:
                part = await self._list_request(conn, topic, partition, timestamp, 0, 1, deadline)
                return part.old_style_offsets[0] if part.old_style_offsets else -1
            part = await self._list_request(conn, topic, partition, timestamp, None, 1, deadline)
            return int(part.offset)

        return await self._on_leader(topic, partition, attempt, deadline, "list offsets")

    async def _list_request(
        self,
        conn: AsyncBrokerConnection,
        topic: str,
        partition: int,
        timestamp: int,
        version: int | None,
        max_num: int,
        deadline: float,
    ) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
        R = ListOffsetsRequest
        v = conn.version_for(R) if version is None else version
        pinfo = self._cluster.topics[topic].partitions[partition]
        req = R(
            replica_id=-1,
            isolation_level=self.isolation_level,
            topics=[
                R.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        R.ListOffsetsPartition(
                            partition_index=partition,
                            current_leader_epoch=pinfo.leader_epoch,
                            timestamp=timestamp,
                            max_num_offsets=max_num,
                        )
                    ],
                )
            ],
            timeout_ms=self.request_timeout_ms,
        )
        resp: ListOffsetsResponse = await conn.request(req, v, timeout=max(deadline - time.monotonic(), 0.001))
        for t in resp.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    if p.error_code:
                        raise KafkaError(p.error_code, f"list offsets of {topic}-{partition}")
                    return p
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {topic}-{partition} in the ListOffsets response")

    async def _on_leader(
        self,
        topic: str,
        partition: int,
        fn: Callable[[AsyncBrokerConnection], Awaitable[T]],
        deadline: float,
        what: str,
    ) -> T:
        """Run ``fn`` on the partition leader's connection, refreshing metadata and retrying
        retriable failures until the deadline."""
        cluster = self._cluster

        async def once(_remaining: float) -> T:
            await self._topic(topic, deadline)
            leader = cluster.leader(topic, partition)
            if leader < 0:
                info = cluster.topics.get(topic)
                if info is not None and partition not in info.partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition}")
            conn = await cluster.connection(leader)
            return await fn(conn)

        return await self._retrying(once, deadline, f"{what} of {topic}-{partition}", refresh=[topic])

    # -- retries and deadlines -----------------------------------------------------------------
    def _topic(self, topic: str, deadline: float) -> Awaitable[TopicInfo]:
        """The topic's metadata; its own wait ends a little before ``deadline`` so that a missing
        topic is reported as such rather than as a timeout."""
        left = deadline - time.monotonic()
        return self._cluster.topic(topic, wait_ms=max(int(left * 900) - 20, 1))

    def _deadline(self, ms: int | None = None) -> float:
        return time.monotonic() + (self.request_timeout_ms if ms is None else ms) / 1000

    @staticmethod
    def _ms_left(deadline: float) -> int:
        return max(int((deadline - time.monotonic()) * 1000), 1)

    @staticmethod
    async def _with_deadline(aw: Awaitable[T], deadline: float) -> T:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if asyncio.iscoroutine(aw):
                aw.close()
            raise TimeoutError("timed out")
        return await wait_for(aw, remaining)

    async def _retrying(
        self, fn: Callable[[float], Awaitable[T]], deadline: float, what: str, refresh: Iterable[str] = ()
    ) -> T:
        attempt = 0
        last: BaseException | None = None
        started = time.monotonic()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._give_up(last, what, started)
            try:
                return await wait_for(fn(remaining), remaining)
            except OffsetOutOfRangeError:
                raise
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            except (ConnectionError, TimeoutError, OSError) as exc:
                last = worse_error(last, exc)
            attempt += 1
            await self._backoff(attempt, deadline)
            if refresh:
                await self._refresh(refresh, deadline)

    async def _refresh(self, topics: Iterable[str], deadline: float) -> None:
        with contextlib.suppress(KafkaError, ConnectionError, TimeoutError, OSError):
            await self._with_deadline(self._cluster.refresh(topics), deadline)  # failures: the next attempt says

    async def _backoff(self, attempt: int, deadline: float) -> None:
        delay = min(self.retry_backoff * (2 ** min(attempt - 1, 10)), self.retry_backoff_max)
        await asyncio.sleep(max(min(delay, deadline - time.monotonic()), 0))

    def _give_up(self, last: BaseException | None, what: str, started: float) -> BaseException:
        ms = round((time.monotonic() - started) * 1000)
        servers = self.config["bootstrap.servers"]
        if last is None or isinstance(last, TimeoutError):
            detail = f": {last}" if last is not None and str(last) else ""
            return TimeoutError(f"{what}: no answer from {servers} within {ms} ms{detail}")
        if isinstance(last, (ConnectionError, OSError)):
            return ConnectionError(f"{what}: cannot reach the cluster at {servers} within {ms} ms: {last}")
        if isinstance(last, KafkaError):
            return KafkaError(last.code, f"{what}: still failing after {ms} ms" + (f" ({last.message})" if last.message else ""))
        return last

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the consumer is closed")


class SimpleConsumer:
    """The blocking low-level consumer; an event loop in a background thread does the I/O.

    ``SimpleConsumer({"bootstrap.servers": "127.0.0.1:9092"})`` or
    ``SimpleConsumer(bootstrap_servers="127.0.0.1:9092")``.  Thread-safe; every method has the
    semantics of its :class:`AsyncSimpleConsumer` namesake.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._async = AsyncSimpleConsumer(config, **kwargs)
        self.config = self._async.config
        self._runner = LoopThread("odradek-simple-consumer")
        self._closed = False
        #: the fetch that runs ahead: ((topic, partition, offset, max_bytes), its future) or None
        self._ahead: tuple[tuple[str, int, int, int | None], concurrent.futures.Future[FetchedRecords]] | None = None
        self._ahead_lock = threading.Lock()
        self._ahead_tasks: set[asyncio.Task[FetchedRecords]] = set()  # on the loop thread
        self._closing = False
        #: send a partition's next fetch while the caller reads the records (see :meth:`fetch`)
        self.fetch_ahead = True
        self._runner.start()

    def _call(self, coro: Coroutine[Any, Any, T], slack_ms: int = 0) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the consumer is closed")
        return self._result(self._runner.submit(coro), slack_ms)

    def _result(self, fut: concurrent.futures.Future[T], slack_ms: int = 0) -> T:
        # the coroutine keeps its own deadline; this only guards against a stuck loop
        limit = (self._async.request_timeout_ms + slack_ms) / 1000 + 10
        try:
            return fut.result(limit)
        except TimeoutError:
            if fut.done():
                raise
            fut.cancel()
            raise TimeoutError(f"no result within {limit:.0f} s") from None

    def start(self) -> None:
        """Connect to a bootstrap server now (otherwise the first call does)."""
        self._call(self._async.start())

    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The partition ids of ``topic`` (waiting up to ``timeout_ms``, default ``request.timeout.ms``, for
        it to appear); KafkaError if it does not exist."""
        return self._call(self._async.partitions_for(topic, timeout_ms), timeout_ms or 0)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None) -> FetchedRecords:
        """As :meth:`AsyncSimpleConsumer.fetch`.

        When the partition has more records than one fetch returned, the next fetch (from
        ``next_offset``, same ``max_bytes``) is sent at once and runs while the caller works
        through these records; a call that asks for exactly that gets its result (fetched a
        moment earlier: as a fetch made then), any other call drops it.  Only data already
        in the log is fetched ahead, so the broker answers without waiting for new records."""
        key = (topic, partition, offset, max_bytes)
        with self._ahead_lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == key and not ahead[1].cancelled():
            result = self._result(ahead[1], self._async.max_wait_ms)
        else:
            if ahead is not None:
                ahead[1].cancel()
            result = self._call(self._async.fetch(topic, partition, offset, max_bytes), self._async.max_wait_ms)
        self._fetch_ahead(result, max_bytes)
        return result

    def _fetch_ahead(self, result: FetchedRecords, max_bytes: int | None) -> None:
        a = self._async
        visible = result.last_stable_offset if a.isolation_level else result.high_watermark
        if self._closed or not self.fetch_ahead or not 0 <= result.next_offset < visible:
            return
        key = (result.topic, result.partition, result.next_offset, max_bytes)
        with self._ahead_lock:
            if self._closing:
                return
            fut = self._runner.submit(self._run_ahead(key))
            old, self._ahead = self._ahead, (key, fut)
        if old is not None:  # another thread's: it is not wanted any more
            old[1].cancel()

    async def _run_ahead(self, key: tuple[str, int, int, int | None]) -> FetchedRecords:
        task = asyncio.current_task()
        assert task is not None
        self._ahead_tasks.add(task)
        try:
            return await self._async.fetch(*key)
        finally:
            self._ahead_tasks.discard(task)

    async def _close(self) -> None:
        tasks = list(self._ahead_tasks)  # cancelled: let them end before the loop does
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._async.close()

    def multi_fetch(self, offsets: Mapping[TopicPartition, int], max_bytes: int | None = None) -> dict[TopicPartition, FetchedRecords]:
        """Fetch many partitions at once, one Fetch request per leader; ``max_bytes`` is per partition, and
        every partition asked for has an entry in the result."""
        return self._call(self._async.multi_fetch(offsets, max_bytes), self._async.max_wait_ms)

    def offsets_before(self, topic: str, partition: int, time: int, max_num: int = 1) -> list[int]:
        """The seeds' getOffsetsBefore: up to ``max_num`` offsets, newest first, of segment starts before
        ``time`` (ms; -1 latest, -2 earliest), as :meth:`AsyncSimpleConsumer.offsets_before`."""
        return self._call(self._async.offsets_before(topic, partition, time, max_num))

    def earliest_offset(self, topic: str, partition: int) -> int:
        """The log start offset of ``topic``-``partition``: the first offset still in the log."""
        return self._call(self._async.earliest_offset(topic, partition))

    def latest_offset(self, topic: str, partition: int) -> int:
        """The high watermark (the last stable offset for ``read_committed``): the offset the next record will
        get, as far as consumers can see."""
        return self._call(self._async.latest_offset(topic, partition))

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        """The first offset whose record timestamp is at or after ``timestamp`` (ms since the epoch), or None
        when every record is older."""
        return self._call(self._async.offset_for_time(topic, partition, timestamp))

    def close(self) -> None:
        """Cancel a fetch running ahead, close the connections and stop the background loop; later calls raise
        RuntimeError.  Closing twice is harmless."""
        if self._closed:
            return
        with self._ahead_lock:
            self._closing = True
            ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[1].cancel()
        with contextlib.suppress(Exception):  # closing must not fail
            self._runner.call(self._close(), 10)
        self._closed = True
        self._runner.stop()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
