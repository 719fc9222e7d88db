"""A broker on fake time (``odradek.testing.running_broker`` with a ``FakeScheduler``): the group
coordinator's session timer runs when the test moves the clock, at the member's deadline and not
a millisecond before, and a heartbeat moves the deadline — with no real waiting.  The example of
``odradek.testing``'s documentation, as a test."""

from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.broker.app import Broker
from odradek.errors import ErrorCode
from odradek.testing import FakeScheduler, running_broker
from tests.groups.wire_group import WireMember, coordinator_loaded, find_coordinator

GROUP, TOPIC = "fake-time", "fake-time-t"
SESSION_MS = 10_000


def _state(broker: Broker) -> tuple[str, int]:
    g = broker.groups.describe(GROUP)
    assert g is not None
    return g.state.value, len(g.members)


def test_a_silent_member_is_expelled_at_its_session_deadline_on_fake_time(tmp_path: Path) -> None:
    fake = FakeScheduler()
    overrides = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1}

    async def main() -> None:
        async with running_broker(tmp_path / "data", overrides=overrides, timers=fake) as broker:
            await broker.topics.create(TOPIC, 2, 1, {})
            host, port = broker.bound["PLAINTEXT"]
            member = await asyncio.to_thread(WireMember, host, port, GROUP, TOPIC, 2, "m1", SESSION_MS)
            try:
                for _ in range(500):  # the coordinator's topic is created and loaded (real work, polled)
                    found = await asyncio.to_thread(find_coordinator, member.wire, GROUP)
                    if found.coordinators[0].error_code == 0 and await asyncio.to_thread(
                        coordinator_loaded, member.wire, GROUP
                    ):
                        break
                    await asyncio.sleep(0.01)
                join = await asyncio.to_thread(member.join)
                assert join.error_code == ErrorCode.MEMBER_ID_REQUIRED
                member.member_id = join.member_id
                join = await asyncio.to_thread(member.join)
                assert join.error_code == 0
                member.generation, member.leader = join.generation_id, join.leader == join.member_id
                sync = await asyncio.to_thread(member.sync, join)
                assert sync.error_code == 0
                assert _state(broker) == ("Stable", 1)

                await fake.advance(SESSION_MS // 2)
                assert await asyncio.to_thread(member.heartbeat) is ErrorCode.NONE  # the deadline moves
                await fake.advance(SESSION_MS - 1)
                assert _state(broker) == ("Stable", 1), "expelled before its session ended"
                await fake.advance(1)
                assert _state(broker) == ("Empty", 0), "still a member after its session ended"
                assert await asyncio.to_thread(member.heartbeat) is ErrorCode.UNKNOWN_MEMBER_ID
            finally:
                member.close()

    asyncio.run(asyncio.wait_for(main(), 120))
