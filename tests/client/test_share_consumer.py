"""Odradek's ShareConsumer against a real broker: a share group's members together receive each
record once, RELEASE delivers a record again (delivery count 2), REJECT never, acknowledge() is for
explicit mode only, and close() gives what the consumer held to the others at once.

They need ShareGroupHeartbeat (the group coordinator's share groups): on a broker that does not
advertise it in ApiVersions they are skipped.  The client's state machine (sessions, epochs,
acknowledgement batches, gaps) is tested on scripted brokers in test_share_consumer_state.py."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.client import (
    AcknowledgeType,
    Admin,
    ConfigResource,
    ConfigResourceType,
    IllegalStateError,
    NewTopic,
    ShareConsumer,
    ShareRecord,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from odradek.testing import BrokerProcess, WireClient, wait_for
from tests.groups.group_helpers import BROKER_OVERRIDES, create_topic

TIMEOUT = 30.0
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("share-consumer") / "data", overrides={
        **BROKER_OVERRIDES, "offsets.topic.num.partitions": 1, "group.share.heartbeat.interval.ms": 250,
        "group.share.min.heartbeat.interval.ms": 250,
    })
    proc.start()
    try:
        w = WireClient(proc.host, proc.port)
        try:
            r = w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        finally:
            w.close()
        if ApiKey.SHARE_GROUP_HEARTBEAT not in {k.api_key for k in r.api_keys}:
            pytest.skip("this broker does not serve ShareGroupHeartbeat (share groups on the group coordinator)")
        yield proc
    finally:
        if proc.running():
            code = proc.stop()
            assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


def _group_and_topic(broker: BrokerProcess, partitions: int, **configs: Any) -> tuple[str, str]:
    """A new topic and a new share group reading it from the start."""
    n = next(_names)
    group, topic = f"share-group-{n}", f"share-topic-{n}"
    create_topic(broker.bootstrap, topic, partitions)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.incremental_alter_configs({ConfigResource(ConfigResourceType.GROUP, group): {
            "share.auto.offset.reset": "earliest", **configs}})
    return group, topic


def _produce(broker: BrokerProcess, topic: str, n: int, partitions: int = 1) -> None:
    """``n`` records, one a batch, spread over the partitions."""
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
        p.poll(0)
    assert p.flush(30) == 0


def _consumer(broker: BrokerProcess, group: str, topic: str, **config: Any) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "fetch.max.wait.ms": 100,
                       "retry.backoff.ms": 50, **config})
    c.subscribe([topic])
    return c


def _joined(broker: BrokerProcess, group: str, consumers: list[ShareConsumer], partitions: int) -> None:
    """Every consumer polled until the group is settled (every member at the assignment epoch, as the
    group describes it) and each consumer has the assignment the group gave it: no partition moves
    afterwards (a member that loses a partition releases what it fetched of it)."""
    w = WireClient(broker.host, broker.port)

    def ready() -> bool:
        for c in consumers:
            assert c.poll(0.05) == []  # nothing produced yet
        (d,) = w.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups
        if d.error_code or d.group_epoch != d.assignment_epoch or len(d.members) != len(consumers):
            return False
        described = {m.member_id: (m.member_epoch, {(tp.topic_name, p) for tp in m.assignment.topic_partitions
                                                   for p in tp.partitions}) for m in d.members}
        for c in consumers:
            epoch, assigned = described.get(c.member_id, (-1, set()))
            if epoch != d.assignment_epoch or not assigned or c.assignment() != assigned:
                return False
        return len(set().union(*(c.assignment() for c in consumers))) == partitions

    try:
        wait_for(ready, TIMEOUT, "the group settled")
    finally:
        w.close()


def _poll_until(c: ShareConsumer, want: int) -> list[ShareRecord]:
    got: list[ShareRecord] = []

    def enough() -> bool:
        got.extend(c.poll(0.2))
        return len(got) >= want

    wait_for(enough, TIMEOUT, f"{want} records")
    return got


def test_four_consumers_share_two_partitions_and_receive_each_record_once(broker: BrokerProcess) -> None:
    group, topic = _group_and_topic(broker, 2)
    consumers = [_consumer(broker, group, topic, **{"max.poll.records": 5}) for _ in range(4)]
    try:
        _joined(broker, group, consumers, 2)
        _produce(broker, topic, 80, partitions=2)
        got: list[tuple[int, ShareRecord]] = []

        def all_received() -> bool:
            for i, c in enumerate(consumers):
                records = c.poll(0.1)
                assert len(records) <= 5
                got.extend((i, r) for r in records)
            return len(got) >= 80

        wait_for(all_received, TIMEOUT, "the 80 records")
        seen = [(r.partition, r.offset) for _i, r in got]
        assert len(seen) == len(set(seen)) == 80, "each record exactly once while all accept"
        assert sorted(seen) == sorted((p, o) for p in (0, 1) for o in range(40))
        assert {i for i, _r in got} == {0, 1, 2, 3}, "every member received records"
        assert {r.delivery_count for _i, r in got} == {1}
        assert all(r.value == b"v%d" % (r.offset * 2 + r.partition) for _i, r in got)
        for c in consumers:
            assert all(err is None for err in c.commit_sync(10).values())
    finally:
        for c in consumers:
            c.close()


def test_released_records_are_delivered_again_with_delivery_count_2(broker: BrokerProcess) -> None:
    group, topic = _group_and_topic(broker, 1)
    explicit = {"share.acknowledgement.mode": "explicit"}
    a, b = _consumer(broker, group, topic, **explicit), _consumer(broker, group, topic, **explicit)
    try:
        _joined(broker, group, [a, b], 1)
        _produce(broker, topic, 6)
        first = _poll_until(a, 6)
        assert [(r.offset, r.delivery_count) for r in first] == [(o, 1) for o in range(6)]
        for r in first:
            a.acknowledge(r, AcknowledgeType.RELEASE)
        assert a.commit_sync(10) == {(topic, 0): None}
        again: list[ShareRecord] = []

        def redelivered() -> bool:
            for c in (b, a):
                records = c.poll(0.1)
                for r in records:
                    c.acknowledge(r, AcknowledgeType.ACCEPT)
                again.extend(records)
            return len(again) >= 6

        wait_for(redelivered, TIMEOUT, "the released records delivered again")
        assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(6)]
    finally:
        a.close()
        b.close()


def test_rejected_records_never_come_back(broker: BrokerProcess) -> None:
    group, topic = _group_and_topic(broker, 1)
    a = _consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
    b = _consumer(broker, group, topic)
    try:
        _joined(broker, group, [a, b], 1)
        _produce(broker, topic, 4)
        for r in _poll_until(a, 4):
            a.acknowledge(r, AcknowledgeType.REJECT)
        assert a.commit_sync(10) == {(topic, 0): None}
        # a later record comes; the rejected ones would come before it (the lowest available
        # offsets are delivered first) if they were ever available again
        _produce(broker, topic, 1)
        later: list[ShareRecord] = []

        def marker() -> bool:
            later.extend(b.poll(0.1))
            records = a.poll(0.1)
            for r in records:
                a.acknowledge(r, AcknowledgeType.ACCEPT)
            later.extend(records)
            return any(r.offset == 4 for r in later)

        wait_for(marker, TIMEOUT, "the record after the rejected ones")
        assert [r.offset for r in later] == [4]
    finally:
        a.close()
        b.close()


def test_acknowledge_outside_explicit_mode_raises(broker: BrokerProcess) -> None:
    group, topic = _group_and_topic(broker, 1)
    c = _consumer(broker, group, topic)
    try:
        _joined(broker, group, [c], 1)
        _produce(broker, topic, 1)
        (record,) = _poll_until(c, 1)
        with pytest.raises(IllegalStateError):
            c.acknowledge(record, AcknowledgeType.ACCEPT)
        assert c.commit_sync(10) == {(topic, 0): None}  # implicit: the poll's records are accepted
    finally:
        c.close()
    with pytest.raises(IllegalStateError):
        c.poll(0)


def test_close_releases_what_the_consumer_held_to_the_others_at_once(broker: BrokerProcess) -> None:
    # the records' locks last longer than the test waits: b gets them only because a's close released them
    group, topic = _group_and_topic(broker, 1, **{"share.record.lock.duration.ms": 60000})
    explicit = {"share.acknowledgement.mode": "explicit"}
    a, b = _consumer(broker, group, topic, **explicit), _consumer(broker, group, topic, **explicit)
    try:
        _joined(broker, group, [a, b], 1)
        _produce(broker, topic, 5)
        held = _poll_until(a, 5)
        a.acknowledge(held[0], AcknowledgeType.ACCEPT)  # the rest is not acknowledged when a closes
        a.close()
        got: list[ShareRecord] = []

        def released() -> bool:
            records = b.poll(0.2)
            for r in records:
                b.acknowledge(r)
            got.extend(records)
            return len(got) >= 4

        wait_for(released, TIMEOUT, "the records a held")
        assert sorted((r.offset, r.delivery_count) for r in got) == [(o, 2) for o in range(1, 5)]
    finally:
        a.close()
        b.close()


def test_a_confluent_share_consumer_and_ours_share_one_group(broker: BrokerProcess) -> None:
    """librdkafka's ShareConsumer (confluent-kafka) as the oracle: in one group with ours, the two
    together receive each record once."""
    group, topic = _group_and_topic(broker, 2)
    ours = _consumer(broker, group, topic, **{"max.poll.records": 5})
    theirs = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "max.poll.records": 5})
    theirs.subscribe([topic])
    w = WireClient(broker.host, broker.port)
    try:
        def settled() -> bool:
            assert ours.poll(0.05) == []
            assert [m for m in theirs.poll(0.05) if m.error() is None] == []
            (d,) = w.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups
            return (not d.error_code and len(d.members) == 2 and d.group_epoch == d.assignment_epoch
                    and all(m.member_epoch == d.assignment_epoch for m in d.members) and bool(ours.assignment()))

        wait_for(settled, TIMEOUT, "both members in the group")
        _produce(broker, topic, 100, partitions=2)
        got: list[tuple[str, int | None, int | None]] = []

        def all_received() -> bool:
            got.extend(("ours", r.partition, r.offset) for r in ours.poll(0.1))
            got.extend(("theirs", m.partition(), m.offset()) for m in theirs.poll(0.1) if m.error() is None)
            return len(got) >= 100

        wait_for(all_received, TIMEOUT, "the 100 records")
        seen = [(p, o) for _who, p, o in got]
        assert len(seen) == len(set(seen)) == 100
        assert {who for who, _p, _o in got} == {"ours", "theirs"}
    finally:
        w.close()
        ours.close()
        theirs.close()


def test_in_implicit_mode_close_accepts_the_last_polls_records(broker: BrokerProcess) -> None:
    group, topic = _group_and_topic(broker, 1)
    a, b = _consumer(broker, group, topic), _consumer(broker, group, topic)
    try:
        _joined(broker, group, [a, b], 1)
        _produce(broker, topic, 3)
        assert [r.offset for r in _poll_until(a, 3)] == [0, 1, 2]
        a.close()  # accepts 0-2
        _produce(broker, topic, 1)
        later: list[ShareRecord] = []

        def marker() -> bool:
            later.extend(b.poll(0.1))
            return any(r.offset == 3 for r in later)

        wait_for(marker, TIMEOUT, "the record after the accepted ones")
        assert [(r.offset, r.delivery_count) for r in later] == [(3, 1)]
    finally:
        a.close()
        b.close()


_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
         'user_admin="admin-secret" user_alice="alice-secret";')


def test_over_sasl_with_acls_a_member_without_read_on_the_group_is_refused(tmp_path: Any) -> None:
    """Security settings as the other clients; GROUP_AUTHORIZATION_FAILED raised by poll()."""
    b = BrokerProcess(tmp_path / "data", listeners="SASL_PLAINTEXT://127.0.0.1:0",
                      overrides={**BROKER_OVERRIDES, "sasl.enabled.mechanisms": "PLAIN",
                                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS,
                                 "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                 "super.users": "User:admin", "offsets.topic.num.partitions": 1,
                                 "group.share.heartbeat.interval.ms": 250,
                                 "group.share.min.heartbeat.interval.ms": 250}).start()
    try:
        bootstrap = b.bootstrap_of("SASL_PLAINTEXT")

        def sasl(user: str) -> dict[str, Any]:
            return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.username": user, "sasl.password": f"{user}-secret"}

        with Admin(sasl("admin")) as admin:
            admin.create_topics([NewTopic("secured", 1, 1)])
            admin.incremental_alter_configs({ConfigResource(ConfigResourceType.GROUP, "secured-g"): {
                "share.auto.offset.reset": "earliest"}})
        p = ck.Producer({**sasl("admin"), "linger.ms": 0})
        p.produce("secured", value=b"x")
        assert p.flush(30) == 0
        with ShareConsumer({**sasl("admin"), "group.id": "secured-g", "fetch.max.wait.ms": 100}) as c:
            c.subscribe(["secured"])
            assert [r.value for r in _poll_until(c, 1)] == [b"x"]
        with ShareConsumer({**sasl("alice"), "group.id": "secured-g", "retry.backoff.ms": 50}) as c:
            c.subscribe(["secured"])

            def refused() -> bool:
                try:
                    c.poll(0.1)
                except KafkaError as exc:
                    return exc.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
                return False

            wait_for(refused, TIMEOUT, "GROUP_AUTHORIZATION_FAILED")
    finally:
        b.stop()


def test_renew_keeps_a_record_past_its_lock_and_without_it_the_lock_ends(tmp_path: Any) -> None:
    """A worker still busy with a record renews its lock (RENEW, ShareAcknowledge v2): nobody else
    gets the record while the renewals keep coming, for longer than one lock, and it is accepted
    once at the end; a record held without renewal goes to the other member when its lock ends."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from odradek.client import AcknowledgeType, ShareConsumer

    lock_s = 3.0
    proc = BrokerProcess(tmp_path / "data", overrides={"group.share.min.record.lock.duration.ms": 1000})
    proc.start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([ck.admin.NewTopic("renew", 1, 1)])["renew"].result(30)
        entries = [ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
                   ConfigEntry("share.record.lock.duration.ms", str(int(lock_s * 1000)),
                               incremental_operation=AlterConfigOpType.SET)]
        for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, "renewers",
                                                                   incremental_configs=entries)]).values():
            fut.result(30)
        p = ck.Producer({"bootstrap.servers": proc.bootstrap})
        p.produce("renew", value=b"slow", partition=0)
        assert p.flush(30) == 0
        config = {"bootstrap.servers": proc.bootstrap, "group.id": "renewers", "share.acknowledgement.mode": "explicit"}
        with ShareConsumer(config) as busy, ShareConsumer(config) as other:
            busy.subscribe(["renew"])
            other.subscribe(["renew"])
            held: list[Any] = []
            deadline = time.monotonic() + 30
            while not held and time.monotonic() < deadline:
                held = busy.poll(0.5)
            assert [r.value for r in held] == [b"slow"]
            record = held[0]
            stolen: list[Any] = []
            renewed_until = time.monotonic() + lock_s * 1.5
            while time.monotonic() < renewed_until:
                busy.acknowledge(record, AcknowledgeType.RENEW)
                assert busy.commit_sync(10) == {("renew", 0): None}
                end = time.monotonic() + lock_s / 3
                while time.monotonic() < end:
                    stolen += other.poll(0.2)
            assert stolen == [], "the renewed record went to another member"
            busy.acknowledge(record, AcknowledgeType.ACCEPT)
            assert busy.commit_sync(10) == {("renew", 0): None}
            # without renewal: held by `busy`, the record is the other's once the lock ends
            p.produce("renew", value=b"held", partition=0)
            assert p.flush(30) == 0
            held = []
            deadline = time.monotonic() + 30
            while not held and time.monotonic() < deadline:
                held = busy.poll(0.5)
            assert [r.value for r in held] == [b"held"]
            deadline = time.monotonic() + lock_s * 5
            while not stolen and time.monotonic() < deadline:
                stolen = other.poll(0.2)
            assert [(r.value, r.delivery_count) for r in stolen] == [(b"held", 2)]
            for r in stolen:
                other.acknowledge(r, AcknowledgeType.ACCEPT)
            other.commit_sync(10)
    finally:
        proc.stop()
