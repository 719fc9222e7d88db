"""The share-group offset APIs on a 2-broker cluster whose group coordinator is not the
share-partition leader: another broker answers NOT_COORDINATOR, Odradek's Admin client finds the
coordinator, which asks the leader for the high watermark of the lag, and an AlterShareGroupOffsets there fences the leader's cached state: the leader's
next write is FENCED_STATE_EPOCH, after which it reads the new state and serves from the new start
offset."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from odradek.client import Admin
from odradek.errors import ErrorCode
from odradek.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as Q
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.testing import WireClient
from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import OVERRIDES, create_topic
from tests.groups.test_share_fetch import ACCEPT, Member, _fetch_until, _produce, acquired, offsets
from tests.groups.wire_group import find_coordinator

pytestmark = pytest.mark.slow


def test_alter_at_the_coordinator_fences_the_leaders_cache(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2, {**OVERRIDES, "offsets.topic.replication.factor": 2, "offsets.topic.num.partitions": 8,
                                  "share.coordinator.state.topic.replication.factor": 2})
    topic = "admin-cluster"
    create_topic(cluster.bootstrap, topic, 1, 2)
    leader = cluster.wait_for(lambda: cluster.leader(topic, 0), 30, "a leader")
    lb = cluster.broker(leader)
    w = WireClient(lb.host, lb.port)
    try:
        # a group coordinated by the other broker
        group = coordinator = None
        for i in range(200):
            gid = f"admin-c-{i}"
            c = cluster.wait_for(lambda gid=gid: (r := find_coordinator(w, gid).coordinators[0]).error_code == 0
                                 and r.node_id, 30, "a coordinator")
            if c != leader:
                group, coordinator = gid, c
                break
        assert group is not None and coordinator is not None
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), version=12)
        tid = md.topics[0].topic_id
        # the leader's share partition: 10 records acquired, 0-1 accepted
        m = Member(lb, group, tid)
        try:
            acquired(m.fetch())
            _produce(lb, topic, 10)
            assert offsets(_fetch_until(m, 10)) == list(range(10))
            assert m.acknowledge({0: [(0, 1, [ACCEPT])]}).error_code == 0
            # the leader is not the coordinator
            resp = w.request(Q(groups=[Q.DescribeShareGroupOffsetsRequestGroup(
                group_id=group, topics=[Q.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]),
                version=1)
            assert resp.groups[0].error_code == ErrorCode.NOT_COORDINATOR
            with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
                got = admin.describe_share_group_offsets(group, [(topic, 0)])[(topic, 0)]
                # the lag: the high watermark asked of the leader (ListOffsets), less the start offset
                assert (got.start_offset, got.lag) == (2, 8)
                admin.alter_share_group_offsets(group, {(topic, 0): 7})
                got = admin.describe_share_group_offsets(group, [(topic, 0)])[(topic, 0)]
                assert (got.start_offset, got.lag) == (7, 3)
            # the leader's cache still holds 2-9 acquired: its acknowledgement cannot be persisted
            ack = m.acknowledge({0: [(2, 3, [ACCEPT])]})
            codes = {ack.error_code} | {p.error_code for t in ack.responses for p in t.partitions}
            assert codes - {0}, ack
        finally:
            m.close()
        n = Member(lb, group, tid)
        try:
            assert offsets(_fetch_until(n, 3)) == [7, 8, 9]
        finally:
            n.close()
    finally:
        w.close()
