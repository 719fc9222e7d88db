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

from collections import deque
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


def _current_owners(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[TopicPartition, str]:
    """Who owns what now: claims on existing partitions of topics the member still subscribes to;
    the highest generation wins a partition claimed twice."""
    owner: dict[TopicPartition, str] = {}
    claim_gen: dict[TopicPartition, int] = {}
    for m in _order(members):
        sub = members[m]
        for tp in sub.owned:
            if tp[0] in sub.topics and 0 <= tp[1] < partitions.get(tp[0], 0) and sub.generation >= claim_gen.get(tp, -(1 << 31)):
                owner[tp] = m
                claim_gen[tp] = sub.generation
    return owner


def _sticky(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """A balanced assignment that keeps current owners where balance allows.

    Owners keep what they own; unowned partitions go, those with the fewest eligible members
    first, to the least loaded eligible member; then, while some member could pass a partition
    (directly, or along a chain of members each passing one on) to a member with at least two
    fewer, it does.  Chains that only move partitions their holders did not own before are taken
    first, so a balanced assignment minus some of its partitions is completed without moving any
    owned one (which makes the cooperative protocol settle in its follow-up round), and a
    balanced assignment is left as it is.  The end: no such chain exists, so counts differ by at
    most one among members with the same subscription.
    """
    order = _order(members)
    rank = {m: i for i, m in enumerate(order)}
    subscribed = {m: set(members[m].topics) for m in order}
    topics = sorted({t for s in subscribed.values() for t in s if t in partitions})
    takers_of = {t: [m for m in order if t in subscribed[m]] for t in topics}
    owner = _current_owners(members, partitions)
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
    for tp, m in owner.items():
        assignment[m].append(tp)

    def load(m: str) -> int:
        return len(assignment[m])

    unassigned = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in owner]
    for tp in sorted(unassigned, key=lambda tp: (len(takers_of[tp[0]]), tp)):
        assignment[min(takers_of[tp[0]], key=lambda m: (load(m), rank[m]))].append(tp)

    def chain_from(m: str, zero_only: bool) -> list[tuple[str, str, str]] | None:
        """Moves ``(giver, taker, topic)`` from ``m`` to a member with two fewer, fewest moves of
        owned partitions first (0-1 breadth-first search over members)."""
        dist = {m: 0}
        parent: dict[str, tuple[str, str]] = {}
        queue = deque([m])
        while queue:
            u = queue.popleft()
            cost_by_topic: dict[str, int] = {}
            for tp in assignment[u]:
                cost = 1 if owner.get(tp) == u else 0
                if cost < cost_by_topic.get(tp[0], 2):
                    cost_by_topic[tp[0]] = cost
            for t, cost in cost_by_topic.items():
                if zero_only and cost:
                    continue
                for v in takers_of[t]:
                    if v != u and dist[u] + cost < dist.get(v, 1 << 30):
                        dist[v] = dist[u] + cost
                        parent[v] = (u, t)
                        if cost:
                            queue.append(v)
                        else:
                            queue.appendleft(v)
        ends = [x for x in dist if x != m and load(x) + 1 < load(m)]
        if not ends:
            return None
        x = min(ends, key=lambda x: (dist[x], load(x), rank[x]))
        moves = []
        while x != m:
            u, t = parent[x]
            moves.append((u, x, t))
            x = u
        return moves  # from the end of the chain back to m

    def give(u: str, v: str, t: str) -> None:
        held = [tp for tp in assignment[u] if tp[0] == t]
        tp = max(held, key=lambda tp: (owner.get(tp) != u, tp))  # not owned before first, then the highest
        assignment[u].remove(tp)
        assignment[v].append(tp)

    while True:
        moves = None
        lightest = min((load(m) for m in order), default=0)
        for zero_only in (True, False):
            for m in sorted(order, key=lambda m: (-load(m), rank[m])):
                if load(m) - lightest < 2:
                    break
                moves = chain_from(m, zero_only)
                if moves:
                    break
            if moves:
                break
        if not moves:
            break
        for u, v, t in moves:
            give(u, v, t)
    return {m: sorted(tps) for m, tps in assignment.items()}


def cooperative_sticky(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Sticky, and a partition changing owner is withheld until its owner has revoked it."""
    target = _sticky(members, partitions)
    # only valid ownership counts (as in the sticky step): a claim on a topic the member dropped,
    # or a stale claim beaten by a newer generation, does not hold a partition back
    owned_by = _current_owners(members, partitions)
    result: dict[str, list[TopicPartition]] = {}
    for m, tps in target.items():
        result[m] = [tp for tp in tps if owned_by.get(tp, m) == m]
    return result


ASSIGNORS = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "cooperative-sticky": cooperative_sticky,
}
