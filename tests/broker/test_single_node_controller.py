"""The controller's admin APIs on a single-node broker (no ZooKeeper), which names itself the
controller in Metadata and DescribeCluster: ElectLeaders, ListPartitionReassignments and
AlterPartitionReassignments answer as Kafka's controller would on a one-broker cluster, through real
clients (confluent-kafka / librdkafka and kafka-python)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.errors import ErrorCode
from odradek.testing import BrokerProcess

TOPIC = "single"


def _code(err: object) -> int | None:
    """The error code of a per-partition result (a KafkaError, or a KafkaException wrapping one)."""
    if isinstance(err, KafkaException):
        err = err.args[0]
    return err.code() if isinstance(err, KafkaError) else None


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("single-node-controller")
    with BrokerProcess(data, broker_id=1) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(20)
        yield b


def test_the_broker_names_itself_the_controller(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_cluster(request_timeout=10).result(20)
    assert described.controller is not None and described.controller.id == 1


def test_preferred_election_is_not_needed_per_partition(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tps = [TopicPartition(TOPIC, p) for p in range(3)]
    results = admin.elect_leaders(ElectionType.PREFERRED, tps).result(30)
    assert {(tp.topic, tp.partition) for tp in results} == {(TOPIC, p) for p in range(3)}
    for tp, err in results.items():
        assert _code(err) == ErrorCode.ELECTION_NOT_NEEDED, (tp, err)


def test_election_over_all_partitions_and_unknown_ones(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # every partition: Kafka reports only those that needed an election, so none
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}
    unclean = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(TOPIC, 0)]).result(30)
    assert [_code(e) for e in unclean.values()] == [ErrorCode.ELECTION_NOT_NEEDED]
    unknown = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 7)]).result(30)
    assert [_code(e) for e in unknown.values()] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_reassignments_listed_and_refused_clearly(broker: BrokerProcess) -> None:
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        assert admin.list_partition_reassignments(timeout_ms=5000) == {}
        assert admin.list_partition_reassignments({TOPIC: [0, 1]}, timeout_ms=5000) == {}
        results = admin.alter_partition_reassignments(
            {KTP(TOPIC, 0): [1], KTP(TOPIC, 1): [1, 2], KTP(TOPIC, 2): None}, timeout_ms=5000
        )
        assert results[KTP(TOPIC, 0)] is None  # already the replicas: done
        assert results[KTP(TOPIC, 1)] is InvalidReplicationAssignmentError
        assert results[KTP(TOPIC, 2)] is NoReassignmentInProgressError
    finally:
        admin.close()
