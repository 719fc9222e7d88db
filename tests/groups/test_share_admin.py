"""The share-group offset admin APIs over the wire: DescribeShareGroupOffsets (90) v0-1,
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), as Kafka 4.x's group coordinator
answers them: the start offset and lag of each share-partition, a reset that the partition
leader's cached state does not survive, a delete after which the group starts again where
``share.auto.offset.reset`` says, NON_EMPTY_GROUP while a consumer (confluent-kafka's
ShareConsumer) is in the group, and a leader whose cached state was fenced (FENCED_STATE_EPOCH)
reading it again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as AQ
from odradek.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as DQ
from odradek.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as Q
from odradek.protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as IQ
from odradek.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from odradek.testing import BrokerProcess, WireClient
from tests.broker.test_metrics import scrape, value
from tests.groups.group_helpers import wait_until
from tests.groups.test_share_fetch import (
    ACCEPT,
    REJECT,
    RELEASE,
    Member,
    _fetch_until,
    _produce,
    _topic,
    acquired,
    offsets,
)
from tests.groups.wire_group import coordinator_loaded, find_coordinator

T = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-share-admin"), overrides={
        "group.share.heartbeat.interval.ms": 1000, "group.share.min.heartbeat.interval.ms": 1000,
    }, extra_args=["--metrics-port", "0"])
    proc.start()
    w = WireClient(proc.host, proc.port)
    try:
        # as Kafka's admin clients do first: FindCoordinator makes __consumer_offsets
        wait_until(lambda: find_coordinator(w, "any").coordinators[0].error_code == 0
                   and coordinator_loaded(w, "any"), what="the group coordinator")
    finally:
        w.close()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


def _request(broker: BrokerProcess, req: Any, version: int = 0) -> Any:
    w = WireClient(broker.host, broker.port)
    try:
        return w.request(req, version=version, timeout=T)
    finally:
        w.close()


def describe(broker: BrokerProcess, group: str, topics: dict[str, list[int]] | None, version: int = 1) -> Any:
    ts = None if topics is None else [Q.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                                      for t, ps in topics.items()]
    resp = _request(broker, Q(groups=[Q.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=ts)]), version)
    assert len(resp.groups) == 1
    return resp.groups[0]


def parts(group: Any) -> dict[tuple[str, int], Any]:
    return {(t.topic_name, p.partition_index): p for t in group.topics for p in t.partitions}


def alter(broker: BrokerProcess, group: str, topic: str, offsets: dict[int, int]) -> Any:
    return _request(broker, AQ(group_id=group, topics=[AQ.AlterShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=[AQ.AlterShareGroupOffsetsRequestPartition(partition_index=i, start_offset=o)
                                      for i, o in offsets.items()])]))


def delete(broker: BrokerProcess, group: str, *topics: str) -> Any:
    return _request(broker, DQ(group_id=group, topics=[DQ.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                                       for t in topics]))


def _consumed(broker: BrokerProcess, group: str, produce: int, accept: int) -> tuple[str, uuid.UUID]:
    """A topic of ``produce`` records of which ``group`` acquired all and accepted the first
    ``accept`` (its start offset is then ``accept``)."""
    topic, tid = _topic(broker)
    m = Member(broker, group, tid)
    try:
        acquired(m.fetch())  # the share partition starts at the high watermark (latest): 0
        _produce(broker, topic, produce)
        got = offsets(_fetch_until(m, produce))
        assert got == list(range(produce))
        resp = m.fetch({0: [(0, accept - 1, [ACCEPT])]}, epoch=-1)
        assert resp.error_code == 0, resp
    finally:
        m.close()
    return topic, tid


def test_describe_answers_the_start_offset_and_the_lag(broker: BrokerProcess) -> None:
    group = "admin-describe"
    topic, tid = _consumed(broker, group, 10, 4)
    other, _ = _topic(broker)
    g = describe(broker, group, {topic: [0], other: [0], "no-such-topic": [0]})
    assert g.error_code == 0, g
    got = parts(g)
    assert (got[(topic, 0)].start_offset, got[(topic, 0)].lag, got[(topic, 0)].error_code) == (4, 6, 0)
    assert [t.topic_id for t in g.topics if t.topic_name == topic] == [tid]
    # no state: -1, no error
    assert (got[(other, 0)].start_offset, got[(other, 0)].error_code) == (-1, 0)
    # an unknown topic, as Kafka answers it: no offset, no error
    assert (got[("no-such-topic", 0)].start_offset, got[("no-such-topic", 0)].error_code) == (-1, 0)
    # v0 has no lag: the default
    v0 = parts(describe(broker, group, {topic: [0]}, version=0))
    assert v0[(topic, 0)].start_offset == 4
    # a null topic list: every topic the group has state for
    every = parts(describe(broker, group, None))
    assert set(every) == {(topic, 0)}
    assert every[(topic, 0)].start_offset == 4


def test_alter_moves_the_start_offset_and_the_leader_reads_it_again(broker: BrokerProcess) -> None:
    group = "admin-alter"
    topic, tid = _consumed(broker, group, 10, 2)
    resp = alter(broker, group, topic, {0: 7})
    assert resp.error_code == 0, resp
    assert [(p.partition_index, p.error_code) for t in resp.responses for p in t.partitions] == [(0, 0)]
    assert resp.responses[0].topic_id == tid
    assert parts(describe(broker, group, {topic: [0]}))[(topic, 0)].start_offset == 7
    # the leader's cached state (offsets 2-9 acquired, then released on the session's close) is gone:
    # a new member gets 7-9, not 2-9
    m = Member(broker, group, tid)
    try:
        got = offsets(_fetch_until(m, 3))
    finally:
        m.close()
    assert got == [7, 8, 9]
    # unknown topics and partitions
    bad = alter(broker, group, "no-such-topic", {0: 1})
    assert bad.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    bad = alter(broker, group, topic, {5: 1})
    assert bad.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_forgets_the_state_and_the_group_starts_again_at_latest(broker: BrokerProcess) -> None:
    group = "admin-delete"
    topic, tid = _consumed(broker, group, 6, 3)
    resp = delete(broker, group, topic, "no-such-topic")
    assert resp.error_code == 0, resp
    assert {t.topic_name: t.error_code for t in resp.responses} == {
        topic: 0, "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert parts(describe(broker, group, {topic: [0]}))[(topic, 0)].start_offset == -1
    assert parts(describe(broker, group, None)) == {}
    # share.auto.offset.reset=latest: the next fetch starts at the high watermark, 6
    m = Member(broker, group, tid)
    try:
        assert acquired(m.fetch()) == []
        _produce(broker, topic, 1)
        assert offsets(_fetch_until(m, 1)) == [6]
    finally:
        m.close()


def _wait_member(broker: BrokerProcess, group: str, c: Any) -> None:
    deadline = time.monotonic() + T
    while True:
        c.poll(0.2)
        g = _request(broker, ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0]
        if g.error_code == 0 and g.members:
            return
        assert time.monotonic() < deadline, f"the consumer never joined: {g}"


def test_alter_and_delete_refuse_a_group_with_members(broker: BrokerProcess) -> None:
    group = "admin-busy"
    topic, _tid = _consumed(broker, group, 3, 1)
    c = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        _wait_member(broker, group, c)
        a = alter(broker, group, topic, {0: 0})
        assert a.error_code == ErrorCode.NON_EMPTY_GROUP, a
        d = delete(broker, group, topic)
        assert d.error_code == ErrorCode.NON_EMPTY_GROUP, d
        # describe does not need an empty group
        assert describe(broker, group, {topic: [0]}).error_code == 0
    finally:
        c.close()
    assert parts(describe(broker, group, {topic: [0]}))[(topic, 0)].start_offset >= 1


def test_a_consumer_group_id_is_not_a_share_group(broker: BrokerProcess) -> None:
    topic, _ = _topic(broker)
    _produce(broker, topic, 1)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "admin-classic",
                     "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + T
        while c.poll(0.2) is None:
            assert time.monotonic() < deadline
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert alter(broker, "admin-classic", topic, {0: 0}).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert delete(broker, "admin-classic", topic).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_leader_whose_state_epoch_was_fenced_reads_the_state_again(broker: BrokerProcess) -> None:
    """The share coordinator is told a new state (InitializeShareGroupState with a newer state
    epoch, as another broker's AlterShareGroupOffsets would) behind the leader's back: the leader's
    next write is FENCED_STATE_EPOCH, after which it serves the new state."""
    group = "admin-fenced"
    topic, tid = _topic(broker)
    m = Member(broker, group, tid)
    try:
        acquired(m.fetch())
        _produce(broker, topic, 10)
        assert offsets(_fetch_until(m, 10)) == list(range(10))
        init = _request(broker, IQ(group_id=group, topics=[IQ.InitializeStateData(
            topic_id=tid, partitions=[IQ.PartitionData(partition=0, state_epoch=5, start_offset=8)])]))
        assert init.results[0].partitions[0].error_code == 0, init
        # the leader still believes in its own state; its acknowledgement cannot be persisted
        resp = m.fetch({0: [(0, 1, [ACCEPT])]}, epoch=-1)
        codes = {p.acknowledge_error_code for t in resp.responses for p in t.partitions} | {resp.error_code}
        assert codes - {0}, resp
    finally:
        m.close()
    n = Member(broker, group, tid)
    try:
        assert offsets(_fetch_until(n, 2)) == [8, 9]
    finally:
        n.close()


def test_metrics_count_each_groups_records(broker: BrokerProcess) -> None:
    before = scrape(broker.metrics_url)
    total = value(before, "kafka_server_share_group_metrics_records_acquired")
    topic, tid = _topic(broker)
    m = Member(broker, "metrics-a", tid)
    try:
        acquired(m.fetch())
        _produce(broker, topic, 5)
        assert offsets(_fetch_until(m, 5)) == [0, 1, 2, 3, 4]
        resp = m.acknowledge({0: [(0, 1, [ACCEPT]), (2, 2, [RELEASE]), (3, 3, [REJECT])]})
        assert resp.error_code == 0, resp
        m.fetch(epoch=-1)  # the session closes: offset 4 is released
    finally:
        m.close()
    other = Member(broker, "metrics-b", tid)
    try:
        acquired(other.fetch())  # its own share partition, at the high watermark: 5
        _produce(broker, topic, 2)
        assert offsets(_fetch_until(other, 2)) == [5, 6]
    finally:
        other.close()
    got = scrape(broker.metrics_url)
    sg = "kafka_server_share_group_metrics_"
    assert {name: value(got, sg + name, group="metrics-a") for name in (
        "records_acquired", "records_accepted", "records_released", "records_rejected", "records_archived",
    )} == {"records_acquired": 5, "records_accepted": 2, "records_released": 2, "records_rejected": 1,
           "records_archived": 1}
    kafkas = "kafka_server_sharegroupmetrics_recordacknowledgements"
    assert value(got, kafkas, group="metrics-a", acktype="Accept") == 2
    assert value(got, kafkas, group="metrics-a", acktype="Reject") == 1
    # the totals (no group label) count every group's
    assert value(got, sg + "records_acquired", group="metrics-b") == 2
    assert value(got, sg + "records_acquired") == total + 7


def test_acls_describe_needs_describe_alter_and_delete_need_read(tmp_path: Any) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    from odradek.client import Admin

    jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
        f'user_{u}="{u}-secret"' for u in ("admin", "alice")) + ";"
    b = BrokerProcess(tmp_path / "data", listeners="SASL_PLAINTEXT://127.0.0.1:0", overrides={
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
    }).start()
    bootstrap = b.bootstrap_of("SASL_PLAINTEXT")

    def client(user: str) -> Admin:
        return Admin({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                      "sasl.username": user, "sasl.password": f"{user}-secret", "default.api.timeout.ms": 10000})

    ck_admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
    admin, alice = client("admin"), client("alice")

    def allow(rtype: Any, name: str, operation: Any) -> None:
        for f in ck_admin.create_acls([AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:alice", "*",
                                                  operation, AclPermissionType.ALLOW)]).values():
            f.result(timeout=T)

    def code_of(call: Any) -> Any:
        with pytest.raises(KafkaError) as info:
            call()
        return info.value.code

    try:
        for f in ck_admin.create_topics([NewTopic("acl-t", 1, 1)]).values():
            f.result(T)
        admin.alter_share_group_offsets("acl-g", {("acl-t", 0): 0})
        assert admin.describe_share_group_offsets("acl-g", [("acl-t", 0)])[("acl-t", 0)].start_offset == 0
        describe_ = lambda: alice.describe_share_group_offsets("acl-g", [("acl-t", 0)])  # noqa: E731
        alter_ = lambda: alice.alter_share_group_offsets("acl-g", {("acl-t", 0): 0})  # noqa: E731
        delete_ = lambda: alice.delete_share_group_offsets("acl-g", ["acl-t"])  # noqa: E731
        assert code_of(describe_) == ErrorCode.GROUP_AUTHORIZATION_FAILED
        allow(ResourceType.GROUP, "acl-g", AclOperation.DESCRIBE)
        assert code_of(describe_) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow(ResourceType.TOPIC, "acl-t", AclOperation.DESCRIBE)
        assert describe_()[("acl-t", 0)].start_offset == 0
        # DESCRIBE is not READ
        assert code_of(alter_) == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert code_of(delete_) == ErrorCode.GROUP_AUTHORIZATION_FAILED
        allow(ResourceType.GROUP, "acl-g", AclOperation.READ)
        assert code_of(alter_) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert code_of(delete_) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow(ResourceType.TOPIC, "acl-t", AclOperation.READ)
        alice.alter_share_group_offsets("acl-g", {("acl-t", 0): 0})
        alice.delete_share_group_offsets("acl-g", ["acl-t"])
        assert admin.describe_share_group_offsets("acl-g", [("acl-t", 0)])[("acl-t", 0)].start_offset == -1
    finally:
        admin.close()
        alice.close()
        b.stop()


_ALLOWED = {ErrorCode.NONE, ErrorCode.INVALID_GROUP_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST,
            ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.NON_EMPTY_GROUP}


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(
    group=st.sampled_from(["", "admin-fuzz", "admin-fuzz-2"]) | st.text(max_size=40),
    topic=st.sampled_from(["", "no-such-topic", "share-0"]) | st.text(max_size=40),
    partitions=st.lists(st.integers(-2**31, 2**31 - 1) | st.integers(-2, 3), max_size=4),
    offset=st.integers(-2**63, 2**63 - 1) | st.integers(-3, 10),
)
def test_any_offsets_request_gets_kafkas_errors_and_the_broker_goes_on(
    broker: BrokerProcess, group: str, topic: str, partitions: list[int], offset: int,
) -> None:
    resp = alter(broker, group, topic, dict.fromkeys(partitions, offset))
    codes = {resp.error_code} | {p.error_code for t in resp.responses for p in t.partitions}
    assert {ErrorCode.of(c) for c in codes} <= _ALLOWED, resp
    if resp.error_code == 0:
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code == 0:  # a real partition: stored, and described as stored
                    assert p.partition_index >= 0 and offset >= -1
                    got = parts(describe(broker, group, {topic: [p.partition_index]}))[(topic, p.partition_index)]
                    assert got.start_offset == offset
    g = describe(broker, group, {topic: partitions})
    assert {ErrorCode.of(g.error_code)} | {ErrorCode.of(p.error_code) for p in parts(g).values()} <= _ALLOWED, g
    d = delete(broker, group, topic)
    assert {ErrorCode.of(c) for c in {d.error_code} | {t.error_code for t in d.responses}} <= _ALLOWED, d
    # everyone else is still served
    assert describe(broker, "nobody", {"no-such-topic": [0]}).error_code == 0
