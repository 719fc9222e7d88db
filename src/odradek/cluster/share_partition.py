"""The state of one share partition (KIP-932): which records of a partition a share group has
delivered, to whom, and what became of them.

Pure logic, no I/O: the leader reads the log and passes the offsets it read; time comes in as
``now_ms``. The share-partition start offset (SPSO) is the first offset not yet done; every offset
from it up to the end offset (SPEO, one past the last offset ever acquired) is *in flight* and has
one :class:`RecordState`, a delivery count and, while acquired, an owner and a lock deadline.

The in-flight offsets are kept as runs: a sorted list of contiguous ranges, each with one state,
count, owner and deadline, adjacent equal runs merged. Acquiring or acknowledging a batch of records
costs a few list operations per run it touches, not per record. The window from SPSO to SPEO is
bounded by ``max_in_flight`` (Kafka's ``group.share.partition.max.record.locks``): as in Kafka's
SharePartition, new offsets are acquired only while the window holds fewer offsets than that
bound; records already in flight can always be acquired again.

Transitions (Kafka's): AVAILABLE -> ACQUIRED (delivery count + 1); ACQUIRED -> ACKNOWLEDGED
(ACCEPT), -> AVAILABLE (RELEASE, lock expiry, member gone; ARCHIVED once the count reached the
delivery limit), -> ARCHIVED (REJECT, GAP). ACKNOWLEDGED and ARCHIVED are final; the start offset
moves over them when they lead the window.
"""

from __future__ import annotations

import enum
import itertools
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from odradek.errors import ErrorCode

__all__ = [
    "AckType",
    "Acquired",
    "ArchiveReason",
    "Archived",
    "RecordState",
    "SharePartition",
    "StateBatch",
]


class AckType(enum.IntEnum):
    """An acknowledgement type as ShareFetch / ShareAcknowledge carry it."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class RecordState(enum.IntEnum):
    """An in-flight offset's state, with Kafka's numbering (persisted in StateBatches)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class ArchiveReason(enum.Enum):
    """Why a record was archived."""

    REJECTED = "rejected"  # a consumer acknowledged it REJECT
    DELIVERY_LIMIT = "delivery_limit"  # released or expired after its last allowed delivery
    ABORTED = "aborted"  # an aborted transaction's record, under read_committed
    GAP = "gap"  # no record at that offset (acknowledged GAP, or absent from the log)


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of offsets acquired by one fetch, all with the same delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of in-flight offsets with one state and delivery count, as WriteShareGroupState
    persists it."""

    first_offset: int
    last_offset: int
    delivery_count: int
    state: RecordState


@dataclass(frozen=True, slots=True)
class Archived:
    """One record archived (for the dead-letter topic): its offset, how often it was delivered,
    why, and the member that held it when it was archived (None when no member did)."""

    offset: int
    delivery_count: int
    reason: ArchiveReason
    member_id: str | None


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_ACK_TYPES = frozenset(int(t) for t in AckType)


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    state: RecordState
    count: int
    member: str | None = None  # the owner, only while ACQUIRED
    deadline: int = 0  # the lock deadline, only while ACQUIRED

    def same(self, other: _Run) -> bool:
        return (
            self.state == other.state
            and self.count == other.count
            and self.member == other.member
            and self.deadline == other.deadline
        )

    def set(self, state: RecordState, member: str | None = None, deadline: int = 0) -> None:
        self.state = state
        self.member = member
        self.deadline = deadline


def _first(run: _Run) -> int:
    return run.first


def _normalized(ranges: Sequence[tuple[int, int]], what: str) -> list[tuple[int, int]]:
    """Ranges sorted, overlapping or touching ones joined; a range with last < first is refused."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if last < first:
            raise ValueError(f"{what} range {first}..{last} ends before it starts")
        if out and first <= out[-1][1] + 1:
            if last > out[-1][1]:
                out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


class SharePartition:
    """The in-flight state of one share partition for one share group."""

    __slots__ = ("_end", "_runs", "_start", "delivery_limit", "lock_ms", "max_in_flight")

    def __init__(
        self,
        *,
        start_offset: int,
        lock_ms: int,
        delivery_limit: int,
        max_in_flight: int = 2000,
        state_batches: Iterable[StateBatch] = (),
    ) -> None:
        if start_offset < 0:
            raise ValueError(f"start_offset {start_offset} is negative")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight {max_in_flight} must be at least 1")
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self._start = start_offset
        self._end = start_offset
        self._runs: list[_Run] = []
        # Restored state: an offset persisted ACQUIRED is AVAILABLE again (locks are not persisted);
        # offsets between the persisted batches were never acquired (AVAILABLE, count 0).
        for batch in sorted(state_batches, key=lambda b: b.first_offset):
            if batch.last_offset < batch.first_offset:
                raise ValueError(f"state batch {batch} ends before it starts")
            if batch.delivery_count < 0:
                raise ValueError(f"state batch {batch} has a negative delivery count")
            state = RecordState(batch.state)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            first = max(batch.first_offset, start_offset)
            if batch.last_offset < first:
                continue
            if first < self._end:
                raise ValueError(f"state batch {batch} overlaps an earlier one")
            if first > self._end:
                self._append(first - 1, RecordState.AVAILABLE, 0)
            self._append(batch.last_offset, state, batch.delivery_count)
        self._sweep()

    # -- reading ------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The share-partition start offset (SPSO): every offset below it is done."""
        return self._start

    @property
    def end_offset(self) -> int:
        """One past the last offset ever acquired (SPEO); equal to start_offset when nothing is in
        flight."""
        return self._end

    def next_fetch_offset(self) -> int:
        """Where the leader reads the log from next: the lowest AVAILABLE in-flight offset, else
        end_offset."""
        for run in self._runs:
            if run.state == RecordState.AVAILABLE:
                return run.first
        return self._end

    def can_acquire(self) -> bool:
        """Whether an acquire could get anything: some in-flight offset is AVAILABLE, or the
        window holds fewer than max_in_flight offsets (as Kafka's canAcquireRecords)."""
        return self.next_fetch_offset() < self._end or self._end - self._start < self.max_in_flight

    def next_deadline(self) -> int | None:
        """The earliest lock deadline among ACQUIRED offsets, None when nothing is acquired."""
        deadlines = [r.deadline for r in self._runs if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def snapshot(self) -> list[StateBatch]:
        """The in-flight state from start_offset as runs with one state and delivery count
        (ACQUIRED written as ACQUIRED), adjacent equal runs merged."""
        out: list[StateBatch] = []
        for run in self._runs:
            if out and out[-1].state == run.state and out[-1].delivery_count == run.count:
                prev = out[-1]
                out[-1] = StateBatch(prev.first_offset, run.last, prev.delivery_count, prev.state)
            else:
                out.append(StateBatch(run.first, run.last, run.count, run.state))
        return out

    def counts(self) -> dict[RecordState, int]:
        """How many in-flight offsets are in each state."""
        out = dict.fromkeys(RecordState, 0)
        for run in self._runs:
            out[run.state] += run.last - run.first + 1
        return out

    def acquired_by(self, member_id: str) -> int:
        """How many offsets member_id holds acquired."""
        return sum(
            r.last - r.first + 1
            for r in self._runs
            if r.state == RecordState.ACQUIRED and r.member == member_id
        )

    def members(self) -> set[str]:
        """The members holding acquired offsets."""
        return {r.member for r in self._runs if r.state == RecordState.ACQUIRED and r.member is not None}

    def state_of(self, offset: int) -> tuple[RecordState, int, str | None] | None:
        """(state, delivery count, owner) of one in-flight offset; None outside the window."""
        if not self._start <= offset < self._end:
            return None
        run = self._runs[self._index(offset)]
        return run.state, run.count, run.member

    # -- acquiring -------------------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        batches: Sequence[tuple[int, int]],
        *,
        max_records: int,
        now_ms: int,
        aborted: Sequence[tuple[int, int]] = (),
        gaps: Sequence[tuple[int, int]] = (),
        fetch_offset: int | None = None,
        archived: list[Archived] | None = None,
    ) -> list[Acquired]:
        """Acquire for member_id the AVAILABLE offsets inside ``batches``, the (base, last) offsets
        of the record batches the leader read (ascending), from new offsets at end_offset and from
        AVAILABLE in-flight ones: delivery count + 1, lock deadline now_ms + lock_ms.

        Whole batches are acquired while fewer than ``max_records`` offsets have been (the last
        batch may pass max_records, as Kafka aligns to batch ends); new offsets only while the
        window from start_offset holds fewer than max_in_flight. Offsets inside ``aborted``
        (aborted transactions' records, read_committed) are ARCHIVED, never acquired, and so are
        offsets inside ``gaps`` (control batches) and offsets that no batch covers between two
        batches, or between ``fetch_offset`` (where the leader read from) and the first batch:
        such offsets hold no record. An AVAILABLE offset whose delivery count already reached
        delivery_limit (the limit was lowered) is ARCHIVED instead of acquired. Archived records
        are appended to ``archived`` when it is given (gaps are not records and are not listed).

        Offsets below start_offset are ignored. Returns the acquired offsets as maximal runs with
        one delivery count, ascending."""
        if not batches:
            return []
        events: list[Archived] = archived if archived is not None else []
        deadline = now_ms + self.lock_ms
        new_limit = self._start + self.max_in_flight  # new offsets stay below this
        taken: list[_Run] = []  # the acquired pieces, ascending
        acquired = 0
        # offsets known to hold no record start at pos: where the leader read from, or the first batch
        pos = batches[0][0] if fetch_offset is None else min(fetch_offset, batches[0][0])
        pos = max(pos, self._start)
        prev_last = -1
        for base, last in batches:
            if last < base:
                raise ValueError(f"batch {base}..{last} ends before it starts")
            if base <= prev_last:
                raise ValueError(f"batch {base}..{last} is not after the batch ending at {prev_last}")
            prev_last = last
            if acquired >= max_records or (self._end >= new_limit and pos >= self._end):
                break
            if last < self._start:
                pos = max(pos, last + 1)
                continue
            # the offsets between the previous batch (or the read's start) and this one hold no record
            if pos < base and not self._no_record(pos, base - 1, new_limit):
                break
            full = False
            for a, b, kind in self._pieces(max(base, self._start), last, aborted, gaps):
                if kind == "data":
                    acquired += self._take(member_id, a, b, deadline, new_limit, taken, events)
                else:
                    full = not self._archive_absent(a, b, new_limit, ArchiveReason(kind), events)
                if full or (self._end >= new_limit and b >= self._end):
                    break
            if full:
                break
            pos = max(pos, last + 1)
        self._sweep()
        return self._acquired_runs(taken)

    @staticmethod
    def _pieces(
        lo: int, hi: int, aborted: Sequence[tuple[int, int]], gaps: Sequence[tuple[int, int]]
    ) -> list[tuple[int, int, str]]:
        """[lo, hi] cut into data, aborted and gap pieces."""
        marks: list[tuple[int, int, str]] = []
        for kind, ranges in (("aborted", aborted), ("gap", gaps)):
            for a, b in ranges:
                if b >= lo and a <= hi:
                    marks.append((max(a, lo), min(b, hi), kind))
        if not marks:
            return [(lo, hi, "data")]
        marks.sort()
        out: list[tuple[int, int, str]] = []
        pos = lo
        for a, b, kind in marks:
            a = max(a, pos)
            if a > b:
                continue
            if pos < a:
                out.append((pos, a - 1, "data"))
            out.append((a, b, kind))
            pos = b + 1
        if pos <= hi:
            out.append((pos, hi, "data"))
        return out

    def _no_record(self, a: int, b: int, new_limit: int) -> bool:
        """Offsets a..b hold no record: archive them; False when the window is full before b."""
        return self._archive_absent(a, b, new_limit, ArchiveReason.GAP, [])

    def _archive_absent(
        self, a: int, b: int, new_limit: int, reason: ArchiveReason, events: list[Archived]
    ) -> bool:
        """Archive offsets a..b that hold no deliverable record: AVAILABLE in-flight ones, and new
        ones (up to the window's limit). False when the window filled up before b."""
        if a < self._end:
            hi = min(b, self._end - 1)
            i, j = self._span(a, hi)
            for run in self._runs[i:j]:
                if run.state == RecordState.AVAILABLE:
                    run.set(RecordState.ARCHIVED)
                    if reason != ArchiveReason.GAP:
                        events.extend(
                            Archived(o, run.count, reason, None) for o in range(run.first, run.last + 1)
                        )
            self._merge(i, j)
        if b >= self._end:
            got = self._extend(a, b, new_limit, RecordState.ARCHIVED, 0)
            if got is None:
                return False
            if reason != ArchiveReason.GAP:
                events.extend(Archived(o, 0, reason, None) for o in range(got[0], got[1] + 1))
            return got[1] == b
        return True

    def _take(
        self,
        member_id: str,
        a: int,
        b: int,
        deadline: int,
        new_limit: int,
        taken: list[_Run],
        events: list[Archived],
    ) -> int:
        """Acquire the AVAILABLE offsets of a..b (new ones up to the window's limit); returns how many."""
        count = 0
        if a < self._end:
            hi = min(b, self._end - 1)
            i, j = self._span(a, hi)
            for run in self._runs[i:j]:
                if run.state != RecordState.AVAILABLE:
                    continue
                if run.count >= self.delivery_limit:
                    run.set(RecordState.ARCHIVED)
                    events.extend(
                        Archived(o, run.count, ArchiveReason.DELIVERY_LIMIT, None)
                        for o in range(run.first, run.last + 1)
                    )
                    continue
                run.count += 1
                run.set(RecordState.ACQUIRED, member_id, deadline)
                taken.append(_Run(run.first, run.last, RecordState.ACQUIRED, run.count))
                count += run.last - run.first + 1
            self._merge(i, j)
        if b >= self._end:
            got = self._extend(a, b, new_limit, RecordState.ACQUIRED, 1, member_id, deadline)
            if got is not None:
                taken.append(_Run(got[0], got[1], RecordState.ACQUIRED, 1))
                count += got[1] - got[0] + 1
        return count

    def _extend(
        self,
        a: int,
        b: int,
        new_limit: int,
        state: RecordState,
        count: int,
        member: str | None = None,
        deadline: int = 0,
    ) -> tuple[int, int] | None:
        """Add the new offsets a..b (b >= end_offset) in ``state``, up to the window's limit; the
        offsets from end_offset to a, if any, hold no record and are archived. Returns the range
        added in ``state``, None when the window is full first."""
        first = max(a, self._end)
        hi = min(b, new_limit - 1)
        if first > self._end:
            self._append(min(first, new_limit) - 1, RecordState.ARCHIVED, 0)
        if hi < first:
            return None
        self._append(hi, state, count, member, deadline)
        return first, hi

    @staticmethod
    def _acquired_runs(taken: list[_Run]) -> list[Acquired]:
        out: list[Acquired] = []
        for run in taken:
            if out and out[-1].last_offset + 1 == run.first and out[-1].delivery_count == run.count:
                out[-1] = Acquired(out[-1].first_offset, run.last, run.count)
            else:
                out.append(Acquired(run.first, run.last, run.count))
        return out

    # -- acknowledging -----------------------------------------------------------------------------

    def acknowledge(
        self, member_id: str, first_offset: int, last_offset: int, types: Sequence[int], *, now_ms: int
    ) -> tuple[ErrorCode, list[Archived]]:
        """Acknowledge first_offset..last_offset for member_id with one type for the range or one
        per offset. All or nothing: every offset must be ACQUIRED by member_id, else
        INVALID_RECORD_STATE and nothing changes.

        As Kafka: a bad range or type, or a range reaching past end_offset, is INVALID_REQUEST; a
        range wholly below start_offset is INVALID_RECORD_STATE; the part of a range below
        start_offset (the start moved past it) is skipped. Returns the records archived (REJECT, or
        RELEASE at the delivery limit; GAP archives no record)."""
        n = last_offset - first_offset + 1
        if first_offset < 0 or n < 1 or len(types) not in (1, n) or not _ACK_TYPES.issuperset(types):
            return ErrorCode.INVALID_REQUEST, []
        if last_offset < self._start:
            return ErrorCode.INVALID_RECORD_STATE, []
        if last_offset >= self._end:
            return ErrorCode.INVALID_REQUEST, []
        a = max(first_offset, self._start)
        i = self._index(a)
        runs = self._runs
        k = i
        while k < len(runs) and runs[k].first <= last_offset:
            if runs[k].state != RecordState.ACQUIRED or runs[k].member != member_id:
                return ErrorCode.INVALID_RECORD_STATE, []
            k += 1
        events: list[Archived] = []
        if len(types) == 1:
            groups: Iterable[tuple[int, int, int]] = [(a, last_offset, types[0])]
        else:
            groups = self._type_groups(types[a - first_offset :], a)
        for lo, hi, ack in groups:
            i, j = self._span(lo, hi)
            for run in self._runs[i:j]:
                self._ack_run(run, AckType(ack), now_ms, events)
        self._merge(self._index(a), self._index(last_offset) + 1)
        self._sweep()
        return ErrorCode.NONE, events

    @staticmethod
    def _type_groups(types: Sequence[int], first: int) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        pos = first
        for ack, same in itertools.groupby(types):
            size = sum(1 for _ in same)
            out.append((pos, pos + size - 1, ack))
            pos += size
        return out

    def _ack_run(self, run: _Run, ack: AckType, now_ms: int, events: list[Archived]) -> None:
        if ack == AckType.ACCEPT:
            run.set(RecordState.ACKNOWLEDGED)
        elif ack == AckType.RELEASE:
            self._release(run, events)
        elif ack == AckType.REJECT:
            events.extend(
                Archived(o, run.count, ArchiveReason.REJECTED, run.member)
                for o in range(run.first, run.last + 1)
            )
            run.set(RecordState.ARCHIVED)
        elif ack == AckType.GAP:
            run.set(RecordState.ARCHIVED)
        else:  # RENEW
            run.deadline = now_ms + self.lock_ms

    def _release(self, run: _Run, events: list[Archived]) -> None:
        """An ACQUIRED run back to AVAILABLE, or ARCHIVED once its delivery count reached the limit."""
        if run.count >= self.delivery_limit:
            events.extend(
                Archived(o, run.count, ArchiveReason.DELIVERY_LIMIT, run.member)
                for o in range(run.first, run.last + 1)
            )
            run.set(RecordState.ARCHIVED)
        else:
            run.set(RecordState.AVAILABLE)

    # -- releasing ---------------------------------------------------------------------------------

    def release_member(self, member_id: str, *, now_ms: int) -> list[Archived]:
        """A member left or its share session closed: its ACQUIRED offsets become AVAILABLE (or
        ARCHIVED at the delivery limit). Returns what was archived."""
        events: list[Archived] = []
        for run in self._runs:
            if run.state == RecordState.ACQUIRED and run.member == member_id:
                self._release(run, events)
        self._merge(0, len(self._runs))
        self._sweep()
        return events

    def expire(self, now_ms: int) -> list[Archived]:
        """Release the offsets whose lock deadline is at or before now_ms. Returns what was archived."""
        events: list[Archived] = []
        for run in self._runs:
            if run.state == RecordState.ACQUIRED and run.deadline <= now_ms:
                self._release(run, events)
        self._merge(0, len(self._runs))
        self._sweep()
        return events

    def advance_start(self, offset: int) -> None:
        """The log start moved (retention, DeleteRecords, AlterShareGroupOffsets): forget the
        in-flight offsets below ``offset``. The start offset never moves back."""
        if offset <= self._start:
            return
        if offset >= self._end:
            self._runs.clear()
            self._start = self._end = offset
            return
        i = self._cut(offset)
        del self._runs[:i]
        self._start = offset
        self._sweep()

    # -- runs ----------------------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (start_offset <= offset < end_offset)."""
        return bisect_right(self._runs, offset, key=_first) - 1

    def _cut(self, offset: int) -> int:
        """Make ``offset`` the first offset of a run; returns that run's index (len when offset is
        end_offset)."""
        if offset >= self._end:
            return len(self._runs)
        i = self._index(offset)
        run = self._runs[i]
        if run.first == offset:
            return i
        self._runs.insert(i + 1, _Run(offset, run.last, run.state, run.count, run.member, run.deadline))
        run.last = offset - 1
        return i + 1

    def _span(self, a: int, b: int) -> tuple[int, int]:
        """Indexes i, j such that runs[i:j] hold exactly a..b (in flight)."""
        i = self._cut(a)
        return i, self._cut(b + 1)

    def _merge(self, i: int, j: int) -> None:
        """Merge equal neighbours among runs[i-1 : j+1]."""
        lo, hi = max(i - 1, 0), min(j + 1, len(self._runs))
        merged: list[_Run] = []
        for run in self._runs[lo:hi]:
            if merged and merged[-1].same(run):
                merged[-1].last = run.last
            else:
                merged.append(run)
        self._runs[lo:hi] = merged

    def _append(
        self, last: int, state: RecordState, count: int, member: str | None = None, deadline: int = 0
    ) -> None:
        """Add end_offset..last as one run."""
        run = _Run(self._end, last, state, count, member, deadline)
        if self._runs and self._runs[-1].same(run):
            self._runs[-1].last = last
        else:
            self._runs.append(run)
        self._end = last + 1

    def _sweep(self) -> None:
        """Move the start offset over the leading ACKNOWLEDGED / ARCHIVED runs."""
        k = 0
        while k < len(self._runs) and self._runs[k].state in _DONE:
            k += 1
        if k:
            self._start = self._runs[k - 1].last + 1
            del self._runs[:k]
