"""The share partitions at their leader (KIP-932), in-process.

* Persistence: acknowledgements are answered only once a write holding them is stored, and the
  writes of one share partition are coalesced — one at a time, each carrying every acknowledgement
  applied before it began — instead of one write per acknowledgement.  The persister here is a
  fake that records the writes and can hold or fail them.
* Waiting fetches are woken by an acknowledgement only on the share partition it changed, and
  only when records may have become acquirable there (released, or the full in-flight window
  moved on), not by every acknowledgement anywhere."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from odradek.broker.share_partitions import SharePartitionManager, ShareSettings
from odradek.cluster.share_partition import RecordState, SharePartition
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import FakeScheduler

ACCEPT, RELEASE = 1, 2
TID = uuid.UUID(int=7)
KEY = ("g", TID, 0)


class Persister:
    """Records each write's (start offset, batches); a write waits while ``hold`` is set and
    raises ``fail`` when it is given."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, list[tuple[int, int, int, int]]]] = []
        self.hold: asyncio.Event | None = None
        self.started = 0
        self.fail: KafkaError | None = None

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, *, leader_epoch: int,
                    state_epoch: int, start_offset: int, batches: Sequence[Any]) -> None:
        self.started += 1
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            raise self.fail
        self.writes.append((start_offset, [(b.first_offset, b.last_offset, b.delivery_count, int(b.state))
                                           for b in batches]))

    async def read(self, *a: Any, **k: Any) -> None:
        return None

    async def initialize(self, *a: Any, **k: Any) -> None:
        return None

    async def summary(self, *a: Any, **k: Any) -> None:
        return None

    async def delete(self, *a: Any, **k: Any) -> dict[Any, Any]:
        return {}


def _manager(persister: Persister) -> tuple[SharePartitionManager, SharePartition]:
    mgr = SharePartitionManager(FakeScheduler(), lambda _g: ShareSettings(lock_ms=30_000), persister)
    sp = SharePartition(start_offset=0, lock_ms=30_000, delivery_limit=5)
    # members a, b and c hold 0-9, 10-19 and 20-29
    for member, first in (("a", 0), ("b", 10), ("c", 20)):
        assert sp.acquire(member, [(first, first + 9)], max_records=10, now_ms=0)
    mgr.partitions[KEY] = sp
    return mgr, sp


async def _ack(mgr: SharePartitionManager, sp: SharePartition, member: str, first: int, last: int,
               kind: int = ACCEPT) -> ErrorCode:
    return await mgr.acknowledge(KEY, sp, 0, member, [(first, last, [kind])])


def test_acknowledgements_of_one_turn_share_one_write_and_each_waits_for_it() -> None:
    async def go() -> None:
        persister = Persister()
        mgr, sp = _manager(persister)
        codes = await asyncio.gather(_ack(mgr, sp, "a", 0, 9), _ack(mgr, sp, "b", 10, 19),
                                     _ack(mgr, sp, "c", 20, 24, RELEASE))
        assert codes == [ErrorCode.NONE] * 3
        # one write, holding all three: 0-19 done (the start moved past them), 20-24 released
        assert persister.writes == [(20, [(20, 24, 1, int(RecordState.AVAILABLE)),
                                          (25, 29, 1, int(RecordState.ACQUIRED))])]

    asyncio.run(go())


def test_acknowledgements_made_while_a_write_is_under_way_go_in_the_next_one() -> None:
    async def go() -> None:
        persister = Persister()
        persister.hold = asyncio.Event()
        mgr, sp = _manager(persister)
        first = asyncio.ensure_future(_ack(mgr, sp, "a", 0, 9))
        while persister.started < 1:
            await asyncio.sleep(0)
        # the first write is under way: these two wait for the next, which holds them both
        later = [asyncio.ensure_future(_ack(mgr, sp, "b", 10, 19)), asyncio.ensure_future(_ack(mgr, sp, "c", 20, 29))]
        for _ in range(5):
            await asyncio.sleep(0)
        assert not first.done() and not any(t.done() for t in later)  # nobody answered before a write
        assert persister.started == 1  # one write at a time
        persister.hold.set()
        assert await first == ErrorCode.NONE
        assert await asyncio.gather(*later) == [ErrorCode.NONE, ErrorCode.NONE]
        assert persister.started == 2
        assert [start for start, _b in persister.writes] == [10, 30]

    asyncio.run(go())


def test_a_failed_write_fails_every_acknowledgement_it_carried() -> None:
    async def go() -> None:
        persister = Persister()
        persister.fail = KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no coordinator")
        mgr, sp = _manager(persister)
        results = await asyncio.gather(_ack(mgr, sp, "a", 0, 9), _ack(mgr, sp, "b", 10, 19), return_exceptions=True)
        assert [r.code for r in results if isinstance(r, KafkaError)] == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
        # the next write carries them (the state applied stays): acknowledging again is refused,
        # as the records are no longer held, and a later write stores them
        persister.fail = None
        assert await _ack(mgr, sp, "c", 20, 29) == ErrorCode.NONE
        assert persister.writes == [(30, [])]

    asyncio.run(go())


def test_state_dropped_before_its_write_is_not_written() -> None:
    """The share partition's cached state was dropped (its offsets were altered) between the
    acknowledgement and the write: the stale state is not written over the reset one."""

    async def go() -> None:
        persister = Persister()
        mgr, sp = _manager(persister)
        ack = asyncio.ensure_future(_ack(mgr, sp, "a", 0, 9))
        await asyncio.sleep(0)
        assert mgr.forget(KEY)
        with pytest.raises(KafkaError) as err:
            await ack
        assert err.value.code == ErrorCode.INVALID_RECORD_STATE
        assert persister.writes == []

    asyncio.run(go())


def test_an_acknowledgement_wakes_only_the_fetches_that_may_acquire_because_of_it() -> None:
    async def go() -> None:
        persister = Persister()
        mgr = SharePartitionManager(FakeScheduler(), lambda _g: ShareSettings(lock_ms=30_000), persister)
        other = ("g", TID, 1)
        # a window of 20: a holds 0-9, b 10-19, the window is full
        sp = SharePartition(start_offset=0, lock_ms=30_000, delivery_limit=5, max_in_flight=20)
        assert sp.acquire("a", [(0, 9)], max_records=10, now_ms=0)
        assert sp.acquire("b", [(10, 19)], max_records=10, now_ms=0)
        mgr.partitions[KEY] = sp
        here, elsewhere = mgr.waiter([KEY]), mgr.waiter([other])
        # b accepts 10-14: the window does not move (0-9 are still held), nothing to acquire
        assert await mgr.acknowledge(KEY, sp, 0, "b", [(10, 14, [ACCEPT])]) == ErrorCode.NONE
        assert not here.done() and not elsewhere.done()
        # a releases 0-4: available again, the fetches of this share partition wake, not the others
        assert await mgr.acknowledge(KEY, sp, 0, "a", [(0, 4, [RELEASE])]) == ErrorCode.NONE
        assert here.done() and not elsewhere.done()
        # a accepts 5-9 while 0-4 are available: wakes again (a new waiter)
        again = mgr.waiter([KEY])
        assert await mgr.acknowledge(KEY, sp, 0, "a", [(5, 9, [ACCEPT])]) == ErrorCode.NONE
        assert again.done()
        # the window was full and moves on once what leads it is done
        sp2 = SharePartition(start_offset=0, lock_ms=30_000, delivery_limit=5, max_in_flight=10)
        assert sp2.acquire("c", [(0, 9)], max_records=10, now_ms=0)
        mgr.partitions[other] = sp2
        assert await mgr.acknowledge(other, sp2, 0, "c", [(5, 9, [ACCEPT])]) == ErrorCode.NONE
        assert not elsewhere.done()  # 0-4 still lead it: full
        assert await mgr.acknowledge(other, sp2, 0, "c", [(0, 4, [ACCEPT])]) == ErrorCode.NONE
        assert elsewhere.done()
        # a waiter on no given share partition is woken by anything (lock expiry, a member leaving)
        anything = mgr.waiter()
        assert mgr.release("b", "g") == 5  # b held 15-19
        assert anything.done()

    asyncio.run(go())
