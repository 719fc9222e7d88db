"""The share consumer's state machine on scripted in-memory brokers (``odradek.testing.MockCluster``):
membership (join at epoch 0 with the topic names, fenced -> join again, leave at -1), one share
session per leader (epoch 0 with the partitions, then increments, forgotten partitions, a lost
session opened again), acknowledgements piggy-backed on fetches or sent by commits, gaps, and the
implicit and explicit modes.  The real broker's behaviour is in test_share_consumer.py."""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.client import AcknowledgeType, AsyncShareConsumer, IllegalStateError, ShareConsumer, ShareRecord
from odradek.client.share_consumer import ack_batches, split_acquired
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from odradek.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from odradek.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from odradek.records import BatchBuilder
from odradek.testing import Delayed, MockCluster, wait_for

TIMEOUT = 20.0
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def _batch(base: int, n: int) -> bytes:
    b = BatchBuilder(base_offset=base)
    for i in range(n):
        b.append(1_700_000_000_000, None, b"v%d" % (base + i))
    return b.build()


class FakeShareBroker:
    """ShareGroupHeartbeat, ShareFetch and ShareAcknowledge answered from what a test sets: the
    assignment, the next fetch answers, acknowledgement errors, errors to answer once."""

    def __init__(self, mock: MockCluster, topic: str, partitions: int) -> None:
        self.topic = mock.create_topic(topic, partitions)
        self.lock = threading.Lock()
        self.assignment: list[int] = list(range(partitions))
        self.heartbeat_errors: deque[ErrorCode] = deque()
        self.fetch_errors: deque[ErrorCode] = deque()
        #: the next fetch answers: {partition: (records, [(first, last, delivery count)])}
        self.fetches: deque[dict[int, tuple[bytes, list[tuple[int, int, int]]]]] = deque()
        self.ack_errors: dict[int, ErrorCode] = {}
        broker = mock.broker(1)
        broker.respond(ShareGroupHeartbeatRequest, self.heartbeat, times=None)
        broker.respond(ShareFetchRequest, self.fetch, times=None)
        broker.respond(ShareAcknowledgeRequest, self.acknowledge, times=None)
        self.broker = broker

    def heartbeat(self, req: Any, version: int) -> Any:
        R = ShareGroupHeartbeatResponse
        with self.lock:
            if self.heartbeat_errors:
                return R(error_code=int(self.heartbeat_errors.popleft()))
            if req.member_epoch == -1:
                return R(member_id=req.member_id, member_epoch=-1)
            return R(member_id=req.member_id, member_epoch=req.member_epoch + 1, heartbeat_interval_ms=30,
                     assignment=R.Assignment(topic_partitions=[
                         R.TopicPartitions(topic_id=self.topic.topic_id, partitions=list(self.assignment))]))

    def fetch(self, req: Any, version: int) -> Any:
        R = ShareFetchResponse
        with self.lock:
            if self.fetch_errors:
                return R(error_code=int(self.fetch_errors.popleft()))
            answer = self.fetches.popleft() if self.fetches else {}
        listed = {fp.partition_index: fp for t in req.topics for fp in t.partitions}
        parts = []
        for p in sorted(set(listed) | set(answer)):
            records, acquired = answer.get(p, (b"", []))
            acked = p in listed and bool(listed[p].acknowledgement_batches)
            parts.append(R.PartitionData(
                partition_index=p, error_code=0,
                acknowledge_error_code=int(self.ack_errors.get(p, 0)) if acked else 0,
                current_leader=R.LeaderIdAndEpoch(leader_id=1, leader_epoch=0), records=records,
                acquired_records=[R.AcquiredRecords(first_offset=f, last_offset=last, delivery_count=n)
                                  for f, last, n in acquired],
            ))
        resp = R(error_code=0, acquisition_lock_timeout_ms=30000,
                 responses=[R.ShareFetchableTopicResponse(topic_id=self.topic.topic_id, partitions=parts)])
        # an answer with nothing in it waits a little, as MaxWaitMs would: no busy loop
        return resp if answer or req.max_wait_ms == 0 else Delayed(resp, 0.02)

    def acknowledge(self, req: Any, version: int) -> Any:
        A = ShareAcknowledgeResponse
        parts = [A.PartitionData(partition_index=ap.partition_index, error_code=int(self.ack_errors.get(ap.partition_index, 0)),
                                 current_leader=A.LeaderIdAndEpoch(leader_id=1, leader_epoch=0))
                 for t in req.topics for ap in t.partitions]
        return A(error_code=0, responses=[A.ShareAcknowledgeTopicResponse(topic_id=self.topic.topic_id, partitions=parts)])

    def fetch_requests(self) -> list[Any]:
        return self.broker.received(ShareFetchRequest)

    def heartbeats(self) -> list[Any]:
        return self.broker.received(ShareGroupHeartbeatRequest)


@pytest.fixture
def mock() -> Iterator[MockCluster]:
    with MockCluster(brokers=1) as cluster:
        yield cluster


def _consumer(mock: MockCluster, **extra: Any) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": mock.bootstrap, "group.id": "workers", "retry.backoff.ms": 20,
                          "fetch.max.wait.ms": 50, **extra})


def _poll_until(c: ShareConsumer, n: int) -> list[ShareRecord]:
    got: list[ShareRecord] = []

    def more() -> bool:
        got.extend(c.poll(0.05))
        return len(got) >= n

    wait_for(more, TIMEOUT, f"{n} records")
    return got


def _session_open(fake: FakeShareBroker) -> bool:
    """The consumer's session holds both partitions (a request after the one that opened it was sent)."""
    return any(r.share_session_epoch >= 1 for r in fake.fetch_requests())


def _acks(req: Any) -> dict[int, list[tuple[int, int, list[int]]]]:
    return {fp.partition_index: [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in fp.acknowledgement_batches]
            for t in req.topics for fp in t.partitions if fp.acknowledgement_batches}


def test_ack_batches_are_runs_of_consecutive_offsets() -> None:
    assert ack_batches({}) == []
    assert ack_batches({3: 1, 1: 1, 2: 1, 7: 2}) == [(1, 3, [1]), (7, 7, [2])]
    assert ack_batches({0: 1, 1: 2, 2: 3, 5: 0}) == [(0, 2, [1, 2, 3]), (5, 5, [0])]
    assert ack_batches({0: 1, 10**12 + 1: 1}, [(1, 10**12, GAP)]) == [(0, 0, [1]), (1, 10**12, [0]), (10**12 + 1, 10**12 + 1, [1])]


_ranges = st.lists(st.tuples(st.integers(-3, 60), st.integers(-3, 60), st.integers(1, 5)), max_size=6)
_offsets = st.lists(st.integers(0, 60), max_size=40).map(sorted)


@given(_ranges, _offsets)
def test_split_acquired_delivers_the_acquired_records_and_acknowledges_the_rest_as_gaps(
    ranges: list[tuple[int, int, int]], offsets: list[int],
) -> None:
    """Whatever ranges a broker sends (empty, reversed, negative, overlapping) and whatever the
    batches hold: exactly the acquired offsets are either delivered (when a record has them) or
    gaps, each once, in order."""
    delivered, gaps = split_acquired(ranges, offsets)
    acquired = {o for first, last, _n in ranges for o in range(max(first, 0), last + 1)}
    out = [o for o, _n in delivered]
    gapped = [o for first, last in gaps for o in range(first, last + 1)]
    assert out == sorted(set(out)) and set(out) == acquired & set(offsets)
    assert sorted(out + gapped) == sorted(acquired), "each acquired offset once"
    assert all(first <= last for first, last in gaps)
    batches = ack_batches(dict.fromkeys(out, ACCEPT), [(f, last, GAP) for f, last in gaps])
    assert all(b[0] <= b[1] and (len(b[2]) in (1, b[1] - b[0] + 1)) for b in batches)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(batches)), "ascending, not overlapping"


def test_a_huge_acquired_range_is_not_listed_offset_by_offset() -> None:
    """A compacted batch spans offsets it no longer holds: one gap range, whatever its length."""
    delivered, gaps = split_acquired([(0, 10**15, 1)], [0, 10**15])
    assert delivered == [(0, 1), (10**15, 1)] and gaps == [(1, 10**15 - 1)]


def test_join_one_session_and_acknowledgements_on_the_next_fetch(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 2)
    fake.fetches.append({0: (_batch(0, 3), [(0, 2, 1)])})
    with _consumer(mock) as c:
        c.subscribe(["jobs"])
        got = _poll_until(c, 3)
        assert [(r.partition, r.offset, r.value, r.delivery_count) for r in got] == [
            (0, 0, b"v0", 1), (0, 1, b"v1", 1), (0, 2, b"v2", 1)]
        assert c.assignment() == {("jobs", 0), ("jobs", 1)}
        n = len(fake.fetch_requests())
        assert c.poll(0.05) == []  # implicit mode: the next poll accepts them
        wait_for(lambda: len(fake.fetch_requests()) > n, TIMEOUT, "the next fetch")
    hb = fake.heartbeats()
    assert hb[0].member_epoch == 0 and hb[0].subscribed_topic_names == ["jobs"]
    uuid.UUID(hb[0].member_id)  # the client's own UUID
    assert all(h.member_id == hb[0].member_id for h in hb)
    assert hb[1].member_epoch == 1 and hb[1].subscribed_topic_names is None  # unchanged: not sent again
    assert hb[-1].member_epoch == -1  # close leaves
    reqs = fake.fetch_requests()
    assert [r.share_session_epoch for r in reqs] == list(range(len(reqs)))
    first = reqs[0]
    assert sorted(fp.partition_index for t in first.topics for fp in t.partitions) == [0, 1]
    assert not _acks(first) and first.max_records == 500 and first.batch_size == 500
    assert all(not r.topics for r in reqs[1:n]), "an open session lists only new partitions and acknowledgements"
    assert _acks(reqs[n]) == {0: [(0, 2, [ACCEPT])]}
    assert all(not _acks(r) for r in reqs[n + 1:])
    # close: the session ends at epoch -1 (nothing left to acknowledge)
    (final,) = fake.broker.received(ShareAcknowledgeRequest)
    assert final.share_session_epoch == -1 and not final.topics


def test_only_acquired_offsets_are_delivered_and_offsets_without_records_are_gaps(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 1)
    # the batch holds 0-5, this member acquired 3-8: 0-2 are another member's, 6-8 have no record
    fake.fetches.append({0: (_batch(0, 6), [(3, 4, 1), (5, 8, 2)])})
    with _consumer(mock) as c:
        c.subscribe(["jobs"])
        got = _poll_until(c, 3)
        assert [(r.offset, r.delivery_count) for r in got] == [(3, 1), (4, 1), (5, 2)]
        n = len(fake.fetch_requests())
        c.poll(0.05)
        wait_for(lambda: len(fake.fetch_requests()) > n, TIMEOUT, "the next fetch")
        assert _acks(fake.fetch_requests()[n]) == {0: [(3, 5, [ACCEPT]), (6, 8, [GAP])]}


def test_explicit_mode_acknowledges_each_record_and_commit_reports_per_partition(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 2)
    with _consumer(mock) as implicit, pytest.raises(IllegalStateError):
        implicit.acknowledge(ShareRecord("jobs", 0, 0, 0, 0, None, None, [], 1))
    fake.fetches.append({0: (_batch(0, 3), [(0, 2, 1)]), 1: (_batch(0, 1), [(0, 0, 1)])})
    with _consumer(mock, **{"share.acknowledgement.mode": "explicit"}) as c:
        c.subscribe(["jobs"])
        got = sorted(_poll_until(c, 4))
        with pytest.raises(IllegalStateError):
            c.poll(0)  # the last poll's records are not acknowledged
        with pytest.raises(IllegalStateError):
            c.acknowledge(got[0]._replace(offset=99))  # not in flight
        p0 = [r for r in got if r.partition == 0]
        c.acknowledge(p0[0], AcknowledgeType.ACCEPT)
        c.acknowledge(p0[1], AcknowledgeType.RELEASE)
        c.acknowledge(p0[2])  # ACCEPT, then changed before it was sent:
        c.acknowledge(p0[2], AcknowledgeType.REJECT)
        c.acknowledge(next(r for r in got if r.partition == 1))
        fake.ack_errors[0] = ErrorCode.INVALID_RECORD_STATE
        results = c.commit_sync(10)
        assert set(results) == {("jobs", 0), ("jobs", 1)} and results[("jobs", 1)] is None
        err = results[("jobs", 0)]
        assert isinstance(err, KafkaError) and err.code == ErrorCode.INVALID_RECORD_STATE
        (ack,) = fake.broker.received(ShareAcknowledgeRequest)
        assert ack.share_session_epoch == fake.fetch_requests()[-1].share_session_epoch + 1
        assert {ap.partition_index: [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                     for b in ap.acknowledgement_batches] for t in ack.topics for ap in t.partitions} == {
            0: [(0, 2, [ACCEPT, RELEASE, REJECT])], 1: [(0, 0, [ACCEPT])]}
        with pytest.raises(IllegalStateError):
            c.acknowledge(p0[0])  # sent: no longer in flight
        assert c.commit_sync(10) == {}  # nothing due
        c.poll(0)  # everything was acknowledged: polling is allowed again


def test_commit_async_gives_the_results_and_close_sends_the_pending_at_epoch_minus_one(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 1)
    fake.fetches.append({0: (_batch(0, 2), [(0, 1, 1)])})
    fake.fetches.append({0: (_batch(2, 2), [(2, 3, 1)])})
    c = _consumer(mock)
    c.subscribe(["jobs"])
    _poll_until(c, 2)
    assert c.commit_async().result(10) == {("jobs", 0): None}
    _poll_until(c, 2)
    c.close()
    acks = fake.broker.received(ShareAcknowledgeRequest)
    assert [a.share_session_epoch for a in acks[:1]] != [-1] and acks[-1].share_session_epoch == -1
    assert [(b.first_offset, b.last_offset, list(b.acknowledge_types))
            for t in acks[-1].topics for ap in t.partitions for b in ap.acknowledgement_batches] == [(2, 3, [ACCEPT])]
    assert fake.heartbeats()[-1].member_epoch == -1
    with pytest.raises(IllegalStateError):
        c.poll(0)


def test_a_smaller_assignment_is_forgotten_and_a_fenced_member_joins_again(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 2)
    with _consumer(mock) as c:
        c.subscribe(["jobs"])
        # the member joins on the first poll (as Kafka's), then opens its session
        wait_for(lambda: c.poll(0.05) == [] and _session_open(fake), TIMEOUT, "the session open")
        with fake.lock:
            fake.assignment = [1]
        wait_for(lambda: c.assignment() == {("jobs", 1)}, TIMEOUT, "the smaller assignment")

        def forgot() -> bool:
            c.poll(0.05)
            return any(r.forgotten_topics_data for r in fake.fetch_requests())

        wait_for(forgot, TIMEOUT, "a fetch forgetting partition 0")
        req = next(r for r in fake.fetch_requests() if r.forgotten_topics_data)
        assert [(f.topic_id, list(f.partitions)) for f in req.forgotten_topics_data] == [(fake.topic.topic_id, [0])]
        n = len(fake.heartbeats())
        with fake.lock:
            fake.heartbeat_errors.append(ErrorCode.FENCED_MEMBER_EPOCH)
        wait_for(lambda: len(fake.heartbeats()) > n + 1, TIMEOUT, "the heartbeat after the fence")
        fenced_at = next(i for i, h in enumerate(fake.heartbeats()) if i >= n and h.member_epoch > 0)
        rejoin = fake.heartbeats()[fenced_at + 1]
        assert rejoin.member_epoch == 0 and rejoin.subscribed_topic_names == ["jobs"]


def test_a_lost_share_session_is_opened_again_at_epoch_zero(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 1)
    with _consumer(mock) as c:
        c.subscribe(["jobs"])
        wait_for(lambda: c.poll(0.05) == [] and len(fake.fetch_requests()) >= 2, TIMEOUT, "two fetches")
        with fake.lock:
            fake.fetch_errors.append(ErrorCode.SHARE_SESSION_NOT_FOUND)
        n = len(fake.fetch_requests())
        wait_for(lambda: c.poll(0.05) == [] and len(fake.fetch_requests()) >= n + 2, TIMEOUT, "the fetches after the error")
        reqs = fake.fetch_requests()
        assert reqs[n].share_session_epoch > 0  # answered SHARE_SESSION_NOT_FOUND
        assert reqs[n + 1].share_session_epoch == 0
        assert [fp.partition_index for t in reqs[n + 1].topics for fp in t.partitions] == [0]


def test_subscribe_needs_a_group_and_poll_a_subscription(mock: MockCluster) -> None:
    from odradek.client import ClientConfigError

    with pytest.raises(ClientConfigError):
        ShareConsumer({"bootstrap.servers": mock.bootstrap})
    with pytest.raises(ClientConfigError):
        ShareConsumer({"bootstrap.servers": mock.bootstrap, "group.id": "g", "share.acknowledgement.mode": "sometimes"})
    with _consumer(mock) as c:
        with pytest.raises(IllegalStateError):
            c.poll(0)
        with pytest.raises(ValueError):
            c.subscribe(["a", "a"])


def test_with_records_still_buffered_the_acknowledgements_go_in_a_share_acknowledge(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 1)
    fake.fetches.append({0: (_batch(0, 4), [(0, 3, 1)])})
    with _consumer(mock, **{"max.poll.records": 2}) as c:
        c.subscribe(["jobs"])
        assert [r.offset for r in _poll_until(c, 2)] == [0, 1]
        n = len(fake.fetch_requests())
        assert [r.offset for r in c.poll(0)] == [2, 3]  # from the buffer: no fetch due
        wait_for(lambda: fake.broker.received(ShareAcknowledgeRequest), TIMEOUT, "the acknowledgements")
        (ack,) = fake.broker.received(ShareAcknowledgeRequest)
        assert ack.share_session_epoch > 0
        assert [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                for t in ack.topics for ap in t.partitions for b in ap.acknowledgement_batches] == [(0, 1, [ACCEPT])]
        assert len(fake.fetch_requests()) == n


def test_the_asyncio_consumer(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 1)
    fake.fetches.append({0: (_batch(0, 2), [(0, 1, 1)])})

    async def main() -> list[int]:
        async with AsyncShareConsumer(bootstrap_servers=mock.bootstrap, group_id="workers", fetch_max_wait_ms=50) as c:
            c.subscribe(["jobs"])
            got: list[ShareRecord] = []
            for _ in range(400):
                got += await c.poll(0.05)
                if len(got) >= 2:
                    break
            assert (await c.commit_async()) == {("jobs", 0): None}
            return [r.offset for r in got]

    assert asyncio.run(main()) == [0, 1]
    assert fake.heartbeats()[-1].member_epoch == -1


def test_close_from_another_thread_ends_a_poll_and_an_empty_subscription_leaves(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 1)
    c = _consumer(mock)
    c.subscribe(["jobs"])
    wait_for(lambda: c.poll(0.05) == [] and c.assignment(), TIMEOUT, "the assignment")
    c.subscribe([])
    with pytest.raises(IllegalStateError):
        c.poll(0)
    assert fake.heartbeats()[-1].member_epoch == -1  # left the group
    assert fake.broker.received(ShareAcknowledgeRequest)[-1].share_session_epoch == -1  # closed the session
    c.subscribe(["jobs"])
    wait_for(lambda: c.poll(0.05) == [] and c.assignment(), TIMEOUT, "the assignment again")
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(c.poll(30)))
    t.start()
    wait_for(lambda: len(fake.fetch_requests()) > 0, TIMEOUT, "the poll fetching")
    c.close()
    t.join(TIMEOUT)
    assert not t.is_alive() and result == [[]]


def test_with_no_partitions_left_the_session_forgets_them_at_once(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 2)
    with _consumer(mock) as c:
        c.subscribe(["jobs"])
        wait_for(lambda: c.poll(0.05) == [] and _session_open(fake), TIMEOUT, "the session open")
        with fake.lock:
            fake.assignment = []
        wait_for(lambda: c.assignment() == set(), TIMEOUT, "no partitions")

        def forgot() -> bool:
            c.poll(0.05)
            return any(r.forgotten_topics_data for r in fake.fetch_requests())

        wait_for(forgot, TIMEOUT, "a fetch forgetting both partitions")
        req = next(r for r in fake.fetch_requests() if r.forgotten_topics_data)
        assert [sorted(f.partitions) for f in req.forgotten_topics_data] == [[0, 1]] and req.max_wait_ms == 0


def test_the_acknowledgement_commit_callback_sees_the_acknowledgements_sent_with_fetches(mock: MockCluster) -> None:
    fake = FakeShareBroker(mock, "jobs", 1)
    fake.fetches.append({0: (_batch(0, 3), [(0, 3, 1)])})  # offset 3 has no record: a gap
    seen: list[tuple[dict[Any, set[int]], Any]] = []
    with _consumer(mock) as c:
        c.set_acknowledgement_commit_callback(lambda offsets, error: seen.append((offsets, error)))
        c.subscribe(["jobs"])
        _poll_until(c, 3)
        fake.ack_errors[0] = ErrorCode.INVALID_RECORD_STATE
        wait_for(lambda: c.poll(0.05) == [] and seen, TIMEOUT, "the callback")
    ((offsets, error),) = seen
    assert offsets == {("jobs", 0): {0, 1, 2}}  # the records the application saw (not the gap)
    assert isinstance(error, KafkaError) and error.code == ErrorCode.INVALID_RECORD_STATE
