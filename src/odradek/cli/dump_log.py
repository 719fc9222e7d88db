"""``odradek dump-log``: print segments and check indexes, like Kafka's dump-log tool.

``--verify`` checks a partition without a broker: every entry's length, magic, offsets and CRC,
every record against its batch header (a batch whose records lie under a valid CRC), offsets
across segments (gaps no compaction explains, overlaps), a log ending before its recovery point
(a segment file deleted), torn tails, and index entries against the batches they point at.
Entries are checked by :func:`odradek.storage.reader.check_entries`, as Spark's offline read
(``spark.read.format("odradek").option("path", ...)``) checks them.  Printing
(``--print-data-log``) never stops on bad data: a batch whose records cannot all be read is
reported, with the records before the bad one printed.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from odradek.cli._progress import Progress
from odradek.records import (
    BatchHeader,
    Compression,
    Record,
    RecordsError,
    TimestampType,
    decompress,
    read_batches,
    v2,
)
from odradek.records.check import check_records, problem_text
from odradek.storage.checkpoint import CLEANER_OFFSET, RECOVERY_POINT, read_offsets
from odradek.storage.errors import StorageError
from odradek.storage.log import parse_partition_dir
from odradek.storage.reader import LARGEST_ENTRY, check_entries, find_next_entry

__all__ = ["dump_paths", "verify_paths"]

_index_entry = struct.Struct(">ii")
_time_entry = struct.Struct(">qi")
_txn_entry = struct.Struct(">hqqqq")
_TS_TYPE = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
_MB = 1024 * 1024
_TICK = 1024  # entries between progress checks inside a segment


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


def dump_log(
    path: Path,
    out: TextIO,
    *,
    print_data: bool,
    deep: bool,
    max_bytes: int | None,
    tick: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Print one .log file; returns (entries, problems).  ``tick(position)`` now and then."""
    data = path.read_bytes() if max_bytes is None else path.open("rb").read(max_bytes)
    base = int(path.stem)
    out.write(f"Dumping {path}\nLog starting offset: {base}\n")
    entries = problems = 0
    size = path.stat().st_size
    for c in check_entries(data, base_offset=base, expected=base, file_size=size, check_records=True):
        h = c.header
        if h is None:
            problems += 1
            if c.problem is not None and c.problem.startswith("torn tail"):
                out.write(f"Found {size - c.position} bytes at the end of {path.name} that do not form a complete entry\n")
            else:
                out.write(f"Found an invalid entry at position {c.position}: {c.problem}\n")
            continue
        entries += 1
        if tick is not None and entries % _TICK == 0:
            tick(c.position)
        valid = c.problem is None
        if not valid:
            problems += 1
            if not str(c.problem).startswith("CRC"):
                out.write(f"Invalid entry at position {c.position}: {c.problem}\n")
        out.write(_batch_line(h, valid) + "\n")
        if deep and (valid or c.records_only):
            entry = memoryview(data)[h.position : h.end]
            records, problem = _readable_records(entry, h._replace(position=0))
            ts_type = _TS_TYPE.get(int(h.timestamp_type), "?")
            for r in records:
                line = f"| offset: {r.offset} {ts_type}: {r.timestamp}"
                line += f" keySize: {-1 if r.key is None else len(r.key)}"
                line += f" valueSize: {-1 if r.value is None else len(r.value)}"
                line += f" headerKeys: [{','.join(k for k, _ in r.headers)}]"
                if h.is_control:
                    line += " " + _control_text(r.key, r.value)
                elif print_data:
                    line += f" key: {_show(r.key)} payload: {_show(r.value)}"
                out.write(line + "\n")
            if problem is not None and valid:  # not found by the check above: say it all the same
                problems += 1
            if problem is not None:
                out.write(f"| the records of the batch at position {c.position} (offset {_first_offset(h)}) "
                          f"could not all be read: {problem}\n")
    return entries, problems


def _first_offset(h: BatchHeader) -> int:
    return h.base_offset if h.base_offset >= 0 else h.last_offset


def _readable_records(entry: memoryview, h: BatchHeader) -> tuple[list[Record], str | None]:
    """The records of one entry that can be read, and what stopped the reading (None: nothing):
    a v2 batch's records up to the first one that contradicts the batch header."""
    try:
        if h.magic < 2:
            return list(next(iter(read_batches(entry))).records), None
        buf: bytes | memoryview = entry
        start, stop = v2.HEADER_SIZE, len(entry)
        if h.compression:
            buf = decompress(h.compression, entry[start:stop], magic=2)
            start, stop = 0, len(buf)
        c = check_records(buf, start, stop, h.record_count, h.base_timestamp, h.last_offset - h.base_offset,
                          sequential=False)
        lat = h.max_timestamp if h.timestamp_type == TimestampType.LOG_APPEND_TIME else None
        readable = bytes(buf[start : c.position if not c.ok else stop])
        records = v2.decode_records(readable, c.record, h.base_offset, h.base_timestamp, lat)
        return records, None if c.ok else problem_text(c, h.record_count)
    except (RecordsError, ValueError, StopIteration) as exc:
        return [], str(exc) or type(exc).__name__


def _control_text(key: bytes | None, value: bytes | None) -> str:
    """A control record as Kafka's dump tool prints it: the marker type and coordinator epoch."""
    if key is None or len(key) < 4:
        return "controlType: UNKNOWN"
    ctype = struct.unpack_from(">h", key, 2)[0]
    name = {0: "ABORT", 1: "COMMIT"}.get(ctype, f"UNKNOWN({ctype})")
    if ctype in (0, 1) and value is not None and len(value) >= 6:
        return f"endTxnMarker: {name} coordinatorEpoch: {struct.unpack_from('>i', value, 2)[0]}"
    return f"controlType: {name}"


def dump_txn_index(path: Path, out: TextIO) -> int:
    """Print a ``.txnindex`` (aborted transactions); returns problems (a torn last entry)."""
    data = path.read_bytes()
    out.write(f"Dumping {path}\n")
    whole = len(data) - len(data) % 34
    for pos in range(0, whole, 34):
        version, pid, first, last, lso = _txn_entry.unpack_from(data, pos)
        out.write(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                  f"lastStableOffset: {lso}\n")
    if whole != len(data):
        out.write(f"Found {len(data) - whole} bytes at the end of {path.name} that do not form a complete entry\n")
        return 1
    return 0


def _log_headers(log_path: Path) -> dict[int, BatchHeader]:
    if not log_path.exists():
        return {}
    base = int(log_path.stem)
    checks = check_entries(log_path.read_bytes(), base_offset=base, expected=base, check_crc=False)
    return {c.position: c.header for c in checks if c.header is not None}


def dump_index(path: Path, out: TextIO) -> int:
    """Print an offset index (``.index``) entry by entry, checking each against the batch its position points
    at in the ``.log`` next to it; returns the number of problems found."""
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
    """Print a time index (``.timeindex``) entry by entry, noting timestamps that do not increase; returns the
    number of problems found."""
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


def _progress_text(done: int, total: int, what: str) -> str:
    percent = 100.0 * done / total if total else 100.0
    return f"{done / _MB:,.1f} of {total / _MB:,.1f} MB ({percent:.0f}%) of segments {what}"


def dump_paths(
    paths: list[str],
    *,
    print_data: bool,
    deep: bool,
    max_bytes: int | None,
    out: TextIO,
    progress: Progress | None = None,
) -> int:
    """Dump every file given (partition directories are expanded); exit status 1 on problems.
    ``progress`` (on a terminal): how far through the .log files it is."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix in (".log", ".index", ".timeindex", ".txnindex"))
        else:
            files.append(p)
    problems = 0
    total = sum(f.stat().st_size for f in files if f.suffix == ".log" and f.exists())
    done = 0

    def tick(position: int) -> None:
        if progress is not None:
            progress.update(lambda: _progress_text(done + position, total, "dumped"))

    for f in files:
        if not f.exists():
            out.write(f"{f}: no such file\n")
            problems += 1
        elif f.suffix not in (".log", ".index", ".timeindex", ".txnindex"):
            out.write(f"{f}: not a .log, .index, .timeindex or .txnindex file\n")
            problems += 1
        elif f.suffix != ".txnindex" and not f.stem.isdigit():
            out.write(f"{f}: not a segment file (its name is not a base offset)\n")
            problems += 1
        else:
            try:
                if f.suffix == ".log":
                    problems += dump_log(f, out, print_data=print_data, deep=deep, max_bytes=max_bytes, tick=tick)[1]
                    done += f.stat().st_size
                    tick(0)
                elif f.suffix == ".index":
                    problems += dump_index(f, out)
                elif f.suffix == ".timeindex":
                    problems += dump_time_index(f, out)
                else:
                    problems += dump_txn_index(f, out)
            except OSError as exc:
                out.write(f"{f}: could not be read: {exc}\n")
                problems += 1
            except Exception as exc:  # bad bytes must not stop the dump of the other files
                out.write(f"{f}: dump stopped by {type(exc).__name__}: {exc}\n")
                problems += 1
    if problems:
        out.write(f"{problems} problem(s) found\n")
    return 1 if problems else 0


# -- --verify ------------------------------------------------------------------------------------

_PARTITION_DIR = re.compile(r"^.+-\d+$")


def verify_segment(
    path: Path,
    expected: int,
    out: TextIO,
    ends: dict[int, int] | None = None,
    tick: Callable[[int], None] | None = None,
) -> tuple[int, int, int]:
    """Check every entry of one ``.log`` file; returns (entries, problems, next expected offset).
    ``ends`` receives position -> last offset of every entry with a sound frame; ``tick(position)``
    is called now and then."""
    ends = {} if ends is None else ends
    base = int(path.stem)
    data = path.read_bytes()
    n = len(data)
    entries = problems = 0
    if expected > base:
        out.write(f"{path}: base offset {base} is below the end of the previous segment ({expected})\n")
        problems += 1
    expected = max(expected, base)
    pos = 0
    while pos < n:
        # an entry may be as large as a segment can hold (LARGEST_ENTRY); a larger length is
        # garbage, a smaller one that runs past the end of the file is a torn tail
        stopped: tuple[int, str] | None = None
        view = memoryview(data)[pos:]
        for c in check_entries(
            view, base_offset=base, expected=expected, position=pos, max_size=LARGEST_ENTRY, check_records=True
        ):
            h = c.header
            if h is not None:
                ends[c.position] = h.last_offset
            if c.problem is None and h is not None:
                entries += 1
                expected = h.last_offset + 1
                if tick is not None and entries % _TICK == 0:
                    tick(c.position)
                continue
            problems += 1
            offset = "?" if h is None else str(h.base_offset if h.base_offset >= 0 else h.last_offset)
            out.write(f"{path}: position {c.position} offset {offset} (after offset {expected - 1}): {c.problem}\n")
            if h is not None:
                entries += 1  # the entry's frame is sound: go on after it
                if c.records_only:
                    expected = h.last_offset + 1  # its header (offsets, CRC) is sound
                continue
            stopped = (c.position, str(c.problem))
        del view
        if stopped is None:
            break
        at, problem = stopped
        nxt = find_next_entry(data, at + 1, expected, base)
        if nxt is None:
            if not problem.startswith("torn tail"):
                out.write(f"{path}: no valid entry after position {at}: {n - at} bytes could not be checked\n")
            break
        out.write(f"{path}: {nxt - at} bytes skipped to the next valid entry at position {nxt}\n")
        pos = nxt
    return entries, problems, expected


def verify_index(path: Path, out: TextIO, ends: dict[int, int]) -> int:
    """Check an ``.index`` against ``ends`` (entry positions -> last offsets of its ``.log``)."""
    log_path = path.with_suffix(".log")
    if not log_path.exists():
        out.write(f"{path}: index without its {log_path.name}\n")
        return 1
    size = log_path.stat().st_size
    data = path.read_bytes()
    base = int(path.stem)
    problems = 0
    if len(data) % 8:
        out.write(f"{path}: {len(data) % 8} bytes after the last whole entry (a truncated index)\n")
        problems += 1
    prev = -1
    for i in range(0, len(data) - len(data) % 8, 8):
        rel, position = _index_entry.unpack_from(data, i)
        if rel == 0 and position == 0:
            break  # zero fill of a preallocated index (an unclean stop)
        offset = base + rel
        if offset <= prev:
            out.write(f"{path}: entry {i // 8}: offset {offset} does not increase\n")
            problems += 1
        if position < 0 or position >= size:
            out.write(f"{path}: entry {i // 8}: offset {offset} points at position {position}, past the end of "
                      f"{log_path.name} ({size} bytes)\n")
            problems += 1
        elif ends.get(position) != offset:
            found = "no entry starts there" if position not in ends else f"the entry there ends at {ends[position]}"
            out.write(f"{path}: entry {i // 8}: offset {offset} at position {position}, but {found}\n")
            problems += 1
        prev = offset
    return problems


def verify_time_index(path: Path, out: TextIO) -> int:
    """``--verify`` of a time index: check it holds whole entries whose timestamps and offsets
    increase; returns the number of problems found (each printed to ``out``)."""
    data = path.read_bytes()
    base = int(path.stem)
    problems = 0
    if len(data) % 12:
        out.write(f"{path}: {len(data) % 12} bytes after the last whole entry (a truncated index)\n")
        problems += 1
    prev_ts, prev_rel = -1, -1
    for i in range(0, len(data) - len(data) % 12, 12):
        ts, rel = _time_entry.unpack_from(data, i)
        if ts == 0 and rel == 0:
            break
        if ts <= prev_ts or rel < prev_rel or rel < 0:
            out.write(f"{path}: entry {i // 12}: timestamp {ts} offset {base + rel} does not increase\n")
            problems += 1
        prev_ts, prev_rel = ts, rel
    return problems


def _checkpoints(partition_dir: Path) -> tuple[int, int]:
    """(cleaner checkpoint, recovery point) of a partition directory, from the checkpoint files of
    its log dir (0 when absent or unreadable)."""
    parsed = parse_partition_dir(partition_dir.name)
    if parsed is None:
        return 0, 0
    found = []
    for name in (CLEANER_OFFSET, RECOVERY_POINT):
        try:
            found.append(read_offsets(partition_dir.parent / name).get(parsed, 0))
        except (OSError, ValueError, StorageError):
            found.append(0)
    return found[0], found[1]


def verify_paths(paths: list[str], *, out: TextIO, progress: Progress | None = None) -> int:
    """``dump-log --verify``: check every batch of the log dirs, partition dirs or segment files
    given, without a broker; one line per problem; exit status 1 when any was found.
    ``progress`` (on a terminal): how far through the segments it is."""
    problems = entries = segments = 0
    targets: list[Path] = []
    for p in map(Path, paths):
        # a log dir (data dir): every partition directory in it
        partitions = sorted(c for c in p.iterdir() if c.is_dir() and _PARTITION_DIR.match(c.name)) if p.is_dir() else []
        if partitions and not any(f.suffix == ".log" for f in p.iterdir()):
            targets += partitions
        else:
            targets.append(p)
    total = sum(
        f.stat().st_size
        for p in targets
        for f in (p.iterdir() if p.is_dir() else [p] if p.exists() else [])
        if f.suffix == ".log"
    )
    done = 0

    def tick(position: int) -> None:
        if progress is not None:
            progress.update(
                lambda: _progress_text(done + position, total, "checked")
                + f", {segments} segment(s), {entries} entries, {problems} problem(s)"
            )

    for p in targets:
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix in (".log", ".index", ".timeindex"))
        elif p.exists():
            files = [p]
        else:
            out.write(f"{p}: no such file or directory\n")
            problems += 1
            continue
        expected = 0
        cleaned, recovery_point = _checkpoints(p) if p.is_dir() else (0, 0)
        # per segment: the .log first, then its indexes (checked against the entries found)
        bases = sorted({f.stem for f in files if f.stem.isdigit()})
        previous: Path | None = None
        for stem in bases:
            folder = files[0].parent
            log_file, index, time_index = (folder / (stem + sfx) for sfx in (".log", ".index", ".timeindex"))
            ends: dict[int, int] = {}
            if log_file in files:
                base = int(stem)
                # offsets no segment holds: damage, unless compaction removed them (below the
                # partition's cleaner checkpoint, its first dirty offset)
                missing_from = max(expected, cleaned)
                if previous is not None and base > missing_from:
                    out.write(f"{log_file}: offsets {missing_from} to {base - 1} are in no segment "
                              f"(between {previous.name} and {log_file.name}: a segment file deleted?)\n")
                    problems += 1
                e, bad, expected = verify_segment(log_file, expected, out, ends, tick)
                entries += e
                problems += bad
                segments += 1
                previous = log_file
                done += log_file.stat().st_size
                tick(0)
            if index in files:
                problems += verify_index(index, out, ends)
            if time_index in files:
                problems += verify_time_index(time_index, out)
        if p.is_dir() and recovery_point > expected:
            last = f"the last segment {previous.name} ends" if previous is not None else "there is no .log file: it ends"
            out.write(f"{p}: the log was flushed up to offset {recovery_point} (recovery-point-offset-checkpoint), "
                      f"but {last} at offset {expected}: offsets {expected} to {recovery_point - 1} are in no "
                      "segment (a segment file deleted, or a truncation since the checkpoint)\n")
            problems += 1
    if problems:
        out.write(f"{problems} problem(s) found in {segments} segment(s) ({entries} entries)\n")
        return 1
    out.write(f"OK: {segments} segment(s), {entries} entries, no problems\n")
    return 0
