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

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, TopicPartition

from odradek.client import Admin
from odradek.testing import BrokerProcess
from tests.groups.group_helpers import (
    admin,
    committed_offsets,
    create_topic,
    ends,
    produce,
    rebalanced,
    wait_until,
)
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


def test_groups_describe_shows_the_protocol_member_epochs_and_target_assignments(
    broker: BrokerProcess, name: str
) -> None:
    """``odradek groups describe`` (and the admin client under it) describe a consumer group with
    ConsumerGroupDescribe: the protocol, the epochs, each member's partitions and target."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    watcher = Watcher(broker.host, broker.port, group, topic)
    members = [ConsumerMember.start(bs, group, topic, f"cli-{i}") for i in range(2)]

    def step() -> None:
        for m in members:
            m.step()

    try:
        snap = wait_settled(watcher, 2, PARTITIONS, step)
        with Admin({"bootstrap.servers": bs}) as a:
            g = a.describe_groups([group])[group]
        assert (g.group_type, g.protocol_type, g.state) == ("consumer", "consumer", "Stable")
        assert g.group_epoch == snap.group_epoch and g.assignment_epoch == snap.assignment_epoch
        assert {m.member_id: (m.member_epoch, {p for _t, p in m.assignment}, {p for _t, p in m.target_assignment or []})
                for m in g.members} == {mid: (e, set(parts), set(target))
                                         for mid, (e, parts, target, _i) in snap.members.items()}
        table = _cli(bs, "describe", group)
        assert table.returncode == 0, table.stderr
        assert f"Consumer group '{group}' (consumer protocol, KIP-848) is Stable with 2 member(s)" in table.stdout
        assert "TARGET-ASSIGNMENT" in table.stdout and "EPOCH" in table.stdout
        for mid, (epoch, parts, _t, _i) in snap.members.items():
            row = next(line.split() for line in table.stdout.splitlines() if line.startswith(mid))
            assert row[1] == str(epoch)
            assert row[-1] == row[-2] == f"{topic}:{','.join(map(str, sorted(parts)))}"
        doc = json.loads(_cli(bs, "describe", group, "--output", "json").stdout)
        assert doc["group_type"] == "consumer" and doc["group_epoch"] == snap.group_epoch
        assert {m["member_id"]: m["member_epoch"] for m in doc["members"]} == {
            mid: e for mid, (e, _p, _t, _i) in snap.members.items()}
    finally:
        for m in members:
            m.close()
        watcher.stop()


def _cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", "groups", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_a_regular_expression_subscription_takes_topics_as_they_appear(broker: BrokerProcess, name: str) -> None:
    """A ``^prefix.*`` subscription is resolved by the broker (KIP-848's SubscribedTopicRegex, RE2):
    the member gets the matching topics' partitions, and those of a matching topic created later."""
    first, later, other = f"{name}-a", f"{name}-b", f"x{name}"
    bs = broker.bootstrap
    for t in (first, other):
        create_topic(bs, t, 2)
    member = ConsumerMember.start(bs, name, first, "regex")

    def on_assign(c: Consumer, ps: list[TopicPartition]) -> None:
        member.current.update((tp.topic, tp.partition) for tp in ps)
        rebalanced(c, True, True, ps)  # the consumer protocol: incremental

    def on_revoke(c: Consumer, ps: list[TopicPartition]) -> None:
        member.current.difference_update((tp.topic, tp.partition) for tp in ps)
        rebalanced(c, True, False, ps)

    member.consumer.subscribe([f"^{name}-.*"], on_assign=on_assign, on_revoke=on_revoke)
    try:
        wait_until(lambda: member.current == {(first, 0), (first, 1)}, what="the matching topic assigned",
                   step=member.step)
        create_topic(bs, later, 2)
        wait_until(lambda: member.current == {(t, p) for t in (first, later) for p in (0, 1)},
                   what="the topic created later assigned too", step=member.step)
    finally:
        member.close()
