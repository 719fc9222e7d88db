"""The partition side of transactions: open transactions hold the last stable offset back,
markers decide them, aborted ones are listed from the ``.txnindex`` files (Kafka's format, read
here with ``struct`` by hand), and all of it survives restarts, crashes, truncation and
compaction."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from odradek._clock import FakeClock
from odradek.records import BatchBuilder, control_marker, marker_batch, read_batches
from odradek.storage import InvalidRecordError, Log, LogConfig
from odradek.storage import cleaner as cleaner_mod
from odradek.storage.txn_index import AbortedTxn

from .storage_helpers import TS0, v2_batch

_CONFIG: dict[str, object] = {"segment.bytes": 1 << 20}


def _log(path: Path, clock: FakeClock | None = None, *, clean: bool = True, **config: object) -> Log:
    return Log(path, LogConfig.from_dict({**_CONFIG, **config}), clock=clock or FakeClock(TS0), clean_shutdown=clean)


def _txn_batch(pid: int, seq: int, n: int = 2, *, epoch: int = 0, tag: str = "") -> bytearray:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    for i in range(n):
        b.append(TS0, f"k{pid}-{tag}{seq + i}".encode(), b"v")
    return bytearray(b.build())


def _advance(log: Log) -> None:
    log.advance_high_watermark(log.log_end_offset)  # a single replica: everything written is replicated


def _txnindex_entries(path: Path) -> list[tuple[int, int, int, int, int]]:
    data = path.read_bytes()
    assert len(data) % 34 == 0
    return [struct.unpack_from(">hqqqq", data, i) for i in range(0, len(data), 34)]


def test_an_open_transaction_holds_the_last_stable_offset(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.append(v2_batch(3))  # 0..2, not transactional
    log.append(_txn_batch(7, 0))  # 3..4
    log.append(v2_batch(2, tag="x"))  # 5..6
    _advance(log)
    assert log.high_watermark == 7 and log.last_stable_offset == 3
    log.append_marker(7, 0, commit=True, coordinator_epoch=1)  # 7
    assert log.last_stable_offset == 3, "the marker is not replicated yet"
    _advance(log)
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.aborted_transactions(0, 8) == []  # committed: nothing to drop
    assert not list(tmp_path.glob("t-0/*.txnindex"))


def test_an_aborted_transaction_is_indexed_in_kafkas_format(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.append(_txn_batch(7, 0))  # 0..1, producer 7
    log.append(_txn_batch(8, 0))  # 2..3, producer 8
    log.append(_txn_batch(7, 2))  # 4..5
    info = log.append_marker(7, 0, commit=False, coordinator_epoch=3)  # 6
    _advance(log)
    assert info.first_offset == 6
    # producer 8's transaction is still open: it holds the LSO, and is the LSO of the entry
    assert log.last_stable_offset == 2
    assert log.aborted_transactions(0, 7) == [AbortedTxn(7, 0, 6, 2)]
    assert _txnindex_entries(tmp_path / "t-0" / "00000000000000000000.txnindex") == [(0, 7, 0, 6, 2)]
    # a fetch above the aborted transaction's data does not get it; one overlapping it does
    assert log.aborted_transactions(7, 8) == []
    assert log.aborted_transactions(5, 6) == [AbortedTxn(7, 0, 6, 2)]
    # the marker on disk: a transactional control batch with the ABORT record and the epoch
    [marker] = [b for b in read_batches(log.read(6, 1 << 20).to_bytes()) if b.is_control]
    assert marker.is_transactional and marker.producer_id == 7
    log.append_marker(8, 0, commit=True, coordinator_epoch=3)
    _advance(log)
    assert log.last_stable_offset == 8
    assert log.aborted_transactions(0, 8) == [AbortedTxn(7, 0, 6, 2)]


def test_markers_and_indexes_survive_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path / "t-0", clock)
    log.append(_txn_batch(7, 0))  # 0..1
    log.append_marker(7, 0, commit=False, coordinator_epoch=1)  # 2
    log.append(_txn_batch(9, 0))  # 3..4, left open
    log.close()
    log = _log(tmp_path / "t-0", clock)  # the producer snapshot at close keeps the open transaction
    _advance(log)
    assert log.last_stable_offset == 3
    assert log.aborted_transactions(0, 5) == [AbortedTxn(7, 0, 2, 3)]
    log.append(_txn_batch(9, 2))  # the same transaction goes on
    log.append_marker(9, 0, commit=False, coordinator_epoch=1)
    _advance(log)
    assert log.aborted_transactions(0, 8) == [AbortedTxn(7, 0, 2, 3), AbortedTxn(9, 3, 7, 8)]


def test_a_crash_that_lost_the_index_write_rebuilds_it(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path / "t-0", clock, clean=False)
    log.append(_txn_batch(7, 0))
    log.append_marker(7, 0, commit=False, coordinator_epoch=1)
    log.append(_txn_batch(9, 0))
    log.flush()
    (tmp_path / "t-0" / "00000000000000000000.txnindex").unlink()  # the entry never reached the disk
    # no close (no snapshot at the log end): an unclean restart replays the segment
    log = _log(tmp_path / "t-0", clock, clean=False)
    _advance(log)
    assert log.aborted_transactions(0, 5) == [AbortedTxn(7, 0, 2, 3)]
    assert log.last_stable_offset == 3, "producer 9's transaction is still open"


def test_a_torn_index_entry_is_cut_off(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.append(_txn_batch(7, 0))
    log.append_marker(7, 0, commit=False, coordinator_epoch=1)
    log.close()
    path = tmp_path / "t-0" / "00000000000000000000.txnindex"
    path.write_bytes(path.read_bytes() + b"\x00\x00\x00\x00\x00\x00\x00\x07\x00")  # half an entry
    log = _log(tmp_path / "t-0")
    assert log.aborted_transactions(0, 3) == [AbortedTxn(7, 0, 2, 3)]
    log.append(_txn_batch(8, 0))
    log.append_marker(8, 0, commit=False, coordinator_epoch=1)
    assert _txnindex_entries(path) == [(0, 7, 0, 2, 3), (0, 8, 3, 5, 6)]


def test_truncation_below_a_marker_reopens_the_transaction(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.append(v2_batch(1))  # 0
    log.append(_txn_batch(7, 0))  # 1..2
    log.append_marker(7, 0, commit=False, coordinator_epoch=1)  # 3
    _advance(log)
    assert log.aborted_transactions(0, 4) == [AbortedTxn(7, 1, 3, 4)]
    assert log.truncate_to(3)  # a follower loses the marker
    _advance(log)
    assert log.aborted_transactions(0, 3) == []
    assert log.last_stable_offset == 1, "the transaction is open again"
    assert not (tmp_path / "t-0" / "00000000000000000000.txnindex").exists()


def test_a_follower_indexes_the_markers_it_replicates(tmp_path: Path) -> None:
    leader = _log(tmp_path / "l-0")
    leader.append(_txn_batch(7, 0))
    leader.append_marker(7, 0, commit=False, coordinator_epoch=2)
    data = leader.read(0, 1 << 20).to_bytes()
    follower = _log(tmp_path / "f-0")
    follower.append_as_follower(bytearray(data))
    _advance(follower)
    assert follower.aborted_transactions(0, 3) == [AbortedTxn(7, 0, 2, 3)]
    assert follower.producers.entries[7].coordinator_epoch == 2


def test_clients_may_not_write_control_batches(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.append(_txn_batch(7, 0))
    with pytest.raises(InvalidRecordError, match="control records"):
        log.append(bytearray(marker_batch(7, 0, False, 1, TS0)))
    _advance(log)
    assert log.log_end_offset == 2 and log.last_stable_offset == 0


def test_control_marker_reads_type_and_coordinator_epoch() -> None:
    assert control_marker(marker_batch(1, 0, True, 5, TS0)) == (1, 5)
    assert control_marker(marker_batch(1, 0, False, 6, TS0)) == (0, 6)
    assert control_marker(v2_batch(1)[:61]) == (-1, -1)


def test_compaction_keeps_the_aborted_index_and_leaves_open_transactions(tmp_path: Path) -> None:
    clock = FakeClock(TS0)
    log = _log(tmp_path / "c-0", clock, **{"cleanup.policy": "compact", "segment.bytes": 400})
    log.append(_txn_batch(7, 0, tag="a"))
    log.append_marker(7, 0, commit=False, coordinator_epoch=1)
    for i in range(6):
        log.append(_txn_batch(8, i * 2, tag="b"))  # an open transaction across segments
    log.roll()
    _advance(log)
    assert len(log.segments) > 2
    before = log.aborted_transactions(0, log.log_end_offset)
    assert before == [AbortedTxn(7, 0, 2, 3)]
    # only the segments below producer 8's open transaction are cleanable
    _first_dirty, uncleanable = cleaner_mod.cleanable_range(log, 0, clock.now_ms())
    assert uncleanable <= 3
    cleaner_mod.clean(log, 0, clock.now_ms())
    assert log.aborted_transactions(0, log.log_end_offset) == before
    assert log.last_stable_offset == 3
    log.append_marker(8, 0, commit=True, coordinator_epoch=1)
    log.roll()
    _advance(log)
    assert cleaner_mod.cleanable_range(log, 0, clock.now_ms())[1] == log.active.base_offset
    cleaner_mod.clean(log, 0, clock.now_ms())
    assert log.aborted_transactions(0, log.log_end_offset) == before, "the cleaned segment keeps its entries"


def test_dump_log_prints_markers_and_the_aborted_index(tmp_path: Path) -> None:
    import io

    from odradek.cli.dump_log import dump_paths

    log = _log(tmp_path / "d-0")
    log.append(_txn_batch(7, 0))
    log.append_marker(7, 0, commit=False, coordinator_epoch=3)
    log.append(_txn_batch(8, 0))
    log.append_marker(8, 0, commit=True, coordinator_epoch=4)
    log.close()
    out = io.StringIO()
    assert dump_paths([str(tmp_path / "d-0")], print_data=False, deep=True, max_bytes=None, out=out) == 0
    text = out.getvalue()
    assert "| offset: 2 CreateTime" in text and "endTxnMarker: ABORT coordinatorEpoch: 3" in text
    assert "endTxnMarker: COMMIT coordinatorEpoch: 4" in text
    assert "isTransactional: true isControl: true" in text
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in text


def test_compaction_removes_aborted_records_and_old_abort_markers(tmp_path: Path) -> None:
    """An aborted transaction's records go at the first cleaning (and never hide a committed
    value of the same key); its ABORT marker goes once delete.retention.ms has passed."""
    clock = FakeClock(TS0)
    log = _log(tmp_path / "k-0", clock, **{"cleanup.policy": "compact", "segment.bytes": 300,
                                            "delete.retention.ms": 1000})

    def keyed(pid: int, seq: int, value: bytes) -> bytearray:
        b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=pid >= 0)
        b.append(TS0, b"key", value)
        return bytearray(b.build())

    log.append(keyed(7, 0, b"committed"))  # 0
    log.append_marker(7, 0, commit=True, coordinator_epoch=1)  # 1
    log.append(keyed(8, 0, b"aborted"))  # 2: the same key, later
    log.append_marker(8, 0, commit=False, coordinator_epoch=1)  # 3
    for i in range(8):
        b = BatchBuilder()
        b.append(TS0, b"other-%d" % i, b"x" * 40)
        log.append(bytearray(b.build()))
    log.roll()
    _advance(log)

    def contents() -> list[tuple[int, bytes | None, bool]]:
        out = []
        for seg in log.segments:
            for batch in read_batches(seg.read_bytes(0, seg.size)):
                out += [(r.offset, r.value, batch.is_control) for r in batch.records]
        return out

    cleaner_mod.clean(log, 0, clock.now_ms())
    after = contents()
    assert (0, b"committed", False) in after, "the aborted value must not shadow the committed one"
    assert all(v != b"aborted" for _o, v, _c in after)
    assert any(o == 3 and c for o, _v, c in after), "the ABORT marker stays until delete.retention.ms"
    clock.advance(5000)
    cleaner_mod.clean(log, 0, clock.now_ms())
    after = contents()
    assert not any(o == 3 for o, _v, _c in after) and any(o == 1 and c for o, _v, c in after)
    assert (0, b"committed", False) in after
