"""The coordinators' internal topics (``__consumer_offsets``, ``__transaction_state``) against
what would destroy them, with confluent-kafka's AdminClient and the wire:

- DeleteRecords is refused INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager refuses it ("Cannot
  delete records of internal topic"), and logged; the groups' committed offsets and the
  transactions' state survive a restart;
- DeleteTopics is refused INVALID_REQUEST (Kafka 4's brokers would delete them: Odradek keeps its
  stricter rule);
- CreatePartitions is accepted, as Kafka accepts it, and harmless: groups and transactions are
  placed by ``offsets.topic.num.partitions`` / ``transaction.state.log.num.partitions``, so no
  group moves away from its offsets;
- AddPartitionsToTxn from a client does not add an internal topic's partitions to a transaction
  (TOPIC_AUTHORIZATION_FAILED, as Kafka's KafkaApis leaves internal topics out of the authorized
  ones);
- a broker of a cluster takes the same names for internal from the controller's UpdateMetadata.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from odradek.broker.replication import topic_infos_from_update
from odradek.errors import ErrorCode
from odradek.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.protocol.messages.update_metadata import UpdateMetadataRequest
from odradek.testing import BrokerProcess, WireClient, wait_for

T = 30.0
OVERRIDES = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
}
OFFSETS, TXNS = "__consumer_offsets", "__transaction_state"


def _result(futures: dict[Any, Any]) -> Any:
    [f] = futures.values()
    return f.result(timeout=T)


def _code(futures: dict[Any, Any]) -> int:
    with pytest.raises(ck.KafkaException) as failed:
        _result(futures)
    return int(failed.value.args[0].code())


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = c.committed([ck.TopicPartition(topic, 0)], timeout=T)
        return int(tp.offset)
    finally:
        c.close()


def _init_producer_id(client: WireClient, txn_id: str) -> tuple[int, int]:
    """InitProducerId of ``txn_id`` (retried while its coordinator is not ready)."""

    def init() -> tuple[int, int] | None:
        if client.request(FindCoordinatorRequest(key=txn_id, key_type=1), 1).error_code:
            return None
        r = client.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60000), 1)
        return (int(r.producer_id), int(r.producer_epoch)) if r.error_code == 0 else None

    return wait_for(init, T, f"InitProducerId of {txn_id}")


def test_internal_topics_survive_what_would_destroy_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic, group, txn_id = "kept", "keeper", "keeper-txn"
    with BrokerProcess(data, overrides=OVERRIDES, log_level="INFO") as broker:
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        _result(admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=T))
        p = ck.Producer({"bootstrap.servers": bs})
        for i in range(10):
            p.produce(topic, b"v%d" % i, partition=0)
        p.flush(T)
        c = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
        try:
            c.commit(offsets=[ck.TopicPartition(topic, 0, 7)], asynchronous=False)
        finally:
            c.close()
        wire = WireClient(broker.host, broker.port)
        pid, epoch = _init_producer_id(wire, txn_id)  # the transaction log exists now too

        for internal in (OFFSETS, TXNS):
            # DeleteRecords, up to the high watermark (what wiped the groups' offsets)
            refused = admin.delete_records([ck.TopicPartition(internal, 0, ck.OFFSET_END)], request_timeout=T)
            assert _code(refused) == ck.KafkaError.TOPIC_EXCEPTION == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert _code(admin.delete_topics([internal], request_timeout=T)) == ck.KafkaError.INVALID_REQUEST
            broker.wait_for_log("DeleteRecords", f"cannot delete records of internal topic {internal}")
        # adding partitions is accepted as Kafka accepts it; while the broker runs its groups and
        # transactional ids stay where they are (as Kafka's coordinators, it hashes keys by the
        # partition count it found the topic with; the next start hashes by the new count)
        _result(admin.create_partitions([NewPartitions(OFFSETS, 2)], request_timeout=T))
        _result(admin.create_partitions([NewPartitions(TXNS, 2)], request_timeout=T))
        assert _committed(bs, group, topic) == 7
        assert _init_producer_id(wire, txn_id) == (pid, epoch + 1)  # the id's producer, its epoch bumped
        c2 = ck.Consumer({"bootstrap.servers": bs, "group.id": "reader"})
        try:
            assert c2.get_watermark_offsets(ck.TopicPartition(OFFSETS, 0), timeout=T)[0] == 0
        finally:
            c2.close()
        wire.close()
        del p, admin  # librdkafka's clients go before their broker
    with BrokerProcess(data, overrides=OVERRIDES) as broker:
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=T)
        assert OFFSETS in md.topics and TXNS in md.topics
        # nothing of the internal topics was deleted: their first partitions still hold every record
        c3 = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader"})
        try:
            for internal in (OFFSETS, TXNS):
                low, high = c3.get_watermark_offsets(ck.TopicPartition(internal, 0), timeout=T)
                assert low == 0 and high > 0, (internal, low, high)
        finally:
            c3.close()


def test_a_transaction_does_not_take_internal_partitions(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", overrides=OVERRIDES) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = f"t-{uuid.uuid4().hex[:6]}"
        _result(admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=T))
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
        try:
            c.committed([ck.TopicPartition(topic, 0)], timeout=T)  # creates __consumer_offsets
        finally:
            c.close()
        wire = WireClient(broker.host, broker.port)
        try:
            pid, epoch = _init_producer_id(wire, "adds-internal")
            for version in (0, 3):
                r = wire.request(
                    AddPartitionsToTxnRequest(
                        v3_and_below_transactional_id="adds-internal",
                        v3_and_below_producer_id=pid,
                        v3_and_below_producer_epoch=epoch,
                        v3_and_below_topics=[
                            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=OFFSETS, partitions=[0]),
                            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0]),
                        ],
                    ),
                    version,
                )
                codes = {t.name: [p.partition_error_code for p in t.results_by_partition]
                         for t in r.results_by_topic_v3_and_below}
                assert codes == {
                    OFFSETS: [ErrorCode.TOPIC_AUTHORIZATION_FAILED],
                    topic: [ErrorCode.OPERATION_NOT_ATTEMPTED],
                }, version
        finally:
            wire.close()


def test_a_cluster_broker_knows_every_internal_topic_from_update_metadata() -> None:
    zero = uuid.UUID(int=0)
    request = UpdateMetadataRequest(
        controller_id=1,
        topic_states=[
            UpdateMetadataRequest.UpdateMetadataTopicState(topic_name=name, topic_id=zero, partition_states=[])
            for name in (OFFSETS, TXNS, "plain")
        ],
    )
    _brokers, topics = topic_infos_from_update(request)
    assert {name for name, t in topics.items() if t.internal} == {OFFSETS, TXNS}
    assert not topics["plain"].internal
