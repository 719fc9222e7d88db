"""The coordinator runtime: what every coordinator does with the topic its state lives in.

A coordinator keeps its state in a topic of its own (the group coordinator in
``__consumer_offsets``, the transaction coordinator in ``__transaction_state``, the share
coordinator in ``__share_group_state``: :mod:`.share_state`).  Each key it serves (a group id, a transactional id...) belongs to one partition,
``abs(javaHash(key)) % partitions``, and is served by the broker leading that partition from the
state rebuilt from the partition's records.  :class:`CoordinatorRuntime` owns that for one topic,
so that a coordinator supplies only its record handling and its state machine (a
:class:`CoordinatorShard` per partition, the rules from :mod:`odradek.cluster`):

* **the topic**: created on first use (:meth:`~CoordinatorRuntime.ensure_topic`, as Kafka does
  on the first FindCoordinator), internal and compacted, with the configs the broker table gives
  it (``offsets.topic.*``, ``transaction.state.log.*``: :func:`odradek.broker.topics.internal_topic_configs`);
* **hosting**: after every metadata image and LeaderAndIsr (:meth:`~CoordinatorRuntime.on_hosting_changed`)
  the partitions this broker now leads are loaded and those it no longer leads are unloaded;
* **loading**: a new shard gets every record of the partition, from its log start offset to its
  log end, in offset order (transaction markers included), then ``loaded``; the partition's keys
  answer COORDINATOR_LOAD_IN_PROGRESS meanwhile;
* **unloading**: the shard is dropped, and ``unloaded`` answers whatever still waits on it
  NOT_COORDINATOR;
* **serving**: :meth:`~CoordinatorRuntime.shard` gives a request the shard of its key or raises
  the error Kafka answers (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS);
* **writing**: :meth:`~CoordinatorRuntime.append` appends records to a partition through the
  replica manager and returns once they are durable and, with acks=all, replicated to the ISR;
* **storage errors**: a partition whose log dir goes offline (KAFKA_STORAGE_ERROR from an append,
  or found so on a request) is unloaded: another broker must take it over (a full dir, which
  Odradek keeps apart from a failed one, keeps its partitions: reads go on and writes resume
  once space is freed);
* **timers**: periodic jobs and deadline-driven ones on the broker's
  :class:`~odradek._scheduler.Scheduler` and its clock, so that tests move time by hand (a
  :class:`~odradek._scheduler.FakeScheduler`'s ``advance``, or :meth:`~CoordinatorRuntime.run_due`).

Nothing here knows a record format or a state machine: a new coordinator is a shard class and a
:class:`CoordinatorTopic`, with its topic's configs in the broker's internal-topic table.  The
ones to come, none needing a change here:

* the KIP-848 group coordinator writes its record types (``ConsumerGroup*``, key versions 3 and
  up) into the same ``__consumer_offsets`` partitions, so the group shard grows their handling,
  as Kafka's GroupCoordinatorShard holds both kinds of group (each shard already skips the key
  versions it does not know);
* the share coordinator (:mod:`.share_state`): ``__share_group_state`` and a shard replaying
  ShareSnapshot records (a checkpoint: the state replaced) and ShareUpdate records (a delta);
  every N updates of a key a write is a snapshot again, and a periodic timer drops with
  :meth:`~CoordinatorRuntime.delete_records_before` the records no key needs any more;
* a schema registry's store: ``_schemas``, one partition, ``hosted_on="replicas"``: a view on
  every broker hosting a replica, brought up to the high watermark before a read
  (:meth:`~CoordinatorRuntime.catch_up`); the partition's leader is the one elected writer
  (only there does :meth:`~CoordinatorRuntime.shard` answer and
  :meth:`~CoordinatorRuntime.append` write).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, NamedTuple, Protocol, TypeVar

from odradek._scheduler import LoopScheduler, Scheduler
from odradek._timeouts import wait_for
from odradek.broker.coordinators.record_versions import UnknownRecordVersionError
from odradek.broker.logdirs import is_io_error
from odradek.cluster.assignment import partition_for
from odradek.errors import ErrorCode, KafkaError
from odradek.records import Batch, BatchBuilder, ControlRecordType, parse_control_key, read_batches
from odradek.storage import StorageError

if TYPE_CHECKING:
    from odradek._clock import Clock
    from odradek.broker.replica import Partition, ReplicaManager
    from odradek.broker.replication import Replication
    from odradek.broker.scheduler import LogScheduler
    from odradek.broker.topics import TopicService
    from odradek.cluster.metadata import MetadataImage

__all__ = [
    "CoordinatorPorts",
    "CoordinatorRecord",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "CoordinatorTopic",
    "Written",
]

log = logging.getLogger(__name__)

#: how soon a timer whose deadline could not be computed looks again
_RETRY_MS = 1000
#: how much of the log one read gets while a partition loads
LOAD_READ_BYTES = 1 << 20


class CoordinatorRecord(NamedTuple):
    """One record of a coordinator's partition, as replayed into its shard."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    #: >= 0: the record is part of this producer's transaction, decided by a later marker
    #: (:meth:`CoordinatorShard.replay_marker`); -1: it counts as it is read
    producer_id: int = -1
    producer_epoch: int = -1


class CoordinatorShard(Protocol):
    """The state a coordinator keeps for one partition of its topic (Kafka's CoordinatorShard).

    The contract, as the runtime uses it:

    * The coordinator's factory makes a shard for a partition index when this broker is to serve
      that partition.  The runtime replays into it every record of the partition from the log
      start offset to the log end, in offset order: :meth:`replay` per record,
      :meth:`replay_marker` per transaction marker.  Then it calls :meth:`loaded` once, and from
      then on the coordinator's requests get this shard (:meth:`CoordinatorRuntime.shard`)
      until the runtime calls :meth:`unloaded` and forgets it.
    * ``replay`` decodes the shard's own record types (from the version or type at the start of
      the key) and skips, without an error, the types it does not know: another coordinator may
      share the topic (KIP-848 groups beside classic ones in ``__consumer_offsets``), and a
      newer broker may have written types this one predates.  A record it knows but cannot
      decode raises (RecordsError, KafkaError or ValueError): the load fails and is logged, and
      the partition is not served.  A ``value`` of None is a tombstone: the key is deleted.
    * A record with ``producer_id >= 0`` belongs to that producer's open transaction: the shard
      holds it until ``replay_marker`` commits (apply) or aborts (drop) it; what is still held
      when loading ends stays pending, as a live transaction's would.
    * Replay is synchronous and does no I/O: the loaded state is exactly the partition's records
      up to the log end.  It needs no clock; ``loaded(now_ms)`` gets the time (fresh sessions
      for loaded members, deadlines).
    * The coordinator writes through :meth:`CoordinatorRuntime.append` and applies a change to
      its shard once the append succeeded; replaying the records it wrote must rebuild the same
      state on the next leader.
    * ``unloaded`` answers NOT_COORDINATOR to everything still waiting on the shard (deferred
      responses) and cancels its tasks; the shard is not used again.
    """

    def replay(self, record: CoordinatorRecord) -> None: ...

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None: ...

    def loaded(self, now_ms: int) -> None: ...

    def unloaded(self) -> None: ...


S = TypeVar("S", bound=CoordinatorShard)


@dataclass(frozen=True, slots=True)
class CoordinatorTopic:
    """The topic a coordinator keeps its state in, and how the coordinator writes to it."""

    name: str
    partitions: int
    #: asked when the topic is created (a cluster's configured factor; a single node's 1)
    replication_factor: Callable[[], int]
    #: the acks of the coordinator's writes (-1: every ISR member, Kafka's default)
    acks: int = -1
    #: how long a write with acks=-1 waits for the ISR (REQUEST_TIMED_OUT after)
    write_timeout_ms: int = 5000
    #: where a shard is kept: ``"leader"`` (coordinators: the leader alone serves, writes and
    #: keeps state) or ``"replicas"`` (a materialized view on every broker hosting a replica,
    #: kept current with :meth:`CoordinatorRuntime.catch_up`; writes still go to the leader)
    hosted_on: Literal["leader", "replicas"] = "leader"


@dataclass(frozen=True, slots=True)
class CoordinatorPorts:
    """What the broker lends a coordinator runtime (built once in ``app.py``)."""

    clock: Clock
    replicas: ReplicaManager
    topics: TopicService
    replication: Replication
    #: the log scheduler's I/O executor (:meth:`CoordinatorRuntime.delete_records_before`)
    scheduler: LogScheduler | None = None
    #: where the timers wait (None: asyncio's timers, on ``clock``)
    timers: Scheduler | None = None


@dataclass(frozen=True, slots=True)
class Written:
    """Where an append went: the partition and the offsets its records were given."""

    partition: int
    first_offset: int
    last_offset: int


@dataclass(eq=False)
class _Timer:
    name: str
    #: a periodic job: run every ``interval_ms`` of the monotonic clock
    interval_ms: int | None = None
    periodic: Callable[[], Awaitable[None]] | None = None
    next_at: int = 0
    #: a deadline job: ``due()`` is the wall-clock ms it is next due (None: nothing due)
    due: Callable[[], int | None] | None = None
    fire: Callable[[int], Awaitable[None]] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    running: asyncio.Lock = field(default_factory=asyncio.Lock)


class CoordinatorRuntime(Generic[S]):
    """One coordinator topic's partitions on this broker, with a shard per partition served."""

    def __init__(self, topic: CoordinatorTopic, new_shard: Callable[[int], S], ports: CoordinatorPorts) -> None:
        self.topic = topic
        self.new_shard = new_shard
        self.clock = ports.clock
        self.timers: Scheduler = ports.timers if ports.timers is not None else LoopScheduler(ports.clock)
        self.replicas = ports.replicas
        self.topics = ports.topics
        self.replication = ports.replication
        self.scheduler = ports.scheduler
        self._shards: dict[int, S] = {}
        #: the partition count keys are hashed by, fixed when the topic is first found (None: not yet)
        self._routing_count: int | None = None
        #: the next offset of each loaded partition not yet replayed (:meth:`catch_up`)
        self._replayed: dict[int, int] = {}
        #: partitions being loaded: their keys answer COORDINATOR_LOAD_IN_PROGRESS
        self.loading: set[int] = set()
        self._loads: set[asyncio.Task[None]] = set()
        self._timers: list[_Timer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._create_lock = asyncio.Lock()
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------------------------------------
    # lifecycle

    def start(self) -> None:
        """Start the timers and load the partitions this broker serves now."""
        loop = asyncio.get_running_loop()
        self._started = True
        now = self.clock.monotonic_ms()
        for t in self._timers:
            if t.interval_ms is not None:
                t.next_at = now + t.interval_ms
            self._tasks.append(loop.create_task(self._run_timer(t), name=f"{self.topic.name}-{t.name}"))
        self.refresh()

    async def stop(self) -> None:
        """Stop the timers and loads; every shard is unloaded (its waiters answered), and no
        hosting change loads one again."""
        self._stopped = True
        tasks = [*self._tasks, *self._loads]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        for p in sorted(self._shards):
            self._unload(p, None)

    # ------------------------------------------------------------------------------------------
    # routing and the topic

    def partition_for(self, key: str) -> int:
        """The partition of ``key``: by the topic's partition count as this broker first finds
        the topic (as Kafka does, once per broker lifetime: a topic created under another
        ``*.num.partitions``, by an earlier configuration, keeps its keys where they are, and
        partitions added to it later move keys only at the next start), by the configured count
        before the topic exists."""
        return partition_for(key, self.partition_count())

    def partition_count(self) -> int:
        """The partition count keys are hashed by (see :meth:`partition_for`)."""
        if self._routing_count is None:
            topic = self.topics.image.topics.get(self.topic.name)
            if topic is None or not topic.partitions:
                return self.topic.partitions
            self._routing_count = len(topic.partitions)
        return self._routing_count

    async def ensure_topic(self) -> None:
        """Create the topic on first use; COORDINATOR_NOT_AVAILABLE while it cannot be (too few
        live brokers for its replication factor, a full or failed log dir)."""
        name = self.topic.name
        if name in self.topics.image.topics:
            return
        async with self._create_lock:
            if name in self.topics.image.topics:
                return
            try:
                await self.topics.create_internal(name, self.topic.partitions, self.topic.replication_factor())
            except KafkaError as exc:
                if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                    return
                if exc.code in (ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.KAFKA_STORAGE_ERROR):
                    # like Kafka: no coordination until enough brokers are alive, or while the
                    # topic cannot be written
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message) from exc
                raise
            except (OSError, StorageError) as exc:
                if not is_io_error(exc):
                    raise
                failure = self.replicas.log_dirs.fail(None, exc, f"creating {name}")
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, failure.message) from exc

    def check_storage(self, partition: int) -> None:
        """COORDINATOR_NOT_AVAILABLE while the partition's log dir is offline (FindCoordinator:
        Kafka moves the coordinator away from a failed dir; a single broker has nowhere to move
        it).  A full dir still coordinates: state is served from memory, and only the writes
        answer errors until space is freed."""
        local = self.replicas.get(self.topic.name, partition)
        if local is not None and self.replicas.log_dirs.offline(local.log_dir):
            raise KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the log dir of {self.topic.name}-{partition} is offline"
            )

    def shard(self, key: str, subject: str) -> S:
        """The shard serving ``key`` (``subject`` names it in errors), if this broker serves it
        now; else COORDINATOR_NOT_AVAILABLE (no topic yet, or its log could not be made here),
        NOT_COORDINATOR (another broker leads it, or its log dir is offline) or
        COORDINATOR_LOAD_IN_PROGRESS."""
        name = self.topic.name
        if name not in self.topics.image.topics:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{name} does not exist yet")
        p = self.partition_for(key)
        local = self.replicas.get(name, p)
        if local is None:
            try:
                local = self.replication.rehost(name, p)  # its log could not be created before
            except KafkaError as exc:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message) from exc
        if local is None or not local.is_leader:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"{subject} is coordinated by another broker")
        if self.replicas.log_dirs.offline(local.log_dir):
            self._unload(p, "its log dir is offline")
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"the log dir of {name}-{p} is offline")
        shard = self._shards.get(p)
        if shard is None or p in self.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{name}-{p} is loading")
        return shard

    def shard_at(self, partition: int) -> S | None:
        """The loaded shard of ``partition`` (None: not loaded here), without the checks."""
        return self._shards.get(partition)

    def shards(self) -> list[S]:
        """Every loaded shard."""
        return list(self._shards.values())

    def loaded(self) -> set[int]:
        """The partitions with a loaded shard."""
        return set(self._shards)

    def leader(self, partition: int) -> Partition | None:
        """The partition if this broker leads it now."""
        local = self.replicas.get(self.topic.name, partition)
        return local if local is not None and local.is_leader else None

    # ------------------------------------------------------------------------------------------
    # hosting: loading and unloading

    def on_hosting_changed(self, image: MetadataImage | None) -> None:
        """The partitions this broker hosts may have changed (``image``: after a metadata image,
        which skips the walk until the topic exists)."""
        if image is None or self._shards or self.loading or self.topic.name in image.topics:
            self.refresh()

    def refresh(self) -> None:
        """Load the partitions this broker serves now; unload the others."""
        if self._stopped:
            return
        served = {
            idx
            for (topic, idx), part in list(self.replicas.partitions.items())
            if topic == self.topic.name and self._serves(part)
        }
        for p in sorted(set(self._shards) - served):
            self._unload(p, "this broker no longer serves it")
        for p in sorted(served - set(self._shards) - self.loading):
            self.loading.add(p)
            task = asyncio.get_running_loop().create_task(self._load(p), name=f"load-{self.topic.name}-{p}")
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)

    def _serves(self, part: Partition) -> bool:
        if self.topic.hosted_on == "leader" and not part.is_leader:
            return False
        return not self.replicas.log_dirs.offline(part.log_dir)

    async def _load(self, partition: int) -> None:
        name = self.topic.name
        try:
            part = self.replicas.get(name, partition)
            if part is None or not self._serves(part):
                return  # moved again before the load began
            started = self.clock.monotonic_ms()
            shard = self.new_shard(partition)
            end, count = self._replay(part, shard, part.log.log_start_offset)
            shard.loaded(self.clock.now_ms())
            self._shards[partition] = shard
            self._replayed[partition] = end
            log.info("loaded %s-%d: %d records in %d ms", name, partition, count, self.clock.monotonic_ms() - started)
        except UnknownRecordVersionError as exc:
            log.error(
                "could not load %s-%d: %s. The partition stays unavailable until a version that reads it runs; "
                "nothing was skipped or deleted", name, partition, exc.describe(),
            )
        except Exception:  # a record the shard cannot decode, an I/O error: not served, logged
            log.exception("could not load %s-%d", name, partition)
        finally:
            self.loading.discard(partition)
        self.wake()

    def _replay(self, part: Partition, shard: S, offset: int) -> tuple[int, int]:
        """Replay the partition's records from ``offset`` to its log end (a view on every
        replica: to the high watermark) into ``shard``; returns (the next offset, records
        replayed)."""
        lg = part.log
        committed_only = self.topic.hosted_on == "replicas"
        count = 0
        while True:
            end = lg.high_watermark if committed_only else lg.log_end_offset
            if offset >= end:
                break
            data = lg.read(offset, LOAD_READ_BYTES, end if committed_only else None).to_bytes()
            if not data:
                break
            last = offset
            for batch in read_batches(data):
                last = batch.last_offset
                if batch.is_control:
                    shard.replay_marker(batch.producer_id, batch.producer_epoch, _is_commit(batch))
                    continue
                pid, epoch = (batch.producer_id, batch.producer_epoch) if batch.is_transactional else (-1, -1)
                for rec in batch.records:
                    try:
                        shard.replay(CoordinatorRecord(rec.offset, rec.timestamp, rec.key, rec.value, pid, epoch))
                    except UnknownRecordVersionError as exc:
                        exc.offset = rec.offset
                        raise
                    count += 1
            if last < offset:
                break
            offset = last + 1  # an entry without a whole batch is stepped over
        return offset, count

    def catch_up(self, partition: int) -> int:
        """Replay into a loaded shard what was appended since it was loaded or last caught up (a
        view kept on every replica, ``hosted_on="replicas"``: the records its followers fetched,
        up to the high watermark); returns how many records were replayed."""
        shard = self._shards.get(partition)
        part = self.replicas.get(self.topic.name, partition)
        if shard is None or part is None:
            return 0
        end, count = self._replay(part, shard, self._replayed[partition])
        self._replayed[partition] = end
        return count

    def reload(self, partition: int, reason: str) -> None:
        """Drop the partition's shard and load it again from its log: for a coordinator that
        applied a change to its shard before its append failed (the log is the truth; what
        waits on the shard is answered NOT_COORDINATOR, and its keys are loading meanwhile)."""
        if partition not in self._shards:
            return
        self._unload(partition, reason)
        self.refresh()

    def _unload(self, partition: int, reason: str | None) -> None:
        shard = self._shards.pop(partition, None)
        self._replayed.pop(partition, None)
        if shard is None:
            return
        if reason is not None:
            log.info("unloading %s-%d: %s", self.topic.name, partition, reason)
        shard.unloaded()

    # ------------------------------------------------------------------------------------------
    # writing

    async def append(
        self,
        partition: int,
        records: Iterable[tuple[bytes | None, bytes | None]],
        *,
        producer: tuple[int, int] | None = None,
    ) -> Written:
        """Append ``(key, value)`` records as one batch (``producer``: the id and epoch of the
        transaction they are part of) and wait until they are durable and, with acks=all,
        replicated to the ISR within the topic's write timeout.  Raises KafkaError with the
        replica manager's code (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR,
        REQUEST_TIMED_OUT...): the coordinator translates it for its clients."""
        name = self.topic.name
        p = self.replicas.leader_partition(name, partition)
        if producer is None:
            builder = BatchBuilder()
        else:
            builder = BatchBuilder(producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)
        now = self.clock.now_ms()
        for key, value in records:
            builder.append(now, key, value)
        acks = self.topic.acks
        try:
            info = self.replicas.append(p, bytearray(builder.build()), acks)
            await self.replicas.wait_durable(p)
        except KafkaError as exc:
            if exc.code is ErrorCode.KAFKA_STORAGE_ERROR and self.replicas.log_dirs.offline(p.log_dir):
                self._unload(partition, "its log dir is offline")
            raise
        if acks == -1 and p.log.high_watermark <= info.last_offset:
            try:
                await wait_for(p.wait_for_hw(info.last_offset + 1), self.topic.write_timeout_ms / 1000)
            except TimeoutError as exc:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the write to {name}-{partition} timed out") from exc
        return Written(partition, info.first_offset, info.last_offset)

    async def delete_records_before(self, partition: int, offset: int) -> int:
        """Move the partition's log start offset up to ``offset`` (at most its high watermark),
        as DeleteRecords does, so that the segments below it go: for a coordinator whose records
        make the older ones useless (a snapshot of the state).  Returns the new log start."""
        p = self.replicas.leader_partition(self.topic.name, partition)
        target = min(offset, p.log.high_watermark)

        def move() -> int:
            p.log.maybe_increment_log_start_offset(target)
            p.log.delete_old_segments()
            return p.log.log_start_offset

        if self.scheduler is None:
            return move()
        start: int = await self.scheduler.run_io(move)
        self.scheduler.checkpoint_soon()
        return start

    # ------------------------------------------------------------------------------------------
    # timers, on the runtime's clock

    def every(self, name: str, interval_ms: int, run: Callable[[], Awaitable[None]]) -> None:
        """Run ``run`` every ``interval_ms`` of the monotonic clock, the first time one interval
        after :meth:`start`; a failure is logged and the next run comes as planned."""
        self._add_timer(_Timer(name, interval_ms=interval_ms, periodic=run))

    def deadline(self, name: str, due: Callable[[], int | None], fire: Callable[[int], Awaitable[None]]) -> None:
        """Run ``fire(now_ms)`` whenever ``due()`` (wall-clock ms; None: nothing is due) has come;
        call :meth:`wake` after anything that may bring it forward."""
        self._add_timer(_Timer(name, due=due, fire=fire))

    def _add_timer(self, timer: _Timer) -> None:
        if self._started:
            raise RuntimeError("timers are added before the runtime starts")
        self._timers.append(timer)

    def wake(self) -> None:
        """A deadline may have moved (or the clock been moved): the deadline timers look again."""
        for t in self._timers:
            if t.due is not None:
                t.wake.set()

    async def run_due(self) -> None:
        """Run every timer that is due now, as its task would (tests on a fake clock)."""
        for t in self._timers:
            await self._fire_if_due(t)

    def _wait_ms(self, t: _Timer) -> int | None:
        """How long the timer may sleep (None: until woken).  A wall-clock deadline is looked at
        again every ``wall_recheck_ms`` of the scheduler (a real wall clock may jump)."""
        if t.due is None:
            return max(0, t.next_at - self.clock.monotonic_ms())
        recheck = self.timers.wall_recheck_ms
        due = t.due()
        if due is None:
            return recheck
        wait = max(0, due - self.clock.now_ms())
        return wait if recheck is None else min(wait, recheck)

    async def _fire_if_due(self, t: _Timer) -> None:
        async with t.running:
            try:
                if t.due is not None and t.fire is not None:
                    due = t.due()
                    now = self.clock.now_ms()
                    if due is not None and due <= now:
                        await t.fire(now)
                elif t.periodic is not None and t.interval_ms is not None and self.clock.monotonic_ms() >= t.next_at:
                    try:
                        await t.periodic()
                    finally:
                        t.next_at = self.clock.monotonic_ms() + t.interval_ms
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the %s timer of %s failed", t.name, self.topic.name)

    async def _run_timer(self, t: _Timer) -> None:
        while True:
            t.wake.clear()
            await self._fire_if_due(t)
            try:
                wait = self._wait_ms(t)
            except Exception:  # a deadline that cannot be computed: logged, looked at again soon
                log.exception("the %s timer of %s failed", t.name, self.topic.name)
                wait = _RETRY_MS
            with contextlib.suppress(TimeoutError):
                await self.timers.wait_for(t.wake.wait(), wait)


def _is_commit(batch: Batch) -> bool:
    """Whether a control batch is a transaction's COMMIT marker (anything else aborts)."""
    records = batch.records
    if not records or records[0].key is None or len(records[0].key) < 4:
        return False
    return parse_control_key(records[0].key)[1] == int(ControlRecordType.COMMIT)
