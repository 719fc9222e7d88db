"""The transactional producer's side of KIP-98: the coordinator, InitProducerId with a
transactional id, AddPartitionsToTxn before a partition's first batch, AddOffsetsToTxn and
TxnOffsetCommit for ``send_offsets_to_transaction``, EndTxn.

States (Kafka's TransactionManager): UNINITIALIZED -> READY (init_transactions) -> IN_TRANSACTION
(begin) -> COMMITTING/ABORTING -> READY.  A failed send inside a transaction makes it
ABORTABLE_ERROR (commit refused, abort allowed); a fenced producer or an authorization failure
is FATAL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from odradek.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from odradek.protocol.messages.end_txn import EndTxnRequest
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.protocol.messages.produce import ProduceRequest
from odradek.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from odradek.transport import GROUP, TRANSACTION, TXN_V2_VERSIONS, AsyncBrokerConnection, AsyncCluster

if TYPE_CHECKING:
    from odradek.client._accumulator import RecordAccumulator
    from odradek.client._sender import Sender

__all__ = ["ProducerTransactions", "TxnManager", "TxnState"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: errors after which the producer cannot go on (Kafka's fatal transactional errors)
_FATAL = {
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_TXN_STATE,
    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
}
#: retried, after finding the coordinator again for the NOT_COORDINATOR kind
_RETRY = {
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NETWORK_EXCEPTION,
}


class TxnState(Enum):
    """A transactional producer's state, as Kafka's TransactionManager has them (the transitions are in the
    module docstring)."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL = "fatal error"


class TxnManager:
    """One ``transactional.id``'s transactions: its coordinator, producer id and epoch, state, the partitions
    and offsets in the open transaction, and the requests that change them."""

    def __init__(self, cluster: AsyncCluster, transactional_id: str, timeout_ms: int, retry_backoff: float) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.retry_backoff = retry_backoff
        self.state = TxnState.UNINITIALIZED
        self.error: KafkaError | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        #: partitions the coordinator has in the current transaction
        self.partitions: set[TopicPartition] = set()
        #: AddOffsetsToTxn made the offsets partition part of the transaction
        self.offsets_added = False
        self._coordinator: AsyncBrokerConnection | None = None
        self._group_coordinators: dict[str, AsyncBrokerConnection] = {}
        #: AddPartitionsToTxn started early (:meth:`add_early`), by partition, until it completes
        self._adding: dict[TopicPartition, asyncio.Task[None]] = {}
        #: transactions v2 (KIP-890 part 2), chosen at init_transactions when the coordinator
        #: finalizes ``transaction.version`` >= 2 and speaks EndTxn v5: Produce v12 adds a partition
        #: by itself and TxnOffsetCommit v5 the group's (no AddPartitionsToTxn/AddOffsetsToTxn),
        #: and EndTxn v5 answers with the epoch bumped for the next transaction
        self.v2 = False

    # -- state checks (the faces call these before they act) -------------------------------------
    def require(self, *states: TxnState, action: str) -> None:
        """Raise unless the state is one of ``states``: the stored fatal error, the abortable error (abort
        first), or INVALID_TXN_STATE naming ``action``."""
        if self.state in states:
            return
        if self.state is TxnState.FATAL and self.error is not None:
            raise self.error
        if self.state is TxnState.ABORTABLE_ERROR and self.error is not None and TxnState.ABORTING not in states:
            raise KafkaError(self.error.code, f"the transaction must be aborted: {self.error.message or self.error.code.name}")
        raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"cannot {action} in state {self.state.value}")

    def fail(self, exc: KafkaError) -> None:
        """A send of the transaction failed: abortable, or fatal for the fencing kinds."""
        if self.state is TxnState.FATAL:
            return
        self.error = exc
        self.state = TxnState.FATAL if exc.code in _FATAL else TxnState.ABORTABLE_ERROR

    # -- coordinator ------------------------------------------------------------------------------
    async def _find(self, key: str, key_type: int, deadline: float) -> AsyncBrokerConnection:
        return await self.cluster.coordinator(key, key_type, deadline=deadline)

    async def _call(self, build: Any, *, group: str | None = None, deadline: float) -> Any:
        """Send a request to the transaction (or ``group``'s) coordinator, retrying what is
        retriable until ``deadline``; ``build(version)`` makes the request, the response's
        error is checked by the caller."""
        while True:
            try:
                if group is None:
                    if self._coordinator is None or self._coordinator.closed:
                        self._coordinator = await self._find(self.transactional_id, TRANSACTION, deadline)
                    conn = self._coordinator
                else:
                    conn = self._group_coordinators.get(group)  # type: ignore[assignment]
                    if conn is None or conn.closed:
                        conn = self._group_coordinators[group] = await self._find(group, GROUP, deadline)
                request = build(None)
                v = conn.version_for(type(request), caps=TXN_V2_VERSIONS if self.v2 else None)
                if isinstance(request, AddPartitionsToTxnRequest):
                    v = min(v, 3)  # v4+ is the brokers' batched form (KIP-890)
                return await conn.request(build(v), v)
            except (ConnectionError, TimeoutError) as exc:
                failure: BaseException = exc
            except KafkaError as exc:
                if exc.code not in _RETRY:
                    raise
                failure = exc
            self._forget(group)
            if time.monotonic() > deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"transaction request timed out: {failure}")
            await asyncio.sleep(self.retry_backoff)

    def _forget(self, group: str | None) -> None:
        if group is None:
            self._coordinator = None
        else:
            self._group_coordinators.pop(group, None)

    async def _retrying(self, send: Any, check: Any, *, group: str | None = None, timeout: float) -> Any:
        """``send`` until ``check(response)`` gives no retriable error."""
        deadline = time.monotonic() + timeout
        while True:
            resp = await self._call(send, group=group, deadline=deadline)
            code = check(resp)
            if code is ErrorCode.NONE:
                return resp
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                self._forget(group)
            if code not in _RETRY or time.monotonic() > deadline:
                raise KafkaError(code, f"transactional id {self.transactional_id}")
            await asyncio.sleep(self.retry_backoff)

    # -- the API ----------------------------------------------------------------------------------
    async def init(self, timeout: float) -> tuple[int, int]:
        """InitProducerId with the transactional id: fences older producers of it; an open
        transaction of theirs is aborted first (CONCURRENT_TRANSACTIONS, retried)."""
        def send(v: int | None) -> InitProducerIdRequest:
            req = InitProducerIdRequest(transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms)
            if v is not None and v >= 3 and self.producer_id >= 0:
                req.producer_id, req.producer_epoch = self.producer_id, self.producer_epoch
            return req

        try:
            resp = await self._retrying(send, lambda r: ErrorCode.of(r.error_code), timeout=timeout)
        except KafkaError as exc:
            if exc.code in _FATAL:
                self.fail(exc)
            raise
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self.state = TxnState.READY
        self.partitions.clear()
        self.offsets_added = False
        self.v2 = self._supports_v2()
        log.debug("transactional id %s: producer id %d epoch %d, transactions v%d", self.transactional_id,
                  self.producer_id, self.producer_epoch, 2 if self.v2 else 1)
        return self.producer_id, self.producer_epoch

    def _supports_v2(self) -> bool:
        """Whether the coordinator finalizes ``transaction.version`` >= 2 and speaks EndTxn v5 and
        Produce v12 (as Kafka's producer decides from the ApiVersions answers)."""
        conn = self._coordinator
        if conn is None or conn.feature_level("transaction.version") < 2:
            return False
        try:
            return (conn.version_for(EndTxnRequest, caps=TXN_V2_VERSIONS) >= 5
                    and conn.version_for(ProduceRequest, caps=TXN_V2_VERSIONS) >= 12)
        except KafkaError:
            return False

    def add_early(self, tps: Iterable[TopicPartition], timeout: float) -> None:
        """Start AddPartitionsToTxn for partitions that got their first records of the
        transaction, as the Java client does: the round trip overlaps the batches filling up
        instead of delaying their send (:meth:`add_partitions` waits for it).  Its failure is
        the transaction's (:meth:`fail`), and the batches waiting for it get it."""
        if self.state is not TxnState.IN_TRANSACTION:
            return
        if self.v2:
            return  # Produce v12 adds them: nothing to do before their batches go out
        new = [tp for tp in tps if tp not in self.partitions and tp not in self._adding]
        if not new:
            return
        task = asyncio.get_running_loop().create_task(self._add(new, timeout))
        for tp in new:
            self._adding[tp] = task
        task.add_done_callback(lambda t: self._added(new, t))

    def _added(self, tps: list[TopicPartition], task: asyncio.Task[None]) -> None:
        for tp in tps:
            if self._adding.get(tp) is task:
                del self._adding[tp]
        if not task.cancelled():
            task.exception()  # retrieved here: whoever needs the partitions awaits the task

    async def settle(self) -> None:
        """Wait for the AddPartitionsToTxn started early (EndTxn must not overtake them)."""
        if self._adding:
            await asyncio.gather(*set(self._adding.values()), return_exceptions=True)

    async def add_partitions(self, tps: Iterable[TopicPartition], timeout: float) -> None:
        """Have the coordinator add ``tps`` to the transaction (before their first batch goes
        out); waits for those started early, and raises their failure."""
        tps = set(tps)
        if self.v2:
            # Produce v12 adds them; from here the transaction is the broker's to end (EndTxn)
            self.partitions.update(tps)
            return
        early = {self._adding[tp] for tp in tps if tp in self._adding}
        if early:
            await asyncio.gather(*early)
        await self._add(tps, timeout)

    async def _add(self, tps: Iterable[TopicPartition], timeout: float) -> None:
        wanted = sorted(set(tps) - self.partitions)
        if not wanted:
            return
        by_topic: dict[str, list[int]] = {}
        for t, p in wanted:
            by_topic.setdefault(t, []).append(p)
        R = AddPartitionsToTxnRequest

        def send(_v: int | None) -> AddPartitionsToTxnRequest:
            return R(
                v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            )

        def check(resp: Any) -> ErrorCode:
            results = resp.results_by_topic_v3_and_below or []
            codes = [ErrorCode.of(p.partition_error_code) for t in results for p in t.results_by_partition]
            bad = [c for c in codes if c is not ErrorCode.NONE and c is not ErrorCode.OPERATION_NOT_ATTEMPTED]
            return bad[0] if bad else ErrorCode.NONE

        try:
            await self._retrying(send, check, timeout=timeout)
        except KafkaError as exc:
            self.fail(exc)
            raise
        self.partitions.update(wanted)

    async def send_offsets(
        self, offsets: dict[TopicPartition, int], group_id: str, generation_id: int, member_id: str,
        group_instance_id: str | None, timeout: float,
    ) -> None:
        """Put a consumer group's offsets in the transaction: AddOffsetsToTxn then TxnOffsetCommit
        (TxnOffsetCommit alone with transactions v2); a failure makes the transaction abortable or fatal."""
        def add(_v: int | None) -> AddOffsetsToTxnRequest:
            return AddOffsetsToTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                          producer_epoch=self.producer_epoch, group_id=group_id)

        T = TxnOffsetCommitRequest
        by_topic: dict[str, list[Any]] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(T.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o))

        def commit(_v: int | None) -> TxnOffsetCommitRequest:
            return T(transactional_id=self.transactional_id, group_id=group_id, producer_id=self.producer_id,
                     producer_epoch=self.producer_epoch, generation_id_or_member_epoch=generation_id, member_id=member_id,
                     group_instance_id=group_instance_id,
                     topics=[T.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        def commit_error(resp: Any) -> ErrorCode:
            codes = [ErrorCode.of(p.error_code) for t in resp.topics for p in t.partitions]
            bad = [c for c in codes if c is not ErrorCode.NONE]
            return bad[0] if bad else ErrorCode.NONE

        try:
            if not self.v2:  # v2: TxnOffsetCommit v5 adds the group's offsets partition itself
                await self._retrying(add, lambda r: ErrorCode.of(r.error_code), timeout=timeout)
            self.offsets_added = True
            await self._retrying(commit, commit_error, group=group_id, timeout=timeout)
        except KafkaError as exc:
            self.fail(exc)
            raise

    async def end(self, commit: bool, timeout: float) -> None:
        """EndTxn: commit or abort the open transaction, retried within ``timeout`` s."""
        await self.settle()
        if not self.partitions and not self.offsets_added:  # nothing added: no transaction there
            self.state = TxnState.READY
            self.error = None
            return

        def send(_v: int | None) -> EndTxnRequest:
            return EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                 producer_epoch=self.producer_epoch, committed=commit)

        try:
            resp = await self._retrying(send, lambda r: ErrorCode.of(r.error_code), timeout=timeout)
        except KafkaError as exc:
            if exc.code in _FATAL:
                self.fail(exc)
            raise
        if self.v2 and resp.producer_id >= 0:
            # EndTxn v5 bumped the epoch: the next transaction's batches carry it (sequences anew)
            self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self.partitions.clear()
        self.offsets_added = False
        self.state = TxnState.READY
        self.error = None


class ProducerTransactions:
    """The transaction calls of Producer and AsyncProducer (``init_transactions``, ``begin``,
    ``send_offsets``, ``commit`` and ``abort``), checked against the state of ``txn`` (None: the
    producer has no ``transactional.id``, and every call is INVALID_TXN_STATE)."""

    def __init__(self, txn: TxnManager | None, sender: Sender, acc: RecordAccumulator) -> None:
        self.txn = txn
        self.sender = sender
        self.acc = acc

    def manager(self) -> TxnManager:
        """The transaction manager; KafkaError INVALID_TXN_STATE when the producer has no
        ``transactional.id``."""
        if self.txn is None:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "the producer has no transactional.id")
        return self.txn

    async def init(self, timeout: float) -> None:
        """``init_transactions``: InitProducerId for the transactional id (fencing older producers); the
        sender takes the producer id and epoch."""
        txn = self.manager()
        txn.require(TxnState.UNINITIALIZED, TxnState.READY, action="init_transactions")
        pid, epoch = await txn.init(timeout)
        with self.acc.lock:
            self.sender.producer_id, self.sender.producer_epoch = pid, epoch
            self.sender.sequences.clear()

    def begin(self) -> None:
        """``begin_transaction``: READY to IN_TRANSACTION, or INVALID_TXN_STATE."""
        txn = self.manager()
        txn.require(TxnState.READY, action="begin_transaction")
        txn.state = TxnState.IN_TRANSACTION

    async def send_offsets(self, offsets: dict[TopicPartition, int], group: Any, timeout: float) -> None:
        """``send_offsets_to_transaction``: ``group`` is a group id, or a consumer's group metadata (Odradek's
        or confluent-kafka's shape)."""
        txn = self.manager()
        txn.require(TxnState.IN_TRANSACTION, action="send_offsets_to_transaction")
        if isinstance(group, str):
            gid, generation, member, instance = group, -1, "", None
        else:  # the group metadata of Odradek's Consumer, or confluent-kafka's shape
            gid = group.group_id
            generation = getattr(group, "generation_id", -1)
            member = getattr(group, "member_id", "")
            instance = getattr(group, "group_instance_id", None)
        await txn.send_offsets(offsets, gid, generation, member, instance, timeout)

    async def end(self, commit: bool, timeout: float) -> None:
        """``commit_transaction`` / ``abort_transaction``: EndTxn, with the state put back if it fails so the
        call can be retried (or aborted)."""
        txn = self.manager()
        if commit:
            txn.require(TxnState.IN_TRANSACTION, action="commit_transaction")
            txn.state = TxnState.COMMITTING
        else:
            txn.require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING, action="abort_transaction")
            txn.state = TxnState.ABORTING
            txn.error = None
        try:
            await txn.end(commit, timeout)
        except BaseException:
            if txn.state in (TxnState.COMMITTING, TxnState.ABORTING):
                txn.state = TxnState.IN_TRANSACTION if commit else TxnState.ABORTING
            raise
        with self.acc.lock:
            if (txn.producer_id, txn.producer_epoch) != (self.sender.producer_id, self.sender.producer_epoch):
                self.sender.producer_id, self.sender.producer_epoch = txn.producer_id, txn.producer_epoch
                self.sender.sequences.clear()

    def drop_unsent(self, cause: KafkaError) -> None:
        """abort_transaction: batches not yet sent fail instead (they must not be written)."""
        for b in self.acc.take_all(fast_too=True):
            self.sender.complete(b, -1, -1, cause)
