"""Properties of the server-side assignors of KIP-848 consumer groups (``uniform``, ``range``):
every subscribed partition goes to exactly one member subscribed to its topic; ``uniform`` is
balanced (within one partition for members with the same subscription; no partition could move
to a less loaded member subscribed to it and narrow the gap otherwise) and sticky (a member
joining or leaving moves no more partitions than the new quotas require); ``range`` gives each
topic's subscribers consecutive ranges differing by at most one partition; racks are preferred
when the balance allows."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.consumer_assignors import MemberSpec, TopicSpec, range_assign, uniform_assign

TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[dict[str, MemberSpec], dict[uuid.UUID, TopicSpec]]:
    topics = {t: TopicSpec(draw(st.integers(0, 12))) for t in TOPIC_IDS[: draw(st.integers(1, 4))]}
    n = draw(st.integers(1, 8))
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    subscription = frozenset(draw(st.sets(st.sampled_from(sorted(topics)), min_size=1)))
    members = {}
    for i in range(n):
        subs = subscription if same else frozenset(draw(st.sets(st.sampled_from(sorted(topics)), min_size=1)))
        static = draw(st.booleans())
        members[f"m{i}"] = MemberSpec(subs, instance_id=f"i{i}" if static else None)
    return members, topics


def _check_complete(members: dict[str, MemberSpec], topics: dict[uuid.UUID, TopicSpec],
                    result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[str, int]:
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for m, parts in result.items():
        for t, ps in parts.items():
            assert t in members[m].topics, f"{m} got {t}, which it does not subscribe to"
            for p in ps:
                assert (t, p) not in owner, f"{t}/{p} given to {owner[(t, p)]} and {m}"
                owner[(t, p)] = m
    subscribed = {t for s in members.values() for t in s.topics}
    assert set(owner) == {(t, p) for t in subscribed for p in range(topics[t].partitions)}
    return {m: sum(len(ps) for ps in result.get(m, {}).values()) for m in members}


@given(groups())
def test_uniform_is_complete_and_balanced(group: tuple[dict[str, MemberSpec], dict[uuid.UUID, TopicSpec]]) -> None:
    members, topics = group
    result = uniform_assign(members, topics)
    counts = _check_complete(members, topics, result)
    if len({s.topics for s in members.values()}) == 1:
        assert max(counts.values()) - min(counts.values()) <= 1
    else:  # no partition could go to a member subscribed to it with at least two fewer
        for m, parts in result.items():
            for t in parts:
                for other, spec in members.items():
                    if t in spec.topics:
                        assert counts[other] >= counts[m] - 1, (m, other, counts)


@given(groups(homogeneous=True), st.integers(0, 3))
def test_uniform_is_sticky_when_a_member_joins_or_leaves(
    group: tuple[dict[str, MemberSpec], dict[uuid.UUID, TopicSpec]], change: int
) -> None:
    members, topics = group
    before = uniform_assign(members, topics)
    subscription = next(iter(members.values())).topics
    current = {m: MemberSpec(s.topics, before[m], s.instance_id) for m, s in members.items()}
    if change % 2 == 0 or len(current) == 1:
        current["a-newcomer"] = MemberSpec(subscription)  # first in member order
    else:
        del current[sorted(current)[change % len(current)]]
    after = uniform_assign(current, topics)
    counts = _check_complete(current, topics, after)
    assert max(counts.values()) - min(counts.values()) <= 1
    # each member keeps everything it had, up to its new count; and the members holding most keep
    # the extra partitions: no fewer partitions stay where they were than the best quotas allow
    kept = 0
    for m, spec in current.items():
        had = {(t, p) for t, ps in spec.assignment.items() for p in ps}
        has = {(t, p) for t, ps in after[m].items() for p in ps}
        assert len(had & has) == min(len(had), counts[m]), (m, had, has)
        kept += len(had & has)
    total = sum(counts.values())
    base, extra = divmod(total, len(current))
    holdings = sorted((sum(len(ps) for ps in s.assignment.values()) for s in current.values()), reverse=True)
    assert kept == sum(min(h, base + (1 if i < extra else 0)) for i, h in enumerate(holdings))
    # the same input gives the same output
    assert uniform_assign(current, topics) == after


@given(groups())
def test_range_gives_each_topics_subscribers_consecutive_ranges(
    group: tuple[dict[str, MemberSpec], dict[uuid.UUID, TopicSpec]]
) -> None:
    members, topics = group
    result = range_assign(members, topics)
    _check_complete(members, topics, result)
    for t in topics:
        subscribers = [m for m in members if t in members[m].topics]
        sizes = [len(result[m].get(t, ())) for m in subscribers]
        if subscribers:
            assert max(sizes) - min(sizes) <= 1
        for m in subscribers:
            ps = sorted(result[m].get(t, ()))
            assert ps == list(range(ps[0], ps[0] + len(ps))) if ps else True


def test_static_members_come_first_in_range_order() -> None:
    t = TOPIC_IDS[0]
    members = {"a": MemberSpec(frozenset({t})), "z": MemberSpec(frozenset({t}), instance_id="x")}
    assert range_assign(members, {t: TopicSpec(3)}) == {"z": {t: frozenset({0, 1})}, "a": {t: frozenset({2})}}


def test_uniform_places_partitions_in_the_racks_of_their_replicas_when_it_can() -> None:
    t = TOPIC_IDS[0]
    racks = {p: frozenset({"east" if p % 2 else "west"}) for p in range(6)}
    members = {"a": MemberSpec(frozenset({t}), rack_id="east"), "b": MemberSpec(frozenset({t}), rack_id="west")}
    result = uniform_assign(members, {t: TopicSpec(6, racks)})
    assert result["a"][t] == {1, 3, 5} and result["b"][t] == {0, 2, 4}
