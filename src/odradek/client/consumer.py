"""Consumer and AsyncConsumer: the group consumer, and the seeds' high-level consumer API.

A consumer either joins a group (``group.id`` + :meth:`subscribe` to topics or to a regex with an
optional exclude regex — the seeds' whitelist and blacklist) and gets partitions from the group's
assignor (``range``, ``roundrobin`` or ``cooperative-sticky``, ``partition.assignment.strategy``),
or takes partitions itself with :meth:`assign`.  ``poll`` returns up to ``max.poll.records``
records and advances the positions; the next fetch is already under way while the caller works
on them.  Positions start at the committed offsets, else at ``auto.offset.reset`` (``earliest``,
``latest``, or ``none``: raise).  With ``enable.auto.commit`` the positions are committed every
``auto.commit.interval.ms``, before partitions are revoked and on close.

With ``group.protocol=consumer`` (KIP-848) the broker assigns instead
(:mod:`odradek.client._consumer_protocol`): the member heartbeats, revokes before it acknowledges,
and a pattern subscription is a regex the broker evaluates (``group.remote.assignor`` chooses the
broker's assignor).

The high-level API of the seeds is a thin layer over it: :func:`create_message_streams` gives
iterators that each own a share of a topic's partitions (one group member each), and
:func:`create_message_streams_by_filter` does the same for every topic a :class:`Whitelist` or
:class:`Blacklist` matches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from odradek.client._config import CONSUMER_DEFAULTS, ClientConfigError, merge_config
from odradek.client._consumer_protocol import ConsumerProtocolMembership
from odradek.client._membership import CommitFailed, GroupMembership
from odradek.client._runner import LoopThread
from odradek.client.consumer_simple import AsyncSimpleConsumer, ConsumerRecord
from odradek.client.errors import OffsetOutOfRangeError
from odradek.errors import ErrorCode, KafkaError
from odradek.transport import AsyncCluster

__all__ = [
    "AsyncConsumer",
    "Blacklist",
    "CommitFailed",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "HighLevelConsumer",
    "Whitelist",
    "create_message_streams",
    "create_message_streams_by_filter",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
T = TypeVar("T")


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group, generation and member (``send_offsets_to_transaction``)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class ConsumerRebalanceListener(Protocol):
    """What ``subscribe(listener=...)`` calls around a rebalance, on the consumer's event loop
    (methods may be ``async def``; they must not call the blocking consumer's methods)."""

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> Any:
        """Partitions this member gives up, before they go to another member: commit here."""

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> Any:
        """Partitions this member received, before it fetches from them: seek here."""


def _deserializer(d: Any) -> tuple[Callable[[str, bytes], Any], bool] | None:
    """A configured deserializer as ``(call(topic, data), is_async)``: an object's
    ``deserialize(topic, data)`` (awaited when it is ``async def``), or a callable of the bytes."""
    if d is None:
        return None
    method = getattr(d, "deserialize", None)
    if method is not None:
        return method, inspect.iscoroutinefunction(method)
    return (lambda _topic, data: d(data)), False


async def _deserialize(
    records: list[ConsumerRecord],
    kd: tuple[Callable[[str, bytes], Any], bool] | None,
    vd: tuple[Callable[[str, bytes], Any], bool] | None,
    seek: Callable[[TopicPartition, int], Any],
) -> list[ConsumerRecord]:
    """The deserializers over a poll's records.  A record that does not deserialize is not
    consumed: the positions go back to it (and to the records after it), the records before
    it are returned, and the next poll raises its error (as Kafka's consumer does with a
    RecordDeserializationException) until the application seeks past it."""
    k_async = kd is not None and kd[1]
    v_async = vd is not None and vd[1]
    new = tuple.__new__
    out: list[ConsumerRecord] = []
    for i, r in enumerate(records):
        try:
            key, value = r.key, r.value
            if kd is not None and key is not None:
                key = (await kd[0](r.topic, key)) if k_async else kd[0](r.topic, key)
            if vd is not None and value is not None:
                value = (await vd[0](r.topic, value)) if v_async else vd[0](r.topic, value)
        except Exception as exc:
            back: dict[TopicPartition, int] = {}
            for rest in records[i:]:
                back.setdefault((rest.topic, rest.partition), rest.offset)
            for tp, offset in back.items():
                seek(tp, offset)
            if out:
                return out
            exc.add_note(f"record {r.topic}-{r.partition} at offset {r.offset} did not deserialize; "
                         "the consumer's position is back at it")
            raise
        out.append(new(ConsumerRecord, (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, key, value,
                                        r.headers)))
    return out


class AsyncConsumer:
    """The asyncio group consumer (``await consumer.poll(1.0)``)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        cfg = merge_config(CONSUMER_DEFAULTS, config, kwargs)
        self.config = cfg
        reset = str(cfg["auto.offset.reset"]).lower()
        if reset not in ("earliest", "latest", "none"):
            raise ClientConfigError(f"invalid auto.offset.reset {cfg['auto.offset.reset']!r}")
        self.reset = reset
        self.max_poll_records = int(cfg["max.poll.records"])
        self.auto_commit = bool(cfg["enable.auto.commit"]) and cfg["group.id"] is not None
        self.auto_commit_interval = int(cfg["auto.commit.interval.ms"]) / 1000
        self.timeout_ms = int(cfg["default.api.timeout.ms"])
        self.exclude_internal = bool(cfg["exclude.internal.topics"])
        #: the deserializers run in poll(), over the records it hands out, not in the fetcher: a
        #: record that does not deserialize then stays unconsumed, with the records of the same
        #: fetch before it delivered (in the fetcher, its error would lose the whole fetch).  An
        #: asyncio deserializer (``async def deserialize(topic, data)``, such as
        #: odradek.client.serde's Async* classes) is awaited.
        self._kd = _deserializer(cfg["key.deserializer"])
        self._vd = _deserializer(cfg["value.deserializer"])
        if self._kd is not None or self._vd is not None:
            cfg = {**cfg, "key.deserializer": None, "value.deserializer": None}
        self.fetcher = AsyncSimpleConsumer(cfg)
        self.cluster = self.fetcher._cluster
        self.group = _membership(cfg, self.cluster, self._on_assign)
        self.listener: ConsumerRebalanceListener | None = None
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.exclude: re.Pattern[str] | None = None
        self.manual: list[TopicPartition] | None = None
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self._revoking: set[TopicPartition] = set()
        # fetched records not handed out yet: per partition a list and the index of the next one
        # (taking a batch is a slice), and where the fetch after them starts
        self.buffer: dict[TopicPartition, list[ConsumerRecord]] = {}
        self._buf_index: dict[TopicPartition, int] = {}
        self._next_fetch: dict[TopicPartition, int] = {}
        # a partition is fetched again while fewer records than one poll()'s worth are buffered,
        # so the broker prepares the next response while this process decodes and the caller works
        self._low_water = max(self.max_poll_records, 1)
        self._stopping = False
        self._generation: dict[TopicPartition, int] = {}
        self._prefetch: asyncio.Task[dict[TopicPartition, Any]] | None = None
        self._prefetch_gen: dict[TopicPartition, int] = {}
        self._last_commit = time.monotonic()
        self._last_pattern_check = 0.0
        self._counts: dict[str, int] = {}
        self.closed = False
        self.error: KafkaError | None = None
        self._join: asyncio.Task[bool] | None = None
        # a cooperative round that took partitions away asks for another; it starts on the next
        # poll() call, not within this one, so that the caller can first commit what it processed
        # of those partitions (until we rejoin nobody else can be given them)
        self._hold_rejoin = False
        # set while poll() runs: partitions are taken away (listener, auto-commit, dropped) only
        # then, as in Kafka's consumer, never while the caller still works on what poll returned
        self._in_poll = asyncio.Event()

    # -- subscription ----------------------------------------------------------------------------
    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        exclude: str | re.Pattern[str] | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the group for ``topics``, or for every topic matching ``pattern`` (a whitelist)
        and not matching ``exclude`` (a blacklist); new matching topics are picked up."""
        if self.group is None:
            raise ClientConfigError("subscribe() needs a group.id (or use assign())")
        if (topics is None) == (pattern is None):
            raise ValueError("give either topics or pattern")
        self.manual = None
        self.topics = set(topics or ())
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.exclude = re.compile(exclude) if isinstance(exclude, str) else exclude
        self.listener = listener
        self.group.subscription = set(self.topics)
        if isinstance(self.group, ConsumerProtocolMembership):
            # the broker evaluates the pattern (Kafka's RE2/J syntax), as Kafka's consumer sends it
            if exclude is not None:
                raise ValueError("group.protocol=consumer subscribes to a regex the broker evaluates: no exclude")
            self.group.regex = None if self.pattern is None else self.pattern.pattern
        self.group.needs_rejoin = True
        self._last_pattern_check = 0.0

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions, without group membership."""
        self.manual = sorted(set(partitions))
        self.topics, self.pattern = set(), None
        for tp in list(self.positions):
            if tp not in self.manual:
                self._drop(tp)

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now: those given to assign(), or those the group assigned it."""
        if self.manual is not None:
            return list(self.manual)
        return list(self.group.assigned) if self.group is not None else []

    def subscription(self) -> set[str]:
        """The topics given to subscribe() (empty for a pattern subscription or after unsubscribe())."""
        return set(self.group.subscription) if self.group is not None else set()

    async def unsubscribe(self) -> None:
        """Give the partitions up (``on_partitions_revoked`` runs), leave the group, forget the subscription."""
        if self.group is not None:
            await self._revoke(list(self.group.assigned))
            await self.group.leave()
            self.group.subscription = set()
        self.manual, self.topics, self.pattern = None, set(), None

    # -- group callbacks -------------------------------------------------------------------------
    async def _on_assign(self, added: list[TopicPartition], revoked: list[TopicPartition]) -> None:
        if revoked:
            # a cooperative round finishing in the background waits for the next poll() (an eager
            # revocation happens in poll() anyway: the join starts there)
            await self._in_poll.wait()
            await self._revoke(revoked)
        if added and self.listener is not None:
            await _maybe_await(self.listener.on_partitions_assigned(list(added)))

    async def _revoke(self, revoked: list[TopicPartition]) -> None:
        # nothing more of them is handed out while their positions are committed and the listener
        # runs (a consumer-protocol member revokes in the background, while poll() may be running)
        self._revoking.update(revoked)
        try:
            await self._revoke_now(revoked)
        finally:
            self._revoking.difference_update(revoked)

    async def _revoke_now(self, revoked: list[TopicPartition]) -> None:
        if self.auto_commit and self.group is not None and self.group.generation >= 0:
            owned = {tp: self.positions[tp] for tp in revoked if tp in self.positions}
            if owned:
                with contextlib.suppress(KafkaError, ConnectionError, TimeoutError):
                    await self.group.commit({tp: (o, -1, "") for tp, o in owned.items()}, time.monotonic() + 10)
        if self.listener is not None:
            await _maybe_await(self.listener.on_partitions_revoked(list(revoked)))
        for tp in revoked:
            self._drop(tp)

    def _drop(self, tp: TopicPartition) -> None:
        self.positions.pop(tp, None)
        self._forget_buffer(tp)

    def _forget_buffer(self, tp: TopicPartition) -> None:
        """Buffered records and a fetch under way for ``tp`` no longer follow its position."""
        self.buffer.pop(tp, None)
        self._buf_index.pop(tp, None)
        self._next_fetch.pop(tp, None)
        self._generation[tp] = self._generation.get(tp, 0) + 1

    async def _partition_counts(self, topics: set[str]) -> dict[str, int]:
        counts = {}
        await self.cluster.refresh(topics)
        for t in topics:
            info = self.cluster.topics.get(t)
            if info is not None and info.partitions:
                counts[t] = max(info.partitions) + 1
        self._counts = dict(counts)
        return counts

    async def _check_pattern(self) -> None:
        """Pattern subscriptions follow the topics that exist; leaders notice new partitions."""
        group = self.group
        if group is None or self.manual is not None or isinstance(group, ConsumerProtocolMembership):
            return  # (the broker follows the topics of a consumer-protocol group)
        now = time.monotonic()
        if now - self._last_pattern_check < self.cluster.metadata_max_age_ms / 1000:
            return
        self._last_pattern_check = now
        if self.pattern is not None:
            resp = await self.cluster.refresh(all_topics=True)
            names = {
                t.name
                for t in resp.topics
                if t.name is not None and t.error_code == 0 and not (t.is_internal and self.exclude_internal)
            }
            matching = {n for n in names if self.pattern.fullmatch(n) and not (self.exclude and self.exclude.fullmatch(n))}
            if matching != group.subscription:
                group.subscription = matching
                group.needs_rejoin = True
        elif group.leader and self._counts:
            await self.cluster.refresh(group.subscription)
            for t, n in self._counts.items():
                info = self.cluster.topics.get(t)
                if info is not None and info.partitions and max(info.partitions) + 1 != n:
                    group.needs_rejoin = True

    # -- positions -------------------------------------------------------------------------------
    def _active(self) -> list[TopicPartition]:
        return [tp for tp in self.assignment() if tp not in self.paused and tp not in self._revoking]

    async def _ensure_positions(self, deadline: float) -> None:
        missing = [tp for tp in self.assignment() if tp not in self.positions]
        if not missing:
            return
        committed: dict[TopicPartition, tuple[int, int, str]] = {}
        if self.group is not None:
            committed = await self.group.fetch_committed(missing, deadline)
        for tp in missing:
            if tp in committed:
                offset = committed[tp][0]
            else:
                offset = await self._reset(tp)
            # a partition revoked meanwhile (a consumer-protocol member reconciles in the
            # background) keeps no position: it would be committed again on close
            if tp in self.assignment() and tp not in self.positions:
                self.positions[tp] = offset

    async def _reset(self, tp: TopicPartition) -> int:
        if self.reset == "earliest":
            return await self.fetcher.earliest_offset(*tp)
        if self.reset == "latest":
            return await self.fetcher.latest_offset(*tp)
        raise KafkaError(
            ErrorCode.OFFSET_OUT_OF_RANGE, f"no committed offset for {tp[0]}-{tp[1]} and auto.offset.reset=none"
        )

    # -- poll ------------------------------------------------------------------------------------
    async def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions (empty after ``timeout`` seconds without any)."""
        if self.closed:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the consumer is closed")
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout
        self._hold_rejoin = False
        if isinstance(self.group, ConsumerProtocolMembership):
            self.group.polled()
        self._in_poll.set()
        try:
            records = await self._poll(limit, deadline)
            if records and (self._kd is not None or self._vd is not None):
                records = await _deserialize(records, self._kd, self._vd, self.seek)
            return records
        except Exception:
            if self.closed:
                return []  # closed from another thread while this poll was under way
            raise
        finally:
            self._in_poll.clear()

    async def _poll(self, limit: int, deadline: float) -> list[ConsumerRecord]:
        while True:
            if self.closed:
                return []  # closed meanwhile (from another thread, for the sync Consumer)
            await self._maintain(deadline)
            # an eager rebalance under way takes every partition away: nothing to hand out that
            # could not be committed any more (cooperative members keep consuming what they own)
            out = self._take(limit) if not self._eager_join_running() else []
            if out:
                self._start_prefetch()
                return out
            if time.monotonic() >= deadline:
                return []
            self._start_prefetch()
            task = self._prefetch
            if task is None:
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                continue
            # asyncio.wait: neither cancels the task at the deadline nor raises if it was cancelled
            await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
            self._collect()

    async def _maintain(self, deadline: float) -> None:
        group = self.group
        if group is not None and self.manual is None and (group.subscription or self.pattern is not None):
            await self._check_pattern()
            if group.needs_rejoin and self._join is None and not self._hold_rejoin:
                # the join runs on: a poll returns at its deadline even while a rebalance waits for
                # other members, and the next poll picks it up (as Kafka's consumers do)
                self._cancel_prefetch()
                self._join = asyncio.get_running_loop().create_task(
                    group.ensure_active(self._partition_counts, time.monotonic() + self.timeout_ms / 1000)
                )
            if self._join is not None:
                await asyncio.wait({self._join}, timeout=max(0.0, deadline - time.monotonic()))
                if self._join is None or not self._join.done():
                    return
                join, self._join = self._join, None
                join.result()  # raises a fatal group error
                if group.needs_rejoin:
                    self._hold_rejoin = True
                    return
        await self._ensure_positions(time.monotonic() + self.timeout_ms / 1000)
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval:
            self._last_commit = time.monotonic()
            asyncio.get_running_loop().create_task(self._commit_quietly())
        self._collect()

    def _join_running(self) -> bool:
        return self._join is not None and not self._join.done()

    def _eager_join_running(self) -> bool:
        return self._join_running() and self.group is not None and not self.group.cooperative

    def _take(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` buffered records, advancing the positions; partitions take turns (one
        served goes to the back of the line)."""
        out: list[ConsumerRecord] = []
        served = []
        for tp in list(self.buffer):
            if len(out) >= limit:
                break
            pos = self.positions.get(tp)
            if pos is None or tp in self.paused or tp in self._revoking:
                continue
            recs, i = self.buffer[tp], self._buf_index.get(tp, 0)
            n = len(recs)
            while i < n and recs[i].offset < pos:
                i += 1  # fetched from before the position (a batch starts before it)
            j = min(n, i + limit - len(out))
            if j > i:
                out.extend(recs[i:j])
                self.positions[tp] = recs[j - 1].offset + 1
                served.append(tp)
            if j >= n:
                del self.buffer[tp]
                self._buf_index.pop(tp, None)
                nxt = self._next_fetch.get(tp)
                if nxt is not None and nxt > self.positions[tp]:
                    self.positions[tp] = nxt  # past control batches / aborted records at the end
            else:
                self._buf_index[tp] = j
        for tp in served:
            if tp in self.buffer:
                self.buffer[tp] = self.buffer.pop(tp)
        return out

    def _buffered(self, tp: TopicPartition) -> int:
        recs = self.buffer.get(tp)
        return len(recs) - self._buf_index.get(tp, 0) if recs else 0

    def _unread(self, records: Sequence[ConsumerRecord]) -> None:
        """Give back records that poll() returned but the caller did not use (the sync Consumer's
        iterator holds a batch): positions go back to the first of them, and the next poll returns
        them again."""
        by_tp: dict[TopicPartition, list[ConsumerRecord]] = {}
        for r in records:
            by_tp.setdefault((r.topic, r.partition), []).append(r)
        for tp, recs in by_tp.items():
            position = self.positions.get(tp)
            if position != recs[-1].offset + 1:
                continue  # revoked, or seeked since: these records are not next any more
            rest = self.buffer.get(tp, [])[self._buf_index.get(tp, 0) :]
            self.buffer[tp] = recs + rest
            self._buf_index[tp] = 0
            self._next_fetch.setdefault(tp, position)
            self.positions[tp] = recs[0].offset

    def _start_prefetch(self) -> None:
        if self._prefetch is not None or self._stopping or self._eager_join_running():
            return
        want = {}
        for tp in self._active():
            pos = self.positions.get(tp)
            if pos is None:
                continue
            buffered = self._buffered(tp)
            if buffered < self._low_water:
                want[tp] = self._next_fetch.get(tp, pos) if buffered else pos
        if not want:
            return
        self._prefetch_gen = {tp: self._generation.get(tp, 0) for tp in want}
        task = asyncio.get_running_loop().create_task(self._fetch(want))
        self._prefetch = task
        task.add_done_callback(self._fetched)

    def _fetched(self, task: asyncio.Task[dict[TopicPartition, Any]]) -> None:
        """A fetch finished: buffer it and start the next one at once (not only on the next poll),
        so that fetching goes on while the caller works on what poll() returned."""
        if task is self._prefetch and not self._stopping:
            self._collect()
            self._start_prefetch()

    async def _fetch(self, want: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        try:
            return await self.fetcher.multi_fetch(want)
        except OffsetOutOfRangeError as exc:
            return {("", -1): exc}  # the partition it names is reset by _collect
        except (KafkaError, ConnectionError, TimeoutError) as exc:
            log.debug("fetch failed: %s", exc)
            await asyncio.sleep(self.fetcher.retry_backoff)
            return {}

    def _collect(self) -> None:
        task = self._prefetch
        if task is None or not task.done():
            return
        self._prefetch = None
        if task.cancelled():
            return
        results = task.result()
        error = results.pop(("", -1), None)
        if isinstance(error, OffsetOutOfRangeError):
            asyncio.get_running_loop().create_task(self._out_of_range([(error.topic, error.partition)]))
            return
        for tp, recs in results.items():
            if self._generation.get(tp, 0) != self._prefetch_gen.get(tp) or tp not in self.positions:
                continue  # revoked or seeked while the fetch was under way
            nxt = getattr(recs, "next_offset", None)
            if recs:
                if self._buffered(tp):
                    self.buffer[tp] = self.buffer[tp][self._buf_index.get(tp, 0) :] + recs
                else:
                    self.buffer[tp] = recs
                self._buf_index[tp] = 0
            elif nxt is not None and not self._buffered(tp) and nxt > self.positions[tp]:
                self.positions[tp] = nxt  # only control batches: step over them
            if nxt is not None and nxt > self._next_fetch.get(tp, -1):
                self._next_fetch[tp] = nxt

    async def _out_of_range(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            if tp not in self.positions:
                continue
            try:
                earliest = await self.fetcher.earliest_offset(*tp)
                latest = await self.fetcher.latest_offset(*tp)
            except (KafkaError, ConnectionError, TimeoutError):
                continue
            pos = self.positions[tp]
            if earliest <= pos <= latest:
                continue
            if self.reset == "none":
                self.error = OffsetOutOfRangeError(tp[0], tp[1], pos, earliest, latest)
                continue
            self.positions[tp] = earliest if self.reset == "earliest" else latest
            self._forget_buffer(tp)

    def _cancel_prefetch(self) -> None:
        if self._prefetch is not None:
            self._prefetch.cancel()
            self._prefetch = None

    # -- commits ---------------------------------------------------------------------------------
    def _positions_with(self, overrides: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {tp: overrides.get(tp, o) for tp, (o, _e, _m) in self._current_offsets().items()}

    def _current_offsets(self) -> dict[TopicPartition, tuple[int, int, str]]:
        return {tp: (pos, -1, "") for tp, pos in self.positions.items() if tp in set(self.assignment())}

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None, timeout: float | None = None) -> None:
        """Commit ``offsets`` (the next offsets to read) or the current positions, synchronously."""
        if self.group is None:
            raise ClientConfigError("commit() needs a group.id")
        todo = {tp: (o, -1, "") for tp, o in offsets.items()} if offsets is not None else self._current_offsets()
        if not todo:
            return
        if self.group.joining:
            # Sent now, the commit would queue behind our JoinGroup on the coordinator connection
            # and reach the coordinator under the next generation (ILLEGAL_GENERATION).  As Kafka's
            # consumer does, fail at once: poll() completes the rebalance, then commit again (a
            # cooperative member may still commit the partitions it just gave up until its next
            # poll, since they go to another member only after it rejoined).
            raise CommitFailed(ErrorCode.REBALANCE_IN_PROGRESS, "a rebalance is under way: poll() and commit again")
        deadline = time.monotonic() + (self.timeout_ms / 1000 if timeout is None else timeout)
        await self.group.commit(todo, deadline)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        callback: Callable[[BaseException | None, Mapping[TopicPartition, int]], Any] | None = None,
    ) -> asyncio.Task[None]:
        """Commit in the background (the positions now by default); then ``callback(error or None, offsets)``."""
        snapshot = dict(offsets) if offsets is not None else {tp: o for tp, (o, _e, _m) in self._current_offsets().items()}

        async def run() -> None:
            error: BaseException | None = None
            try:
                await self.commit(snapshot)
            except (KafkaError, ConnectionError, TimeoutError) as exc:
                error = exc
            if callback is not None:
                callback(error, snapshot)

        return asyncio.get_running_loop().create_task(run())

    async def _commit_quietly(self) -> None:
        with contextlib.suppress(KafkaError, ConnectionError, TimeoutError):
            await self.commit()

    async def committed(self, partitions: Sequence[TopicPartition], timeout: float | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions`` (None: none committed); needs a ``group.id``."""
        if self.group is None:
            raise ClientConfigError("committed() needs a group.id")
        deadline = time.monotonic() + (self.timeout_ms / 1000 if timeout is None else timeout)
        found = await self.group.fetch_committed(list(partitions), deadline)
        return {tp: (found[tp][0] if tp in found else None) for tp in partitions}

    # -- positions API ---------------------------------------------------------------------------
    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """What a transactional producer's ``send_offsets_to_transaction`` needs to commit this
        consumer's offsets in its transaction (the group's generation and member id: KIP-447)."""
        g = self.group
        if g is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "the consumer has no group.id")
        return ConsumerGroupMetadata(g.group_id, g.generation, g.member_id, g.group_instance_id)

    async def position(self, tp: TopicPartition) -> int:
        """The next offset to read from assigned ``tp`` (committed, else ``auto.offset.reset``)."""
        if tp not in self.assignment():
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        await self._ensure_positions(time.monotonic() + self.timeout_ms / 1000)
        return self.positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record read from ``tp`` (dropping what was fetched for it)."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._forget_buffer(tp)
        self.positions[tp] = offset

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move ``partitions`` (default: every assigned one) to their log start offset."""
        for tp in list(partitions) if partitions is not None else self.assignment():
            self.seek(tp, await self.fetcher.earliest_offset(*tp))

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move ``partitions`` (default: all assigned) to the high watermark (LSO for read_committed)."""
        for tp in list(partitions) if partitions is not None else self.assignment():
            self.seek(tp, await self.fetcher.latest_offset(*tp))

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Per partition, the first offset with a timestamp >= the one given (ms); None if all are older."""
        return {tp: await self.fetcher.offset_for_time(tp[0], tp[1], ts) for tp, ts in timestamps.items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching ``partitions`` (they stay assigned; poll() returns nothing from them) until resume()."""
        self.paused.update(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch ``partitions`` again after pause()."""
        self.paused.difference_update(partitions)

    # -- lifecycle -------------------------------------------------------------------------------
    async def close(self, autocommit: bool = True, consumed: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit the positions (with ``enable.auto.commit`` and ``autocommit``; ``consumed``
        overrides some of them), give the partitions up, leave the group, disconnect."""
        if self.closed:
            return
        self._stopping = True
        if self.group is not None and self.group.cooperative and self.auto_commit and autocommit:
            # a cooperative member keeps consuming while its JoinGroup waits; a commit now would
            # queue behind it and fail under the next generation: let that exchange finish first
            end = time.monotonic() + 5
            while self.group.joining and time.monotonic() < end:
                await asyncio.sleep(0.01)
        # stop the fetch and a join under way, and let them finish unwinding (a join cancelled
        # during JoinGroup/SyncGroup clears ``joining``, so the commit below can go out)
        running = [t for t in (self._prefetch, self._join) if t is not None and not t.done()]
        self._prefetch, self._join = None, None
        for task in running:
            task.cancel()
        if running:
            # bounded: Python 3.11's wait_for (inside requests) can swallow a cancellation
            await asyncio.wait(running, timeout=5)
        if isinstance(self.group, ConsumerProtocolMembership):
            await self.group.stop_reconciling()  # what we list below is all the listener gave us
        if self.group is not None:
            # what we own: the assignment, and partitions of a cooperative round that finished in
            # the background whose revocation waited for a poll() that did not come
            owned = sorted(set(self.positions) | set(self.group.assigned)) if self.manual is None else []
            if autocommit and self.auto_commit and self.group.generation >= 0 and self.positions:
                with contextlib.suppress(KafkaError, ConnectionError, TimeoutError):
                    await self.commit({**self.positions, **(consumed or {})}, timeout=5)
            if owned and self.listener is not None:
                # Kafka's consumer gives the partitions up through the listener on close too
                with contextlib.suppress(Exception):
                    await _maybe_await(self.listener.on_partitions_revoked(owned))
            await self.group.leave()
        self.closed = True
        await self.fetcher.close()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while True:
            if self.closed:
                raise StopAsyncIteration
            records = await self.poll(1.0, max_records=1)
            if records:
                return records[0]


def _membership(
    cfg: Mapping[str, Any], cluster: AsyncCluster,
    on_assign: Callable[[list[TopicPartition], list[TopicPartition]], Awaitable[None]],
) -> GroupMembership | ConsumerProtocolMembership | None:
    """The consumer's group membership for its configuration: none without a ``group.id``, else
    the classic protocol's or (``group.protocol=consumer``, KIP-848) the consumer protocol's."""
    protocol = str(cfg["group.protocol"]).lower()
    if protocol not in ("classic", "consumer"):
        raise ClientConfigError(f"invalid group.protocol {cfg['group.protocol']!r} (classic or consumer)")
    if cfg["group.id"] is None:
        return None
    if protocol == "consumer":
        # the broker assigns; session and heartbeat intervals are the group's
        return ConsumerProtocolMembership(
            cluster,
            group_id=str(cfg["group.id"]),
            group_instance_id=cfg["group.instance.id"],
            rebalance_timeout_ms=int(cfg["max.poll.interval.ms"]),
            remote_assignor=cfg["group.remote.assignor"],
            rack_id=cfg["client.rack"],
            retry_backoff_ms=int(cfg["retry.backoff.ms"]),
            on_assign=on_assign,
        )
    strategies = [s.strip() for s in str(cfg["partition.assignment.strategy"]).split(",") if s.strip()]
    return GroupMembership(
        cluster,
        group_id=str(cfg["group.id"]),
        group_instance_id=cfg["group.instance.id"],
        session_timeout_ms=int(cfg["session.timeout.ms"]),
        rebalance_timeout_ms=int(cfg["max.poll.interval.ms"]),
        heartbeat_interval_ms=int(cfg["heartbeat.interval.ms"]),
        assignors=strategies,
        retry_backoff_ms=int(cfg["retry.backoff.ms"]),
        on_assign=on_assign,
    )


async def _maybe_await(value: Any) -> None:
    if asyncio.iscoroutine(value):
        await value


class Consumer:
    """The group consumer for threads: ``for record in consumer: ...`` or ``consumer.poll(1.0)``.

    ``Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"})`` then
    ``subscribe(["orders"])``.  Heartbeats, fetching and commits run on an event loop in a
    background thread, so a slow caller does not lose its group membership before
    ``max.poll.interval.ms``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._runner = LoopThread("odradek-consumer")
        self._runner.start()
        try:
            self._async: AsyncConsumer = self._call(_make(config, kwargs))
        except BaseException:
            self._runner.stop()
            raise
        self._pending: deque[ConsumerRecord] = deque()  # the iterator's current batch
        self._iter_thread: int | None = None
        self._closing = False

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._runner.is_current():
            # e.g. a rebalance listener (they run on the consumer's event loop): blocking here
            # would stop the loop that has to do the work
            coro.close()
            raise RuntimeError("Consumer methods cannot be called from a rebalance listener or another callback")
        if self._runner.loop.is_closed():
            coro.close()
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the consumer is closed")
        return self._runner.call(coro, timeout)

    def _run(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        return self._call(call())

    def _give_back(self) -> None:
        """Records the iterator took in its last batch but did not yield go back to the consumer,
        so that positions, commits, seeks and pauses see exactly what was consumed.  Only the
        iterating thread does this; see :meth:`_consumed` for the others."""
        if self._pending and threading.get_ident() == self._iter_thread:
            records = list(self._pending)
            self._pending.clear()
            self._run(lambda: self._async._unread(records))

    def _consumed(self) -> dict[TopicPartition, int] | None:
        """From a thread other than the iterating one (HighLevelConsumer.commit_offsets, close()
        at shutdown): the positions as far as records were yielded, without touching the
        iterator's batch (a record yielded meanwhile may be committed as not consumed yet: it
        comes again after a restart, it is never skipped)."""
        pending = self._pending.copy()
        if not pending or threading.get_ident() == self._iter_thread:
            return None
        first: dict[TopicPartition, int] = {}
        for r in pending:
            first.setdefault((r.topic, r.partition), r.offset)
        return first

    def subscribe(self, topics: Iterable[str] | None = None, **kwargs: Any) -> None:
        """Join the group for ``topics``, or with ``pattern=`` / ``exclude=`` / ``listener=`` as
        :meth:`AsyncConsumer.subscribe`; needs a ``group.id`` (ClientConfigError otherwise)."""
        topics = list(topics) if topics is not None else None
        self._give_back()
        self._run(lambda: self._async.subscribe(topics, **kwargs))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these ``(topic, partition)`` pairs, without group membership."""
        parts = list(partitions)
        self._give_back()
        self._run(lambda: self._async.assign(parts))

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now: those given to assign(), or those the group assigned it."""
        return self._run(self._async.assignment)

    def subscription(self) -> set[str]:
        """The topics given to subscribe() (empty for a pattern subscription or after unsubscribe())."""
        return self._run(self._async.subscription)

    def unsubscribe(self) -> None:
        """Give the assigned partitions up, leave the group, and forget the subscription or assignment."""
        self._give_back()
        self._call(self._async.unsubscribe())

    def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, at most ``max_records`` (default ``max.poll.records``); empty
        after ``timeout`` seconds without any, or when close() is called from another thread. Raises a
        deserializer's error for the record it failed on."""
        self._give_back()
        try:
            return self._call(self._async.poll(timeout, max_records))
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            if self._closing:
                return []  # close() from another thread
            raise

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one until the consumer is closed (close() from another thread ends the
        iteration).  A batch is fetched at a time; what was not yielded yet does not count as
        consumed (position, commit() and seeks see only the records yielded)."""
        while not self._closing:
            if not self._pending:
                records = self.poll(1.0)
                if self._closing:
                    return
                self._iter_thread = threading.get_ident()
                self._pending.extend(records)
                continue
            yield self._pending.popleft()

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, timeout: float | None = None) -> None:
        """Commit ``offsets`` (``{(topic, partition): next offset to read}``) or the positions as far as
        records were consumed, and wait for it; CommitFailed during a rebalance (poll, then commit again)."""
        if offsets is None:
            self._give_back()
            consumed = self._consumed()
            if consumed is not None:
                offsets = self._run(lambda: self._async._positions_with(consumed))
        self._call(self._async.commit(offsets, timeout))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        callback: Callable[[BaseException | None, Mapping[TopicPartition, int]], Any] | None = None,
    ) -> None:
        """Commit ``offsets`` (or the current positions) in the background; ``callback(error, offsets)`` runs
        on the consumer's background thread when it ends."""
        self._give_back()
        self._run(lambda: self._async.commit_async(offsets, callback))

    def committed(self, partitions: Sequence[TopicPartition], timeout: float | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions``, None for a partition without one."""
        return self._call(self._async.committed(list(partitions), timeout))

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record the consumer will return from ``tp`` (looked up first if needed: the
        committed offset, else ``auto.offset.reset``)."""
        self._give_back()
        return self._call(self._async.position(tp))

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group, generation and member id a transactional producer's ``send_offsets_to_transaction``
        needs (KIP-447); KafkaError INVALID_GROUP_ID without a ``group.id``."""
        return self._run(self._async.consumer_group_metadata)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record read from ``tp``."""
        self._give_back()
        self._run(lambda: self._async.seek(tp, offset))

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move ``partitions`` (default: every assigned one) to their log start offset."""
        self._give_back()
        self._call(self._async.seek_to_beginning(list(partitions) if partitions is not None else None))

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move ``partitions`` (default: every assigned one) to their end (the high watermark, or the last
        stable offset under ``read_committed``)."""
        self._give_back()
        self._call(self._async.seek_to_end(list(partitions) if partitions is not None else None))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """For each partition, the first offset whose record timestamp is at or after the given one (ms), None
        when every record is older."""
        return self._call(self._async.offsets_for_times(dict(timestamps)))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching ``partitions`` (they stay assigned) until resume()."""
        parts = list(partitions)
        self._give_back()
        self._run(lambda: self._async.pause(parts))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch ``partitions`` again after pause()."""
        parts = list(partitions)
        self._run(lambda: self._async.resume(parts))

    def close(self, autocommit: bool = True) -> None:
        """Commit (with ``enable.auto.commit``), leave the group, release the connections.  May be
        called from another thread: a poll() there returns [] and an iteration ends."""
        if not self._runner.alive or self._closing:
            return
        self._closing = True
        try:
            self._give_back()
            self._call(self._async.close(autocommit, self._consumed()), 30)
        finally:
            with contextlib.suppress(Exception):
                self._call(_cancel_all(), 10)  # background commits, heartbeats, connects
            self._runner.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _cancel_all() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=5)


async def _make(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> AsyncConsumer:
    return AsyncConsumer(config, **kwargs)


# ------------------------------------------------------------------------------------------------
# the seeds' high-level consumer API


class Whitelist:
    """Topics matching ``regex`` (Python ``re`` syntax, full match)."""

    def __init__(self, regex: str) -> None:
        self.regex = regex


class Blacklist:
    """Every topic except those matching ``regex`` (internal topics excluded)."""

    def __init__(self, regex: str) -> None:
        self.regex = regex


class _Stream:
    """An iterator over the records of one group member's partitions."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return iter(self.consumer)

    def __next__(self) -> ConsumerRecord:
        while not self.consumer._closing:
            records = self.consumer.poll(1.0, max_records=1)
            if records:
                return records[0]
        raise StopIteration


class HighLevelConsumer:
    """The seeds' ConsumerConnector: streams per topic, group balancing, offset commits."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = merge_config(CONSUMER_DEFAULTS, config, kwargs)
        if self.config["group.id"] is None:
            raise ClientConfigError("the high-level consumer needs a group.id")
        self.consumers: list[Consumer] = []

    def _consumer(self) -> Consumer:
        c = Consumer(self.config)
        self.consumers.append(c)
        return c

    def create_message_streams(self, topic_counts: Mapping[str, int]) -> dict[str, list[_Stream]]:
        """``{topic: n}`` -> ``{topic: [n iterators]}``; each iterator owns a share of the topic's
        partitions (one group member each)."""
        out: dict[str, list[_Stream]] = {}
        for topic, n in topic_counts.items():
            streams = []
            for _ in range(n):
                c = self._consumer()
                c.subscribe([topic])
                streams.append(_Stream(c))
            out[topic] = streams
        return out

    def create_message_streams_by_filter(self, topic_filter: Whitelist | Blacklist, n: int = 1) -> list[_Stream]:
        """``n`` iterators over every topic the filter matches, now or later."""
        streams = []
        for _ in range(n):
            c = self._consumer()
            if isinstance(topic_filter, Whitelist):
                c.subscribe(pattern=topic_filter.regex)
            else:
                c.subscribe(pattern=".*", exclude=topic_filter.regex)
            streams.append(_Stream(c))
        return streams

    def commit_offsets(self) -> None:
        """Commit what every stream has yielded.  A stream in the middle of a rebalance is waited
        for (its iterator's next poll completes it; up to ``default.api.timeout.ms``); a stream that
        lost its partitions meanwhile commits what it still owns."""
        deadline = time.monotonic() + int(self.config["default.api.timeout.ms"]) / 1000
        for c in self.consumers:
            while True:
                try:
                    c.commit()
                    break
                except CommitFailed as exc:
                    if exc.code != ErrorCode.REBALANCE_IN_PROGRESS or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)  # retry interval while the stream's own poll finishes the join

    def shutdown(self) -> None:
        """Close every stream's consumer (each commits first with ``enable.auto.commit``); the streams' group
        loses these members."""
        for c in self.consumers:
            c.close()
        self.consumers.clear()


def create_message_streams(config: Mapping[str, Any], topic_counts: Mapping[str, int]) -> tuple[HighLevelConsumer, dict[str, list[_Stream]]]:
    """A :class:`HighLevelConsumer` for ``config`` (which needs a ``group.id``) and its streams
    for ``{topic: number of streams}``, as :meth:`HighLevelConsumer.create_message_streams`."""
    hl = HighLevelConsumer(config)
    return hl, hl.create_message_streams(topic_counts)


def create_message_streams_by_filter(
    config: Mapping[str, Any], topic_filter: Whitelist | Blacklist, n: int = 1
) -> tuple[HighLevelConsumer, list[_Stream]]:
    """A :class:`HighLevelConsumer` for ``config`` and ``n`` streams over every topic a
    :class:`Whitelist` or :class:`Blacklist` matches, now or later."""
    hl = HighLevelConsumer(config)
    return hl, hl.create_message_streams_by_filter(topic_filter, n)
