"""Kafka's answers where a client sends something the broker refuses, with real clients.

- keyless records sent to a compacted topic: INVALID_RECORD with KIP-467 ``record_errors``
  naming the keyless records, so librdkafka fails those with INVALID_RECORD and the others of
  the batch with _INVALID_DIFFERENT_RECORD (Kafka's LogValidator; librdkafka's
  rd_kafka_msgbatch_handle_Produce_result_record_errors);
- the deprecated topic config ``message.format.version`` accepted with one warning (Kafka 3.x);
- fencing checked before membership (Kafka's GroupCoordinator.validateCurrentMember);
- an INFO line for every refused request, rate-limited.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from odradek.broker import refusals
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey, Message
from odradek.protocol.messages.create_topics import CreateTopicsRequest
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.protocol.messages.heartbeat import HeartbeatRequest
from odradek.protocol.messages.join_group import JoinGroupRequest
from odradek.protocol.messages.leave_group import LeaveGroupRequest
from odradek.protocol.messages.offset_commit import OffsetCommitRequest
from odradek.protocol.messages.sync_group import SyncGroupRequest
from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess, FakeScheduler, WireClient, produce_request, wait_for

NO_KEY = "Compacted topic cannot accept message without key in topic partition {}-0"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("answers")
    with BrokerProcess(
        data,
        log_level="INFO",
        overrides={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1},
    ) as b:
        yield b


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(broker: BrokerProcess, name: str, configs: dict[str, str] | None = None) -> None:
    admin = _admin(broker)  # kept while its futures are pending (destroying it fails them)
    futures = admin.create_topics([NewTopic(name, 1, 1, config=configs or {})], operation_timeout=10)
    futures[name].result(timeout=30)


def _log(broker: BrokerProcess) -> str:
    return "".join(broker.stderr_lines)


def _wire(broker: BrokerProcess, client_id: str = "wire-test") -> WireClient:
    return WireClient(broker.host, broker.port, client_id)


# -- KIP-467 record errors ---------------------------------------------------------------------


def test_confluent_producer_fails_just_the_keyless_records_of_a_batch(broker: BrokerProcess) -> None:
    topic = "compacted-kip467"
    _create(broker, topic, {"cleanup.policy": "compact"})
    reports: dict[int, KafkaError | None] = {}

    def done(i: int) -> Any:
        def cb(err: KafkaError | None, _msg: Any) -> None:
            reports[i] = err

        return cb

    # one partition, a long linger: the five records travel in one batch
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2000, "retries": 0, "acks": "all"})
    keys = [b"k0", None, b"k2", None, b"k4"]
    for i, key in enumerate(keys):
        p.produce(topic, value=b"v%d" % i, key=key, partition=0, on_delivery=done(i))
    assert p.flush(30) == 0
    assert len(reports) == 5
    codes = {i: (e.code() if e is not None else None) for i, e in reports.items()}
    # Kafka refuses the batch as a whole and names the keyless records: librdkafka fails those
    # with INVALID_RECORD and the keyed ones with _INVALID_DIFFERENT_RECORD (which it leaves to the
    # application to retry); before, every record failed with INVALID_RECORD
    assert codes == {
        0: KafkaError._INVALID_DIFFERENT_RECORD,
        1: KafkaError.INVALID_RECORD,
        2: KafkaError._INVALID_DIFFERENT_RECORD,
        3: KafkaError.INVALID_RECORD,
        4: KafkaError._INVALID_DIFFERENT_RECORD,
    }
    # nothing of the batch was written; the keyed records go through when sent again
    retried: list[KafkaError | None] = []
    for i in (0, 2, 4):
        p.produce(topic, value=b"v%d" % i, key=keys[i], partition=0, on_delivery=lambda e, _m: retried.append(e))
    assert p.flush(30) == 0
    assert retried == [None, None, None]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kip467-check"})
    try:
        assert c.get_watermark_offsets(_tp(topic), timeout=10) == (0, 3)
    finally:
        c.close()
    # and the refusal left a line in the broker's log
    wait_for(lambda: re.search(rf"Refused PRODUCE from .*topic={topic} partition=0: INVALID_RECORD \(87\)", _log(broker)),
             10, "the refused produce's log line")


def _tp(topic: str) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0)


def _keyed_batch(keys: list[bytes | None]) -> bytes:
    b = BatchBuilder()
    now = int(time.time() * 1000)
    for i, key in enumerate(keys):
        b.append(now, key, b"value-%d" % i, [])
    return bytes(b.build())


def test_produce_response_lists_the_keyless_records_by_batch_index(broker: BrokerProcess) -> None:
    topic = "compacted-raw"
    _create(broker, topic, {"cleanup.policy": "compact"})
    w = _wire(broker)
    try:
        batch = _keyed_batch([b"a", None, b"c", None, None, b"f"])
        part = w.request(produce_request(topic, batch), 9).responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.INVALID_RECORD
        assert part.base_offset == -1
        assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
            (i, NO_KEY.format(topic)) for i in (1, 3, 4)
        ]
        assert part.error_message.startswith(
            "One or more records have been rejected due to 3 record errors in total, "
            "and only showing the first three errors at most: [RecordError(batchIndex=1, message='Compacted topic"
        )
        # Produce v7 has no record_errors: the error code and nothing else
        old = w.request(produce_request(topic, batch), 7).responses[0].partition_responses[0]
        assert old.error_code == ErrorCode.INVALID_RECORD
        # a batch of keyed records is accepted
        ok = w.request(produce_request(topic, _keyed_batch([b"a", b"b"])), 9).responses[0].partition_responses[0]
        assert (ok.error_code, ok.base_offset, ok.record_errors) == (0, 0, [])
    finally:
        w.close()


# -- deprecated topic configs ------------------------------------------------------------------


def _describe(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(broker)
    return admin.describe_configs([res])[res].result(timeout=30)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_message_format_version_is_accepted_with_one_warning(broker: BrokerProcess) -> None:
    topic = "deprecated-configs"
    admin = _admin(broker)
    # CreateTopics with the deprecated config
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.format.version": "0.10.2"})])[topic].result(30)
    entry = _describe(broker, topic)["message.format.version"]
    assert (entry.value, entry.source) == ("0.10.2", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # AlterConfigs (twice: one warning), then IncrementalAlterConfigs
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"message.format.version": "2.8"})
    for _ in range(2):
        admin.alter_configs([res])[res].result(timeout=30)
    assert _describe(broker, topic)["message.format.version"].value == "2.8"
    inc = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("message.format.version", "3.0-IV1", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([inc])[inc].result(timeout=30)
    assert _describe(broker, topic)["message.format.version"].value == "3.0-IV1"
    # removed: Kafka 3.x's default, from the broker's log.message.format.version
    delete = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("message.format.version", None, incremental_operation=AlterConfigOpType.DELETE)],
    )
    admin.incremental_alter_configs([delete])[delete].result(timeout=30)
    entry = _describe(broker, topic)["message.format.version"]
    assert (entry.value, entry.source) == ("3.0-IV1", ConfigSource.DEFAULT_CONFIG.value)
    # a value Kafka's MetadataVersionValidator refuses is still refused
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"message.format.version": "banana"})
    with pytest.raises(Exception) as failure:
        admin.alter_configs([bad])[bad].result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.INVALID_CONFIG
    # the topic still takes records (in format v2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, b"x")
    assert p.flush(30) == 0
    wait_for(lambda: re.search(r"Refused ALTER_CONFIGS from .*: topic=deprecated-configs configs=message\.format\.version: "
                               r"INVALID_CONFIG \(40\) Invalid value banana for configuration message\.format\.version", _log(broker)), 10, "the refused AlterConfigs' line")
    log = _log(broker)
    for value in ("0.10.2", "2.8", "3.0-IV1"):
        lines = [ln for ln in log.splitlines() if "WARNING" in ln and f"`{value}` is ignored for `{topic}`" in ln]
        assert len(lines) == 1, (value, lines)
    assert "message.format.version" in lines[0]


# -- fencing before membership -----------------------------------------------------------------

_PROTOCOLS = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00")]


def _join(w: WireClient, group: str, instance: str) -> Any:
    req = JoinGroupRequest(
        group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
        group_instance_id=instance, protocol_type="consumer", protocols=_PROTOCOLS,
    )
    # as a client does: FindCoordinator first (which creates __consumer_offsets)
    find = FindCoordinatorRequest(key=group, key_type=0)
    wait_for(lambda: w.request(find, 3).error_code == 0, 30, "the group coordinator")
    # the coordinator may still be loading the new offsets partition: a client retries then
    answers: list[Any] = []

    def joined() -> bool:
        answers.append(w.request(req, 5))
        return bool(answers[-1].error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    wait_for(joined, 30, "the group's offsets partition loaded")
    return answers[-1]


def test_old_static_member_is_fenced_not_unknown(broker: BrokerProcess) -> None:
    group, instance, topic = "static-fencing", "instance-1", "static-fencing-topic"
    _create(broker, topic)
    w = _wire(broker)
    try:
        first = _join(w, group, instance)
        assert first.error_code == 0
        old, gen = first.member_id, first.generation_id
        sync = SyncGroupRequest(group_id=group, generation_id=gen, member_id=old, group_instance_id=instance,
                                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=old, assignment=b"")])
        assert w.request(sync, 3).error_code == 0
        second = _join(w, group, instance)  # a second process with the same group.instance.id
        assert second.error_code == 0 and second.member_id != old
        # the old member: fenced, whatever it sends
        hb = HeartbeatRequest(group_id=group, generation_id=gen, member_id=old, group_instance_id=instance)
        assert w.request(hb, 3).error_code == ErrorCode.FENCED_INSTANCE_ID
        assert w.request(sync, 3).error_code == ErrorCode.FENCED_INSTANCE_ID
        commit = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=gen, member_id=old, group_instance_id=instance,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                name=topic, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)]
            )],
        )
        part = w.request(commit, 7).topics[0].partitions[0]
        assert part.error_code == ErrorCode.FENCED_INSTANCE_ID
        leave = LeaveGroupRequest(group_id=group, members=[LeaveGroupRequest.MemberIdentity(member_id=old, group_instance_id=instance)])
        assert w.request(leave, 3).members[0].error_code == ErrorCode.FENCED_INSTANCE_ID
        # without its instance id the old member id is just unknown (Kafka too)
        anon = HeartbeatRequest(group_id=group, generation_id=gen, member_id=old)
        assert w.request(anon, 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # the new member is untouched
        new = HeartbeatRequest(group_id=group, generation_id=second.generation_id, member_id=second.member_id,
                               group_instance_id=instance)
        assert w.request(new, 3).error_code == 0
    finally:
        w.close()
    wait_for(lambda: re.search(rf"Refused HEARTBEAT from .*group={group} member={old} instance={instance}: "
                               r"FENCED_INSTANCE_ID \(82\)", _log(broker)), 10, "the fenced heartbeat's log line")


def test_confluent_consumer_replaced_by_same_instance_id_gets_a_fatal_fenced_error(broker: BrokerProcess) -> None:
    topic, group = "static-consumers", "static-confluent"
    _create(broker, topic)
    errors: dict[str, list[KafkaError]] = {"first": [], "second": []}

    def consumer(name: str) -> Consumer:
        c = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group, "group.instance.id": "the-instance",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
            "error_cb": lambda e: errors[name].append(e),
        })
        c.subscribe([topic])
        return c

    def assigned(c: Consumer) -> bool:
        c.poll(0.2)
        return bool(c.assignment())

    fatal: list[str] = []
    first = consumer("first")
    second = None
    try:
        wait_for(lambda: assigned(first), 30, "the first consumer's assignment", interval=0)
        second = consumer("second")
        wait_for(lambda: assigned(second), 30, "the second consumer's assignment", interval=0)

        def first_fenced() -> bool:
            m = first.poll(0.2)
            # librdkafka raises the fatal error as a consumer error (code _FATAL, naming the cause)
            if m is not None and m.error() is not None and m.error().code() == KafkaError._FATAL:
                fatal.append(m.error().str())
            return bool(fatal) or any(e.fatal() for e in errors["first"])

        # Kafka answers the replaced member's heartbeat FENCED_INSTANCE_ID, which librdkafka makes
        # a fatal error; UNKNOWN_MEMBER_ID made it rejoin and fence the second consumer in turn
        wait_for(first_fenced, 30, "FENCED_INSTANCE_ID on the first consumer", interval=0)
        assert "Static consumer fenced by other consumer with same group.instance.id" in (fatal + [
            e.str() for e in errors["first"]
        ])[0]
        for _ in range(10):
            second.poll(0.2)
        assert second.assignment()
        assert not [e for e in errors["second"] if e.fatal()]
    finally:
        for c in (first, second):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()


# -- the refusal log ---------------------------------------------------------------------------


def test_refused_create_topics_is_logged(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    future = admin.create_topics([NewTopic("three-replicas", 1, 3)], operation_timeout=10)["three-replicas"]
    with pytest.raises(Exception) as failure:
        future.result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    wait_for(
        lambda: re.search(
            r"INFO odradek\.refusals: Refused CREATE_TOPICS from 127\.0\.0\.1 \(principal=User:ANONYMOUS, "
            r"clientId=rdkafka\): topic=three-replicas: INVALID_REPLICATION_FACTOR \(38\)",
            _log(broker),
        ),
        10,
        "the refused CreateTopics' log line",
    )


def _pipelined(w: WireClient, message: Message, version: int, count: int) -> list[Any]:
    """Send ``count`` copies of a request before reading their answers."""
    for _ in range(count):
        w.send(message, version)
    return [w.receive() for _ in range(count)]


def test_a_flood_of_refused_requests_leaves_a_bounded_number_of_lines(broker: BrokerProcess) -> None:
    req = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="flood", num_partitions=1, replication_factor=3)],
        timeout_ms=5000,
    )
    w = _wire(broker, client_id="flooder")
    t0 = time.monotonic()
    try:
        answers = 0
        for _ in range(20):
            for resp in _pipelined(w, req, 5, 500):
                assert resp.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
                answers += 1
        assert answers == 10_000
    finally:
        w.close()
    elapsed = time.monotonic() - t0
    # the last answer went out after its line was written (the handler logs before it answers)
    lines = [ln for ln in _log(broker).splitlines() if "Refused CREATE_TOPICS" in ln and "clientId=flooder" in ln]
    windows = int(elapsed // refusals.WINDOW_SECONDS) + 1
    assert 1 <= len(lines) <= refusals.LINES_PER_WINDOW * windows, (len(lines), elapsed)
    assert "topic=flood: INVALID_REPLICATION_FACTOR (38)" in lines[0]


def test_refusal_log_reports_what_it_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeScheduler()
    rl = refusals.RefusalLog(lines_per_window=3, window_seconds=10, max_keys=2, timers=fake)
    with caplog.at_level(logging.INFO, logger="odradek.refusals"):
        for _ in range(100):
            rl.refused("10.0.0.1", "c", "PRODUCE", "topic=t partition=0", 87, "bad")
        rl.refused("10.0.0.2", "c", "PRODUCE", "topic=t partition=0", 87, "bad")  # another address: its own budget
        assert len(caplog.records) == 4
        fake.clock.advance(10_000)  # no event loop, so no timer ended the window: the next refusal does
        rl.refused("10.0.0.1", "c", "PRODUCE", "topic=t partition=0", 87, "bad")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[4] == (
        "Suppressed 97 similar refusals of PRODUCE from 10.0.0.1 (INVALID_RECORD (87)) in the last 10s"
    )
    assert messages[5].startswith("Refused PRODUCE from 10.0.0.1 (principal=User:ANONYMOUS, clientId=c): "
                                  "topic=t partition=0: INVALID_RECORD (87) bad")
    # more addresses than keys: the rest share one budget, and the table stays bounded
    with caplog.at_level(logging.INFO, logger="odradek.refusals"):
        caplog.clear()
        for i in range(1000):
            rl.refused(f"10.1.{i // 256}.{i % 256}", "c", "PRODUCE", "", 87, None)
    assert len(caplog.records) <= 3 + 2 * 3
    assert len(rl._windows) <= 3


def test_every_logged_api_has_its_handler_wrapped() -> None:
    import odradek.broker.handlers  # noqa: F401  (registers the handlers)
    from odradek.broker.dispatch import HANDLERS

    for api in refusals.LOGGED_APIS:
        assert hasattr(HANDLERS[api].handler, "__wrapped__"), api.name
    assert not hasattr(HANDLERS[ApiKey.PRODUCE].handler, "__wrapped__")  # Produce reports its own


def test_suppressed_count_is_reported_when_the_window_ends_without_another_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    async def flood() -> None:
        fake = FakeScheduler()
        rl = refusals.RefusalLog(lines_per_window=2, window_seconds=0.05, timers=fake)
        for _ in range(50):
            rl.refused("10.0.0.1", "c", "CREATE_TOPICS", "topic=x", 38, None)
        await fake.advance(49)
        assert rl._windows  # the window is still open
        await fake.advance(1)  # its end, on fake time
        assert not rl._windows

    with caplog.at_level(logging.INFO, logger="odradek.refusals"):
        asyncio.run(flood())
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert messages[2].startswith("Suppressed 48 similar refusals of CREATE_TOPICS from 10.0.0.1")
