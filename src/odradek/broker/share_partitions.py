"""Share partitions at their leader (KIP-932): the in-flight state of every share group's reading
of the partitions this broker leads, the share sessions of the members fetching them, and the
acquisition-lock timer.

A share partition (group, topic id, partition) is made on the first ShareFetch that names it:
its state is read back from the share coordinator when one was persisted, else it starts where
the group's ``share.auto.offset.reset`` says (the high watermark for ``latest``, the log start for
``earliest``).  Its rules are pure (:class:`odradek.cluster.share_partition.SharePartition`); this
module gives them the log's batches, the clock and the persistence:

* a fetch reads from :meth:`SharePartition.next_fetch_offset`, below the high watermark (the last
  stable offset for ``read_committed``, whose aborted records and transaction markers are archived,
  never acquired), and acquires what it read for the member;
* acknowledgements (ShareFetch's piggy-backed ones and ShareAcknowledge) change the states, and the
  new state is written to the share coordinator before the answer — one write at a time per share
  partition, each carrying every acknowledgement applied before it began (coalesced); a fetch
  waiting on a share partition is woken when records may have become acquirable there;
* one timer (on the broker's scheduler) expires acquisition locks: an expired record is available
  again (or archived at the delivery-count limit), and fetches waiting for data are woken;
* a share session (one per group member, opened with epoch 0, closed with -1) remembers the
  partitions the member fetches; closing it, or the member's connection closing, releases the
  records the member holds, at once, for the others.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from odradek.cluster.share_partition import Acquired, Archived, RecordState, SharePartition, StateBatch
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek._scheduler import Scheduler, TimerHandle
    from odradek.broker.ports import Partition
    from odradek.records import BatchHeader

__all__ = [
    "STAT_NAMES",
    "SessionKey",
    "ShareKey",
    "SharePartitionManager",
    "ShareSession",
    "ShareSettings",
]

log = logging.getLogger(__name__)

#: (group id, topic id, partition)
ShareKey = tuple[str, uuid.UUID, int]
#: (group id, member id)
SessionKey = tuple[str, str]

#: the counters of :attr:`SharePartitionManager.stats` (records, except ``lock_expired``: the
#: times a share partition's acquisition locks expired)
STAT_NAMES = ("acquired", "accepted", "released", "rejected", "archived", "lock_expired")

_CONTROL = 0x20
_TRANSACTIONAL = 0x10


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """What a share group's configs say about reading a partition (the group's
    ``share.*`` configs, else the broker's ``group.share.*`` defaults)."""

    lock_ms: int = 30_000
    delivery_limit: int = 5
    #: "latest", "earliest" or "by_duration" (the first offset at or after now less
    #: ``reset_duration_ms``, else the high watermark)
    auto_offset_reset: str = "latest"
    reset_duration_ms: int = 0
    read_committed: bool = False
    max_in_flight: int = 2000
    #: the group's dead-letter topic (KIP-1191), None: archived records are only archived; and
    #: whether a dead letter copies the record (errors.deadletterqueue.copy.record.enable)
    dlq_topic: str | None = None
    dlq_copy_record: bool = False
    #: share.renew.acknowledge.enable: members may RENEW their locks (ShareFetch/ShareAcknowledge v2)
    renew_enabled: bool = True


class Stored(Protocol):
    """A share partition's state as the share coordinator keeps it (its batches: runs with
    ``first_offset``, ``last_offset``, ``delivery_count`` and ``state`` as a number)."""

    @property
    def state_epoch(self) -> int: ...

    @property
    def start_offset(self) -> int: ...

    @property
    def batches(self) -> Sequence[Any]: ...


class Persister(Protocol):
    """Where share-partition state is kept (the share coordinator)."""

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, *,
                   leader_epoch: int = -1) -> Stored | None:
        """The persisted state, None when it was never initialized."""
        ...

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int,
                         state_epoch: int = 0) -> None: ...

    async def write(
        self, group_id: str, topic_id: uuid.UUID, partition: int, *, leader_epoch: int, state_epoch: int,
        start_offset: int, batches: Sequence[Any],
    ) -> None: ...

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Any:
        """The state's summary (``state_epoch``, ``leader_epoch``, ``start_offset``), None when
        it was never initialized."""
        ...

    async def delete(self, group_id: str, topics: Any) -> Any:
        """Delete the state of ``topics`` (topic id -> partitions); the error of each."""
        ...


@dataclass(slots=True)
class ShareSession:
    """One member's share session: the partitions it fetches and the epoch its next request
    carries."""

    key: SessionKey
    epoch: int
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    #: the connection that opened it (its close ends the session)
    connection: object = None


@dataclass(slots=True, eq=False)
class _Writer:
    """The persistence of one share partition's state: the write under way (its task) and the
    future of the next one, which the acknowledgements applied since the last began wait for."""

    sp: SharePartition
    leader_epoch: int = -1
    task: asyncio.Task[None] | None = None
    next: asyncio.Future[None] | None = None


class SharePartitionManager:
    """The share partitions and share sessions of one broker (see the module's text)."""

    def __init__(
        self,
        timers: Scheduler,
        settings_for: Callable[[str], ShareSettings],
        persister: Persister | None = None,
        *,
        max_sessions: int = 2000,
    ) -> None:
        self._timers = timers
        self._max_sessions = max_sessions
        self.settings_for = settings_for
        self._persister = persister
        self.partitions: dict[ShareKey, SharePartition] = {}
        self.sessions: dict[SessionKey, ShareSession] = {}
        #: the sessions each connection opened (by the connection's identity)
        self._by_connection: dict[int, set[SessionKey]] = {}
        self._loading: dict[ShareKey, asyncio.Future[SharePartition]] = {}
        #: the leader epoch each share partition was loaded at, and its state epoch
        self._epochs: dict[ShareKey, int] = {}
        self._state_epochs: dict[ShareKey, int] = {}
        self._timer: TimerHandle | None = None
        self._timer_at: float | None = None
        #: futures of fetches waiting for records to become available (woken by releases)
        self._waiters: set[asyncio.Future[None]] = set()
        #: and those waiting on given share partitions
        self._waiters_of: dict[ShareKey, set[asyncio.Future[None]]] = {}
        #: counters for metrics and describe: the totals, and each group's (by group id)
        self.stats: dict[str, int] = dict.fromkeys(STAT_NAMES, 0)
        self.group_stats: dict[str, dict[str, int]] = {}
        #: what was archived (for the dead-letter topic): the listener gets every archived record
        #: with its share partition and the partition it is read from
        self.on_archived: Callable[[ShareKey, Partition, list[Archived]], None] | None = None
        self._sources: dict[ShareKey, Partition] = {}
        #: each share partition's state writer (:meth:`_persist`), while acknowledgements wait for it
        self._writers: dict[ShareKey, _Writer] = {}

    def now(self) -> int:
        return int(self._timers.clock.monotonic_ms())

    # -- share partitions ------------------------------------------------------------------------
    async def partition(self, key: ShareKey, p: Partition) -> SharePartition:
        """The share partition of ``key`` (led here as ``p``), loaded on first use."""
        sp = self.partitions.get(key)
        if sp is not None:
            if self._epochs.get(key) == p.leader_epoch:
                return sp
            # led here again after another broker led it: its state is the share coordinator's now
            self._drop(key)
        loading = self._loading.get(key)
        if loading is not None:
            return await asyncio.shield(loading)
        fut: asyncio.Future[SharePartition] = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            sp = await self._load(key, p)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: the waiters see it through their own await
            raise
        finally:
            del self._loading[key]
        self.partitions[key] = sp
        fut.set_result(sp)
        return sp

    async def _load(self, key: ShareKey, p: Partition) -> SharePartition:
        group_id, topic_id, index = key
        settings = self.settings_for(group_id)
        stored = None
        if self._persister is not None:
            stored = await self._persister.read(group_id, topic_id, index, leader_epoch=p.leader_epoch)
        batches: list[StateBatch] = []
        if stored is not None:
            start = max(stored.start_offset, p.log.log_start_offset)
            batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_count, RecordState(b.state))
                       for b in stored.batches if b.last_offset >= start]
            self._state_epochs[key] = stored.state_epoch
            log.info("share partition %s %s-%d resumes at %d (%d state batches)", group_id, p.topic, index, start,
                     len(batches))
        else:
            start = self._reset_offset(settings, p)
            self._state_epochs[key] = 0
            log.info("share partition %s %s-%d starts at %d (share.auto.offset.reset=%s)", group_id, p.topic, index,
                     start, settings.auto_offset_reset)
            if self._persister is not None:
                await self._persister.initialize(group_id, topic_id, index, start, 0)
        self._epochs[key] = p.leader_epoch
        self._sources[key] = p
        return SharePartition(
            start_offset=start, lock_ms=settings.lock_ms, delivery_limit=settings.delivery_limit,
            max_in_flight=settings.max_in_flight, state_batches=batches,
        )

    def _reset_offset(self, settings: ShareSettings, p: Partition) -> int:
        """Where a share partition with no state starts (share.auto.offset.reset)."""
        if settings.auto_offset_reset == "earliest":
            return p.log.log_start_offset
        if settings.auto_offset_reset == "by_duration":
            found = p.log.offset_for_timestamp(int(self._timers.clock.now_ms()) - settings.reset_duration_ms)
            if found is not None:
                return max(found[0], p.log.log_start_offset)
        return p.log.high_watermark

    def acquire(self, key: ShareKey, sp: SharePartition, p: Partition, member_id: str, headers: Iterable[BatchHeader],
                aborted_pids: Iterable[tuple[int, int]], *, fetch_offset: int, max_records: int,
                read_committed: bool, strict: bool = False) -> list[Acquired]:
        """Acquire for ``member_id`` what the batches of ``headers`` (the whole batches read from
        ``fetch_offset``, their headers) hold; the acquired runs.  ``strict`` (ShareFetch v2's
        record-limit mode): never more than ``max_records`` offsets, the last batch cut; else whole
        batches, as Kafka aligns them."""
        batches: list[tuple[int, int]] = []
        gaps: list[tuple[int, int]] = []
        aborted: list[tuple[int, int]] = []
        # read_committed: the producers whose transaction aborted from an offset on (until their marker)
        pending = sorted(aborted_pids, key=lambda t: t[1]) if read_committed else []
        aborting: set[int] = set()
        for h in headers:
            if h.magic < 2 or h.base_offset < 0:
                continue
            batches.append((h.base_offset, h.last_offset))
            if h.attributes & _CONTROL:
                gaps.append((h.base_offset, h.last_offset))  # a marker is no record for anyone
                aborting.discard(h.producer_id)
                continue
            if read_committed and h.attributes & _TRANSACTIONAL:
                while pending and pending[0][1] <= h.last_offset:
                    aborting.add(pending.pop(0)[0])
                if h.producer_id in aborting:
                    aborted.append((h.base_offset, h.last_offset))
        if not batches:
            return []
        if strict:
            batches = _first_offsets(batches, max(fetch_offset, sp.start_offset), max_records)
        settings = self.settings_for(key[0])
        sp.lock_ms = settings.lock_ms
        sp.delivery_limit = settings.delivery_limit
        archived: list[Archived] = []
        got = sp.acquire(member_id, batches, max_records=max_records, now_ms=self.now(), aborted=aborted, gaps=gaps,
                         fetch_offset=fetch_offset, archived=archived)
        self._archived(key, archived)
        n = sum(a.last_offset - a.first_offset + 1 for a in got)
        self._count(key[0], "acquired", n)
        self._arm()
        return got

    async def acknowledge(
        self, key: ShareKey, sp: SharePartition, leader_epoch: int, member_id: str,
        batches: Sequence[tuple[int, int, Sequence[int]]],
    ) -> ErrorCode:
        """Apply a partition's acknowledgement batches (first, last, types) and persist; the
        first error (the batches before it stand, as Kafka's answer is per partition)."""
        error = ErrorCode.NONE
        changed = False
        full = sp.end_offset - sp.start_offset >= sp.max_in_flight
        for first, last, types in batches:
            code, archived = sp.acknowledge(member_id, first, last, types, now_ms=self.now())
            if code != ErrorCode.NONE:
                error = code
                continue
            changed = True
            self._count_acks(key[0], types, last - first + 1)
            self._archived(key, archived)
        if changed:
            # fetches waiting on this share partition may acquire now: records were released, or
            # the in-flight window, full, moved on
            if sp.next_fetch_offset() < sp.end_offset or (full and sp.end_offset - sp.start_offset < sp.max_in_flight):
                self._wake(key)
            await self._persist(key, sp, leader_epoch)
        return error

    def _count(self, group_id: str, name: str, n: int) -> None:
        if n:
            self.stats[name] += n
            per = self.group_stats.get(group_id)
            if per is None:
                per = self.group_stats[group_id] = dict.fromkeys(STAT_NAMES, 0)
            per[name] += n

    def _count_acks(self, group_id: str, types: Sequence[int], n: int) -> None:
        names = {1: "accepted", 2: "released", 3: "rejected"}
        if len(types) == 1:
            name = names.get(types[0])
            if name:
                self._count(group_id, name, n)
            return
        for t in types:
            name = names.get(t)
            if name:
                self._count(group_id, name, 1)

    def _archived(self, key: ShareKey, archived: list[Archived]) -> None:
        if archived:
            self._count(key[0], "archived", len(archived))
            source = self._sources.get(key)
            if self.on_archived is not None and source is not None:
                self.on_archived(key, source, archived)

    async def _persist(self, key: ShareKey, sp: SharePartition, leader_epoch: int) -> None:
        """Persist ``sp``'s state as it is now, or later: return once a write begun after this
        call has stored it (or raise that write's error).  Writes are coalesced per share
        partition: one at a time, begun on the event loop's next turn, each taking the state as it
        is when it begins, so that the acknowledgements applied meanwhile (by other members'
        requests, or while a write is under way) share the next write instead of one each."""
        if self._persister is None:
            return
        w = self._writers.get(key)
        if w is None or w.sp is not sp:
            w = self._writers[key] = _Writer(sp)
        w.leader_epoch = max(w.leader_epoch, leader_epoch)
        if w.next is None:
            w.next = asyncio.get_running_loop().create_future()
        fut = w.next
        if w.task is None:
            w.task = asyncio.get_running_loop().create_task(self._write_loop(key, w))
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            if not fut.cancelled():
                raise  # this request was cancelled, not the write
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the state write was cancelled") from None

    async def _write_loop(self, key: ShareKey, w: _Writer) -> None:
        """Write ``w``'s share partition while acknowledgements wait for a write."""
        try:
            while w.next is not None:
                fut, w.next = w.next, None
                try:
                    await self._write(key, w.sp, w.leader_epoch)
                except Exception as exc:
                    if not fut.done():
                        fut.set_exception(exc)
                        fut.exception()  # retrieved: each waiter raises it through its own await
                except BaseException:
                    fut.cancel()
                    raise
                else:
                    if not fut.done():
                        fut.set_result(None)
        finally:
            w.task = None
            if w.next is not None:  # cancelled (the broker stopping): nothing more is written
                w.next.cancel()
                w.next = None
            if self._writers.get(key) is w:
                del self._writers[key]

    async def _write(self, key: ShareKey, sp: SharePartition, leader_epoch: int) -> None:
        assert self._persister is not None
        if self.partitions.get(key) is not sp:
            # the cached state was dropped (its offsets were altered or deleted, or another broker
            # led the partition) before the acknowledgements could be persisted: they are lost
            raise KafkaError(ErrorCode.INVALID_RECORD_STATE,
                             "the share partition's state was reset before the acknowledgement was persisted")
        group_id, topic_id, index = key
        try:
            await self._persister.write(group_id, topic_id, index, leader_epoch=leader_epoch,
                                        state_epoch=self._state_epochs.get(key, 0),
                                        start_offset=sp.start_offset, batches=sp.snapshot())
        except KafkaError as exc:
            if exc.code == ErrorCode.FENCED_STATE_EPOCH and self.partitions.get(key) is sp:
                # the group's offsets were reset (AlterShareGroupOffsets) or its state deleted since
                # this state was read: what is cached here is stale; the next fetch reads it again
                log.warning("share partition %s: state epoch fenced (%s): its cached state is dropped and "
                            "read again on the next fetch", key, exc.message)
                self._drop(key)
            raise
        except Exception as exc:
            log.warning("share partition %s: state not persisted: %s", key, exc)
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc

    def release(self, member_id: str, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]] | None = None) -> int:
        """Release what ``member_id`` of ``group_id`` holds (in ``partitions``, else everywhere)."""
        released = 0
        now = self.now()
        keys = ([(group_id, t, i) for t, i in partitions] if partitions is not None
                else [k for k in self.partitions if k[0] == group_id])
        for key in keys:
            sp = self.partitions.get(key)
            if sp is None:
                continue
            held = sp.acquired_by(member_id)
            if held:
                released += held
                self._archived(key, sp.release_member(member_id, now_ms=now))
        if released:
            self._count(group_id, "released", released)
            self._wake()
        return released

    @property
    def persister(self) -> Persister | None:
        return self._persister

    def forget(self, key: ShareKey) -> bool:
        """Drop the cached state of a share partition (its offsets were altered or deleted at the
        share coordinator): the next fetch reads it from the share coordinator again.  What
        members hold in it is released.  Whether it was cached here."""
        sp = self.partitions.get(key)
        if sp is None:
            return False
        log.info("share partition %s %s-%d: cached state dropped (its offsets were changed)", key[0], key[1], key[2])
        self._drop(key)
        self._wake()
        return True

    def _drop(self, key: ShareKey) -> None:
        self.partitions.pop(key, None)
        self._epochs.pop(key, None)
        self._state_epochs.pop(key, None)
        self._sources.pop(key, None)

    # -- the lock timer --------------------------------------------------------------------------
    def _arm(self) -> None:
        deadlines = [d for d in (sp.next_deadline() for sp in self.partitions.values()) if d is not None]
        if not deadlines:
            return
        at = min(deadlines)
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._timers.call_at(at, self._expire)

    def _expire(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.now()
        woke = False
        for key, sp in list(self.partitions.items()):
            deadline = sp.next_deadline()
            if deadline is None or deadline > now:
                continue
            archived = sp.expire(now)
            self._count(key[0], "lock_expired", 1)
            self._archived(key, archived)
            woke = True
        if woke:
            self._wake()
        self._arm()

    # -- waiting for records ---------------------------------------------------------------------
    def waiter(self, keys: Iterable[ShareKey] | None = None) -> asyncio.Future[None]:
        """A future set when records may have become acquirable in one of the share partitions
        ``keys`` (in any, when None)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if keys is None:
            self._waiters.add(fut)
            fut.add_done_callback(self._waiters.discard)
            return fut
        watched = list(keys)
        for key in watched:
            self._waiters_of.setdefault(key, set()).add(fut)

        def forget(f: asyncio.Future[None]) -> None:
            for key in watched:
                waiting = self._waiters_of.get(key)
                if waiting is not None:
                    waiting.discard(f)
                    if not waiting:
                        del self._waiters_of[key]

        fut.add_done_callback(forget)
        return fut

    def _wake(self, key: ShareKey | None = None) -> None:
        """Wake the fetches waiting on share partition ``key`` (on any, when None)."""
        futs = list(self._waiters)
        if key is None:
            for waiting in self._waiters_of.values():
                futs.extend(waiting)
        else:
            futs.extend(self._waiters_of.get(key, ()))
        for fut in futs:
            if not fut.done():
                fut.set_result(None)

    # -- share sessions --------------------------------------------------------------------------
    def open_session(self, key: SessionKey, connection: object) -> ShareSession:
        self.close_session(key)
        if len(self.sessions) >= self._max_sessions:
            raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                             f"the share session cache is full ({self._max_sessions} sessions, "
                             "group.share.max.share.sessions)")
        session = ShareSession(key, 1, connection=connection)
        self.sessions[key] = session
        self._by_connection.setdefault(id(connection), set()).add(key)
        return session

    def session(self, key: SessionKey, epoch: int) -> ShareSession:
        """The session a request with ``epoch`` continues (and its epoch moves on)."""
        session = self.sessions.get(key)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session for member {key[1]}")
        if epoch != session.epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"share session epoch {epoch}, expected {session.epoch}")
        session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        return session

    def close_session(self, key: SessionKey) -> ShareSession | None:
        session = self.sessions.pop(key, None)
        if session is not None:
            keys = self._by_connection.get(id(session.connection))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[id(session.connection)]
            released = self.release(key[1], key[0], session.partitions)
            if released:
                log.info("share session of %s in %s closed: %d records released", key[1], key[0], released)
        return session

    def connection_closed(self, connection: object) -> None:
        for key in list(self._by_connection.get(id(connection), ())):
            session = self.sessions.get(key)
            if session is not None and session.connection is connection:
                self.close_session(key)


def _first_offsets(batches: list[tuple[int, int]], start: int, limit: int) -> list[tuple[int, int]]:
    """The batches cut so that at most ``limit`` offsets from ``start`` on remain (the last one
    shortened): what a record-limit acquisition may take."""
    out: list[tuple[int, int]] = []
    left = max(limit, 1)
    for base, last in batches:
        first = max(base, start)
        if last < first:
            out.append((base, last))
            continue
        n = last - first + 1
        if n >= left:
            out.append((base, first + left - 1))
            break
        out.append((base, last))
        left -= n
    return out
