"""The clients' edge cases on scripted in-memory brokers (``odradek.testing.MockCluster``): errors,
retries, coordinator moves, broken connections, brokers that are down or silent.

These ran against broker processes in test_simple_consumer, test_admin, test_admin_groups and
test_producer (a start or restart of a broker each, or a client subclass that spoiled answers);
the client code they exercise is the same, the brokers are scripted.  The real-broker tests keep what proves a feature works with real parts
(and the unreachable-address tests, which need no broker and prove a refused TCP connection is
reported)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.client import (
    Admin,
    AsyncAdmin,
    NewTopic,
    OffsetAndMetadata,
    OffsetOutOfRangeError,
    Producer,
    SimpleConsumer,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from odradek.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse
from odradek.records import BatchBuilder, iter_batch_headers
from odradek.testing import NO_ANSWER, MockCluster, wait_for

TIMEOUT = 30.0
FAST: dict[str, Any] = {"retry.backoff.ms": 20, "metadata.max.age.ms": 5000, "request.timeout.ms": 10000}


@pytest.fixture
def mock() -> Iterator[MockCluster]:
    with MockCluster(brokers=1) as cluster:
        yield cluster


def _records(mock: MockCluster, topic: str, partition: int, values: list[bytes]) -> None:
    b = BatchBuilder()
    for v in values:
        b.append(1_700_000_000_000, None, v)
    mock.append(topic, partition, b.build())


def _log(mock: MockCluster, topic: str, partition: int = 0) -> list[Any]:
    """The batch headers of a partition's log in the mock."""
    return [h for _base, data in mock.topics[topic].partitions[partition].batches for h in iter_batch_headers(data)]


# -- SimpleConsumer (from test_simple_consumer.py) -----------------------------------------------------
def test_unknown_topic_and_partition(mock: MockCluster) -> None:
    with SimpleConsumer(bootstrap_servers=mock.bootstrap, request_timeout_ms=800) as c:
        t0 = time.monotonic()
        with pytest.raises(KafkaError) as info:
            c.fetch("no-such-topic", 0, 0)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert time.monotonic() - t0 < 5
        mock.create_topic("has-one-partition")
        with pytest.raises(KafkaError) as info:
            c.fetch("has-one-partition", 5, 0)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_silent_broker_times_out(mock: MockCluster) -> None:
    broker = mock.broker(1)
    broker.respond(ApiVersionsRequest, NO_ANSWER, times=None)  # accepts connections, never answers
    with SimpleConsumer(bootstrap_servers=mock.bootstrap, request_timeout_ms=400) as c:
        t0 = time.monotonic()
        # the bootstrap connection never completes ApiVersions: reported as unreachable
        with pytest.raises((TimeoutError, ConnectionError), match=f"no response from .*{broker.host}:{broker.port}"):
            c.fetch("t", 0, 0)
        assert time.monotonic() - t0 < 3


def test_broker_restart_is_retried(mock: MockCluster) -> None:
    broker = mock.broker(1)
    mock.create_topic("survivor")
    _records(mock, "survivor", 0, [b"a"])
    with SimpleConsumer(bootstrap_servers=mock.bootstrap, request_timeout_ms=20000, fetch_max_wait_ms=50) as c:
        assert [r.value for r in c.fetch("survivor", 0, 0)] == [b"a"]
        broker.refusing = 3  # the restart: connections refused for a while
        broker.drop_connections()
        assert [r.value for r in c.fetch("survivor", 0, 0)] == [b"a"]
    assert broker.connections_refused == 3 and broker.connections_made > 2  # connected again


def test_offset_out_of_range(mock: MockCluster) -> None:
    mock.create_topic("t")
    _records(mock, "t", 0, [b"x"] * 3)
    with SimpleConsumer(bootstrap_servers=mock.bootstrap, fetch_max_wait_ms=100) as consumer:
        assert list(consumer.fetch("t", 0, 3)) == []  # the log end: nothing yet, not an error
        with pytest.raises(OffsetOutOfRangeError) as info:
            consumer.fetch("t", 0, 50)
        err = info.value
        assert isinstance(err, KafkaError) and err.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (err.topic, err.partition, err.offset, err.earliest, err.latest) == ("t", 0, 50, 0, 3)
        assert "valid offsets are 0..3" in str(err)
        with pytest.raises(OffsetOutOfRangeError):
            consumer.multi_fetch({("t", 0): 99})
        with pytest.raises(ValueError):
            consumer.fetch("t", 0, -1)


def test_a_multi_partition_fetch_starts_at_a_different_partition_each_time(mock: MockCluster) -> None:
    """A broker fills its answer in request order and may stop early (``fetch.max.bytes``); the
    consumer puts a different partition first in each request, so none waits behind the others."""
    mock.create_topic("turns", 3, leaders=[1, 1, 1])
    for n in range(3):
        _records(mock, "turns", n, [b"v%d" % n])
    with SimpleConsumer(bootstrap_servers=mock.bootstrap, fetch_max_wait_ms=100) as c:
        for _ in range(6):
            got = c.multi_fetch({("turns", n): 0 for n in range(3)})
            assert [r.value for n in range(3) for r in got[("turns", n)]] == [b"v0", b"v1", b"v2"]
    firsts = [req.topics[0].partitions[0].partition for req in mock.broker(1).received(FetchRequest)]
    assert len(firsts) == 6 and sorted(firsts) == [0, 0, 1, 1, 2, 2], firsts


# -- Admin (from test_admin.py and test_admin_groups.py) -------------------------------------------------
def _create_topics(mock: MockCluster) -> Any:
    def create(req: CreateTopicsRequest, version: int) -> CreateTopicsResponse:
        R = CreateTopicsResponse
        for t in req.topics:
            mock.create_topic(t.name, t.num_partitions)
        return R(topics=[R.CreatableTopicResult(name=t.name, error_code=0, num_partitions=t.num_partitions,
                                                replication_factor=1) for t in req.topics])

    return create


def test_retries_until_the_broker_is_up(mock: MockCluster) -> None:
    """Connection failures are retried within the timeout: the broker comes up while we wait."""
    broker = mock.broker(1)
    broker.respond(CreateTopicsRequest, _create_topics(mock), times=None)
    broker.up = False
    with Admin(bootstrap_servers=mock.bootstrap, retry_backoff_ms=50, retry_backoff_max_ms=200) as admin:
        def come_up() -> bool:
            if broker.connections_refused >= 3:
                broker.up = True
            return broker.up

        with wait_for_in_thread(come_up):
            admin.create_topics([NewTopic("t", 1, 1)], timeout=30)
        assert broker.connections_refused >= 3
        assert "t" in admin.list_topics()
        # the broker restarts: the admin reconnects on its own
        broker.refusing = 2
        broker.drop_connections()
        assert admin.describe_topics(["t"], timeout=30)["t"].partitions[0].leader == 1


class wait_for_in_thread:
    """Poll ``predicate`` in a thread until it is true (bounded), while the body runs."""

    def __init__(self, predicate: Any) -> None:
        import threading

        self.predicate = predicate
        self.thread = threading.Thread(target=lambda: wait_for(predicate, 30, "the condition", interval=0.01))

    def __enter__(self) -> None:
        self.thread.start()

    def __exit__(self, *exc: object) -> None:
        self.thread.join(35)


class _Groups:
    """Committed offsets and empty groups, as a coordinator keeps them (the model of these tests)."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], int]] = {}

    def commit(self, req: OffsetCommitRequest, version: int) -> OffsetCommitResponse:
        R = OffsetCommitResponse
        group = self.offsets.setdefault(req.group_id, {})
        for t in req.topics:
            for p in t.partitions:
                group[(t.name, p.partition_index)] = p.committed_offset
        return R(topics=[R.OffsetCommitResponseTopic(name=t.name, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=0) for p in t.partitions
        ]) for t in req.topics])

    def fetch(self, req: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
        R = OffsetFetchResponse
        group_id = req.groups[0].group_id if version >= 8 else req.group_id
        offsets = self.offsets.get(group_id, {})
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append((p, o))
        if version >= 8:
            return R(groups=[R.OffsetFetchResponseGroup(group_id=group_id, error_code=0, topics=[
                R.OffsetFetchResponseTopics(name=t, partitions=[
                    R.OffsetFetchResponsePartitions(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                                    metadata="", error_code=0) for p, o in ps
                ]) for t, ps in by_topic.items()
            ])])
        return R(error_code=0, topics=[R.OffsetFetchResponseTopic(name=t, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                           metadata="", error_code=0) for p, o in ps
        ]) for t, ps in by_topic.items()])

    def describe(self, req: DescribeGroupsRequest, version: int) -> DescribeGroupsResponse:
        R = DescribeGroupsResponse
        return R(groups=[R.DescribedGroup(error_code=0, group_id=g, group_state="Empty", protocol_type="consumer",
                                          protocol_data="", members=[]) for g in req.groups])

    def delete(self, req: DeleteGroupsRequest, version: int) -> DeleteGroupsResponse:
        R = DeleteGroupsResponse
        for g in req.groups_names:
            self.offsets.pop(g, None)
        return R(results=[R.DeletableGroupResult(group_id=g, error_code=0) for g in req.groups_names])


def _not_available(req: FindCoordinatorRequest, version: int) -> FindCoordinatorResponse:
    R = FindCoordinatorResponse
    keys = list(req.coordinator_keys) if version >= 4 else [req.key]
    if version < 4:
        return R(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, node_id=-1, host="", port=-1)
    return R(coordinators=[
        R.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE) for k in keys
    ])


def _spoiled_commit(req: OffsetCommitRequest, version: int) -> OffsetCommitResponse:
    R = OffsetCommitResponse
    return R(topics=[R.OffsetCommitResponseTopic(name=t.name, partitions=[
        R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        for p in t.partitions
    ]) for t in req.topics])


def _spoiled_describe(req: DescribeGroupsRequest, version: int) -> DescribeGroupsResponse:
    R = DescribeGroupsResponse
    return R(groups=[R.DescribedGroup(error_code=ErrorCode.NOT_COORDINATOR, group_id=g) for g in req.groups])


def _spoiled_fetch(req: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
    R = OffsetFetchResponse
    if version >= 8:
        return R(groups=[R.OffsetFetchResponseGroup(group_id=req.groups[0].group_id, error_code=ErrorCode.NOT_COORDINATOR)])
    return R(error_code=ErrorCode.NOT_COORDINATOR)


def test_coordinator_errors_are_retried(mock: MockCluster) -> None:
    """Lookups answered COORDINATOR_NOT_AVAILABLE are asked again; a coordinator that answers
    COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR is found again and asked again."""
    broker = mock.broker(1)
    mock.create_topic("t")
    groups = _Groups()
    broker.respond(FindCoordinatorRequest, _not_available, times=2)
    broker.respond(OffsetCommitRequest, _spoiled_commit)
    broker.respond(OffsetCommitRequest, groups.commit, times=None)
    broker.respond(DescribeGroupsRequest, _spoiled_describe)
    broker.respond(DescribeGroupsRequest, groups.describe, times=None)
    broker.respond(OffsetFetchRequest, _spoiled_fetch)
    broker.respond(OffsetFetchRequest, groups.fetch, times=None)
    broker.respond(DeleteGroupsRequest, groups.delete, times=None)

    def finds() -> int:
        return len(broker.received(FindCoordinatorRequest))

    async def main() -> None:
        config = {"bootstrap.servers": mock.bootstrap, "retry.backoff.ms": 10}
        async with AsyncAdmin(config) as admin:
            # two lookups fail, the commit answers COORDINATOR_LOAD_IN_PROGRESS, the fourth lookup works
            await admin.alter_group_offsets("g", {("t", 0): 0})
            assert finds() == 4
            # the coordinator says it is not the coordinator: found again, asked again
            assert (await admin.describe_groups(["g"]))["g"].state == "Empty"
            assert finds() == 6
            assert await admin.list_group_offsets("g") == {("t", 0): OffsetAndMetadata(0, "", -1)}
            assert finds() == 8
            await admin.delete_groups(["g"])
        broker.respond(FindCoordinatorRequest, _not_available, times=None)
        async with AsyncAdmin(config) as admin:
            before = finds()
            t0 = time.monotonic()
            with pytest.raises(KafkaError) as exc:
                await admin.describe_groups(["g"], timeout=0.5)
            assert exc.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert "still failing after 0.5 s" in str(exc.value)
            assert 0.4 < time.monotonic() - t0 < 3 and finds() - before > 3

    asyncio.run(main())


# -- Producer (from test_producer.py) ---------------------------------------------------------------
def _too_large(req: ProduceRequest, version: int) -> ProduceResponse | None:
    """MESSAGE_TOO_LARGE for batches over 2000 bytes (a topic's max.message.bytes); None: the
    model writes the others."""
    R = ProduceResponse
    if all(len(pd.records or b"") <= 2000 for t in req.topic_data for pd in t.partition_data):
        return None
    return R(responses=[R.TopicProduceResponse(name=t.name, partition_responses=[
        R.PartitionProduceResponse(index=pd.index, error_code=ErrorCode.MESSAGE_TOO_LARGE, base_offset=-1)
        for pd in t.partition_data
    ]) for t in req.topic_data])


def test_errors_reach_future_callback_and_interceptor(mock: MockCluster) -> None:
    """A broker-side non-retriable error (a record larger than the topic's max.message.bytes)."""

    class Recording:
        def __init__(self) -> None:
            self.acks: list[tuple[Any, BaseException | None]] = []

        def on_send(self, topic: str, value: Any, key: Any) -> tuple[str, Any, Any]:
            return topic, value, key

        def on_acknowledgement(self, metadata: Any, exception: BaseException | None) -> None:
            self.acks.append((metadata, exception))

    mock.create_topic("t")
    mock.broker(1).respond(ProduceRequest, _too_large, times=None)
    icpt = Recording()
    errors: list[BaseException | None] = []
    with Producer(bootstrap_servers=mock.bootstrap, interceptors=[icpt], **FAST) as p:
        ok = p.send("t", b"small").result(TIMEOUT)
        p.flush(TIMEOUT)
        fut = p.send("t", b"x" * 10_000, on_delivery=lambda e, md: errors.append(e))
        with pytest.raises(KafkaError) as info:
            fut.result(TIMEOUT)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert isinstance(fut.exception(TIMEOUT), KafkaError)
        # the producer carries on after a failed batch
        again = p.send("t", b"small again").result(TIMEOUT)
    assert ok.offset == 0 and again.offset == 1
    assert len(errors) == 1 and isinstance(errors[0], KafkaError)
    assert [(md is None, type(err).__name__ if err else None) for md, err in icpt.acks] == [
        (False, None),
        (True, "KafkaError"),
        (False, None),
    ]


def test_buffer_full_with_a_stopped_broker_raises_after_max_block(mock: MockCluster) -> None:
    mock.create_topic("t")
    broker = mock.broker(1)
    p = Producer(
        bootstrap_servers=mock.bootstrap, buffer_memory=4096, batch_size=1024, linger_ms=0, max_block_ms=1500,
        delivery_timeout_ms=60_000, **FAST,
    )
    try:
        p.send("t", b"known").result(TIMEOUT)  # metadata and a connection
        broker.up = False
        broker.drop_connections()
        futures = []
        t0 = time.monotonic()
        with pytest.raises(KafkaError) as info:
            for _ in range(1000):
                futures.append(p.send("t", b"x" * 100))
        waited = time.monotonic() - t0
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert "buffer.memory" in str(info.value)
        assert 1.4 <= waited < 10
        assert 0 < len(futures) < 60  # it blocked when the buffer was full, not before
    finally:
        p.close(0.5)
    # close() gave up on them: every future is failed, none is left hanging
    assert all(f.done() for f in futures)
    assert all(isinstance(f.exception(0), KafkaError) for f in futures)
    assert "closed before" in str(futures[-1].exception(0))


def test_unknown_producer_id_renumbers_under_a_new_id(mock: MockCluster) -> None:
    """The broker lost the producer's state: the next batch gets UNKNOWN_PRODUCER_ID, the producer
    takes a new producer id, renumbers the batch from 0 and resends it: every record is written
    once.  (test_producer.test_broker_forgets_the_producer_id has a real broker expire the state.)"""
    mock.create_topic("expiry")

    def unknown(req: ProduceRequest, version: int) -> ProduceResponse:
        R = ProduceResponse
        return R(responses=[R.TopicProduceResponse(name=t.name, partition_responses=[
            R.PartitionProduceResponse(index=pd.index, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, base_offset=-1)
            for pd in t.partition_data
        ]) for t in req.topic_data])

    with Producer(bootstrap_servers=mock.bootstrap, linger_ms=0, **FAST) as p:
        first = [p.send("expiry", b"a%d" % i).result(TIMEOUT) for i in range(3)]
        old_id = p._core.producer_id
        mock.broker(1).respond(ProduceRequest, unknown)
        later = [p.send("expiry", b"b%d" % i) for i in range(50)]
        assert p.flush(TIMEOUT) == 0
        metas = first + [f.result(0) for f in later]
        assert p._core.producer_id != old_id
        assert later[0]._batch.attempts == 2  # refused once, then resent renumbered
    assert [md.offset for md in metas] == list(range(53))
    assert len(mock.broker(1).received(InitProducerIdRequest)) == 2
    batches = _log(mock, "expiry")
    assert {h.producer_id for h in batches} == {old_id, p._core.producer_id}
    assert min(h.base_sequence for h in batches if h.producer_id != old_id) == 0
    assert sum(h.record_count for h in batches) == 53


def test_records_expire_after_delivery_timeout(mock: MockCluster) -> None:
    """The broker goes away after metadata is known: records fail after delivery.timeout.ms."""
    mock.create_topic("t")
    p = Producer(bootstrap_servers=mock.bootstrap, delivery_timeout_ms=1500, linger_ms=0, **FAST)
    try:
        p.send("t", b"first").result(TIMEOUT)
        mock.broker(1).up = False
        mock.broker(1).drop_connections()
        errors: list[BaseException | None] = []
        t0 = time.monotonic()
        fut = p.send("t", b"lost", on_delivery=lambda e, md: errors.append(e))
        with pytest.raises(KafkaError) as info:
            fut.result(20)
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert "expiring 1 record(s)" in str(info.value)
        assert 1.4 <= time.monotonic() - t0 < 10
        wait_for(lambda: errors, 5, "the delivery callback")
        assert isinstance(errors[0], KafkaError)
    finally:
        p.close(1)


def test_producer_started_before_the_broker(mock: MockCluster) -> None:
    """An idempotent producer created while its broker is down gets its producer id once the
    broker is up (it does not give up after max.block.ms)."""
    broker = mock.broker(1)
    mock.create_topic("late")
    broker.up = False
    p = Producer(bootstrap_servers=mock.bootstrap, max_block_ms=300, **FAST)
    try:
        t0 = time.monotonic()
        # the scenario: a broker that is down for longer than max.block.ms while the sender keeps
        # asking for a producer id
        wait_for(lambda: broker.connections_refused >= 2 and time.monotonic() - t0 > 0.6, 10, "refused attempts",
                 interval=0.02)
        broker.up = True
        md = p.send("late", b"v").result(TIMEOUT)
        assert md.offset == 0
    finally:
        p.close()
