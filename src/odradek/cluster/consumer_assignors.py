"""Server-side partition assignors of KIP-848 consumer groups (pure functions).

The group coordinator computes a consumer group's target assignment itself (the members no
longer assign: they only say which topics they want and, optionally, which assignor).  An
assignor takes every member's subscription (topic ids), rack and the partitions it has in the
current target assignment, and every subscribed topic's partition count and the racks of each
partition's replicas, and returns the new target assignment of every member.

* ``uniform`` (Kafka's UniformAssignor, the default): balanced and sticky.  When all the members
  subscribe to the same topics, the counts of partitions differ by at most one, and a member keeps
  every partition it has up to its new quota (those that must move are the fewest possible, the
  members holding most keep their extra one).  When subscriptions differ, every partition goes
  to the least loaded member subscribed to its topic, then partitions move from a member to a
  less loaded one subscribed to the topic while that lowers the difference, partitions already
  placed staying where they are whenever the balance allows.  Racks are a preference: a
  partition to be placed goes to a member in one of the racks of its replicas when one has room.
* ``range`` (Kafka's server-side RangeAssignor): per topic, its subscribers in order (static
  members first, by instance id, then by member id) get consecutive ranges, the first
  ``partitions % subscribers`` one partition more, so that co-partitioned topics land together.

Both are deterministic: the same input gives the same output (members and partitions are taken
in a fixed order).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "MemberSpec",
    "TopicSpec",
    "assignor_name",
    "range_assign",
    "uniform_assign",
]

#: partitions by topic id (each member's, and the target assignment's)
Assignment = dict[uuid.UUID, frozenset[int]]
TopicPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member."""

    topics: frozenset[uuid.UUID]
    #: the partitions the member has in the current target assignment (stickiness)
    assignment: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    instance_id: str | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What an assignor knows of a subscribed topic."""

    partitions: int
    #: the racks of each partition's replicas (missing: unknown)
    racks: Mapping[int, frozenset[str]] = field(default_factory=dict)


def _order(members: Mapping[str, MemberSpec]) -> list[str]:
    """Kafka's member order: static members first, by instance id, then the others by member id."""
    return sorted(members, key=lambda m: (members[m].instance_id is None, members[m].instance_id or "", m))


def _topic_key(tid: uuid.UUID) -> str:
    return str(tid)


def _holdings(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec], order: list[str]
) -> tuple[dict[str, list[TopicPartition]], set[TopicPartition]]:
    """The partitions each member may keep: those of its current assignment that exist and that
    it still subscribes to (a partition two members claim stays with the first in order)."""
    held: dict[str, list[TopicPartition]] = {}
    taken: set[TopicPartition] = set()
    for m in order:
        spec = members[m]
        mine: list[TopicPartition] = []
        for tid in sorted(spec.assignment, key=_topic_key):
            topic = topics.get(tid)
            if topic is None or tid not in spec.topics:
                continue
            for p in sorted(spec.assignment[tid]):
                tp = (tid, p)
                if 0 <= p < topic.partitions and tp not in taken:
                    taken.add(tp)
                    mine.append(tp)
        held[m] = mine
    return held, taken


def _result(held: Mapping[str, list[TopicPartition]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for m, tps in held.items():
        by_topic: dict[uuid.UUID, set[int]] = defaultdict(set)
        for tid, p in tps:
            by_topic[tid].add(p)
        out[m] = {tid: frozenset(ps) for tid, ps in by_topic.items()}
    return out


def uniform_assign(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]) -> dict[str, Assignment]:
    """Kafka's ``uniform`` assignor (see the module docstring)."""
    if not members:
        return {}
    order = _order(members)
    subscriptions = {frozenset(members[m].topics & topics.keys()) for m in order}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, topics, order, next(iter(subscriptions)))
    return _uniform_heterogeneous(members, topics, order)


def _uniform_homogeneous(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec], order: list[str], subscribed: frozenset[uuid.UUID]
) -> dict[str, Assignment]:
    held, _taken = _holdings(members, topics, order)
    total = sum(topics[t].partitions for t in subscribed)
    base, extra = divmod(total, len(order))
    # the members holding most keep their extra partition: the fewest partitions move
    by_holding = sorted(order, key=lambda m: -len(held[m]))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    for m in order:
        if len(held[m]) > quota[m]:
            held[m] = held[m][: quota[m]]
    placed = {tp for tps in held.values() for tp in tps}
    pool = [(tid, p) for tid in sorted(subscribed, key=_topic_key) for p in range(topics[tid].partitions)
            if (tid, p) not in placed]
    _fill(members, topics, order, held, quota, pool)
    return _result(held)


def _fill(
    members: Mapping[str, MemberSpec],
    topics: Mapping[uuid.UUID, TopicSpec],
    order: list[str],
    held: dict[str, list[TopicPartition]],
    quota: Mapping[str, int],
    pool: list[TopicPartition],
) -> None:
    """Place the ``pool`` partitions on members with room below their quota: first on a member
    in a rack of the partition's replicas, then in member order."""
    room = {m: quota[m] - len(held[m]) for m in order}
    by_rack: dict[str, list[str]] = defaultdict(list)
    for m in order:
        rack = members[m].rack_id
        if rack is not None and room[m] > 0:
            by_rack[rack].append(m)
    rest: list[TopicPartition] = []
    if by_rack:
        for tp in pool:
            chosen = None
            for rack in sorted(topics[tp[0]].racks.get(tp[1], ())):
                candidates = by_rack.get(rack)
                while candidates and room[candidates[0]] <= 0:
                    candidates.pop(0)
                if candidates:
                    chosen = candidates[0]
                    break
            if chosen is None:
                rest.append(tp)
            else:
                held[chosen].append(tp)
                room[chosen] -= 1
    else:
        rest = pool
    open_members = [m for m in order if room[m] > 0]
    for i, tp in enumerate(rest):
        while open_members and room[open_members[i % len(open_members)]] <= 0:
            open_members.pop(i % len(open_members))
        if not open_members:
            raise AssertionError("uniform assignor: partitions left without a member")  # quotas cover them all
        m = open_members[i % len(open_members)]
        held[m].append(tp)
        room[m] -= 1


def _uniform_heterogeneous(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec], order: list[str]
) -> dict[str, Assignment]:
    held, taken = _holdings(members, topics, order)
    subscribers: dict[uuid.UUID, list[str]] = defaultdict(list)
    for m in order:
        for tid in members[m].topics:
            if tid in topics:
                subscribers[tid].append(m)
    count = {m: len(held[m]) for m in order}
    rank = {m: i for i, m in enumerate(order)}
    # topics with the fewest subscribers first: their partitions have the fewest places to go
    for tid in sorted(subscribers, key=lambda t: (len(subscribers[t]), _topic_key(t))):
        eligible = subscribers[tid]
        racks = topics[tid].racks
        for p in range(topics[tid].partitions):
            if (tid, p) in taken:
                continue
            prefer = racks.get(p, frozenset())
            m = min(eligible, key=lambda x: (count[x], members[x].rack_id not in prefer, rank[x]))
            held[m].append((tid, p))
            count[m] += 1
    # then move partitions from a member to a less loaded one subscribed to their topic while
    # that narrows the gap (each move lowers the sum of squared counts: this ends)
    moved = True
    while moved:
        moved = False
        for giver in sorted(order, key=lambda x: (-count[x], rank[x])):
            for tp in reversed(list(held[giver])):
                eligible = subscribers[tp[0]]
                receiver = min(eligible, key=lambda x: (count[x], rank[x]))
                if count[receiver] < count[giver] - 1:
                    held[giver].remove(tp)
                    held[receiver].append(tp)
                    count[giver] -= 1
                    count[receiver] += 1
                    moved = True
    return _result(held)


def range_assign(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]) -> dict[str, Assignment]:
    """Kafka's server-side ``range`` assignor (see the module docstring)."""
    order = _order(members)
    held: dict[str, list[TopicPartition]] = {m: [] for m in order}
    for tid in sorted(topics, key=_topic_key):
        subscribed = [m for m in order if tid in members[m].topics]
        if not subscribed:
            continue
        per, extra = divmod(topics[tid].partitions, len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            length = per + (1 if i < extra else 0)
            held[m].extend((tid, p) for p in range(start, start + length))
            start += length
    return _result(held)


AssignorFn = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, TopicSpec]], dict[str, Assignment]]

#: the server-side assignors by name (``group.consumer.assignors``, ``group.remote.assignor``)
ASSIGNORS: dict[str, AssignorFn] = {"uniform": uniform_assign, "range": range_assign}

#: Kafka's class names of its assignors, as ``group.consumer.assignors`` lists them
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_name(configured: str) -> str | None:
    """The assignor a ``group.consumer.assignors`` entry names (a short name or Kafka's class
    name), or None when it is none of ours."""
    name = configured.strip()
    name = _CLASS_NAMES.get(name, name)
    return name if name in ASSIGNORS else None
