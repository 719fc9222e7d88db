"""The controller's pure logic (``odradek.cluster.controller``) against Kafka's ZooKeeper-era rules.

No processes, no ZooKeeper: known cases taken from Kafka's ``PartitionLeaderElectionAlgorithms``,
``PartitionStateMachine`` / ``ReplicaStateMachine``, ``AdminUtils.assignReplicasToBrokers`` (and its
tests' expected assignments), ``KafkaController.checkAndTriggerAutoLeaderRebalance`` and
``ReplicaAssignment.fromOldAndNewReplicas``, plus hypothesis properties over random clusters.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.controller import (
    ControllerContext,
    Election,
    LeaderIsr,
    PartitionStateName,
    ReplicaStateName,
    TopicAssignment,
    check_partition_transition,
    check_replica_transition,
    controlled_shutdown_election,
    imbalanced_partitions,
    offline_election,
    place_replicas,
    preferred_election,
    reassignment_election,
    reassignment_plan,
)

PS = PartitionStateName
RS = ReplicaStateName

# -- state machines --------------------------------------------------------------------------------

# Kafka's validPreviousStates, written out independently of the module under test.
KAFKA_PARTITION_PREVIOUS = {
    PS.NEW: {PS.NON_EXISTENT},
    PS.ONLINE: {PS.NEW, PS.ONLINE, PS.OFFLINE},
    PS.OFFLINE: {PS.NEW, PS.ONLINE, PS.OFFLINE},
    PS.NON_EXISTENT: {PS.OFFLINE},
}
KAFKA_REPLICA_PREVIOUS = {
    RS.NEW: {RS.NON_EXISTENT},
    RS.ONLINE: {RS.NEW, RS.ONLINE, RS.OFFLINE, RS.DELETION_INELIGIBLE},
    RS.OFFLINE: {RS.NEW, RS.ONLINE, RS.OFFLINE, RS.DELETION_INELIGIBLE},
    RS.DELETION_STARTED: {RS.OFFLINE},
    RS.DELETION_SUCCESSFUL: {RS.DELETION_STARTED},
    RS.DELETION_INELIGIBLE: {RS.OFFLINE, RS.DELETION_STARTED},
    RS.NON_EXISTENT: {RS.DELETION_SUCCESSFUL},
}

TP = ("t", 0)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(PS, PS)), ids=lambda s: s.value)
def test_partition_transitions_follow_kafka(current: PartitionStateName, target: PartitionStateName) -> None:
    legal = current in KAFKA_PARTITION_PREVIOUS[target]
    assert check_partition_transition(current, target) is legal
    ctx = ControllerContext()
    if current is not PS.NON_EXISTENT:
        ctx._partition_states[TP] = current  # the starting state, set up directly
    if legal:
        ctx.set_partition_state(TP, target)
        assert ctx.partition_state(TP) is target
    else:
        with pytest.raises(ValueError, match="illegal partition state change"):
            ctx.set_partition_state(TP, target)
        assert ctx.partition_state(TP) is current  # unchanged


@pytest.mark.parametrize(("current", "target"), list(itertools.product(RS, RS)), ids=lambda s: s.value)
def test_replica_transitions_follow_kafka(current: ReplicaStateName, target: ReplicaStateName) -> None:
    legal = current in KAFKA_REPLICA_PREVIOUS[target]
    assert check_replica_transition(current, target) is legal
    ctx = ControllerContext()
    key = (TP[0], TP[1], 1)
    if current is not RS.NON_EXISTENT:
        ctx._replica_states[key] = current  # the starting state, set up directly
    if legal:
        ctx.set_replica_state(TP, 1, target)
        assert ctx.replica_state(TP, key[2]) is target
    else:
        with pytest.raises(ValueError, match="illegal replica state change"):
            ctx.set_replica_state(TP, 1, target)
        assert ctx.replica_state(TP, key[2]) is current


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (PS.NON_EXISTENT, PS.ONLINE),
        (PS.ONLINE, PS.NON_EXISTENT),
        (PS.NEW, PS.NON_EXISTENT),
        (PS.ONLINE, PS.NEW),
    ],
)
def test_illegal_partition_transitions_raise(current: PartitionStateName, target: PartitionStateName) -> None:
    ctx = ControllerContext(_partition_states={TP: current})
    with pytest.raises(ValueError):
        ctx.set_partition_state(TP, target)


def test_partition_lifecycle() -> None:
    ctx = ControllerContext()
    for target in (PS.NEW, PS.ONLINE, PS.OFFLINE, PS.ONLINE, PS.OFFLINE, PS.NON_EXISTENT):
        ctx.set_partition_state(TP, target)
        assert ctx.partition_state(TP) is target
    with pytest.raises(ValueError):  # a deleted partition must be recreated through New
        ctx.set_partition_state(TP, PS.ONLINE)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (RS.OFFLINE, RS.DELETION_SUCCESSFUL),
        (RS.ONLINE, RS.DELETION_STARTED),
        (RS.NON_EXISTENT, RS.ONLINE),
        (RS.NON_EXISTENT, RS.OFFLINE),
        (RS.ONLINE, RS.NON_EXISTENT),
        (RS.DELETION_STARTED, RS.ONLINE),
    ],
)
def test_illegal_replica_transitions_raise(current: ReplicaStateName, target: ReplicaStateName) -> None:
    ctx = ControllerContext(_replica_states={(TP[0], TP[1], 7): current})
    with pytest.raises(ValueError):
        ctx.set_replica_state(TP, 7, target)


def test_replica_deletion_lifecycle_forgets_the_replica() -> None:
    ctx = ControllerContext()
    key = (TP[0], TP[1], 2)
    for target in (
        RS.NEW,
        RS.ONLINE,
        RS.OFFLINE,
        RS.DELETION_STARTED,
        RS.DELETION_INELIGIBLE,
        RS.OFFLINE,
        RS.DELETION_STARTED,
        RS.DELETION_SUCCESSFUL,
    ):
        ctx.set_replica_state(TP, 2, target)
        assert ctx.replica_state(TP, key[2]) is target
    ctx.set_replica_state(TP, 2, RS.NON_EXISTENT)
    assert ctx.replica_state(TP, key[2]) is RS.NON_EXISTENT and ctx.state_counts() == (0, 0)
    ctx.set_replica_state(TP, 2, RS.NEW)  # a NonExistent replica may be created again
    assert ctx.replica_state(TP, key[2]) is RS.NEW


# -- leader election -------------------------------------------------------------------------------


def test_offline_election_first_live_isr_member_in_assignment_order() -> None:
    # the ISR's order does not matter, the assignment's does; dead replicas leave the ISR
    assert offline_election([1, 2, 3], [3, 2, 1], live=[2, 3], unclean=False) == Election(2, (3, 2))
    assert offline_election([3, 1, 2], [1, 2, 3], live=[1, 2], unclean=False) == Election(1, (1, 2))
    assert offline_election([1, 2, 3], [1, 2, 3], live=[1, 2, 3], unclean=False) == Election(1, (1, 2, 3))


def test_offline_election_without_live_isr_member_stays_offline() -> None:
    assert offline_election([1, 2, 3], [1], live=[2, 3], unclean=False) is None
    assert offline_election([1, 2, 3], [1, 2, 3], live=[], unclean=False) is None
    assert offline_election([1, 2, 3], [], live=[1, 2, 3], unclean=False) is None


def test_unclean_offline_election_takes_first_live_assigned_replica() -> None:
    e = offline_election([1, 2, 3], [1], live=[3, 2], unclean=True)
    assert e == Election(2, (2,), unclean=True)
    # with a live ISR member, unclean.leader.election.enable changes nothing
    assert offline_election([1, 2, 3], [3], live=[2, 3], unclean=True) == Election(3, (3,), unclean=False)
    # no live replica at all: offline even when unclean
    assert offline_election([1, 2, 3], [1], live=[4, 5], unclean=True) is None


def test_offline_election_ignores_live_brokers_outside_the_assignment() -> None:
    assert offline_election([1, 2], [1, 2], live=[3, 4], unclean=True) is None


def test_controlled_shutdown_election_excludes_shutting_down_brokers() -> None:
    e = controlled_shutdown_election([1, 2, 3], [1, 2, 3], live=[1, 2, 3], shutting_down=[1])
    assert e == Election(2, (2, 3))
    e = controlled_shutdown_election([1, 2, 3], [3, 1, 2], live=[1, 2, 3], shutting_down=[1, 2])
    assert e == Election(3, (3,))
    # the only in-sync replica is shutting down: no leader can be chosen
    assert controlled_shutdown_election([1, 2, 3], [1], live=[1, 2, 3], shutting_down=[1]) is None
    # a follower shutting down leaves the ISR; the leader stays the first eligible one
    e = controlled_shutdown_election([1, 2, 3], [1, 2, 3], live=[1, 2, 3], shutting_down=[3])
    assert e == Election(1, (1, 2))


def test_preferred_election_only_when_preferred_replica_is_live_and_in_sync() -> None:
    assert preferred_election([1, 2, 3], [2, 3, 1], live=[1, 2, 3]) == Election(1, (2, 3, 1))
    assert preferred_election([1, 2, 3], [2, 3], live=[1, 2, 3]) is None  # not in the ISR
    assert preferred_election([1, 2, 3], [1, 2, 3], live=[2, 3]) is None  # not alive
    assert preferred_election([], [1], live=[1]) is None


def test_reassignment_election_picks_from_the_target_set() -> None:
    isr = [1, 2, 3, 4, 5]
    assert reassignment_election([4, 5], isr, live=[1, 2, 3, 4, 5]) == Election(4, tuple(isr))
    assert reassignment_election([4, 5], isr, live=[1, 2, 3, 5]) == Election(5, tuple(isr))
    # old replicas are never chosen, even when they are the only live in-sync ones
    assert reassignment_election([4, 5], [1, 2, 3], live=[1, 2, 3, 4, 5]) is None
    assert reassignment_election([5, 4], [4, 5], live=[4, 5]) == Election(5, (4, 5))


broker_ids = st.lists(st.integers(0, 20), min_size=1, max_size=8, unique=True)


@st.composite
def partition_views(draw: st.DrawFn) -> tuple[list[int], list[int], set[int]]:
    assignment = draw(st.permutations(draw(broker_ids)))
    isr = [r for r in draw(st.permutations(assignment)) if draw(st.booleans())]
    live = draw(st.sets(st.integers(0, 20)))
    return list(assignment), list(isr), live


@given(partition_views(), st.booleans())
def test_offline_election_properties(view: tuple[list[int], list[int], set[int]], unclean: bool) -> None:
    assignment, isr, live = view
    e = offline_election(assignment, isr, live, unclean=unclean)
    clean_candidates = [r for r in assignment if r in live and r in isr]
    live_assigned = [r for r in assignment if r in live]
    if clean_candidates:
        assert e == Election(clean_candidates[0], tuple(r for r in isr if r in live), unclean=False)
        assert e.leader in e.isr
    elif unclean and live_assigned:
        assert e == Election(live_assigned[0], (live_assigned[0],), unclean=True)
    else:
        assert e is None


@given(partition_views(), st.sets(st.integers(0, 20)))
def test_controlled_shutdown_election_properties(
    view: tuple[list[int], list[int], set[int]], shutting_down: set[int]
) -> None:
    assignment, isr, live = view
    e = controlled_shutdown_election(assignment, isr, live, shutting_down)
    eligible = [r for r in assignment if r in isr and r in live and r not in shutting_down]
    if not eligible:
        assert e is None
        return
    assert e is not None
    assert e.leader == eligible[0]
    assert e.leader in e.isr
    assert not set(e.isr) & shutting_down
    assert set(e.isr) <= set(isr)
    assert list(e.isr) == [r for r in isr if r in e.isr]  # ISR order kept


@given(partition_views())
def test_preferred_and_reassignment_election_properties(view: tuple[list[int], list[int], set[int]]) -> None:
    assignment, isr, live = view
    e = preferred_election(assignment, isr, live)
    if assignment[0] in live and assignment[0] in isr:
        assert e == Election(assignment[0], tuple(isr))
    else:
        assert e is None
    target = assignment[len(assignment) // 2 :]
    r = reassignment_election(target, isr, live)
    eligible = [b for b in target if b in live and b in isr]
    assert r == (Election(eligible[0], tuple(isr)) if eligible else None)


# -- replica placement -----------------------------------------------------------------------------


def test_place_replicas_matches_kafka_round_robin() -> None:
    # AdminZkClientTest.testReplicaAssignment: brokers 0..4, 10 partitions, RF 3, fixed start index 0
    expected = {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }
    assert place_replicas(dict.fromkeys(range(5)), 10, 3) == expected


def test_place_replicas_matches_kafka_rack_aware() -> None:
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    racks: dict[int, str | None] = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    expected = {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),
    }
    assert place_replicas(racks, 7, 3) == expected


def test_place_replicas_start_partition_and_index() -> None:
    brokers = dict.fromkeys([10, 20, 30])
    placed = place_replicas(brokers, 3, 2, start_partition=3, start_index=1)
    assert sorted(placed) == [3, 4, 5]
    assert [placed[p][0] for p in (3, 4, 5)] == [20, 30, 10]  # leader of p is broker (1 + p) mod 3


@pytest.mark.parametrize("partitions", [3, 6, 12, 30])
@pytest.mark.parametrize("rf", [1, 2, 3])
def test_place_replicas_distinct_and_leaders_even(partitions: int, rf: int) -> None:
    brokers = dict.fromkeys([1, 2, 3])
    placed = place_replicas(brokers, partitions, rf)
    assert sorted(placed) == list(range(partitions))
    for replicas in placed.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leaders = Counter(r[0] for r in placed.values())
    assert set(leaders.values()) == {partitions // 3}
    replicas_per_broker = Counter(b for r in placed.values() for b in r)
    assert set(replicas_per_broker.values()) == {partitions * rf // 3}


def test_place_replicas_rejects_impossible_replication_factors() -> None:
    with pytest.raises(ValueError, match="larger than"):
        place_replicas(dict.fromkeys([1, 2]), 4, 3)
    with pytest.raises(ValueError):
        place_replicas({}, 1, 1)
    with pytest.raises(ValueError):
        place_replicas(dict.fromkeys([1, 2]), 4, 0)


def test_place_replicas_six_brokers_three_racks() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placed = place_replicas(racks, 12, 3)
    for replicas in placed.values():
        assert len({racks[b] for b in replicas}) == 3
    assert set(Counter(r[0] for r in placed.values()).values()) == {2}
    assert set(Counter(b for r in placed.values() for b in r).values()) == {6}


# AdminRackAwareTest cases: (racks, partitions, rf, start index, start partition, check replica evenness)
KAFKA_RACK_CASES = [
    ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 6, 3, 2, 0, True),
    ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 12, 2, 1, 0, True),
    ({6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}, 12, 2, 0, 12, True),
    ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 6, 2, 0, 0, True),
    ({0: "rack1", 1: "rack2", 4: "rack3"}, 3, 2, 0, 0, True),
    (
        {
            0: "rack1",
            1: "rack2",
            2: "rack2",
            3: "rack3",
            4: "rack3",
            5: "rack1",
            6: "rack1",
            7: "rack2",
            8: "rack2",
            9: "rack3",
            10: "rack1",
            11: "rack3",
        },
        96,
        3,
        0,
        0,
        True,
    ),
    ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 13, 3, 0, 0, False),
    ({0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 12, 3, 0, 0, False),
    ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 6, 5, 0, 0, False),
    ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}, 6, 2, 0, 0, False),
    ({0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}, 6, 3, 2, 0, False),
    ({0: "rack1", 1: "rack1", 2: "rack1", 3: "rack1", 4: "rack1", 5: "rack1"}, 6, 3, 0, 0, True),
]


@pytest.mark.parametrize(
    ("racks", "partitions", "rf", "start_index", "start_partition", "even"), KAFKA_RACK_CASES
)
def test_place_replicas_kafka_rack_aware_cases(
    racks: dict[int, str | None], partitions: int, rf: int, start_index: int, start_partition: int, even: bool
) -> None:
    placed = place_replicas(racks, partitions, rf, start_index=start_index, start_partition=start_partition)
    assert sorted(placed) == list(range(start_partition, start_partition + partitions))
    n_racks = len(set(racks.values()))
    for replicas in placed.values():
        assert len(replicas) == len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, n_racks)
    leaders = Counter(r[0] for r in placed.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1
    if even:
        assert set(Counter(b for r in placed.values() for b in r).values()) == {partitions * rf // len(racks)}


def test_place_replicas_uneven_racks_still_distinct() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "a", 4: "a", 5: "b"}
    placed = place_replicas(racks, 10, 3)
    for replicas in placed.values():
        assert len(set(replicas)) == 3
        assert {racks[b] for b in replicas} == {"a", "b"}  # both racks always used


@st.composite
def placements(draw: st.DrawFn) -> tuple[dict[int, str | None], int, int, int, int]:
    ids = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=10, unique=True))
    mode = draw(st.sampled_from(["none", "all", "mixed"]))
    rack = st.sampled_from(["r1", "r2", "r3", "r4"])
    brokers: dict[int, str | None] = {}
    for b in ids:
        if mode == "none":
            brokers[b] = None
        elif mode == "all":
            brokers[b] = draw(rack)
        else:
            brokers[b] = draw(st.one_of(st.none(), rack))
    rf = draw(st.integers(1, len(ids)))
    partitions = draw(st.integers(0, 40))
    start_partition = draw(st.integers(0, 30))
    start_index = draw(st.integers(0, 30))
    return brokers, partitions, rf, start_partition, start_index


@given(placements())
def test_place_replicas_properties(case: tuple[dict[int, str | None], int, int, int, int]) -> None:
    brokers, partitions, rf, start_partition, start_index = case
    placed = place_replicas(brokers, partitions, rf, start_partition=start_partition, start_index=start_index)
    n = len(brokers)
    assert sorted(placed) == list(range(start_partition, start_partition + partitions))
    for replicas in placed.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    # leaders go round-robin: no broker leads two more partitions than another
    leaders = Counter(r[0] for r in placed.values())
    if partitions:
        assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1
    if partitions % n == 0:
        assert all(leaders.get(b, 0) == partitions // n for b in brokers)
    # rack-aware: as many racks as the replication factor allows
    rack_values = set(brokers.values())
    if any(brokers.values()):
        for replicas in placed.values():
            assert len({brokers[b] for b in replicas}) == min(rf, len(rack_values))
    elif partitions % n == 0 and start_partition % n == 0:
        # round-robin followers too: every full round puts rf replicas on each broker
        per_broker = Counter(b for r in placed.values() for b in r)
        assert all(per_broker.get(b, 0) == partitions * rf // n for b in brokers)


# -- preferred leader imbalance --------------------------------------------------------------------


def make_ctx(
    partitions: Mapping[tuple[str, int], tuple[tuple[int, ...], int, tuple[int, ...]]],
    live: set[int],
    shutting_down: set[int] | None = None,
    deleting: set[str] | None = None,
) -> ControllerContext:
    """A context from {(topic, partition): (replicas, leader, isr)}."""
    ctx = ControllerContext(
        live_brokers={b: 100 + b for b in live},
        shutting_down=shutting_down or set(),
        deleting=deleting or set(),
    )
    for (topic, p), (replicas, leader, isr) in partitions.items():
        ta = ctx.topics.setdefault(topic, TopicAssignment(f"id-{topic}", {}))
        ta.replicas[p] = replicas
        ctx.states[(topic, p)] = LeaderIsr(leader, 1, isr, 1)
    return ctx


def test_broker_leading_none_of_its_preferred_partitions_triggers() -> None:
    ctx = make_ctx(
        {
            ("t", 0): ((1, 2, 3), 2, (1, 2, 3)),
            ("t", 1): ((1, 3, 2), 3, (1, 2, 3)),
            ("t", 2): ((2, 3, 1), 2, (1, 2, 3)),
            ("t", 3): ((3, 1, 2), 3, (1, 2, 3)),
        },
        live={1, 2, 3},
    )
    assert imbalanced_partitions(ctx, 10) == [("t", 0), ("t", 1)]


def test_imbalance_at_or_below_threshold_does_not_trigger() -> None:
    # broker 1 prefers 10 partitions and leads 9: 10% is not above 10%
    parts = {("t", p): ((1, 2), 1, (1, 2)) for p in range(10)}
    parts[("t", 9)] = ((1, 2), 2, (1, 2))
    ctx = make_ctx(parts, live={1, 2})
    assert imbalanced_partitions(ctx, 10) == []
    assert imbalanced_partitions(ctx, 9) == [("t", 9)]
    # 20% is
    ctx.states[("t", 8)] = LeaderIsr(2, 2, (1, 2), 1)
    assert sorted(imbalanced_partitions(ctx, 10)) == [("t", 8), ("t", 9)]
    assert imbalanced_partitions(ctx, 20) == []


def test_partitions_whose_preferred_replica_is_out_of_sync_are_not_returned() -> None:
    ctx = make_ctx(
        {
            ("t", 0): ((1, 2), 2, (2,)),  # counts towards the ratio, cannot move
            ("t", 1): ((1, 2), 2, (1, 2)),
        },
        live={1, 2},
    )
    assert imbalanced_partitions(ctx, 10) == [("t", 1)]


def test_dead_or_shutting_down_preferred_brokers_are_skipped() -> None:
    parts = {
        ("t", 0): ((1, 2), 2, (1, 2)),
        ("t", 1): ((3, 2), 2, (3, 2)),
    }
    ctx = make_ctx(parts, live={2, 3})
    assert imbalanced_partitions(ctx, 0) == [("t", 1)]
    ctx = make_ctx(parts, live={1, 2, 3}, shutting_down={3})
    assert imbalanced_partitions(ctx, 0) == [("t", 0)]


def test_percentage_zero_triggers_on_any_imbalance() -> None:
    parts = {("t", p): ((1, 2), 1, (1, 2)) for p in range(100)}
    parts[("t", 42)] = ((1, 2), 2, (1, 2))
    ctx = make_ctx(parts, live={1, 2})
    assert imbalanced_partitions(ctx, 0) == [("t", 42)]
    assert imbalanced_partitions(ctx, 1) == []
    # balanced: nothing, whatever the percentage
    ctx.states[("t", 42)] = LeaderIsr(1, 2, (1, 2), 1)
    assert imbalanced_partitions(ctx, 0) == []


def test_leaderless_partition_counts_as_imbalanced() -> None:
    ctx = make_ctx({("t", 0): ((1, 2), -1, (1,))}, live={1, 2})
    assert imbalanced_partitions(ctx, 10) == [("t", 0)]


def test_topics_being_deleted_are_ignored_for_imbalance() -> None:
    ctx = make_ctx({("gone", 0): ((1, 2), 2, (1, 2)), ("t", 0): ((1, 2), 1, (1, 2))}, live={1, 2})
    assert imbalanced_partitions(ctx, 0) == [("gone", 0)]
    ctx.deleting.add("gone")
    assert imbalanced_partitions(ctx, 0) == []


def kafka_imbalanced(ctx: ControllerContext, percentage: int) -> set[tuple[str, int]]:
    """KafkaController.checkAndTriggerAutoLeaderRebalance, transcribed (no reassignment in progress)."""
    by_preferred: dict[int, list[tuple[str, int]]] = {}
    for tp in ctx.partitions():
        if tp[0] not in ctx.deleting:
            by_preferred.setdefault(ctx.replicas(*tp)[0], []).append(tp)
    out = set()
    for broker, tps in by_preferred.items():
        not_preferred = [tp for tp in tps if tp in ctx.states and ctx.states[tp].leader != broker]
        if Fraction(len(not_preferred), len(tps)) > Fraction(percentage, 100):
            online = broker in ctx.live_brokers and broker not in ctx.shutting_down
            out |= {tp for tp in not_preferred if online and broker in ctx.states[tp].isr}
    return out


@st.composite
def contexts(draw: st.DrawFn) -> ControllerContext:
    brokers = list(range(1, 6))
    parts = {}
    for topic in draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)):
        for p in range(draw(st.integers(1, 12))):
            replicas = tuple(draw(st.permutations(brokers))[: draw(st.integers(1, 3))])
            leader = draw(st.sampled_from([*replicas, -1]))
            isr = tuple(draw(st.sets(st.sampled_from(replicas))) | ({leader} - {-1}))
            parts[(topic, p)] = (replicas, leader, isr)
    live = draw(st.sets(st.sampled_from(brokers)))
    shutting = draw(st.sets(st.sampled_from(brokers))) & live
    deleting = draw(st.sets(st.sampled_from(["a", "b", "c"]), max_size=1))
    ctx = make_ctx(parts, live, shutting_down=shutting, deleting=deleting)
    for tp in draw(st.sets(st.sampled_from(sorted(parts)), max_size=2)):
        del ctx.states[tp]  # a new partition, not elected yet
    return ctx


@given(contexts(), st.integers(0, 100))
def test_imbalanced_partitions_match_kafka(ctx: ControllerContext, percentage: int) -> None:
    found = imbalanced_partitions(ctx, percentage)
    assert len(found) == len(set(found))
    assert set(found) == kafka_imbalanced(ctx, percentage)
    for tp in found:  # every one can take a preferred election
        assert (
            preferred_election(
                ctx.replicas(*tp), ctx.states[tp].isr, set(ctx.live_brokers) - ctx.shutting_down
            )
            is not None
        )
    if percentage == 100:
        assert found == []


# -- offline partitions ----------------------------------------------------------------------------


def test_offline_partitions() -> None:
    ctx = make_ctx(
        {
            ("t", 0): ((1, 2), 1, (1, 2)),  # live leader
            ("t", 1): ((3, 2), 3, (3,)),  # dead leader
            ("t", 2): ((2, 1), -1, (2,)),  # no leader
            ("t", 3): ((2, 1), 2, (2, 1)),  # live leader
            ("gone", 0): ((3,), 3, (3,)),  # dead leader, but the topic is being deleted
            ("gone", 1): ((1,), -1, (1,)),
        },
        live={1, 2},
        deleting={"gone"},
    )
    assert sorted(ctx.offline_partitions()) == [("t", 1), ("t", 2)]
    # Kafka's liveBrokerIds exclude shutting-down brokers: their partitions need a new leader too
    ctx.shutting_down.add(1)
    assert sorted(ctx.offline_partitions()) == [("t", 0), ("t", 1), ("t", 2)]
    ctx.deleting.clear()
    ctx.shutting_down.clear()
    assert sorted(ctx.offline_partitions()) == [("gone", 0), ("gone", 1), ("t", 1), ("t", 2)]


@given(contexts())
def test_offline_partitions_properties(ctx: ControllerContext) -> None:
    offline = ctx.offline_partitions()
    assert len(offline) == len(set(offline))
    for tp in ctx.partitions():
        st_ = ctx.states.get(tp)
        led = st_ is not None and st_.leader in ctx.live_brokers and st_.leader not in ctx.shutting_down
        assert (tp in offline) == (tp[0] not in ctx.deleting and not led)


def test_context_helpers() -> None:
    ctx = make_ctx(
        {("t", 0): ((1, 2), 1, (1, 2)), ("t", 1): ((2, 3), 2, (2, 3)), ("u", 0): ((3,), 3, (3,))},
        live={1, 2, 3},
    )
    assert ctx.replicas("t", 1) == (2, 3)
    assert ctx.replicas("t", 9) == ()
    assert ctx.replicas("nope", 0) == ()
    assert sorted(ctx.partitions()) == [("t", 0), ("t", 1), ("u", 0)]
    assert sorted(ctx.partitions_on(3)) == [("t", 1), ("u", 0)]
    assert ctx.is_live(2) and not ctx.is_live(4)


# -- reassignment ----------------------------------------------------------------------------------


def test_reassignment_plan_union_like_kafka() -> None:
    plan = reassignment_plan([1, 2, 3], [2, 3], [1, 2, 3])
    assert plan.union == (2, 3, 1)
    assert plan.adding == ()
    assert plan.removing == (1,)
    assert plan.caught_up

    plan = reassignment_plan([1, 2, 3], [4, 5, 6], [1, 2, 3])
    assert plan.union == (4, 5, 6, 1, 2, 3)
    assert plan.adding == (4, 5, 6)
    assert plan.removing == (1, 2, 3)
    assert not plan.caught_up

    plan = reassignment_plan([1, 2], [3, 2], [1, 2, 3])
    assert plan.union == (3, 2, 1)
    assert (plan.adding, plan.removing) == ((3,), (1,))
    assert plan.caught_up


def test_reassignment_caught_up_only_when_every_target_is_in_sync() -> None:
    assert not reassignment_plan([1, 2], [3, 4], [1, 2, 3]).caught_up
    assert reassignment_plan([1, 2], [3, 4], [4, 1, 3]).caught_up
    # reordering only: nothing to add or remove
    plan = reassignment_plan([1, 2, 3], [3, 2, 1], [1, 2, 3])
    assert (plan.union, plan.adding, plan.removing, plan.caught_up) == ((3, 2, 1), (), (), True)


@given(broker_ids, broker_ids, st.sets(st.integers(0, 20)))
def test_reassignment_plan_properties(current: list[int], target: list[int], isr: set[int]) -> None:
    plan = reassignment_plan(current, target, sorted(isr))
    # ReplicaAssignment.fromOldAndNewReplicas: (new ++ old).distinct, then the two differences
    kafka_union = tuple(dict.fromkeys([*target, *current]))
    assert plan.union == kafka_union
    assert plan.adding == tuple(r for r in kafka_union if r not in current)
    assert plan.removing == tuple(r for r in kafka_union if r not in target)
    assert plan.union[: len(target)] == tuple(target)
    assert plan.caught_up == set(target).issubset(isr)


# -- ZooKeeper node formats ------------------------------------------------------------------------


def test_leader_isr_json_is_kafkas_partition_state() -> None:
    li = LeaderIsr(leader=2, leader_epoch=5, isr=(2, 1, 3), controller_epoch=7, zk_version=4)
    assert li.to_json() == {
        "controller_epoch": 7,
        "leader": 2,
        "version": 1,
        "leader_epoch": 5,
        "isr": [2, 1, 3],
    }
    kafka = '{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
    assert LeaderIsr.from_json(json.loads(kafka), 9) == LeaderIsr(1, 0, (1, 2), 3, 9)
    # newer Kafka adds leader_recovery_state (version 2): ignored
    newer = (
        '{"controller_epoch":3,"leader":-1,"version":2,"leader_epoch":8,"leader_recovery_state":0,"isr":[2]}'
    )
    assert LeaderIsr.from_json(json.loads(newer), 0) == LeaderIsr(-1, 8, (2,), 3, 0)


@given(
    st.integers(-1, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.lists(st.integers(0, 2**31 - 1), unique=True, max_size=6),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
)
def test_leader_isr_json_round_trip(
    leader: int, epoch: int, isr: list[int], controller_epoch: int, version: int
) -> None:
    li = LeaderIsr(leader, epoch, tuple(isr), controller_epoch, version)
    back = LeaderIsr.from_json(json.loads(json.dumps(li.to_json())), version)
    assert back == li
    assert (back.leader, back.leader_epoch, back.isr) == (leader, epoch, tuple(isr))


def test_topic_assignment_json_is_kafkas_topic_node() -> None:
    ta = TopicAssignment(
        "p1vGcVcTQ-Ox0WlX5pmBrg", {1: (2, 3), 0: (1, 2)}, adding={1: (3,)}, removing={1: (1,), 0: ()}
    )
    assert ta.to_json() == {
        "version": 3,
        "topic_id": "p1vGcVcTQ-Ox0WlX5pmBrg",
        "partitions": {"0": [1, 2], "1": [2, 3]},
        "adding_replicas": {"1": [3]},
        "removing_replicas": {"1": [1]},
    }


@pytest.mark.parametrize(
    "node",
    [
        '{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}',
        '{"version":2,"partitions":{"0":[1,2],"1":[2,3]},"adding_replicas":{},"removing_replicas":{}}',
    ],
)
def test_topic_assignment_from_older_kafka_nodes(node: str) -> None:
    ta = TopicAssignment.from_json(json.loads(node), "fresh-id")
    assert ta.topic_id == "fresh-id"
    assert ta.replicas == {0: (1, 2), 1: (2, 3)}
    assert ta.adding == {}
    assert ta.removing == {}


def test_topic_assignment_from_kafka_node_during_reassignment() -> None:
    node = (
        '{"version":3,"topic_id":"Ab3cDeF_Q7yzxwvUtsrqpA","partitions":{"0":[4,5,1,2]},'
        '"adding_replicas":{"0":[4,5]},"removing_replicas":{"0":[1,2]}}'
    )
    ta = TopicAssignment.from_json(json.loads(node), "unused")
    assert ta.topic_id == "Ab3cDeF_Q7yzxwvUtsrqpA"
    assert ta.replicas == {0: (4, 5, 1, 2)}
    assert ta.adding == {0: (4, 5)}
    assert ta.removing == {0: (1, 2)}


replica_lists = st.lists(st.integers(0, 100), min_size=1, max_size=5, unique=True).map(tuple)


@st.composite
def topic_assignments(draw: st.DrawFn) -> TopicAssignment:
    n = draw(st.integers(0, 12))
    replicas = {p: draw(replica_lists) for p in range(n)}
    moving = draw(st.sets(st.sampled_from(range(n)))) if n else set()
    adding = {p: draw(replica_lists) for p in moving}
    removing = {p: draw(replica_lists) for p in moving if draw(st.booleans())}
    topic_id = draw(st.uuids()).hex
    return TopicAssignment(topic_id, replicas, adding, removing)


@given(topic_assignments())
def test_topic_assignment_json_round_trip(ta: TopicAssignment) -> None:
    data = json.loads(json.dumps(ta.to_json()))
    assert data["version"] == 3
    back = TopicAssignment.from_json(data, "other")
    assert back.topic_id == ta.topic_id
    assert back.replicas == ta.replicas
    assert back.adding == ta.adding
    assert back.removing == ta.removing
