"""Helpers shared by the storage tests (imported by name, not a conftest).

The ``parse_*`` functions read Kafka's on-disk formats with ``struct`` by hand, independently of
``odradek.storage``, so that format tests do not trust the code they check.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from odradek.records import Batch, BatchBuilder, Compression, LegacyBatchBuilder, read_batches
from odradek.storage import Log

TS0 = 1_700_000_000_000
SEGMENT_RE = r"^\d{20}\.(log|index|timeindex)$"


# -- building input ----------------------------------------------------------------------------
def v2_batch(
    n: int = 1,
    *,
    ts: int = TS0,
    ts_step: int = 0,
    key: bytes | None = b"k",
    value: bytes = b"v",
    base_offset: int = 0,
    epoch: int = -1,
    compression: int = Compression.NONE,
    tag: str = "",
) -> bytes:
    """One v2 batch of ``n`` records; record i has key ``key + tag + i`` (unless None)."""
    b = BatchBuilder(compression=compression, base_offset=base_offset, partition_leader_epoch=epoch)
    for i in range(n):
        k = None if key is None else key + f"{tag}{i}".encode()
        b.append(ts + i * ts_step, k, value)
    return b.build()


def legacy_batch(
    magic: int,
    n: int = 1,
    *,
    ts: int = TS0,
    compression: int = Compression.NONE,
    value: bytes = b"v",
    tag: str = "",
) -> bytes:
    b = LegacyBatchBuilder(magic, compression=compression)
    for i in range(n):
        b.append(ts + i, f"k{tag}{i}".encode(), value)
    return b.build()


# -- reading through the public API ------------------------------------------------------------
def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> list[Batch]:
    """Every batch from ``start`` (default: log start) to the log end, CRC-checked."""
    offset = log.log_start_offset if start is None else start
    out: list[Batch] = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes).to_bytes()
        batches = list(read_batches(data, verify_crc=True))
        assert batches, f"no complete batch returned at offset {offset}"
        for b in batches:
            # validate the inner records too (decompression, inner CRCs)
            _ = b.records
            out.append(b)
        offset = batches[-1].last_offset + 1
    return out


def record_offsets(batches: list[Batch]) -> list[int]:
    return [r.offset for b in batches for r in b.records]


def records(batches: list[Batch]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for b in batches for r in b.records]


# -- Kafka's files, parsed by hand --------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One entry of a ``.log`` file."""

    position: int
    size: int
    magic: int
    first_offset: int  # -1 for a compressed v0/v1 wrapper (unknown without decompressing)
    last_offset: int
    max_timestamp: int
    crc_ok: bool


def parse_log(path: Path) -> tuple[list[Entry], int]:
    """Entries of a ``.log`` file and the number of bytes after the last complete entry."""
    data = path.read_bytes()
    pos, out = 0, []
    while len(data) - pos >= 17:
        offset, length = struct.unpack_from(">qi", data, pos)
        size = length + 12
        if length < 14 or pos + size > len(data):
            break
        magic = data[pos + 16]
        end = pos + size
        if magic == 2:
            (stored,) = struct.unpack_from(">I", data, pos + 17)
            (attributes, delta, _base_ts, max_ts) = struct.unpack_from(">hiqq", data, pos + 21)
            crc_ok = crc32c.crc32c(data[pos + 21 : end]) == stored
            first, last = offset, offset + delta
        elif magic in (0, 1):
            (stored,) = struct.unpack_from(">I", data, pos + 12)
            attributes = data[pos + 17]
            max_ts = struct.unpack_from(">q", data, pos + 18)[0] if magic == 1 else -1
            crc_ok = zlib.crc32(data[pos + 16 : end]) == stored
            first, last = (-1 if attributes & 0x07 else offset), offset
        else:
            break
        out.append(Entry(pos, size, magic, first, last, max_ts, crc_ok))
        pos = end
    return out, len(data) - pos


def parse_index(path: Path) -> list[tuple[int, int]]:
    """``(relative offset, position)`` entries of a ``.index`` file (8 bytes each)."""
    data = path.read_bytes()
    assert len(data) % 8 == 0, f"{path.name}: {len(data)} bytes is not whole entries"
    return [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]


def parse_timeindex(path: Path) -> list[tuple[int, int]]:
    """``(timestamp, relative offset)`` entries of a ``.timeindex`` file (12 bytes each)."""
    data = path.read_bytes()
    assert len(data) % 12 == 0, f"{path.name}: {len(data)} bytes is not whole entries"
    return [struct.unpack_from(">qi", data, i) for i in range(0, len(data), 12)]


def parse_checkpoint(path: Path) -> list[list[str]]:
    """Rows of a Kafka checkpoint file, checking its ``0\\n<count>\\n`` header."""
    lines = path.read_text().split("\n")
    assert lines[0] == "0", f"{path.name}: version line {lines[0]!r}"
    count = int(lines[1])
    rows = [line.split(" ") for line in lines[2 : 2 + count]]
    assert lines[2 + count :] == [""], f"{path.name}: trailing content {lines[2 + count :]!r}"
    return rows


def base_offsets(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def expected_index(entries: list[Entry], interval: int) -> list[int]:
    """Positions Kafka's rule indexes: a batch is indexed once more than ``interval`` bytes were
    appended since the previous indexed batch (the first batch never is)."""
    since, out = 0, []
    for e in entries:
        if since > interval:
            out.append(e.position)
            since = 0
        since += e.size
    return out


def call_counter(target: Any, name: str, monkeypatch: Any) -> list[Any]:
    """Patch ``target.name`` to record each call's first positional argument (self) and delegate."""
    calls: list[Any] = []
    original = getattr(target, name)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)
    return calls
