"""Transaction coordinator decisions (KIP-98), as data: the state of a transactional id and the
checks and transitions its requests make.  No I/O: the broker's coordinator writes what these
functions decide to ``__transaction_state`` and sends the markers.

States (their ids are those of Kafka's ``__transaction_state`` records)::

    Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit --markers written--> CompleteCommit
                                     \\--EndTxn/timeout--> PrepareAbort --markers--> CompleteAbort
    Empty/Complete* --InitProducerId--> Empty (epoch + 1)
    Ongoing --InitProducerId--> PrepareEpochFence, then PrepareAbort with the epoch bumped

Transactions v2 (KIP-890 part 2, a client of ``transaction.version`` 2: EndTxn v5, Produce v12,
TxnOffsetCommit v5): every EndTxn bumps the producer epoch (:func:`end_v2` decides, with Kafka's
table of retries, :func:`prepare_end_bumped` makes the Prepare state with the new epoch, or a
new producer id when the epoch is used up), and the partitions join the transaction when the
producer first writes to them (the partition leader asks the coordinator), so that an abort
may come with no partition added at all.  The transaction's client version is kept in its state
(``client_tv``; Kafka's ClientTransactionVersion).

A transition is first *prepared* (:func:`begin_transition` checks it against
:data:`TXN_TRANSITIONS`, Kafka's valid previous states, and sets ``pending``: other requests answer
CONCURRENT_TRANSACTIONS), written to the log, then *completed* or dropped if the write failed
(:func:`end_transition`).  The states a transition moves to are made here, by the ``prepare_*``
functions; nothing else builds a metadata with a state, except :func:`restored` for one read
back from the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from odradek.cluster.transitions import TransitionTable
from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "MAX_EPOCH",
    "TXN_TRANSITIONS",
    "TxnMetadata",
    "TxnState",
    "begin_transition",
    "bumped",
    "check_producer",
    "completed",
    "end_transition",
    "end_v2",
    "new_transactional_id",
    "prepare_add_partitions",
    "prepare_end",
    "prepare_end_bumped",
    "prepare_fenced_abort",
    "prepare_init",
    "restored",
]

#: producer epochs are int16; Kafka bumps to a new producer id before reaching the maximum
MAX_EPOCH = 32766

TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def title(self) -> str:
        """Kafka's name (DescribeTransactions, ListTransactions)."""
        return "".join(w.capitalize() for w in self.name.split("_"))

    @property
    def completed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_T = TxnState
#: Kafka's valid previous states of each transaction state (``TransactionState``)
TXN_TRANSITIONS = TransitionTable[TxnState]("transaction", {
    _T.EMPTY: {_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT},
    _T.ONGOING: {_T.ONGOING, _T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT},
    _T.PREPARE_COMMIT: {_T.ONGOING},
    # transactions v2 may abort with no partition added, from a completed state
    _T.PREPARE_ABORT: {_T.ONGOING, _T.PREPARE_EPOCH_FENCE, _T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT},
    _T.COMPLETE_COMMIT: {_T.PREPARE_COMMIT},
    _T.COMPLETE_ABORT: {_T.PREPARE_ABORT},
    _T.DEAD: {_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT},
    _T.PREPARE_EPOCH_FENCE: {_T.ONGOING},
})


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    #: the producer id and epoch before the last bump (KIP-360 retries of InitProducerId)
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    #: a transition being written: requests answer CONCURRENT_TRANSACTIONS meanwhile
    pending: TxnState | None = None
    #: the transaction version of the client whose transaction this is (2: transactions v2)
    client_tv: int = 0
    #: transactions v2: the producer id a Prepare state hands over to once its markers are
    #: written, when the epoch is used up (-1: none)
    next_producer_id: int = -1

    def copy(self, **changes: object) -> TxnMetadata:
        """A copy with ``changes`` (field names; unknown names raise AttributeError) and a set
        of partitions of its own.  Built field by field: ``dataclasses.replace`` costs several
        times as much, and this runs for every state change of every transaction."""
        out = TxnMetadata(
            self.transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
            self.partitions, self.start_ms, self.update_ms, self.last_producer_id, self.last_producer_epoch,
            self.pending, self.client_tv, self.next_producer_id,
        )
        for name, value in changes.items():
            setattr(out, name, value)
        if "partitions" not in changes:
            out.partitions = set(self.partitions)
        return out


def new_transactional_id(transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TxnMetadata:
    """The metadata of an id seen for the first time (InitProducerId): Empty, without an epoch
    yet (the first bump gives it 0)."""
    return TxnMetadata(transactional_id, producer_id, -1, timeout_ms, TxnState.EMPTY, set(), -1, now_ms)


def restored(
    transactional_id: str, producer_id: int, producer_epoch: int, timeout_ms: int, state: TxnState,
    partitions: set[TopicPartition], start_ms: int, update_ms: int, *,
    previous_producer_id: int = -1, next_producer_id: int = -1, client_tv: int = 0,
) -> TxnMetadata:
    """The metadata a ``__transaction_state`` record holds, as the coordinator reads it back
    when it loads the partition: a state restored, not a transition."""
    return TxnMetadata(
        transactional_id, producer_id, producer_epoch, timeout_ms, state, partitions, start_ms, update_ms,
        last_producer_id=previous_producer_id, client_tv=client_tv, next_producer_id=next_producer_id,
    )


def begin_transition(current: TxnMetadata, target: TxnMetadata) -> None:
    """Prepare the change from ``current`` to ``target`` (Kafka's prepareTransitionTo): allowed
    by :data:`TXN_TRANSITIONS` (IllegalTransition otherwise), and one at a time (``pending``
    set until :func:`end_transition`; CONCURRENT_TRANSACTIONS for a second)."""
    TXN_TRANSITIONS.check(current.state, target.state, f"transactional id {current.transactional_id}")
    if current.pending is not None:
        raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, f"a change to {current.pending.title} is being written")
    current.pending = target.state


def end_transition(current: TxnMetadata, target: TxnMetadata) -> None:
    """The write of ``target`` is over (written, and ``target`` replaces ``current``; or failed,
    and ``current`` stays): neither is pending any more."""
    current.pending = None
    target.pending = None


def check_producer(meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> None:
    """The checks every request of a transactional producer passes first."""
    if meta is None or meta.state is TxnState.DEAD:
        raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "the transactional id is unknown")
    if meta.producer_id != producer_id:
        raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "the producer id does not match the transactional id")
    if producer_epoch != meta.producer_epoch:
        raise KafkaError(
            ErrorCode.PRODUCER_FENCED,
            f"epoch {producer_epoch} is not the current epoch {meta.producer_epoch}: a newer producer uses this id",
        )
    if meta.pending is not None:
        raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, f"a change to {meta.pending.title} is being written")


def prepare_add_partitions(
    meta: TxnMetadata, partitions: set[TopicPartition], now_ms: int, client_tv: int = 0
) -> TxnMetadata | None:
    """The state after adding ``partitions`` (by a client of transaction version
    ``client_tv``); None when nothing changes (all already in)."""
    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
        raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, f"the transaction is in {meta.state.title}")
    if meta.state is TxnState.ONGOING and partitions <= meta.partitions and meta.client_tv == client_tv:
        return None
    starting = meta.state is not TxnState.ONGOING
    return meta.copy(
        state=TxnState.ONGOING,
        partitions=(set() if starting else set(meta.partitions)) | partitions,
        start_ms=now_ms if starting else meta.start_ms,
        update_ms=now_ms,
        client_tv=client_tv,
    )


def prepare_end(meta: TxnMetadata, commit: bool, now_ms: int) -> TxnMetadata | None:
    """The PrepareCommit/PrepareAbort state EndTxn moves to; None for a retry of an EndTxn that
    already completed the same way (answered NONE, nothing written)."""
    state = meta.state
    if state is TxnState.ONGOING:
        return meta.copy(state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, update_ms=now_ms)
    if (state is TxnState.COMPLETE_COMMIT and commit) or (state is TxnState.COMPLETE_ABORT and not commit):
        return None
    if (state is TxnState.PREPARE_COMMIT and commit) or (state is TxnState.PREPARE_ABORT and not commit):
        raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "the markers of this transaction are being written")
    raise KafkaError(
        ErrorCode.INVALID_TXN_STATE,
        f"cannot {'commit' if commit else 'abort'} a transaction in state {state.title}",
    )


def end_v2(meta: TxnMetadata | None, producer_id: int, producer_epoch: int, commit: bool) -> bool | None:
    """What an EndTxn of transactions v2 (v5+) does (Kafka's table): prepare the end of the
    transaction (True; False: an abort of a transaction that added no partition, which v2
    allows), or nothing for a retry of an end already made (None, answered NONE with the current
    producer id and epoch); otherwise the error, raised.  A retry is recognised by its epoch: one
    below the current (the end bumped it), or the last of a producer id the end replaced."""
    if meta is None or meta.state is TxnState.DEAD:
        raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "the transactional id is unknown")
    state = meta.state
    retry_on_overflow = (
        meta.last_producer_id == producer_id and producer_epoch == MAX_EPOCH and meta.producer_epoch == 0
        and meta.producer_id != producer_id
    )
    retry_on_bump = meta.producer_epoch == producer_epoch + 1
    if meta.producer_id != producer_id and not retry_on_overflow:
        raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "the producer id does not match the transactional id")
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        valid = retry_on_bump
    elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        valid = retry_on_bump or retry_on_overflow or producer_epoch == meta.producer_epoch
    else:
        valid = producer_epoch == meta.producer_epoch
    if not valid:
        raise KafkaError(
            ErrorCode.PRODUCER_FENCED,
            f"epoch {producer_epoch} is not the current epoch {meta.producer_epoch}: a newer producer uses this id",
        )
    if meta.pending is not None:
        raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, f"a change to {meta.pending.title} is being written")
    retry = retry_on_bump or retry_on_overflow
    what = "commit" if commit else "abort"
    if state is TxnState.ONGOING:
        return True
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        if (state is TxnState.PREPARE_COMMIT) == commit:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "the markers of this transaction are being written")
    elif state is TxnState.COMPLETE_COMMIT:
        if commit and retry:
            return None
        if not commit and not retry:
            return False
    elif state is TxnState.COMPLETE_ABORT:
        if not commit:
            return None if retry else False
    elif state is TxnState.EMPTY and not commit:
        return False
    raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"cannot {what} a transaction in state {state.title}")


def prepare_end_bumped(
    meta: TxnMetadata, commit: bool, now_ms: int, next_producer_id: int = -1, *, partitions_added: bool = True
) -> TxnMetadata:
    """The PrepareCommit/PrepareAbort state of a v2 EndTxn: the epoch bumped (the markers carry
    it; the producer continues with it), and, when the epoch is used up, the producer id the
    producer continues with once the markers are written (``next_producer_id``)."""
    return meta.copy(
        state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
        producer_epoch=meta.producer_epoch + 1,
        last_producer_id=meta.producer_id,
        last_producer_epoch=meta.producer_epoch,
        next_producer_id=next_producer_id,
        start_ms=meta.start_ms if partitions_added else now_ms,
        partitions=set(meta.partitions) if partitions_added else set(),
        update_ms=now_ms,
        client_tv=2,
    )


def prepare_init(meta: TxnMetadata, timeout_ms: int, now_ms: int) -> TxnMetadata:
    """InitProducerId's state for ``meta`` (its epoch already bumped): Empty, no partitions, the
    producer's transaction timeout."""
    return meta.copy(state=TxnState.EMPTY, partitions=set(), timeout_ms=timeout_ms, start_ms=-1, update_ms=now_ms)


def prepare_fenced_abort(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """An open transaction aborted with its producer fenced (``meta``'s epoch already bumped): by
    the InitProducerId of a newer producer of the id, or for its timeout.  Kafka passes through
    PrepareEpochFence on the way; the record written is the same PrepareAbort."""
    return meta.copy(state=TxnState.PREPARE_ABORT, update_ms=now_ms)


def completed(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """The state once every marker of a prepared transaction is written (transactions v2 with the
    epoch used up: the next producer id, at epoch 0)."""
    state = TxnState.COMPLETE_COMMIT if meta.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    if meta.client_tv >= 2 and meta.next_producer_id >= 0:
        return meta.copy(state=state, partitions=set(), update_ms=now_ms, producer_id=meta.next_producer_id,
                         producer_epoch=0, last_producer_id=meta.producer_id, next_producer_id=-1)
    return meta.copy(state=state, partitions=set(), update_ms=now_ms, next_producer_id=-1)


def bumped(meta: TxnMetadata, new_producer_id: int | None) -> TxnMetadata:
    """The metadata with the next epoch (or a new producer id at epoch 0 when the epoch is used
    up, ``new_producer_id`` given)."""
    if new_producer_id is not None:
        return meta.copy(producer_id=new_producer_id, producer_epoch=0, last_producer_id=meta.producer_id,
                         last_producer_epoch=meta.producer_epoch)
    return meta.copy(producer_epoch=meta.producer_epoch + 1, last_producer_id=meta.producer_id,
                     last_producer_epoch=meta.producer_epoch)
