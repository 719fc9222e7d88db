"""Answers outside testing found different from Kafka's, on the wire:

- InitProducerId without a transactional id always hands out a new producer id at epoch 0, as
  Kafka's TransactionCoordinator does, whatever producer id and epoch it is given (it used to
  echo any producer id back with its epoch bumped: a client could take over another producer's
  id); a producer id without an epoch, or an epoch without an id, is INVALID_REQUEST;
- DeleteTopics by topic id does not name the topic to a principal that may not describe it
  (Kafka nulls the name); one that may describe it but not delete it is told the name;
- DeleteTopics before v3 is told INVALID_REQUEST when topic deletion is disabled (the code
  TOPIC_DELETION_DISABLED came with v3).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.errors import ErrorCode
from odradek.protocol.messages.delete_topics import DeleteTopicsRequest
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.testing import BrokerProcess, WireClient, wait_for

T = 30.0


def test_init_producer_id_without_a_transactional_id_always_gives_a_new_id(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        w = WireClient(broker.host, broker.port)
        try:

            def init(version: int, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
                r = w.request(InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60000, producer_id=pid, producer_epoch=epoch
                ), version)
                return int(r.error_code), int(r.producer_id), int(r.producer_epoch)

            code, first, epoch = init(4)
            assert (code, epoch) == (0, 0) and first >= 0
            seen = {first}
            # KIP-360's fields given (v3+): still a new id at epoch 0, never the one given
            for version, pid, given_epoch in ((4, first, 0), (3, first, 5), (4, first + 1000, 7), (4, 1 << 40, 0)):
                code, pid_back, epoch_back = init(version, pid, given_epoch)
                assert (code, epoch_back) == (0, 0), (version, pid, given_epoch)
                assert pid_back not in seen and pid_back != pid, (version, pid, given_epoch, pid_back)
                seen.add(pid_back)
            # one of the two without the other
            assert init(4, first, -1) == (ErrorCode.INVALID_REQUEST, -1, -1)
            assert init(3, -1, 0) == (ErrorCode.INVALID_REQUEST, -1, -1)
            r = w.request(InitProducerIdRequest(
                transactional_id="t", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=3
            ), 4)
            assert r.error_code == ErrorCode.INVALID_REQUEST
            # before v3 the fields do not exist
            code, pid_back, epoch_back = init(2)
            assert (code, epoch_back) == (0, 0) and pid_back not in seen
        finally:
            w.close()


def test_delete_topics_before_v3_does_not_get_a_code_it_does_not_know(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", overrides={"delete.topic.enable": "false"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("kept", 1, 1)], request_timeout=T)["kept"].result(T)
        w = WireClient(broker.host, broker.port)
        try:
            codes = {}
            for version in range(7):
                request = (
                    DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name="kept")], timeout_ms=5000)
                    if version >= 6 else DeleteTopicsRequest(topic_names=["kept"], timeout_ms=5000)
                )
                [res] = w.request(request, version).responses
                codes[version] = res.error_code
        finally:
            w.close()
        assert codes == {v: ErrorCode.INVALID_REQUEST if v < 3 else ErrorCode.TOPIC_DELETION_DISABLED for v in range(7)}
        assert "kept" in admin.list_topics(timeout=T).topics


JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret";'
)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """ACLs on; ``admin`` (a super user) over SASL/PLAIN, ``User:ANONYMOUS`` over PLAINTEXT."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("acl-deviations") / "data",
        listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
        },
    ).start()
    try:
        yield b
    finally:
        b.stop()


def test_delete_topics_by_id_names_the_topic_only_to_who_may_describe_it(acl_broker: BrokerProcess) -> None:
    admin = AdminClient({
        "bootstrap.servers": acl_broker.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret",
    })
    topic = f"secret-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=T)[topic].result(T)

    def described() -> uuid.UUID | None:
        d = admin.describe_topics(TopicCollection([topic]), request_timeout=T)[topic].result(T)
        tid = d.topic_id
        if tid is None:
            return None
        high, low = tid.get_most_significant_bits(), tid.get_least_significant_bits()
        return uuid.UUID(int=((high & (1 << 64) - 1) << 64) | (low & (1 << 64) - 1))

    topic_id = wait_for(described, T, f"the id of {topic}")

    def allow(op: AclOperation) -> None:
        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", op,
                             AclPermissionType.ALLOW)
        for f in admin.create_acls([binding], request_timeout=T).values():
            f.result(T)

    host, port = acl_broker.endpoints["PLAINTEXT"]
    w = WireClient(host, port)  # User:ANONYMOUS
    try:

        def delete_by_id() -> Any:
            r = w.request(DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=5000
            ), 6)
            [res] = r.responses
            return res

        res = delete_by_id()
        assert (res.error_code, res.name, res.topic_id) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id)
        assert topic not in (res.error_message or "")
        allow(AclOperation.DESCRIBE)  # now it may know the name, not delete the topic
        res = wait_for(lambda: next((r for r in [delete_by_id()] if r.name is not None), None), T, "Describe")
        assert (res.error_code, res.name) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic)
        allow(AclOperation.DELETE)
        res = wait_for(lambda: next((r for r in [delete_by_id()] if r.error_code == 0), None), T, "Delete")
        assert (res.name, res.topic_id) == (topic, topic_id)
        # by name and id at once: refused, as Kafka refuses it
        r = w.request(DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name="x", topic_id=uuid.uuid4())], timeout_ms=5000
        ), 6)
        assert r.responses[0].error_code == ErrorCode.INVALID_REQUEST
    finally:
        w.close()
