"""Share-partition state (KIP-932) in a 3-broker cluster: written to the share coordinator, it is
read back from the new leader of its ``__share_group_state`` partition after the old one is
SIGKILLed (replicated with acks=all before the write was answered)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.assignment import partition_for
from odradek.cluster.share_state import coordinator_key
from odradek.errors import ErrorCode
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.protocol.messages.read_share_group_state import ReadShareGroupStateRequest
from odradek.protocol.messages.write_share_group_state import WriteShareGroupStateRequest
from odradek.testing import WireClient
from tests.cluster.conftest import Cluster

PARTITIONS = 3
OVERRIDES = {
    "share.coordinator.state.topic.num.partitions": PARTITIONS,
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.snapshot.update.records.per.snapshot": 2,
}
STATE = "__share_group_state"
Batch = tuple[int, int, int, int]  # first, last, delivery state, delivery count


def _client(cluster: Cluster, i: int) -> WireClient:
    return WireClient("127.0.0.1", cluster.broker(i).port)


def _coordinator(cluster: Cluster, via: int, key: str) -> int | None:
    c = _client(cluster, via)
    try:
        r = c.request(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), 4)
    finally:
        c.close()
    found = r.coordinators[0]
    return int(found.node_id) if found.error_code == 0 else None


def _write(cluster: Cluster, i: int, tid: uuid.UUID, leader_epoch: int, start: int, batches: list[Batch]) -> int:
    W = WriteShareGroupStateRequest
    c = _client(cluster, i)
    try:
        r = c.request(W(group_id="sg", topics=[W.WriteStateData(topic_id=tid, partitions=[W.PartitionData(
            partition=0, state_epoch=0, leader_epoch=leader_epoch, start_offset=start,
            state_batches=[W.StateBatch(first_offset=f, last_offset=lo, delivery_state=s, delivery_count=n)
                           for f, lo, s, n in batches],
        )])]), 1)
    finally:
        c.close()
    return int(r.results[0].partitions[0].error_code)


def _read(cluster: Cluster, i: int, tid: uuid.UUID, leader_epoch: int) -> tuple[int, list[Batch]] | None:
    R = ReadShareGroupStateRequest
    c = _client(cluster, i)
    try:
        r = c.request(R(group_id="sg", topics=[R.ReadStateData(topic_id=tid, partitions=[R.PartitionData(
            partition=0, leader_epoch=leader_epoch)])]), 0)
    finally:
        c.close()
    p = r.results[0].partitions[0]
    if p.error_code:
        return None
    return int(p.start_offset), [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                 for b in p.state_batches]


def test_share_state_survives_the_coordinators_death(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, OVERRIDES, log_level="INFO")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("jobs", 1, 3)]).values():
        f.result(60)

    def topic_id() -> uuid.UUID | None:
        c = _client(cluster, 1)
        try:
            r = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="jobs")]), 12)
        finally:
            c.close()
        return r.topics[0].topic_id if r.topics[0].error_code == 0 else None

    tid = cluster.wait_for(topic_id, 60, "the topic's id")
    assert tid is not None
    key = coordinator_key("sg", tid, 0)
    p = partition_for(key, PARTITIONS)
    found = cluster.wait_for(lambda: _coordinator(cluster, 1, key), 60, "the share coordinator")
    assert found is not None
    old: int = found
    # every replica in the ISR before writing: the writes are then on all three
    cluster.wait_for(lambda: len(cluster.isr(STATE, p)) == 3, 60, "the full ISR")

    writes: list[tuple[int, int, list[Batch]]] = [
        (0, 10, [(10, 29, 0, 1)]),
        (0, 10, [(12, 15, 2, 2)]),
        (1, 12, [(20, 24, 4, 3)]),  # a snapshot (every 2 updates) with a newer leader epoch
        (1, -1, [(30, 31, 0, 1)]),
    ]
    for epoch, start, batches in writes:
        cluster.wait_for(lambda e=epoch, s=start, b=batches: _write(cluster, old, tid, e, s, b) == 0, 60,  # type: ignore[misc]
                         "a write")
    expected = (12, [(12, 15, 2, 2), (16, 19, 0, 1), (20, 24, 4, 3), (25, 31, 0, 1)])
    assert _read(cluster, old, tid, 1) == expected

    cluster.kill(old)
    survivor = next(i for i in cluster.ids if i != old)
    new = cluster.wait_for(
        lambda: (n := _coordinator(cluster, survivor, key)) not in (None, old) and n, 90, "a new share coordinator"
    )
    assert cluster.leader(STATE, p) == new
    got = cluster.wait_for(lambda: _read(cluster, new, tid, 1), 60, "the state from the new coordinator")
    assert got == expected
    # the leader epoch recorded on the old coordinator still fences on the new one
    assert _write(cluster, new, tid, 0, 12, []) == ErrorCode.FENCED_LEADER_EPOCH
    assert _read(cluster, new, tid, 1) == expected
