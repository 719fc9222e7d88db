"""The offline read: ``spark.read.format("odradek").option("path", DIR)`` reads partitions
straight from their segment files, with no broker in the path.

``DIR`` (or each of the comma-separated ``logDirs``) is a broker's data dir, holding partition
directories ``<topic>-<partition>``, or one partition directory -- a broker's, a copy or a
backup.  ``subscribe`` / ``subscribePattern`` / ``assign`` choose among the partitions found
(all of them, internal topics aside, when none is given); ``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``startingOffsetsByTimestamp``, ``endingTimestamp``
and ``endingOffsetsByTimestamp`` take the network source's syntax and meaning: "earliest" is
the log start offset, "latest" the end of the log as the files hold it when the query is
planned (below), a timestamp the first record at or after it (ListOffsets' rule, through the
time index).  The rows are the network source's, decoded by the same code
(:func:`odradek.spark._arrow.decode_partition_data`) from the same bytes: every record format
(magic 0, 1 and 2, every codec), control batches skipped, transactional records kept as with
``read_uncommitted``, compacted partitions as they are on disk (with gaps between offsets).

Plan (driver).  Per partition: its segments, the end of its complete entries (a walk of the
last segment's headers from its last index entry, and the CRC of the last entry), and the
broker's checkpoints in the directory holding the partition directory, when they are there:

* ``log-start-offset-checkpoint``: "earliest" is not below the log start offset;
* ``recovery-point-offset-checkpoint``: "latest" is not beyond the recovery point, the offset
  up to which the broker has flushed the log (what survives a crash) -- on a running broker
  with the default flush settings, the end of the log at its last start.  Option
  ``readPastRecoveryPoint=true`` reads on, up to the last complete entry: then a torn or
  invalid entry beyond the recovery point (an append in progress) ends the log quietly.
  Without the checkpoint (a copy of a partition directory alone) there is no recovery point.

A range whose end falls inside a batch is ended at that batch's start, so that no partial batch
is returned.  One Spark partition reads one log partition, or a run of whole segments of at most
``maxBytesPerPartition`` bytes (default 128 MiB) of a larger one; ``minPartitions`` and
``maxRecordsPerPartition`` split further, as for the network source (not with
``stopAtCorruption=true``, which reads each partition in one task).

Read (executors).  The segment holding the range's first offset is found by base offset, the
position in it through the offset index (checked against the ``.log``), and the ``.log`` files
are read in large chunks, every entry checked by :func:`odradek.storage.reader.check_entries`
(length, magic, offsets, CRC) before it is decoded.  An invalid entry -- damage, or a segment
cut short -- is an error naming the file, the byte position and what is wrong; with
``stopAtCorruption=true`` the read of that partition stops there instead, returning the records
before it (as recovery would truncate the log there) and logging a warning.  Records missing
from the files (retention, ``endingOffsets`` past the end) are data loss, reported or skipped
per ``failOnDataLoss`` as by the network source.  Segment files are opened once the listing of
the directory is stable and no compaction swap is under way; an open segment stays readable
when a broker deletes or replaces it.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from odradek.storage.checkpoint import LOG_START_OFFSET, RECOVERY_POINT, read_offsets
from odradek.storage.errors import StorageError
from odradek.storage.log import parse_partition_dir
from odradek.storage.reader import SegmentDamageError, SegmentReader, check_entries, list_segments

from ._arrow import decode_partition_data
from ._dataloss import report_data_loss
from ._offsets import OffsetRange, OffsetReader, PartitionOffsets, TopicPartition, check_range, split_ranges
from ._options import SourceOptions, _bool, _lower, parse_source_options
from ._pushdown import Pushdown, intersect

__all__ = [
    "DEFAULT_MAX_BYTES_PER_PARTITION",
    "FileOffsetReader",
    "OfflineOptions",
    "OfflineRange",
    "PartitionFiles",
    "find_partitions",
    "parse_offline_options",
    "plan_offline",
    "read_offline",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
#: bytes of a ``.log`` read at a time by an executor (a whole entry when one is larger): one Arrow
#: batch each, as large as the network read's fetches (fewer, larger batches cost Spark less
#: per row; the decoded columns come from pyarrow's pool, so a larger chunk faults in no new pages)
READ_CHUNK = 4 * 1024 * 1024
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})
_SEGMENT_FILE = re.compile(r"^\d{20}\.(log|index|timeindex)$")
_STABLE_LISTING_TRIES = 200
_STOP_HINT = "set the option stopAtCorruption=true to read the records before it"


@dataclass(frozen=True)
class OfflineOptions:
    """The options of an offline read: the source options (topics, offsets, ...) and where the
    files are and how to treat them."""

    source: SourceOptions
    dirs: tuple[str, ...]
    stop_at_corruption: bool = False
    read_past_recovery_point: bool = False
    #: None: not set (DEFAULT_MAX_BYTES_PER_PARTITION)
    max_bytes_per_partition: int | None = None


def parse_offline_options(options: Mapping[str, Any]) -> OfflineOptions:
    """Validate the options of an offline read (``path`` or ``logDirs``; batch only)."""
    opts = _lower(options)
    if "path" in opts and "logdirs" in opts:
        raise ValueError("Give the segment files' directory as 'path' or as 'logDirs', not both")
    text = opts.get("logdirs", opts.get("path", ""))
    dirs = tuple(d.strip() for d in text.split(",") if d.strip()) if "logdirs" in opts else (text.strip(),)
    if not dirs or not all(dirs):
        raise ValueError("Option 'path' (or 'logDirs') must name a data dir or a partition directory")
    source = parse_source_options(options, streaming=False, offline=True)
    if source.isolation_level != "read_uncommitted":
        raise ValueError(
            "The offline read returns transactional records as read_uncommitted does (control batches are "
            "skipped): kafka.isolation.level=read_committed is not supported with 'path' or 'logDirs'"
        )
    max_bytes = None
    if "maxbytesperpartition" in opts:
        try:
            max_bytes = int(opts["maxbytesperpartition"].strip())
        except ValueError:
            raise ValueError(
                f"Option 'maxBytesPerPartition' must be an integer, not {opts['maxbytesperpartition']!r}"
            ) from None
        if max_bytes <= 0:
            raise ValueError("maxBytesPerPartition must be positive")
    return OfflineOptions(
        source=source,
        dirs=dirs,
        stop_at_corruption=_bool(opts.get("stopatcorruption", "false"), "stopAtCorruption"),
        read_past_recovery_point=_bool(opts.get("readpastrecoverypoint", "false"), "readPastRecoveryPoint"),
        max_bytes_per_partition=max_bytes,
    )


# ---------------------------------------------------------------------------------------------
# finding partitions


def _is_partition_dir(path: Path) -> bool:
    """A directory holding segment files (or a ``<topic>-<partition>`` directory holding no
    partition directories: an empty partition)."""
    names = os.listdir(path)
    if any(_SEGMENT_FILE.match(n) for n in names):
        return True
    if parse_partition_dir(path.name) is None:
        return False
    return not any(parse_partition_dir(n) is not None and (path / n).is_dir() for n in names)


def find_partitions(dirs: Iterable[str | Path]) -> dict[TopicPartition, Path]:
    """The partition directories in ``dirs`` (data dirs or partition directories)."""
    found: dict[TopicPartition, Path] = {}
    for d in map(Path, dirs):
        if not d.exists():
            raise FileNotFoundError(f"Offline read: {d} does not exist")
        if not d.is_dir():
            raise NotADirectoryError(
                f"Offline read: {d} is not a directory (give a data dir or a partition directory)"
            )
        if _is_partition_dir(d):
            parsed = parse_partition_dir(d.resolve().name)
            if parsed is None:
                raise ValueError(
                    f"Offline read: {d} holds segment files but its name is not <topic>-<partition>: "
                    "name the directory after the partition it holds, as a broker does"
                )
            here = {parsed: d}
        else:
            here = {}
            for child in sorted(d.iterdir()):
                parsed = parse_partition_dir(child.name)
                if parsed is not None and child.is_dir():
                    here[parsed] = child
            if not here:
                raise ValueError(f"Offline read: no partition directories (<topic>-<partition>) in {d}")
        for tp, path in here.items():
            if tp in found:
                raise ValueError(f"Offline read: partition {tp[0]}-{tp[1]} is in both {found[tp]} and {path}")
            found[tp] = path
    return found


def _stable_segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files of a partition directory, listed twice the same with no compaction
    swap under way (a swap renames files one by one)."""
    previous = None
    for _ in range(_STABLE_LISTING_TRIES):
        segments, swapping = list_segments(directory)
        if not swapping and segments == previous:
            return segments
        if previous is not None or swapping:
            time.sleep(0.02)  # a swap, or segments rolled or removed between two listings
        previous = None if swapping else segments
    raise StorageError(f"the segment files of {directory} kept changing (a compaction swap under way?)")


def _open_stable(directory: Path, wanted: Any) -> list[SegmentReader]:
    """Readers of the segments ``wanted(listing)`` picks, opened from a stable listing that is
    still the same once they are open."""
    return _open_listed(directory, wanted)[1]


def _open_listed(directory: Path, wanted: Any) -> tuple[list[tuple[int, Path]], list[SegmentReader]]:
    """:func:`_open_stable`, and the listing the readers were picked from."""
    for _ in range(_STABLE_LISTING_TRIES):
        segments = _stable_segments(directory)
        readers: list[SegmentReader] = []
        try:
            for _base, path in wanted(segments):
                readers.append(SegmentReader(path))
        except FileNotFoundError:
            for r in readers:
                r.close()
            time.sleep(0.02)
            continue
        again, swapping = list_segments(directory)
        if again == segments and not swapping:
            return segments, readers
        for r in readers:
            r.close()
    raise StorageError(f"the segment files of {directory} kept changing (a compaction swap under way?)")


# ---------------------------------------------------------------------------------------------
# planning


@dataclass
class PartitionFiles:
    """What the driver found about one partition's files."""

    topic: str
    partition: int
    directory: Path
    segments: list[tuple[int, int]] = field(default_factory=list)  # (base offset, size)
    earliest: int = 0
    latest: int = 0
    recovery_point: int | None = None


def _checkpoint(
    directory: Path, name: str, cache: dict[Path, dict[TopicPartition, int] | None]
) -> dict[TopicPartition, int] | None:
    path = directory.parent / name
    if path not in cache:
        cache[path] = read_offsets(path) if path.exists() else None
    return cache[path]


def inspect_partition(
    tp: TopicPartition,
    directory: Path,
    opts: OfflineOptions,
    cache: dict[Path, dict[TopicPartition, int] | None] | None = None,
) -> PartitionFiles:
    """The segments, earliest and latest offsets of one partition directory (see the module
    docstring for the rules)."""
    cache = {} if cache is None else cache
    topic, partition = tp
    info = PartitionFiles(topic, partition, directory)
    starts = _checkpoint(directory, LOG_START_OFFSET, cache)
    points = _checkpoint(directory, RECOVERY_POINT, cache)
    log_start = starts.get(tp, 0) if starts is not None else 0
    if points is not None:
        info.recovery_point = points.get(tp, 0)
    segments, readers = _open_listed(directory, lambda segments: segments[-1:])
    try:
        info.segments = [(base, _size(path)) for base, path in segments]
        if not readers:
            info.earliest = info.latest = log_start
            return info
        last = readers[0]
        info.segments[-1] = (last.base_offset, last.size)
        tail = last.scan_tail()
        files_end = tail.next_offset
        if tail.problem is not None:
            rp = info.recovery_point
            if rp is not None and tail.next_offset >= rp:
                # beyond what the broker has flushed: an append in progress (or what recovery
                # would cut off after a crash): the log ends before it
                log.debug(
                    "%s-%d: the log ends at offset %d, before %s at byte %d of %s (beyond the recovery point %d)",
                    topic,
                    partition,
                    files_end,
                    tail.problem,
                    tail.problem_position,
                    last.path,
                    rp,
                )
            elif opts.stop_at_corruption:
                log.warning(
                    "%s-%d: %s at byte position %d of %s (after offset %d): reading the records before it "
                    "(stopAtCorruption)",
                    topic,
                    partition,
                    tail.problem,
                    tail.problem_position,
                    last.path,
                    files_end - 1,
                )
            else:
                raise SegmentDamageError(
                    last.path, tail.problem_position, files_end, tail.problem, _STOP_HINT
                )
        first_base = segments[0][0]
        latest = files_end
        if info.recovery_point is not None and not opts.read_past_recovery_point:
            point = max(info.recovery_point, first_base)
            if point < latest:
                log.warning(
                    "%s-%d: reading up to offset %d, the recovery point the broker checkpointed in %s; "
                    "the %d offsets written after it are not flushed yet (set the option "
                    "readPastRecoveryPoint=true to read them too)",
                    topic,
                    partition,
                    point,
                    directory.parent / RECOVERY_POINT,
                    latest - point,
                )
                latest = _batch_start(directory, point)
        info.latest = latest
        info.earliest = min(max(first_base, log_start), latest)
        return info
    finally:
        for r in readers:
            r.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # deleted since it was listed
        return 0


def _covering(segments: list[tuple[int, Path]], start: int, end: int) -> list[tuple[int, Path]]:
    """The segments that may hold offsets ``start <= o < end`` (the first segment at least,
    when any: a range before it is data loss)."""
    out: list[tuple[int, Path]] = []
    for i, (base, path) in enumerate(segments):
        if base >= end and out:
            break
        if i + 1 < len(segments) and segments[i + 1][0] <= start:
            continue
        out.append((base, path))
    return out


def _batch_start(directory: Path, offset: int) -> int:
    """``offset``, or the first offset of the batch holding ``offset`` when it starts below it
    (a range must not end inside a batch)."""
    readers = _open_stable(directory, lambda segments: _covering(segments, offset, offset + 1)[:1])
    try:
        if not readers:
            return offset
        position, _expected = readers[0].position_of(offset)
        h = readers[0].peek(position)
        if h is not None:
            first = h.base_offset if h.base_offset >= 0 else h.last_offset
            if first < offset <= h.last_offset:
                return first
        return offset
    finally:
        for r in readers:
            r.close()


class FileOffsetReader(OffsetReader):
    """:class:`~odradek.spark._offsets.OffsetReader` over segment files: the partitions found
    in the directories, and offsets from the files (see :func:`inspect_partition`)."""

    def __init__(self, options: OfflineOptions) -> None:
        super().__init__(options.source)
        self.offline = options
        self._found: dict[TopicPartition, Path] | None = None
        self._info: dict[TopicPartition, PartitionFiles] = {}
        self._checkpoints: dict[Path, dict[TopicPartition, int] | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def close(self) -> None:
        """Nothing to release: the files are opened per look-up."""
        pass

    @property
    def found(self) -> dict[TopicPartition, Path]:
        """Every partition directory under the data dirs, by partition (looked for once)."""
        if self._found is None:
            self._found = find_partitions(self.offline.dirs)
        return self._found

    def info(self, tp: TopicPartition) -> PartitionFiles:
        """What ``tp``'s segment files say: its directory, earliest and latest offsets (cached)."""
        if tp not in self._info:
            self._info[tp] = inspect_partition(tp, self.found[tp], self.offline, self._checkpoints)
        return self._info[tp]

    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions to read: those assigned, those of the subscribed topics, or of the topics matching
        the pattern (all non-internal ones without either); ValueError naming the directories when none is
        there."""
        opts = self.options
        found = self.found
        where = ", ".join(self.offline.dirs)
        topics = sorted({t for t, _ in found})
        if opts.strategy == "assign":
            missing = [tp for tp in opts.assignment if tp not in found]
            if missing:
                raise ValueError(
                    f"Offline read: no directory for partition(s) {', '.join(f'{t}-{p}' for t, p in missing)} "
                    f"in {where} (topics there: {', '.join(topics)})"
                )
            return sorted(opts.assignment)
        public = sorted(tp for tp in found if tp[0] not in INTERNAL_TOPICS)
        if opts.strategy == "subscribe":
            missing_topics = [t for t in opts.topics if t not in topics]
            if missing_topics:
                raise ValueError(
                    f"Offline read: no partition directory of topic(s) {', '.join(missing_topics)} in {where} "
                    f"(topics there: {', '.join(topics)})"
                )
            chosen = sorted(tp for tp in found if tp[0] in opts.topics)
        elif opts.strategy == "subscribepattern":
            pattern = re.compile(opts.pattern)
            chosen = [tp for tp in public if pattern.fullmatch(tp[0])]
            if not chosen:
                raise ValueError(
                    f"Offline read: no topic matching subscribePattern {opts.pattern!r} in {where} "
                    f"(topics there: {', '.join(topics)})"
                )
        else:
            chosen = public
            if not chosen:
                raise ValueError(f"Offline read: no partitions of non-internal topics in {where}")
        return chosen

    def list_offsets(self, specs: Mapping[TopicPartition, str | int]) -> PartitionOffsets:
        """``{tp: "earliest" | "latest" | timestamp}`` -> the offsets the files give (-1 for a timestamp after
        every record)."""
        out: PartitionOffsets = {}
        for tp, spec in specs.items():
            info = self.info(tp)
            if spec == "earliest":
                out[tp] = info.earliest
            elif spec == "latest":
                out[tp] = info.latest
            else:
                out[tp] = self.offset_for_timestamp(tp, int(spec))
        return out

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> int:
        """The first offset in ``[earliest, latest)`` whose record's timestamp is >= ``timestamp``
        (-1 when there is none)."""
        info = self.info(tp)
        start, end = info.earliest, info.latest
        if start >= end:
            return -1
        readers = _open_stable(info.directory, lambda segments: _covering(segments, start, end))
        try:
            for seg in readers:
                found = seg.find_offset_by_timestamp(timestamp, start, end)
                if found is not None:
                    return found[0]
            return -1
        finally:
            for r in readers:
                r.close()


@dataclass(frozen=True)
class OfflineRange:
    """One task's work: records ``start <= offset < end`` of the partition in ``directory``."""

    directory: str
    topic: str
    partition: int
    start: int
    end: int


def _split_by_segments(r: OffsetRange, info: PartitionFiles, max_bytes: int) -> list[OffsetRange]:
    """``r`` cut at segment boundaries into runs of whole segments of at most ``max_bytes``
    (a segment larger than that is a run of its own)."""
    out: list[OffsetRange] = []
    start, size = r.start, 0
    segments = info.segments
    for i, (base, seg_size) in enumerate(segments):
        nxt = segments[i + 1][0] if i + 1 < len(segments) else None
        if nxt is not None and nxt <= r.start:
            continue
        if base >= r.end:
            break
        if size and size + seg_size > max_bytes and start < base < r.end:
            out.append(OffsetRange(r.topic, r.partition, start, base))
            start, size = base, 0
        size += seg_size
    out.append(OffsetRange(r.topic, r.partition, start, r.end))
    return out


def plan_offline(options: OfflineOptions, pushdown: Pushdown | None = None) -> list[OfflineRange]:
    """The ranges of an offline batch read: offsets resolved from the files as the network
    source resolves them from the broker, narrowed by the pushed filters
    (:mod:`odradek.spark._pushdown`; timestamps through the segments' time indexes, as
    ListOffsets).  No upper timestamp bound cuts a range here: the files do not say whether a
    topic's timestamps are the broker's (LogAppendTime)."""
    opts = options.source
    reader = FileOffsetReader(options)
    tps = reader.topic_partitions()
    start = reader.resolve(opts.starting, tps, starting=True, streaming=False)
    end = reader.resolve(opts.ending, tps, starting=False, streaming=False)
    for tp in tps:
        check_range(tp, start[tp], end[tp])
    narrowed = intersect(pushdown, tps, start, end, reader.list_offsets, lambda tps: set())
    if pushdown is not None and pushdown.active:
        log.info(
            "odradek offline: pushed %s; reading %s",
            "; ".join(pushdown.described),
            ", ".join(f"{t}-{p} [{s}, {e})" for (t, p), s, e in narrowed) or "nothing",
        )
    ranges = []
    if options.stop_at_corruption:
        # read from the partition's start all the same: no record after damage is returned
        ends: dict[TopicPartition, int] = {}
        for tp, _s, e in narrowed:
            ends[tp] = max(ends.get(tp, e), e)
        ranges = [OffsetRange(tp[0], tp[1], start[tp], e) for tp, e in ends.items() if start[tp] < e]
    else:
        for tp, s, e in narrowed:
            if s < e:
                ranges += _split_by_segments(
                    OffsetRange(tp[0], tp[1], s, e), reader.info(tp),
                    options.max_bytes_per_partition or DEFAULT_MAX_BYTES_PER_PARTITION
                )
    if options.stop_at_corruption:
        # one task reads a partition from its start: none returns records after damage that
        # another task found (recovery keeps nothing after it either)
        if opts.min_partitions or opts.max_records_per_partition:
            log.warning("minPartitions and maxRecordsPerPartition are not applied with stopAtCorruption=true")
        planned = sorted(ranges)
    else:
        planned = split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    return [
        OfflineRange(str(reader.found[(r.topic, r.partition)]), r.topic, r.partition, r.start, r.end)
        for r in planned
    ]


# ---------------------------------------------------------------------------------------------
# reading (executors)


def read_offline(
    directory: str | Path,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
    stop_at_corruption: bool = False,
    chunk_bytes: int = READ_CHUNK,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``topic``-``partition`` with offsets ``start <= o < end`` from the
    segment files in ``directory``, as Arrow record batches of the source's schema."""
    if start >= end:
        return
    directory = Path(directory)
    try:
        readers = _open_stable(directory, lambda segments: _covering(segments, start, end))
    except FileNotFoundError:
        report_data_loss(
            f"Cannot read offsets {start}..{end - 1} of {topic}-{partition}: {directory} is gone",
            fail_on_data_loss,
        )
        return
    try:
        if not readers:
            report_data_loss(
                f"Cannot read offsets {start}..{end - 1} of {topic}-{partition}: {directory} holds no segment",
                fail_on_data_loss,
            )
            return
        buffer = bytearray(chunk_bytes)  # every chunk is read into it
        offset = start
        if offset < readers[0].base_offset:
            report_data_loss(
                f"Cannot read offset {offset} of {topic}-{partition}: the log now starts at offset {readers[0].base_offset}",
                fail_on_data_loss,
            )
            offset = readers[0].base_offset
        for i, seg in enumerate(readers):
            if offset >= end:
                break
            nxt = readers[i + 1].base_offset if i + 1 < len(readers) else None
            if nxt is not None and nxt <= offset:
                continue
            offset, stopped = yield from _read_segment(
                seg,
                buffer,
                topic,
                partition,
                offset,
                end,
                include_headers,
                stop_at_corruption,
                chunk_bytes,
                nxt is None or nxt >= end,
            )
            if stopped:
                return
            if nxt is not None:
                offset = max(offset, nxt)
        if offset < end:
            report_data_loss(
                f"Cannot read offsets {offset}..{end - 1} of {topic}-{partition}: the log ends at offset {offset}",
                fail_on_data_loss,
            )
    finally:
        for r in readers:
            r.close()


def _decode(
    data: bytes | memoryview, topic: str, partition: int, offset: int, end: int, include_headers: bool
) -> pa.RecordBatch | None:
    decoded = decode_partition_data(
        data,
        topic,
        partition,
        offset,
        end,
        include_headers=include_headers,
        verify_crc=False,  # checked
    )
    return decoded.batch


def _refers_to(batch: pa.RecordBatch, buffer: bytearray) -> bool:
    """Whether a column of ``batch`` has memory inside ``buffer``."""
    lo = pa.py_buffer(buffer).address
    hi = lo + len(buffer)
    for column in batch.columns:
        for b in column.buffers():
            if b is not None and b.size and lo < b.address + b.size and b.address < hi:
                return True
    return False


def _read_segment(
    seg: SegmentReader,
    buffer: bytearray,
    topic: str,
    partition: int,
    offset: int,
    end: int,
    include_headers: bool,
    stop_at_corruption: bool,
    chunk_bytes: int,
    last_needed: bool,
) -> Generator[pa.RecordBatch, None, tuple[int, bool]]:
    """Yield the records of one segment from ``offset`` on and below ``end``; return
    ``(next offset, stopped at damage)``."""
    if offset > seg.base_offset:
        position, expected = seg.position_of(offset)
    else:
        position, expected = 0, seg.base_offset
    limit = seg.size
    if last_needed:  # the range ends in this segment: read no further than the entry holding ``end``
        at, _ = seg.position_of(end)
        h = seg.peek(at) if at < seg.size else None
        limit = h.end if h is not None else max(at, position)
        limit = seg.size if limit <= position else limit
    want = chunk_bytes
    while position < seg.size and offset < end:
        data = seg.read_into(buffer, position, want if position >= limit else min(want, limit - position))
        want = chunk_bytes
        good = 0
        damage = None
        last_next = expected
        for c in check_entries(
            data, base_offset=seg.base_offset, expected=expected, position=position, file_size=seg.size
        ):
            h = c.header
            if c.problem is not None or h is None:
                damage = c
                break
            if (h.base_offset if h.base_offset >= 0 else h.last_offset) >= end:
                last_next = end
                break
            good = h.end - position
            last_next = expected = h.last_offset + 1
            if last_next >= end:
                break
        if good:
            batch = _decode(data[:good], topic, partition, offset, end, include_headers)
            if batch is not None and _refers_to(batch, buffer):
                # the columns point into the buffer the next chunk is read into: decode a copy
                batch = _decode(bytes(data[:good]), topic, partition, offset, end, include_headers)
            if batch is not None:
                yield batch
            position += good
        offset = max(offset, last_next)
        if damage is not None:
            err = SegmentDamageError(seg.path, damage.position, expected, str(damage.problem), _STOP_HINT)
            if not stop_at_corruption:
                raise err
            log.warning(
                "%s-%d: %s; the read of this partition stops there (stopAtCorruption)",
                topic,
                partition,
                err.message,
            )
            return offset, True
        if offset >= end:
            break
        if not good:
            h = seg.peek(position)
            if h is None or h.size <= len(data):  # the end of the file
                break
            want = h.size  # an entry larger than a chunk (or than what was left before ``limit``)
            limit = max(limit, position + h.size)
    return offset, False
