"""The share coordinator's rules (KIP-932): the persisted state of share-partitions.

A share-partition (a share group's view of one topic partition) keeps, with its partition leader,
a start offset and the delivery state of the in-flight records past it.  The leader persists that
state through the share coordinator, which keeps it in ``__share_group_state`` as Kafka does, in
a checkpoint + delta model: a **ShareSnapshot** record holds a share-partition's whole state, a
**ShareUpdate** record the batches one write changed.  Every
``share.coordinator.snapshot.update.records.per.snapshot`` updates, the next write is a snapshot
again, so that loading a partition replays a bounded number of deltas per key.

Everything here is pure: :class:`ShareStateMap` is what one ``__share_group_state`` partition
holds (the state per key, and the epochs that fence stale leaders); ``plan_*`` decide the record
a request writes, or raise the error Kafka answers, and :meth:`ShareStateMap.replay` applies a
record, so that the state a coordinator serves is always the replay of its partition's records.

The rules, as Kafka's ShareCoordinatorShard and PersisterStateBatchCombiner have them:

* **merging batches**: the batches written are merged into the state's; where two overlap, the
  offset takes the delivery of the higher priority, a higher delivery count first and then the
  higher state (so a write can never move an offset back to fewer deliveries); batches wholly
  below the start offset are dropped and one straddling it cut; adjacent batches with the same
  delivery are joined.  The result is the canonical list: sorted, disjoint, maximal;
* **fencing**: a write or read whose leader epoch is below the highest one recorded for the key
  is FENCED_LEADER_EPOCH (a deposed leader); a write whose state epoch is below the recorded one
  is FENCED_STATE_EPOCH (the group's state was reset, e.g. by an offsets reset, since);
* a read from a newer leader records its leader epoch (a ShareUpdate with no batches), so that
  the fence holds on the next coordinator too;
* **initializing** writes a snapshot with no batches at the given start offset and state epoch;
  **deleting** writes tombstones of the key's snapshot and update records.

The record formats are Kafka's (``coordinator-records/share``): a key is an int16 record type
(0 ShareSnapshot, 1 ShareUpdate) followed by the key struct; a value an int16 version (0) followed
by the flexible value struct.
"""

from __future__ import annotations

import base64
import functools
import heapq
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.coordinator import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
)

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "SNAPSHOT_TYPE",
    "UPDATE_TYPE",
    "VALID_STATES",
    "ShareKey",
    "ShareRecord",
    "ShareState",
    "ShareStateMap",
    "StateBatch",
    "check_batches",
    "coordinator_key",
    "decode_record",
    "encode_record",
    "merge_batches",
]

SNAPSHOT_TYPE, UPDATE_TYPE = 0, 1
#: share.coordinator.snapshot.update.records.per.snapshot
DEFAULT_SNAPSHOT_EVERY = 500
#: the delivery states a batch may be persisted in: AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED
VALID_STATES = frozenset({0, 1, 2, 4})
_i16 = struct.Struct(">h")
_INT16_MAX = (1 << 15) - 1


@dataclass(frozen=True, slots=True)
class StateBatch:
    """The delivery state of the offsets ``first_offset..last_offset`` (both included).  The
    share-partition's own StateBatch (``cluster/share_partition.py``) has the same fields; ``state``
    is a RecordState value (0 AVAILABLE, 1 ACQUIRED, 2 ACKNOWLEDGED, 4 ARCHIVED)."""

    first_offset: int
    last_offset: int
    delivery_count: int
    state: int


@dataclass(frozen=True, slots=True)
class ShareKey:
    """A share-partition: the group, the topic's id and the partition index."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


def kafka_uuid(u: uuid.UUID) -> str:
    """A topic id as Kafka prints it (url-safe base64, no padding)."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


@functools.lru_cache(maxsize=4096)
def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The key of a share-partition's coordinator: ``group:topicId:partition`` with Kafka's form of
    the topic id (Kafka's SharePartitionKey.asCoordinatorKey); FindCoordinator key type 2 takes it
    and the ``__share_group_state`` partition is ``abs(javaHash(key)) % partitions``."""
    return f"{group_id}:{kafka_uuid(topic_id)}:{partition}"


def parse_coordinator_key(key: str) -> ShareKey:
    """The share-partition of a FindCoordinator key (INVALID_REQUEST if it is not one)."""
    group, sep, rest = key.rpartition(":")
    group2, sep2, topic = group.rpartition(":")
    try:
        if not sep or not sep2 or not group2 or not rest.isascii() or not rest.lstrip("-").isdigit():
            raise ValueError(key)
        partition = int(rest)
        raw = base64.urlsafe_b64decode(topic + "==")
        if len(raw) != 16 or partition < 0:
            raise ValueError(key)
    except (ValueError, TypeError) as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"not a share-partition key (group:topicId:partition): {key!r}") from exc
    return ShareKey(group2, uuid.UUID(bytes=raw), partition)


@dataclass(frozen=True, slots=True)
class ShareState:
    """The persisted state of one share-partition (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    create_ms: int = 0
    write_ms: int = 0


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One record of ``__share_group_state``: a snapshot (``kind`` SNAPSHOT_TYPE: the state
    replaced), an update (UPDATE_TYPE: ``start_offset``/``leader_epoch`` -1 keep the current
    ones, ``batches`` are merged), or with ``state`` None the tombstone of the key's record of
    that kind."""

    kind: int
    key: ShareKey
    state: ShareState | None


def _priority(b: StateBatch) -> tuple[int, int]:
    return (b.delivery_count, b.state)


def merge_batches(current: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    """``current`` and ``new`` merged: each offset at or past ``start_offset`` (-1: no bound)
    gets the delivery of the highest priority among the batches covering it (the higher delivery
    count, then the higher state); the result is sorted, disjoint and maximal (adjacent batches of
    the same delivery joined)."""
    items: list[tuple[int, int, int, int]] = []
    for b in (*current, *new):
        first = b.first_offset
        if start_offset != -1:
            if b.last_offset < start_offset:
                continue
            first = max(first, start_offset)
        items.append((first, b.last_offset, b.delivery_count, b.state))
    if not items:
        return ()
    items.sort()
    points = sorted({i[0] for i in items} | {i[1] + 1 for i in items})
    heap: list[tuple[int, int, int]] = []  # (-count, -state, last)
    out: list[StateBatch] = []
    nxt = 0
    for idx in range(len(points) - 1):
        lo, hi = points[idx], points[idx + 1] - 1
        while nxt < len(items) and items[nxt][0] <= lo:
            _f, last, count, state = items[nxt]
            heapq.heappush(heap, (-count, -state, last))
            nxt += 1
        while heap and heap[0][2] < lo:
            heapq.heappop(heap)
        if not heap:
            continue
        count, state = -heap[0][0], -heap[0][1]
        if out and out[-1].last_offset + 1 == lo and _priority(out[-1]) == (count, state):
            out[-1] = replace(out[-1], last_offset=hi)
        else:
            out.append(StateBatch(lo, hi, count, state))
    return tuple(out)


def check_batches(batches: Sequence[StateBatch], start_offset: int) -> None:
    """The batches and start offset of a write are well formed (INVALID_REQUEST): offsets not
    negative and in order, a delivery count and a state a share-partition can have."""
    if start_offset < -1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid start offset {start_offset}")
    for b in batches:
        if b.first_offset < 0 or b.last_offset < b.first_offset:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"invalid state batch offsets {b.first_offset}..{b.last_offset}"
            )
        if not 0 <= b.delivery_count <= _INT16_MAX:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid delivery count {b.delivery_count}")
        if b.state not in VALID_STATES:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid delivery state {b.state}")


@dataclass(slots=True)
class ShareStateMap:
    """The share-partitions of one ``__share_group_state`` partition: their states and the
    epochs that fence, rebuilt by :meth:`replay` from the partition's records."""

    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    states: dict[ShareKey, ShareState] = field(default_factory=dict)
    #: the highest leader epoch and state epoch recorded per key (they only grow)
    leader_epochs: dict[ShareKey, int] = field(default_factory=dict)
    state_epochs: dict[ShareKey, int] = field(default_factory=dict)
    #: ShareUpdate records replayed since the key's last snapshot
    updates: dict[ShareKey, int] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------
    # replay

    def replay(self, rec: ShareRecord) -> None:
        key, st = rec.key, rec.state
        if st is None:  # a tombstone: the share-partition's state is deleted
            self.states.pop(key, None)
            self.leader_epochs.pop(key, None)
            self.state_epochs.pop(key, None)
            self.updates.pop(key, None)
            return
        self._raise_epoch(self.leader_epochs, key, st.leader_epoch)
        if rec.kind == SNAPSHOT_TYPE:
            self._raise_epoch(self.state_epochs, key, st.state_epoch)
            self.states[key] = st
            self.updates[key] = 0
            return
        cur = self.states.get(key)
        if cur is None:  # an update with no snapshot before it (its snapshot was deleted)
            self.states[key] = replace(st, batches=merge_batches((), st.batches, st.start_offset))
            self.updates[key] = 0
            return
        start = cur.start_offset if st.start_offset == -1 else st.start_offset
        self.states[key] = ShareState(
            snapshot_epoch=cur.snapshot_epoch,
            state_epoch=cur.state_epoch,
            leader_epoch=cur.leader_epoch if st.leader_epoch == -1 else st.leader_epoch,
            start_offset=start,
            batches=merge_batches(cur.batches, st.batches, start),
            create_ms=cur.create_ms,
            write_ms=cur.write_ms,
        )
        self.updates[key] = self.updates.get(key, 0) + 1

    @staticmethod
    def _raise_epoch(epochs: dict[ShareKey, int], key: ShareKey, epoch: int) -> None:
        if epoch > epochs.get(key, -1):
            epochs[key] = epoch

    # ------------------------------------------------------------------------------------------
    # planning the records of requests

    def _fence_leader(self, key: ShareKey, leader_epoch: int) -> None:
        known = self.leader_epochs.get(key)
        if known is not None and known > leader_epoch:
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} is older than the recorded {known}"
            )

    def _fence_state(self, key: ShareKey, state_epoch: int) -> None:
        known = self.state_epochs.get(key)
        if known is not None and known > state_epoch:
            raise KafkaError(
                ErrorCode.FENCED_STATE_EPOCH, f"state epoch {state_epoch} is older than the recorded {known}"
            )

    def plan_write(
        self, key: ShareKey, *, leader_epoch: int, state_epoch: int, start_offset: int,
        batches: Sequence[StateBatch], now_ms: int,
    ) -> ShareRecord:
        """The record a WriteShareGroupState of ``key`` writes: a snapshot for the key's first
        write and every ``snapshot_every`` updates, else an update (errors: INVALID_REQUEST,
        FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH)."""
        check_batches(batches, start_offset)
        self._fence_leader(key, leader_epoch)
        self._fence_state(key, state_epoch)
        cur = self.states.get(key)
        if cur is None:
            return ShareRecord(SNAPSHOT_TYPE, key, ShareState(
                0, state_epoch, leader_epoch, start_offset, merge_batches((), batches, start_offset), now_ms, now_ms,
            ))
        if self.updates.get(key, 0) >= self.snapshot_every:
            start = cur.start_offset if start_offset == -1 else start_offset
            return ShareRecord(SNAPSHOT_TYPE, key, ShareState(
                cur.snapshot_epoch + 1,
                cur.state_epoch if state_epoch == -1 else state_epoch,
                cur.leader_epoch if leader_epoch == -1 else leader_epoch,
                start,
                merge_batches(cur.batches, batches, start),
                cur.create_ms,
                now_ms,
            ))
        return ShareRecord(UPDATE_TYPE, key, ShareState(
            cur.snapshot_epoch, -1, leader_epoch, start_offset, merge_batches((), batches, start_offset),
        ))

    def plan_initialize(self, key: ShareKey, *, state_epoch: int, start_offset: int, now_ms: int) -> ShareRecord:
        """The snapshot an InitializeShareGroupState writes: no batches, the given start offset
        and state epoch (FENCED_STATE_EPOCH below the recorded one)."""
        if start_offset < -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid start offset {start_offset}")
        self._fence_state(key, state_epoch)
        cur = self.states.get(key)
        epoch = 0 if cur is None else cur.snapshot_epoch + 1
        return ShareRecord(SNAPSHOT_TYPE, key, ShareState(epoch, state_epoch, -1, start_offset, (), now_ms, now_ms))

    def plan_delete(self, key: ShareKey) -> list[ShareRecord]:
        """The tombstones a DeleteShareGroupState writes (none for a key with no state)."""
        if key not in self.states:
            return []
        return [ShareRecord(SNAPSHOT_TYPE, key, None), ShareRecord(UPDATE_TYPE, key, None)]

    def read(self, key: ShareKey, leader_epoch: int, now_ms: int) -> tuple[ShareState | None, ShareRecord | None]:
        """The state a ReadShareGroupState answers (None: never initialized) and the record that
        records a newer leader's epoch, if it is newer (FENCED_LEADER_EPOCH if older; -1: a
        reader that is no leader, neither checked nor recorded)."""
        cur = self.states.get(key)
        if leader_epoch == -1:
            return cur, None
        self._fence_leader(key, leader_epoch)
        if cur is None:
            return None, None
        if leader_epoch > self.leader_epochs.get(key, -1):
            if self.updates.get(key, 0) >= self.snapshot_every:
                rec = ShareRecord(SNAPSHOT_TYPE, key, replace(
                    cur, snapshot_epoch=cur.snapshot_epoch + 1, leader_epoch=leader_epoch, write_ms=now_ms
                ))
            else:
                rec = ShareRecord(UPDATE_TYPE, key, ShareState(cur.snapshot_epoch, -1, leader_epoch, -1))
            return cur, rec
        return cur, None


# ------------------------------------------------------------------------------------------------
# record formats


def encode_record(rec: ShareRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes of a record of ``__share_group_state``."""
    k = rec.key
    if rec.kind == SNAPSHOT_TYPE:
        key = _i16.pack(SNAPSHOT_TYPE) + ShareSnapshotKey(
            group_id=k.group_id, topic_id=k.topic_id, partition=k.partition
        ).encode(SNAPSHOT_TYPE)
    else:
        key = _i16.pack(UPDATE_TYPE) + ShareUpdateKey(
            group_id=k.group_id, topic_id=k.topic_id, partition=k.partition
        ).encode(UPDATE_TYPE)
    st = rec.state
    if st is None:
        return key, None
    if rec.kind == SNAPSHOT_TYPE:
        S = ShareSnapshotValue
        value = S(
            snapshot_epoch=st.snapshot_epoch, state_epoch=st.state_epoch, leader_epoch=st.leader_epoch,
            start_offset=st.start_offset, create_timestamp=st.create_ms, write_timestamp=st.write_ms,
            state_batches=[S.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                        delivery_state=b.state, delivery_count=b.delivery_count) for b in st.batches],
        ).encode(0)
    else:
        U = ShareUpdateValue
        value = U(
            snapshot_epoch=st.snapshot_epoch, leader_epoch=st.leader_epoch, start_offset=st.start_offset,
            state_batches=[U.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                        delivery_state=b.state, delivery_count=b.delivery_count) for b in st.batches],
        ).encode(0)
    return key, _i16.pack(0) + value


def decode_record(key: bytes, value: bytes | None) -> ShareRecord | None:
    """A record of ``__share_group_state`` (None: a record type this version does not know);
    raises on a record of a known type that cannot be decoded."""
    if len(key) < 2:
        return None
    (kind,) = _i16.unpack_from(key, 0)
    if kind == SNAPSHOT_TYPE:
        k: ShareSnapshotKey | ShareUpdateKey = ShareSnapshotKey.decode_from(key, 2, SNAPSHOT_TYPE)[0]
    elif kind == UPDATE_TYPE:
        k = ShareUpdateKey.decode_from(key, 2, UPDATE_TYPE)[0]
    else:
        return None
    sk = ShareKey(k.group_id, k.topic_id, k.partition)
    if value is None:
        return ShareRecord(kind, sk, None)
    if kind == SNAPSHOT_TYPE:
        s = ShareSnapshotValue.decode_from(value, 2, 0)[0]
        batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_count, b.delivery_state)
                        for b in s.state_batches)
        return ShareRecord(kind, sk, ShareState(
            s.snapshot_epoch, s.state_epoch, s.leader_epoch, s.start_offset, batches, s.create_timestamp,
            s.write_timestamp,
        ))
    u = ShareUpdateValue.decode_from(value, 2, 0)[0]
    batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_count, b.delivery_state)
                    for b in u.state_batches)
    return ShareRecord(kind, sk, ShareState(u.snapshot_epoch, -1, u.leader_epoch, u.start_offset, batches))
