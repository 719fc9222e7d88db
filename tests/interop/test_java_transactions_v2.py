"""A Kafka 4 Java transactional producer (the kafka-clients jar built from source in
/work/java-kafka, when present) uses transactions v2 (KIP-890 part 2) against Odradek: the broker
finalizes transaction.version 2, so the client sends Produce v12+ without AddPartitionsToTxn,
TxnOffsetCommit v5 without AddOffsetsToTxn and EndTxn v5 (each bumping the epoch); the committed
transactions and their offsets are read, the aborted ones are not."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess

RUN = Path("/work/java-kafka/run.sh")
T = 30.0

pytestmark = pytest.mark.skipif(not RUN.exists(), reason="the Kafka Java client is not built here (/work/java-kafka)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
    }
    with BrokerProcess(tmp_path_factory.mktemp("java-txn") / "data", overrides=overrides) as b:
        yield b


def _read_committed(bootstrap: str, topic: str, partitions: int) -> list[str]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[str] = []
        eof: set[int] = set()
        deadline = time.monotonic() + T
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"no end of {topic}: {got}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                continue
            got.append(m.value().decode())
        return got
    finally:
        c.close()


def test_a_java_4_transactional_producer_uses_transactions_v2(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("java-out", 2, 1), NewTopic("java-offs", 1, 1)]).values():
        f.result(T)
    p = subprocess.run(
        [str(RUN), "TxnProducerScenario", "--bootstrap", broker.bootstrap, "--topic", "java-out",
         "--transactions", "6", "--records", "5", "--pattern", "CCA", "--flush-before-end",
         "--offsets-group", "java-g", "--offsets-topic", "java-offs"],
        capture_output=True, text=True, timeout=240, env={**os.environ, "KAFKA_LOG_LEVEL": "DEBUG"},
    )
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0, (events, p.stderr[-3000:])
    [init] = [e for e in events if e["event"] == "init"]
    assert init["transaction_v2"] is True
    outcomes = [e["outcome"] for e in events if e["event"] == "txn"]
    assert outcomes == ["committed", "committed", "aborted"] * 2

    # the requests it sent, from its DEBUG log: the v2 versions, and none of v1's add requests
    sent: dict[str, set[int]] = {}
    for m in re.finditer(r"apiKey=([A-Z_]+), apiVersion=(\d+)", p.stderr):
        sent.setdefault(m.group(1), set()).add(int(m.group(2)))
    assert min(sent["PRODUCE"]) >= 12 and sent["END_TXN"] == {5} and sent["TXN_OFFSET_COMMIT"] == {5}, sent
    assert "ADD_PARTITIONS_TO_TXN" not in sent and "ADD_OFFSETS_TO_TXN" not in sent, sent

    got = _read_committed(broker.bootstrap, "java-out", 2)
    assert sorted({v.split("-rec")[0] for v in got}) == ["txn-0", "txn-1", "txn-3", "txn-4"]
    assert len(got) == 20
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "java-g"})
    try:
        [tp] = c.committed([ck.TopicPartition("java-offs", 0)], timeout=T)
    finally:
        c.close()
    assert tp.offset == 25  # the last committed transaction's (the sixth, aborted, sent 30)
