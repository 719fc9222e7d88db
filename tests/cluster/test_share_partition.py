"""The share-partition state machine (:mod:`odradek.cluster.share_partition`, KIP-932).

Unit tests for every transition and error, then a hypothesis rule-based machine: several members
acquire, acknowledge (every type, valid and invalid ranges), leave, let locks expire on a fake
clock, and the log start moves. A per-offset model predicts every acknowledgement, release and
expiry exactly and checks each acquisition; after every step the invariants hold: each offset of
the window is in exactly one state (as the model says), an ACKNOWLEDGED offset is never acquired
again, delivery counts stay within the limit, the start offset never moves back and everything
below it was done, the snapshot restores the same state, and accepting everything empties the window.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from odradek.cluster.share_partition import (
    AckType,
    Acquired,
    Archived,
    ArchiveReason,
    RecordState,
    SharePartition,
    StateBatch,
)
from odradek.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (
    RecordState.AVAILABLE,
    RecordState.ACQUIRED,
    RecordState.ACKNOWLEDGED,
    RecordState.ARCHIVED,
)
ACCEPT, RELEASE, REJECT, GAP, RENEW = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP, AckType.RENEW


def sp(start: int = 0, *, lock_ms: int = 1000, limit: int = 3, max_in_flight: int = 2000, **kw: object) -> SharePartition:
    return SharePartition(start_offset=start, lock_ms=lock_ms, delivery_limit=limit, max_in_flight=max_in_flight, **kw)  # type: ignore[arg-type]


def states(p: SharePartition) -> dict[int, tuple[RecordState, int, str | None]]:
    out = {}
    for o in range(p.start_offset, p.end_offset):
        s = p.state_of(o)
        assert s is not None
        out[o] = s
    return out


# -- acquiring ---------------------------------------------------------------------------------------


def test_acquire_new_offsets_locks_them_for_the_member() -> None:
    p = sp(10)
    got = p.acquire("m1", [(10, 14), (15, 19)], max_records=100, now_ms=5)
    assert got == [Acquired(10, 19, 1)]
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (10, 20, 20)
    assert p.counts() == {AVAILABLE: 0, ACQUIRED: 10, ACKNOWLEDGED: 0, ARCHIVED: 0}
    assert p.acquired_by("m1") == 10 and p.acquired_by("m2") == 0
    assert p.next_deadline() == 1005
    assert p.snapshot() == [StateBatch(10, 19, 1, ACQUIRED)]
    # acquired offsets are not acquired again
    assert p.acquire("m2", [(10, 19)], max_records=100, now_ms=6) == []


def test_acquire_stops_after_max_records_at_a_batch_end() -> None:
    p = sp()
    got = p.acquire("m", [(0, 2), (3, 7), (8, 9)], max_records=4, now_ms=0)
    assert got == [Acquired(0, 7, 1)]  # the second batch is taken whole
    assert p.end_offset == 8 and p.next_fetch_offset() == 8
    assert p.acquire("m", [(8, 9)], max_records=0, now_ms=0) == []


def test_acquire_of_new_offsets_stops_at_max_in_flight() -> None:
    p = sp(max_in_flight=5)
    assert p.acquire("m", [(0, 9)], max_records=100, now_ms=0) == [Acquired(0, 4, 1)]
    assert p.end_offset == 5 and not p.can_acquire()
    assert p.acquire("m", [(5, 9)], max_records=100, now_ms=0) == []
    # in-flight offsets can always be acquired again, even with the window full
    p.acknowledge("m", 1, 1, [RELEASE], now_ms=0)
    assert p.can_acquire() and p.next_fetch_offset() == 1
    assert p.acquire("n", [(0, 9)], max_records=100, now_ms=0) == [Acquired(1, 1, 2)]
    # the window moves with the start offset
    assert p.acknowledge("m", 0, 0, [ACCEPT], now_ms=0) == (ErrorCode.NONE, [])
    assert p.start_offset == 1
    assert p.acquire("n", [(5, 9)], max_records=100, now_ms=0) == [Acquired(5, 5, 1)]


def test_acquire_re_delivers_available_offsets_and_new_ones_in_one_call() -> None:
    p = sp()
    p.acquire("a", [(0, 4)], max_records=10, now_ms=0)
    p.acknowledge("a", 0, 4, [ACCEPT, RELEASE, ACCEPT, RELEASE, RELEASE], now_ms=0)
    assert p.start_offset == 1 and p.next_fetch_offset() == 1
    got = p.acquire("b", [(0, 4), (5, 6)], max_records=10, now_ms=0)
    assert got == [Acquired(1, 1, 2), Acquired(3, 4, 2), Acquired(5, 6, 1)]
    assert p.state_of(2) == (ACKNOWLEDGED, 1, None)


def test_offsets_below_the_start_are_ignored() -> None:
    p = sp(100)
    assert p.acquire("m", [(90, 99)], max_records=10, now_ms=0) == []
    assert p.acquire("m", [(95, 104)], max_records=10, now_ms=0) == [Acquired(100, 104, 1)]
    assert p.start_offset == 100


def test_aborted_records_are_archived_never_acquired() -> None:
    p = sp()
    out: list[Archived] = []
    got = p.acquire("m", [(0, 9)], max_records=100, now_ms=0, aborted=[(3, 4), (0, 0)], archived=out)
    assert got == [Acquired(1, 2, 1), Acquired(5, 9, 1)]
    assert p.start_offset == 1  # the leading aborted offset is done
    assert [(a.offset, a.delivery_count, a.reason, a.member_id) for a in out] == [
        (0, 0, ArchiveReason.ABORTED, None),
        (3, 0, ArchiveReason.ABORTED, None),
        (4, 0, ArchiveReason.ABORTED, None),
    ]
    assert p.state_of(3) == (ARCHIVED, 0, None)
    # an AVAILABLE in-flight offset found aborted (state restored without the read) is archived too
    q = sp(state_batches=[StateBatch(0, 4, 1, AVAILABLE)])
    out = []
    assert q.acquire("m", [(0, 4)], max_records=9, now_ms=0, aborted=[(2, 2)], archived=out) == [
        Acquired(0, 1, 2),
        Acquired(3, 4, 2),
    ]
    assert out == [Archived(2, 1, ArchiveReason.ABORTED, None)]


def test_offsets_without_records_are_archived_silently() -> None:
    p = sp()
    out: list[Archived] = []
    # holes between batches, before the first batch (new offsets), and control batches (gaps)
    got = p.acquire("m", [(3, 4), (7, 9), (10, 10)], max_records=100, now_ms=0, gaps=[(10, 10)], archived=out)
    assert got == [Acquired(3, 4, 1), Acquired(7, 9, 1)]
    assert out == []
    assert p.start_offset == 3 and p.end_offset == 11
    assert [p.state_of(o) for o in (5, 6, 10)] == [(ARCHIVED, 0, None)] * 3
    # with fetch_offset, AVAILABLE in-flight offsets before the first batch are known to be gone
    p.acknowledge("m", 3, 4, [RELEASE], now_ms=0)
    assert p.acquire("n", [(11, 12)], max_records=100, now_ms=0, fetch_offset=3) == [Acquired(11, 12, 1)]
    assert p.start_offset == 7  # 3 and 4 archived, then 5 and 6 (archived before)
    # without it, they are left alone
    q = sp(state_batches=[StateBatch(0, 1, 1, AVAILABLE)])
    assert q.acquire("n", [(2, 3)], max_records=100, now_ms=0) == [Acquired(2, 3, 1)]
    assert q.next_fetch_offset() == 0


def test_acquire_refuses_unordered_batches() -> None:
    with pytest.raises(ValueError):
        sp().acquire("m", [(5, 9), (0, 4)], max_records=10, now_ms=0)
    with pytest.raises(ValueError):
        sp().acquire("m", [(5, 4)], max_records=10, now_ms=0)


def test_a_lowered_delivery_limit_archives_instead_of_acquiring() -> None:
    p = sp(limit=5)
    p.acquire("m", [(0, 1)], max_records=10, now_ms=0)
    p.acknowledge("m", 0, 1, [RELEASE], now_ms=0)
    p.acquire("m", [(0, 1)], max_records=10, now_ms=0)
    p.acknowledge("m", 0, 1, [RELEASE], now_ms=0)
    p.delivery_limit = 2
    out: list[Archived] = []
    assert p.acquire("m", [(0, 1)], max_records=10, now_ms=0, archived=out) == []
    assert out == [Archived(0, 2, ArchiveReason.DELIVERY_LIMIT, None), Archived(1, 2, ArchiveReason.DELIVERY_LIMIT, None)]
    assert p.start_offset == p.end_offset == 2


# -- acknowledging -----------------------------------------------------------------------------------


def acquired(n: int = 10, **kw: object) -> SharePartition:
    p = sp(**kw)  # type: ignore[arg-type]
    p.acquire("m", [(0, n - 1)], max_records=n, now_ms=0)
    return p


def test_accept_acknowledges_and_the_start_moves_over_done_offsets() -> None:
    p = acquired()
    assert p.acknowledge("m", 2, 4, [ACCEPT], now_ms=1) == (ErrorCode.NONE, [])
    assert p.start_offset == 0 and p.state_of(3) == (ACKNOWLEDGED, 1, None)
    assert p.acknowledge("m", 0, 1, [ACCEPT], now_ms=1) == (ErrorCode.NONE, [])
    assert p.start_offset == 5
    assert p.counts() == {AVAILABLE: 0, ACQUIRED: 5, ACKNOWLEDGED: 0, ARCHIVED: 0}
    assert p.acknowledge("m", 5, 9, [ACCEPT], now_ms=1) == (ErrorCode.NONE, [])
    assert p.start_offset == p.end_offset == 10 and p.snapshot() == []


def test_release_makes_records_available_again_until_the_limit() -> None:
    p = acquired(2, limit=2)
    assert p.acknowledge("m", 0, 1, [RELEASE], now_ms=1) == (ErrorCode.NONE, [])
    assert p.state_of(0) == (AVAILABLE, 1, None) and p.next_fetch_offset() == 0
    assert p.next_deadline() is None
    assert p.acquire("n", [(0, 1)], max_records=9, now_ms=2) == [Acquired(0, 1, 2)]
    code, out = p.acknowledge("n", 0, 1, [RELEASE], now_ms=3)
    assert code == ErrorCode.NONE
    assert out == [Archived(0, 2, ArchiveReason.DELIVERY_LIMIT, "n"), Archived(1, 2, ArchiveReason.DELIVERY_LIMIT, "n")]
    assert p.start_offset == 2


def test_reject_archives_with_an_event_and_gap_without() -> None:
    p = acquired(4)
    code, out = p.acknowledge("m", 0, 3, [REJECT, GAP, ACCEPT, REJECT], now_ms=1)
    assert code == ErrorCode.NONE
    assert out == [Archived(0, 1, ArchiveReason.REJECTED, "m"), Archived(3, 1, ArchiveReason.REJECTED, "m")]
    assert p.start_offset == p.end_offset == 4


def test_renew_extends_the_lock() -> None:
    p = acquired(4, lock_ms=100)
    assert p.acknowledge("m", 1, 2, [RENEW], now_ms=50) == (ErrorCode.NONE, [])
    assert p.state_of(1) == (ACQUIRED, 1, "m")
    assert p.expire(100) == []
    assert [p.state_of(o) for o in range(4)] == [(AVAILABLE, 1, None), (ACQUIRED, 1, "m"), (ACQUIRED, 1, "m"), (AVAILABLE, 1, None)]
    assert p.next_deadline() == 150
    p.expire(149)
    assert p.acquired_by("m") == 2
    p.expire(150)
    assert p.acquired_by("m") == 0


def test_per_offset_types_are_applied_offset_by_offset() -> None:
    p = acquired(6)
    code, _ = p.acknowledge("m", 0, 5, [ACCEPT, RELEASE, RELEASE, ACCEPT, RENEW, GAP], now_ms=1)
    assert code == ErrorCode.NONE
    assert [p.state_of(o) for o in range(1, 6)] == [
        (AVAILABLE, 1, None),
        (AVAILABLE, 1, None),
        (ACKNOWLEDGED, 1, None),
        (ACQUIRED, 1, "m"),
        (ARCHIVED, 1, None),
    ]
    assert p.start_offset == 1


@pytest.mark.parametrize(
    ("member", "first", "last", "types", "code"),
    [
        ("other", 0, 4, [ACCEPT], ErrorCode.INVALID_RECORD_STATE),  # not the owner
        ("m", 4, 6, [ACCEPT], ErrorCode.INVALID_RECORD_STATE),  # 5 is AVAILABLE
        ("m", 7, 7, [ACCEPT], ErrorCode.INVALID_RECORD_STATE),  # ACKNOWLEDGED
        ("m", 9, 12, [ACCEPT], ErrorCode.INVALID_REQUEST),  # past the end offset (Kafka's answer)
        ("m", 10, 10, [ACCEPT], ErrorCode.INVALID_REQUEST),
        ("m", 0, 1, [5], ErrorCode.INVALID_REQUEST),  # unknown type
        ("m", 0, 1, [-1], ErrorCode.INVALID_REQUEST),
        ("m", 0, 2, [ACCEPT, ACCEPT], ErrorCode.INVALID_REQUEST),  # neither one type nor one per offset
        ("m", 0, 1, [], ErrorCode.INVALID_REQUEST),
        ("m", 3, 2, [ACCEPT], ErrorCode.INVALID_REQUEST),  # last before first
    ],
)
def test_a_refused_acknowledgement_changes_nothing(
    member: str, first: int, last: int, types: list[int], code: ErrorCode
) -> None:
    p = acquired()
    p.acknowledge("m", 5, 6, [RELEASE], now_ms=0)
    p.acknowledge("m", 7, 7, [ACCEPT], now_ms=0)
    before = (p.snapshot(), states(p), p.next_deadline())
    assert p.acknowledge(member, first, last, types, now_ms=1) == (code, [])
    assert (p.snapshot(), states(p), p.next_deadline()) == before


def test_acknowledging_below_the_start_offset() -> None:
    p = acquired()
    p.advance_start(4)
    before = states(p)
    # wholly below: INVALID_RECORD_STATE, as Kafka (the offsets are no longer in flight)
    assert p.acknowledge("m", 0, 3, [ACCEPT], now_ms=0) == (ErrorCode.INVALID_RECORD_STATE, [])
    assert states(p) == before
    # partly below: Kafka acknowledges the offsets still in flight and skips the rest
    code, out = p.acknowledge("m", 2, 5, [REJECT, REJECT, ACCEPT, REJECT], now_ms=0)
    assert code == ErrorCode.NONE and out == [Archived(5, 1, ArchiveReason.REJECTED, "m")]
    assert p.start_offset == 6


# -- releasing, expiring, moving the start -----------------------------------------------------------


def test_release_member_frees_only_that_members_records() -> None:
    p = sp(limit=1)
    p.acquire("a", [(0, 2)], max_records=3, now_ms=0)
    p.acquire("b", [(3, 5)], max_records=3, now_ms=0)
    out = p.release_member("a", now_ms=1)
    assert out == [Archived(o, 1, ArchiveReason.DELIVERY_LIMIT, "a") for o in range(3)]
    assert p.start_offset == 3 and p.acquired_by("b") == 3
    assert p.release_member("nobody", now_ms=1) == []
    p.delivery_limit = 2
    assert p.release_member("b", now_ms=1) == []
    assert p.counts()[AVAILABLE] == 3 and p.next_fetch_offset() == 3


def test_expire_releases_locks_at_their_deadline() -> None:
    p = sp(lock_ms=100, limit=2)
    p.acquire("a", [(0, 1)], max_records=2, now_ms=0)
    p.acquire("b", [(2, 3)], max_records=2, now_ms=50)
    assert p.next_deadline() == 100
    assert p.expire(99) == [] and p.acquired_by("a") == 2
    assert p.expire(100) == [] and p.acquired_by("a") == 0 and p.acquired_by("b") == 2
    assert p.next_deadline() == 150
    p.acquire("c", [(0, 1)], max_records=2, now_ms=120)
    assert p.expire(10_000) == [Archived(0, 2, ArchiveReason.DELIVERY_LIMIT, "c"), Archived(1, 2, ArchiveReason.DELIVERY_LIMIT, "c")]
    assert p.next_deadline() is None and p.start_offset == 2 and p.next_fetch_offset() == 2


def test_advance_start_forgets_offsets_below_and_never_moves_back() -> None:
    p = acquired()
    p.advance_start(3)
    assert p.start_offset == 3 and p.acquired_by("m") == 7 and p.state_of(2) is None
    p.advance_start(1)
    assert p.start_offset == 3
    p.acknowledge("m", 5, 5, [ACCEPT], now_ms=0)
    p.advance_start(5)  # lands on a done offset: moves over it
    assert p.start_offset == 6
    p.advance_start(50)
    assert p.start_offset == p.end_offset == 50 and p.snapshot() == [] and p.next_fetch_offset() == 50
    assert p.acquire("m", [(40, 52)], max_records=100, now_ms=0) == [Acquired(50, 52, 1)]


# -- persisted state --------------------------------------------------------------------------------


def test_restore_makes_acquired_offsets_available() -> None:
    batches = [
        StateBatch(5, 6, 1, ACKNOWLEDGED),
        StateBatch(7, 9, 2, ACQUIRED),
        StateBatch(10, 10, 1, ARCHIVED),
        StateBatch(13, 14, 1, ACKNOWLEDGED),
    ]
    p = sp(5, state_batches=reversed(batches))
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (7, 15, 7)
    assert p.snapshot() == [
        StateBatch(7, 9, 2, AVAILABLE),
        StateBatch(10, 10, 1, ARCHIVED),
        StateBatch(11, 12, 0, AVAILABLE),  # between persisted batches: never delivered
        StateBatch(13, 14, 1, ACKNOWLEDGED),
    ]
    assert p.acquire("m", [(7, 14)], max_records=100, now_ms=0) == [Acquired(7, 9, 3), Acquired(11, 12, 1)]


def test_restore_clips_below_the_start_and_refuses_overlaps() -> None:
    p = sp(8, state_batches=[StateBatch(5, 9, 1, AVAILABLE)])
    assert p.snapshot() == [StateBatch(8, 9, 1, AVAILABLE)]
    assert sp(20, state_batches=[StateBatch(5, 9, 1, AVAILABLE)]).snapshot() == []
    with pytest.raises(ValueError):
        sp(0, state_batches=[StateBatch(0, 5, 1, AVAILABLE), StateBatch(5, 6, 1, AVAILABLE)])
    with pytest.raises(ValueError):
        sp(0, state_batches=[StateBatch(3, 2, 1, AVAILABLE)])
    with pytest.raises(ValueError):
        sp(0, state_batches=[StateBatch(0, 2, 1, 3)])  # type: ignore[arg-type]


def test_snapshot_merges_runs_of_one_state_and_count() -> None:
    p = sp()
    p.acquire("a", [(0, 4)], max_records=5, now_ms=0)
    p.acquire("b", [(5, 9)], max_records=5, now_ms=7)
    assert p.snapshot() == [StateBatch(0, 9, 1, ACQUIRED)]  # owners and deadlines are not persisted


def test_runs_stay_few_for_large_batches() -> None:
    """A 500-record batch is one run when acquired and acknowledged with one type."""
    p = sp()
    p.acquire("m", [(0, 499)], max_records=500, now_ms=0)
    assert len(p._runs) == 1
    p.acknowledge("m", 0, 499, [RELEASE], now_ms=0)
    assert len(p._runs) == 1
    p.acquire("m", [(0, 499)], max_records=500, now_ms=0)
    p.acknowledge("m", 0, 499, [ACCEPT] * 250 + [RELEASE] * 250, now_ms=0)
    assert len(p._runs) == 1 and p.start_offset == 250


# -- the machine ---------------------------------------------------------------------------------------

MEMBERS = ("m1", "m2", "m3")
LIMIT = 3
LOCK_MS = 100
WINDOW = 25


class SharePartitionMachine(RuleBasedStateMachine):
    """Members against one share partition; ``model`` holds every in-flight offset's
    [state, delivery count, owner, deadline], predicted independently of the implementation."""

    @initialize(start=st.integers(0, 5))
    def setup(self, start: int) -> None:
        self.p = SharePartition(start_offset=start, lock_ms=LOCK_MS, delivery_limit=LIMIT, max_in_flight=WINDOW)
        self.now = 0
        self.model: dict[int, list] = {}
        self.start = start
        self.end = start
        self.done_below: set[int] = set()  # offsets acknowledged or archived
        self.forgotten: set[int] = set()  # offsets dropped by advance_start
        self.accepted: set[int] = set()
        self.log_end = start  # the log's next offset: batches are read from it

    # -- model helpers

    def _sync_window(self) -> None:
        """Drop model offsets below the start (checking they were done or forgotten)."""
        for o in [o for o in self.model if o < self.p.start_offset]:
            state = self.model.pop(o)[0]
            assert state in (ACKNOWLEDGED, ARCHIVED) or o in self.forgotten, (o, state)
            self.done_below.add(o)

    def _release(self, o: int, member: str, events: list[Archived]) -> None:
        entry = self.model[o]
        if entry[1] >= LIMIT:
            events.append(Archived(o, entry[1], ArchiveReason.DELIVERY_LIMIT, member))
            self.model[o] = [ARCHIVED, entry[1], None, 0]
        else:
            self.model[o] = [AVAILABLE, entry[1], None, 0]

    # -- rules

    @rule(
        member=st.sampled_from(MEMBERS),
        shape=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6)), min_size=1, max_size=5),
        back=st.integers(0, 3),
        max_records=st.integers(0, 12),
        aborted_every=st.integers(0, 7),
        pass_fetch_offset=st.booleans(),
    )
    def acquire(
        self,
        member: str,
        shape: list[tuple[int, int]],
        back: int,
        max_records: int,
        aborted_every: int,
        pass_fetch_offset: bool,
    ) -> None:
        # batches as the leader reads them from (a little before) next_fetch_offset(): (hole
        # before, size) each; holes only past what was read before (offsets never reappear)
        nfo = self.p.next_fetch_offset()
        pos = max(self.start, nfo - back)
        batches = []
        for hole, size in shape:
            base = pos + (hole if pos >= self.log_end else 0)
            batches.append((base, base + size - 1))
            pos = base + size
        aborted = [(b, b) for b, _ in batches if aborted_every and b % aborted_every == 0 and b >= self.log_end]
        fetch_offset = nfo if pass_fetch_offset else None
        expected, expected_events = self._predict_acquire(member, batches, max_records, aborted, fetch_offset)
        events: list[Archived] = []
        got = self.p.acquire(
            member,
            batches,
            max_records=max_records,
            now_ms=self.now,
            aborted=aborted,
            fetch_offset=fetch_offset,
            archived=events,
        )
        self.log_end = max(self.log_end, batches[-1][1] + 1)
        # runs are maximal, ascending, one count each
        for x, y in itertools.pairwise(got):
            assert x.last_offset < y.first_offset
            assert x.last_offset + 1 < y.first_offset or x.delivery_count != y.delivery_count
        taken = {o: a.delivery_count for a in got for o in range(a.first_offset, a.last_offset + 1)}
        assert taken == expected
        assert not set(taken) & self.accepted, "an accepted offset was acquired again"
        assert events == expected_events
        self._sync_window()

    def _predict_acquire(
        self,
        member: str,
        batches: list[tuple[int, int]],
        max_records: int,
        aborted: list[tuple[int, int]],
        fetch_offset: int | None,
    ) -> tuple[dict[int, int], list[Archived]]:
        """The offsets acquired (with their delivery counts) and the records archived, one offset at
        a time; the model is updated."""
        start, end = self.p.start_offset, self.p.end_offset
        new_limit = start + WINDOW
        dead = {o for a, b in aborted for o in range(a, b + 1)}
        taken: dict[int, int] = {}
        events: list[Archived] = []
        pos = max(start, min(batches[0][0] if fetch_offset is None else fetch_offset, batches[0][0]))

        def archive(o: int, reason: ArchiveReason | None) -> None:
            count = self.model[o][1]
            if reason is not None:
                events.append(Archived(o, count, reason, None))
            self.model[o] = [ARCHIVED, count, None, 0]

        for base, last in batches:
            if len(taken) >= max_records or (end >= new_limit and pos >= end):
                break
            full = False
            # new offsets follow end_offset: any before the batch hold no record
            for o in range(min(max(pos, start), end), last + 1):
                hole = o < base
                if o >= end:
                    if end >= new_limit:
                        full = True
                        break
                    self.model[o] = [AVAILABLE, 0, None, 0]
                    end += 1
                if self.model[o][0] != AVAILABLE:
                    continue
                if hole:
                    archive(o, None)
                elif o in dead:
                    archive(o, ArchiveReason.ABORTED)
                elif self.model[o][1] >= LIMIT:
                    archive(o, ArchiveReason.DELIVERY_LIMIT)
                else:
                    count = self.model[o][1] + 1
                    self.model[o] = [ACQUIRED, count, member, self.now + LOCK_MS]
                    taken[o] = count
            if full:
                break
            pos = max(pos, last + 1)
        return taken, events

    def _held_run(self, data: st.DataObject) -> tuple[str, int, int] | None:
        held = sorted(o for o, e in self.model.items() if e[0] == ACQUIRED)
        if not held:
            return None
        o = data.draw(st.sampled_from(held))
        member = self.model[o][2]
        last = o
        length = data.draw(st.integers(1, 8))
        while last + 1 in self.model and self.model[last + 1][0] == ACQUIRED and self.model[last + 1][2] == member and last - o + 1 < length:
            last += 1
        assert member is not None
        return member, o, last

    @rule(data=st.data(), per_offset=st.booleans())
    def acknowledge_held(self, data: st.DataObject, per_offset: bool) -> None:
        run = self._held_run(data)
        if run is None:
            return
        member, first, last = run
        n = last - first + 1
        kinds = st.sampled_from(list(AckType))
        types = data.draw(st.lists(kinds, min_size=n, max_size=n)) if per_offset else [data.draw(kinds)]
        self._acknowledge(member, first, last, [int(t) for t in types])

    @rule(
        member=st.sampled_from(MEMBERS),
        first=st.integers(-2, 40),
        size=st.integers(-1, 6),
        types=st.lists(st.integers(-1, 5), min_size=1, max_size=3),
    )
    def acknowledge_anything(self, member: str, first: int, size: int, types: list[int]) -> None:
        self._acknowledge(member, first, first + size, types)

    def _acknowledge(self, member: str, first: int, last: int, types: list[int]) -> None:
        n = last - first + 1
        expected_events: list[Archived] = []
        if first < 0 or n < 1 or len(types) not in (1, n) or not all(0 <= t <= 4 for t in types):
            expected = ErrorCode.INVALID_REQUEST
        elif last < self.p.start_offset:
            expected = ErrorCode.INVALID_RECORD_STATE
        elif last >= self.p.end_offset:
            expected = ErrorCode.INVALID_REQUEST
        else:
            lo = max(first, self.p.start_offset)
            if all(self.model[o][0] == ACQUIRED and self.model[o][2] == member for o in range(lo, last + 1)):
                expected = ErrorCode.NONE
            else:
                expected = ErrorCode.INVALID_RECORD_STATE
        before = self.p.snapshot()
        code, events = self.p.acknowledge(member, first, last, types, now_ms=self.now)
        assert code == expected, (code, expected, member, first, last, types)
        if code != ErrorCode.NONE:
            assert events == [] and self.p.snapshot() == before
            return
        for o in range(max(first, self.start), last + 1):
            t = types[0] if len(types) == 1 else types[o - first]
            entry = self.model[o]
            if t == ACCEPT:
                self.model[o] = [ACKNOWLEDGED, entry[1], None, 0]
                self.accepted.add(o)
            elif t == RELEASE:
                self._release(o, member, expected_events)
            elif t == REJECT:
                expected_events.append(Archived(o, entry[1], ArchiveReason.REJECTED, member))
                self.model[o] = [ARCHIVED, entry[1], None, 0]
            elif t == GAP:
                self.model[o] = [ARCHIVED, entry[1], None, 0]
            else:
                entry[3] = self.now + LOCK_MS
        assert events == expected_events
        self._sync_window()

    @rule(member=st.sampled_from(MEMBERS))
    def release_member(self, member: str) -> None:
        expected: list[Archived] = []
        for o in sorted(self.model):
            if self.model[o][0] == ACQUIRED and self.model[o][2] == member:
                self._release(o, member, expected)
        assert self.p.release_member(member, now_ms=self.now) == expected
        self._sync_window()

    @rule(dt=st.integers(0, 2 * LOCK_MS))
    def tick_and_expire(self, dt: int) -> None:
        self.now += dt
        expected: list[Archived] = []
        for o in sorted(self.model):
            e = self.model[o]
            if e[0] == ACQUIRED and e[3] <= self.now:
                self._release(o, e[2], expected)
        assert self.p.expire(self.now) == expected
        self._sync_window()

    @precondition(lambda self: self.p.next_deadline() is not None)
    @rule()
    def expire_at_the_next_deadline(self) -> None:
        deadline = self.p.next_deadline()
        assert deadline is not None
        self.tick_and_expire(max(0, deadline - self.now))

    @rule(delta=st.integers(-3, 8))
    def advance_start(self, delta: int) -> None:
        target = self.p.start_offset + delta
        for o in range(self.p.start_offset, target):
            self.forgotten.add(o)
        self.p.advance_start(target)
        if target > self.end:
            self.end = target
            self.log_end = max(self.log_end, target)
        self._sync_window()

    @precondition(lambda self: bool(self.model))
    @rule()
    def restore(self) -> None:
        """A new leader restores the persisted state: acquired offsets are available again."""
        restored = SharePartition(
            start_offset=self.p.start_offset,
            lock_ms=LOCK_MS,
            delivery_limit=LIMIT,
            max_in_flight=WINDOW,
            state_batches=self.p.snapshot(),
        )
        self.p = restored
        for e in self.model.values():
            if e[0] == ACQUIRED:
                e[0], e[2], e[3] = AVAILABLE, None, 0

    @rule()
    def everyone_accepts_everything(self) -> None:
        drain(self.p, self.now)
        assert self.p.start_offset == self.p.end_offset
        # the model does not follow drain's steps: its offsets are done, below the start now
        self.forgotten.update(self.model)
        self.model = {}

    # -- invariants

    @invariant()
    def window_matches_the_model(self) -> None:
        p = self.p
        assert p.start_offset >= self.start, "the start offset moved back"
        assert p.end_offset >= self.end, "the end offset moved back"
        self.start = p.start_offset
        self.end = p.end_offset
        assert set(self.model) == set(range(p.start_offset, p.end_offset))
        for o, e in self.model.items():
            assert p.state_of(o) == (e[0], e[1], e[2]), (o, p.state_of(o), e)
            assert e[1] <= LIMIT
        assert p.state_of(p.start_offset - 1) is None and p.state_of(p.end_offset) is None
        assert p.start_offset == p.end_offset or p.state_of(p.start_offset)[0] not in (ACKNOWLEDGED, ARCHIVED)
        deadlines = [e[3] for e in self.model.values() if e[0] == ACQUIRED]
        assert p.next_deadline() == (min(deadlines) if deadlines else None)
        counts = dict.fromkeys(RecordState, 0)
        for e in self.model.values():
            counts[e[0]] += 1
        assert p.counts() == counts
        for m in MEMBERS:
            assert p.acquired_by(m) == sum(1 for e in self.model.values() if e[0] == ACQUIRED and e[2] == m)
        available = [o for o, e in self.model.items() if e[0] == AVAILABLE]
        assert p.next_fetch_offset() == (min(available) if available else p.end_offset)
        assert p.end_offset - p.start_offset <= WINDOW

    @invariant()
    def runs_are_contiguous_and_merged(self) -> None:
        runs = self.p._runs
        if not runs:
            assert self.p.start_offset == self.p.end_offset
            return
        for run in runs:
            for o in range(run.first, run.last + 1):
                if run.state == ACQUIRED:
                    assert run.deadline == self.model[o][3], "lock deadline"
        assert runs[0].first == self.p.start_offset and runs[-1].last == self.p.end_offset - 1
        for x, y in itertools.pairwise(runs):
            assert x.last + 1 == y.first and not x.same(y)
            assert (x.member is None) == (x.state != ACQUIRED)

    @invariant()
    def snapshot_restores_the_same_state(self) -> None:
        p = self.p
        snap = p.snapshot()
        for x, y in itertools.pairwise(snap):
            assert x.last_offset + 1 == y.first_offset and (x.state, x.delivery_count) != (y.state, y.delivery_count)
        q = SharePartition(
            start_offset=p.start_offset, lock_ms=LOCK_MS, delivery_limit=LIMIT, max_in_flight=WINDOW, state_batches=snap
        )
        assert (q.start_offset, q.end_offset) == (p.start_offset, p.end_offset)
        for o in range(p.start_offset, p.end_offset):
            s, c, _ = p.state_of(o)  # type: ignore[misc]
            assert q.state_of(o) == (AVAILABLE if s == ACQUIRED else s, c, None)
        counts = p.counts()
        assert q.counts() == {**counts, AVAILABLE: counts[AVAILABLE] + counts[ACQUIRED], ACQUIRED: 0}

    def teardown(self) -> None:
        if hasattr(self, "p"):
            drain(self.p, self.now)
            assert self.p.start_offset == self.p.end_offset


def drain(p: SharePartition, now: int) -> None:
    """Every member accepts what it holds, then acquires and accepts everything still in flight."""
    for _ in range(4 * LIMIT + 4):
        for member in MEMBERS:
            for b in [b for b in p._runs if b.state == ACQUIRED and b.member == member]:
                assert p.acknowledge(member, b.first, b.last, [ACCEPT], now_ms=now)[0] == ErrorCode.NONE
        if p.start_offset == p.end_offset:
            return
        got = p.acquire("m1", [(p.next_fetch_offset(), p.end_offset - 1)], max_records=10**6, now_ms=now)
        for a in got:
            assert p.acknowledge("m1", a.first_offset, a.last_offset, [ACCEPT], now_ms=now)[0] == ErrorCode.NONE
    raise AssertionError(f"the window {p.start_offset}..{p.end_offset} did not drain: {p.snapshot()}")


TestSharePartitionMachine = SharePartitionMachine.TestCase
