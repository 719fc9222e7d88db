"""``odradek dump-log`` prints batches and records and flags damage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from odradek.records import BatchBuilder, Compression
from odradek.storage import LogManager


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", "dump-log", *args], capture_output=True, text=True)


def _make(tmp_path: Path) -> Path:
    manager = LogManager([tmp_path], {"segment.bytes": 3000, "index.interval.bytes": 200})
    log = manager.get_or_create("events", 0)
    for i in range(30):
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
