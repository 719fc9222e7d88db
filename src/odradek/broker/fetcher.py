"""Followers: replica fetcher tasks that copy leaders' logs (the seeds' ReplicaFetcherThread).

Fetchers are grouped per leader broker; a partition's fetcher among ``num.replica.fetchers`` for
its leader is chosen by hashing topic and partition (Kafka's rule).  Each fetcher long-polls its
leader with Fetch requests carrying this broker's replica id (``replica.fetch.wait.max.ms``,
``replica.fetch.min.bytes``) and backs off ``replica.fetch.backoff.ms`` only after errors.  A
partition the leader refuses with a leadership error is retried sooner, 10 ms at first and
doubling up to that backoff: most often the leader has not yet applied the LeaderAndIsr that
this broker already has (the controller sends both at once), a matter of milliseconds.

A partition that just became a follower first truncates: it asks the leader, with
OffsetForLeaderEpoch, where its latest leader epoch ends on the leader and removes anything past
that point, so that the follower's log never diverges from the leader's.  OFFSET_OUT_OF_RANGE is
handled as the seeds describe: a follower ahead of the leader truncates to the leader's log end;
one behind the leader's log start starts over at the leader's log start.

A partition added to a fetcher whose fetch is long-polling an idle leader would wait out that
poll (up to ``replica.fetch.wait.max.ms``) before its first fetch, and an ``acks=all`` write to
it as long: a new topic's first write, a partition that moved to this leader in a failover.  The
fetcher then abandons the poll by closing its connection (the leader answers one connection's
requests in order, so a second request would wait behind it) and fetches again at once with the
new partition in.  Partitions are added rarely (topics created, leaders moved), and a response
abandoned on its way is fetched again from the same offsets: nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek._timeouts import wait_for
from odradek.broker.channel import BrokerChannel
from odradek.broker.logdirs import is_io_error
from odradek.broker.quotas import ReplicationQuota
from odradek.broker.replica import Partition
from odradek.cluster.assignment import java_string_hash
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.fetch import FetchRequest, FetchResponse
from odradek.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from odradek.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from odradek.records import RecordsError
from odradek.settings import LiveSettings
from odradek.transport import Channel

if TYPE_CHECKING:
    from odradek.broker.replica import ReplicaManager
    from odradek.config import BrokerConfig

__all__ = ["ReplicaFetcherManager"]

log = logging.getLogger(__name__)

FETCH_VERSION = 12
#: the first retry of a partition whose leader refused it (see ReplicaFetcher._refused), and
#: the shortest a fetcher with nothing ready waits before it looks again
_FIRST_RETRY = 0.01
EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 7


@dataclass(slots=True)
class _FetchState:
    partition: Partition
    truncating: bool = True
    delayed_until: float = 0.0
    #: the last fetch brought the log to the leader's high watermark (KIP-73's "in sync")
    caught_up: bool = False
    #: fetches of this partition in a row that the leader answered with a leadership error
    refused: int = 0


class ReplicaFetcherManager:
    def __init__(
        self,
        broker_id: int,
        settings: LiveSettings | BrokerConfig,
        replicas: ReplicaManager,
        channel_factory: Callable[..., Channel] = BrokerChannel,
    ) -> None:
        """``settings``: the broker's (``replica.*``, ``num.replica.fetchers``; a BrokerConfig is
        read as its settings)."""
        self.broker_id = broker_id
        self.channel_factory = channel_factory
        self.settings = settings if isinstance(settings, LiveSettings) else LiveSettings(settings)
        self.replicas = replicas
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        #: KIP-73: the follower side's replication throttle, shared by every fetcher
        self.quota = ReplicationQuota(self.settings, "follower")

    def fetcher_index(self, topic: str, partition: int) -> int:
        n = max(1, self.settings.current.replication.num_replica_fetchers)
        return abs(31 * java_string_hash(topic) + partition) % n

    def add(self, p: Partition, leader: int, host: str, port: int) -> None:
        """Fetch ``p`` from ``leader`` (after truncating), moving it off any other fetcher."""
        key = (p.topic, p.index)
        fkey = (leader, self.fetcher_index(p.topic, p.index))
        for k, f in self.fetchers.items():
            if k != fkey:
                f.remove(key)
        fetcher = self.fetchers.get(fkey)
        if fetcher is not None and (fetcher.host, fetcher.port) != (host, port):
            fetcher.stop()
            del self.fetchers[fkey]
            fetcher = None
        if fetcher is None:
            fetcher = self.fetchers[fkey] = ReplicaFetcher(self, leader, fkey[1], host, port)
        fetcher.add(p)

    def remove(self, topic: str, partition: int) -> None:
        for f in self.fetchers.values():
            f.remove((topic, partition))

    def follows(self, topic: str, partition: int) -> bool:
        return any((topic, partition) in f.parts for f in self.fetchers.values())

    async def shutdown(self) -> None:
        for f in self.fetchers.values():
            f.stop()
        for f in self.fetchers.values():
            await f.wait_stopped()
        self.fetchers.clear()


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader: int, index: int, host: str, port: int) -> None:
        self.broker_id = manager.broker_id
        self.replicas = manager.replicas
        self.quota = manager.quota
        self._held_ms = 0  # partitions held back by the follower throttle: ms until the rate allows them
        self.leader = leader
        self.host, self.port = host, port
        cfg = manager.settings.current.replication
        self.wait_ms = cfg.replica_fetch_wait_max_ms
        self.min_bytes = cfg.replica_fetch_min_bytes
        self.max_bytes = cfg.replica_fetch_response_max_bytes
        self.partition_max_bytes = cfg.replica_fetch_max_bytes
        self.backoff = cfg.replica_fetch_backoff_ms / 1000
        timeout = cfg.replica_socket_timeout_ms / 1000
        self.channel = manager.channel_factory(
            host, port, client_id=f"broker-{self.broker_id}-fetcher-{index}", timeout=max(timeout, self.wait_ms / 1000 + 5)
        )
        self.parts: dict[tuple[str, int], _FetchState] = {}
        self._wake = asyncio.Event()
        #: set by :meth:`add`: partitions that the fetch in flight does not have
        self._added = asyncio.Event()
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{leader}-{index}")

    def add(self, p: Partition) -> None:
        self.parts[(p.topic, p.index)] = _FetchState(p)
        self._wake.set()
        self._added.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.parts.pop(key, None)

    def stop(self) -> None:
        self._stopped = True
        self._task.cancel()

    async def wait_stopped(self) -> None:
        with contextlib.suppress(BaseException):
            await self._task
        await self.channel.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped:
            if not self.parts:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                self._added.clear()  # partitions added from here on interrupt this round's poll
                now = loop.time()
                truncating = [s for s in self.parts.values() if s.truncating and s.delayed_until <= now]
                if truncating:
                    await self._truncate(truncating)
                now = loop.time()
                ready = [s for s in self.parts.values() if not s.truncating and s.delayed_until <= now]
                if not ready:
                    delays = [s.delayed_until - now for s in self.parts.values()]
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await wait_for(self._wake.wait(), max(min(delays, default=self.backoff), _FIRST_RETRY))
                    continue
                await self._fetch(ready)
            except asyncio.CancelledError:
                raise
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.debug("fetcher for leader %d: %s; retrying in %.1fs", self.leader, exc, self.backoff)
                await asyncio.sleep(self.backoff)
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader)
                await asyncio.sleep(self.backoff)

    # -- truncation ---------------------------------------------------------------------------
    async def _truncate(self, states: list[_FetchState]) -> None:
        req = OffsetForLeaderEpochRequest(replica_id=self.broker_id)
        by_topic: dict[str, OffsetForLeaderEpochRequest.OffsetForLeaderTopic] = {}
        asked: dict[tuple[str, int], int] = {}
        for s in states:
            p = s.partition
            epoch = p.log.epochs.latest_epoch
            if epoch < 0:
                self._truncate_to(p, p.log.high_watermark)
                s.truncating = False
                continue
            asked[(p.topic, p.index)] = epoch
            t = by_topic.get(p.topic)
            if t is None:
                t = by_topic[p.topic] = OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=p.topic)
                req.topics.append(t)
            t.partitions.append(
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=p.index, current_leader_epoch=p.leader_epoch, leader_epoch=epoch
                )
            )
        if not req.topics:
            return
        resp: OffsetForLeaderEpochResponse = await self.channel.request(req, EPOCH_VERSION)
        now = asyncio.get_running_loop().time()
        for rt in resp.topics:
            for r in rt.partitions:
                st = self.parts.get((rt.topic, r.partition))
                if st is None or not st.truncating or (rt.topic, r.partition) not in asked:
                    continue
                s = st
                p = s.partition
                if r.error_code:
                    log.debug("truncation of %s-%d at %d: %s", p.topic, p.index, self.leader, ErrorCode(r.error_code).name)
                    self._refused(s, now)
                    continue
                s.refused = 0
                if r.end_offset < 0:
                    target = p.log.high_watermark
                elif r.leader_epoch != asked[(rt.topic, r.partition)]:
                    # the leader does not know our latest epoch: keep what both have
                    _e, ours = p.log.epochs.end_offset_for(r.leader_epoch, p.log.log_end_offset)
                    target = min(r.end_offset, ours if ours >= 0 else p.log.log_end_offset)
                else:
                    target = min(r.end_offset, p.log.log_end_offset)
                self._truncate_to(p, target)
                s.truncating = False

    def _truncate_to(self, p: Partition, offset: int) -> None:
        if offset < p.log.log_end_offset:
            log.info("truncating %s-%d from %d to %d", p.topic, p.index, p.log.log_end_offset, offset)
            p.log.truncate_to(max(offset, 0))

    # -- fetching -----------------------------------------------------------------------------
    def _throttle(self, states: list[_FetchState]) -> tuple[list[_FetchState], set[tuple[str, int]]]:
        """KIP-73: the partitions to fetch now, and those of them the follower throttle counts
        (replicas named by their topic's follower.replication.throttled.replicas that are not
        caught up); while the throttle's rate is over its bound, those wait."""
        quota = self.quota
        self._held_ms = 0
        if not quota.limited():
            return states, set()
        counted = {
            (s.partition.topic, s.partition.index)
            for s in states
            if not s.caught_up
            and quota.throttled(
                s.partition.log.config.follower_replication_throttled_replicas, s.partition.index, self.broker_id
            )
        }
        now_ms = time.monotonic() * 1000.0
        if counted and quota.exceeded(now_ms):
            states = [s for s in states if (s.partition.topic, s.partition.index) not in counted]
            counted = set()
            # back for them as soon as the rate is under the bound again, not after a long poll
            # of the other partitions (which would leave the copy well below the rate)
            self._held_ms = max(quota.delay_ms(now_ms), 1)
        return states, counted

    async def _fetch(self, states: list[_FetchState]) -> None:
        states, counted = self._throttle(states)
        if not states:  # everything waits for the replication throttle
            await asyncio.sleep(min(self.backoff, 0.1, self._held_ms / 1000.0 or 0.1))
            return
        wait_ms = self.wait_ms
        if self._held_ms:
            wait_ms = min(wait_ms, self._held_ms)
        now = asyncio.get_running_loop().time()
        # a partition that waits out a retry delay joins the next poll, not one long poll on; one
        # still to truncate whose delay ran out while this round truncated others is due now
        due = [s.delayed_until for s in self.parts.values() if s.delayed_until > now or s.truncating]
        if due:
            wait_ms = min(wait_ms, max(int((min(due) - now) * 1000), 0))
        req = FetchRequest(
            replica_id=self.broker_id,
            max_wait_ms=wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
        )
        by_topic: dict[str, FetchRequest.FetchTopic] = {}
        for s in states:
            p = s.partition
            t = by_topic.get(p.topic)
            if t is None:
                t = by_topic[p.topic] = FetchRequest.FetchTopic(topic=p.topic)
                req.topics.append(t)
            t.partitions.append(
                FetchRequest.FetchPartition(
                    partition=p.index,
                    current_leader_epoch=p.leader_epoch,
                    fetch_offset=p.log.log_end_offset,
                    last_fetched_epoch=-1,
                    log_start_offset=p.log.log_start_offset,
                    partition_max_bytes=self.partition_max_bytes,
                )
            )
        resp = await self._request_fetch(req)
        if resp is None:
            return
        now = asyncio.get_running_loop().time()
        out_of_range: list[_FetchState] = []
        fetched = 0
        for rt in resp.responses:
            for r in rt.partitions:
                st = self.parts.get((rt.topic, r.partition_index))
                if st is None or st.truncating:
                    continue
                s = st
                p = s.partition
                if r.error_code == ErrorCode.NONE:
                    s.refused = 0
                    if counted and (rt.topic, r.partition_index) in counted:
                        fetched += len(r.records) if isinstance(r.records, (bytes, bytearray, memoryview)) else 0
                    self._append(s, r)
                elif r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(s)
                else:
                    # stale leadership (NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, ...):
                    # the controller's next LeaderAndIsr sorts it out (see the module docstring)
                    log.debug("fetch of %s-%d from %d: %s", p.topic, p.index, self.leader, ErrorCode(r.error_code).name)
                    self._refused(s, now)
        if fetched:
            self.quota.record(fetched, time.monotonic() * 1000.0)
        if out_of_range:
            await self._out_of_range(out_of_range)

    def _refused(self, s: _FetchState, now: float) -> None:
        """The leader answered ``s``'s partition with a leadership error: retry after 10 ms,
        doubling with each refusal in a row up to ``replica.fetch.backoff.ms``."""
        s.delayed_until = now + min(self.backoff, _FIRST_RETRY * (1 << min(s.refused, 16)))
        s.refused += 1

    async def _request_fetch(self, req: FetchRequest) -> FetchResponse | None:
        """The leader's answer to ``req``, or None when a partition was added while the leader
        long-polled it (see the module docstring): the connection is closed, and the caller's
        next fetch has the new partition in."""
        if self._added.is_set():  # added while this round truncated: start the round again
            return None
        request = asyncio.ensure_future(self.channel.request(req, FETCH_VERSION, timeout=self.wait_ms / 1000 + 30))
        added = asyncio.ensure_future(self._added.wait())
        try:
            await asyncio.wait((request, added), return_when=asyncio.FIRST_COMPLETED)
        finally:
            added.cancel()
            if not request.done():
                request.cancel()  # only when this task is cancelled, or just below
        if request.done() and not request.cancelled():
            return request.result()
        log.debug("fetcher for leader %d: partitions added during a long poll; fetching again", self.leader)
        await self.channel.close()
        return None

    def _append(self, s: _FetchState, r: FetchResponse.PartitionData) -> None:
        p = s.partition
        lg = p.log
        records = r.records
        if isinstance(records, (bytes, bytearray, memoryview)) and len(records):
            records = _whole_entries(records)  # a response cut at its byte limit ends inside a batch
        if isinstance(records, (bytes, bytearray, memoryview)) and len(records):
            failures = self.replicas.log_dirs
            try:
                if failures.any_failed:
                    failures.check_write(p.log_dir, len(records))
                lg.append_as_follower(records)
                if failures.any_failed:
                    failures.wrote(p.log_dir)
            except (OSError, KafkaError) as exc:
                if is_io_error(exc):
                    failures.fail(p.log_dir, exc, f"appending to {p.topic}-{p.index} as a follower")
                elif not (type(exc) is KafkaError and exc.code == ErrorCode.KAFKA_STORAGE_ERROR):
                    log.warning("follower append to %s-%d failed (%s); truncating again", p.topic, p.index, exc)
                    s.truncating = True
                    return
                # a full or failed log dir (logged once by the failure channel): try again later
                s.delayed_until = asyncio.get_running_loop().time() + self.backoff
                return
            except RecordsError as exc:
                log.warning("follower append to %s-%d failed (%s); truncating again", p.topic, p.index, exc)
                s.truncating = True
                return
        s.caught_up = lg.log_end_offset >= r.high_watermark
        lg.advance_high_watermark(r.high_watermark)
        if r.log_start_offset > lg.log_start_offset:
            lg.maybe_increment_log_start_offset(min(r.log_start_offset, lg.high_watermark))

    async def _out_of_range(self, states: list[_FetchState]) -> None:
        async def leader_offset(ts: int) -> dict[tuple[str, int], int]:
            req = ListOffsetsRequest(replica_id=self.broker_id, isolation_level=0)
            by_topic: dict[str, ListOffsetsRequest.ListOffsetsTopic] = {}
            for s in states:
                p = s.partition
                t = by_topic.get(p.topic)
                if t is None:
                    t = by_topic[p.topic] = ListOffsetsRequest.ListOffsetsTopic(name=p.topic)
                    req.topics.append(t)
                t.partitions.append(
                    ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=p.index, current_leader_epoch=p.leader_epoch, timestamp=ts
                    )
                )
            resp: ListOffsetsResponse = await self.channel.request(req, LIST_OFFSETS_VERSION)
            return {
                (t.name, r.partition_index): r.offset for t in resp.topics for r in t.partitions if not r.error_code
            }

        ends = await leader_offset(-1)
        starts = await leader_offset(-2)
        for s in states:
            p = s.partition
            key = (p.topic, p.index)
            if key not in ends or key not in starts:
                s.delayed_until = asyncio.get_running_loop().time() + self.backoff
                continue
            if ends[key] < p.log.log_end_offset:
                log.warning("%s-%d: follower is ahead of the leader's log end %d; truncating", *key, ends[key])
                self._truncate_to(p, ends[key])
            else:
                log.warning("%s-%d: follower is behind the leader's log start %d; starting over", *key, starts[key])
                p.log.truncate_fully_and_start_at(starts[key])


def _whole_entries(records: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    """``records`` without an incomplete entry at its end.  A leader's fetch response stops at
    ``replica.fetch.max.bytes`` (after a first whole batch, KIP-74), so its last batch may be cut
    short, as in Kafka; the follower appends the whole ones and fetches the rest next time.
    Batches (v2) and legacy message sets frame entries alike: offset (8), size (4), body."""
    n = len(records)
    pos = 0
    while pos + 12 <= n:
        size = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True) + 12
        if size <= 12:
            return records  # not a size at all: the log's validation says what is wrong
        if pos + size > n:
            break
        pos += size
    if pos == n:
        return records
    return memoryview(records)[:pos]
