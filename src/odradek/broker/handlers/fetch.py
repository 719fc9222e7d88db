"""Fetch (1), v0-18 (v17 and v18 add only followers' tagged fields: their directory id, KIP-853,
and their high watermark, KIP-1166; consumers' fetches are the same).

Consumers (replica id -1) read up to the high watermark; followers (replica id >= 0) up to the
log end, and their fetch offset tells the leader their log end offset (ISR, high watermark).  ``max_wait_ms`` + ``min_bytes`` are served by waiting on the partitions' data futures
(the fetch purgatory) until enough bytes are visible or the wait ends.  From v3 the first
partition that has data returns its first batch whole even beyond the size limits (KIP-74);
v0-2 have hard limits and the client retries with a larger buffer.  v0-3 get down-converted
message sets (magic 0 for v0-1, magic 1 for v2-3).  v13+ address topics by id.  Fetch sessions
are not kept: every response has session id 0, so clients send full fetch requests.

Down-conversion (:func:`~odradek.broker.compat.down_convert`) happens once the reads are done
(after the long poll, if any), partition by partition in request order, each converting up to
the bytes left for it (``partition_max_bytes``, and from v3 ``max_bytes`` less what the
partitions before it were given; ``CONVERTED_MAX_BYTES`` at most), and the first partition with
data at least one message set.
A small read with at most ``INLINE_RECORDS`` records to convert is converted on the loop; a
larger one is copied (by the kernel, from a thread) to a worker process and converted there
(:mod:`odradek.broker.offload`), while the loop serves everyone else, and a large result is
answered from the file the worker left it in, as log data is (no copy in the broker's memory).
A topic with ``message.downconversion.enable=false`` answers such reads UNSUPPORTED_VERSION, as
Kafka does; data that cannot be converted (damaged on disk) CORRUPT_MESSAGE, logged.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from odradek.broker.compat import down_convert, magic_for_fetch_version, records_to_convert
from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.offload import FileSlice, Spool
from odradek.broker.ports import FetchPort, FileRegion, OffsetOutOfRangeError, Partition, ReadResult
from odradek.broker.purgatory import DelayedOperation, Watchable
from odradek.errors import ErrorCode, KafkaError
from odradek.metrics import BrokerMetrics
from odradek.protocol import ApiKey
from odradek.protocol.messages.fetch import FetchRequest, FetchResponse
from odradek.records import RecordsError, iter_batch_headers
from odradek.security.acl import Operation, ResourceType

if TYPE_CHECKING:
    from odradek.cluster.metadata import MetadataImage, TopicInfo

log = logging.getLogger(__name__)

R = FetchResponse
INT32_MAX = 2147483647
#: records a fetch may down-convert on the event loop (2-5 microseconds each: about a millisecond);
#: beyond, a worker
INLINE_RECORDS = 256
#: converted bytes one partition of an old fetch gets at most (beyond its first message set): the
#: client fetches the rest next time, as from Kafka's lazy down-conversion, and neither the
#: broker's memory nor the write of one answer grows with what the client allows
CONVERTED_MAX_BYTES = 4 * 1024 * 1024
#: a read this small is read on the loop to count its records (a larger one goes to a worker)
_INLINE_READ_BYTES = 64 * 1024
_MAGIC_AT = 16  # the magic byte of an entry, in every format
# the tagged fields a partition's response always leaves at their defaults, one instance for all
# responses (never modified)
_NO_DIVERGING_EPOCH = R.EpochEndOffset()
_NO_LEADER = R.LeaderIdAndEpoch()
_NO_SNAPSHOT = R.SnapshotId()
# the response structs' constructors, without the class-call overhead
_fetch_response = R.builder()
_topic_response = R.FetchableTopicResponse.builder()
_partition_response = R.PartitionData.builder()
_aborted = R.AbortedTransaction.builder()


class _Slot:
    __slots__ = ("fetch_offset", "max_bytes", "name", "partition", "response")

    def __init__(self, name: str | None, partition: Any, response: R.PartitionData) -> None:
        self.name = name
        self.partition = partition
        self.fetch_offset = partition.fetch_offset
        self.max_bytes = partition.partition_max_bytes
        self.response = response


@handles(ApiKey.FETCH, versions=(0, 18))
def fetch(
    ctx: RequestContext, request: FetchRequest
) -> FetchResponse | _Fetch | Coroutine[Any, Any, FetchResponse]:
    """Reads now; answers now when that is enough (or the request does not wait), else the
    fetch itself waits (a Deferred: the fetch purgatory) and answers when it completes.  An old
    version's fetch (v0-3) is a coroutine that answers once its reads are down-converted."""
    port = ctx.ports.fetch
    op = _Fetch(port, ctx.header.api_version, request, ctx if port.authorizer is not None else None)
    total = op.read_all()
    wait = request.max_wait_ms > 0 and total < request.min_bytes and op.can_wait()
    if op.magic < 2:
        return op.converted(wait)
    if wait:
        return op
    return op.response()


class _Fetch(DelayedOperation):
    """One fetch request: its response skeleton, the partitions it reads, and their reads; as
    a Deferred, the long poll: one future, woken by the first partition that gets data (for a
    follower: any append) or by the timer, and a read after every wake-up until ``min_bytes``
    are visible, ``max_wait_ms`` passed or the broker stops."""

    __slots__ = (
        "committed",
        "converting",
        "magic",
        "max_bytes",
        "max_records",
        "port",
        "replica_id",
        "request",
        "served",
        "slots",
        "target_bytes",
        "throttled",
        "topics",
        "version",
    )
    def __init__(self, port: FetchPort, version: int, request: FetchRequest, auth: RequestContext | None) -> None:
        """``auth``: the request's context when an authorizer decides what it may read."""
        super().__init__(port.timers)
        self.port = port
        self.version = version
        self.request = request
        replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
        self.replica_id = replica_id
        self.max_bytes = request.max_bytes if version >= 3 else INT32_MAX
        # records in one answer to a consumer (None: no cap); followers are not capped
        self.max_records: int | None = None
        # bytes after which an answer to a consumer takes no further partition (None: no target)
        self.target_bytes: int | None = None
        if replica_id < 0:  # a consumer's fetch: the broker's fetch.max.bytes caps it, as in Kafka
            server = port.settings
            self.max_bytes = min(self.max_bytes, server.fetch_max_bytes)
            cap = server.fetch_response_max_records
            if cap > 0:
                self.max_records = cap
            target = server.fetch_response_target_bytes
            if target > 0:
                self.target_bytes = target
        self.magic = magic_for_fetch_version(version)
        #: old formats: the reads to down-convert before the answer (slot, read, its byte limit,
        #: whether it is the first with data); None once converted (or for v4+)
        self.converting: list[tuple[_Slot, Partition, ReadResult, int, bool]] | None = [] if self.magic < 2 else None
        self.committed = version >= 4 and request.isolation_level == 1
        image = port.metadata.image
        topics: list[R.FetchableTopicResponse] = []
        slots: list[_Slot] = []
        # a follower needs ClusterAction on the cluster, a consumer Read on each topic
        follower_allowed = auth is None or replica_id < 0 or auth.authorize_cluster(Operation.CLUSTER_ACTION)
        for t in request.topics:
            if version >= 13:
                info = _topic_by_id(image, t.topic_id)
                name = info.name if info is not None else None
                tr = _topic_response(topic_id=t.topic_id)
            else:
                name = t.topic
                tr = _topic_response(topic=t.topic)
            topics.append(tr)
            allowed = follower_allowed and (
                auth is None or replica_id >= 0 or name is None or auth.authorize(Operation.READ, ResourceType.TOPIC, name)
            )
            for fp in t.partitions:
                pr = _partition_response(
                    partition_index=fp.partition,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    diverging_epoch=_NO_DIVERGING_EPOCH,
                    current_leader=_NO_LEADER,
                    snapshot_id=_NO_SNAPSHOT,
                    aborted_transactions=None,
                    records=b"",
                )
                tr.partitions.append(pr)
                if not allowed:
                    pr.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    continue
                if name is None:
                    pr.error_code = int(ErrorCode.UNKNOWN_TOPIC_ID)
                    continue
                slots.append(_Slot(name, fp, pr))
        self.topics = topics
        self.slots = slots
        # (slot, partition) for every partition this broker can serve, in request order
        served: list[tuple[_Slot, Partition]] = []
        for slot in slots:
            try:
                assert slot.name is not None
                p = port.partitions.for_fetch(
                    slot.name, slot.partition.partition, slot.partition.current_leader_epoch, replica_id
                )
                if replica_id >= 0:
                    port.partitions.on_follower_fetch(p, replica_id, slot.fetch_offset)
                served.append((slot, p))
            except KafkaError as exc:
                slot.response.error_code = int(exc.code)
        self.served = served
        # KIP-73: the partitions of a follower's fetch that count against the leader's
        # replication throttle (None: no throttle applies to this fetch)
        self.throttled: list[_Slot] | None = None
        quota = port.leader_quota
        if replica_id >= 0 and quota is not None and quota.limited():
            self.throttled = [
                slot for slot, p in served
                if replica_id not in p.state.isr
                and quota.throttled(p.log.config.leader_replication_throttled_replicas, p.index, port.broker_id)
            ]

    def read_all(self) -> int:
        """Read every served partition into its response; the bytes read."""
        read = self.port.replicas.read
        version, max_bytes, replica_id = self.version, self.max_bytes, self.replica_id
        total = 0
        records_left = self.max_records
        target = self.target_bytes
        throttled = self.throttled
        converting = self.converting
        if converting:
            converting.clear()  # read again (a long poll's wake-up): converted once, at the end
        hold: set[int] = set()
        if throttled:
            quota = self.port.leader_quota
            assert quota is not None
            if quota.exceeded(float(self.port.timers.clock.monotonic_ms())):  # over the rate: no data for them this time
                hold = {id(slot) for slot in throttled}
        for slot, p in self.served:
            pr = slot.response
            if hold and id(slot) in hold:
                pr.records = b""
                pr.high_watermark = p.log.high_watermark
                pr.last_stable_offset = p.log.last_stable_offset
                pr.log_start_offset = p.log.log_start_offset
                continue
            budget = max_bytes - total
            limit = min(slot.max_bytes, budget) if target is None or total < target else 0
            min_one = version >= 3 and total == 0
            data: bytes | FileRegion
            cap = None if records_left is None else slot.fetch_offset + max(records_left, 1)
            try:
                if (limit <= 0 or (records_left is not None and records_left <= 0)) and not min_one:
                    data = b""
                else:
                    result = read(
                        p,
                        slot.fetch_offset,
                        max(limit, 0),
                        isolation_committed=self.committed,
                        replica_id=replica_id,
                        min_one=min_one,
                        max_offset=cap,
                    )
                    region = result.region
                    if region is None and cap is not None and min_one and cap < p.log.high_watermark:
                        # the first batch holds more records than the cap: it goes whole, and
                        # alone (one byte asked with min_one is that batch, as in KIP-74)
                        result = read(
                            p, slot.fetch_offset, 1,
                            isolation_committed=self.committed, replica_id=replica_id, min_one=True,
                        )
                        region = result.region
                    if records_left is not None and region is not None:
                        records_left -= _records_in(region)
                    data = region if region is not None else b""
                    if converting is not None and region is not None:
                        converting.append((slot, p, result, limit, min_one))
                pr.error_code = 0
            except OffsetOutOfRangeError:
                pr.error_code = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                data = b""
            except KafkaError as exc:
                pr.error_code = int(exc.code)
                data = b""
            pr.records = data
            lg = p.log
            pr.high_watermark = lg.high_watermark
            pr.last_stable_offset = lg.last_stable_offset
            pr.log_start_offset = lg.log_start_offset
            if self.committed and data and version >= 4:
                # the transactions whose records a read_committed consumer must drop
                aborted = lg.aborted_transactions(slot.fetch_offset, pr.last_stable_offset)
                pr.aborted_transactions = [
                    _aborted(producer_id=t.producer_id, first_offset=t.first_offset) for t in aborted
                ]
            total += len(data)
        return total

    def can_wait(self) -> bool:
        """Every partition named by a known topic is served here and read without an error."""
        served = self.served
        return bool(served) and len(served) == len(self.slots) and all(not s.response.error_code for s, _p in served)

    async def converted(self, wait: bool) -> FetchResponse:
        """The old formats' answer: after the long poll (``wait``), the reads down-converted."""
        if wait:
            await _long_poll(self)
        converting = self.converting
        assert converting is not None
        self.converting = None
        total = 0
        for slot, p, result, limit, min_one in converting:
            pr = slot.response
            # from v3 the response's max_bytes covers the converted data of all its partitions
            left = self.max_bytes - total
            cap = max(min(limit, left, CONVERTED_MAX_BYTES), 0)
            try:
                data = await self._convert(p, result, slot.fetch_offset, cap, min_one)
            except KafkaError as exc:
                pr.error_code = int(exc.code)
                data = b""
            pr.records = data
            total += len(data)
        return self.response()

    async def _convert(
        self, p: Partition, result: ReadResult, fetch_offset: int, cap: int, min_one: bool
    ) -> bytes | Spool:
        """One partition's read as message format ``self.magic``, at most ``cap`` bytes (at least
        one message set when ``min_one``, or when nothing else would go): converted here when it
        is small, else in a worker, the read copied to it and its result sent from a file."""
        if cap <= 0 and not min_one:
            return b""
        magic = self.magic
        region = result.region
        assert region is not None
        try:
            if not p.log.config.message_downconversion_enable and region.segment.read_bytes(
                region.position + _MAGIC_AT, 1
            )[0] > magic:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"down-conversion of {p.topic}-{p.index} to message format v{magic} is disabled",
                )
            source: bytes | Spool | FileSlice
            if region.length <= _INLINE_READ_BYTES:
                source = result.to_bytes()
                if records_to_convert(list(iter_batch_headers(source)), magic) <= INLINE_RECORDS:
                    return down_convert(source, magic, fetch_offset, cap)
            elif FileSlice.available():  # the worker reads the segment itself: nothing copied here
                source = FileSlice.of(region.fd, region.position, region.length)
            else:
                source = await asyncio.to_thread(Spool.copy, region.fd, region.position, region.length)
            converted: bytes | Spool = await self.port.offload.run(
                down_convert, source, magic, fetch_offset, cap,
                cost=region.length + min(cap, 4 * region.length + 65536),
            )
            return converted
        except RecordsError as exc:
            log.error(
                "cannot down-convert %s-%d at offset %d (segment %s, position %d): %s",
                p.topic, p.index, fetch_offset, region.segment.log_path, region.position, exc,
            )
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
        except OSError as exc:
            raise self.port.replicas.log_dirs.fail(p.log_dir, exc, f"reading {p.topic}-{p.index}") from exc

    def response(self) -> FetchResponse:
        if self.converting is not None:
            # an old format's long poll ended: converted() answers, and counts, once converted
            return _fetch_response(throttle_time_ms=0, error_code=0, session_id=0, responses=self.topics)
        if self.throttled:
            quota = self.port.leader_quota
            assert quota is not None
            sent = 0
            for slot in self.throttled:
                records = slot.response.records
                if isinstance(records, (bytes, bytearray, memoryview)):
                    sent += len(records)
                elif records is not None:
                    sent += int(getattr(records, "length", 0))
            quota.record(sent, float(self.port.timers.clock.monotonic_ms()))
        metrics = self.port.metrics
        if metrics is not None:
            self._count(metrics)
        return _fetch_response(throttle_time_ms=0, error_code=0, session_id=0, responses=self.topics)

    def _count(self, metrics: BrokerMetrics) -> None:
        """Broker topic metrics of the answer, per partition: bytes out (a consumer's; a
        follower's are replication bytes), fetches and failed fetches, errors by code."""
        follower = self.replica_id >= 0
        stats = None
        last = None
        for slot in self.slots:
            name = slot.name
            if name is None:
                continue
            if name != last:
                stats = metrics.topic(name)
                last = name
            assert stats is not None
            pr = slot.response
            stats.fetch_requests += 1
            if pr.error_code:
                stats.failed_fetch += 1
                metrics.error(ApiKey.FETCH, pr.error_code)
                continue
            records = pr.records
            size = len(records) if type(records) is bytes else int(getattr(records, "length", 0))
            if follower:
                metrics.replication_bytes_out += size
            else:
                stats.bytes_out += size

    # -- the long poll (a delayed operation) -------------------------------------------------------
    def watched(self) -> Iterable[tuple[Watchable, bool]]:
        follower = self.replica_id >= 0
        return [(p, follower) for _slot, p in self.served]

    def try_complete(self) -> bool:
        return self.read_all() >= self.request.min_bytes

    def max_wait_s(self) -> float:
        return self.request.max_wait_ms / 1000

    def stopping(self) -> bool:
        return self.port.run.stopping


async def _long_poll(op: _Fetch) -> None:
    """Wait as the fetch purgatory does (``op`` as a Deferred), its answer left for later."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(_response: object, exc: BaseException | None) -> None:
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(None)

    op.start(done)
    try:
        await fut
    except asyncio.CancelledError:
        op.cancel()
        raise


def _records_in(region: FileRegion) -> int:
    """About how many records a region holds: its share of its segment's offsets (exact for
    a segment without gaps and with records of one size; never below 1)."""
    seg = region.segment
    size = seg.size
    if size <= 0:
        return 1
    return max(1, region.length * (seg.next_offset - seg.base_offset) // size)


#: the last metadata image seen and its topics by id (images are immutable: replaced, not changed)
_by_id: tuple[MetadataImage | None, dict[uuid.UUID, TopicInfo]] = (None, {})


def _topic_by_id(image: MetadataImage, topic_id: uuid.UUID) -> TopicInfo | None:
    global _by_id
    cached, topics = _by_id
    if cached is not image:
        topics = {}
        for t in image.topics.values():
            topics.setdefault(t.topic_id, t)  # the first, as MetadataImage.topic_by_id finds
        _by_id = (image, topics)
    return topics.get(topic_id)
