"""Opening a partition's log directory (Kafka's LogLoader): what a crash left half-done is
finished or undone, the segments are opened, their indexes checked (rebuilt when missing or
damaged), and after an unclean shutdown every segment from the recovery point on is validated
and cut at its first invalid entry, with a WARN line saying where, why and how much.

Offsets that no segment holds are reported with a WARN line naming the partition and the offsets
(the log goes on without them; nothing is made up): a gap between two segments that compaction
does not explain (the cleaner checkpoint), a log ending before the offset it was flushed up to
(the recovery point: its last segment deleted), or no segment at all where data was flushed.

The result is a :class:`LoadedLog`: the segments and the offsets the log starts from.  Nothing
here keeps state beyond one load.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from odradek._clock import Clock
from odradek.records import iter_batch_headers
from odradek.storage.config import LogConfig
from odradek.storage.files import FileOps
from odradek.storage.segment import LogSegment

__all__ = ["SEGMENT_RE", "LoadedLog", "LogLoader"]

_log = logging.getLogger("odradek.storage.log")

SEGMENT_RE = re.compile(r"^(?P<base>\d{20})\.log$")
_INDEX_RE = re.compile(r"^\d{20}\.(index|timeindex|txnindex)$")


@dataclass(slots=True)
class LoadedLog:
    segments: list[LogSegment]
    recovery_point: int
    log_start_offset: int
    log_end_offset: int
    #: bytes cut off by recovery (a torn or damaged tail)
    recovered_bytes: int
    #: a segment file was created: the directory must be synced at the next flush
    dir_dirty: bool
    #: the file names in the directory when loading began (after leftovers were cleaned up)
    names: list[str]


class LogLoader:
    def __init__(
        self, directory: Path, topic: str, partition: int, config: LogConfig, files: FileOps, clock: Clock
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.files = files
        self.clock = clock
        self.recovered_bytes = 0
        #: base offsets of segments whose index files were found without their .log (and removed)
        self.orphaned_indexes: set[int] = set()

    def _max_batch_size(self) -> int:
        return max(self.config.max_message_bytes, self.config.segment_bytes)

    def load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool, cleaned_to: int = 0) -> LoadedLog:
        """``cleaned_to``: the partition's cleaner checkpoint (its first dirty offset): offsets
        missing below it were removed by compaction, not lost."""
        opened: list[LogSegment] = []
        try:
            return self._load(recovery_point, log_start_offset, clean_shutdown, opened, cleaned_to)
        except BaseException:
            for seg in opened:  # e.g. out of descriptors: what was opened must not stay open
                seg.abandon()
            raise

    def _load(
        self,
        recovery_point: int,
        log_start_offset: int,
        clean_shutdown: bool,
        opened: list[LogSegment],
        cleaned_to: int = 0,
    ) -> LoadedLog:
        now = self.clock.now_ms()
        names = self._clean_leftovers()
        present = set(names)
        dir_dirty = False
        segments = opened
        for name in names:
            m = SEGMENT_RE.match(name)
            if m is None:
                continue
            path = self.directory / name
            stem = m.group("base")
            base = int(stem)
            missing = [s for s in (".index", ".timeindex") if stem + s not in present]
            seg = LogSegment(
                self.directory, base, self.config, self.files, now_ms=now, active=False, indexes_exist=not missing
            )
            segments.append(seg)
            seg.created_ms = int(path.stat().st_mtime * 1000)
            problem = f"missing {' and '.join(missing)}" if missing else seg.index_problem()
            if problem is not None:
                _log.warning(
                    "partition %s-%d: rebuilding the indexes of segment %s (%s)",
                    self.topic, self.partition, path.name, problem,
                )
                claimed = seg.next_offset
                truncated = seg.recover(self._max_batch_size(), base)
                self.recovered_bytes += truncated
                if truncated:
                    self._warn_truncation(seg, [], [], ending=False, before_end=claimed)
            else:
                seg.load_state()
                if seg.scan_stopped_at is not None:
                    _log.warning(
                        "partition %s-%d: segment %s holds %d bytes at position %d that do not form a "
                        "valid entry (after offset %d); reads reaching them answer CORRUPT_MESSAGE, "
                        "recovery after an unclean stop truncates them; check the partition with "
                        "`odradek dump-log --verify %s`",
                        self.topic, self.partition, path.name, seg.size - seg.scan_stopped_at,
                        seg.scan_stopped_at, seg.next_offset - 1, self.directory,
                    )
        if not segments:
            start = max(log_start_offset, recovery_point)
            if recovery_point > log_start_offset:
                _log.warning(
                    "partition %s-%d: no segment file, but the log was flushed up to offset %d "
                    "(recovery-point-offset-checkpoint): offsets %d to %d are in no segment (its .log files "
                    "deleted?); the log starts empty at offset %d",
                    self.topic, self.partition, recovery_point, log_start_offset, recovery_point - 1, start,
                )
            segments.append(LogSegment(self.directory, start, self.config, self.files, now_ms=now, active=True))
            dir_dirty = True
        else:
            self._warn_gaps(segments, cleaned_to)
            for sealed in segments[:-1]:
                sealed.release_indexes()  # loaded again on first use
            last = segments[-1]
            # preallocated at their first write-out: an idle partition's files stay as they are
            last.index.make_writable(preallocate=False)
            last.time_index.make_writable(preallocate=False)
        if not clean_shutdown:
            segments = self._recover(segments, recovery_point)
        log_end_offset = segments[-1].next_offset
        if recovery_point > log_end_offset and not self.recovered_bytes:
            _log.warning(
                "partition %s-%d: the log was flushed up to offset %d (recovery-point-offset-checkpoint) but its "
                "last segment %s ends at offset %d: offsets %d to %d are in no segment (a segment file deleted, "
                "or a truncation since the checkpoint); the log now ends at offset %d",
                self.topic, self.partition, recovery_point, segments[-1].log_path.name, log_end_offset,
                log_end_offset, recovery_point - 1, log_end_offset,
            )
        recovery_point = min(max(recovery_point, segments[0].base_offset), log_end_offset)
        if clean_shutdown:
            recovery_point = log_end_offset
        log_start_offset = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
        return LoadedLog(
            segments, recovery_point, log_start_offset, log_end_offset, self.recovered_bytes, dir_dirty, names
        )

    def _warn_gaps(self, segments: Sequence[LogSegment], cleaned_to: int) -> None:
        """A WARN line for offsets between two segments that neither holds, where compaction does
        not explain them (below the cleaner checkpoint it removes whole stretches of offsets)."""
        for before, after in itertools.pairwise(segments):
            missing_from = max(before.next_offset, cleaned_to)
            if after.base_offset <= missing_from:
                continue
            orphans = sorted(b for b in self.orphaned_indexes if missing_from <= b < after.base_offset)
            evidence = (
                f"; the index files of segment(s) {', '.join(map(str, orphans))} were there without their .log "
                "and were removed"
                if orphans
                else "; a follower's log of a compacted topic can also hold such a gap"
            )
            _log.warning(
                "partition %s-%d: offsets %d to %d are in no segment: %s ends at offset %d and %s starts at %d "
                "(a segment file deleted?)%s; reads of those offsets go on at offset %d",
                self.topic, self.partition, missing_from, after.base_offset - 1, before.log_path.name,
                before.next_offset, after.log_path.name, after.base_offset, evidence, after.base_offset,
            )

    def _clean_leftovers(self) -> list[str]:
        """Finish or undo what a crash interrupted: deletions, cleaning, swaps; returns the
        directory's file names afterwards, sorted.

        ``.deleted``, ``.cleaned`` and ``.tmp`` files are removed.  A ``<base>.log.swap`` is a
        committed compaction: the segments it replaces (bases in ``[base, its last offset]``)
        are removed, the swap takes the final name and its indexes are rebuilt on load.
        Index ``.swap`` files without a ``.log.swap`` belong to an uncommitted pass.
        """
        names = sorted(os.listdir(self.directory))
        with_log = {n[:20] for n in names if SEGMENT_RE.match(n)}
        if not any(
            n.endswith((".deleted", ".cleaned", ".tmp", ".swap")) or (_INDEX_RE.match(n) and n[:20] not in with_log)
            for n in names
        ):
            return names  # the usual case: one listing of the directory for the whole load
        for path in sorted(self.directory.iterdir()):
            if path.name.endswith((".deleted", ".cleaned", ".tmp")):
                path.unlink(missing_ok=True)
        swaps = sorted(p for p in self.directory.iterdir() if p.name.endswith(".log.swap"))
        committed = {p.name[: -len(".log.swap")] for p in swaps}
        for path in sorted(self.directory.iterdir()):
            uncommitted_txn = path.name.endswith(".txnindex.swap") and path.name[:20] not in committed
            if path.name.endswith((".index.swap", ".timeindex.swap")) or uncommitted_txn:
                path.unlink()
        for swap in swaps:
            stem = swap.name[: -len(".log.swap")]
            self._remove_replaced_by_swap(swap, int(stem))
            for suffix in (".index", ".timeindex", ".txnindex"):
                (self.directory / (stem + suffix)).unlink(missing_ok=True)
            # the aborted transactions of the cleaned segment come with it (not rebuilt from data)
            txn_swap = self.directory / (stem + ".txnindex.swap")
            if txn_swap.exists():
                os.replace(txn_swap, self.directory / (stem + ".txnindex"))
            os.replace(swap, self.directory / (stem + ".log"))
        if committed:
            self.files.sync_dir(self.directory)
        # Index files without their .log (a deletion or truncation interrupted between files, or
        # a .log whose creation a power cut undid) would be taken over, stale, by a new segment
        # at the same base offset: remove them, as Kafka does.
        logs = {p.name[:20] for p in self.directory.iterdir() if SEGMENT_RE.match(p.name)}
        for path in self.directory.iterdir():
            if _INDEX_RE.match(path.name) and path.name[:20] not in logs:
                self.orphaned_indexes.add(int(path.name[:20]))
                path.unlink()
        return sorted(os.listdir(self.directory))

    def _remove_replaced_by_swap(self, swap_log: Path, swap_base: int) -> None:
        last = swap_base
        for h in iter_batch_headers(swap_log.read_bytes()):
            last = h.last_offset
        for path in self.directory.iterdir():
            m = SEGMENT_RE.match(path.name)
            if m is None:
                continue
            base = int(m.group("base"))
            if swap_base <= base <= last:
                for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                    path.with_suffix(suffix).unlink(missing_ok=True)

    def _recover(self, segments: list[LogSegment], recovery_point: int) -> list[LogSegment]:
        """Validate every segment at or after the recovery point; drop everything after the
        first invalid entry (a torn write, or garbage appended after it), with a WARN line
        saying where, why and how much."""
        max_size = self._max_batch_size()
        # the end offset the segments claimed before validation (indexes and tail scans): what a
        # truncation loses is counted against it
        before_end = max((s.next_offset for s in segments), default=0)
        for i, seg in enumerate(segments):
            if seg.next_offset <= recovery_point and i < len(segments) - 1 and seg.next_offset > seg.base_offset:
                continue
            min_offset = segments[i - 1].next_offset if i > 0 else seg.base_offset
            truncated = seg.recover(max_size, min_offset)
            self.recovered_bytes += truncated
            if truncated:
                # nothing after an invalid entry can be trusted: drop later segments, and this
                # one too when nothing in it was valid (a stale segment whose offsets its
                # predecessor already holds must not set the log end offset back).  This is
                # Kafka's rule, kept also for damage in a sealed segment: the offsets after it
                # would otherwise sit behind a batch no consumer can pass, and a follower could
                # not truncate to a consistent end.  The WARN line says what went with it.
                keep = i if seg.is_empty and i > 0 else i + 1
                later = segments[i + 1 :]
                self._warn_truncation(seg, later, segments[keep : i + 1] if keep <= i else [], ending=True, before_end=before_end)
                for doomed in segments[keep:]:
                    doomed.delete_files()
                segments = segments[:keep]
                last = segments[-1]
                if not last.index.writable:
                    last.index.make_writable()
                    last.time_index.make_writable()
                break
        return segments

    def _warn_truncation(
        self,
        seg: LogSegment,
        later: Sequence[LogSegment],
        emptied: Sequence[LogSegment],
        *,
        ending: bool,
        before_end: int = -1,
    ) -> None:
        """One WARN line for a truncation by recovery: partition, segment, position, offset, why,
        and the bytes and records dropped with it (including later segments deleted)."""
        report = seg.recovery_report
        if report is None:
            return
        later_bytes = sum(s.size for s in later)
        gone_to = max([s.next_offset for s in later] + [before_end, report.first_offset])
        message = (
            f"partition {self.topic}-{self.partition}: recovery found {report.problem} in segment "
            f"{seg.log_path.name} at position {report.position} (offset {report.first_offset}); "
            f"truncated {report.truncated_bytes} bytes of {seg.log_path.name}"
        )
        if later:
            message += (
                f" and deleted {len(later)} later segment(s) ({later_bytes} bytes: "
                f"{', '.join(s.log_path.name for s in later)})"
            )
        if gone_to > report.first_offset:
            message += (
                f": {gone_to - report.first_offset} records are gone, offsets {report.first_offset} "
                f"to {gone_to - 1}"
            )
        elif report.records:
            message += f": {report.records} records are gone"
        else:
            message += ": no complete entry was dropped (a torn write)"
        if emptied:
            message += f"; {seg.log_path.name} held nothing valid and was deleted"
        if ending:
            message += f"; the log now ends at offset {report.first_offset}"
        _log.warning(message)
