"""confluent-kafka (librdkafka with KIP-848) consumers with ``group.protocol=consumer`` against
``odradek serve``: the group protocol in which the broker assigns.

The classic group scenario: three consumers over six partitions, one leaves, one joins; each
commits after every record.  Every record is consumed, the committed offsets are the end offsets,
and no partition is ever owned by two members: ConsumerGroupDescribe snapshots, taken every few
milliseconds throughout, never show one partition in two members' assignments.  ListGroups shows
the group as a consumer group (the type filter of v5).

Then a static member (``group.instance.id``) restarts within its session timeout: it comes back
with the partitions it had, nobody else's assignment changes, and the group epoch stays.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupType

from odradek.testing import BrokerProcess
from tests.groups.group_helpers import admin, committed_offsets, create_topic, ends, produce, wait_until
from tests.groups.kip848_helpers import KIP848_OVERRIDES, ConsumerMember, Watcher, wait_settled

PARTITIONS = 6
PER_PHASE = 90


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-kip848"), overrides=KIP848_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


def test_three_members_one_leaves_one_joins_every_record_once_owned(broker: BrokerProcess, name: str) -> None:
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produced = produce(bs, topic, PARTITIONS, PER_PHASE, "one")
    watcher = Watcher(broker.host, broker.port, group, topic)
    members = [ConsumerMember.start(bs, group, topic, f"member-{i}") for i in range(3)]

    def step() -> None:
        for m in members:
            m.step()

    try:
        first = wait_settled(watcher, 3, PARTITIONS, step)
        assert sorted(len(parts) for _e, parts, _t, _i in first.members.values()) == [2, 2, 2]

        produced |= produce(bs, topic, PARTITIONS, PER_PHASE, "two")
        members[0].close()  # leaves the group (ConsumerGroupHeartbeat with epoch -1)
        second = wait_settled(watcher, 2, PARTITIONS, step)
        assert sorted(len(parts) for _e, parts, _t, _i in second.members.values()) == [3, 3]
        assert second.group_epoch > first.group_epoch

        members.append(ConsumerMember.start(bs, group, topic, "member-3"))
        produced |= produce(bs, topic, PARTITIONS, PER_PHASE, "three")
        third = wait_settled(watcher, 3, PARTITIONS, step)
        assert sorted(len(parts) for _e, parts, _t, _i in third.members.values()) == [2, 2, 2]

        end = ends(produced)
        def consumed() -> bool:
            got = {(p, o) for m in members for p, o, _v in m.delivered}
            return all((p, o) in got for p, o in produced)

        wait_until(consumed, what="every record consumed", step=step)
        wait_until(lambda: committed_offsets(bs, group, topic, PARTITIONS) == end, what="commits of every record",
                   step=step)

        delivered = {(p, o): v for m in members for p, o, v in m.delivered}
        assert set(produced) <= set(delivered)
        assert all(delivered[k] == v for k, v in produced.items())
        a = admin(bs)  # kept alive until its futures are done
        listed = a.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30)
        assert not listed.errors, listed.errors
        assert group in {g.group_id for g in listed.valid}, listed.valid
        classic = a.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(30)
        assert group not in {g.group_id for g in classic.valid}
    finally:
        for m in members:
            m.close()
        watcher.stop()
    assert len(watcher.snapshots) > 50  # snapshots all along, none with a partition owned twice
    assert len({s.group_epoch for s in watcher.snapshots}) >= 3


def test_a_static_member_restarts_within_its_session_without_a_reassignment(broker: BrokerProcess, name: str) -> None:
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    watcher = Watcher(broker.host, broker.port, group, topic)
    members = [ConsumerMember.start(bs, group, topic, f"static-{i}", **{"group.instance.id": f"instance-{i}"})
               for i in range(3)]

    def step() -> None:
        for m in members:
            m.step()

    try:
        before = wait_settled(watcher, 3, PARTITIONS, step)
        by_instance = {i: (parts, mid) for mid, (_e, parts, _t, i) in before.members.items()}
        members[1].close()  # a static member leaves for a moment: epoch -2, its partitions kept
        wait_until(lambda: (s := watcher.latest()) is not None
                   and any(e == -2 for e, _p, _t, _i in s.members.values()), what="the member away", step=step)
        away = watcher.latest()
        assert away is not None and away.group_epoch == before.group_epoch
        members[1] = ConsumerMember.start(bs, group, topic, "static-1b", **{"group.instance.id": "instance-1"})
        after = wait_settled(watcher, 3, PARTITIONS, step)
        again = {i: (parts, mid) for mid, (_e, parts, _t, i) in after.members.items()}
        assert {i: p for i, (p, _m) in again.items()} == {i: p for i, (p, _m) in by_instance.items()}
        assert again["instance-1"][1] != by_instance["instance-1"][1]  # a new member took its place
        assert after.group_epoch == before.group_epoch  # no rebalance
        # the others never lost a partition meanwhile
        for snap in watcher.snapshots[watcher.snapshots.index(before):]:
            for mid, (_e, parts, _t, inst) in snap.members.items():
                if inst != "instance-1":
                    assert parts == by_instance[inst][0], (mid, snap)
    finally:
        for m in members:
            m.close()
        watcher.stop()
