"""The fast test cluster (odradek.testcluster, the ``odradek_fast_cluster`` fixture): brokers in this
process on the in-process ZooKeeper, and its scripted moves, seen by confluent-kafka."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.pytest_plugin import fast_cluster_lifetime
from odradek.testing import wait_for


@pytest.fixture(scope="module")
def _odradek_fast_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This module's cluster goes with it (the plugin's lives for the session)."""
    yield from fast_cluster_lifetime(request, tmp_path_factory)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def consume_all(cluster: Any, topic: str, count: int, group: str | None = None, **extra: Any) -> list[bytes]:
    consumer = ck.Consumer(cluster.config({
        "group.id": group or unique("reader"), "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed", **extra,
    }))
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        def more() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
            return len(values) >= count
        wait_for(more, 30, f"{count} records of {topic}", interval=0)
        extra_msg = consumer.poll(0.3)
        assert extra_msg is None or extra_msg.error() is not None, "more records than were produced"
    finally:
        consumer.close()
    return values


def test_the_cluster_is_ready_for_replicated_topics_and_acks_all(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    assert cluster.live_ids() == [1, 2, 3]
    assert cluster.controller() in (1, 2, 3)
    described = cluster.admin().describe_cluster(timeout=5)
    assert sorted(b.id for b in described.brokers) == [1, 2, 3]
    assert described.controller_id == cluster.controller()
    topic = cluster.create_topic(unique("ready"), partitions=3, replication_factor=3)
    producer = ck.Producer(cluster.config(acks="all"))
    for i in range(30):
        producer.produce(topic, str(i).encode(), partition=i % 3)
    assert producer.flush(15) == 0
    assert cluster.end_offsets(topic) == {0: 10, 1: 10, 2: 10}
    for p in range(3):
        assert sorted(cluster.isr(topic, p)) == [1, 2, 3]


def test_an_idempotent_producer_loses_and_duplicates_nothing_across_leader_moves(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    topic = cluster.create_topic(unique("idem"), partitions=1, replication_factor=3)
    producer = ck.Producer(cluster.config({
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "retry.backoff.ms": 20,
        "topic.metadata.refresh.interval.ms": 60_000,
    }))
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    first = cluster.leader(topic, 0)
    others = [b for b in cluster.replicas(topic, 0) if b != first]
    sent = 0
    leaders = [first]
    for target in (others[0], others[1], first):
        for _ in range(300):
            producer.produce(topic, str(sent).encode(), partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0)  # batches in flight while the leader moves
        cluster.faults.move_leader(topic, 0, to=target)
        leaders.append(cluster.leader(topic, 0))
    for _ in range(300):
        producer.produce(topic, str(sent).encode(), partition=0, on_delivery=delivered)
        sent += 1
    assert producer.flush(30) == 0
    assert errors == []
    assert leaders == [first, others[0], others[1], first]
    values = consume_all(cluster, topic, sent)
    assert values == [str(i).encode() for i in range(sent)]  # in order, each once
    assert cluster.end_offsets(topic) == {0: sent}


def test_a_group_keeps_its_committed_offsets_across_a_coordinator_move(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    topic = cluster.create_topic(unique("grp"), partitions=2, replication_factor=3)
    group = unique("billing")
    producer = ck.Producer(cluster.config(acks="all"))
    for i in range(40):
        producer.produce(topic, str(i).encode(), partition=i % 2)
    assert producer.flush(15) == 0

    def member() -> ck.Consumer:
        c = ck.Consumer(cluster.config({
            "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
        }))
        c.subscribe([topic])
        return c

    consumer = member()
    seen: list[bytes] = []

    def read(n: int) -> None:
        target = len(seen) + n

        def more() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            return len(seen) >= target
        wait_for(more, 30, f"{target} records", interval=0)

    read(10)
    consumer.commit(asynchronous=False)
    committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(consumer.assignment(), timeout=10)}
    assert sum(max(o, 0) for o in committed.values()) == 10  # -1001: nothing committed there yet

    partition = cluster.faults.group_coordinator_partition(group)
    old = cluster.leader("__consumer_offsets", partition)
    new = cluster.faults.move_group_coordinator(group)
    assert new != old and cluster.leader("__consumer_offsets", partition) == new
    # the new coordinator has loaded the group's offsets: the member reads them back from it (the
    # first ask may reach the old coordinator and get NOT_COORDINATOR, as with Kafka: the client
    # then finds the new one)
    def committed_now() -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(consumer.assignment(), timeout=5)}

    assert wait_for(committed_now, 15, "the committed offsets from the new coordinator") == committed
    read(10)
    consumer.commit(asynchronous=False)
    consumer.close()

    # a new member resumes at the last commit: nothing before it again, nothing lost after it
    consumer = member()
    rest: list[bytes] = []

    def more() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            rest.append(msg.value())
        return len(rest) >= 20
    wait_for(more, 30, "the rest", interval=0)
    consumer.close()
    assert sorted(seen + rest, key=int) == [str(i).encode() for i in range(40)]


def test_a_transaction_commits_after_its_coordinator_moves(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    topic = cluster.create_topic(unique("txn"), partitions=1, replication_factor=3)
    txn_id = unique("tx")
    producer = ck.Producer(cluster.config({"transactional.id": txn_id, "acks": "all"}))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"first")
    producer.commit_transaction(15)
    partition = cluster.faults.transaction_coordinator_partition(txn_id)
    old = cluster.leader("__transaction_state", partition)
    new = cluster.faults.move_transaction_coordinator(txn_id)
    assert new != old
    producer.begin_transaction()
    producer.produce(topic, b"second")
    producer.commit_transaction(30)
    assert consume_all(cluster, topic, 2) == [b"first", b"second"]


def test_killing_the_leader_moves_leadership_and_restore_brings_the_broker_back(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    topic = cluster.create_topic(unique("kill"), partitions=1, replication_factor=3)
    producer = ck.Producer(cluster.config({"enable.idempotence": True, "acks": "all"}))
    for i in range(50):
        producer.produce(topic, str(i).encode())
    assert producer.flush(15) == 0
    victim = cluster.leader(topic, 0)
    cluster.faults.kill_broker(victim)
    assert not cluster.running(victim)
    cluster.wait_until(lambda: cluster.leader(topic, 0) not in (-1, victim), 15, "a new leader")
    assert victim not in cluster.isr(topic, 0)
    for i in range(50, 100):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    assert cluster.faults.active == [f"broker {victim} killed"]
    cluster.faults.restore()
    assert cluster.running(victim) and cluster.faults.active == []
    cluster.wait_until(lambda: victim in cluster.isr(topic, 0), 30, f"broker {victim} back in the ISR")
    assert consume_all(cluster, topic, 100) == [str(i).encode() for i in range(100)]


def test_a_new_controller_is_elected_when_the_controller_stops(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    old = cluster.controller()
    cluster.faults.stop_broker(old)
    cluster.wait_until(lambda: cluster.controller() not in (None, old), 15, "a new controller")
    new = cluster.controller()
    topic = cluster.create_topic(unique("after"), partitions=1, replication_factor=2)
    assert cluster.leader(topic, 0) in cluster.live_ids()
    cluster.faults.restore()
    assert cluster.running(old) and cluster.controller() == new


def test_an_expired_session_loses_the_controllership_and_the_broker_registers_again(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    old = cluster.controller()
    cluster.faults.expire_session(old)
    cluster.wait_until(lambda: cluster.controller() is not None, 15, "a controller")
    cluster.wait_until(lambda: all(set(cluster.brokers[i].backend.image.brokers) == {1, 2, 3} for i in cluster.ids),
                       15, "every broker registered and known again")
    topic = cluster.create_topic(unique("expired"), partitions=3, replication_factor=3)
    assert all(cluster.leader(topic, p) >= 0 for p in range(3))


def test_moving_a_leader_to_a_broker_outside_the_isr_is_refused(odradek_fast_cluster: Any) -> None:
    cluster = odradek_fast_cluster
    topic = cluster.create_topic(unique("narrow"), partitions=1, replication_factor=2)
    outsider = next(b for b in cluster.ids if b not in cluster.replicas(topic, 0))
    with pytest.raises(TimeoutError):
        cluster.faults.move_leader(topic, 0, to=outsider, timeout=0.5)
    assert cluster.faults.active == []
