"""Issue 16 fault 5: damaged files are never skipped or truncated in silence.

Every case (flipped bytes or an impossible batch length in a sealed segment, a truncated
``.index``, a deleted checkpoint file) times every stop (clean; unclean with no checkpoint, so that
recovery validates the whole log; unclean after checkpoints, so that recovery starts at the
recovery point) ends in one of three outcomes, which the table below states per case:

- ``served``: every offset reads back the records written;
- ``corrupt``: reads serve correct data up to the damaged batch, whose read raises
  CorruptSegmentError (CORRUPT_MESSAGE to a fetcher), never the next segment's data;
- ``truncated``: recovery truncated at the damaged batch with a WARN line naming the partition,
  the segment, the position, what was wrong and the bytes and records dropped.

The last test runs one case through a real broker and a raw Fetch: error code 2.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

import pytest

from odradek.errors import ErrorCode
from odradek.records import iter_batch_headers, read_batches
from odradek.storage import CorruptSegmentError, Log, LogManager
from odradek.storage.checkpoint import LEADER_EPOCH, LOG_START_OFFSET, RECOVERY_POINT, REPLICATION_OFFSET
from odradek.storage.manager import CLEAN_SHUTDOWN_FILE
from tests.storage.storage_helpers import TS0, v2_batch

CONFIG = {"segment.bytes": 16_000, "index.interval.bytes": 500}
TOPIC = "m"
BATCHES, PER_BATCH = 300, 10
RECORDS = BATCHES * PER_BATCH


def _key(offset: int) -> bytes:
    return f"k{offset // PER_BATCH}-{offset % PER_BATCH}".encode()


def _write(data_dir: Path, stop: str) -> None:
    manager = LogManager([data_dir], CONFIG)
    log = manager.get_or_create(TOPIC, 0)
    for i in range(BATCHES):
        log.append(v2_batch(PER_BATCH, ts=TS0 + i, value=b"v" * 40, tag=f"{i}-"), leader_epoch=i // 100)
    log.advance_high_watermark(log.log_end_offset)
    assert len(log.segments) >= 6
    if stop == "clean":
        manager.shutdown()
    elif stop == "unclean-from-zero":
        manager.close()  # no checkpoints, no marker: recovery validates every segment
    else:  # unclean after checkpoints: recovery starts at the recovery point
        manager.shutdown()
        (data_dir / CLEAN_SHUTDOWN_FILE).unlink()


def _part(data_dir: Path) -> Path:
    return data_dir / f"{TOPIC}-0"


def _sealed_batch(data_dir: Path, which: int = 2) -> tuple[Path, int, int]:
    """(segment file, position, first offset) of a batch in the middle of the third (or
    ``which``) segment."""
    seg = sorted(_part(data_dir).glob("*.log"))[which]
    headers = list(iter_batch_headers(seg.read_bytes()))
    h = headers[len(headers) // 2]
    return seg, h.position, h.base_offset


def _flip_bytes(data_dir: Path) -> int:
    seg, position, first = _sealed_batch(data_dir)
    data = bytearray(seg.read_bytes())
    for i in range(position + 70, position + 78):  # inside the records, after the v2 header
        data[i] ^= 0xFF
    seg.write_bytes(bytes(data))
    return first


def _flip_bytes_in_the_active_segment(data_dir: Path) -> int:
    seg, position, first = _sealed_batch(data_dir, -1)
    data = bytearray(seg.read_bytes())
    for i in range(position + 70, position + 78):
        data[i] ^= 0xFF
    seg.write_bytes(bytes(data))
    return first


def _impossible_length(data_dir: Path) -> int:
    seg, position, first = _sealed_batch(data_dir)
    data = bytearray(seg.read_bytes())
    struct.pack_into(">i", data, position + 8, 0x7FFFFFFF)
    seg.write_bytes(bytes(data))
    return first


def _index_cut_mid_entry(data_dir: Path) -> None:
    index = sorted(_part(data_dir).glob("*.index"))[2]
    data = index.read_bytes()
    assert len(data) >= 16
    index.write_bytes(data[:-3])


def _index_cut_to_half(data_dir: Path) -> None:
    index = sorted(_part(data_dir).glob("*.index"))[2]
    data = index.read_bytes()
    index.write_bytes(data[: (len(data) // 16) * 8])


def _delete(name: str) -> Any:
    def damage(data_dir: Path) -> None:
        path = _part(data_dir) / name if name == LEADER_EPOCH else data_dir / name
        path.unlink(missing_ok=True)

    return damage


DAMAGE = {
    "flipped-bytes": _flip_bytes,
    "flipped-bytes-active": _flip_bytes_in_the_active_segment,
    "impossible-length": _impossible_length,
    "index-cut-mid-entry": _index_cut_mid_entry,
    "index-cut-to-half": _index_cut_to_half,
    "no-recovery-point": _delete(RECOVERY_POINT),
    "no-log-start": _delete(LOG_START_OFFSET),
    "no-replication-offset": _delete(REPLICATION_OFFSET),
    "no-leader-epoch": _delete(LEADER_EPOCH),
}
STOPS = ("clean", "unclean-from-zero", "unclean-from-recovery-point")
# damage in a sealed segment: recovery that validates it truncates (loudly); otherwise reads
# refuse the damaged batch
EXPECTED = {
    ("flipped-bytes", "clean"): "corrupt",
    ("flipped-bytes", "unclean-from-zero"): "truncated",
    ("flipped-bytes", "unclean-from-recovery-point"): "corrupt",
    ("flipped-bytes-active", "clean"): "corrupt",  # found at start-up, CRC-checked when read
    ("flipped-bytes-active", "unclean-from-zero"): "truncated",
    ("flipped-bytes-active", "unclean-from-recovery-point"): "truncated",  # the last segment is recovered
    ("impossible-length", "clean"): "corrupt",
    ("impossible-length", "unclean-from-zero"): "truncated",
    ("impossible-length", "unclean-from-recovery-point"): "corrupt",
}


def _walk(log: Log) -> tuple[int, int | None]:
    """Read every offset like a consumer; returns (next offset, offset whose read was refused).
    Asserts that nothing is skipped and every record is the one written there."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        try:
            data = log.read(offset, 1 << 16).to_bytes()
        except CorruptSegmentError as exc:
            assert exc.code == ErrorCode.CORRUPT_MESSAGE
            return offset, offset
        batches = list(read_batches(data, verify_crc=True))
        assert batches, f"nothing returned at {offset}"
        assert batches[0].base_offset <= offset <= batches[0].last_offset, f"offset {offset} skipped"
        for b in batches:
            for r in b.records:
                if r.offset >= offset:
                    assert r.offset == offset, f"offsets {offset}..{r.offset - 1} skipped"
                    assert r.key == _key(offset)
                    offset += 1
    return offset, None


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_served_refused_or_truncated_loudly(
    tmp_path: Path, damage: str, stop: str, caplog: pytest.LogCaptureFixture
) -> None:
    _write(tmp_path, stop)
    bad_offset = DAMAGE[damage](tmp_path)
    expected = EXPECTED.get((damage, stop), "served")
    with caplog.at_level(logging.WARNING, logger="odradek.storage"):
        manager = LogManager([tmp_path], CONFIG)
    log = manager.get(TOPIC, 0)
    assert log is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    try:
        end, refused = _walk(log)
        if expected == "served":
            assert (log.log_start_offset, end, refused) == (0, RECORDS, None)
            if damage == "index-cut-mid-entry":
                assert any("rebuilding the indexes" in w and f"{TOPIC}-0" in w for w in warnings), warnings
            return
        assert isinstance(bad_offset, int)
        if expected == "corrupt":
            assert refused == bad_offset, (refused, bad_offset)
            assert log.log_end_offset == RECORDS  # nothing dropped
        else:
            assert refused is None and end == log.log_end_offset == bad_offset
            active = damage.endswith("-active")
            seg_name = sorted(_part(tmp_path).glob("*.log"))[-1 if active else 2].name
            lines = [w for w in warnings if "truncated" in w]
            assert len(lines) == 1, warnings
            line = lines[0]
            assert f"partition {TOPIC}-0" in line and seg_name in line and f"offset {bad_offset}" in line
            assert ("CRC mismatch" if damage.startswith("flipped") else "bad batch length 2147483647") in line
            assert active or ("deleted" in line and "later segment" in line)
            assert f"{RECORDS - bad_offset} records are gone, offsets {bad_offset} to {RECORDS - 1}" in line
    finally:
        manager.shutdown()


def test_fetch_of_an_impossible_batch_length_answers_corrupt_message(tmp_path: Path) -> None:
    """End to end: a broker serving the log after a clean stop answers CORRUPT_MESSAGE (2) at the
    damaged batch, and the data before it normally; it does not skip to the next segment."""
    from odradek.protocol.messages.fetch import FetchRequest
    from odradek.testing import BrokerProcess, WireClient

    data_dir = tmp_path / "data"
    with BrokerProcess(data_dir, overrides={"log.segment.bytes": 16_000}) as broker:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": PER_BATCH})
        for i in range(RECORDS):
            p.produce(TOPIC, key=_key(i), value=b"v" * 40, partition=0)
            if i % PER_BATCH == PER_BATCH - 1:
                p.flush(10)
        assert p.flush(10) == 0
    bad = _impossible_length(data_dir)

    def fetch(client: WireClient, offset: int) -> Any:
        req = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
            topics=[FetchRequest.FetchTopic(
                topic=TOPIC,
                partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)],
            )],
        )
        return client.request(req, 4).responses[0].partitions[0]

    with BrokerProcess(data_dir, overrides={"log.segment.bytes": 16_000}) as broker:
        client = WireClient(broker.host, broker.port)
        try:
            offset = 0
            for _ in range(RECORDS):
                part = fetch(client, offset)
                if part.error_code:
                    break
                batches = list(read_batches(bytes(part.records or b""), verify_crc=True))
                assert batches and batches[0].base_offset <= offset
                offset = batches[-1].last_offset + 1
            assert part.error_code == ErrorCode.CORRUPT_MESSAGE
            assert offset == bad
            assert fetch(client, bad + 1).error_code == ErrorCode.CORRUPT_MESSAGE  # same batch
        finally:
            client.close()


def test_recovery_after_kill_9_truncates_a_damaged_sealed_segment_with_a_warn_line(tmp_path: Path) -> None:
    """End to end: a broker killed with SIGKILL, flipped bytes in a sealed segment and no recovery
    point checkpoint (so recovery validates the whole log): the restarted broker says on stderr
    what it truncated, and serves everything before the damage."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from odradek.testing import BrokerProcess

    data_dir = tmp_path / "data"
    overrides = {"log.segment.bytes": 16_000}
    broker = BrokerProcess(data_dir, overrides=overrides).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": PER_BATCH})
        for i in range(RECORDS):
            p.produce(TOPIC, key=_key(i), value=b"v" * 40, partition=0)
            if i % PER_BATCH == PER_BATCH - 1:
                p.flush(10)
        assert p.flush(10) == 0
    finally:
        broker.kill()
    bad = _flip_bytes(data_dir)
    (data_dir / RECOVERY_POINT).unlink(missing_ok=True)
    with BrokerProcess(data_dir, overrides=overrides) as again:
        c = Consumer({"bootstrap.servers": again.bootstrap, "group.id": "matrix", "enable.partition.eof": True})
        c.assign([TopicPartition(TOPIC, 0, 0)])
        keys: list[bytes] = []
        for _ in range(2000):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                break  # end of the partition
            keys.append(m.key())
        c.close()
        assert keys == [_key(o) for o in range(bad)]
    lines = [line for line in again.stderr_lines if "WARNING" in line and "truncated" in line]
    assert len(lines) == 1, again.stderr_lines
    assert f"partition {TOPIC}-0" in lines[0] and "CRC mismatch" in lines[0]
    assert f"offsets {bad} to {RECORDS - 1}" in lines[0]
