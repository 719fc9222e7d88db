"""Consumer partition assignors, run by the group leader (pure functions).

Each takes the members' subscriptions — ``{member id: Subscription}`` with the topics, the
partitions the member owns now and its generation — and the partition count of every topic, and
returns ``{member id: [(topic, partition), ...]}``.  Members are ordered by group instance id when
they have one (static members keep their place), else by member id, as Kafka orders them.

* ``range`` (Kafka's RangeAssignor, the seeds' formula with the rounding that leaves no partition
  without an owner): per topic, the first ``n % c`` consumers get ``n // c + 1`` partitions and the
  rest ``n // c`` — 6 partitions over 4 consumers give 2, 2, 1, 1.
* ``roundrobin``: all subscribed partitions, sorted, dealt in turn to the consumers subscribed to
  their topic.
* ``cooperative-sticky``: as balanced as possible (partition counts differ by at most one among
  members with the same subscription) while keeping every partition with its current owner where
  that allows; a partition that must change owner is left unassigned for one rebalance, so its
  old owner revokes it before the new one takes it (incremental cooperative rebalancing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ASSIGNORS", "Subscription", "cooperative_sticky", "range_assign", "roundrobin_assign"]

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class Subscription:
    topics: list[str]
    owned: list[TopicPartition] = field(default_factory=list)
    generation: int = -1
    group_instance_id: str | None = None


def _order(members: Mapping[str, Subscription]) -> list[str]:
    return sorted(members, key=lambda m: (members[m].group_instance_id is None, members[m].group_instance_id or m, m))


def range_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    order = _order(members)
    topics = sorted({t for s in members.values() for t in s.topics if t in partitions})
    for topic in topics:
        consumers = [m for m in order if topic in members[m].topics]
        n, c = partitions[topic], len(consumers)
        if c == 0:
            continue
        per, extra = divmod(n, c)
        for i, m in enumerate(consumers):
            start = i * per + min(i, extra)
            length = per + (1 if i < extra else 0)
            result[m].extend((topic, p) for p in range(start, start + length))
    return result


def roundrobin_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    order = _order(members)
    if not order:
        return result
    all_tps = sorted((t, p) for t in {t for s in members.values() for t in s.topics if t in partitions} for p in range(partitions[t]))
    i = 0
    for tp in all_tps:
        for _ in range(len(order)):
            m = order[i % len(order)]
            i += 1
            if tp[0] in members[m].topics:
                result[m].append(tp)
                break
    return result


def _sticky(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """A balanced assignment that keeps current owners where balance allows."""
    order = _order(members)
    subscribed = {m: set(members[m].topics) for m in order}
    all_tps = sorted((t, p) for t in {t for s in subscribed.values() for t in s if t in partitions} for p in range(partitions[t]))
    valid = set(all_tps)
    # current owners: the highest generation wins a partition claimed twice
    owner: dict[TopicPartition, str] = {}
    claim_gen: dict[TopicPartition, int] = {}
    for m in order:
        for tp in members[m].owned:
            if tp in valid and tp[0] in subscribed[m] and members[m].generation >= claim_gen.get(tp, -(1 << 31)):
                owner[tp] = m
                claim_gen[tp] = members[m].generation
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
    for tp, m in owner.items():
        assignment[m].append(tp)
    for m in order:
        assignment[m].sort()
    unassigned = [tp for tp in all_tps if tp not in owner]
    # capacity: an even share of the partitions each member can take
    eligible = {tp: [m for m in order if tp[0] in subscribed[m]] for tp in all_tps}

    def load(m: str) -> int:
        return len(assignment[m])

    # trim members above the ceiling of the share of what they could take
    total_members = max(len(order), 1)
    ceiling = -(-len(all_tps) // total_members)
    for m in order:
        while load(m) > ceiling:
            unassigned.append(assignment[m].pop())
    # give unassigned partitions to the least loaded eligible member
    for tp in sorted(unassigned):
        candidates = eligible.get(tp) or []
        if not candidates:
            continue
        target = min(candidates, key=lambda m: (load(m), order.index(m)))
        assignment[target].append(tp)
    # rebalance: move partitions from the most to the least loaded member while it helps
    moved = True
    while moved:
        moved = False
        for m in sorted(order, key=load, reverse=True):
            for tp in sorted(assignment[m], reverse=True):
                takers = [x for x in eligible[tp] if x != m and load(x) + 1 < load(m)]
                if takers:
                    taker = min(takers, key=lambda x: (load(x), order.index(x)))
                    assignment[m].remove(tp)
                    assignment[taker].append(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: sorted(tps) for m, tps in assignment.items()}


def cooperative_sticky(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Sticky, and a partition changing owner is withheld until its owner has revoked it."""
    target = _sticky(members, partitions)
    owned_by = {tp: m for m, s in members.items() for tp in s.owned}
    result: dict[str, list[TopicPartition]] = {}
    for m, tps in target.items():
        result[m] = [tp for tp in tps if owned_by.get(tp) in (None, m) or owned_by.get(tp) not in members]
    return result


ASSIGNORS = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "cooperative-sticky": cooperative_sticky,
}
