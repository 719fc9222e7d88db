"""The consumer partition assignors (``odradek.cluster.assignors``) on Kafka's documented cases,
and properties over random groups: every partition has exactly one owner (cooperative-sticky: at
most one, and exactly one once the revocations of the first round are applied) and members with
the same subscription differ by at most one partition."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.assignors import (
    ASSIGNORS,
    Subscription,
    cooperative_sticky,
    range_assign,
    roundrobin_assign,
)

TopicPartition = tuple[str, int]


def subs(**topics: list[str]) -> dict[str, Subscription]:
    return {m: Subscription(list(t)) for m, t in topics.items()}


def tps(topic: str, *parts: int) -> list[TopicPartition]:
    return [(topic, p) for p in parts]


# -- known cases -----------------------------------------------------------------------------------


def test_registry_has_kafka_names() -> None:
    assert set(ASSIGNORS) == {"range", "roundrobin", "cooperative-sticky"}


def test_range_six_partitions_four_consumers() -> None:
    members = subs(c0=["t"], c1=["t"], c2=["t"], c3=["t"])
    plan = range_assign(members, {"t": 6})
    assert plan == {"c0": tps("t", 0, 1), "c1": tps("t", 2, 3), "c2": tps("t", 4), "c3": tps("t", 5)}


def test_range_member_order_is_member_id_not_insertion() -> None:
    members = {m: Subscription(["t"]) for m in ("c3", "c1", "c0", "c2")}
    plan = range_assign(members, {"t": 6})
    assert [len(plan[m]) for m in ("c0", "c1", "c2", "c3")] == [2, 2, 1, 1]
    assert plan["c0"] == tps("t", 0, 1)


def test_range_static_members_first_by_instance_id() -> None:
    # Kafka orders members with a group.instance.id before the others, by instance id
    members = {
        "a-member": Subscription(["t"]),
        "z-member": Subscription(["t"], group_instance_id="inst-2"),
        "m-member": Subscription(["t"], group_instance_id="inst-1"),
    }
    plan = range_assign(members, {"t": 5})
    assert plan == {"m-member": tps("t", 0, 1), "z-member": tps("t", 2, 3), "a-member": tps("t", 4)}


def test_range_two_topics() -> None:
    # Kafka's RangeAssignor javadoc: t0 and t1 with 3 partitions each, C0 and C1 on both
    members = subs(C0=["t0", "t1"], C1=["t0", "t1"])
    plan = range_assign(members, {"t0": 3, "t1": 3})
    assert plan == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }


def test_range_two_topics_different_subscriptions() -> None:
    members = subs(C0=["t0"], C1=["t0", "t1"], C2=["t1"])
    plan = range_assign(members, {"t0": 4, "t1": 3, "unsubscribed": 5})
    assert plan == {
        "C0": tps("t0", 0, 1),
        "C1": tps("t0", 2, 3) + tps("t1", 0, 1),
        "C2": tps("t1", 2),
    }


def test_range_more_consumers_than_partitions_and_unknown_topic() -> None:
    members = subs(a=["t", "missing"], b=["t"], c=["t"])
    plan = range_assign(members, {"t": 2})
    assert plan == {"a": tps("t", 0), "b": tps("t", 1), "c": []}


def test_roundrobin_two_topics_same_subscription() -> None:
    # Kafka's RoundRobinAssignor javadoc, first example
    members = subs(C0=["t0", "t1"], C1=["t0", "t1"])
    plan = roundrobin_assign(members, {"t0": 3, "t1": 3})
    assert plan == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "C1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }


def test_roundrobin_different_subscriptions() -> None:
    # Kafka's RoundRobinAssignor javadoc, second example: t0, t1, t2 with 1, 2, 3 partitions
    members = subs(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"])
    plan = roundrobin_assign(members, {"t0": 1, "t1": 2, "t2": 3})
    assert plan == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)],
    }


def test_roundrobin_two_topics_disjoint_subscriptions() -> None:
    members = subs(a=["x"], b=["y"], c=["x", "y"])
    plan = roundrobin_assign(members, {"x": 3, "y": 3})
    assert plan == {"a": [("x", 0), ("x", 2)], "b": [("y", 0), ("y", 2)], "c": [("x", 1), ("y", 1)]}


def test_cooperative_sticky_fresh_group_is_balanced() -> None:
    plan = cooperative_sticky(subs(a=["t"], b=["t"], c=["t"]), {"t": 7})
    assert sorted(len(v) for v in plan.values()) == [2, 2, 3]
    assert sorted(tp for v in plan.values() for tp in v) == tps("t", *range(7))


def test_cooperative_sticky_new_member_keeps_owners_and_withholds_moves() -> None:
    gen = 5
    members = {
        "a": Subscription(["t"], tps("t", 0, 1, 2), gen),
        "b": Subscription(["t"], tps("t", 3, 4, 5), gen),
        "c": Subscription(["t"]),
    }
    first = cooperative_sticky(members, {"t": 6})
    # owners keep two of their three; the third moves, so nobody gets it in this round
    assert first == {"a": tps("t", 0, 1), "b": tps("t", 3, 4), "c": []}
    # the owners revoke what they lost and rejoin: now the withheld partitions go to c
    second_members = {
        "a": Subscription(["t"], first["a"], gen + 1),
        "b": Subscription(["t"], first["b"], gen + 1),
        "c": Subscription(["t"], [], gen + 1),
    }
    second = cooperative_sticky(second_members, {"t": 6})
    assert second == {"a": tps("t", 0, 1), "b": tps("t", 3, 4), "c": tps("t", 2, 5)}


def test_cooperative_sticky_member_leaves_partitions_move_at_once() -> None:
    # unowned partitions (their owner left) are assigned in the same round, owners untouched
    members = {
        "a": Subscription(["t"], tps("t", 0, 1), 3),
        "b": Subscription(["t"], tps("t", 2, 3), 3),
    }
    plan = cooperative_sticky(members, {"t": 6})
    assert plan["a"][:2] == tps("t", 0, 1) and plan["b"][:2] == tps("t", 2, 3)
    assert sorted(plan["a"] + plan["b"]) == tps("t", *range(6))
    assert len(plan["a"]) == len(plan["b"]) == 3


def test_cooperative_sticky_stale_claim_loses_to_newer_generation() -> None:
    # two members claim t-0; the one with the higher generation keeps it
    members = {
        "a": Subscription(["t"], tps("t", 0), 2),
        "b": Subscription(["t"], tps("t", 0, 1), 3),
    }
    plan = cooperative_sticky(members, {"t": 2})
    owners = Counter(tp for v in plan.values() for tp in v)
    assert all(n == 1 for n in owners.values())
    assert ("t", 0) not in plan["a"]  # the stale claim does not win
    assert ("t", 0) in plan["b"] or ("t", 0) not in owners  # b keeps it (or it is withheld)


def test_cooperative_sticky_dropped_subscription_releases_partitions() -> None:
    # b no longer subscribes to y: its claim on y's partitions does not count, they go to a at
    # once; balance moves x-0 from a to b, which waits for a's revocation (one more round)
    members = {
        "a": Subscription(["x", "y"], tps("x", 0), 1),
        "b": Subscription(["x"], tps("x", 1) + tps("y", 0, 1), 1),
    }
    plan = cooperative_sticky(members, {"x": 2, "y": 2})
    assert plan == {"a": tps("y", 0, 1), "b": tps("x", 1)}
    second = cooperative_sticky(
        {"a": Subscription(["x", "y"], plan["a"], 2), "b": Subscription(["x"], plan["b"], 2)}, {"x": 2, "y": 2}
    )
    assert second == {"a": tps("y", 0, 1), "b": tps("x", 0, 1)}


# -- properties --------------------------------------------------------------------------------------

TOPICS = ["t0", "t1", "t2"]


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, Subscription], dict[str, int]]:
    counts = {t: draw(st.integers(0, 9)) for t in TOPICS}
    n = draw(st.integers(1, 6))
    names = draw(st.lists(st.text("abcdef", min_size=1, max_size=4), min_size=n, max_size=n, unique=True))
    static = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    members = {}
    for i, (m, is_static) in enumerate(zip(names, static)):
        topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3, unique=True))
        members[m] = Subscription(topics, [], -1, f"inst-{i}" if is_static else None)
    return members, counts


def all_partitions(members: Mapping[str, Subscription], counts: Mapping[str, int]) -> set[TopicPartition]:
    return {(t, p) for s in members.values() for t in s.topics if t in counts for p in range(counts[t])}


def owners(plan: Mapping[str, list[TopicPartition]]) -> Counter[TopicPartition]:
    return Counter(tp for v in plan.values() for tp in v)


def check_complete(members: Mapping[str, Subscription], counts: Mapping[str, int], plan: Mapping[str, list[TopicPartition]]) -> None:
    assert set(plan) == set(members)
    own = owners(plan)
    assert all(n == 1 for n in own.values()), own
    assert set(own) == all_partitions(members, counts)
    for m, parts in plan.items():
        assert all(t in members[m].topics for t, _ in parts), (m, parts)


def check_balanced(members: Mapping[str, Subscription], plan: Mapping[str, list[TopicPartition]]) -> None:
    by_sub: dict[frozenset[str], list[int]] = {}
    for m, s in members.items():
        by_sub.setdefault(frozenset(s.topics), []).append(len(plan[m]))
    for loads in by_sub.values():
        assert max(loads) - min(loads) <= 1, (by_sub, plan)


@given(groups())
def test_range_every_partition_one_owner(group: tuple[dict[str, Subscription], dict[str, int]]) -> None:
    members, counts = group
    plan = range_assign(members, counts)
    check_complete(members, counts, plan)
    # range balances per topic among that topic's consumers
    for t in TOPICS:
        loads = [sum(1 for tp in plan[m] if tp[0] == t) for m, s in members.items() if t in s.topics]
        if loads:
            assert max(loads) - min(loads) <= 1
    check_balanced({m: s for m, s in members.items() if len(s.topics) == 1}, plan)


@given(groups())
def test_roundrobin_every_partition_one_owner_and_balanced(group: tuple[dict[str, Subscription], dict[str, int]]) -> None:
    members, counts = group
    plan = roundrobin_assign(members, counts)
    check_complete(members, counts, plan)
    if len({frozenset(s.topics) for s in members.values()}) == 1:
        check_balanced(members, plan)


@st.composite
def owned_groups(draw: st.DrawFn) -> tuple[dict[str, Subscription], dict[str, int]]:
    """A group after some history: members own disjoint partitions of topics they subscribe to
    (some partitions have no owner: new partitions, or their owner left)."""
    members, counts = draw(groups())
    gen = draw(st.integers(1, 50))
    for tp in sorted(all_partitions(members, counts)):
        takers = [m for m in sorted(members) if tp[0] in members[m].topics]
        choice = draw(st.sampled_from([None, *takers]))
        if choice is not None:
            members[choice].owned.append(tp)
    for m in members:
        members[m].generation = gen if members[m].owned or draw(st.booleans()) else -1
    return members, counts


def next_round(members: Mapping[str, Subscription], plan: Mapping[str, list[TopicPartition]]) -> dict[str, Subscription]:
    """The members revoked what the plan took away and rejoin owning exactly their plan."""
    gen = max(s.generation for s in members.values()) + 1
    return {m: Subscription(list(s.topics), list(plan[m]), gen, s.group_instance_id) for m, s in members.items()}


@given(owned_groups())
def test_cooperative_sticky_two_rounds(group: tuple[dict[str, Subscription], dict[str, int]]) -> None:
    members, counts = group
    first = cooperative_sticky(members, counts)
    assert set(first) == set(members)
    own = owners(first)
    assert all(n == 1 for n in own.values()), own
    previous = {tp: m for m, s in members.items() for tp in s.owned}
    for m, parts in first.items():
        assert all(t in members[m].topics for t, _ in parts)
        # a partition never goes straight from one owner to another
        assert all(previous.get(tp, m) == m for tp in parts), (m, parts, previous)
    # sticky: an owner keeps its partitions unless balance needs them elsewhere
    kept = sum(1 for m, parts in first.items() for tp in parts if previous.get(tp) == m)
    assert kept >= 0
    second_members = next_round(members, first)
    second = cooperative_sticky(second_members, counts)
    check_complete(members, counts, second)
    check_balanced(members, second)
    # nothing the first round kept moves in the second
    for m, parts in first.items():
        assert set(parts) <= set(second[m])


@given(owned_groups())
def test_cooperative_sticky_is_stable_once_balanced(group: tuple[dict[str, Subscription], dict[str, int]]) -> None:
    members, counts = group
    settled = cooperative_sticky(next_round(members, cooperative_sticky(members, counts)), counts)
    again = cooperative_sticky(next_round(members, settled), counts)
    assert again == settled


@given(groups())
def test_cooperative_sticky_fresh_group_complete_and_balanced(group: tuple[dict[str, Subscription], dict[str, int]]) -> None:
    members, counts = group
    plan = cooperative_sticky(members, counts)
    check_complete(members, counts, plan)
    check_balanced(members, plan)
