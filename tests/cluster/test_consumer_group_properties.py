"""Properties of KIP-848 reconciliation, on the pure state machine with simulated clients
(:mod:`tests.cluster.consumer_sim`).

Whatever sequence of joins, leaves (dynamic and static), crashes, heartbeats, lost responses,
subscription changes and new partitions:

* no partition is ever owned by two clients (each takes its assignment as soon as a response
  gives it), nor by two members in the coordinator's state;
* the records the coordinator wrote, replayed into a fresh state (a coordinator failover), give
  the same members, epochs, assignments and targets;
* once the members keep heartbeating with nothing new, the group becomes Stable and every
  partition of every subscribed topic is assigned, to exactly one member subscribed to it (the
  ``uniform`` assignor balancing a homogeneous group to within one partition).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cluster.consumer_group import ConsumerGroupState, MemberState
from tests.cluster.consumer_sim import GROUP, Sim, topic_id

TOPICS = {"a": 4, "b": 3, "c": 1}
SUBSCRIPTIONS = st.sampled_from([("a",), ("b",), ("a", "b"), ("a", "b", "c"), ("c",)])

op = st.one_of(
    st.tuples(st.just("join"), SUBSCRIPTIONS),
    st.tuples(st.just("join_static"), SUBSCRIPTIONS),
    st.tuples(st.just("heartbeat"), st.integers(0, 7)),
    st.tuples(st.just("lose"), st.integers(0, 7)),
    st.tuples(st.just("leave"), st.integers(0, 7)),
    st.tuples(st.just("static_restart"), st.integers(0, 7)),
    st.tuples(st.just("crash"), st.integers(0, 7)),
    st.tuples(st.just("subscribe"), st.integers(0, 7), SUBSCRIPTIONS),
    st.tuples(st.just("grow"), st.sampled_from(sorted(TOPICS)), st.integers(1, 3)),
)


def _pick(sim: Sim, i: int) -> str | None:
    members = sorted(sim.clients)
    return members[i % len(members)] if members else None


def _run(sim: Sim, ops: list[tuple[object, ...]]) -> None:
    statics = 0
    for o in ops:
        kind = o[0]
        if kind == "join":
            sim.join(o[1])  # type: ignore[arg-type]
        elif kind == "join_static":
            statics += 1
            sim.join(o[1], instance_id=f"i{statics}")  # type: ignore[arg-type]
        elif kind == "grow":
            sim.grow(str(o[1]), sim.topics[str(o[1])] + int(o[2]))  # type: ignore[call-overload]
        else:
            mid = _pick(sim, int(o[1]))  # type: ignore[call-overload]
            if mid is None:
                continue
            c = sim.clients[mid]
            if kind == "heartbeat":
                sim.heartbeat(mid)
            elif kind == "lose":
                sim.heartbeat(mid, lose=True)
            elif kind == "leave":
                sim.leave(mid)
            elif kind == "crash":
                sim.crash(mid)
            elif kind == "subscribe":
                sim.subscribe(mid, o[2])  # type: ignore[arg-type]
            elif kind == "static_restart" and c.instance_id is not None:
                gone = sim.static_leave(mid)
                sim.join(gone.topics, instance_id=gone.instance_id)
        sim.owned_by_clients()
        sim.check_coordinator()


def _state(sim_groups: object) -> object:
    g = sim_groups.groups.get(GROUP)  # type: ignore[attr-defined]
    if g is None:
        return None
    members = {
        mid: (m.member_epoch, m.previous_member_epoch, m.state, dict(m.assigned), dict(m.pending_revocation),
              m.subscribed_topic_names, m.instance_id)
        for mid, m in g.members.items()
    }
    return (g.group_epoch, g.assignment_epoch, members, {k: dict(v) for k, v in g.target.items()},
            dict(g.subscription_metadata), dict(g.owners), g.state)


@settings(max_examples=150)
@given(st.lists(op, max_size=40), st.sampled_from(["uniform", "range"]))
def test_no_partition_has_two_owners_and_every_partition_is_assigned_once_stable(
    ops: list[tuple[object, ...]], assignor: str
) -> None:
    sim = Sim(TOPICS, assignor)
    _run(sim, ops)
    assert _state(sim.replayed()) == _state(sim.cg)
    sim.stabilize()
    sim.check_coordinator()
    assert _state(sim.replayed()) == _state(sim.cg)
    g = sim.cg.groups.get(GROUP)
    owned = sim.owned_by_clients()
    subscribed = {t for c in sim.clients.values() for t in c.topics}
    everything = {(topic_id(t), p) for t in subscribed for p in range(sim.topics[t])}
    if not sim.clients:
        assert g is None or g.state is ConsumerGroupState.EMPTY
        return
    assert g is not None and g.state is ConsumerGroupState.STABLE
    assert set(owned) == everything
    for tp, mid in owned.items():
        assert any(topic_id(t) == tp[0] for t in sim.clients[mid].topics)
    for m in g.members.values():
        assert m.state is MemberState.STABLE and m.member_epoch == g.assignment_epoch
        assert dict(m.assigned) == dict(g.target[m.member_id])
    if assignor == "uniform" and len({c.topics for c in sim.clients.values()}) == 1:
        counts = [sum(len(ps) for ps in c.owned.values()) for c in sim.clients.values()]
        assert max(counts) - min(counts) <= 1


@given(st.lists(SUBSCRIPTIONS, min_size=1, max_size=6), st.integers(0, 5))
def test_a_static_member_that_comes_back_keeps_its_partitions_and_nobody_moves(
    subscriptions: list[tuple[str, ...]], which: int
) -> None:
    sim = Sim(TOPICS)
    ids = [sim.join(s, instance_id=f"i{n}") for n, s in enumerate(subscriptions)]
    sim.stabilize()
    g = sim.cg.groups[GROUP]
    epoch = g.group_epoch
    leaving = ids[which % len(ids)]
    before = {sim.clients[m].instance_id: dict(sim.clients[m].owned) for m in sim.clients}
    gone = sim.static_leave(leaving)
    for mid in list(sim.clients):  # the others carry on meanwhile
        sim.heartbeat(mid)
    back = sim.join(gone.topics, instance_id=gone.instance_id)
    sim.stabilize()
    after = {sim.clients[m].instance_id: dict(sim.clients[m].owned) for m in sim.clients}
    assert after == before
    assert sim.cg.groups[GROUP].group_epoch == epoch  # no rebalance
    assert back != leaving
