"""ShareFetch and ShareAcknowledge at the partition leader, through the wire: share sessions and
their epochs, acquisition (one member at a time per record), RELEASE / ACCEPT / REJECT, records a
closed session or connection held going to the others, and Kafka's errors."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.protocol.messages.share_acknowledge import ShareAcknowledgeRequest as AQ
from odradek.protocol.messages.share_fetch import ShareFetchRequest as Q
from odradek.records import iter_batch_headers
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import create_topic

ACCEPT, RELEASE, REJECT = 1, 2, 3
_topics = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-share-fetch"))
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


def _topic(broker: BrokerProcess, partitions: int = 1) -> tuple[str, uuid.UUID]:
    name = f"share-{next(_topics)}"
    create_topic(broker.bootstrap, name, partitions)
    w = WireClient(broker.host, broker.port)
    try:
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)]), version=12)
        return name, md.topics[0].topic_id
    finally:
        w.close()


def _produce(broker: BrokerProcess, topic: str, n: int, partition: int = 0) -> None:
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=partition)
    assert p.flush(30) == 0


class Member:
    """One share-group member's session on its own connection."""

    def __init__(self, broker: BrokerProcess, group: str, topic_id: uuid.UUID, partitions: tuple[int, ...] = (0,)) -> None:
        self.wire = WireClient(broker.host, broker.port)
        self.group = group
        self.member_id = str(uuid.uuid4())
        self.topic_id = topic_id
        self.partitions = partitions
        self.epoch = 0

    def fetch(self, acks: dict[int, list[tuple[int, int, list[int]]]] | None = None, *, wait_ms: int = 0,
              max_records: int = 500, epoch: int | None = None, version: int = 1, record_limit: bool = False,
              renew: bool = False) -> Any:
        acks = acks or {}
        parts = [
            Q.FetchPartition(partition_index=i, acknowledgement_batches=[
                Q.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t) for f, last, t in acks.get(i, [])
            ])
            for i in self.partitions
        ]
        req = Q(group_id=self.group, member_id=self.member_id, share_session_epoch=self.epoch if epoch is None else epoch,
                max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                topics=[Q.FetchTopic(topic_id=self.topic_id, partitions=parts)],
                share_acquire_mode=1 if record_limit else 0, is_renew_ack=renew)
        resp = self.wire.request(req, version=version, timeout=30)
        if epoch is None and resp.error_code == 0:
            self.epoch += 1
        return resp

    def acknowledge(self, acks: dict[int, list[tuple[int, int, list[int]]]], *, epoch: int | None = None,
                    version: int = 1) -> Any:
        req = AQ(group_id=self.group, member_id=self.member_id, share_session_epoch=self.epoch if epoch is None else epoch,
                 topics=[AQ.AcknowledgeTopic(topic_id=self.topic_id, partitions=[
                     AQ.AcknowledgePartition(partition_index=i, acknowledgement_batches=[
                         AQ.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t) for f, last, t in b
                     ]) for i, b in acks.items()
                 ])], is_renew_ack=version >= 2 and any(4 in t for b in acks.values() for _f, _l, t in b))
        resp = self.wire.request(req, version=version, timeout=30)
        if epoch is None and resp.error_code == 0:
            self.epoch += 1
        return resp

    def close(self) -> None:
        self.wire.close()


def acquired(resp: Any, partition: int = 0) -> list[tuple[int, int, int]]:
    assert resp.error_code == 0, resp
    out = []
    for t in resp.responses:
        for p in t.partitions:
            if p.partition_index == partition:
                assert p.error_code == 0, p
                out += [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
    return out


def offsets(runs: list[tuple[int, int, int]]) -> list[int]:
    return [o for first, last, _n in runs for o in range(first, last + 1)]


def ack_error(resp: Any, partition: int = 0) -> int:
    for t in resp.responses:
        for p in t.partitions:
            if p.partition_index == partition:
                return p.acknowledge_error_code if hasattr(p, "acknowledge_error_code") else p.error_code
    raise AssertionError(f"partition {partition} not answered: {resp}")


def _fetch_until(m: Member, want: int, tries: int = 20) -> list[tuple[int, int, int]]:
    got: list[tuple[int, int, int]] = []
    for _ in range(tries):
        got += acquired(m.fetch(wait_ms=500))
        if len(offsets(got)) >= want:
            break
    return got


def test_a_record_goes_to_one_member_and_back_to_the_others_on_release(broker: BrokerProcess) -> None:
    topic, tid = _topic(broker)
    a, b = Member(broker, "g-release", tid), Member(broker, "g-release", tid)
    try:
        assert acquired(a.fetch()) == []  # share.auto.offset.reset=latest: nothing before the first fetch
        assert acquired(b.fetch()) == []
        _produce(broker, topic, 10)
        got = _fetch_until(a, 10)
        assert offsets(got) == list(range(10)) and {n for *_r, n in got} == {1}
        resp = a.fetch()
        records = [t for t in resp.responses for p in t.partitions if p.acquired_records]
        assert records == []  # all ten are a's: nothing more for a
        assert acquired(b.fetch(wait_ms=200)) == []  # nor for b while a holds them
        # a releases 0-4 and accepts 5-9: only 0-4 come to b, delivered a second time
        resp = a.acknowledge({0: [(0, 4, [RELEASE]), (5, 9, [ACCEPT])]})
        assert resp.error_code == 0 and ack_error(resp) == 0
        got_b = _fetch_until(b, 5)
        assert offsets(got_b) == [0, 1, 2, 3, 4] and {n for *_r, n in got_b} == {2}
        # b accepts them all: nobody gets anything again
        assert ack_error(b.fetch({0: [(0, 4, [ACCEPT])]})) == 0
        assert acquired(a.fetch(wait_ms=200)) == [] and acquired(b.fetch()) == []
    finally:
        a.close()
        b.close()


def test_acknowledging_what_the_member_does_not_hold_is_invalid_record_state(broker: BrokerProcess) -> None:
    topic, tid = _topic(broker)
    a, b = Member(broker, "g-state", tid), Member(broker, "g-state", tid)
    try:
        a.fetch()
        b.fetch()
        _produce(broker, topic, 4)
        assert offsets(_fetch_until(a, 4)) == [0, 1, 2, 3]
        resp = b.acknowledge({0: [(0, 1, [ACCEPT])]})
        assert ack_error(resp) == ErrorCode.INVALID_RECORD_STATE
        # nothing changed: a still holds 0-3 and can accept them
        assert ack_error(a.acknowledge({0: [(0, 3, [ACCEPT])]})) == 0
        # and accepting them twice is refused too
        assert ack_error(a.acknowledge({0: [(0, 0, [ACCEPT])]})) == ErrorCode.INVALID_RECORD_STATE
    finally:
        a.close()
        b.close()


def test_per_offset_types_reject_archives(broker: BrokerProcess) -> None:
    topic, tid = _topic(broker)
    a, b = Member(broker, "g-types", tid), Member(broker, "g-types", tid)
    try:
        a.fetch()
        _produce(broker, topic, 3)
        assert offsets(_fetch_until(a, 3)) == [0, 1, 2]
        assert ack_error(a.acknowledge({0: [(0, 2, [REJECT, RELEASE, ACCEPT])]})) == 0
        # only 1 comes back: 0 was rejected (archived), 2 accepted
        got = acquired(b.fetch()) + _fetch_until(b, 1, tries=2)
        assert offsets(got) == [1]
    finally:
        a.close()
        b.close()


def test_session_epochs_are_kafkas(broker: BrokerProcess) -> None:
    _topic_name, tid = _topic(broker)
    a = Member(broker, "g-epochs", tid)
    try:
        resp = a.fetch(epoch=3)  # no session yet
        assert resp.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        a.fetch()
        resp = a.fetch(epoch=a.epoch + 1)
        assert resp.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert a.fetch().error_code == 0  # the right epoch still works
        resp = a.acknowledge({0: []}, epoch=0)
        assert resp.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        resp = a.fetch({0: [(0, 0, [ACCEPT])]}, epoch=0)  # a first request acknowledges nothing
        assert resp.error_code == ErrorCode.INVALID_REQUEST
        resp = a.fetch({0: [(5, 2, [ACCEPT])]})  # not a range
        assert resp.error_code == 0 and ack_error(resp) == ErrorCode.INVALID_REQUEST
        resp = a.fetch({0: [(0, 3, [9])]})  # no such type
        assert ack_error(resp) == ErrorCode.INVALID_REQUEST
        resp = a.fetch({0: [(0, 3, [ACCEPT, ACCEPT])]})  # two types for four offsets
        assert ack_error(resp) == ErrorCode.INVALID_REQUEST
    finally:
        a.close()


def test_empty_ids_and_unknown_topics(broker: BrokerProcess) -> None:
    w = WireClient(broker.host, broker.port)
    try:
        for group, member in (("", "m"), ("g", ""), (None, "m")):
            resp = w.request(Q(group_id=group, member_id=member, share_session_epoch=0, max_wait_ms=0, min_bytes=1,
                               max_records=10, batch_size=10, topics=[]), version=1)
            assert resp.error_code == ErrorCode.INVALID_REQUEST
        resp = w.request(Q(group_id="g-unknown", member_id=str(uuid.uuid4()), share_session_epoch=0, max_wait_ms=0,
                           min_bytes=1, max_records=10, batch_size=10,
                           topics=[Q.FetchTopic(topic_id=uuid.uuid4(), partitions=[Q.FetchPartition(partition_index=0)])]),
                         version=1)
        assert resp.error_code == 0
        assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    finally:
        w.close()


def test_a_closed_session_or_connection_gives_its_records_to_the_others(broker: BrokerProcess) -> None:
    topic, tid = _topic(broker)
    a, b, c = (Member(broker, "g-close", tid) for _ in range(3))
    try:
        for m in (a, b, c):
            m.fetch()
        _produce(broker, topic, 6)
        assert offsets(_fetch_until(a, 6)) == list(range(6))
        # a closes its session (epoch -1) accepting 0-1: 2-5 go to b at once
        resp = a.fetch({0: [(0, 1, [ACCEPT])]}, epoch=-1)
        assert resp.error_code == 0 and ack_error(resp) == 0
        got = _fetch_until(b, 4)
        assert offsets(got) == [2, 3, 4, 5]
        # b's connection drops: c gets them, without waiting for a lock to expire
        b.close()
        got = _fetch_until(c, 4)
        assert offsets(got) == [2, 3, 4, 5] and {n for *_r, n in got} == {3}
    finally:
        a.close()
        c.close()


def test_max_records_bounds_one_answer_and_the_rest_go_to_the_next(broker: BrokerProcess) -> None:
    topic, tid = _topic(broker)
    a, b = Member(broker, "g-max", tid), Member(broker, "g-max", tid)
    try:
        a.fetch()
        b.fetch()
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for i in range(30):
            p.produce(topic, value=b"%d" % i, partition=0)
            p.poll(0)
        assert p.flush(30) == 0
        first = offsets(acquired(a.fetch(wait_ms=500, max_records=10)))
        assert 10 <= len(first) < 30  # one-record batches: exactly the limit (a batch end may pass it)
        rest = offsets(_fetch_until(b, 30 - len(first)))
        assert sorted(first + rest) == list(range(30)) and not set(first) & set(rest)
    finally:
        a.close()
        b.close()


def test_the_records_sent_hold_the_acquired_offsets(broker: BrokerProcess) -> None:
    topic, tid = _topic(broker)
    a = Member(broker, "g-data", tid)
    try:
        a.fetch()
        _produce(broker, topic, 5)
        resp = a.fetch(wait_ms=2000)
        part = resp.responses[0].partitions[0]
        runs = [(r.first_offset, r.last_offset) for r in part.acquired_records]
        data = bytes(part.records)
        headers = list(iter_batch_headers(data))
        assert headers, "the acquired records' batches are in the answer"
        held = {o for h in headers for o in range(h.base_offset, h.last_offset + 1)}
        assert all(o in held for first, last in runs for o in range(first, last + 1))
    finally:
        a.close()


def test_the_answer_carries_only_the_batches_of_the_acquired_offsets(broker: BrokerProcess) -> None:
    """As Kafka slices a share fetch's records: the batches read past what was acquired (max_records
    reached, or the in-flight window full) are not sent, nor those before it."""
    topic, tid = _topic(broker)
    a, b = Member(broker, "g-slice", tid), Member(broker, "g-slice", tid)
    try:
        a.fetch()
        b.fetch()
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for i in range(30):
            p.produce(topic, value=b"%d" % i, partition=0)
            p.poll(0)
        assert p.flush(30) == 0
        for m, wanted in ((a, 10), (b, 5)):
            resp = m.fetch(wait_ms=2000, max_records=wanted)
            part = resp.responses[0].partitions[0]
            held = offsets([(r.first_offset, r.last_offset, 0) for r in part.acquired_records])
            assert len(held) == wanted  # one-record batches: exactly the limit
            sent = [(h.base_offset, h.last_offset) for h in iter_batch_headers(bytes(part.records))]
            # a's are 0-9; b's (reading from 10 on) 10-14: one batch each, nothing else
            assert sent == [(o, o) for o in held]
    finally:
        a.close()
        b.close()


def test_a_restarted_broker_resumes_without_redelivering_accepted_records(tmp_path: Any) -> None:
    """The share partitions' state goes through the share coordinator (__share_group_state): after
    a restart, what was accepted or rejected stays done and what was held comes back (its lock is
    gone with the broker), with its delivery count."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        topic, tid = _topic(proc)
        a = Member(proc, "g-restart", tid)
        a.fetch()
        _produce(proc, topic, 10)
        assert offsets(_fetch_until(a, 10)) == list(range(10))
        assert ack_error(a.acknowledge({0: [(0, 3, [ACCEPT]), (4, 4, [REJECT]), (5, 6, [RELEASE])]})) == 0
        a.close()
        assert proc.stop() == 0
        proc.start()
        b = Member(proc, "g-restart", tid)
        got: list[tuple[int, int, int]] = []
        for _ in range(40):
            resp = b.fetch(wait_ms=500)
            if resp.error_code == 0 and not any(p.error_code for t in resp.responses for p in t.partitions):
                got += acquired(resp)
            if len(offsets(got)) >= 5:
                break
        # 0-3 accepted and 4 rejected stay done; 5-6 released and 7-9 held come back once more
        assert offsets(got) == [5, 6, 7, 8, 9]
        counts = {o: n for first, last, n in got for o in range(first, last + 1)}
        assert counts == {5: 2, 6: 2, 7: 2, 8: 2, 9: 2}
        b.close()
    finally:
        proc.stop()


def test_acknowledgements_answered_before_a_crash_are_not_redelivered(tmp_path: Any) -> None:
    """An acknowledgement is answered only once its state is stored (the writes are coalesced,
    never deferred past the answer): after a SIGKILL the accepted records stay done, and only what
    was held comes back (at-least-once: redelivering is allowed, skipping is not)."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        topic, tid = _topic(proc)
        a = Member(proc, "g-crash", tid)
        a.fetch()
        _produce(proc, topic, 20)
        assert offsets(_fetch_until(a, 20)) == list(range(20))
        # accepted in two requests (the second releases 13-14 too); 15-19 still held at the crash
        assert ack_error(a.acknowledge({0: [(0, 9, [ACCEPT])]})) == 0
        assert ack_error(a.acknowledge({0: [(10, 12, [ACCEPT]), (13, 14, [RELEASE])]})) == 0
        a.close()
        proc.kill()
        proc.start()
        c = Member(proc, "g-crash", tid)
        got: list[tuple[int, int, int]] = []
        for _ in range(40):
            resp = c.fetch(wait_ms=500)
            if resp.error_code == 0 and not any(p.error_code for t in resp.responses for p in t.partitions):
                got += acquired(resp)
            if len(offsets(got)) >= 7:
                break
        assert offsets(got) == [13, 14, 15, 16, 17, 18, 19]
        c.close()
    finally:
        proc.stop()


_ALLOWED = {int(c) for c in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_RECORD_STATE,
                             ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
_offsets = st.one_of(st.integers(-3, 40), st.sampled_from([-(2**63), 2**63 - 1, 2**31]))
_batches = st.lists(st.tuples(_offsets, _offsets, st.lists(st.integers(-128, 127), max_size=6)), max_size=5)


@pytest.fixture(scope="module")
def hostile_target(broker: BrokerProcess) -> tuple[str, uuid.UUID]:
    topic, tid = _topic(broker)
    _produce(broker, topic, 20)
    return topic, tid


@settings(max_examples=40, deadline=None)
@given(batches=_batches, epoch=st.sampled_from([0, 1, 2, -1, 7, -5]), partition=st.sampled_from([0, 1, -1, 2**31 - 1]),
       via_fetch=st.booleans())
def test_hostile_acknowledgements_get_kafkas_errors_and_change_nothing(
    broker: BrokerProcess, hostile_target: tuple[str, uuid.UUID], batches: list[tuple[int, int, list[int]]], epoch: int,
    partition: int, via_fetch: bool,
) -> None:
    """Whatever a member sends as acknowledgements — ranges backwards, overlapping, beyond the log,
    unknown types, type lists of the wrong length, partitions that do not exist, any epoch — the
    answer is one of Kafka's errors, and another member of the group still gets every record it
    is due: nothing was acknowledged or released by the hostile request."""
    _topic_name, tid = hostile_target
    group = f"g-hostile-{uuid.uuid4().hex[:6]}"
    control = Member(broker, group, tid)
    hostile = Member(broker, group, tid, partitions=(partition,))
    try:
        _set_earliest_by_fetching(control)
        held = offsets(_fetch_until(control, 20))
        assert held == list(range(20))
        hostile.fetch()  # a session of its own (it holds nothing: control holds everything)
        acks = {partition: batches}
        resp = hostile.fetch(acks, epoch=epoch) if via_fetch else hostile.acknowledge(acks, epoch=epoch)
        assert resp.error_code in _ALLOWED
        for t in resp.responses:
            for p in t.partitions:
                assert p.error_code in _ALLOWED
                assert getattr(p, "acknowledge_error_code", 0) in _ALLOWED
        # control still holds all twenty: it can accept them all, once
        assert ack_error(control.acknowledge({0: [(0, 19, [ACCEPT])]})) == 0
    finally:
        control.close()
        hostile.close()


def _set_earliest_by_fetching(m: Member) -> None:
    """share.auto.offset.reset=earliest for the member's group (its first fetch then starts at 0)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": f"{m.wire.host}:{m.wire.port}"})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, m.group, incremental_configs=[entry])]).values():
        fut.result(30)


def test_locks_expire_on_the_brokers_clock_and_renew_extends_them(tmp_path: Any) -> None:
    """On the broker's (fake) clock: a record held past share.record.lock.duration.ms goes to
    another member, not a millisecond before, with its delivery count up by one; a RENEW
    acknowledgement (v2, KIP-1222) restarts the lock.  v2's record-limit mode acquires no more
    than MaxRecords even inside one batch."""
    import asyncio

    from odradek.testing import FakeScheduler, running_broker

    lock = 30_000
    fake = FakeScheduler()

    async def main() -> None:
        async with running_broker(tmp_path / "data", timers=fake) as broker:
            await broker.topics.create("locks", 1, 1, {})
            host, port = broker.bound["PLAINTEXT"]
            proc: Any = type("P", (), {"host": host, "port": port, "bootstrap": f"{host}:{port}"})()
            tid = broker.backend.image.topics["locks"].topic_id
            a, b = await asyncio.gather(*(asyncio.to_thread(Member, proc, "g-locks", tid) for _ in range(2)))
            try:
                await asyncio.to_thread(a.fetch)
                await asyncio.to_thread(b.fetch)
                await asyncio.to_thread(_produce_one_batch, proc.bootstrap, "locks", 10)

                async def fetch_until(m: Member, want: int, **kw: Any) -> list[tuple[int, int, int]]:
                    got: list[tuple[int, int, int]] = []
                    for _ in range(200):
                        got += acquired(await asyncio.to_thread(m.fetch, version=2, **kw))
                        if len(offsets(got)) >= want:
                            break
                        await asyncio.sleep(0.02)
                    return got

                # record-limit mode: 4 of the batch's 10, the rest stay available
                first = await fetch_until(a, 4, max_records=4, record_limit=True)
                assert offsets(first) == [0, 1, 2, 3]
                rest = await fetch_until(a, 6)
                assert offsets(rest) == [4, 5, 6, 7, 8, 9]
                await fake.advance(lock - 1)
                assert acquired(await asyncio.to_thread(b.fetch, version=2)) == [], "expired a millisecond early"
                # a renews 0-4 at the last millisecond; 5-9 expire
                resp = await asyncio.to_thread(a.acknowledge, {0: [(0, 4, [4])]}, version=2)
                assert resp.error_code == 0 and ack_error(resp) == 0
                assert resp.acquisition_lock_timeout_ms == lock
                await fake.advance(1)
                got = await fetch_until(b, 5)
                assert got == [(5, 9, 2)]
                await fake.advance(lock - 2)
                assert acquired(await asyncio.to_thread(b.fetch, version=2)) == []
                await fake.advance(1)
                got = await fetch_until(b, 5)
                assert got == [(0, 4, 2)]
            finally:
                a.close()
                b.close()

    asyncio.run(main())


def _produce_one_batch(bootstrap: str, topic: str, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(n):
        p.produce(topic, value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
