"""Share groups (KIP-932) over the wire against ``odradek serve``: ShareGroupHeartbeat v1 and
ShareGroupDescribe v1 as Kafka 4.x's group coordinator answers them.

* members choose their member id (a UUID), join with epoch 0 and their topics, leave with -1;
  a wrong epoch is FENCED_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID;
* the simple assignor: every partition is assigned, with more members than partitions several
  members share one, and every member gets at least one;
* the group is seen by ListGroups (type ``share``), not by DescribeGroups (Dead, as for any group
  that is not classic), by ShareGroupDescribe; DeleteGroups refuses it while it has members;
* a group id is one kind of group only (a classic JoinGroup to a share group is
  INCONSISTENT_GROUP_PROTOCOL, a share heartbeat to a consumer group GROUP_ID_NOT_FOUND);
* ApiVersions advertises the share APIs while ``share.version`` is 1, not after a downgrade to 0.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from odradek.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from odradek.protocol.messages.delete_groups import DeleteGroupsRequest
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest
from odradek.protocol.messages.join_group import JoinGroupRequest
from odradek.protocol.messages.list_groups import ListGroupsRequest
from odradek.protocol.messages.offset_commit import OffsetCommitRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest
from odradek.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from odradek.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as Q
from odradek.protocol.messages.update_features import UpdateFeaturesRequest
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import BROKER_OVERRIDES, create_topic, wait_until
from tests.groups.wire_group import find_coordinator

SHARE_APIS = {76, 77, 78, 79, 90, 91, 92}


class ShareMember:
    """A share-group member speaking raw ShareGroupHeartbeat v1."""

    def __init__(self, w: WireClient, group: str, topics: list[str], member_id: str | None = None) -> None:
        self.w, self.group, self.topics = w, group, topics
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.assigned: dict[uuid.UUID, list[int]] = {}
        self.last: Any = None

    def heartbeat(self, epoch: int | None = None) -> ErrorCode:
        e = self.epoch if epoch is None else epoch
        resp = self.w.request(Q(group_id=self.group, member_id=self.member_id, member_epoch=e,
                                subscribed_topic_names=self.topics if e == 0 else None), 1)
        self.last = resp
        if resp.error_code == 0:
            assert resp.member_id == self.member_id
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                self.assigned = {tp.topic_id: list(tp.partitions) for tp in resp.assignment.topic_partitions}
        return ErrorCode.of(resp.error_code)

    def leave(self) -> ErrorCode:
        code = self.heartbeat(-1)
        if code is ErrorCode.NONE:
            assert self.last.member_epoch == -1
        return code

    def partitions(self) -> list[int]:
        return sorted(p for ps in self.assigned.values() for p in ps)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("share") / "data", overrides={
        **BROKER_OVERRIDES, "offsets.topic.num.partitions": 2, "group.share.heartbeat.interval.ms": 250,
        "group.share.min.heartbeat.interval.ms": 250,
    })
    proc.start()
    try:
        yield proc
    finally:
        if proc.running():
            code = proc.stop()
            assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


@pytest.fixture
def wire(broker: BrokerProcess) -> Iterator[WireClient]:
    w = WireClient(broker.host, broker.port)
    try:
        yield w
    finally:
        w.close()


def _ready(w: WireClient, group: str) -> None:
    """The group's coordinator is up (its __consumer_offsets partition made and loaded)."""
    def ok() -> bool:
        resp = find_coordinator(w, group)
        return resp.coordinators[0].error_code == 0
    wait_until(ok, what="the coordinator")


def _describe(w: WireClient, *groups: str, ops: bool = False) -> list[Any]:
    return w.request(ShareGroupDescribeRequest(group_ids=list(groups), include_authorized_operations=ops), 1).groups


def _converge(members: list[ShareMember]) -> None:
    """Heartbeat every member until each one's epoch is the group's assignment epoch."""
    def settled() -> bool:
        for m in members:
            assert m.heartbeat() is ErrorCode.NONE, m.last
        d = _describe(members[0].w, members[0].group)[0]
        return all(m.epoch == d.assignment_epoch for m in members) and d.group_epoch == d.assignment_epoch
    wait_until(settled, what="the members at the assignment epoch")


@pytest.mark.parametrize("count", [1, 2, 4, 5])
def test_the_simple_assignor_assigns_every_partition_and_shares_when_members_outnumber_them(
    broker: BrokerProcess, wire: WireClient, count: int
) -> None:
    group, topic = f"assign-{count}", f"assign-t-{count}"
    create_topic(broker.bootstrap, topic, 2)
    _ready(wire, group)
    members = [ShareMember(wire, group, [topic]) for _ in range(count)]
    for m in members:
        assert m.heartbeat() is ErrorCode.NONE, m.last
        assert m.last.heartbeat_interval_ms == 250
        assert m.last.assignment is not None  # a joining member is always told its assignment
    _converge(members)
    per_partition = Counter(p for m in members for p in m.partitions())
    assert set(per_partition) == {0, 1}, "every partition is assigned"
    assert all(m.partitions() for m in members), "every member gets a partition"
    if count <= 2:
        assert sum(per_partition.values()) == 2, "no partition shared while there are enough"
    else:  # each partition shared by the members over the partitions, rounded up
        sharing = -(-count // 2)
        assert per_partition == {0: sharing, 1: sharing}
        sizes = sorted(len(m.partitions()) for m in members)
        assert sizes[-1] - sizes[0] <= 1
    d = _describe(wire, group)[0]
    assert (d.error_code, d.group_state, d.assignor_name) == (0, "Stable", "simple")
    assert {m.member_id for m in d.members} == {m.member_id for m in members}
    for dm in d.members:
        own = next(m for m in members if m.member_id == dm.member_id)
        assert dm.member_epoch == own.epoch
        assert dm.subscribed_topic_names == [topic]
        assert sorted(p for tp in dm.assignment.topic_partitions for p in tp.partitions) == own.partitions()
        assert all(tp.topic_name == topic for tp in dm.assignment.topic_partitions)
    for m in members:
        assert m.leave() is ErrorCode.NONE


def test_join_heartbeat_fencing_leave_and_deletion(broker: BrokerProcess, wire: WireClient) -> None:
    group, topic = "life", "life-t"
    create_topic(broker.bootstrap, topic, 2)
    _ready(wire, group)
    a = ShareMember(wire, group, [topic])
    assert a.heartbeat() is ErrorCode.NONE
    first = a.epoch
    assert first >= 1 and a.partitions() == [0, 1]
    # nothing changed: no assignment in the answer, same epoch
    assert a.heartbeat() is ErrorCode.NONE
    assert a.last.assignment is None and a.epoch == first
    # a second member: the group epoch moves, a gets its smaller assignment at its next heartbeat
    b = ShareMember(wire, group, [topic])
    assert b.heartbeat() is ErrorCode.NONE and b.epoch == first + 1
    assert a.heartbeat() is ErrorCode.NONE
    assert a.epoch == first + 1 and a.last.assignment is not None and len(a.partitions()) == 1
    # the previous epoch is still accepted (its answer may have been lost); others are fenced
    assert a.heartbeat(first) is ErrorCode.NONE
    assert a.heartbeat(first + 5) is ErrorCode.FENCED_MEMBER_EPOCH
    assert "greater member epoch" in a.last.error_message
    stranger = ShareMember(wire, group, [topic])
    assert stranger.heartbeat(3) is ErrorCode.UNKNOWN_MEMBER_ID
    # a group with members cannot be deleted
    assert wire.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    listed = {g.group_id: (g.protocol_type, g.group_state, g.group_type)
              for g in wire.request(ListGroupsRequest(types_filter=["Share"]), 5).groups}
    assert listed[group] == ("share", "Stable", "share")
    assert group not in {g.group_id for g in wire.request(ListGroupsRequest(types_filter=["consumer"]), 5).groups}
    # DescribeGroups describes classic groups only
    assert wire.request(DescribeGroupsRequest(groups=[group]), 5).groups[0].group_state == "Dead"
    # leave: b takes both partitions at its next heartbeat
    assert a.leave() is ErrorCode.NONE
    assert a.heartbeat(a.epoch) is ErrorCode.UNKNOWN_MEMBER_ID
    assert b.heartbeat() is ErrorCode.NONE and b.partitions() == [0, 1]
    assert b.epoch == first + 2
    assert b.heartbeat(first) is ErrorCode.FENCED_MEMBER_EPOCH  # older than its previous epoch
    assert "smaller member epoch" in b.last.error_message
    assert b.leave() is ErrorCode.NONE
    d = _describe(wire, group)[0]
    assert (d.error_code, d.group_state, d.members) == (0, "Empty", [])
    listed = {g.group_id: g.group_state for g in wire.request(ListGroupsRequest(states_filter=["empty"]), 5).groups}
    assert listed[group] == "Empty"
    assert wire.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0].error_code == 0
    assert _describe(wire, group)[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_invalid_heartbeats_get_kafkas_errors(broker: BrokerProcess, wire: WireClient) -> None:
    create_topic(broker.bootstrap, "bad-t", 1)
    _ready(wire, "bad")

    def hb(**kw: Any) -> tuple[ErrorCode, str | None]:
        args = {"group_id": "bad", "member_id": str(uuid.uuid4()), "member_epoch": 0,
                "subscribed_topic_names": ["bad-t"], **kw}
        resp = wire.request(Q(**args), 1)
        return ErrorCode.of(resp.error_code), resp.error_message

    assert hb(member_id="") == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    assert hb(member_id="  ") == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    assert hb(subscribed_topic_names=None) == (ErrorCode.INVALID_REQUEST,
                                               "SubscribedTopicNames must be set in first request.")
    assert hb(subscribed_topic_names=[])[0] is ErrorCode.INVALID_REQUEST
    assert hb(member_epoch=-2) == (ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
    assert hb(group_id="")[0] in (ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    assert hb(rack_id="")[0] is ErrorCode.INVALID_REQUEST
    assert _describe(wire, "bad")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND  # nothing was made


def test_a_group_id_is_one_kind_of_group(broker: BrokerProcess, wire: WireClient) -> None:
    create_topic(broker.bootstrap, "kinds-t", 1)
    _ready(wire, "kinds")
    m = ShareMember(wire, "kinds", ["kinds-t"])
    assert m.heartbeat() is ErrorCode.NONE
    join = wire.request(JoinGroupRequest(group_id="kinds", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                         member_id="", protocol_type="consumer",
                                         protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                              metadata=b"")]), 5)
    assert join.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    cg = wire.request(ConsumerGroupHeartbeatRequest(group_id="kinds", member_id=str(uuid.uuid4()), member_epoch=0,
                                                    rebalance_timeout_ms=10000, subscribed_topic_names=["kinds-t"],
                                                    topic_partitions=[]), 1)
    assert cg.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert cg.error_message == "Group kinds is not a consumer group."
    described = wire.request(ConsumerGroupDescribeRequest(group_ids=["kinds"]), 0).groups[0]
    assert (described.error_code, described.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                               "Group kinds is not a consumer group.")
    # offsets are not a share group's
    F = OffsetFetchRequest
    fetched = wire.request(F(groups=[F.OffsetFetchRequestGroup(group_id="kinds", topics=None)]), 8).groups[0]
    assert fetched.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    C = OffsetCommitRequest
    committed = wire.request(C(group_id="kinds", generation_id_or_member_epoch=-1, member_id="", topics=[
        C.OffsetCommitRequestTopic(name="kinds-t", partitions=[
            C.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 8)
    assert committed.topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert m.leave() is ErrorCode.NONE
    # a consumer group's id is not a share group's
    _ready(wire, "kinds-c")
    cg = wire.request(ConsumerGroupHeartbeatRequest(group_id="kinds-c", member_id=str(uuid.uuid4()), member_epoch=0,
                                                    rebalance_timeout_ms=10000, subscribed_topic_names=["kinds-t"],
                                                    topic_partitions=[]), 1)
    assert cg.error_code == 0
    s = ShareMember(wire, "kinds-c", ["kinds-t"])
    assert s.heartbeat() is ErrorCode.GROUP_ID_NOT_FOUND
    assert s.last.error_message == "Group kinds-c is not a share group."
    assert _describe(wire, "kinds-c")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_partitions_added_to_a_subscribed_topic_reach_the_members(broker: BrokerProcess, wire: WireClient) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    create_topic(broker.bootstrap, "grow-t", 1)
    _ready(wire, "grow")
    members = [ShareMember(wire, "grow", ["grow-t"]) for _ in range(2)]
    for m in members:
        assert m.heartbeat() is ErrorCode.NONE
    _converge(members)
    assert [m.partitions() for m in members] == [[0], [0]]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions("grow-t", 2)])["grow-t"].result(30)
    epoch = _describe(wire, "grow")[0].group_epoch

    def grown() -> bool:
        for m in members:
            assert m.heartbeat() is ErrorCode.NONE
        return sorted(p for m in members for p in m.partitions()) == [0, 1]
    wait_until(grown, what="the new partition assigned")
    assert _describe(wire, "grow")[0].group_epoch > epoch
    for m in members:
        assert m.leave() is ErrorCode.NONE


def test_api_versions_advertises_the_share_apis_only_while_share_version_is_1(tmp_path: Any) -> None:
    def advertised(w: WireClient) -> set[int]:
        r = w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        return {k.api_key for k in r.api_keys}

    def set_level(w: WireClient, level: int, upgrade_type: int) -> None:
        R = UpdateFeaturesRequest
        resp = w.request(R(timeout_ms=10000, feature_updates=[
            R.FeatureUpdateKey(feature="share.version", max_version_level=level, upgrade_type=upgrade_type)]), 1)
        assert resp.error_code == 0 and all(r.error_code == 0 for r in resp.results), resp

    with BrokerProcess(tmp_path / "data") as b:
        w = WireClient(b.host, b.port)
        try:
            on = advertised(w)
            assert {ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE} <= on
            set_level(w, 0, 2)  # SAFE_DOWNGRADE
            wait_until(lambda: not advertised(w) & SHARE_APIS, what="the share APIs hidden")
            # not served either: refused as an API the broker does not know (the connection closes,
            # as for every gated API here)
            w2 = WireClient(b.host, b.port)
            try:
                with pytest.raises(ConnectionError):
                    w2.request(Q(group_id="g", member_id=str(uuid.uuid4()), member_epoch=0,
                                 subscribed_topic_names=["t"]), 1)
            finally:
                w2.close()
            set_level(w, 1, 1)
            wait_until(lambda: {76, 77} <= advertised(w), what="the share APIs back")
        finally:
            w.close()


def test_session_expiry_on_fake_time_the_listener_and_the_query_api(tmp_path: Any) -> None:
    """A member that stops heartbeating is removed at its session deadline on the coordinator's
    clock (not a millisecond before), the other member takes its partitions, the
    ``on_member_removed`` listeners hear of leaves and expiries, and ``is_member``/``assignment``
    answer what ShareGroupDescribe shows.  ``group.share.max.size`` caps the group."""
    import asyncio

    from odradek.testing import FakeScheduler, running_broker

    session = 10_000
    fake = FakeScheduler()
    overrides = {"offsets.topic.num.partitions": 1, "group.share.session.timeout.ms": session,
                 "group.share.heartbeat.interval.ms": 1000, "group.share.max.size": 2}

    async def main() -> None:
        async with running_broker(tmp_path / "data", overrides=overrides, timers=fake) as broker:
            await broker.topics.create("exp-t", 2, 1, {})
            host, port = broker.bound["PLAINTEXT"]
            service = broker.groups.share
            removed: list[tuple[str, str]] = []
            service.on_member_removed(lambda g, m: removed.append((g, m)))
            w = await asyncio.to_thread(WireClient, host, port)
            try:
                for _ in range(500):  # the coordinator's topic is created and loaded (real work, polled)
                    found = await asyncio.to_thread(find_coordinator, w, "exp")
                    if found.coordinators[0].error_code == 0:
                        break
                    await asyncio.sleep(0.01)
                a, b, c = (ShareMember(w, "exp", ["exp-t"]) for _ in range(3))
                assert await asyncio.to_thread(a.heartbeat) is ErrorCode.NONE
                assert await asyncio.to_thread(b.heartbeat) is ErrorCode.NONE
                assert await asyncio.to_thread(c.heartbeat) is ErrorCode.GROUP_MAX_SIZE_REACHED
                assert c.last.error_message == "The share group has reached its maximum capacity of 2 members."
                assert await asyncio.to_thread(a.heartbeat) is ErrorCode.NONE
                topic_id = service.image.topics["exp-t"].topic_id
                assert service.is_member("exp", a.member_id) and service.is_member("exp", b.member_id)
                assert not service.is_member("exp", c.member_id) and not service.is_member("nope", a.member_id)
                assert service.assignment("exp", a.member_id) == {topic_id: frozenset(a.partitions())}
                assert service.assignment("exp", c.member_id) is None
                assert sorted(a.partitions() + b.partitions()) == [0, 1]

                await fake.advance(session // 2)
                assert await asyncio.to_thread(a.heartbeat) is ErrorCode.NONE  # a's deadline moves, b's not
                await fake.advance(session // 2 - 1)
                assert service.is_member("exp", b.member_id), "removed before its session ended"
                await fake.advance(1)
                assert not service.is_member("exp", b.member_id), "still a member after its session ended"
                assert removed == [("exp", b.member_id)]
                assert await asyncio.to_thread(b.heartbeat) is ErrorCode.UNKNOWN_MEMBER_ID
                assert await asyncio.to_thread(a.heartbeat) is ErrorCode.NONE
                assert a.partitions() == [0, 1] and service.assignment("exp", a.member_id) == {
                    topic_id: frozenset({0, 1})}
                assert await asyncio.to_thread(a.leave) is ErrorCode.NONE
                assert removed == [("exp", b.member_id), ("exp", a.member_id)]
                assert not service.is_member("exp", a.member_id)
                deleted: list[str] = []
                service.on_group_deleted(deleted.append)
                assert await broker.groups.delete_groups(["exp"]) == {"exp": ErrorCode.NONE}
                assert deleted == ["exp"]
            finally:
                w.close()

    asyncio.run(asyncio.wait_for(main(), 120))


JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-secret";')


def test_acls_read_on_the_group_and_describe_on_its_topics(tmp_path: Any) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    b = BrokerProcess(tmp_path / "data", listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                      overrides={"sasl.enabled.mechanisms": "PLAIN",
                                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                                 "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                 "super.users": "User:admin", "offsets.topic.num.partitions": 1}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
        for t in ("open-t", "secret-t"):
            admin.create_topics([NewTopic(t, 1, 1)], request_timeout=30)[t].result(30)

        def allow(rtype: Any, name: str, op: Any) -> None:
            binding = AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", op,
                                 AclPermissionType.ALLOW)
            for f in admin.create_acls([binding], request_timeout=30).values():
                f.result(30)

        w = WireClient(*b.endpoints["PLAINTEXT"])  # User:ANONYMOUS
        try:
            m = ShareMember(w, "acl-g", ["open-t", "secret-t"])
            assert m.heartbeat() is ErrorCode.GROUP_AUTHORIZATION_FAILED
            allow(ResourceType.GROUP, "acl-g", AclOperation.READ)
            allow(ResourceType.TOPIC, "open-t", AclOperation.DESCRIBE)
            _ready(w, "acl-g")
            code = wait_until(lambda: (c := m.heartbeat()) is not ErrorCode.GROUP_AUTHORIZATION_FAILED and c,
                              what="the group ACL in force")
            assert code is ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert m.last.error_message == "The member is not authorized to describe the topics secret-t."
            m.topics = ["open-t"]
            assert m.heartbeat() is ErrorCode.NONE and m.partitions() == [0]
            # ShareGroupDescribe needs DESCRIBE on the group (READ implies it)
            d = _describe(w, "acl-g", "other", ops=True)
            assert d[0].error_code == 0 and d[0].members[0].member_id == m.member_id
            assert d[0].authorized_operations not in (0, -2147483648)
            assert d[1].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        finally:
            w.close()
    finally:
        b.stop()


def test_four_confluent_share_consumers_join_one_group_and_get_assignments(broker: BrokerProcess,
                                                                          wire: WireClient) -> None:
    """librdkafka's ShareConsumer (confluent-kafka 2.16) heartbeats into a Stable group: four of
    them over two partitions, each with one partition, both partitions assigned.  (What they
    fetch is not this test's: ShareFetch is served elsewhere.)"""
    import threading

    import confluent_kafka as ck

    create_topic(broker.bootstrap, "ck-share-t", 2)
    _ready(wire, "ck-share")
    consumers = []
    try:
        for i in range(4):
            c = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "ck-share",
                                  "client.id": f"share-{i}", "socket.timeout.ms": 10000})
            c.subscribe(["ck-share-t"])
            consumers.append(c)

        def joined() -> Any:
            for c in consumers:
                try:
                    c.poll(0.02)
                except ck.KafkaException as exc:
                    assert not exc.args[0].fatal(), exc
            d = _describe(wire, "ck-share")[0]
            if d.error_code != 0 or len(d.members) != 4 or d.group_epoch != d.assignment_epoch:
                return None
            if any(m.member_epoch != d.assignment_epoch or not m.assignment.topic_partitions for m in d.members):
                return None
            return d

        d = wait_until(joined, what="four share consumers with assignments")
        assert d.group_state == "Stable"
        assert sorted(m.client_id for m in d.members) == [f"share-{i}" for i in range(4)]
        parts = [p for m in d.members for tp in m.assignment.topic_partitions for p in tp.partitions]
        assert sorted(parts) == [0, 0, 1, 1]
    finally:
        for c in consumers:
            done = threading.Event()

            def close(c: Any = c, done: threading.Event = done) -> None:
                try:
                    c.close()
                finally:
                    done.set()
            threading.Thread(target=close, daemon=True).start()
            assert done.wait(60), "ShareConsumer.close() did not return"


def test_a_share_group_is_written_in_kafkas_records_and_survives_a_sigkill(tmp_path: Any) -> None:
    """The group's records (types 10-14) are in __consumer_offsets; after a SIGKILL and restart
    the coordinator loads them: the members go on at their epochs with their partitions, and an
    emptied, deleted group stays deleted."""
    from odradek.broker.coordinators.share_records import SHARE_GROUP_RECORD_TYPES

    b = BrokerProcess(tmp_path / "data", overrides={**BROKER_OVERRIDES, "offsets.topic.num.partitions": 1}).start()
    try:
        create_topic(b.bootstrap, "dur-t", 3)
        w = WireClient(b.host, b.port)
        _ready(w, "dur")
        members = [ShareMember(w, "dur", ["dur-t"]) for _ in range(2)]
        for m in members:
            assert m.heartbeat() is ErrorCode.NONE
        _converge(members)
        gone = ShareMember(w, "dur-gone", ["dur-t"])
        assert gone.heartbeat() is ErrorCode.NONE and gone.leave() is ErrorCode.NONE
        assert w.request(DeleteGroupsRequest(groups_names=["dur-gone"]), 2).results[0].error_code == 0
        before = _describe(w, "dur")[0]
        w.close()
        b.kill()
        b.start()
        w = WireClient(b.host, b.port)
        try:
            _ready(w, "dur")

            def loaded() -> Any:
                d = _describe(w, "dur")[0]
                return d if d.error_code == 0 else None
            after = wait_until(loaded, what="the group loaded again")
            assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
                before.group_epoch, before.assignment_epoch, "Stable")
            assert [(m.member_id, m.member_epoch, m.assignment) for m in after.members] == [
                (m.member_id, m.member_epoch, m.assignment) for m in before.members]
            for m in members:
                m.w = w
                held = m.partitions()
                assert m.heartbeat() is ErrorCode.NONE, m.last  # goes on at its epoch: no rejoin
                assert m.last.assignment is None and m.partitions() == held
            assert _describe(w, "dur-gone")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        finally:
            w.close()
        # Kafka's record types, read back from __consumer_offsets
        import confluent_kafka as ck

        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "reader", "enable.auto.commit": False})
        try:
            c.assign([ck.TopicPartition("__consumer_offsets", 0, 0)])
            types: set[int] = set()

            def read() -> bool:
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None and msg.key() is not None:
                    types.add(int.from_bytes(msg.key()[:2], "big"))
                return types >= SHARE_GROUP_RECORD_TYPES
            wait_until(read, what="the share group's record types in __consumer_offsets")
        finally:
            c.close()
    finally:
        if b.running():
            b.stop()
