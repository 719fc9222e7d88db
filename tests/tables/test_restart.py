"""The table's own record is where a writer resumes: a SIGKILL of the broker while it writes, a
restart, or a second writer of the same partition (an old leader) never puts a record in the table
twice or leaves one out."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import confluent_kafka as ck

from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess
from tests.tables.conftest import FAST, OVERRIDES, create_topic, table_arrow, wait_rows, wait_until


def _log_offsets(bootstrap: str, topic: str, partitions: int) -> set[tuple[int, int]]:
    """Every (partition, offset) in the log up to its high watermark, read by a consumer."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)}
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        seen: set[tuple[int, int]] = set()
        last = dict.fromkeys(range(partitions), -1)

        def all_read() -> bool:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                seen.add((m.partition(), m.offset()))
                last[m.partition()] = m.offset()
            return all(last[p] + 1 >= ends[p] for p in range(partitions))

        wait_until(all_read, f"the log read to its end {ends}")
        return seen
    finally:
        c.close()


def test_sigkill_mid_stream_and_restart_neither_duplicate_nor_skip(tmp_path: Path) -> None:
    topic = "kv-crash"
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    stop = threading.Event()
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1, "message.timeout.ms": 60000,
                            "enable.idempotence": True})
    acked: list[int] = []

    def produce() -> None:  # all the while: the broker is killed while records arrive and are written
        i = 0
        while not stop.is_set():
            producer.produce(topic, f"r{i}".encode(), partition=i % 2,
                             on_delivery=lambda err, _m: acked.append(1) if err is None else None)
            producer.poll(0)
            i += 1
            time.sleep(0.0005)

    try:
        create_topic(b.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value", **FAST})
        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            for _cycle in range(2):
                # some of the stream in the table, more arriving: kill the writer's broker now
                seen = table_arrow(b.data_dir, topic).num_rows if _cycle else 0
                wait_rows(b.data_dir, topic, seen + 200)
                b.kill()
                b.start()
            wait_until(lambda: len(acked) > 2000, "records acknowledged after the restarts")
        finally:
            stop.set()
            thread.join(10)
        assert producer.flush(60) == 0
        in_log = _log_offsets(b.bootstrap, topic, 2)
        table = wait_rows(b.data_dir, topic, len(in_log))
    finally:
        b.stop()
    pairs = list(zip(table["partition"].to_pylist(), table["offset"].to_pylist()))
    assert len(pairs) == len(set(pairs))  # nothing twice
    assert set(pairs) == in_log  # nothing skipped


class _Log:
    """A partition's log in memory, as a writer reads it."""

    topic_id = None

    def __init__(self) -> None:
        self.data = bytearray()
        self.end = 0

    def add(self, n: int) -> None:
        b = BatchBuilder(base_offset=self.end)
        for i in range(n):
            b.append(1_700_000_000_000 + self.end + i, None, f"v{self.end + i}".encode())
        self.data += b.build()
        self.end += n

    def bounds(self) -> tuple[int, int, int]:
        return 0, self.end, self.end

    def read(self, offset: int, max_bytes: int) -> bytes:
        return bytes(self.data)

    def aborted(self, start: int, upper: int) -> list[tuple[int, int]]:
        return []


def test_an_old_leader_finishing_its_commit_writes_nothing_twice(tmp_path: Path) -> None:
    from odradek.config import BrokerConfig
    from odradek.settings import settings_from
    from odradek.tables.catalog import open_catalog as broker_catalog
    from odradek.tables.writer import PartitionWriter

    settings = settings_from(BrokerConfig.load(None, [], {"log.dirs": str(tmp_path)}, env={})).tables
    log = _Log()
    log.add(10)
    old = PartitionWriter(broker_catalog(settings, tmp_path), "odradek", "t", 0, "key_value", "none", log)
    new = PartitionWriter(broker_catalog(settings, tmp_path), "odradek", "t", 0, "key_value", "none", log)
    assert old.open() and new.open()  # both start from the table's record: nothing yet
    assert new.step().written == 10
    log.add(5)
    lost = old.step()  # read 0-15, but the table holds 0-10 now: nothing of it is appended
    assert lost.written == 0 and old.next == 10
    assert old.step().written == 5  # from the table's record on
    assert new.step().written == 0  # and the new leader sees the old one's commit the same way
    log.add(3)
    assert new.step().written == 3
    offsets = table_arrow(tmp_path, "t")["offset"].to_pylist()
    assert sorted(offsets) == list(range(18))
