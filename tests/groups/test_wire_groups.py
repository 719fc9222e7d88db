"""The group APIs over the raw protocol (``odradek.testing.WireClient``): ten members joining at
once, what the coordinator answers to members of the wrong generation, and OffsetCommit /
OffsetFetch round trips.  (``measure_groups.py`` times the same paths; nothing here is timed.)"""

from __future__ import annotations

import threading

from odradek.errors import ErrorCode
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest
from odradek.protocol.messages.list_groups import ListGroupsRequest
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import create_topic, wait_until
from tests.groups.wire_group import (
    WireMember,
    all_stable,
    commit,
    coordinator_loaded,
    fetch_offsets,
    find_coordinator,
)

MEMBERS = 10
PARTITIONS = 20


def test_ten_members_join_at_once(broker: BrokerProcess, name: str) -> None:
    topic = group = name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    probe = WireClient(broker.host, broker.port)
    fc = find_coordinator(probe, group)
    assert [(c.error_code, c.node_id, c.host, c.port) for c in fc.coordinators] == [(0, 0, broker.host, broker.port)]

    members = [WireMember(broker.host, broker.port, group, topic, PARTITIONS, f"wire-{i}") for i in range(MEMBERS)]
    barrier = threading.Barrier(MEMBERS)

    def go(m: WireMember) -> None:
        barrier.wait()
        m.run()

    threads = [threading.Thread(target=go, args=(m,), daemon=True) for m in members]
    for t in threads:
        t.start()
    try:
        generation = wait_until(lambda: all_stable(members), what="10 members stable in one generation")
        assert not [e for m in members for e in m.errors]
        leaders = [m for m in members if m.leader]
        assert len(leaders) == 1
        leader = leaders[0]
        ids = {m.member_id for m in members}
        assert len(ids) == MEMBERS
        # every member got what the leader of that generation assigned to it
        assert set(leader.leader_assigned) == ids
        for m in members:
            assert m.synced[generation] == leader.leader_assigned[m.member_id]
        flat = [p for m in members for p in m.synced[generation]]
        assert sorted(flat) == list(range(PARTITIONS))

        d = probe.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (0, "Stable", "consumer", "range")
        assert {x.member_id for x in d.members} == ids
        listed = probe.request(ListGroupsRequest(states_filter=["Stable"]), 4)
        assert (group, "Stable") in {(g.group_id, g.group_state) for g in listed.groups}

        # commits: only current members of the current generation
        m0 = members[0]
        own = m0.synced[generation][0]
        assert commit(probe, group, generation, m0.member_id, topic, {own: 5}) == {own: ErrorCode.NONE}
        assert commit(probe, group, generation - 1, m0.member_id, topic, {own: 6}) == {own: ErrorCode.ILLEGAL_GENERATION}
        assert commit(probe, group, generation, "not-a-member", topic, {own: 6}) == {own: ErrorCode.UNKNOWN_MEMBER_ID}
        assert commit(probe, group, -1, "", topic, {own: 6}) == {own: ErrorCode.UNKNOWN_MEMBER_ID}
        assert fetch_offsets(probe, group, topic, [own]) == {own: 5}
    finally:
        for m in members:
            m.stop.set()
        for t in threads:
            t.join(10)
    # everybody leaves: the group empties, keeping its offsets; a standalone commit now works
    for m in members:
        assert m.leave() is ErrorCode.NONE
        m.close()
    d = probe.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
    assert (d.group_state, list(d.members)) == ("Empty", [])
    assert commit(probe, group, -1, "", topic, {own: 7}) == {own: ErrorCode.NONE}
    assert fetch_offsets(probe, group, topic, [own]) == {own: 7}
    probe.close()


def test_sequential_commits_are_all_visible(broker: BrokerProcess, name: str) -> None:
    """Many synchronous commits from one client, each read back by the next OffsetFetch."""
    topic = group = name
    create_topic(broker.bootstrap, topic, 2)
    w = WireClient(broker.host, broker.port)
    find_coordinator(w, group)
    # the first FindCoordinator creates __consumer_offsets; loading it may take a moment
    wait_until(lambda: coordinator_loaded(w, group), what="the coordinator to load its offsets partition")
    for i in range(300):
        assert commit(w, group, -1, "", topic, {0: i, 1: 2 * i}) == {0: ErrorCode.NONE, 1: ErrorCode.NONE}
        if i % 50 == 0:
            assert fetch_offsets(w, group, topic, [0, 1]) == {0: i, 1: 2 * i}
    assert fetch_offsets(w, group, topic, [0, 1, 5]) == {0: 299, 1: 598, 5: -1}
    w.close()
