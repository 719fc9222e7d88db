"""Admin / AsyncAdmin consumer-group operations against a real broker: list, describe, lag,
committed offsets, alter and delete offsets, delete groups.

confluent-kafka (librdkafka) is the oracle: its consumers make the groups and commit, its
``assignment()`` / ``committed()`` / watermarks and its AdminClient are what the answers are
checked against.  One broker process per module; each test uses topics and groups of its own.
Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.client import (
    Admin,
    AdminError,
    AsyncAdmin,
    GroupDescription,
    NewTopic,
    OffsetAndMetadata,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess

T = TypeVar("T")
OVERRIDES = {"num.partitions": 2, "group.initial.rebalance.delay.ms": 0}
OFFSET_INVALID = -1001  # librdkafka: no committed offset


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("admin-groups") / "data", overrides=OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        _CK.pop(proc.bootstrap, None)  # destroyed with the broker, not left reconnecting to it
        assert proc.stop() == 0, "".join(proc.stderr_lines[-40:])


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(bootstrap_servers=broker.bootstrap, default_api_timeout_ms=20000) as a:
        yield a


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic / group name of this test's own."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{uuid.uuid4().hex[:6]}"


_CK: dict[str, AdminClient] = {}


def _ck(broker: BrokerProcess) -> AdminClient:
    """confluent's AdminClient (kept: librdkafka fails the futures of a client being destroyed)."""
    if broker.bootstrap not in _CK:
        _CK[broker.bootstrap] = AdminClient({"bootstrap.servers": broker.bootstrap})
    return _CK[broker.bootstrap]


def _produce(broker: BrokerProcess, topic: str, counts: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, partition=partition, on_delivery=on_delivery)
    assert p.flush(15) == 0 and failed == []


def _consumer(broker: BrokerProcess, group: str, client_id: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            **extra,
        }
    )


def _wait(what: str, probe: Callable[[], T | None], timeout: float = 30, *, poll: Sequence[Consumer] = ()) -> T:
    """Call ``probe`` until it returns something, polling the consumers meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        for c in poll:
            c.poll(0.05)
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _joined(consumers: list[Consumer], partitions: int) -> None:
    """Poll until the consumers' assignments cover the ``partitions`` partitions between them."""

    def covered() -> bool | None:
        return sum(len(c.assignment()) for c in consumers) == partitions or None

    _wait("the assignment", covered, poll=consumers)


def _state(admin: Admin, group: str, wanted: str, *, poll: Sequence[Consumer] = ()) -> GroupDescription:
    def probe() -> GroupDescription | None:
        d = admin.describe_groups([group])[group]
        return d if d.state == wanted else None

    return _wait(f"group {group} to be {wanted}", probe, poll=poll)


def _listed(admin: Admin, group: str, states: list[str] | None = None) -> str | None:
    """The state of ``group`` as list_groups reports it, None when it is not listed."""
    return next((g.state for g in admin.list_groups(states) if g.group_id == group), None)


def _code(exc: pytest.ExceptionInfo[KafkaError]) -> ErrorCode:
    return exc.value.code


def _ck_committed(broker: BrokerProcess, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = _consumer(broker, group, "oracle")
    try:
        found = c.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        c.close()


# -- the life of a group -------------------------------------------------------------------------


def test_group_lifecycle(broker: BrokerProcess, admin: Admin, name: str) -> None:
    topic, group = name, f"{name}-g"
    admin.create_topics([NewTopic(topic, 2, 1)])
    _produce(broker, topic, {0: 10, 1: 6})
    c = _consumer(broker, group, "lifecycle-client")
    try:
        c.subscribe([topic])
        _joined([c], 2)
        c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 2)], asynchronous=False)

        # listed (by state too) and described while the member is in
        _state(admin, group, "Stable", poll=[c])
        assert _listed(admin, group) == "Stable"
        assert _listed(admin, group, ["Stable"]) == "Stable"
        assert _listed(admin, group, ["stable", "empty"]) == "Stable"  # names in any case
        assert _listed(admin, group, ["Empty"]) is None
        listing = next(g for g in admin.list_groups() if g.group_id == group)
        assert listing.protocol_type == "consumer" and not listing.is_simple_consumer_group
        ck_listed = {g.group_id: g for g in _ck(broker).list_consumer_groups().result(10).valid}
        assert ck_listed[group].state.name == "STABLE"

        desc = admin.describe_groups([group])[group]
        assert (desc.group_id, desc.state, desc.protocol_type, desc.protocol) == (group, "Stable", "consumer", "range")
        assert desc.coordinator is not None and desc.coordinator.id == 0
        assert f"{desc.coordinator.host}:{desc.coordinator.port}" == broker.bootstrap
        [member] = desc.members
        assert member.client_id == "lifecycle-client" and "127.0.0.1" in member.host
        assert member.group_instance_id is None
        assert member.assignment == sorted((tp.topic, tp.partition) for tp in c.assignment())
        assert member.assignment == [(topic, 0), (topic, 1)]
        # librdkafka's AdminClient describes the same member
        ck_desc = _ck(broker).describe_consumer_groups([group])[group].result(10)
        [ck_member] = ck_desc.members
        assert ck_member.member_id == member.member_id and ck_member.client_id == member.client_id
        assert sorted((tp.topic, tp.partition) for tp in ck_member.assignment.topic_partitions) == member.assignment

        # committed offsets and lag, against librdkafka's own view
        offsets = admin.list_group_offsets(group)
        assert {tp: o.offset for tp, o in offsets.items()} == {(topic, 0): 4, (topic, 1): 2}
        assert all(o.metadata == "" for o in offsets.values())
        committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)}
        assert committed == {0: 4, 1: 2}
        assert list(admin.list_group_offsets(group, [(topic, 1)])) == [(topic, 1)]
        lag = admin.group_lag(group)
        assert list(lag) == [(topic, 0), (topic, 1)]
        for p in (0, 1):
            _low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            row = lag[(topic, p)]
            assert (row.committed_offset, row.log_end_offset) == (committed[p], high)
            assert row.lag == high - committed[p]
            assert row.member is not None and row.member.member_id == member.member_id
        assert (lag[(topic, 0)].lag, lag[(topic, 1)].lag) == (6, 4)

        # what an active group refuses
        with pytest.raises(KafkaError) as exc:
            admin.delete_groups([group])
        assert _code(exc) == ErrorCode.NON_EMPTY_GROUP and "active members" in str(exc.value)
        t0 = time.monotonic()
        with pytest.raises(AdminError) as altered:
            admin.alter_group_offsets(group, {(topic, 0): 0, (topic, 1): 0})
        assert time.monotonic() - t0 < 5
        assert altered.value.code == ErrorCode.UNKNOWN_MEMBER_ID and "active members" in str(altered.value)
        assert set(altered.value.errors) == {(topic, 0), (topic, 1)}
        with pytest.raises(KafkaError) as exc:
            admin.delete_group_offsets(group, [(topic, 0)])
        assert _code(exc) == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        assert admin.list_group_offsets(group)[(topic, 0)].offset == 4  # untouched
    finally:
        c.close()

    # the member left: Empty, no members, no owner in the lag
    desc = _state(admin, group, "Empty")
    assert desc.members == [] and desc.protocol_type == "consumer"
    assert _listed(admin, group) == "Empty" and _listed(admin, group, ["Stable"]) is None
    lag = admin.group_lag(group)
    assert [(r.committed_offset, r.log_end_offset, r.lag, r.member) for r in lag.values()] == [(4, 10, 6, None), (2, 6, 4, None)]

    # an Empty group's offsets can be altered; a consumer resumes from them
    admin.alter_group_offsets(group, {(topic, 0): 1, (topic, 1): OffsetAndMetadata(5, "from admin")})
    offsets = admin.list_group_offsets(group)
    assert offsets[(topic, 0)] == OffsetAndMetadata(1, "", -1)
    assert (offsets[(topic, 1)].offset, offsets[(topic, 1)].metadata) == (5, "from admin")
    assert _ck_committed(broker, group, topic, 2) == {0: 1, 1: 5}
    ck_offsets = _ck(broker).list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert {tp.partition: (tp.offset, tp.metadata) for tp in ck_offsets.topic_partitions} == {
        0: (1, None),
        1: (5, "from admin"),
    }
    c2 = _consumer(broker, group, "resumer")
    try:
        c2.subscribe([topic])
        first: dict[int | None, int | None] = {}

        def both_seen() -> bool | None:
            m = c2.poll(0.2)
            if m is not None and m.error() is None:
                first.setdefault(m.partition(), m.offset())
            return len(first) == 2 or None

        _wait("records from both partitions", both_seen)
        assert first == {0: 1, 1: 5}
    finally:
        c2.close()

    # deleting one partition's offset
    _state(admin, group, "Empty")
    admin.delete_group_offsets(group, [(topic, 1)])
    assert list(admin.list_group_offsets(group)) == [(topic, 0)]
    assert _ck_committed(broker, group, topic, 2) == {0: 1, 1: OFFSET_INVALID}
    lag = admin.group_lag(group)
    assert list(lag) == [(topic, 0)] and lag[(topic, 0)].lag == 9

    # deleting the group: gone from the listing, Dead when described, then unknown
    admin.delete_groups([group])
    assert _listed(admin, group) is None
    gone = admin.describe_groups([group])[group]
    assert (gone.state, gone.members) == ("Dead", [])
    assert admin.list_group_offsets(group) == {} and admin.group_lag(group) == {}
    with pytest.raises(KafkaError) as exc:
        admin.delete_groups([group])
    assert _code(exc) == ErrorCode.GROUP_ID_NOT_FOUND and "does not exist" in str(exc.value)
    with pytest.raises(KafkaError) as exc:
        admin.delete_group_offsets(group, [(topic, 0)])
    assert _code(exc) == ErrorCode.GROUP_ID_NOT_FOUND


def test_describe_two_members(broker: BrokerProcess, admin: Admin, name: str) -> None:
    topic, group = name, f"{name}-g"
    admin.create_topics([NewTopic(topic, 4, 1)])
    _produce(broker, topic, {p: 3 + p for p in range(4)})
    consumers = [_consumer(broker, group, f"member-{i}") for i in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])

        def split() -> bool | None:
            sizes = [len(c.assignment()) for c in consumers]
            return sizes == [2, 2] or None

        _wait("both members to get two partitions", split, poll=consumers)
        desc = _state(admin, group, "Stable", poll=consumers)
        by_client = {m.client_id: m for m in desc.members}
        assert sorted(by_client) == ["member-0", "member-1"]
        for i, c in enumerate(consumers):
            assert by_client[f"member-{i}"].assignment == sorted((tp.topic, tp.partition) for tp in c.assignment())
        owned = sorted(tp for m in desc.members for tp in m.assignment)
        assert owned == [(topic, p) for p in range(4)]

        # nothing committed yet: the lag lists the assigned partitions with their owners
        lag = admin.group_lag(group)
        assert list(lag) == [(topic, p) for p in range(4)]
        for p in range(4):
            row = lag[(topic, p)]
            assert (row.committed_offset, row.log_end_offset, row.lag) == (None, 3 + p, None)
            assert row.member is not None and (topic, p) in row.member.assignment
        consumers[0].commit(
            offsets=[TopicPartition(t, p, 1) for t, p in by_client["member-0"].assignment], asynchronous=False
        )
        lag = admin.group_lag(group)
        for t, p in by_client["member-0"].assignment:
            assert (lag[(t, p)].committed_offset, lag[(t, p)].lag) == (1, 3 + p - 1)
    finally:
        for c in consumers:
            c.close()
    _state(admin, group, "Empty")
    admin.delete_groups([group])


def test_several_groups_and_errors(broker: BrokerProcess, admin: Admin, name: str) -> None:
    topic = name
    admin.create_topics([NewTopic(topic, 2, 1)])
    _produce(broker, topic, {0: 5, 1: 5})
    a, b, missing = f"{name}-a", f"{name}-b", f"{name}-missing"

    # alter_group_offsets on a group that does not exist makes a simple (memberless) group
    admin.alter_group_offsets(a, {(topic, 0): 2})
    admin.alter_group_offsets(b, {(topic, 0): 3, (topic, 1): 4})
    listed = {g.group_id: g for g in admin.list_groups()}
    assert listed[a].state == "Empty" and listed[a].is_simple_consumer_group and listed[a].protocol_type == ""
    assert missing not in listed
    ck_listed = {g.group_id for g in _ck(broker).list_consumer_groups().result(10).valid}
    assert {a, b} <= ck_listed
    described = admin.describe_groups([a, b, missing])
    assert list(described) == [a, b, missing]
    assert [described[g].state for g in (a, b, missing)] == ["Empty", "Empty", "Dead"]
    assert described[a].is_simple_consumer_group
    assert [(r.committed_offset, r.lag) for r in admin.group_lag(b).values()] == [(3, 2), (4, 1)]
    assert admin.describe_groups(a)[a].group_id == a  # one group id as a plain string

    # an unknown partition, an invalid group id: final, not retried
    t0 = time.monotonic()
    with pytest.raises(AdminError) as exc:
        admin.alter_group_offsets(a, {(topic, 1): 1, (topic, 9): 1, (f"{topic}-missing", 0): 1})
    assert time.monotonic() - t0 < 5
    assert {tp: e.code for tp, e in exc.value.errors.items()} == {
        (topic, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (f"{topic}-missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert list(exc.value.results) == [(topic, 1)]
    assert admin.list_group_offsets(a)[(topic, 1)].offset == 1
    for call in (
        lambda: admin.describe_groups([""]),
        lambda: admin.delete_groups([""]),
        lambda: admin.list_group_offsets(""),
        lambda: admin.alter_group_offsets("", {(topic, 0): 1}),
    ):
        t0 = time.monotonic()
        with pytest.raises(KafkaError) as err:
            call()
        assert err.value.code == ErrorCode.INVALID_GROUP_ID and time.monotonic() - t0 < 5

    # deleting several: one missing fails, the others go
    with pytest.raises(AdminError) as many:
        admin.delete_groups([a, missing, b])
    assert many.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    assert list(many.value.errors) == [missing] and sorted(many.value.results) == [a, b]
    assert not {a, b} & {g.group_id for g in admin.list_groups()}


def test_async_admin_groups(broker: BrokerProcess, name: str) -> None:
    topic, group = name, f"{name}-g"

    async def main() -> None:
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap}) as admin:
            await admin.create_topics([NewTopic(topic, 3, 1)])
            _produce(broker, topic, {0: 4, 1: 4, 2: 4})
            await admin.alter_group_offsets(group, {(topic, p): p for p in range(3)})
            listed, described, offsets, lag = await asyncio.gather(
                admin.list_groups(["Empty"]),
                admin.describe_groups([group]),
                admin.list_group_offsets(group, [(topic, 0), (topic, 2)]),
                admin.group_lag(group),
            )
            assert group in {g.group_id for g in listed}
            assert described[group].state == "Empty" and described[group].members == []
            assert {tp: o.offset for tp, o in offsets.items()} == {(topic, 0): 0, (topic, 2): 2}
            assert [r.lag for r in lag.values()] == [4, 3, 2]
            await admin.delete_group_offsets(group, [(topic, 0), (topic, 1)])
            assert list(await admin.list_group_offsets(group)) == [(topic, 2)]
            await admin.delete_groups([group])
            assert group not in {g.group_id for g in await admin.list_groups()}
            with pytest.raises(KafkaError) as exc:
                await admin.delete_groups([group])
            assert exc.value.code == ErrorCode.GROUP_ID_NOT_FOUND

    asyncio.run(main())
    assert _ck_committed(broker, group, topic, 3) == {p: OFFSET_INVALID for p in range(3)}


# -- coordinator retries, a fresh broker, an unreachable one -------------------------------------


def test_first_group_operation_on_a_fresh_broker(tmp_path: Path) -> None:
    """Before __consumer_offsets exists there are no groups; the first FindCoordinator makes the
    broker create it, and the operation goes on to the new coordinator."""
    with BrokerProcess(tmp_path / "data", overrides=OVERRIDES) as fresh, Admin(
        bootstrap_servers=fresh.bootstrap, retry_backoff_ms=20
    ) as admin:
        assert admin.list_groups(timeout=20) == []
        admin.create_topics([NewTopic("t", 1, 1)])
        admin.alter_group_offsets("first", {("t", 0): 0}, timeout=20)
        assert admin.list_group_offsets("first") == {("t", 0): OffsetAndMetadata(0, "", -1)}
        assert [g.group_id for g in admin.list_groups()] == ["first"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_unreachable_cluster_times_out() -> None:
    with Admin(bootstrap_servers=f"127.0.0.1:{_free_port()}", retry_backoff_ms=50) as admin:
        for call in (
            lambda: admin.list_groups(timeout=1.0),
            lambda: admin.describe_groups(["g"], timeout=1.0),
            lambda: admin.alter_group_offsets("g", {("t", 0): 1}, timeout=1.0),
        ):
            t0 = time.monotonic()
            with pytest.raises(KafkaError) as exc:
                call()
            assert exc.value.code == ErrorCode.REQUEST_TIMED_OUT and "timed out after 1 s" in str(exc.value)
            assert 0.9 < time.monotonic() - t0 < 5
