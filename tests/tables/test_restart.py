"""The table's own record is where a writer resumes: a SIGKILL of the broker while it writes, a
restart, or a second writer of the same partition (an old leader) never puts a record in the table
twice or leaves one out."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka as ck

from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess
from tests.tables.conftest import FAST, OVERRIDES, create_topic, table_arrow, wait_rows, wait_until


def _log_offsets(bootstrap: str, topic: str, partitions: int, count: int) -> set[tuple[int, int]]:
    """Every (partition, offset) in the log, read by a consumer."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        seen: set[tuple[int, int]] = set()

        def all_read() -> bool:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                seen.add((m.partition(), m.offset()))
            return len(seen) >= count

        wait_until(all_read, f"{count} records read back")
        return seen
    finally:
        c.close()


def test_sigkill_mid_stream_and_restart_neither_duplicate_nor_skip(tmp_path: Path) -> None:
    topic = "kv-crash"
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    try:
        create_topic(b.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value", **FAST})
        sent = 0
        for cycle in range(2):
            p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1, "batch.num.messages": 20})
            for i in range(600):
                p.produce(topic, f"c{cycle}-{i}".encode(), partition=i % 2)
            assert p.flush(30) == 0
            sent += 600
            # some of it committed to the table, the rest on its way: kill the writer's broker now
            wait_rows(b.data_dir, topic, sent - 600 + 1)
            b.kill()
            b.start()
        table = wait_rows(b.data_dir, topic, sent)
        in_log = _log_offsets(b.bootstrap, topic, 2, sent)
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
