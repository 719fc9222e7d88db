"""Limits that bound what one request may make the broker do, decided before any work is done.

A topic's partitions cost file descriptors for as long as the broker runs (its segment files and
indexes), so the number of partitions one broker can host is bounded by the process's descriptor
limit: ``max.broker.partitions`` (KIP-578's name) defaults to a budget derived from
``RLIMIT_NOFILE`` (after the broker raised its soft limit to the hard one) — what is left after a
reserve for connections and the broker's own files, divided by the descriptors one partition
uses.  ``max.partitions.per.topic`` and ``max.partitions.per.request`` bound one topic and one
CreateTopics / CreatePartitions request.  Requests beyond them get POLICY_VIOLATION with a message
naming the limit; nothing is written.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

__all__ = ["FDS_PER_PARTITION", "PartitionBudget", "fd_limit", "partition_budget"]

#: descriptors budgeted per partition.  Storage holds one per segment file (indexes are kept in
#: memory or mapped only while read; large sealed indexes hold one more while mapped): a new
#: partition costs 1, one with four segments 4.  5 leaves room for a few segments each.
FDS_PER_PARTITION = 5
#: descriptors kept for connections, the metadata store, checkpoints and the interpreter: a
#: quarter of the limit, at least this many
MIN_RESERVE = 128


def fd_limit() -> int:
    """The process's descriptor limit (the soft RLIMIT_NOFILE; unlimited counts as 2**20)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@dataclass(frozen=True, slots=True)
class PartitionBudget:
    partitions: int  # how many partitions this broker may host
    derived: bool  # True: from the descriptor limit, False: max.broker.partitions
    fd_limit: int
    reserve: int

    def describe(self) -> str:
        if not self.derived:
            return f"max.broker.partitions={self.partitions}"
        return (
            f"{self.partitions}, derived from the file descriptor limit {self.fd_limit} (ulimit -n): "
            f"{self.fd_limit} - {self.reserve} reserved for connections, / {FDS_PER_PARTITION} per partition; "
            f"raise the limit or set max.broker.partitions"
        )


def partition_budget(configured: int, limit: int | None = None) -> PartitionBudget:
    """``max.broker.partitions`` if set (>= 0), else the budget the descriptor limit allows."""
    lim = fd_limit() if limit is None else limit
    reserve = max(MIN_RESERVE, lim // 4)
    if configured >= 0:
        return PartitionBudget(configured, False, lim, reserve)
    return PartitionBudget(max(0, (lim - reserve) // FDS_PER_PARTITION), True, lim, reserve)
