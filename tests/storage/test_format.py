"""On-disk formats: segment names, ``.log``, ``.index``, ``.timeindex``, checkpoints, metadata files.

Every file is parsed by hand (``storage_helpers.parse_*``), not through ``odradek.storage``.
"""

from __future__ import annotations

import base64
import re
import struct
import uuid
from pathlib import Path

from odradek._clock import FakeClock
from odradek.records import Compression
from odradek.storage import LogManager
from odradek.storage.manager import write_meta_properties

from .storage_helpers import (
    SEGMENT_RE,
    TS0,
    base_offsets,
    expected_index,
    legacy_batch,
    parse_checkpoint,
    parse_index,
    parse_log,
    parse_timeindex,
    v2_batch,
)

INTERVAL = 500


def _filled_log(tmp_path: Path, *, close: bool = True, **overrides: object) -> tuple[LogManager, Path, list]:
    clock = FakeClock(TS0)
    config = {"segment.bytes": 8000, "index.interval.bytes": INTERVAL, **overrides}
    manager = LogManager([tmp_path], config, clock=clock)
    log = manager.get_or_create("fmt", 3)
    infos = []
    # timestamps that go up and down, sizes that vary, every format
    for i in range(120):
        ts = TS0 + (i * 37) % 101 * 1000 + i
        if i % 10 == 7:
            data = legacy_batch(1, 3, ts=ts, compression=Compression.GZIP, tag=str(i))
        elif i % 10 == 8:
            data = legacy_batch(0, 2, tag=str(i))
        else:
            data = v2_batch(1 + i % 4, ts=ts, ts_step=3, value=b"x" * (20 + (i * 53) % 200), tag=str(i))
        infos.append(log.append(data))
    if close:
        manager.shutdown()
    return manager, tmp_path / "fmt-3", infos


def test_segment_files_are_named_by_their_base_offset(tmp_path: Path) -> None:
    _m, pdir, infos = _filled_log(tmp_path)
    names = sorted(p.name for p in pdir.iterdir())
    segment_files = [n for n in names if re.match(SEGMENT_RE, n)]
    assert set(names) - set(segment_files) <= {"leader-epoch-checkpoint", "partition.metadata"}
    bases = base_offsets(pdir)
    assert len(bases) > 3, "the log should have rolled several times"
    for base in bases:
        stem = f"{base:020d}"
        assert {f"{stem}.log", f"{stem}.index", f"{stem}.timeindex"} <= set(names)
        entries, tail = parse_log(pdir / f"{stem}.log")
        assert tail == 0
        first = entries[0].first_offset if entries[0].first_offset >= 0 else None
        if first is not None:
            assert first == base
    # the segments together hold exactly the offsets the appends returned
    assert bases[0] == 0
    last_offsets = [e.last_offset for b in bases for e in parse_log(pdir / f"{b:020d}.log")[0]]
    assert last_offsets == sorted(set(last_offsets))
    assert {i.last_offset for i in infos} <= set(last_offsets)  # a v0 append of 2 messages is 2 entries
    assert last_offsets[-1] == infos[-1].last_offset


def test_log_files_hold_the_batches_as_appended_with_valid_crcs(tmp_path: Path) -> None:
    _m, pdir, infos = _filled_log(tmp_path)
    prev_last = -1
    for base in base_offsets(pdir):
        entries, _tail = parse_log(pdir / f"{base:020d}.log")
        for e in entries:
            assert e.crc_ok, e
            if e.first_offset >= 0:
                assert e.first_offset == prev_last + 1
            assert e.last_offset > prev_last
            prev_last = e.last_offset
    assert prev_last == infos[-1].last_offset
    # the next offset after a v0/v1 gzip wrapper of 3 messages is wrapper offset + 1
    gz = infos[7]
    assert gz.last_offset - gz.first_offset == 2


def test_index_entries_point_at_batch_starts_every_interval(tmp_path: Path) -> None:
    _m, pdir, _infos = _filled_log(tmp_path)
    total = 0
    for base in base_offsets(pdir):
        entries, _ = parse_log(pdir / f"{base:020d}.log")
        by_pos = {e.position: e for e in entries}
        index = parse_index(pdir / f"{base:020d}.index")
        # trimmed to its entries: no zero-filled tail
        assert (pdir / f"{base:020d}.index").stat().st_size == 8 * len(index)
        assert [pos for _rel, pos in index] == expected_index(entries, INTERVAL)
        prev = -1
        for rel, pos in index:
            assert rel > prev
            prev = rel
            assert pos in by_pos, f"index entry ({rel}, {pos}) is not at a batch start"
            assert by_pos[pos].last_offset == base + rel
        total += len(index)
    assert total > 10


def test_time_index_entries_increase_and_name_the_max_so_far(tmp_path: Path) -> None:
    _m, pdir, _infos = _filled_log(tmp_path)
    seen = 0
    for base in base_offsets(pdir):
        entries, _ = parse_log(pdir / f"{base:020d}.log")
        tindex = parse_timeindex(pdir / f"{base:020d}.timeindex")
        assert (pdir / f"{base:020d}.timeindex").stat().st_size == 12 * len(tindex)
        prev_ts, prev_rel = -1, -1
        for ts, rel in tindex:
            assert ts > prev_ts and rel >= prev_rel
            prev_ts, prev_rel = ts, rel
            upto = [e for e in entries if e.last_offset <= base + rel]
            assert ts == max(e.max_timestamp for e in upto)
            assert any(e.last_offset == base + rel and e.max_timestamp == ts for e in entries)
        seen += len(tindex)
    assert seen > 5


def test_active_indexes_are_preallocated_then_trimmed_on_roll_and_close(tmp_path: Path) -> None:
    manager, pdir, _infos = _filled_log(tmp_path, close=False, **{"segment.index.bytes": 4000})
    bases = base_offsets(pdir)
    active = bases[-1]
    assert (pdir / f"{active:020d}.index").stat().st_size == 4000
    assert (pdir / f"{active:020d}.timeindex").stat().st_size == 3996  # whole 12-byte entries
    for base in bases[:-1]:  # rolled segments are trimmed
        assert (pdir / f"{base:020d}.index").stat().st_size == 8 * len(
            parse_index(pdir / f"{base:020d}.index")
        )
        assert all(e != (0, 0) for e in parse_index(pdir / f"{base:020d}.index"))
    manager.shutdown()
    idx = parse_index(pdir / f"{active:020d}.index")
    assert (pdir / f"{active:020d}.index").stat().st_size == 8 * len(idx)
    assert all(pos > 0 for _rel, pos in idx)
    tidx = parse_timeindex(pdir / f"{active:020d}.timeindex")
    assert (pdir / f"{active:020d}.timeindex").stat().st_size == 12 * len(tidx)


def test_active_indexes_found_at_start_are_preallocated_at_their_first_write(tmp_path: Path) -> None:
    """A start leaves an idle partition's index files alone (no growing and trimming them at
    every start and stop); the first write-out after an append preallocates them."""
    _m, pdir, _infos = _filled_log(tmp_path, **{"segment.index.bytes": 4000})
    active = base_offsets(pdir)[-1]
    index, tindex = pdir / f"{active:020d}.index", pdir / f"{active:020d}.timeindex"
    before = (index.read_bytes(), tindex.read_bytes())
    assert before[0] and before[1]  # the active segment has entries of both kinds

    config = {"segment.bytes": 8000, "index.interval.bytes": INTERVAL, "segment.index.bytes": 4000}
    idle = LogManager([tmp_path], config, clock=FakeClock(TS0))
    assert (index.read_bytes(), tindex.read_bytes()) == before  # loaded, not preallocated
    idle.shutdown()
    assert (index.read_bytes(), tindex.read_bytes()) == before

    busy = LogManager([tmp_path], config, clock=FakeClock(TS0 + 200_000))
    log = busy.get("fmt", 3)
    assert log is not None and log.active.base_offset == active
    for i in range(3):
        log.append(v2_batch(2, ts=TS0 + 200_000 + i, value=b"y" * 300, tag=f"more{i}"))
    log.flush()
    assert (index.stat().st_size, tindex.stat().st_size) == (4000, 3996)
    busy.shutdown()
    after = parse_index(index)
    assert index.stat().st_size == 8 * len(after) and tindex.stat().st_size % 12 == 0
    old = [struct.unpack_from(">ii", before[0], i) for i in range(0, len(before[0]), 8)]
    assert after[: len(old)] == old and len(after) > len(old)


def test_offset_checkpoints_use_kafkas_text_format(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    manager = LogManager([tmp_path], {"segment.bytes": 2000}, clock=clock)
    a0 = manager.get_or_create("orders", 0)
    a1 = manager.get_or_create("orders", 1)
    b = manager.get_or_create("page-views.v2", 12)
    for i in range(40):
        a0.append(v2_batch(2, value=b"a" * 100, tag=str(i)))
    for i in range(5):
        a1.append(v2_batch(3, tag=str(i)))
    a0.maybe_increment_log_start_offset(31)
    a0.advance_high_watermark(70)
    a1.advance_high_watermark(15)
    manager.shutdown()

    def rows(name: str) -> dict[tuple[str, int], int]:
        parsed = parse_checkpoint(tmp_path / name)
        assert all(len(r) == 3 for r in parsed)
        return {(t, int(p)): int(o) for t, p, o in parsed}

    assert rows("recovery-point-offset-checkpoint") == {
        ("orders", 0): 80,
        ("orders", 1): 15,
        ("page-views.v2", 12): 0,
    }
    assert rows("log-start-offset-checkpoint") == {
        ("orders", 0): 31,
        ("orders", 1): 0,
        ("page-views.v2", 12): 0,
    }
    assert rows("replication-offset-checkpoint") == {
        ("orders", 0): 70,
        ("orders", 1): 15,
        ("page-views.v2", 12): 0,
    }
    text = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    assert text == "0\n3\norders 0 80\norders 1 15\npage-views.v2 12 0\n"
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert not list(tmp_path.glob("*.tmp"))
    assert b.log_end_offset == 0

    # reloading takes the checkpoints back; a new start removes the clean-shutdown marker
    again = LogManager([tmp_path], {"segment.bytes": 2000}, clock=clock)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    log = again.get("orders", 0)
    assert log is not None
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (31, 80, 70)
    again.shutdown()


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], {}, clock=FakeClock(TS0))
    log = manager.get_or_create("e", 0)
    log.append(v2_batch(2), leader_epoch=0)
    log.append(v2_batch(3), leader_epoch=0)
    log.append(v2_batch(1), leader_epoch=4)
    log.append(v2_batch(1), leader_epoch=7)
    manager.shutdown()
    path = tmp_path / "e-0" / "leader-epoch-checkpoint"
    assert path.read_text() == "0\n3\n0 0\n4 5\n7 6\n"
    assert parse_checkpoint(path) == [["0", "0"], ["4", "5"], ["7", "6"]]
    # the batches carry the epoch they were appended in
    entries, _ = parse_log(tmp_path / "e-0" / f"{0:020d}.log")
    epochs = [
        int.from_bytes(
            (tmp_path / "e-0" / f"{0:020d}.log").read_bytes()[e.position + 12 : e.position + 16], "big"
        )
        for e in entries
    ]
    assert epochs == [0, 0, 4, 7]


def test_meta_properties_and_partition_metadata(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, 3, "MkU3OEVBNTcwNTJENDM2Qg")
    props = dict(
        line.split("=", 1)
        for line in (tmp_path / "meta.properties").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert props == {"version": "0", "broker.id": "3", "cluster.id": "MkU3OEVBNTcwNTJENDM2Qg"}

    topic_id = uuid.UUID("0b7c6f2e-94a1-4e7e-8f0e-2c5d1a3b4c5d")
    manager = LogManager([tmp_path], {})
    log = manager.get_or_create("ids", 0, topic_id=topic_id)
    text = (tmp_path / "ids-0" / "partition.metadata").read_text()
    lines = dict(line.split(": ", 1) for line in text.splitlines())
    assert lines["version"] == "0"
    encoded = lines["topic_id"]
    assert len(encoded) == 22 and "=" not in encoded
    assert base64.urlsafe_b64decode(encoded + "==") == topic_id.bytes
    assert LogManager.topic_id(log) == topic_id
    other = uuid.UUID(int=7)
    LogManager.set_topic_id(log, other)
    assert LogManager.topic_id(log) == other
    manager.shutdown()
    # meta.properties and the marker are broker-level files, not partitions
    again = LogManager([tmp_path], {})
    assert len(again) == 1
    again.shutdown()
