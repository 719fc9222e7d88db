"""KIP-848 consumer groups over the wire (raw requests), beside classic groups, against
``odradek serve``:

* a classic group and a consumer group side by side: ListGroups v5 lists both with their type
  (``classic``/``consumer``), filters by type and state; DescribeGroups describes only the classic
  one (a consumer group is Dead to it, as Kafka answers), ConsumerGroupDescribe the consumer one;
* offsets of a consumer group: OffsetCommit v9 with the member epoch as the generation
  (STALE_MEMBER_EPOCH for another, UNSUPPORTED_VERSION below v9 for a consumer-protocol member),
  OffsetFetch v9 checking the member and its epoch, OffsetDelete refusing the topics the group
  subscribes to (GROUP_SUBSCRIBED_TO_TOPIC), DeleteGroups refusing a group with members
  (NON_EMPTY_GROUP) and deleting an empty one with its offsets;
* the group's state is written to ``__consumer_offsets`` in Kafka's record formats (record types
  3-8), and survives a SIGKILL of the broker: after the restart the same member goes on at the same
  epoch with the same partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest

from odradek.broker.coordinators.consumer_records import decode_record
from odradek.cluster.consumer_group import CurrentAssignmentRecord, GroupEpochRecord, MemberSubscriptionRecord
from odradek.errors import ErrorCode
from odradek.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from odradek.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as Q
from odradek.protocol.messages.delete_groups import DeleteGroupsRequest
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest
from odradek.protocol.messages.list_groups import ListGroupsRequest
from odradek.protocol.messages.offset_commit import OffsetCommitRequest
from odradek.protocol.messages.offset_delete import OffsetDeleteRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import CK_COMMON, create_topic, wait_until
from tests.groups.kip848_helpers import KIP848_OVERRIDES
from tests.groups.wire_group import WireMember, all_stable, find_coordinator

PARTITIONS = 4


class Member:
    """A consumer-protocol member speaking raw ConsumerGroupHeartbeat v1."""

    def __init__(self, w: WireClient, group: str, topic: str) -> None:
        self.w, self.group, self.topic = w, group, topic
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    def heartbeat(self) -> ErrorCode:
        first = self.epoch == 0
        resp = self.w.request(Q(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
            rebalance_timeout_ms=30000 if first else -1,
            subscribed_topic_names=[self.topic] if first else None,
            topic_partitions=[Q.TopicPartitions(topic_id=t, partitions=ps) for t, ps in self.owned.items()],
        ), 1)
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                self.owned = {tp.topic_id: list(tp.partitions) for tp in resp.assignment.topic_partitions}
        return ErrorCode.of(resp.error_code)

    def partitions(self) -> list[int]:
        return sorted(p for ps in self.owned.values() for p in ps)

    def leave(self) -> ErrorCode:
        resp = self.w.request(Q(group_id=self.group, member_id=self.member_id, member_epoch=-1), 1)
        return ErrorCode.of(resp.error_code)


def _commit(w: WireClient, group: str, topic: str, epoch: int, member_id: str, offset: int, version: int = 9) -> ErrorCode:
    R = OffsetCommitRequest
    resp = w.request(R(group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id, topics=[
        R.OffsetCommitRequestTopic(name=topic, partitions=[
            R.OffsetCommitRequestPartition(partition_index=p, committed_offset=offset) for p in range(PARTITIONS)
        ])
    ]), version)
    codes = {ErrorCode.of(p.error_code) for t in resp.topics for p in t.partitions}
    assert len(codes) == 1, codes
    return codes.pop()


def _fetch(w: WireClient, group: str, topic: str, member_id: str | None, epoch: int) -> tuple[ErrorCode, dict[int, int]]:
    R = OffsetFetchRequest
    resp = w.request(R(groups=[R.OffsetFetchRequestGroup(group_id=group, member_id=member_id, member_epoch=epoch,
                                                           topics=[R.OffsetFetchRequestTopics(
                                                               name=topic, partition_indexes=list(range(PARTITIONS)))])
                               ]), 9)
    (g,) = resp.groups
    return ErrorCode.of(g.error_code), {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", overrides=KIP848_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        if proc.running():
            code = proc.stop()
            assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


def _join(broker: BrokerProcess, group: str, topic: str) -> tuple[WireClient, Member]:
    w = WireClient(broker.host, broker.port)
    find_coordinator(w, group)
    m = Member(w, group, topic)
    wait_until(lambda: m.heartbeat() is ErrorCode.NONE and len(m.partitions()) == PARTITIONS,
               what="the member owning every partition")
    return w, m


def test_classic_and_consumer_groups_side_by_side(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    w, member = _join(broker, "modern", "t")
    classic = [WireMember(broker.host, broker.port, "old", "t", PARTITIONS, f"c{i}") for i in range(2)]
    for c in classic:
        c.start()
    try:
        wait_until(lambda: all_stable(classic) is not None, what="the classic group stable")

        def listed(**filters: list[str]) -> dict[str, tuple[str, str, str]]:
            resp = w.request(ListGroupsRequest(**filters), 5)
            return {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in resp.groups}

        both = listed()
        assert both["modern"] == ("consumer", "Stable", "consumer")
        assert both["old"] == ("consumer", "Stable", "classic")
        assert set(listed(types_filter=["consumer"])) == {"modern"}
        assert set(listed(types_filter=["CLASSIC"])) == {"old"}
        assert set(listed(states_filter=["stable"], types_filter=["consumer", "classic"])) == {"modern", "old"}
        assert listed(states_filter=["Empty"]) == {}
        described = w.request(DescribeGroupsRequest(groups=["old", "modern"]), 5).groups
        assert [g.group_state for g in described] == ["Stable", "Dead"]
        consumer = w.request(ConsumerGroupDescribeRequest(group_ids=["modern", "old"]), 0).groups
        assert consumer[0].error_code == 0 and consumer[0].members[0].member_id == member.member_id
        assert consumer[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        for c in classic:
            c.close()
        w.close()


def test_offsets_deletion_and_the_member_epoch_as_generation(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    create_topic(broker.bootstrap, "other", PARTITIONS)
    w, member = _join(broker, "g", "t")
    try:
        assert _commit(w, "g", "t", member.epoch, member.member_id, 5) is ErrorCode.NONE
        assert _commit(w, "g", "t", member.epoch + 1, member.member_id, 6) is ErrorCode.STALE_MEMBER_EPOCH
        assert _commit(w, "g", "t", member.epoch, "stranger", 6) is ErrorCode.UNKNOWN_MEMBER_ID
        assert _commit(w, "g", "t", member.epoch, member.member_id, 6, version=8) is ErrorCode.UNSUPPORTED_VERSION
        assert _commit(w, "g", "other", member.epoch, member.member_id, 3) is ErrorCode.NONE
        assert _fetch(w, "g", "t", member.member_id, member.epoch) == (ErrorCode.NONE, dict.fromkeys(range(PARTITIONS), 5))
        assert _fetch(w, "g", "t", member.member_id, member.epoch - 1)[0] is ErrorCode.STALE_MEMBER_EPOCH
        assert _fetch(w, "g", "t", None, -1)[0] is ErrorCode.NONE  # an admin's fetch

        def offset_delete(topic: str) -> ErrorCode:
            R = OffsetDeleteRequest
            resp = w.request(R(group_id="g", topics=[R.OffsetDeleteRequestTopic(
                name=topic, partitions=[R.OffsetDeleteRequestPartition(partition_index=0)])]), 0)
            assert resp.error_code == 0
            return ErrorCode.of(resp.topics[0].partitions[0].error_code)

        assert offset_delete("t") is ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        assert offset_delete("other") is ErrorCode.NONE
        delete = w.request(DeleteGroupsRequest(groups_names=["g"]), 2).results[0]
        assert delete.error_code == ErrorCode.NON_EMPTY_GROUP
        assert member.leave() is ErrorCode.NONE
        resp = w.request(ConsumerGroupDescribeRequest(group_ids=["g"]), 0).groups[0]
        assert (resp.error_code, resp.group_state, resp.members) == (0, "Empty", [])
        delete = w.request(DeleteGroupsRequest(groups_names=["g"]), 2).results[0]
        assert delete.error_code == 0
        assert w.request(ConsumerGroupDescribeRequest(group_ids=["g"]), 0).groups[0].error_code == (
            ErrorCode.GROUP_ID_NOT_FOUND)
        assert _fetch(w, "g", "t", None, -1) == (ErrorCode.NONE, dict.fromkeys(range(PARTITIONS), -1))
    finally:
        w.close()


def test_the_groups_records_are_kafkas_and_survive_a_sigkill(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    w, member = _join(broker, "durable", "t")
    epoch, parts = member.epoch, member.partitions()
    w.close()
    broker.kill()
    broker.start()
    w = WireClient(broker.host, broker.port)
    try:
        find_coordinator(w, "durable")
        wait_until(lambda: member_heartbeat(member, w) is ErrorCode.NONE, what="the member's heartbeat answered")
        assert (member.epoch, member.partitions()) == (epoch, parts)  # carried on: no rejoin
        described = w.request(ConsumerGroupDescribeRequest(group_ids=["durable"]), 0).groups[0]
        assert (described.group_state, described.group_epoch) == ("Stable", epoch)
    finally:
        w.close()
    # the records themselves, read back from __consumer_offsets
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", **CK_COMMON,
                     "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition("__consumer_offsets", p, 0) for p in range(50)])
        found: list[object] = []

        def read() -> bool:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None and msg.key() is not None:
                r = decode_record(msg.key(), msg.value())
                if r is not None and r.group_id == "durable":
                    found.append(r)
            kinds = {type(r) for r in found}
            return {GroupEpochRecord, MemberSubscriptionRecord, CurrentAssignmentRecord} <= kinds

        wait_until(read, what="the group's records in __consumer_offsets")
        current = [r for r in found if isinstance(r, CurrentAssignmentRecord)][-1]
        assert current.member_id == member.member_id and current.member is not None
        assert current.member.member_epoch == epoch
    finally:
        c.close()


def member_heartbeat(member: Member, w: WireClient) -> ErrorCode:
    member.w = w
    return member.heartbeat()


def test_an_empty_consumer_group_makes_way_for_a_classic_one_and_back(broker: BrokerProcess) -> None:
    """A group id moves between the protocols when its group is empty: a classic JoinGroup to an
    empty consumer group replaces it (its offsets stay), and a ConsumerGroupHeartbeat to an empty
    classic group replaces that."""
    create_topic(broker.bootstrap, "t", PARTITIONS)
    w, member = _join(broker, "shifting", "t")
    try:
        assert _commit(w, "shifting", "t", member.epoch, member.member_id, 7) is ErrorCode.NONE
        assert member.leave() is ErrorCode.NONE
        classic = WireMember(broker.host, broker.port, "shifting", "t", PARTITIONS, "classic")
        classic.start()
        try:
            wait_until(lambda: all_stable([classic]) is not None, what="a classic group in its place")
            assert w.request(ConsumerGroupDescribeRequest(group_ids=["shifting"]), 0).groups[0].error_code == (
                ErrorCode.GROUP_ID_NOT_FOUND)
            assert [g.group_state for g in w.request(DescribeGroupsRequest(groups=["shifting"]), 5).groups] == [
                "Stable"]
            assert _fetch(w, "shifting", "t", None, -1)[1] == dict.fromkeys(range(PARTITIONS), 7)
        finally:
            classic.close()
        wait_until(lambda: w.request(DescribeGroupsRequest(groups=["shifting"]), 5).groups[0].group_state == "Empty",
                   what="the classic group empty")
        again = Member(w, "shifting", "t")
        wait_until(lambda: again.heartbeat() is ErrorCode.NONE and len(again.partitions()) == PARTITIONS,
                   what="a consumer group again")
        assert _fetch(w, "shifting", "t", again.member_id, again.epoch) == (
            ErrorCode.NONE, dict.fromkeys(range(PARTITIONS), 7))
    finally:
        w.close()
