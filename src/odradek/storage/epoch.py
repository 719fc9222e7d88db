"""Leader-epoch cache of a partition, persisted in ``leader-epoch-checkpoint``.

Each entry says "leader epoch E started at offset S".  A follower that finds a new leader asks
for the end offset of its last epoch (OffsetForLeaderEpoch) and truncates there, so that replicas
never diverge.  Every change is written through to the checkpoint file.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from odradek.storage.checkpoint import LEADER_EPOCH, read_epochs, write_epochs

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

#: the partition log's logger: the cache's lines are the log's
_log = logging.getLogger("odradek.storage.log")

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """The leader epochs of one partition and their start offsets, written through to the
    partition's ``leader-epoch-checkpoint``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH
        self.entries: list[tuple[int, int]] = read_epochs(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (only a newer epoch is added)."""
        if epoch < 0:
            return
        if self.entries and epoch <= self.entries[-1][0]:
            return
        # an epoch cannot start before a later-known one: drop entries it supersedes
        entries = [(e, s) for e, s in self.entries if s < start_offset]
        entries.append((epoch, start_offset))
        self.entries = entries
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)``: Kafka's OffsetForLeaderEpoch answer.

        The end offset of an epoch is the start offset of the next larger epoch, or the log end
        offset for the latest epoch.  An unknown epoch between known ones answers for the largest
        known epoch below it; an epoch older than all entries ends where the first known one
        starts (its data is gone); ``(-1, -1)`` for the undefined epoch, an empty cache or an
        epoch newer than the latest.
        """
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        higher = next((i for i, (e, _start) in enumerate(self.entries) if e > epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self.entries[0][1]
        return self.entries[higher - 1][0], self.entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there)."""
        self._cut(end_offset=end_offset)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there."""
        self._cut(start_offset=start_offset)

    def truncate_to_log(self, start_offset: int, end_offset: int) -> None:
        """Both truncations (a load fits the cache to the log): the checkpoint is written once."""
        self._cut(start_offset=start_offset, end_offset=end_offset)

    def truncate_to_log_at_load(self, start_offset: int, end_offset: int) -> None:
        """:meth:`truncate_to_log` when a log loads: a full disk only leaves the file as it was,
        with a WARN line (the cache in memory is right; the file is rewritten at its next change
        and cut to the log again at every load, so a full disk need not keep the log from
        loading)."""
        try:
            self.truncate_to_log(start_offset, end_offset)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            _log.warning(
                "partition %s: leader-epoch checkpoint not rewritten at load (%s): the disk is full",
                self.path.parent.name, exc.strerror,
            )

    def _cut(self, *, start_offset: int = -1, end_offset: int | None = None) -> None:
        entries = self.entries
        if end_offset is not None:
            entries = [(e, s) for e, s in entries if s < end_offset]
        if entries and entries[0][1] < start_offset:
            covering = [(e, s) for e, s in entries if s <= start_offset][-1]
            entries = [(covering[0], start_offset), *((e, s) for e, s in entries if s > start_offset)]
        if entries != self.entries:
            self.entries = entries
            self._save()

    def clear(self) -> None:
        self.entries = []
        self._save()

    def _save(self) -> None:
        write_epochs(self.path, self.entries)
