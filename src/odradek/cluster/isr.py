"""The in-sync replica rules a partition leader applies, as pure functions (Kafka's Partition).

* The high watermark is the smallest log end offset in the ISR (the leader's own included).
* A follower is caught up at a fetch that reaches the leader's log end offset, or that reaches
  the log end the leader had at the follower's previous fetch (Kafka's lastCaughtUpTime rule).
* A follower that has not been caught up for ``replica.lag.time.max.ms`` leaves the ISR.
* A follower rejoins once it has everything up to the HW and has reached the start offset of
  the leader's current epoch.
* After a version-checked write of the ISR (or a lost race), the leader takes the stored ISR only
  while it still leads at the epoch it wrote for and holds no newer state than the stored one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["adopt_stored_isr", "can_join_isr", "caught_up_at", "high_watermark", "lagging_followers"]


def high_watermark(leader: int, leader_leo: int, isr: Sequence[int], follower_leo: Mapping[int, int]) -> int:
    if len(isr) == 1 and isr[0] == leader:
        return leader_leo  # the leader alone is in sync
    return min([leader_leo] + [follower_leo.get(r, 0) for r in isr if r != leader])


def caught_up_at(
    fetch_offset: int, leader_leo: int, now_ms: int, previous: tuple[int, int] | None, caught_up: int | None
) -> int | None:
    """When the follower was last caught up after a fetch from ``fetch_offset`` (None: never);
    ``previous`` is (time, leader log end) of its previous fetch."""
    if fetch_offset >= leader_leo:
        return now_ms
    if previous is not None and fetch_offset >= previous[1]:
        return max(caught_up or 0, previous[0])
    return caught_up


def lagging_followers(
    leader: int, isr: Sequence[int], caught_up: Mapping[int, int], now_ms: int, max_lag_ms: int
) -> list[int]:
    return [r for r in isr if r != leader and now_ms - caught_up.get(r, 0) > max_lag_ms]


def can_join_isr(
    replica: int, isr: Sequence[int], replicas: Sequence[int], follower_leo: int, hw: int, epoch_start: int
) -> bool:
    if replica in isr or replica not in replicas:
        return False
    return follower_leo >= hw and follower_leo >= epoch_start


def adopt_stored_isr(
    me: int,
    written_epoch: int,
    is_leader: bool,
    leader_epoch: int,
    partition_epoch: int,
    stored_leader: int,
    stored_epoch: int,
    stored_version: int,
) -> bool:
    """Whether the leader takes the ISR the store holds at ``stored_version`` (written by it or,
    after a lost race, by someone else): only while the store names it leader at the epoch it
    wrote for, it still leads at that epoch, and no newer state (a later LeaderAndIsr) reached it."""
    return (
        stored_leader == me
        and stored_epoch == written_epoch
        and is_leader
        and leader_epoch == stored_epoch
        and partition_epoch <= stored_version
    )
