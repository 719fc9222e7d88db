"""The KIP-848 state machine's rules, one by one, on the pure code (no broker): fencing, static
membership, revocation before assignment, regular expressions, the conversion of a live group
between the classic and the consumer protocol, and the records a failover replays."""

from __future__ import annotations

import dataclasses

import pytest

from odradek.cluster.assignment import decode_assignment, encode_subscription
from odradek.cluster.consumer_group import (
    ClassicGroupRecord,
    ConsumerGroupConfig,
    ConsumerGroups,
    ConsumerGroupState,
    HeartbeatRequest,
    MemberState,
    validate_heartbeat,
)
from odradek.cluster.group import GroupCoordinatorState, GroupLimits, GroupState
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.data import ConsumerProtocolSubscription
from tests.cluster.consumer_sim import GROUP, Sim, image, topic_id

A = topic_id("a")


def _join(sim: Sim, n: int, topics: tuple[str, ...] = ("a",)) -> list[str]:
    ids = [sim.join(topics) for _ in range(n)]
    sim.stabilize()
    return ids


def test_a_lost_revocation_keeps_the_partition_from_others_until_the_member_reports_it_gone() -> None:
    sim = Sim({"a": 4})
    (first,) = _join(sim, 1)
    assert sim.clients[first].owned == {A: frozenset(range(4))}
    second = sim.join(("a",))
    assert sim.clients[second].owned == {}  # everything is still the first member's
    sim.heartbeat(first, lose=True)  # told to revoke two partitions: the answer is lost
    assert sim.clients[first].owned == {A: frozenset(range(4))}
    sim.heartbeat(second)
    assert sim.clients[second].owned == {}  # not while the first may still own them
    g = sim.cg.groups[GROUP]
    assert g.members[first].state is MemberState.UNREVOKED_PARTITIONS
    assert g.members[second].state is MemberState.UNRELEASED_PARTITIONS
    sim.heartbeat(first)  # full request: still owns them, is told again and revokes
    assert len(sim.clients[first].owned[A]) == 2
    sim.heartbeat(first)  # reports them gone
    sim.heartbeat(second)
    assert len(sim.clients[second].owned[A]) == 2
    sim.owned_by_clients()


def test_a_member_waiting_for_partitions_heartbeats_sooner() -> None:
    sim = Sim({"a": 4})
    (first,) = _join(sim, 1)
    interval = sim.config.heartbeat_interval_ms
    second = sim.join(("a",))
    waiting = sim.heartbeat(second)
    assert sim.cg.groups[GROUP].members[second].state is MemberState.UNRELEASED_PARTITIONS
    assert waiting.heartbeat_interval_ms == interval // 10  # type: ignore[union-attr]
    sim.heartbeat(first)
    sim.heartbeat(first)
    done = sim.heartbeat(second)
    assert sim.cg.groups[GROUP].members[second].state is MemberState.STABLE
    assert done.heartbeat_interval_ms == interval  # type: ignore[union-attr]


def test_epochs_the_coordinator_does_not_know_are_fenced() -> None:
    sim = Sim({"a": 2})
    (m,) = _join(sim, 1)
    c = sim.clients[m]
    epoch = c.epoch
    with pytest.raises(KafkaError) as ahead:
        sim.cg.heartbeat(sim.now, HeartbeatRequest(GROUP, m, epoch + 1, owned={}), sim.image)
    assert ahead.value.code is ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(KafkaError) as unknown:
        sim.cg.heartbeat(sim.now, HeartbeatRequest(GROUP, "someone", epoch, owned={}), sim.image)
    assert unknown.value.code is ErrorCode.UNKNOWN_MEMBER_ID
    for _ in range(3):
        sim.join(("a",))
    sim.stabilize()
    g = sim.cg.groups[GROUP]
    member = g.members[m]
    older = next(e for e in range(1, member.member_epoch) if e != member.previous_member_epoch)
    # the previous epoch is accepted when what it owns is no more than it has (a lost answer) ...
    ok = sim.cg.heartbeat(sim.now, HeartbeatRequest(GROUP, m, member.previous_member_epoch,
                                                    owned=dict(member.assigned)), sim.image)
    assert ok.response.member_epoch == member.member_epoch  # type: ignore[attr-defined]
    # ... not an older one
    with pytest.raises(KafkaError) as behind:
        sim.cg.heartbeat(sim.now, HeartbeatRequest(GROUP, m, older, owned={}), sim.image)
    assert behind.value.code is ErrorCode.FENCED_MEMBER_EPOCH
    # nor the previous one from a member owning more than it has
    with pytest.raises(KafkaError) as more:
        sim.cg.heartbeat(sim.now, HeartbeatRequest(GROUP, m, member.previous_member_epoch,
                                                   owned={A: frozenset({0, 1})}), sim.image)
    assert more.value.code is ErrorCode.FENCED_MEMBER_EPOCH


def test_a_static_member_cannot_join_twice_until_it_left() -> None:
    sim = Sim({"a": 2})
    m = sim.join(("a",), instance_id="i1")
    sim.stabilize()
    with pytest.raises(KafkaError) as twice:
        sim.cg.heartbeat(sim.now, HeartbeatRequest(GROUP, "other", 0, instance_id="i1", rebalance_timeout_ms=1,
                                                   subscribed_topic_names=("a",), owned={}), sim.image)
    assert twice.value.code is ErrorCode.UNRELEASED_INSTANCE_ID
    with pytest.raises(KafkaError) as fenced:
        sim.cg.heartbeat(sim.now, HeartbeatRequest(GROUP, "other", 3, instance_id="i1", owned={}), sim.image)
    assert fenced.value.code is ErrorCode.FENCED_INSTANCE_ID
    owned = dict(sim.clients[m].owned)
    gone = sim.static_leave(m)
    assert sim.cg.groups[GROUP].members[m].member_epoch == -2
    back = sim.join(gone.topics, instance_id="i1")
    assert sim.clients[back].owned == owned
    assert m not in sim.cg.groups[GROUP].members


def test_session_and_rebalance_timeouts_fence_members() -> None:
    sim = Sim({"a": 4})
    ids = _join(sim, 2)
    g = sim.cg.groups[GROUP]
    # a third member makes one of the others revoke; it never answers within its rebalance timeout
    sim.join(("a",))
    for mid in ids:
        sim.heartbeat(mid, lose=True)
    (first,) = [mid for mid in ids if g.members[mid].state is MemberState.UNREVOKED_PARTITIONS]
    (second,) = [mid for mid in ids if mid != first]
    _epoch, deadline = g.rebalance_deadline[first]
    assert sim.cg.next_deadline() is not None and sim.cg.next_deadline() <= deadline
    for outcome in sim.cg.tick(deadline, sim.image):
        sim.records.extend(outcome.records)
    assert first not in sim.cg.groups[GROUP].members
    # and a member that stops heartbeating goes after its session
    later = sim.cg.groups[GROUP].session_deadline[second]
    for outcome in sim.cg.tick(later, sim.image):
        sim.records.extend(outcome.records)
    assert second not in sim.cg.groups[GROUP].members


def test_a_regular_expression_is_resolved_against_the_topics_and_again_when_they_change() -> None:
    sim = Sim({"orders-1": 2, "orders-2": 1, "other": 3})
    cg = sim.cg
    out = cg.heartbeat(sim.now, HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=1000,
                                                 subscribed_topic_regex="orders-.*", owned={}), sim.image)
    assert sorted(p for ps in out.response.assignment.values() for p in ps) == [0, 0, 1]  # type: ignore[union-attr]
    g = cg.groups[GROUP]
    assert g.resolved["orders-.*"].topics == {"orders-1", "orders-2"}
    sim.grow("orders-3", 2)
    out = cg.heartbeat(sim.now, HeartbeatRequest(GROUP, "m", g.members["m"].member_epoch, owned=dict(g.members["m"].assigned)), sim.image)
    assert g.resolved["orders-.*"].topics == {"orders-1", "orders-2", "orders-3"}
    assert topic_id("orders-3") in out.response.assignment  # type: ignore[union-attr,operator]
    with pytest.raises(KafkaError) as bad:
        cg.heartbeat(sim.now, HeartbeatRequest(GROUP, "n", 0, rebalance_timeout_ms=1000,
                                               subscribed_topic_regex="(a)\\1", owned={}), sim.image)
    assert bad.value.code is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert "n" not in cg.groups[GROUP].members


def test_malformed_heartbeats_get_kafkas_messages() -> None:
    def refused(**fields: object) -> tuple[ErrorCode, str]:
        base = dict(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1000,
                    subscribed_topic_names=("a",), owned={})
        base.update(fields)
        with pytest.raises(KafkaError) as exc:
            validate_heartbeat(HeartbeatRequest(**base), ["uniform", "range"])  # type: ignore[arg-type]
        return exc.value.code, exc.value.message

    assert refused(member_id="") == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    assert refused(group_id="  ") == (ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    assert refused(instance_id="") == (ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
    assert refused(rebalance_timeout_ms=-1)[1] == "RebalanceTimeoutMs must be provided in first request."
    assert refused(owned=None)[1] == "TopicPartitions must be empty when (re-)joining."
    assert refused(subscribed_topic_names=())[1] == (
        "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    assert refused(member_epoch=-3)[1] == "MemberEpoch is invalid."
    assert refused(member_epoch=-2)[1] == "InstanceId can't be null."
    assert refused(server_assignor="sticky")[0] is ErrorCode.UNSUPPORTED_ASSIGNOR


def _classic_group(state: GroupCoordinatorState, now: int) -> tuple[str, str]:
    """A Stable classic group of two consumer-protocol members (range) owning a's 4 partitions."""
    meta = encode_subscription(ConsumerProtocolSubscription(topics=["a"]), 1)
    ids = []
    for member_id in ("", "", None):  # two join, the first joins again for the second's rebalance
        _r, _e, mid = state.join(now, group_id=GROUP, member_id=ids[0] if member_id is None else member_id,
                                 group_instance_id=None, protocol_type="consumer", protocols=[("range", meta)],
                                 session_timeout_ms=10000, rebalance_timeout_ms=10000, client_id="c",
                                 client_host="/h", version=3)
        if member_id is not None:
            ids.append(mid)
    g = state.describe(GROUP)
    assert g is not None and g.state is GroupState.COMPLETING_REBALANCE
    from odradek.cluster.assignment import encode_assignment
    from odradek.protocol.messages.data import ConsumerProtocolAssignment as CPA

    assignments = [(mid, encode_assignment(CPA(assigned_partitions=[CPA.TopicPartition(topic="a", partitions=ps)]), 1))
                   for mid, ps in zip(ids, ([0, 1], [2, 3]))]
    state.sync(now + 1, group_id=GROUP, generation_id=g.generation_id, member_id=g.leader_id or "",
               group_instance_id=None, protocol_type="consumer", protocol_name="range", assignments=assignments)
    assert g.state is GroupState.STABLE
    return ids[0], ids[1]


def test_a_live_classic_group_converts_to_the_consumer_protocol_and_back() -> None:
    classic = GroupCoordinatorState(GroupLimits(initial_rebalance_delay_ms=0))
    now = 1000
    c1, c2 = _classic_group(classic, now)
    generation = classic.describe(GROUP).generation_id  # type: ignore[union-attr]
    cg = ConsumerGroups(classic, ConsumerGroupConfig())
    img = image({"a": 4})
    out = cg.heartbeat(now, HeartbeatRequest(GROUP, "new", 0, rebalance_timeout_ms=1000,
                                             subscribed_topic_names=("a",), owned={}), img)
    assert isinstance(out.records[0], ClassicGroupRecord) and out.records[0].group is None
    g = cg.groups[GROUP]
    assert classic.describe(GROUP).members == {}  # type: ignore[union-attr]  # offsets stay, the group moved
    assert set(g.members) == {c1, c2, "new"}
    assert g.members[c1].uses_classic and not g.members["new"].uses_classic
    assert g.group_epoch == generation + 1  # the new member's join
    # the classic members keep their partitions until they join again and are told to revoke
    assert g.members[c1].assigned == {A: frozenset({0, 1})}
    assert out.response.assignment == {}  # type: ignore[attr-defined]  # nothing is free yet
    # the classic member that must give a partition up is told to join again, and gets one
    c = next(m for m in (c1, c2) if len(g.target[m].get(A, ())) < 2)
    had = set(g.members[c].assigned[A])
    assert cg.classic_heartbeat(now, group_id=GROUP, member_id=c, group_instance_id=None,
                                generation_id=generation) is ErrorCode.REBALANCE_IN_PROGRESS
    meta = encode_subscription(ConsumerProtocolSubscription(topics=["a"]), 1)
    joined = cg.classic_join(now, img, group_id=GROUP, member_id=c, group_instance_id=None, protocol_type="consumer",
                             protocols=[("range", meta)], session_timeout_ms=10000, rebalance_timeout_ms=10000,
                             client_id="c", client_host="/h", version=5)
    assert joined.response.generation_id == cg.groups[GROUP].members[c].member_epoch  # type: ignore[attr-defined]
    synced = cg.classic_sync(now, img, group_id=GROUP, generation_id=joined.response.generation_id,  # type: ignore[attr-defined]
                             member_id=c, group_instance_id=None, protocol_type="consumer", protocol_name="range")
    got = decode_assignment(synced.assignment)
    assert got is not None and len(got.assigned_partitions[0].partitions) == 1
    assert set(got.assigned_partitions[0].partitions) < had
    # the member using the consumer protocol leaves: the group is classic again, and rebalances
    out = cg.heartbeat(now, HeartbeatRequest(GROUP, "new", -1), img)
    assert GROUP not in cg.groups
    back = classic.describe(GROUP)
    assert back is not None and set(back.members) == {c1, c2}
    assert back.state is GroupState.PREPARING_REBALANCE
    assert any(isinstance(r, ClassicGroupRecord) and r.group is not None for r in out.records)


def test_a_failover_replays_the_same_state() -> None:
    sim = Sim({"a": 5, "b": 2})
    ids = _join(sim, 3, ("a", "b"))
    sim.subscribe(ids[0], ("a",))
    sim.heartbeat(ids[1], lose=True)
    fresh = sim.replayed()
    g, h = sim.cg.groups[GROUP], fresh.groups[GROUP]
    assert (g.group_epoch, g.assignment_epoch) == (h.group_epoch, h.assignment_epoch)
    for mid, m in g.members.items():
        assert dataclasses.replace(m) == h.members[mid]
    assert g.target == h.target and g.owners == h.owners
    assert h.state is g.computed_state() and h.state is not ConsumerGroupState.DEAD
