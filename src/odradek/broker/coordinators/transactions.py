"""The transaction coordinator (KIP-98) on the coordinator runtime: runs
:mod:`odradek.cluster.transactions` and carries out what it decides.

A transactional id belongs to partition ``abs(javaHash(id)) % transaction.state.log.num.partitions``
of ``__transaction_state`` (compacted; created on the first FindCoordinator for a transaction) and
is served by that partition's leader.  Every state change is a record there (Kafka's
``TransactionLogKey``/``TransactionLogValue``) written with acks=all before the change takes
effect; what this module supplies to the runtime is the record handling of one partition
(:class:`TxnShard`): when this broker becomes leader of a partition the runtime replays it into a
shard, which finishes the transactions it finds prepared (their markers may not all be written).

EndTxn writes PrepareCommit/PrepareAbort and answers; the markers then go to the leaders of the
transaction's partitions (WriteTxnMarkers; this broker's own partitions directly), retried until
each is written, and CompleteCommit/CompleteAbort is written last.  A producer's next
AddPartitionsToTxn usually arrives while that is still going on; rather than answering the
retriable CONCURRENT_TRANSACTIONS at once (librdkafka and the Java client back off ~20 ms
before retrying: with eight busy producers a quarter of the transactions paid that, against a
median commit of ~4 ms), it waits for the completion, up to ``COMPLETION_WAIT_S``.  A timer
aborts transactions open longer than their timeout, bumping the producer epoch (the old
producer is fenced).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek._timeouts import wait_for
from odradek.broker.channel import BrokerChannel
from odradek.broker.coordinators.record_versions import check_value_version
from odradek.broker.coordinators.runtime import (
    CoordinatorPorts,
    CoordinatorRecord,
    CoordinatorRuntime,
    CoordinatorTopic,
)
from odradek.broker.producer_ids import ProducerIdManager
from odradek.broker.topics import OFFSETS_TOPIC, TRANSACTION_TOPIC
from odradek.cluster.features import TRANSACTION_VERSION, finalized_levels
from odradek.cluster.transactions import (
    MAX_EPOCH,
    TxnMetadata,
    TxnState,
    begin_transition,
    bumped,
    check_producer,
    completed,
    end_transition,
    end_v2,
    new_transactional_id,
    prepare_add_partitions,
    prepare_end,
    prepare_end_bumped,
    prepare_fenced_abort,
    prepare_init,
    restored,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from odradek.protocol.messages.coordinator import TransactionLogKey, TransactionLogValue
from odradek.protocol.messages.write_txn_markers import WriteTxnMarkersRequest

if TYPE_CHECKING:
    from odradek.broker.replica import ReplicaManager
    from odradek.broker.replication import Replication
    from odradek.cluster.metadata import MetadataImage
    from odradek.settings import TransactionSettings

__all__ = [
    "WRITE_TXN_MARKERS_VERSION",
    "MarkerWriter",
    "TopicPartition",
    "TransactionCoordinator",
    "TxnDescription",
    "TxnShard",
    "transaction_topic",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_version = struct.Struct(">h")
WRITE_TXN_MARKERS_VERSION = 1
#: the batched, verify-only form of AddPartitionsToTxn (KIP-890), broker to coordinator
ADD_PARTITIONS_VERIFY_VERSION = 4
#: the implicit add of transactions v2 (KIP-890 part 2): version 5 tells the coordinator so
ADD_PARTITIONS_IMPLICIT_VERSION = 5
#: verification answers that say "not now" rather than "not in the transaction": the partition
#: leader answers NOT_ENOUGH_REPLICAS for them, which every producer retries (as Kafka does)
_RETRY_VERIFICATION = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
})
#: how long AddPartitionsToTxn waits for the previous transaction of its id to complete before
#: it answers CONCURRENT_TRANSACTIONS (markers that cannot be written yet: a leader is missing)
COMPLETION_WAIT_S = 1.0

_KEY_VERSION = 0

# append errors of the transaction log, as the coordinator answers them (Kafka's mapping)
_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}

#: writes markers into partitions this broker leads: (producer id, epoch, commit, coordinator
#: epoch, partitions) -> an error per partition
LocalMarkers = Callable[[int, int, bool, int, list[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]]


def transaction_topic(settings: TransactionSettings, request_timeout_ms: int, replication: Replication) -> CoordinatorTopic:
    """``__transaction_state`` as the transaction coordinator writes it: every state change
    with acks=all, within ``request.timeout.ms``."""
    return CoordinatorTopic(
        TRANSACTION_TOPIC,
        settings.state_log_num_partitions,
        replication.transaction_log_replication_factor,
        acks=-1,
        write_timeout_ms=request_timeout_ms,
    )


def txn_key(transactional_id: str) -> bytes:
    return _version.pack(_KEY_VERSION) + TransactionLogKey(transactional_id=transactional_id).encode(_KEY_VERSION)


def txn_value(m: TxnMetadata, server_tv: int = 0) -> bytes:
    """The record of ``m``: TransactionLogValue v1 (flexible, with the client's transaction
    version, the previous and next producer ids) once the cluster finalized transaction.version
    1 or more, v0 before, as Kafka writes it."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(m.partitions):
        by_topic.setdefault(t, []).append(p)
    V = TransactionLogValue
    version = 1 if server_tv >= 1 else 0
    value = V(
        producer_id=m.producer_id,
        producer_epoch=m.producer_epoch,
        transaction_timeout_ms=m.timeout_ms,
        transaction_status=int(m.state),
        transaction_partitions=[V.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
        transaction_last_update_timestamp_ms=m.update_ms,
        transaction_start_timestamp_ms=m.start_ms,
    )
    if version >= 1:
        value.client_transaction_version = m.client_tv
        value.previous_producer_id = m.last_producer_id
        value.next_producer_id = m.next_producer_id
    return _version.pack(version) + value.encode(version)


def decode_txn(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None] | None:
    """A record of ``__transaction_state``: (transactional id, metadata or None for a
    tombstone); None for a record of another kind."""
    if len(key) < 2 or _version.unpack_from(key, 0)[0] != _KEY_VERSION:
        return None
    txn_id = TransactionLogKey.decode_from(key, 2, _KEY_VERSION)[0].transactional_id
    if value is None:
        return txn_id, None
    (vv,) = _version.unpack_from(value, 0)
    check_value_version("TransactionLogValue", vv, TransactionLogValue.VALID_VERSIONS)
    v = TransactionLogValue.decode_from(value, 2, vv)[0]
    partitions = {(t.topic, p) for t in (v.transaction_partitions or []) for p in t.partition_ids}
    meta = restored(
        txn_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, TxnState(v.transaction_status),
        partitions, v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms,
        previous_producer_id=v.previous_producer_id, next_producer_id=v.next_producer_id,
        client_tv=v.client_transaction_version,
    )
    return txn_id, meta


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """What DescribeTransactions / ListTransactions report of one transactional id."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: tuple[TopicPartition, ...]


class TxnShard:
    """The transactional ids of one ``__transaction_state`` partition, and the tasks writing
    the markers of their prepared transactions."""

    def __init__(self, partition: int, complete_later: Callable[[TxnShard, str, TxnMetadata], None]) -> None:
        self.partition = partition
        self.txns: dict[str, TxnMetadata] = {}
        self.completing: dict[str, asyncio.Task[None]] = {}
        self._complete_later = complete_later

    def replay(self, record: CoordinatorRecord) -> None:
        if record.key is None:
            return
        decoded = decode_txn(record.key, record.value)
        if decoded is None:
            return
        txn_id, meta = decoded
        if meta is None:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = meta

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        return None  # the transaction log is not written in transactions

    def loaded(self, now_ms: int) -> None:
        # prepared transactions whose markers may be missing: finish them (Kafka does the same)
        for txn_id, meta in list(self.txns.items()):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._complete_later(self, txn_id, meta)

    def unloaded(self) -> None:
        """Another broker coordinates these ids now: it finishes their transactions."""
        for task in self.completing.values():
            task.cancel()
        self.txns.clear()


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        settings: TransactionSettings,
        ports: CoordinatorPorts,
        producer_ids: ProducerIdManager,
        local_markers: LocalMarkers,
        channel_factory: Callable[..., BrokerChannel] | None = None,
        inter_broker_listener: str | None = None,
        *,
        request_timeout_ms: int,
        offsets_partition: Callable[[str], int],
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.request_timeout_ms = request_timeout_ms
        self.clock = ports.clock
        self.replicas = ports.replicas
        self.topics = ports.topics
        self.producer_ids = producer_ids
        self.local_markers = local_markers
        self.channel_factory = channel_factory
        self.inter_broker_listener = inter_broker_listener
        self.max_timeout_ms = settings.max_timeout_ms
        #: a group's ``__consumer_offsets`` partition, as the group coordinator routes it
        self._offsets_partition = offsets_partition
        self.runtime = CoordinatorRuntime(
            transaction_topic(settings, request_timeout_ms, ports.replication), self._new_shard, ports
        )
        self.runtime.every(
            "txn-timeouts", settings.abort_timed_out_transaction_cleanup_interval_ms, self._abort_timed_out
        )
        self._channels: dict[int, BrokerChannel] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _new_shard(self, partition: int) -> TxnShard:
        return TxnShard(partition, self._complete_later)

    # ------------------------------------------------------------------------------------------
    # lifecycle

    def start(self) -> None:
        self.runtime.start()

    async def stop(self) -> None:
        completing = [t for shard in self.runtime.shards() for t in shard.completing.values()]
        await self.runtime.stop()  # unloads every shard: the marker tasks are cancelled
        for t in completing:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for ch in self._channels.values():
            with contextlib.suppress(Exception):
                await ch.close()

    def now(self) -> int:
        return self.clock.now_ms()

    def _server_tv(self) -> int:
        """The cluster's finalized transaction.version: the record version written (v1 from 1),
        and how a fenced transaction is aborted (2: the epoch bumped again, as a v2 end does)."""
        return finalized_levels(self.topics.image.features).get(TRANSACTION_VERSION, 0)

    def on_hosting_changed(self, image: MetadataImage | None) -> None:
        self.runtime.on_hosting_changed(image)

    # ------------------------------------------------------------------------------------------
    # routing

    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` on first use (Kafka does it on the first FindCoordinator)."""
        await self.runtime.ensure_topic()

    def check(self, transactional_id: str) -> TxnShard:
        """The shard of ``transactional_id``, if this broker serves it now."""
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
        return self.runtime.shard(transactional_id, transactional_id)

    def metadata(self, transactional_id: str) -> TxnMetadata | None:
        """The current metadata of ``transactional_id`` if its partition is loaded here."""
        shard = self.runtime.shard_at(self.partition_for(transactional_id))
        return None if shard is None else shard.txns.get(transactional_id)

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------------------------------------
    # requests

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """InitProducerId with a transactional id: (producer id, epoch) after fencing older
        producers of the id; CONCURRENT_TRANSACTIONS while an open transaction is aborted first."""
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            raise KafkaError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms {timeout_ms} is not in (0, transaction.max.timeout.ms={self.max_timeout_ms}]",
            )
        shard = self.check(transactional_id)
        async with self._lock(transactional_id):
            shard = self._current(shard, transactional_id)
            meta = shard.txns.get(transactional_id)
            now = self.now()
            if meta is None or meta.state is TxnState.DEAD:
                pid = await self.producer_ids.allocate()
                meta = new_transactional_id(transactional_id, pid, timeout_ms, now)
                shard.txns[transactional_id] = meta
            if meta.pending is not None:
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, f"a change to {meta.pending.title} is being written")
            if producer_id >= 0:
                # KIP-360: a producer that knows its id and epoch asks for a bump; a retry of a
                # bump already made gets the same answer
                if (producer_id, producer_epoch) == (meta.last_producer_id, meta.last_producer_epoch) and (
                    meta.state.completed
                ):
                    return meta.producer_id, meta.producer_epoch
                if producer_id != meta.producer_id or producer_epoch != meta.producer_epoch:
                    raise KafkaError(ErrorCode.PRODUCER_FENCED, "the producer id and epoch are not the current ones")
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "the transaction's markers are being written")
            if meta.state is TxnState.ONGOING:
                # fence the current producer and abort its transaction; the caller retries
                aborting = prepare_fenced_abort(await self._fence(meta), now)
                await self._transition(shard, transactional_id, meta, aborting)
                self._complete_later(shard, transactional_id, aborting)
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "an open transaction of this id is being aborted")
            fresh = prepare_init(await self._bump(meta), timeout_ms, now)
            await self._transition(shard, transactional_id, meta, fresh)
            return fresh.producer_id, fresh.producer_epoch

    async def _bump(self, meta: TxnMetadata) -> TxnMetadata:
        if meta.producer_epoch >= MAX_EPOCH - 1:
            return bumped(meta, await self.producer_ids.allocate())
        return bumped(meta, None)

    async def _fence(self, meta: TxnMetadata) -> TxnMetadata:
        """The epoch an open transaction is aborted with when its producer is fenced (a newer
        producer's InitProducerId, or its timeout): bumped, and with transactions v2 bumped again
        (Kafka's fence then v2 abort), so that the fenced producer's own end, one epoch below,
        is not taken for a retry of this abort."""
        fenced = await self._bump(meta)
        if self._server_tv() >= 2:
            fenced = await self._bump(fenced)
        return fenced

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition],
        *, verify_only: bool = False, client_tv: int = 0,
    ) -> None:
        """AddPartitionsToTxn: ``partitions`` join the producer's transaction (which starts if
        none is open), or, ``verify_only`` (KIP-890's check), must already be in it.
        ``client_tv`` 2: the implicit add of transactions v2 (a partition leader's, for a
        Produce v12+ or a TxnOffsetCommit v5+)."""
        shard = self.check(transactional_id)
        wanted = set(partitions)
        if not verify_only:
            await self._completed(shard, transactional_id)
        async with self._lock(transactional_id):
            shard = self._current(shard, transactional_id)
            meta = shard.txns.get(transactional_id)
            check_producer(meta, producer_id, producer_epoch)
            assert meta is not None
            if verify_only:
                if meta.state is not TxnState.ONGOING or not wanted <= meta.partitions:
                    raise KafkaError(ErrorCode.INVALID_TXN_STATE, "the partitions are not in the ongoing transaction")
                return
            target = prepare_add_partitions(meta, wanted, self.now(), client_tv)
            if target is not None:
                await self._transition(shard, transactional_id, meta, target)

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition],
        *, add: bool = False,
    ) -> ErrorCode:
        """KIP-890's server-side defence, for a partition leader about to append a transactional
        batch that would open a transaction on its partitions: whether the coordinator of
        ``transactional_id`` (this broker, or the leader of its ``__transaction_state``
        partition, asked with AddPartitionsToTxn verify-only) has them in that producer's
        ongoing transaction.  A late batch of an aborted or timed-out transaction is refused
        (INVALID_TXN_STATE, or the fencing error) instead of hanging the partition's LSO.

        ``add``: transactions v2 (KIP-890 part 2) instead: the coordinator adds the partitions to
        the producer's transaction (AddPartitionsToTxn v5 with verify_only false, broker to
        broker), starting one if none is open."""
        state = self.topics.image.partition(TRANSACTION_TOPIC, self.partition_for(transactional_id))
        if state is None or state.leader < 0:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif state.leader == self.broker_id:
            try:
                await self.add_partitions(
                    transactional_id, producer_id, producer_epoch, partitions, verify_only=not add,
                    client_tv=2 if add else 0,
                )
                code = ErrorCode.NONE
            except KafkaError as exc:
                code = exc.code
        else:
            code = await self._remote_verify(
                state.leader, transactional_id, producer_id, producer_epoch, partitions, add=add
            )
        if code in _RETRY_VERIFICATION:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        if code == ErrorCode.PRODUCER_FENCED:  # what a partition answers a produce of an old epoch
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return code

    async def _remote_verify(
        self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: list[TopicPartition], *, add: bool = False,
    ) -> ErrorCode:
        channel = self._channel(coordinator)
        if channel is None:
            return ErrorCode.BROKER_NOT_AVAILABLE
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        Q = AddPartitionsToTxnRequest
        request = Q(transactions=[Q.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add, topics=[Q.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )])
        try:
            response: Any = await channel.request(request, ADD_PARTITIONS_IMPLICIT_VERSION if add else ADD_PARTITIONS_VERIFY_VERSION)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        except (ConnectionError, OSError):
            return ErrorCode.NETWORK_EXCEPTION
        if response.error_code:
            return ErrorCode(response.error_code)
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for part in topic.results_by_partition:
                    if part.partition_error_code:
                        return ErrorCode(part.partition_error_code)
        return ErrorCode.NONE

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        await self.add_partitions(
            transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, self._offsets_partition(group_id))]
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *, client_tv: int = 0
    ) -> tuple[int, int]:
        """EndTxn: the transaction's Prepare state is written (its markers follow).  Returns the
        producer id and epoch the producer continues with: with transactions v2 (``client_tv``
        2, EndTxn v5) the epoch is bumped by every end (a new producer id at epoch 0 once it is
        used up); before, (-1, -1) as Kafka answers."""
        shard = self.check(transactional_id)
        async with self._lock(transactional_id):
            shard = self._current(shard, transactional_id)
            meta = shard.txns.get(transactional_id)
            if client_tv >= 2:
                decision = end_v2(meta, producer_id, producer_epoch, commit)
                assert meta is not None
                if decision is None:  # a retry of an end already made
                    return meta.producer_id, meta.producer_epoch
                next_pid = await self.producer_ids.allocate() if meta.producer_epoch >= MAX_EPOCH else -1
                target = prepare_end_bumped(meta, commit, self.now(), next_pid, partitions_added=decision)
            else:
                check_producer(meta, producer_id, producer_epoch)
                assert meta is not None
                prepared = prepare_end(meta, commit, self.now())
                if prepared is None:
                    return -1, -1
                target = prepared
            await self._transition(shard, transactional_id, meta, target)
        self._complete_later(shard, transactional_id, target)
        if client_tv < 2:
            return -1, -1
        if target.next_producer_id >= 0:
            return target.next_producer_id, 0
        return target.producer_id, target.producer_epoch

    def describe(self, transactional_id: str) -> TxnDescription:
        meta = self.check(transactional_id).txns.get(transactional_id)
        if meta is None:
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {transactional_id}")
        return _describe(meta)

    def list_all(self) -> list[TxnDescription]:
        """Every transactional id of the partitions loaded here."""
        return [_describe(m) for shard in self.runtime.shards() for m in list(shard.txns.values())]

    # ------------------------------------------------------------------------------------------
    # writing the log

    def _current(self, shard: TxnShard, transactional_id: str) -> TxnShard:
        """``shard`` if it is still the one loaded (checked again after waiting for the id's
        lock: the partition may have moved meanwhile), else what :meth:`check` says now."""
        return shard if self.runtime.shard_at(shard.partition) is shard else self.check(transactional_id)

    async def _transition(self, shard: TxnShard, transactional_id: str, current: TxnMetadata, target: TxnMetadata) -> None:
        """Write ``target`` to the transaction log (acks=all), then make it the state."""
        begin_transition(current, target)
        try:
            await self.runtime.append(
                shard.partition, [(txn_key(transactional_id), txn_value(target, self._server_tv()))]
            )
        except KafkaError as exc:
            code = _WRITE_ERRORS.get(exc.code, exc.code)
            raise KafkaError(code, f"the transaction log write failed: {exc.message or exc.code.name}") from exc
        finally:
            end_transition(current, target)
        if shard.txns.get(transactional_id) is current:
            shard.txns[transactional_id] = target

    # ------------------------------------------------------------------------------------------
    # markers

    async def _completed(self, shard: TxnShard, transactional_id: str) -> None:
        """Wait, up to ``COMPLETION_WAIT_S``, for the markers and the Complete state of the
        previous transaction of ``transactional_id`` if they are being written.  The writing
        goes on whatever happens to the waiter."""
        task = shard.completing.get(transactional_id)
        if task is not None and not task.done():
            await asyncio.wait((task,), timeout=COMPLETION_WAIT_S)

    def _complete_later(self, shard: TxnShard, transactional_id: str, prepared: TxnMetadata) -> None:
        old = shard.completing.get(transactional_id)
        if old is not None and not old.done():
            return
        shard.completing[transactional_id] = asyncio.get_running_loop().create_task(
            self._complete(shard, transactional_id, prepared), name=f"txn-markers-{transactional_id}"
        )

    async def _complete(self, shard: TxnShard, transactional_id: str, prepared: TxnMetadata) -> None:
        """Write the markers of a prepared transaction, then its Complete state."""
        commit = prepared.state is TxnState.PREPARE_COMMIT
        backoff = 0.05
        remaining = sorted(prepared.partitions)
        try:
            while remaining:
                local = self.runtime.leader(shard.partition)
                if local is None:
                    return  # another broker coordinates it now; it finishes the transaction
                errors = await self._send_markers(
                    prepared.producer_id, prepared.producer_epoch, commit, local.leader_epoch, remaining
                )
                failed = [tp for tp in remaining if errors.get(tp, ErrorCode.NONE) is not ErrorCode.NONE]
                gone = [tp for tp in failed if errors[tp] in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,)
                        and tp[0] not in self.topics.image.topics]
                for tp in gone:  # a deleted topic gets no marker
                    failed.remove(tp)
                if failed:
                    log.debug("transaction %s: markers not yet written to %s (%s); retrying", transactional_id,
                              failed, {tp: errors[tp].name for tp in failed})
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                remaining = failed
            async with self._lock(transactional_id):
                meta = shard.txns.get(transactional_id)
                if meta is None or meta.state is not prepared.state or meta.producer_epoch != prepared.producer_epoch:
                    return
                while True:
                    try:
                        await self._transition(shard, transactional_id, meta, completed(meta, self.now()))
                        return
                    except KafkaError as exc:
                        if exc.code is ErrorCode.NOT_COORDINATOR:
                            return
                        log.warning("transaction %s: completing failed (%s); retrying", transactional_id, exc)
                        await asyncio.sleep(1.0)
        finally:
            if shard.completing.get(transactional_id) is asyncio.current_task():
                shard.completing.pop(transactional_id, None)

    async def _send_markers(
        self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        image = self.topics.image
        by_leader: dict[int, list[TopicPartition]] = {}
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            state = image.partition(*tp)
            if state is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif state.leader < 0:
                errors[tp] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(state.leader, []).append(tp)
        calls: list[Awaitable[dict[TopicPartition, ErrorCode]]] = []
        for leader, tps in by_leader.items():
            if leader == self.broker_id:
                calls.append(self.local_markers(producer_id, epoch, commit, coordinator_epoch, tps))
            else:
                calls.append(self._remote_markers(leader, producer_id, epoch, commit, coordinator_epoch, tps))
        results: list[Any]
        if len(calls) == 1:  # one leader (a single broker): no tasks for gather to make
            try:
                results = [await calls[0]]
            except Exception as exc:
                results = [exc]
        else:
            results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                log.debug("WriteTxnMarkers failed: %s", result)
                continue
            errors.update(result)
        for tp in partitions:
            errors.setdefault(tp, ErrorCode.NETWORK_EXCEPTION)
        return errors

    async def _remote_markers(
        self, leader: int, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        channel = self._channel(leader)
        if channel is None:
            return dict.fromkeys(partitions, ErrorCode.BROKER_NOT_AVAILABLE)
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        R = WriteTxnMarkersRequest
        request = R(markers=[R.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
            topics=[R.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
        )])
        try:
            response: Any = await channel.request(request, WRITE_TXN_MARKERS_VERSION)
        except (ConnectionError, TimeoutError, OSError) as exc:
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION if not isinstance(exc, TimeoutError)
                                 else ErrorCode.REQUEST_TIMED_OUT)
        out: dict[TopicPartition, ErrorCode] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    out[(topic.name, part.partition_index)] = ErrorCode(part.error_code)
        return out

    def _channel(self, broker_id: int) -> BrokerChannel | None:
        ch = self._channels.get(broker_id)
        if ch is not None:
            return ch
        if self.channel_factory is None:
            return None
        info = self.topics.image.brokers.get(broker_id)
        ep = None
        if info is not None:
            ep = (info.endpoint(self.inter_broker_listener) if self.inter_broker_listener else None) or info.endpoint()
        if ep is None:
            return None
        timeout = self.request_timeout_ms / 1000
        ch = self._channels[broker_id] = self.channel_factory(
            ep.host, ep.port, client_id=f"txn-coordinator-{self.broker_id}", timeout=timeout
        )
        return ch

    # ------------------------------------------------------------------------------------------
    # timeouts

    async def _abort_timed_out(self) -> None:
        """Abort the transactions open longer than their timeout (every
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms``)."""
        now = self.now()
        expired = [
            txn_id
            for shard in self.runtime.shards()
            for txn_id, meta in list(shard.txns.items())
            if meta.state is TxnState.ONGOING and meta.pending is None
            and meta.start_ms >= 0 and now - meta.start_ms > meta.timeout_ms
        ]
        for txn_id in expired:
            try:
                await self._abort_expired(txn_id)
            except KafkaError as exc:
                log.warning("transaction %s timed out but could not be aborted yet: %s", txn_id, exc)
            except Exception:
                log.exception("aborting the timed-out transaction %s failed", txn_id)

    async def _abort_expired(self, transactional_id: str) -> None:
        shard = self.check(transactional_id)
        async with self._lock(transactional_id):
            shard = self._current(shard, transactional_id)
            meta = shard.txns.get(transactional_id)
            if meta is None or meta.state is not TxnState.ONGOING or meta.pending is not None:
                return
            log.info(
                "transaction %s of producer %d (epoch %d) is open longer than its timeout of %d ms: aborting it",
                transactional_id, meta.producer_id, meta.producer_epoch, meta.timeout_ms,
            )
            aborting = prepare_fenced_abort(await self._fence(meta), self.now())
            await self._transition(shard, transactional_id, meta, aborting)
        self._complete_later(shard, transactional_id, aborting)


class MarkerWriter:
    """Writes transaction markers into partitions this broker leads: WriteTxnMarkers from a
    coordinator, or this broker's own coordinator directly.  A marker is appended with acks=all
    (it must survive a leader change); one in ``__consumer_offsets`` also decides the offsets
    the transaction committed there (``on_offsets_marker``)."""

    def __init__(
        self, replicas: ReplicaManager, timeout_ms: int, on_offsets_marker: Callable[[int, int, bool], None]
    ) -> None:
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.on_offsets_marker = on_offsets_marker

    async def write(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        if len(partitions) == 1:  # no task for gather to make
            return {partitions[0]: await self._one(partitions[0], producer_id, producer_epoch, commit, coordinator_epoch)}
        results = await asyncio.gather(
            *(self._one(tp, producer_id, producer_epoch, commit, coordinator_epoch) for tp in partitions)
        )
        return dict(zip(partitions, results, strict=True))

    async def _one(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> ErrorCode:
        try:
            p = self.replicas.leader_partition(*tp)
            info = self.replicas.append_marker(p, producer_id, producer_epoch, commit, coordinator_epoch)
            await self.replicas.wait_durable(p)
            if p.log.high_watermark <= info.last_offset:
                try:
                    await wait_for(p.wait_for_hw(info.last_offset + 1), self.timeout_ms / 1000)
                except TimeoutError:
                    return ErrorCode.REQUEST_TIMED_OUT
        except KafkaError as exc:
            return exc.code
        if tp[0] == OFFSETS_TOPIC:
            self.on_offsets_marker(producer_id, tp[1], commit)
        return ErrorCode.NONE


def _describe(m: TxnMetadata) -> TxnDescription:
    return TxnDescription(m.transactional_id, m.state.title, m.producer_id, m.producer_epoch, m.timeout_ms,
                          m.start_ms, tuple(sorted(m.partitions)))
