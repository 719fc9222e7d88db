"""``odradek dump-log`` prints batches and records and flags damage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from odradek.records import BatchBuilder, Compression
from odradek.storage import LogManager


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", "dump-log", *args], capture_output=True, text=True)


def _make(tmp_path: Path, batches: int = 30, segment_bytes: int = 3000) -> Path:
    manager = LogManager([tmp_path], {"segment.bytes": segment_bytes, "index.interval.bytes": 200})
    log = manager.get_or_create("events", 0)
    for i in range(batches):
        b = BatchBuilder(compression=Compression.GZIP if i % 2 else Compression.NONE)
        b.append(1_700_000_000_000 + i, f"key{i}".encode(), f"value-{i}".encode() * 5, [("trace", b"t")])
        log.append(b.build())
    manager.shutdown()
    return tmp_path / "events-0"


def test_dump_log_prints_batches_records_and_checks_indexes(tmp_path: Path) -> None:
    part = _make(tmp_path)
    result = _run(str(part), "--print-data-log")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "baseOffset: 0 lastOffset: 0 count: 1" in out
    assert "compresscodec: gzip" in out and "compresscodec: none" in out
    assert "| offset: 29 CreateTime: 1700000000029" in out
    assert "key: key29 payload: value-29" in out
    assert "headerKeys: [trace]" in out
    assert "offset: " in out and "position: " in out  # index entries listed
    assert "mismatch" not in out


def test_dump_log_flags_corruption(tmp_path: Path) -> None:
    part = _make(tmp_path)
    seg = sorted(part.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records
    seg.write_bytes(bytes(data) + b"\x00\x00\x00garbage")
    result = _run(str(seg))
    assert result.returncode == 1
    assert "isvalid: false" in result.stdout
    assert "do not form a complete entry" in result.stdout


def _batches(seg: Path) -> list[tuple[int, int]]:
    """(position, base offset) of each batch of a segment."""
    from odradek.records import iter_batch_headers

    return [(h.position, h.base_offset) for h in iter_batch_headers(seg.read_bytes())]


def test_verify_passes_a_sound_partition(tmp_path: Path) -> None:
    part = _make(tmp_path)
    result = _run("--verify", str(part))
    assert result.returncode == 0, result.stdout
    assert "OK:" in result.stdout and "30 entries" in result.stdout
    whole = _run("--verify", str(tmp_path))  # the log dir: every partition in it
    assert whole.returncode == 0 and "30 entries" in whole.stdout, whole.stdout


def test_verify_reports_every_bad_batch_without_a_broker(tmp_path: Path) -> None:
    import struct

    part = _make(tmp_path, 60, 1500)
    segs = sorted(part.glob("*.log"))
    assert len(segs) >= 4
    # segment 0: a CRC mismatch in its second batch, and the offsets of its third going backwards
    first = bytearray(segs[0].read_bytes())
    (p1, o1), (p2, _o2) = _batches(segs[0])[1:3]
    first[p1 + 70] ^= 0xFF
    struct.pack_into(">q", first, p2, 0)
    segs[0].write_bytes(bytes(first))
    # segment 1: an impossible length (the 0x7fffffff of the issue) in its second batch
    second = bytearray(segs[1].read_bytes())
    p3, o3 = _batches(segs[1])[1]
    struct.pack_into(">i", second, p3 + 8, 0x7FFFFFFF)
    segs[1].write_bytes(bytes(second))
    # the last segment: a torn tail
    last = segs[-1].read_bytes()
    segs[-1].write_bytes(last + last[:40])
    # an index entry past the end of its segment
    index = sorted(part.glob("*.index"))[2]
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 8
    struct.pack_into(">ii", entries, len(entries) - 8, struct.unpack_from(">i", entries, len(entries) - 8)[0], 1 << 30)
    index.write_bytes(bytes(entries))
    result = _run("--verify", str(part))
    out = result.stdout
    assert result.returncode == 1, out
    assert f"{segs[0]}: position {p1} offset {o1}" in out and "CRC mismatch" in out
    assert f"{segs[0]}: position {p2} offset 0" in out and "offsets go backwards" in out
    assert f"{segs[1]}: position {p3}" in out and "bad batch length 2147483647" in out
    assert "skipped to the next valid entry" in out  # the batches after it are checked too
    assert f"{segs[-1]}: position {len(last)}" in out and "torn tail" in out
    assert f"{index}: entry" in out and "past the end" in out
    assert "6 problem(s)" in out, out  # and the index entry of the batch whose offset was rewritten
    assert o3 > 0
