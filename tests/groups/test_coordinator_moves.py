"""A broker that stops leading a group's ``__consumer_offsets`` partition drops the partition's
groups and tells the members waiting on a rebalance NOT_COORDINATOR at once (Kafka's
onResignation: they find the new coordinator and join there), instead of answering them later
from state another broker now owns; when it leads the partition again, the groups and offsets
come back from the log."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from odradek.broker.app import Broker
from odradek.broker.topics import OFFSETS_TOPIC
from odradek.errors import ErrorCode
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest
from odradek.testing import WireClient
from tests.broker.inprocess import running_broker
from tests.groups.wire_group import WireMember, commit, coordinator_loaded, fetch_offsets

GROUP = "moving"
OVERRIDES = {
    "offsets.topic.num.partitions": 1,
    # the first join waits for more members: long enough that only the move can answer it
    "group.initial.rebalance.delay.ms": 60_000,
}


async def _until(check: object, what: str) -> None:
    for _ in range(1000):
        if await asyncio.to_thread(check):  # type: ignore[arg-type]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def _lead(broker: Broker, leader: int) -> None:
    """Make ``leader`` the leader of the offsets partition as this broker sees it (as a
    LeaderAndIsr from the controller would), and tell the coordinator."""
    p = broker.replicas.get(OFFSETS_TOPIC, 0)
    assert p is not None
    me = broker.broker_id
    state = dataclasses.replace(p.state, replicas=(me, me + 1), isr=(me, me + 1), leader=leader,
                                leader_epoch=p.state.leader_epoch + 1)
    if leader == me:
        broker.replicas.make_leader(dataclasses.replace(state, isr=(me,)), None, 0)
    else:
        broker.replicas.make_follower(state, None)
    broker.groups.on_hosting_changed(None)


def test_a_waiting_join_is_told_not_coordinator_when_the_partition_moves_and_the_group_comes_back(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path / "data", overrides=dict(OVERRIDES)) as b:
            port = b.bound["PLAINTEXT"][1]
            w = await asyncio.to_thread(WireClient, "127.0.0.1", port)
            member = await asyncio.to_thread(WireMember, "127.0.0.1", port, GROUP, OFFSETS_TOPIC, 1, "m1")
            try:
                await b.groups.ensure_topic()
                await _until(lambda: coordinator_loaded(w, GROUP), "the offsets partition loaded")
                codes = await asyncio.to_thread(commit, w, GROUP, -1, "", OFFSETS_TOPIC, {0: 5})
                assert codes == {0: ErrorCode.NONE}
                first = await asyncio.to_thread(member.join)
                assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
                member.member_id = first.member_id
                join = asyncio.ensure_future(asyncio.to_thread(member.join))

                def preparing() -> bool:
                    d = w.request(DescribeGroupsRequest(groups=[GROUP]), 5).groups[0]
                    return bool(d.group_state == "PreparingRebalance" and d.members)

                await _until(preparing, "the join waiting in PreparingRebalance")
                _lead(b, b.broker_id + 1)
                answer = await asyncio.wait_for(join, 30)
                assert ErrorCode(answer.error_code) is ErrorCode.NOT_COORDINATOR
                d = await asyncio.to_thread(w.request, DescribeGroupsRequest(groups=[GROUP]), 5)
                assert ErrorCode(d.groups[0].error_code) is ErrorCode.NOT_COORDINATOR
                _lead(b, b.broker_id)
                await _until(lambda: coordinator_loaded(w, GROUP), "the partition loaded again")
                assert await asyncio.to_thread(fetch_offsets, w, GROUP, OFFSETS_TOPIC, [0]) == {0: 5}
            finally:
                member.close()
                w.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))
