"""Fault scripting on a real broker (issue 44): for each fault kind, a real client sees exactly the
scripted error or delay, clearing restores service, and an injected error writes nothing (the
partition's log is read back).  The broker is the pytest plugin's ``odradek_broker`` (a process in
test mode, driven through its loopback control endpoint)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from odradek.pytest_plugin import OdradekBroker
from odradek.records import iter_batch_headers
from odradek.testing import wait_for

pytest_plugins = ["pytester"]

FAST = {"retry.backoff.ms": 10, "retry.backoff.max.ms": 50, "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 100, "linger.ms": 0}


def _topic(broker: OdradekBroker, partitions: int = 1) -> str:
    return broker.create_topic(f"faults-{uuid.uuid4().hex[:10]}", partitions=partitions)


def _records_in_log(broker: OdradekBroker, topic: str, partition: int = 0) -> int:
    """The records in a partition's log, read from its segment files."""
    total = 0
    for segment in sorted((Path(broker.data_dir) / f"{topic}-{partition}").glob("*.log")):
        total += sum(h.record_count for h in iter_batch_headers(segment.read_bytes()))
    return total


def _produce(broker: OdradekBroker, topic: str, value: bytes = b"v", *, partition: int = 0, timeout: float = 20,
             **config: object) -> tuple[KafkaError | None, int]:
    """Produce one record; (delivery error, offset)."""
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, **FAST, **config})
    got: list[tuple[KafkaError | None, int]] = []
    p.produce(topic, value, partition=partition, on_delivery=lambda e, m: got.append((e, m.offset())))
    p.flush(timeout)
    assert got, "no delivery report"
    return got[0]


def test_fail_gives_the_client_exactly_the_scripted_error_and_writes_nothing(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    faults = odradek_broker.faults
    faults.fail("Produce", "MESSAGE_TOO_LARGE", times=1, topic=topic)  # not retriable: the application sees it
    error, _ = _produce(odradek_broker, topic, retries=0, **{"enable.idempotence": False, "acks": 1})
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert [i["error"] for i in faults.injected] == ["MESSAGE_TOO_LARGE"]
    assert _records_in_log(odradek_broker, topic) == 0  # nothing written
    assert faults.rules == []  # used up: service is back
    error, offset = _produce(odradek_broker, topic, retries=0, **{"enable.idempotence": False, "acks": 1})
    assert error is None and offset == 0
    assert _records_in_log(odradek_broker, topic) == 1


def test_a_topic_scoped_fault_leaves_other_topics_alone(odradek_broker: OdradekBroker) -> None:
    scripted, other = _topic(odradek_broker), _topic(odradek_broker)
    with odradek_broker.faults.fail("Produce", "KAFKA_STORAGE_ERROR", times=None, topic=scripted):
        assert _produce(odradek_broker, other, retries=0)[0] is None
        error, _ = _produce(odradek_broker, scripted, retries=0, **{"enable.idempotence": False})
        assert error is not None and error.code() == KafkaError.KAFKA_STORAGE_ERROR
    # the context manager cleared it
    assert odradek_broker.faults.rules == []
    assert _produce(odradek_broker, scripted, retries=0)[0] is None
    assert _records_in_log(odradek_broker, scripted) == 1


def test_idempotent_retries_across_not_leader_errors_write_once(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    faults = odradek_broker.faults
    faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=3, topic=topic)
    error, offset = _produce(odradek_broker, topic, **{"enable.idempotence": True})
    assert error is None and offset == 0
    assert faults.received("Produce") == 4
    batches = faults.produced(topic)
    assert len(batches) == 4 and {(b["producer_id"], b["base_sequence"]) for b in batches} == {
        (batches[0]["producer_id"], 0)
    }
    assert _records_in_log(odradek_broker, topic) == 1


def test_delay_holds_the_answer_by_the_scripted_time(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    faults = odradek_broker.faults
    fault = faults.delay("Produce", 0.4, times=1, topic=topic)
    t0 = time.monotonic()
    assert _produce(odradek_broker, topic)[0] is None
    assert time.monotonic() - t0 >= 0.4
    assert fault.hits == 1 and [i["kind"] for i in faults.injected] == ["delay"]
    assert _records_in_log(odradek_broker, topic) == 1  # a delayed request is handled


def test_pause_answers_nothing_until_resume(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    faults = odradek_broker.faults
    # No telemetry: librdkafka asks GetTelemetrySubscriptions on its own schedule, and a paused
    # broker holds that too; the broker handles one request per connection at a time (as Kafka
    # does), so a Produce sent behind a held telemetry request would never reach the fault layer.
    p = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers, **FAST, "enable.metrics.push": False})
    p.produce(topic, b"first")
    assert p.flush(10) == 0  # connected, metadata known
    faults.pause()
    got: list[KafkaError | None] = []
    p.produce(topic, b"held", on_delivery=lambda e, m: got.append(e))
    wait_for(lambda: faults.received("Produce") >= 2, 10, "the held produce to arrive")
    assert p.flush(0.3) == 1 and got == []  # accepted, not answered
    assert _records_in_log(odradek_broker, topic) == 1
    faults.resume()
    assert p.flush(10) == 0 and got == [None]
    assert _records_in_log(odradek_broker, topic) == 2


def test_freeze_holds_one_client_while_others_are_served(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    faults = odradek_broker.faults
    frozen = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers, "client.id": "frozen-app", **FAST})
    frozen.produce(topic, b"a")
    assert frozen.flush(10) == 0
    fault = faults.freeze("frozen-app", "Produce")
    frozen.produce(topic, b"b")
    wait_for(lambda: fault.hits == 1, 10, "the frozen client's produce")
    assert _produce(odradek_broker, topic, **{"client.id": "other-app"})[0] is None  # others are served meanwhile
    assert frozen.flush(0.2) == 1
    fault.clear()
    assert frozen.flush(10) == 0
    assert _records_in_log(odradek_broker, topic) == 3


def test_drop_closes_the_clients_connection_and_it_recovers(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    faults = odradek_broker.faults
    faults.drop_next("Produce", client_id="dropped-app")
    error, offset = _produce(odradek_broker, topic, **{"client.id": "dropped-app", "enable.idempotence": True})
    assert error is None and offset == 0
    assert [i["kind"] for i in faults.injected] == ["drop"]
    assert faults.received("Produce") == 2  # the dropped one, then the retry on a new connection
    assert _records_in_log(odradek_broker, topic) == 1
    # and the immediate form: the open connections of a client are closed now
    c = Consumer({"bootstrap.servers": odradek_broker.bootstrap_servers, "group.id": "g-" + topic,
                  "client.id": "closing-app"})
    try:
        c.list_topics(timeout=10)
        # (the client's connections are known by the client id of their requests: poll until one is)
        wait_for(lambda: faults.drop("closing-app") >= 1, 10, "a connection of closing-app to close")
        assert faults.drop("nobody") == 0
        assert topic in c.list_topics(timeout=10).topics  # reconnects
    finally:
        c.close()


def test_an_offline_partition_answers_kafka_storage_error_until_cleared(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker, partitions=2)
    faults = odradek_broker.faults
    fault = faults.offline(topic, 1)
    error, _ = _produce(odradek_broker, topic, partition=1, retries=0, **{"enable.idempotence": False})
    assert error is not None and error.code() == KafkaError.KAFKA_STORAGE_ERROR
    assert _produce(odradek_broker, topic, partition=0, retries=0)[0] is None  # the other partition is online
    c = Consumer({"bootstrap.servers": odradek_broker.bootstrap_servers, "group.id": "g-" + topic})
    try:
        with pytest.raises(KafkaException) as raised:
            c.get_watermark_offsets(TopicPartition(topic, 1), timeout=5)  # ListOffsets
        assert raised.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        fault.clear()
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 0)
    finally:
        c.close()
    assert _produce(odradek_broker, topic, partition=1, retries=0)[0] is None
    assert _records_in_log(odradek_broker, topic, 1) == 1


def test_fence_gives_the_transactional_producer_kafkas_fencing_error(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    tid = "tx-" + topic
    p = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers, "transactional.id": tid, **FAST})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"doomed")
    p.flush(10)
    odradek_broker.faults.fence(tid)
    with pytest.raises(KafkaException) as raised:
        p.commit_transaction(10)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    # the fenced transaction was aborted: a read_committed consumer sees nothing of it
    c = Consumer({"bootstrap.servers": odradek_broker.bootstrap_servers, "group.id": "g-" + topic,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        wait_for(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)[1] == 2, 10,
                 "the abort marker")
        c.assign([TopicPartition(topic, 0, 0)])
        assert c.consume(10, timeout=1) == []
    finally:
        c.close()
    # a new instance of the producer works
    p2 = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers, "transactional.id": tid, **FAST})
    p2.init_transactions(10)
    p2.begin_transaction()
    p2.produce(topic, b"ok")
    p2.commit_transaction(10)


def test_expire_session_removes_the_member_and_it_joins_again(odradek_broker: OdradekBroker) -> None:
    topic = _topic(odradek_broker)
    group = "g-" + topic
    assigned: list[list[TopicPartition]] = []
    c = Consumer({"bootstrap.servers": odradek_broker.bootstrap_servers, "group.id": group,
                  "session.timeout.ms": 30000, "heartbeat.interval.ms": 100})
    try:
        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            assigned.append(parts)
            c.assign(parts)  # eager (the default assignors): not left to confluent-kafka (see rebalanced)

        c.subscribe([topic], on_assign=on_assign, on_revoke=lambda c, _parts: c.unassign())
        wait_for(lambda: c.poll(0.1) is None and bool(assigned), 20, "the first assignment")
        first = c.memberid()
        assert odradek_broker.faults.expire_session(group) == 1
        wait_for(lambda: c.poll(0.1) is None and c.memberid() not in (first, None, ""), 20, "a new membership")
    finally:
        c.close()


@pytest.mark.odradek(faults=[{"kind": "error", "api": "Metadata", "error": "UNKNOWN_SERVER_ERROR", "times": 1}])
def test_marker(odradek_broker: OdradekBroker) -> None:
    rules = odradek_broker.faults.rules
    assert [(r["kind"], r["api"], r["error"], r["times"]) for r in rules] == [
        ("error", "Metadata", "UNKNOWN_SERVER_ERROR", 1)
    ]


def test_each_test_starts_with_no_faults_and_nothing_received(odradek_broker: OdradekBroker) -> None:
    faults = odradek_broker.faults
    assert faults.rules == [] and faults.injected == [] and faults.received() == {}


def test_a_failing_test_reports_the_faults_it_scripted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.odradek(faults=[{"kind": "delay", "api": "Fetch", "delay_ms": 5}])
        def test_fails(odradek_broker_per_test):
            odradek_broker_per_test.faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=2)
            assert False
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*odradek faults (127.0.0.1:*)*",
        "*armed: {*'kind': 'delay'*'api': 'Fetch'*",
        "*armed: {*'kind': 'error'*'api': 'Produce'*NOT_LEADER_OR_FOLLOWER*",
    ])


def test_aiokafka_sees_the_scripted_fetch_delay_and_error(odradek_broker: OdradekBroker) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioPartition

    topic = _topic(odradek_broker)
    assert _produce(odradek_broker, topic)[0] is None
    faults = odradek_broker.faults

    async def scenario() -> tuple[float, int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=odradek_broker.bootstrap_servers, retry_backoff_ms=10)
        await consumer.start()
        try:
            tp = AioPartition(topic, 0)
            faults.fail("Fetch", "NOT_LEADER_OR_FOLLOWER", times=1, topic=topic)
            faults.delay("Fetch", 0.3, times=1, topic=topic)
            t0 = time.monotonic()
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            records = await consumer.getmany(tp, timeout_ms=10_000)
            return time.monotonic() - t0, len(records.get(tp, []))
        finally:
            await consumer.stop()

    elapsed, count = asyncio.run(scenario())
    assert count == 1
    assert [i["kind"] for i in faults.injected][:2] == ["error", "delay"]  # the error, then the delayed retry
    assert elapsed >= 0.3
