"""The share coordinator on a broker (KIP-932): share-partition state persisted in
``__share_group_state`` through the persister and the RPCs 83-87, surviving a restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.broker.app import Broker
from odradek.broker.share_persister import PersistedState, StateSummary
from odradek.cluster.share_state import ShareKey, StateBatch, coordinator_key
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.protocol.messages.read_share_group_state import ReadShareGroupStateRequest
from odradek.protocol.messages.write_share_group_state import WriteShareGroupStateRequest
from odradek.testing import BrokerProcess, WireClient, wait_for
from tests.broker.inprocess import hosted, running_broker

T = 30.0
OVERRIDES = {
    "share.coordinator.state.topic.num.partitions": 3,
    "share.coordinator.snapshot.update.records.per.snapshot": 2,
}


async def _topic(broker: Broker, name: str, partitions: int = 2) -> uuid.UUID:
    await broker.topics.create(name, partitions, 1, {})
    await hosted(broker, name, partitions - 1)
    return broker.topics.image.topics[name].topic_id


def test_state_written_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def first() -> tuple[uuid.UUID, PersistedState | None]:
        async with running_broker(data, overrides=OVERRIDES) as broker:
            tid = await _topic(broker, "queue")
            p = broker.share_persister
            assert await p.read("g", tid, 0, leader_epoch=0) is None  # never initialized
            await p.initialize("g", tid, 0, start_offset=5)
            assert await p.read("g", tid, 0, leader_epoch=0) == PersistedState(0, 5, ())
            # more writes than one snapshot's worth of updates: snapshots and deltas both replayed
            await p.write("g", tid, 0, leader_epoch=0, state_epoch=0, start_offset=5,
                          batches=[StateBatch(5, 14, 1, 0)])
            await p.write("g", tid, 0, leader_epoch=0, state_epoch=0, start_offset=5,
                          batches=[StateBatch(7, 8, 2, 2)])
            await p.write("g", tid, 0, leader_epoch=1, state_epoch=0, start_offset=7,
                          batches=[StateBatch(12, 20, 1, 4)])
            await p.write("g", tid, 0, leader_epoch=1, state_epoch=0, start_offset=-1,
                          batches=[StateBatch(21, 21, 3, 2)])
            await p.write("g", tid, 1, leader_epoch=0, state_epoch=0, start_offset=0, batches=[])
            state = await p.read("g", tid, 0, leader_epoch=1)
            # a later delivery overwrites an earlier one; below the start offset nothing is kept
            assert state == PersistedState(0, 7, (
                StateBatch(7, 8, 2, 2), StateBatch(9, 11, 1, 0), StateBatch(12, 20, 1, 4), StateBatch(21, 21, 3, 2),
            ))
            # what no share-partition needs any more (before (g, tid, 0)'s last snapshot) is pruned
            part = broker.replicas.get("__share_group_state", broker.shares.partition_of(ShareKey("g", tid, 0)))
            assert part is not None and part.log.log_start_offset == 0
            await broker.shares.prune()
            assert part.log.log_start_offset == 3  # init, two updates: the snapshot of the 3rd write
            return tid, state

    tid, before = asyncio.run(first())
    assert before is not None and before.batches[2] == StateBatch(12, 20, 1, 4)

    async def second() -> None:
        async with running_broker(data, overrides=OVERRIDES) as broker:
            p = broker.share_persister
            assert await p.read("g", tid, 0, leader_epoch=1) == before
            assert await p.summary("g", tid, 0) == StateSummary(0, 1, 7)
            assert await p.read("g", tid, 1, leader_epoch=0) == PersistedState(0, 0, ())
            # the leader epoch recorded before the restart still fences the old leader
            with pytest.raises(KafkaError) as fenced:
                await p.write("g", tid, 0, leader_epoch=0, state_epoch=0, start_offset=7, batches=[])
            assert fenced.value.code == ErrorCode.FENCED_LEADER_EPOCH
            with pytest.raises(KafkaError) as fenced:
                await p.write("g", tid, 0, leader_epoch=1, state_epoch=-1, start_offset=7, batches=[])
            assert fenced.value.code == ErrorCode.FENCED_STATE_EPOCH
            # an unknown topic id is refused and nothing stored
            with pytest.raises(KafkaError) as unknown:
                await p.write("g", uuid.uuid4(), 0, leader_epoch=0, state_epoch=0, start_offset=0, batches=[])
            assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            # deleting forgets the state, also across the next restart
            assert await p.delete("g", {tid: [0]}) == {(tid, 0): ErrorCode.NONE}
            assert await p.read("g", tid, 0, leader_epoch=1) is None

        async with running_broker(data, overrides=OVERRIDES) as broker:
            p = broker.share_persister
            assert await p.read("g", tid, 0, leader_epoch=0) is None
            assert await p.read("g", tid, 1, leader_epoch=0) == PersistedState(0, 0, ())

    asyncio.run(second())


# ------------------------------------------------------------------------------------------------
# the RPCs from outside: malformed writes get Kafka's error and store nothing


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, WireClient]]:
    data = tmp_path_factory.mktemp("share-wire")
    with BrokerProcess(data, overrides={**OVERRIDES, "num.partitions": 1}) as broker:
        client = WireClient("127.0.0.1", broker.port)
        try:
            yield broker, client
        finally:
            client.close()


def _topic_id(broker: BrokerProcess, client: WireClient) -> uuid.UUID:
    from odradek.protocol.messages.create_topics import CreateTopicsRequest
    from odradek.protocol.messages.metadata import MetadataRequest

    C = CreateTopicsRequest
    client.request(C(topics=[C.CreatableTopic(name="wired", num_partitions=1, replication_factor=1)],
                     timeout_ms=10000), 5)

    def tid() -> uuid.UUID | None:
        r = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="wired")]), 12)
        t = r.topics[0]
        return t.topic_id if t.error_code == 0 else None

    found = wait_for(tid, T, "the topic")
    assert found is not None
    return found


def _write(client: WireClient, tid: uuid.UUID, *, partition: int = 0, group: str = "wg", leader_epoch: int = 0,
           state_epoch: int = 0, start_offset: int = 0, batches: list[tuple[int, int, int, int]]) -> int:
    W = WriteShareGroupStateRequest
    r = client.request(W(group_id=group, topics=[W.WriteStateData(topic_id=tid, partitions=[W.PartitionData(
        partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        state_batches=[W.StateBatch(first_offset=f, last_offset=lo, delivery_state=s, delivery_count=c)
                       for f, lo, s, c in batches],
    )])]), 1)
    return int(r.results[0].partitions[0].error_code)


def _read(client: WireClient, tid: uuid.UUID, group: str = "wg") -> tuple[int, int, list[tuple[int, int, int, int]]]:
    R = ReadShareGroupStateRequest
    r = client.request(R(group_id=group, topics=[R.ReadStateData(topic_id=tid, partitions=[R.PartitionData(
        partition=0, leader_epoch=0)])]), 0)
    p = r.results[0].partitions[0]
    assert p.error_code == 0, p
    return p.start_offset, p.state_epoch, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                           for b in p.state_batches]


def _find(broker: BrokerProcess, client: WireClient, tid: uuid.UUID) -> None:
    """FindCoordinator of the share-partition (wg, tid, 0), until it answers this broker (the first
    one creates __share_group_state; the RPCs do not, as Kafka's do not)."""
    key = coordinator_key("wg", tid, 0)

    def found() -> bool:
        r = client.request(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), 4)
        return r.coordinators[0].error_code == 0 and r.coordinators[0].port == broker.port

    wait_for(found, T, "the share coordinator")


def test_find_coordinator_of_a_share_partition(wire: tuple[BrokerProcess, WireClient]) -> None:
    broker, client = wire
    tid = _topic_id(broker, client)
    _find(broker, client, tid)
    r = client.request(FindCoordinatorRequest(key_type=2, coordinator_keys=["not-a-key"]), 4)
    assert r.coordinators[0].error_code == ErrorCode.INVALID_REQUEST


_bad_batch = st.one_of(
    st.tuples(st.integers(-(2**63), -1), st.integers(0, 100), st.sampled_from([0, 2, 4]), st.integers(0, 5)),
    st.integers(1, 2**40).flatmap(lambda f: st.tuples(st.just(f), st.integers(0, f - 1), st.sampled_from([0, 2, 4]),
                                                      st.integers(0, 5))),
    st.tuples(st.integers(0, 50), st.just(60), st.sampled_from([3, 5, 127, -1, -128]), st.integers(0, 5)),
    st.tuples(st.integers(0, 50), st.just(60), st.sampled_from([0, 2]), st.integers(-(2**15), -1)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(good=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9), st.sampled_from([0, 2, 4]),
                               st.integers(0, 5)).map(lambda t: (t[0], t[0] + t[1], t[2], t[3])), max_size=3),
       bad=_bad_batch, start=st.integers(-1, 10), bad_start=st.booleans())
def test_malformed_writes_are_invalid_requests_and_store_nothing(
    wire: tuple[BrokerProcess, WireClient], good: list[tuple[int, int, int, int]], bad: tuple[int, int, int, int], start: int, bad_start: bool
) -> None:
    broker, client = wire
    tid = _topic_id(broker, client)
    _find(broker, client, tid)
    wait_for(lambda: _write(client, tid, batches=[], start_offset=0) == 0, T, "a first write")
    before = _read(client, tid)
    batches = [*good, bad]
    if bad_start:
        start = -2 - abs(start)
    assert _write(client, tid, start_offset=start, batches=batches) == ErrorCode.INVALID_REQUEST
    # a zero topic id, a negative partition, an empty group: INVALID_REQUEST as well
    assert _write(client, uuid.UUID(int=0), batches=good) == ErrorCode.INVALID_REQUEST
    assert _write(client, tid, partition=-1, batches=good) == ErrorCode.INVALID_REQUEST
    assert _write(client, tid, group="", batches=good) == ErrorCode.INVALID_REQUEST
    assert _read(client, tid) == before  # nothing stored
