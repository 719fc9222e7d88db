"""Idempotent producer: retried batches are answered with their original offsets; sequence and
epoch errors are Kafka's; deduplication survives a restart."""

from __future__ import annotations

from pathlib import Path

from odradek.errors import ErrorCode
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess, WireClient, produce_request

TOPIC = "idem"


def _batch(pid: int, epoch: int, seq: int, n: int = 3, tag: str = "") -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(1_700_000_000_000 + i, f"k{seq + i}".encode(), f"v{seq + i}{tag}".encode())
    return b.build()


def _produce(client: WireClient, records: bytes) -> tuple[int, int]:
    resp = client.request(produce_request(TOPIC, records, acks=-1), 9)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def test_retries_sequences_and_epochs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as broker:
        c = WireClient(broker.host, broker.port)
        from odradek.protocol.messages.create_topics import CreateTopicsRequest

        c.request(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)
                ],
                timeout_ms=5000,
            ),
            5,
        )
        init = c.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
        assert init.error_code == 0 and init.producer_id >= 0 and init.producer_epoch == 0
        pid = init.producer_id
        assert _produce(c, _batch(pid, 0, 0)) == (0, 0)
        assert _produce(c, _batch(pid, 0, 3)) == (0, 3)
        # a retry of the first batch: not written again, original offset
        assert _produce(c, _batch(pid, 0, 0)) == (0, 0)
        assert _produce(c, _batch(pid, 0, 3)) == (0, 3)
        # a gap in the sequence
        assert _produce(c, _batch(pid, 0, 10))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # next in sequence still works, at the next offset
        assert _produce(c, _batch(pid, 0, 6)) == (0, 6)
        # a new epoch must restart at 0; an old epoch is fenced
        assert _produce(c, _batch(pid, 1, 5))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(c, _batch(pid, 1, 0)) == (0, 9)
        assert _produce(c, _batch(pid, 0, 9))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        # an unknown producer that does not start at 0
        assert _produce(c, _batch(pid + 1000, 0, 7))[0] == ErrorCode.UNKNOWN_PRODUCER_ID
        # re-initialising with the current id and epoch (KIP-360's fields) gives a new id at
        # epoch 0, as Kafka does for producers without a transactional id
        again = c.request(
            InitProducerIdRequest(
                transactional_id=None, transaction_timeout_ms=60000, producer_id=pid, producer_epoch=1
            ),
            4,
        )
        assert again.error_code == 0 and again.producer_id != pid and again.producer_epoch == 0
        c.close()
    # deduplication state survives a clean restart (producer snapshot) ...
    with BrokerProcess(data) as broker:
        c = WireClient(broker.host, broker.port)
        assert _produce(c, _batch(pid, 1, 0)) == (0, 9)
        assert _produce(c, _batch(pid, 1, 3)) == (0, 12)
        c.close()
    # ... and a crash (rebuilt from the log's batch headers)
    broker = BrokerProcess(data).start()
    c = WireClient(broker.host, broker.port)
    assert _produce(c, _batch(pid, 1, 6)) == (0, 15)
    c.close()
    broker.kill()
    with BrokerProcess(data) as broker:
        c = WireClient(broker.host, broker.port)
        assert _produce(c, _batch(pid, 1, 6)) == (0, 15)
        assert _produce(c, _batch(pid, 1, 9)) == (0, 18)
        c.close()
