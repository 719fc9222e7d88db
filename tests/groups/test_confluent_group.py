"""confluent-kafka (librdkafka) consumer groups against ``odradek serve``.

One group on a 6-partition topic lives through joins, a clean close and a crash:

1. three members get two partitions each;
2. a fourth member, a separate process that commits nothing, joins: the six partitions are
   redistributed (each member 1-2, disjoint, all six covered), and DescribeGroups/ListGroups
   through AdminClient show the same members and assignments;
3. one in-process member closes: its partitions move to the others within one rebalance;
4. the child process is SIGKILLed: its partitions move to the two remaining members once
   ``session.timeout.ms`` has passed (not before);
5. the members, which commit synchronously after every record, finish the topic: the committed
   offsets add up to exactly the number of records produced, and every produced record was
   delivered to some member.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import ConsumerGroupState

from odradek.testing import BrokerProcess
from tests.groups.group_helpers import (
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    ChildMember,
    Member,
    committed_offsets,
    create_topic,
    describe_group,
    disjoint_cover,
    list_groups,
    produce,
    wait_until,
)

PARTITIONS = 6
PER_PHASE = 60


def test_group_lifecycle_with_confluent_kafka(broker: BrokerProcess, name: str) -> None:
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produced = produce(bs, topic, PARTITIONS, PER_PHASE, "phase1")

    members = [Member.start(bs, group, topic, f"member-{i}") for i in range(3)]
    child: ChildMember | None = None
    survivors = members[:2]

    def step() -> None:
        for m in members:
            m.step()
        if child is not None:
            child.step()

    def step_survivors() -> None:
        for m in survivors:
            m.step()

    def live() -> list[list[int]]:
        out = [m.current for m in members if not m.closed]
        if child is not None and child.proc.poll() is None:
            out.append(child.snapshot()[0])
        return out

    try:
        # 1. three members, two partitions each
        wait_until(
            lambda: disjoint_cover(live(), PARTITIONS) and all(len(a) == 2 for a in live()),
            what="3 members with 2 partitions each",
            step=step,
        )

        # 2. a fourth member in its own process; it commits nothing
        produced |= produce(bs, topic, PARTITIONS, PER_PHASE, "phase2")
        child = ChildMember(bs, group, topic, "child-member")
        wait_until(
            lambda: len(live()) == 4 and disjoint_cover(live(), PARTITIONS) and all(1 <= len(a) <= 2 for a in live()),
            what="4 members sharing the 6 partitions",
            step=step,
        )
        described = wait_until(
            lambda: (d := describe_group(bs, group)).state == ConsumerGroupState.STABLE and len(d.members) == 4 and d,
            what="group Stable with 4 members",
            step=step,
        )
        by_client = {
            m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic)
            for m in described.members
        }
        expected = {m.name: m.current for m in members}
        expected[child.name] = child.snapshot()[0]
        assert by_client == expected
        assert described.partition_assignor == "range" and not described.is_simple_consumer_group
        assert described.coordinator.id == 0 and described.coordinator.port == broker.port
        assert all(m.host.startswith("/127.0.0.1") for m in described.members)
        assert any(m.member_id == child.member_id for m in described.members)
        assert list_groups(bs).get(group) == ConsumerGroupState.STABLE

        # the child consumes some records it will never commit
        produced |= produce(bs, topic, PARTITIONS, PER_PHASE, "phase3")
        wait_until(lambda: child.snapshot()[2] > 0, what="the child consumer to get records", step=step)

        # 3. a member closes: its partitions move within one rebalance
        leaving = members[2]
        before = {m.name: len(m.assignments) for m in members[:2]}
        child_before = child.snapshot()[1]
        leaving.close()
        wait_until(
            lambda: len(live()) == 3 and disjoint_cover(live(), PARTITIONS),
            what="the closed member's partitions to move",
            step=step,
        )
        wait_until(
            lambda: (d := describe_group(bs, group)).state == ConsumerGroupState.STABLE and len(d.members) == 3,
            what="group Stable with 3 members",
            step=step,
        )
        assert {m.name: len(m.assignments) for m in members[:2]} == {n: k + 1 for n, k in before.items()}
        assert child.snapshot()[1] == child_before + 1
        assert all(len(a) == 2 for a in live())

        # 4. the child is SIGKILLed: nobody says it left; its session runs out
        produced |= produce(bs, topic, PARTITIONS, PER_PHASE, "phase4")
        child_partitions = child.snapshot()[0]
        killed_at = time.monotonic()
        child.kill()
        wait_until(
            lambda: disjoint_cover([m.current for m in survivors], PARTITIONS),
            timeout=SESSION_TIMEOUT_MS / 1000 + 20,
            what="the killed member's partitions to move",
            step=step_survivors,
        )
        moved_after = time.monotonic() - killed_at
        # the coordinator waited for the session to run out (not for the closed connection): the
        # last heartbeat came about one interval before the kill; a second more for scheduling
        assert moved_after >= (SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS) / 1000 - 1.0, moved_after
        assert all(len(m.current) == 3 for m in survivors)
        assert set(child_partitions) <= {p for m in survivors for p in m.current}

        # 5. the survivors finish the topic
        end = {p: 0 for p in range(PARTITIONS)}
        for p, o in produced:
            end[p] = max(end[p], o + 1)
        wait_until(
            lambda: all(
                max((m.committed.get(p, 0) for m in survivors), default=0) == end[p] for p in range(PARTITIONS)
            ),
            what="every record committed",
            step=step_survivors,
        )
        committed = committed_offsets(bs, group, topic, PARTITIONS)
        assert committed == end
        assert sum(committed.values()) == len(produced)

        delivered: dict[tuple[int, int], bytes] = {}
        for m in members:
            delivered.update({(p, o): v for p, o, v in m.delivered})
        delivered.update({(p, o): v for p, o, v in child.delivered})
        assert set(delivered) == set(produced), "some records were never delivered"
        assert delivered == produced
        # the child committed nothing, so whatever it got was delivered again to a later owner
        in_process = {(p, o) for m in members for p, o, _v in m.delivered}
        assert {(p, o) for p, o, _v in child.delivered} <= in_process
    finally:
        for m in members:
            m.close()
        if child is not None:
            child.kill()

    # all members gone: the group is Empty and keeps its offsets
    d = describe_group(bs, group)
    assert d.state == ConsumerGroupState.EMPTY and not d.members
    assert committed_offsets(bs, group, topic, PARTITIONS) == end


def test_static_member_restarts_without_rebalance(broker: BrokerProcess, name: str) -> None:
    """KIP-345: a member with ``group.instance.id`` that closes (no LeaveGroup) and comes back
    within the session timeout takes its old place and partitions; the others see no rebalance."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 4)
    a = Member.start(bs, group, topic, "static-a", **{"group.instance.id": "instance-a"})
    c = Member.start(bs, group, topic, "static-c", **{"group.instance.id": "instance-c"})
    a2: Member | None = None

    def step(*ms: Member | None) -> Callable[[], None]:
        def run() -> None:
            for m in ms:
                if m is not None:
                    m.step()

        return run

    try:
        wait_until(
            lambda: disjoint_cover([a.current, c.current], 4) and a.current and c.current,
            what="two static members splitting the topic",
            step=step(a, c),
        )
        d = describe_group(bs, group)
        assert d.state == ConsumerGroupState.STABLE
        assert {(m.client_id, m.group_instance_id) for m in d.members} == {
            ("static-a", "instance-a"),
            ("static-c", "instance-c"),
        }
        before = list(a.current)
        c_assignments = len(c.assignments)
        a.close()  # a static member does not leave the group when it closes
        d = describe_group(bs, group)
        assert d.state == ConsumerGroupState.STABLE and len(d.members) == 2

        a2 = Member.start(bs, group, topic, "static-a-again", **{"group.instance.id": "instance-a"})
        wait_until(lambda: a2 is not None and a2.current, what="the restarted static member's partitions",
                   step=step(a2, c))
        assert a2.current == before
        assert len(c.assignments) == c_assignments, "the other member went through a rebalance"
        d = describe_group(bs, group)
        assert d.state == ConsumerGroupState.STABLE
        by_instance = {m.group_instance_id: m for m in d.members}
        assert set(by_instance) == {"instance-a", "instance-c"}
        assert by_instance["instance-a"].client_id == "static-a-again"
        assert by_instance["instance-a"].member_id == a2.consumer.memberid()
    finally:
        for m in (a, c, a2):
            if m is not None:
                m.close()
