"""Which segments retention deletes (Kafka's deletion rules: ``retention.ms``, ``retention.bytes``
and the log start offset), as a pure function of a snapshot of the segment list: the log applies
the answer (:meth:`Log.delete_old_segments <odradek.storage.log.Log.delete_old_segments>`)."""

from __future__ import annotations

from collections.abc import Sequence

from odradek.storage.config import LogConfig
from odradek.storage.segment import LogSegment

__all__ = ["deletable_segments"]


def deletable_segments(
    snapshot: Sequence[LogSegment], config: LogConfig, log_start_offset: int, now: int
) -> list[LogSegment]:
    """Segments of ``snapshot`` to delete by retention (time, size) and the log start offset;
    never the active (last) segment, always a prefix of the log."""
    segs = list(snapshot[:-1])
    cfg = config
    result: list[LogSegment] = []
    size_excess = sum(s.size for s in snapshot) - cfg.retention_bytes if cfg.delete and cfg.retention_bytes >= 0 else 0
    for i, seg in enumerate(segs):
        next_base = snapshot[i + 1].base_offset
        by_start = next_base <= log_start_offset
        by_time = cfg.delete and cfg.retention_ms >= 0 and now - seg.largest_timestamp > cfg.retention_ms
        by_size = size_excess >= seg.size and size_excess > 0
        if not (by_start or by_time or by_size):
            break
        size_excess -= seg.size
        result.append(seg)
    return result
