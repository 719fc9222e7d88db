"""read_committed consumers (librdkafka) against the partition side of transactions.

There is no transaction coordinator yet: the test writes transactional batches and COMMIT/ABORT
markers into the partition leader's log itself, as WriteTxnMarkers will, and checks what a real
client sees through Fetch (last stable offset, aborted transactions) and ListOffsets.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.app import Broker
from odradek.broker.replica import Partition
from odradek.records import BatchBuilder
from tests.broker.inprocess import hosted, running_broker

TOPIC = "txn-reads"


def _append(broker: Broker, p: Partition, values: list[bytes], pid: int = -1, seq: int = -1) -> None:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                     is_transactional=pid >= 0)
    for v in values:
        b.append(int(time.time() * 1000), None, v)
    broker.replicas.append(p, bytearray(b.build()), 1)


def _marker(p: Partition, pid: int, commit: bool) -> None:
    p.log.append_marker(pid, 0, commit, coordinator_epoch=0)
    p.update_high_watermark()


def _consume(bootstrap: str, isolation: str, group: str) -> tuple[list[bytes], int]:
    """Every value the consumer gets before it reaches the end it is allowed to see, and the
    high watermark librdkafka's ListOffsets query reports for its isolation level."""
    c = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": True,
    })
    try:
        c.assign([ck.TopicPartition(TOPIC, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(m.error())
            got.append(m.value())
        else:
            raise AssertionError(f"no end of partition within 30 s ({got})")
        _low, high = c.get_watermark_offsets(ck.TopicPartition(TOPIC, 0), timeout=10, cached=False)
        return got, high
    finally:
        c.close()


def test_read_committed_skips_aborted_and_stops_at_the_open_transaction(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path / "data") as broker:
            bootstrap = f"127.0.0.1:{broker.bound['PLAINTEXT'][1]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                await asyncio.to_thread(f.result, 30)
            p = await hosted(broker, TOPIC)
            _append(broker, p, [b"a0", b"a1"], pid=1000, seq=0)  # 0-1, aborted below
            _append(broker, p, [b"n0"])  # 2
            _append(broker, p, [b"b0", b"b1"], pid=1001, seq=0)  # 3-4, committed below
            _marker(p, 1000, commit=False)  # 5
            _marker(p, 1001, commit=True)  # 6
            _append(broker, p, [b"c0"], pid=1002, seq=0)  # 7, left open
            _append(broker, p, [b"n1"])  # 8
            assert p.log.high_watermark == 9 and p.log.last_stable_offset == 7

            got, high = await asyncio.to_thread(_consume, bootstrap, "read_committed", "rc-1")
            assert got == [b"n0", b"b0", b"b1"]
            assert high == 7  # ListOffsets at read_committed: the last stable offset
            got, high = await asyncio.to_thread(_consume, bootstrap, "read_uncommitted", "ru-1")
            assert got == [b"a0", b"a1", b"n0", b"b0", b"b1", b"c0", b"n1"]
            assert high == 9

            _marker(p, 1002, commit=True)  # 9: the open transaction commits
            got, high = await asyncio.to_thread(_consume, bootstrap, "read_committed", "rc-2")
            assert got == [b"n0", b"b0", b"b1", b"c0", b"n1"]
            assert high == 10

    asyncio.run(main())
