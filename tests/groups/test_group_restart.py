"""Committed offsets and group metadata survive a broker restart, clean (SIGTERM) or not (SIGKILL).

A confluent-kafka member consumes part of a topic, committing synchronously after every record.
OffsetFetch (AdminClient.list_consumer_group_offsets), DescribeGroups and ListGroups report the
group as the member sees it.  Then the broker restarts on the same data directory:

* SIGTERM after the member left: the group comes back Empty with its offsets;
* SIGKILL while the member is still in the group: the group is read back from
  ``__consumer_offsets`` with that member (Stable, same member id and assignment), and the member,
  which never noticed more than a lost connection, carries on heartbeating and then leaves.

Either way a new member of the group receives exactly the records after the committed offsets.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, ConsumerGroupState, TopicPartition

from odradek.testing import BrokerProcess
from tests.groups.group_helpers import (
    BROKER_OVERRIDES,
    CK_COMMON,
    SESSION_TIMEOUT_MS,
    Member,
    admin,
    committed_offsets,
    create_topic,
    describe_group,
    ends,
    list_groups,
    produce,
    wait_until,
)

PARTITIONS = 3


def assignment_of(description: object, topic: str) -> dict[str, list[int]]:
    return {
        m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic)
        for m in description.members  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_offsets_and_group_survive_restart(tmp_path: Path, name: str, how: str) -> None:
    topic = group = name
    broker = BrokerProcess(tmp_path / "data", overrides=BROKER_OVERRIDES).start()
    try:
        bs = broker.bootstrap
        create_topic(bs, topic, PARTITIONS)
        produced = produce(bs, topic, PARTITIONS, 30, "before")

        first = Member.start(bs, group, topic, "first-consumer")
        wait_until(lambda: len(first.delivered) >= 14, what="some records consumed", step=first.step)
        assert first.commit_failures == 0
        member_id = first.consumer.memberid()
        expected = {p: first.committed.get(p, OFFSET_INVALID) for p in range(PARTITIONS)}
        assert sum(o for o in expected.values() if o >= 0) == len(first.delivered)

        # what the admin API reports matches what the member did and sees
        assert committed_offsets(bs, group, topic, PARTITIONS) == expected
        d = describe_group(bs, group)
        assert d.state == ConsumerGroupState.STABLE
        assert [(m.member_id, m.client_id) for m in d.members] == [(member_id, "first-consumer")]
        assert assignment_of(d, topic) == {member_id: list(range(PARTITIONS))} == {member_id: first.current}
        assert list_groups(bs)[group] == ConsumerGroupState.STABLE

        if how == "sigterm":
            first.close()
            d = describe_group(bs, group)
            assert d.state == ConsumerGroupState.EMPTY and not d.members
            assert broker.stop() == 0
        else:
            broker.kill()
        broker.start()

        assert committed_offsets(bs, group, topic, PARTITIONS) == expected
        if how == "sigterm":
            assert list_groups(bs)[group] == ConsumerGroupState.EMPTY
            d = describe_group(bs, group)
            assert d.state == ConsumerGroupState.EMPTY and not d.members
        else:
            # read back from __consumer_offsets with its member, who is still heartbeating
            d = describe_group(bs, group)
            assert d.state == ConsumerGroupState.STABLE, d.state
            assert assignment_of(d, topic) == {member_id: list(range(PARTITIONS))}
            assert list_groups(bs)[group] == ConsumerGroupState.STABLE
            # its session, restarted at loading, would be over by now if its heartbeats failed
            until = time.monotonic() + SESSION_TIMEOUT_MS / 1000 + 1
            while time.monotonic() < until:
                d = describe_group(bs, group)
                assert d.state == ConsumerGroupState.STABLE, d.state
                assert [m.member_id for m in d.members] == [member_id]
            assert first.consumer.memberid() == member_id
            first.close()  # LeaveGroup to the restarted broker
            wait_until(lambda: describe_group(bs, group).state == ConsumerGroupState.EMPTY, what="group Empty")
            assert committed_offsets(bs, group, topic, PARTITIONS) == expected

        # a new member resumes exactly after the committed offsets
        produced |= produce(bs, topic, PARTITIONS, 6, "after")
        resume = {p: max(o, 0) for p, o in expected.items()}
        remaining = {po: v for po, v in produced.items() if po[1] >= resume[po[0]]}
        second = Member.start(bs, group, topic, "second-consumer")
        try:
            wait_until(lambda: len(second.delivered) >= len(remaining), what="the rest of the records",
                       step=second.step)
            got = {(p, o): v for p, o, v in second.delivered}
            assert len(second.delivered) == len(got), "a record was delivered twice"
            assert got == remaining
            for p in range(PARTITIONS):
                offsets = [o for q, o, _v in second.delivered if q == p]
                assert offsets == list(range(resume[p], resume[p] + len(offsets)))
            wait_until(lambda: second.committed == ends(produced), what="the second member's commits")
        finally:
            second.close()
        assert committed_offsets(bs, group, topic, PARTITIONS) == ends(produced)
    finally:
        code = broker.stop()
    assert code == 0, "".join(broker.stderr_lines[-40:])


def test_deleted_group_stays_deleted_and_later_commits_survive(tmp_path: Path, name: str) -> None:
    """DeleteGroups writes tombstones; reading them back must neither revive the group nor drop
    offsets that a standalone consumer committed to the same group id after the deletion."""
    topic = name
    gone, reused = f"{name}-gone", f"{name}-reused"
    broker = BrokerProcess(tmp_path / "data", overrides=BROKER_OVERRIDES).start()
    try:
        bs = broker.bootstrap
        create_topic(bs, topic, 1)

        def standalone_commit(group: str, offset: int) -> None:
            c = Consumer({"bootstrap.servers": bs, "group.id": group, **CK_COMMON})
            try:
                c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            finally:
                c.close()

        standalone_commit(gone, 5)
        standalone_commit(reused, 6)
        assert {gone, reused} <= set(list_groups(bs))
        a = admin(bs)
        for f in a.delete_consumer_groups([gone, reused]).values():
            f.result(30)
        assert not {gone, reused} & set(list_groups(bs))
        assert describe_group(bs, gone).state == ConsumerGroupState.DEAD
        assert committed_offsets(bs, gone, topic, 1) == {0: OFFSET_INVALID}
        standalone_commit(reused, 9)
        assert list_groups(bs).get(reused) == ConsumerGroupState.EMPTY

        broker.kill()
        broker.start()
        assert committed_offsets(bs, gone, topic, 1) == {0: OFFSET_INVALID}
        assert committed_offsets(bs, reused, topic, 1) == {0: 9}
        groups = list_groups(bs)
        assert gone not in groups
        assert groups.get(reused) == ConsumerGroupState.EMPTY
    finally:
        code = broker.stop()
    assert code == 0, "".join(broker.stderr_lines[-40:])
