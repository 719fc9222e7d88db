"""``odradek dump-log``: print segments and check indexes, like Kafka's dump-log tool."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TextIO

from odradek.records import BatchHeader, Compression, RecordsError, iter_batch_headers, read_batches, validate

__all__ = ["dump_paths"]

_index_entry = struct.Struct(">ii")
_time_entry = struct.Struct(">qi")
_TS_TYPE = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}


def _show(data: bytes | None, limit: int = 64) -> str:
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.hex()
    return text if len(text) <= limit else text[:limit] + "..."


def _batch_line(h: BatchHeader, valid: bool) -> str:
    try:
        codec = Compression(h.compression).name.lower()
    except RecordsError:
        codec = f"unknown({h.attributes & 7})"
    first = h.base_offset if h.base_offset >= 0 else h.last_offset
    return (
        f"baseOffset: {first} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} position: {h.position} "
        f"{_TS_TYPE.get(int(h.timestamp_type), '?')}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {codec} crc: {h.crc} isvalid: {str(valid).lower()}"
    )


def dump_log(path: Path, out: TextIO, *, print_data: bool, deep: bool, max_bytes: int | None) -> tuple[int, int]:
    """Print one .log file; returns (entries, problems)."""
    data = path.read_bytes() if max_bytes is None else path.open("rb").read(max_bytes)
    out.write(f"Dumping {path}\nLog starting offset: {int(path.stem)}\n")
    entries = problems = 0
    expected = int(path.stem)
    pos = 0
    try:
        for h in iter_batch_headers(data):
            entries += 1
            try:
                validate(data, h)
                valid = True
            except RecordsError:
                valid = False
                problems += 1
            first = h.base_offset if h.base_offset >= 0 else h.last_offset
            if first < expected:
                out.write(f"Offsets go backwards: {first} after {expected - 1}\n")
                problems += 1
            expected = h.last_offset + 1
            out.write(_batch_line(h, valid) + "\n")
            if deep and valid:
                for batch in read_batches(data[h.position : h.end]):
                    for r in batch.records:
                        line = f"| offset: {r.offset} {_TS_TYPE.get(int(batch.timestamp_type), '?')}: {r.timestamp}"
                        line += f" keySize: {-1 if r.key is None else len(r.key)}"
                        line += f" valueSize: {-1 if r.value is None else len(r.value)}"
                        line += f" headerKeys: [{','.join(k for k, _ in r.headers)}]"
                        if print_data:
                            line += f" key: {_show(r.key)} payload: {_show(r.value)}"
                        out.write(line + "\n")
            pos = h.end
    except RecordsError as exc:
        out.write(f"Found an invalid entry at position {pos}: {exc}\n")
        problems += 1
    if pos < len(data):
        out.write(f"Found {len(data) - pos} bytes at the end of {path.name} that do not form a complete entry\n")
        problems += 1
    return entries, problems


def _log_headers(log_path: Path) -> dict[int, BatchHeader]:
    if not log_path.exists():
        return {}
    data = log_path.read_bytes()
    try:
        return {h.position: h for h in iter_batch_headers(data)}
    except RecordsError:
        return {}


def dump_index(path: Path, out: TextIO) -> int:
    data = path.read_bytes()
    base = int(path.stem)
    by_position = _log_headers(path.with_suffix(".log"))
    out.write(f"Dumping {path}\n")
    problems = 0
    prev = -1
    for i in range(0, len(data) - len(data) % 8, 8):
        rel, position = _index_entry.unpack_from(data, i)
        if rel == 0 and position == 0:
            break  # zero fill of a preallocated index
        offset = base + rel
        out.write(f"offset: {offset} position: {position}\n")
        h = by_position.get(position)
        if offset <= prev:
            out.write(f"  index offsets do not increase at {offset}\n")
            problems += 1
        elif by_position and (h is None or h.last_offset != offset):
            found = "no batch" if h is None else f"batch with last offset {h.last_offset}"
            out.write(f"  mismatch: {found} at position {position}\n")
            problems += 1
        prev = offset
    return problems


def dump_time_index(path: Path, out: TextIO) -> int:
    data = path.read_bytes()
    base = int(path.stem)
    out.write(f"Dumping {path}\n")
    problems = 0
    prev_ts = -1
    for i in range(0, len(data) - len(data) % 12, 12):
        ts, rel = _time_entry.unpack_from(data, i)
        if ts == 0 and rel == 0:
            break  # zero fill of a preallocated index
        out.write(f"timestamp: {ts} offset: {base + rel}\n")
        if ts <= prev_ts:
            out.write(f"  timestamps do not increase at {ts}\n")
            problems += 1
        prev_ts = ts
    return problems


def dump_paths(paths: list[str], *, print_data: bool, deep: bool, max_bytes: int | None, out: TextIO) -> int:
    """Dump every file given (partition directories are expanded); exit status 1 on problems."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix in (".log", ".index", ".timeindex"))
        else:
            files.append(p)
    problems = 0
    for f in files:
        if not f.exists():
            out.write(f"{f}: no such file\n")
            problems += 1
        elif f.suffix == ".log":
            problems += dump_log(f, out, print_data=print_data, deep=deep, max_bytes=max_bytes)[1]
        elif f.suffix == ".index":
            problems += dump_index(f, out)
        elif f.suffix == ".timeindex":
            problems += dump_time_index(f, out)
        else:
            out.write(f"{f}: not a .log, .index or .timeindex file\n")
            problems += 1
    if problems:
        out.write(f"{problems} problem(s) found\n")
    return 1 if problems else 0
