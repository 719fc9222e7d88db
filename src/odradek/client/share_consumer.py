"""ShareConsumer and AsyncShareConsumer: consumers of a share group (KIP-932, "queues for Kafka").

The members of a share group read the same partitions together: each record is *acquired* by
one member at a time (for the group's lock duration), delivered to it, and acknowledged by it:
ACCEPT (done), RELEASE (deliver again, to any member; its delivery count goes up) or REJECT
(never deliver again).  A record neither acknowledged nor released before its lock expires is
delivered again too.

``share.acknowledgement.mode``:

* ``implicit`` (the default): the records a poll returned are accepted by the next poll, by
  :meth:`~AsyncShareConsumer.commit_sync` / :meth:`~AsyncShareConsumer.commit_async` or by
  :meth:`~AsyncShareConsumer.close`;
* ``explicit``: every record is acknowledged with :meth:`~AsyncShareConsumer.acknowledge`
  before the next poll (:class:`IllegalStateError` otherwise); the acknowledgements go to the
  brokers with the next poll's fetch or with a commit.

How it talks to the brokers:

* membership: ShareGroupHeartbeat v1 to the group coordinator
  (:mod:`odradek.client._share_membership`), from the first poll on; the broker assigns the
  partitions;
* records: ShareFetch v1 to each assigned partition's leader, in one *share session* per
  leader (epoch 0 opens it with the partitions, each later request carries the next epoch, adds
  partitions, forgets those no longer assigned and carries the acknowledgements due);
* commits, and a poll's acknowledgements while records fetched earlier are still buffered (no
  fetch is due then): ShareAcknowledge v1 to the leaders; their per-partition answers are a
  commit's results (e.g. INVALID_RECORD_STATE when a record's lock had expired and it went to
  another member), and go to the acknowledgement commit callback;
* close: the acknowledgements due go out in a ShareAcknowledge at epoch -1, which closes the
  session (the broker releases what the member still holds, for the others at once), then the
  member leaves the group (heartbeat epoch -1).

Only the *acquired* offsets of a fetch answer are delivered (the batches may hold others, which
belong to other members); an acquired offset without a record in the batches (a control record,
a compacted-away offset) is acknowledged as a gap.  Each :class:`ShareRecord` says how often it
was delivered (``delivery_count``).  ``key.deserializer`` / ``value.deserializer`` are blocking
ones, as the simple consumer's (whose decoder this consumer uses).

:class:`ShareConsumer` is the blocking face of :class:`AsyncShareConsumer`, run on an event loop
in a background thread as the other blocking clients (the heartbeats go on while the caller works).
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import enum
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from odradek.client._config import CONSUMER_DEFAULTS, SHARE_CONSUMER_DEFAULTS, ClientConfigError, merge_config
from odradek.client._runner import LoopThread
from odradek.client._share_membership import ShareMembership
from odradek.client.consumer_simple import AsyncSimpleConsumer, ConsumerRecord
from odradek.errors import ErrorCode, KafkaError, OdradekError
from odradek.protocol.messages.fetch import FetchResponse
from odradek.protocol.messages.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from odradek.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from odradek.records import Header

__all__ = [
    "AcknowledgeType",
    "AcknowledgementCommitCallback",
    "AsyncShareConsumer",
    "IllegalStateError",
    "ShareConsumer",
    "ShareRecord",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]
#: per-partition results of a commit: None when the broker took the acknowledgements, else its error
CommitResults = dict[TopicPartition, KafkaError | None]
#: ``callback(offsets, error)``: the offsets acknowledged per partition and the broker's error (None: taken)
AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], KafkaError | None], Any]

_INITIAL_EPOCH, _FINAL_EPOCH = 0, -1
_INT32_MAX = 2**31 - 1
#: answers after which the session is gone at the broker: the next request opens a new one
_SESSION_ERRORS = {ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH}
#: partition errors after which the leader is looked up again
_REFRESH_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
}
#: errors a poll raises (nothing the consumer does makes them go away)
_FATAL = {ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNSUPPORTED_VERSION,
          ErrorCode.INVALID_REQUEST}


class AcknowledgeType(enum.IntEnum):
    """How a delivered record is acknowledged (the wire's acknowledge types)."""

    #: an acquired offset without a record (sent by the consumer itself, never by the application)
    GAP = 0
    #: processed: never delivered again
    ACCEPT = 1
    #: not processed: delivered again, to any member, with a higher delivery count
    RELEASE = 2
    #: unprocessable: never delivered again (archived)
    REJECT = 3
    #: still working on it: the acquisition lock starts again (ShareAcknowledge v2, KIP-1222; the
    #: record stays the member's and is acknowledged again later)
    RENEW = 4


class IllegalStateError(OdradekError, RuntimeError):
    """A call the consumer's state does not allow (Kafka's IllegalStateException): acknowledge()
    outside explicit mode or of a record not in flight, poll() with records of the last poll not
    acknowledged in explicit mode, poll() without a subscription, any call after close()."""


class ShareRecord(NamedTuple):
    """One record a share consumer delivered: :class:`~odradek.client.ConsumerRecord`'s fields plus
    ``delivery_count`` (1 the first time; more after releases or expired locks)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[Header]
    delivery_count: int


@dataclass(slots=True)
class _Session:
    """The share session with one leader: the epoch its next request carries and the partitions the
    broker has in it."""

    node_id: int
    epoch: int = _INITIAL_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= _INT32_MAX else self.epoch + 1

    def reset(self) -> None:
        self.epoch = _INITIAL_EPOCH
        self.partitions = set()


@dataclass(slots=True)
class PendingAcks:
    """One partition's acknowledgements not sent yet: ``offsets`` of the records the application
    saw (offset -> type), ``ranges`` of offsets it never saw, ``(first, last, type)``: gaps, and
    acquired records released undelivered (a range may be long: a compacted batch spans offsets it
    no longer holds, and they are never listed one by one)."""

    offsets: dict[int, int] = field(default_factory=dict)
    ranges: list[tuple[int, int, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.offsets or self.ranges)

    def batches(self) -> list[tuple[int, int, list[int]]]:
        """The acknowledgement batches to send (see :func:`ack_batches`)."""
        return ack_batches(self.offsets, self.ranges)


def ack_batches(acks: Mapping[int, int], ranges: Iterable[tuple[int, int, int]] = ()) -> list[tuple[int, int, list[int]]]:
    """``{offset: type}`` and ``(first, last, type)`` ranges as acknowledgement batches
    ``(first, last, types)`` in offset order: runs of consecutive offsets, with one type when the
    run has one, else a type per offset; a range is one batch.  What would overlap an earlier
    batch is left out (the broker refuses overlapping batches)."""
    out: list[tuple[int, int, list[int]]] = []
    run: list[tuple[int, int]] = []
    for offset, kind in sorted(acks.items()):
        if run and offset != run[-1][0] + 1:
            out.append(_batch(run))
            run = []
        run.append((offset, kind))
    if run:
        out.append(_batch(run))
    out += [(first, last, [kind]) for first, last, kind in ranges if 0 <= first <= last]
    out.sort(key=lambda b: b[0])
    merged: list[tuple[int, int, list[int]]] = []
    for b in out:
        if not merged or b[0] > merged[-1][1]:
            merged.append(b)
    return merged


def split_acquired(
    ranges: Iterable[tuple[int, int, int]], offsets: Sequence[int],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """What to do with one partition's acquired ranges ``(first, last, delivery count)``, given the
    ascending offsets of the records the answer's batches hold: ``(delivered, gaps)``, the records to
    deliver as ``(offset, delivery count)`` and the acquired offsets without a record as ``(first,
    last)`` ranges.  Ranges that are not ranges are ignored, overlapping ones clipped, records
    outside the ranges (other members' or not acquired) left out."""
    delivered: list[tuple[int, int]] = []
    gaps: list[tuple[int, int]] = []
    prev = -1
    i = 0
    for first, last, count in sorted(ranges):
        first = max(first, prev + 1, 0)
        if last < first:
            continue
        prev = last
        i = bisect.bisect_left(offsets, first, i)
        nxt = first
        while i < len(offsets) and offsets[i] <= last:
            o = offsets[i]
            i += 1
            if o < nxt:
                continue  # the same offset twice in the batches
            if o > nxt:
                gaps.append((nxt, o - 1))
            delivered.append((o, count))
            nxt = o + 1
        if nxt <= last:
            gaps.append((nxt, last))
    return delivered, gaps


def _batch(run: list[tuple[int, int]]) -> tuple[int, int, list[int]]:
    kinds = [k for _o, k in run]
    return run[0][0], run[-1][0], kinds[:1] if len(set(kinds)) == 1 else kinds


class AsyncShareConsumer:
    """The asyncio share consumer (see the module docstring)::

        consumer = AsyncShareConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "workers"})
        consumer.subscribe(["jobs"])
        while True:
            for record in await consumer.poll(1.0):
                handle(record)
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        cfg = merge_config(SHARE_CONSUMER_DEFAULTS, config, kwargs)
        self.config = cfg
        if not cfg["group.id"]:
            raise ClientConfigError("a share consumer needs a group.id")
        mode = str(cfg["share.acknowledgement.mode"]).lower()
        if mode not in ("implicit", "explicit"):
            raise ClientConfigError(f"invalid share.acknowledgement.mode {cfg['share.acknowledgement.mode']!r}")
        self.explicit = mode == "explicit"
        self.group_id = str(cfg["group.id"])
        self.max_poll_records = int(cfg["max.poll.records"])
        if self.max_poll_records < 1:
            raise ClientConfigError(f"invalid max.poll.records {cfg['max.poll.records']!r}")
        self.max_wait_ms = int(cfg["fetch.max.wait.ms"])
        self.timeout_ms = int(cfg["default.api.timeout.ms"])
        # the records are decoded by the simple consumer's decoder (and its connections are ours)
        self._fetcher = AsyncSimpleConsumer({k: v for k, v in cfg.items() if k in CONSUMER_DEFAULTS})
        self._cluster = self._fetcher._cluster
        self._membership = ShareMembership(
            self._cluster, group_id=self.group_id, rack_id=cfg["client.rack"],
            retry_backoff_ms=int(cfg["retry.backoff.ms"]), on_assignment=self._on_assignment,
        )
        #: partitions given to :meth:`_assign` (tests only: no group membership), else None
        self._manual: set[TopicPartition] | None = None
        self._subscription: list[str] = []
        self._sessions: dict[int, _Session] = {}
        self._buffer: deque[ShareRecord] = deque()
        #: records delivered to the application and not acknowledged yet, by partition and offset
        self._delivered: dict[TopicPartition, dict[int, ShareRecord]] = {}
        #: records the application renewed (RENEW): still its own, to be acknowledged later
        self._renewed: dict[TopicPartition, set[int]] = {}
        #: acknowledgements to send, by partition: offset -> type
        self._acks: dict[TopicPartition, PendingAcks] = {}
        self._ids: dict[str, uuid.UUID] = {}
        #: a partition's leader changed: the next fetch round refreshes the metadata first
        self._refresh = False
        self._changed = asyncio.Event()
        self._error: KafkaError | None = None
        self._callback: AcknowledgementCommitCallback | None = None
        #: background ShareAcknowledge requests (kept referenced until done)
        self._background: set[asyncio.Task[CommitResults]] = set()
        self._closed = False

    # -- subscription ------------------------------------------------------------------------------
    @property
    def member_id(self) -> str:
        """This member's id in the share group (a UUID the client made)."""
        return self._membership.member_id

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group for ``topics`` (replacing an earlier subscription; empty: as
        unsubscribe(), done by the next poll, which then raises IllegalStateError)."""
        self._check_open()
        names = list(topics)
        if any(not t for t in names) or len(set(names)) != len(names):
            raise ValueError("topic names must be non-empty and distinct")
        self._subscription = sorted(names)
        self._manual = None
        self._membership.subscribe(self._subscription)
        self._changed.set()

    def subscription(self) -> list[str]:
        """The topics given to subscribe()."""
        return list(self._subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions the group assigned this member (shared with other members)."""
        if self._manual is not None:
            return set(self._manual)
        return set(self._membership.assigned)

    def _assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Tests only: fetch these partitions without group membership (no heartbeats)."""
        self._manual = set(partitions)
        self._changed.set()

    def _on_assignment(self, partitions: set[TopicPartition]) -> None:
        # records fetched for partitions this member no longer has are not delivered: the
        # session forgets the partitions, and the broker releases them
        if self._buffer:
            self._buffer = deque(r for r in self._buffer if (r.topic, r.partition) in partitions)
        self._changed.set()

    async def unsubscribe(self) -> None:
        """Acknowledge what is due (in implicit mode: accept the last poll's records), close the share
        sessions (what this member holds goes to the others) and leave the group."""
        self._check_open()
        await self._end_sessions()
        self._subscription = []
        self._manual = None
        self._membership.subscribe([])
        await self._membership.leave()

    # -- acknowledgements ---------------------------------------------------------------------------
    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Explicit mode: acknowledge a record a poll returned (ACCEPT, RELEASE or REJECT, or RENEW to
        keep it longer: its lock starts again and it is acknowledged again later); it goes to the
        broker with the next poll or commit (a renewal in a ShareAcknowledge v2).  A record acknowledged but not sent yet may be
        acknowledged again (the last type counts).  IllegalStateError in implicit mode, or for a
        record not in flight."""
        self._check_open()
        if not self.explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit")
        kind = AcknowledgeType(type)
        if kind is AcknowledgeType.GAP:
            raise ValueError("a record is acknowledged as ACCEPT, RELEASE or REJECT")
        tp = (record.topic, record.partition)
        delivered = self._delivered.get(tp)
        renewed = self._renewed.get(tp)
        if delivered is not None and record.offset in delivered:
            del delivered[record.offset]
            if not delivered:
                del self._delivered[tp]
        elif renewed is not None and record.offset in renewed:
            pass
        elif tp not in self._acks or record.offset not in self._acks[tp].offsets:
            raise IllegalStateError(f"record {tp[0]}-{tp[1]} at offset {record.offset} is not in flight")
        if kind is AcknowledgeType.RENEW:
            self._renewed.setdefault(tp, set()).add(record.offset)
        elif renewed is not None:
            renewed.discard(record.offset)
            if not renewed:
                del self._renewed[tp]
        self._pending(tp).offsets[record.offset] = int(kind)

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """``callback(offsets, error)`` is called, on the consumer's event loop, for every partition's
        acknowledgements the broker answered (those sent with a poll's fetch too)."""
        self._callback = callback

    def _accept_delivered(self) -> None:
        """Implicit mode: the records the last poll returned are accepted.  Explicit mode: nothing
        (a record the application did not acknowledge stays held until its lock ends, or its
        session does)."""
        if self.explicit:
            return
        for tp, delivered in self._delivered.items():
            acks = self._pending(tp).offsets
            for offset in delivered:
                acks[offset] = AcknowledgeType.ACCEPT
        self._delivered.clear()

    def _pending(self, tp: TopicPartition) -> PendingAcks:
        acks = self._acks.get(tp)
        if acks is None:
            acks = self._acks[tp] = PendingAcks()
        return acks

    def _take_acks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PendingAcks]:
        out = {}
        for tp in list(partitions):
            acks = self._acks.pop(tp, None)
            if acks:
                out[tp] = acks
        return out

    def _has_acks(self) -> bool:
        """Whether acknowledgements wait to be sent (empty entries are dropped)."""
        self._acks = {tp: a for tp, a in self._acks.items() if a}
        return bool(self._acks)

    def _answered(self, results: CommitResults, tp: TopicPartition, sent: PendingAcks, error: KafkaError | None) -> None:
        if results.get(tp) is None:
            results[tp] = error
        if error is not None:
            log.debug("share group %s: acknowledging %s-%d failed: %s", self.group_id, tp[0], tp[1], error)
        if self._callback is not None:
            try:
                self._callback({tp: set(sent.offsets)}, error)
            except Exception:
                log.exception("the acknowledgement commit callback failed")

    # -- polling ----------------------------------------------------------------------------------
    async def poll(self, timeout: float = 1.0) -> list[ShareRecord]:
        """Records acquired for this member, at most ``max.poll.records``; empty after ``timeout``
        seconds without any.  In implicit mode the previous poll's records are accepted first; in
        explicit mode they must all have been acknowledged (IllegalStateError otherwise)."""
        self._check_open()
        if self.explicit and self._delivered:
            n = sum(len(d) for d in self._delivered.values())
            raise IllegalStateError(f"{n} records of the last poll are not acknowledged (explicit mode)")
        self._accept_delivered()
        if self._manual is None and not self._subscription:
            if self._membership.active or any(s.epoch > _INITIAL_EPOCH for s in self._sessions.values()):
                await self._end_sessions()  # subscribe([]): as unsubscribe()
                await self._membership.leave()
            raise IllegalStateError("the share consumer is not subscribed to any topic")
        if self._manual is None:
            self._membership.start()
        if self._buffer and self._has_acks():
            # no fetch is due (records are still buffered): the acknowledgements go now, in a
            # ShareAcknowledge, rather than wait for the buffer to drain
            task = asyncio.get_running_loop().create_task(self._commit(None))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        deadline = time.monotonic() + max(timeout, 0)
        first = True
        while not self._buffer and not self._closed:
            self._raise_error()
            remaining = deadline - time.monotonic()
            if not first and remaining <= 0:
                break
            first = False
            assigned = self.assignment()
            if not assigned and not self._has_acks() and not any(s.partitions for s in self._sessions.values()):
                # nothing to fetch, acknowledge or forget (the broker releases what a forgotten
                # partition's session held): wait for an assignment
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), max(remaining, 0))
                continue
            fetched = await self._fetch_round(int(min(self.max_wait_ms, max(remaining, 0) * 1000)))
            if not fetched and not self._buffer and time.monotonic() < deadline:
                # no leader to ask (metadata being refreshed, connection lost): not a busy loop
                await asyncio.sleep(min(self._fetcher.retry_backoff, max(deadline - time.monotonic(), 0)))
        return self._deliver()

    def _deliver(self) -> list[ShareRecord]:
        out: list[ShareRecord] = []
        while self._buffer and len(out) < self.max_poll_records:
            r = self._buffer.popleft()
            out.append(r)
            self._delivered.setdefault((r.topic, r.partition), {})[r.offset] = r
        return out

    def _raise_error(self) -> None:
        if self._membership.fatal is not None:
            raise self._membership.fatal
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def _leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's leader (-1: unknown), the metadata refreshed when one is unknown or stale."""
        parts = list(partitions)
        topics = {t for t, _p in parts}
        if any(self._cluster.leader(t, p) < 0 or t not in self._cluster.topics for t, p in parts) or (
            parts and (self._refresh or self._cluster.metadata_stale())
        ):
            self._refresh = False
            with contextlib.suppress(KafkaError, ConnectionError, TimeoutError):
                await self._cluster.refresh(topics)
        for t in topics:
            info = self._cluster.topics.get(t)
            if info is not None:
                self._ids[t] = info.topic_id
        return {tp: self._cluster.leader(*tp) for tp in parts}

    async def _fetch_round(self, max_wait_ms: int) -> bool:
        """One ShareFetch to every leader there is something to ask or tell (in parallel); whether
        any was sent."""
        assigned = self.assignment()
        if self._has_acks() and any(AcknowledgeType.RENEW in a.offsets.values() for a in self._acks.values()):
            # a fetch carrying renewals fetches nothing (KIP-1222): they go by ShareAcknowledge
            await self._commit(None)
        self._has_acks()
        leaders = await self._leaders(assigned | set(self._acks))
        wanted: dict[int, set[TopicPartition]] = {}
        for tp in assigned:
            if leaders[tp] >= 0:
                wanted.setdefault(leaders[tp], set()).add(tp)
        acks: dict[int, dict[TopicPartition, PendingAcks]] = {}
        for tp in list(self._acks):
            node = self._session_of(tp, leaders.get(tp, -1))
            if node is not None:
                acks.setdefault(node, {}).update(self._take_acks([tp]))
        nodes = set(wanted) | set(acks) | {n for n, s in self._sessions.items() if s.partitions - wanted.get(n, set())}
        if not nodes:
            return False
        await asyncio.gather(*(
            self._share_fetch(n, wanted.get(n, set()), acks.get(n, {}), max_wait_ms) for n in sorted(nodes)
        ))
        return True

    def _session_of(self, tp: TopicPartition, leader: int) -> int | None:
        """The leader whose session acquired ``tp``'s records (acknowledgements go there)."""
        for node, s in self._sessions.items():
            if tp in s.partitions and s.epoch > _INITIAL_EPOCH:
                return node
        return leader if leader >= 0 else None

    async def _share_fetch(
        self, node: int, wanted: set[TopicPartition], acks: dict[TopicPartition, PendingAcks], max_wait_ms: int,
        results: CommitResults | None = None,
    ) -> None:
        results = {} if results is None else results
        s = self._sessions.get(node)
        if s is None:
            s = self._sessions[node] = _Session(node)
        async with s.lock:
            if s.epoch == _INITIAL_EPOCH and acks:
                # a new session acknowledges nothing: what the old one acquired is gone with it
                for tp, sent in acks.items():
                    self._answered(results, tp, sent, KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                                                                 "the share session that acquired the records is closed"))
                acks = {}
            add = wanted if s.epoch == _INITIAL_EPOCH else wanted - s.partitions
            forget = set() if s.epoch == _INITIAL_EPOCH else s.partitions - wanted
            if not add and not forget and not acks and not wanted:
                return
            listed = sorted(add | set(acks))
            by_topic: dict[str, list[ShareFetchRequest.FetchPartition]] = {}
            for t, p in listed:
                by_topic.setdefault(t, []).append(ShareFetchRequest.FetchPartition(
                    partition_index=p,
                    acknowledgement_batches=[
                        ShareFetchRequest.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=k)
                        for f, last, k in (acks[(t, p)].batches() if (t, p) in acks else [])
                    ],
                ))
            forgotten: dict[str, list[int]] = {}
            for t, p in sorted(forget):
                forgotten.setdefault(t, []).append(p)
            req = ShareFetchRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                share_session_epoch=s.epoch,
                max_wait_ms=max_wait_ms if wanted else 0,
                min_bytes=int(self.config["fetch.min.bytes"]),
                max_bytes=int(self.config["fetch.max.bytes"]),
                max_records=self.max_poll_records,
                batch_size=self.max_poll_records,
                topics=[ShareFetchRequest.FetchTopic(topic_id=self._ids[t], partitions=ps)
                        for t, ps in by_topic.items() if t in self._ids],
                forgotten_topics_data=[ShareFetchRequest.ForgottenTopic(topic_id=self._ids[t], partitions=ps)
                                       for t, ps in forgotten.items() if t in self._ids],
            )
            try:
                conn = await self._cluster.connection(node)
                v = conn.version_for(ShareFetchRequest, maximum=1)
                timeout = self._fetcher.request_timeout_ms / 1000 + max_wait_ms / 1000
                resp: ShareFetchResponse = await conn.request(req, v, timeout=timeout)
            except KafkaError as exc:
                self._fail_acks(results, acks, exc)
                if exc.code in _FATAL:
                    self._error = exc
                return
            except (ConnectionError, TimeoutError) as exc:
                # the broker ends the session with the connection (and releases its records); its
                # partitions may have a new leader by now: the next round asks the metadata again
                s.reset()
                self._refresh = True
                self._fail_acks(results, acks, KafkaError(ErrorCode.NETWORK_EXCEPTION, f"share fetch from broker {node}: {exc}"))
                return
            err = ErrorCode.of(resp.error_code)
            if err is not ErrorCode.NONE:
                error = KafkaError(err, resp.error_message or f"share fetch from broker {node}")
                self._fail_acks(results, acks, error)
                if err in _SESSION_ERRORS:
                    s.reset()
                elif err in _FATAL:
                    self._error = error
                return
            s.advance()
            s.partitions = (s.partitions | wanted) - forget
            names = {self._ids[t]: t for t in self._ids}
            for tr in resp.responses:
                topic = names.get(tr.topic_id)
                if topic is None:
                    continue
                for pd in tr.partitions:
                    self._partition_answer(s, (topic, pd.partition_index), pd, acks, results)

    def _fail_acks(self, results: CommitResults, acks: Mapping[TopicPartition, PendingAcks], error: KafkaError) -> None:
        for tp, sent in acks.items():
            self._answered(results, tp, sent, error)

    def _partition_answer(
        self, s: _Session, tp: TopicPartition, pd: ShareFetchResponse.PartitionData,
        acks: Mapping[TopicPartition, PendingAcks], results: CommitResults,
    ) -> None:
        if tp in acks:
            ack_err = ErrorCode.of(pd.acknowledge_error_code)
            error = None if ack_err is ErrorCode.NONE else KafkaError(
                ack_err, pd.acknowledge_error_message or f"acknowledging {tp[0]}-{tp[1]}")
            self._answered(results, tp, acks[tp], error)
        err = ErrorCode.of(pd.error_code)
        if err is not ErrorCode.NONE:
            log.debug("share fetch %s-%d from broker %d: %s", tp[0], tp[1], s.node_id, err.name)
            if err in _REFRESH_ERRORS:
                self._refresh = True  # look the leader up again
            elif err in _FATAL:
                self._error = KafkaError(err, pd.error_message or f"share fetch {tp[0]}-{tp[1]}")
            return
        if pd.acquired_records and tp in self.assignment():
            self._acquired(tp, pd)
        elif pd.acquired_records:
            # acquired for a partition no longer assigned: released with the next request
            self._release(tp, [(a.first_offset, a.last_offset, a.delivery_count) for a in pd.acquired_records])

    def _release(self, tp: TopicPartition, ranges: list[tuple[int, int, int]]) -> None:
        """Acquired records never delivered go back (RELEASE) with the next request."""
        _delivered, whole = split_acquired(ranges, [])
        self._pending(tp).ranges.extend((first, last, AcknowledgeType.RELEASE) for first, last in whole)

    def _acquired(self, tp: TopicPartition, pd: ShareFetchResponse.PartitionData) -> None:
        """The acquired records of one partition's answer into the buffer; acquired offsets without
        a record are acknowledged as gaps."""
        ranges = sorted((a.first_offset, a.last_offset, a.delivery_count) for a in pd.acquired_records)
        start = max(ranges[0][0], 0)
        decoded: list[ConsumerRecord] = []
        if pd.records:
            data = FetchResponse.PartitionData(partition_index=tp[1], high_watermark=-1, last_stable_offset=-1,
                                               log_start_offset=-1, records=pd.records)
            try:
                decoded = self._fetcher._decode(tp[0], tp[1], start, data)
            except Exception as exc:
                # records that do not decode are not delivered: they are released for a retry elsewhere
                # (and archived at the delivery limit)
                log.warning("share fetch %s-%d: the records do not decode (%s): released", tp[0], tp[1], exc)
                self._release(tp, ranges)
                return
        by_offset = {r.offset: r for r in decoded}
        delivered, gaps = split_acquired(ranges, sorted(by_offset))
        new = tuple.__new__
        self._buffer.extend(new(ShareRecord, (*by_offset[o], count)) for o, count in delivered)
        if gaps:
            self._pending(tp).ranges.extend((first, last, AcknowledgeType.GAP) for first, last in gaps)

    # -- commits ------------------------------------------------------------------------------------
    async def commit_sync(self, timeout: float | None = None) -> CommitResults:
        """Send the acknowledgements due (in implicit mode, the last poll's records accepted) with
        ShareAcknowledge, and wait up to ``timeout`` s (default ``default.api.timeout.ms``) for the
        answers: ``{(topic, partition): None or the KafkaError}`` (empty when nothing was due)."""
        self._check_open()
        self._accept_delivered()
        return await asyncio.wait_for(self._commit(None),
                                      self.timeout_ms / 1000 if timeout is None else timeout)

    def commit_async(self) -> asyncio.Task[CommitResults]:
        """commit_sync() in the background: the task's result is the per-partition results (and the
        acknowledgement commit callback sees them too)."""
        self._check_open()
        self._accept_delivered()
        return asyncio.get_running_loop().create_task(self._commit(None))

    async def _commit(self, closing: int | None) -> CommitResults:
        """ShareAcknowledge to every leader with acknowledgements due (``closing``: at epoch -1 to every
        session, closing it)."""
        results: CommitResults = {}
        leaders = await self._leaders(set(self._acks)) if self._has_acks() else {}
        by_node: dict[int, dict[TopicPartition, PendingAcks]] = {}
        for tp in list(self._acks):
            node = self._session_of(tp, leaders.get(tp, -1))
            if node is not None:
                by_node.setdefault(node, {}).update(self._take_acks([tp]))
            else:
                sent = self._acks.pop(tp)
                self._answered(results, tp, sent, KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp[0]}-{tp[1]}"))
        nodes = set(by_node)
        if closing is not None:
            nodes |= {n for n, s in self._sessions.items() if s.epoch > _INITIAL_EPOCH}
        await asyncio.gather(*(self._acknowledge(n, by_node.get(n, {}), results, closing) for n in sorted(nodes)))
        return results

    async def _acknowledge(
        self, node: int, acks: dict[TopicPartition, PendingAcks], results: CommitResults, closing: int | None,
    ) -> None:
        s = self._sessions.get(node)
        if s is None:
            s = self._sessions[node] = _Session(node)
        async with s.lock:
            if s.epoch == _INITIAL_EPOCH:
                self._fail_acks(results, acks, KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                                                          "the share session that acquired the records is closed"))
                return
            by_topic: dict[str, list[ShareAcknowledgeRequest.AcknowledgePartition]] = {}
            for (t, p), sent in sorted(acks.items()):
                if t not in self._ids:
                    continue
                by_topic.setdefault(t, []).append(ShareAcknowledgeRequest.AcknowledgePartition(
                    partition_index=p,
                    acknowledgement_batches=[
                        ShareAcknowledgeRequest.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=k)
                        for f, last, k in sent.batches()
                    ],
                ))
            renew = any(AcknowledgeType.RENEW in sent.offsets.values() for sent in acks.values())
            req = ShareAcknowledgeRequest(
                group_id=self.group_id, member_id=self.member_id,
                share_session_epoch=s.epoch if closing is None else _FINAL_EPOCH,
                topics=[ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=self._ids[t], partitions=ps)
                        for t, ps in by_topic.items()],
                is_renew_ack=renew,
            )
            try:
                conn = await self._cluster.connection(node)
                v = conn.version_for(ShareAcknowledgeRequest, maximum=2)
                if renew and v < 2:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                     f"broker {node} cannot renew acquisition locks (ShareAcknowledge v{v})")
                resp: ShareAcknowledgeResponse = await conn.request(req, v)
            except KafkaError as exc:
                self._fail_acks(results, acks, exc)
                return
            except (ConnectionError, TimeoutError) as exc:
                s.reset()
                self._refresh = True  # the leader may have moved
                self._fail_acks(results, acks, KafkaError(ErrorCode.NETWORK_EXCEPTION, f"share acknowledge to broker {node}: {exc}"))
                return
            err = ErrorCode.of(resp.error_code)
            if closing is not None:
                s.reset()
            if err is not ErrorCode.NONE:
                if err in _SESSION_ERRORS:
                    s.reset()
                self._fail_acks(results, acks, KafkaError(err, resp.error_message or f"share acknowledge to broker {node}"))
                return
            if closing is None:
                s.advance()
            names = {self._ids[t]: t for t in self._ids}
            answered = set()
            for tr in resp.responses:
                topic = names.get(tr.topic_id)
                for pd in tr.partitions:
                    tp = (topic or "", pd.partition_index)
                    if tp not in acks:
                        continue
                    answered.add(tp)
                    e = ErrorCode.of(pd.error_code)
                    self._answered(results, tp, acks[tp], None if e is ErrorCode.NONE else KafkaError(
                        e, pd.error_message or f"acknowledging {tp[0]}-{tp[1]}"))
            for tp in set(acks) - answered:
                self._answered(results, tp, acks[tp], KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "not answered"))

    # -- closing ------------------------------------------------------------------------------------
    async def _end_sessions(self) -> CommitResults:
        """Acknowledge what is due and close every share session (epoch -1): what this member still
        holds (fetched and not delivered, delivered and not acknowledged) is released by the broker."""
        if self.explicit:
            self._delivered.clear()
            self._renewed.clear()
        else:
            self._accept_delivered()
        self._buffer.clear()
        try:
            return await self._commit(_FINAL_EPOCH)
        finally:
            for s in self._sessions.values():
                s.reset()

    async def close(self) -> None:
        """Acknowledge what is due (implicit mode: the last poll's records accepted), close the share
        sessions, leave the group and close the connections.  Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._background:
                await asyncio.wait(set(self._background), timeout=self.timeout_ms / 1000)
            with contextlib.suppress(KafkaError, ConnectionError, TimeoutError):
                await asyncio.wait_for(self._end_sessions(), self.timeout_ms / 1000)
            await self._membership.leave()
        finally:
            await self._fetcher.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the share consumer is closed")

    async def __aenter__(self) -> AsyncShareConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _make(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> AsyncShareConsumer:
    return AsyncShareConsumer(config, **kwargs)


class ShareConsumer:
    """The blocking share consumer: :class:`AsyncShareConsumer` run on an event loop in a background
    thread (heartbeats go on while the caller works)::

        with ShareConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "workers"}) as consumer:
            consumer.subscribe(["jobs"])
            while True:
                for record in consumer.poll(1.0):
                    handle(record)   # accepted by the next poll (implicit mode)

    Not for use from several threads at once: give each worker thread its own consumer.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._runner = LoopThread("odradek-share-consumer")
        self._runner.start()
        try:
            self._async: AsyncShareConsumer = self._runner.call(_make(config, kwargs))
        except BaseException:
            self._runner.stop()
            raise
        self._closing = False

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._runner.is_current():
            coro.close()
            raise RuntimeError("ShareConsumer methods cannot be called from its callbacks")
        if self._runner.loop.is_closed():
            coro.close()
            raise IllegalStateError("the share consumer is closed")
        return self._runner.call(coro, timeout)

    def _run(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        return self._call(call())

    @property
    def member_id(self) -> str:
        """This member's id in the share group."""
        return self._async.member_id

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group for ``topics`` (replacing an earlier subscription)."""
        names = list(topics)
        self._run(lambda: self._async.subscribe(names))

    def subscription(self) -> list[str]:
        """The topics given to subscribe()."""
        return self._run(self._async.subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions the group assigned this member (shared with other members)."""
        return self._run(self._async.assignment)

    def unsubscribe(self) -> None:
        """Acknowledge what is due, close the share sessions and leave the group."""
        self._call(self._async.unsubscribe())

    def poll(self, timeout: float = 1.0) -> list[ShareRecord]:
        """Records acquired for this member, as :meth:`AsyncShareConsumer.poll`; [] when close() is
        called from another thread meanwhile."""
        try:
            return self._call(self._async.poll(timeout))
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            if self._closing:
                return []
            raise

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Explicit mode: acknowledge a record a poll returned, as :meth:`AsyncShareConsumer.acknowledge`."""
        self._run(lambda: self._async.acknowledge(record, type))

    def commit_sync(self, timeout: float | None = None) -> CommitResults:
        """Send the acknowledgements due and wait for the answers: ``{(topic, partition): None or the KafkaError}``."""
        wait = None if timeout is None else timeout + 1
        return self._call(self._async.commit_sync(timeout), wait)

    def commit_async(self) -> concurrent.futures.Future[CommitResults]:
        """Send the acknowledgements due in the background; the future's result is the per-partition results."""
        async def commit() -> CommitResults:
            return await self._async.commit_async()

        if self._runner.loop.is_closed():
            raise IllegalStateError("the share consumer is closed")
        self._run(self._async._check_open)
        return self._runner.submit(commit())

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """``callback(offsets, error)`` for every partition's acknowledgements the broker answered; it
        runs on the consumer's background thread and must not call the consumer."""
        self._run(lambda: self._async.set_acknowledgement_commit_callback(callback))

    def close(self) -> None:
        """Acknowledge what is due, close the share sessions, leave the group, stop the background thread."""
        if not self._runner.alive or self._closing:
            return
        self._closing = True
        try:
            self._call(self._async.close(), self._async.timeout_ms / 1000 + 10)
        finally:
            with contextlib.suppress(Exception):
                self._call(_cancel_all(), 10)
            self._runner.stop()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _cancel_all() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=5)
