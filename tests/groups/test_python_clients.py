"""kafka-python's and aiokafka's group consumers against ``odradek serve``.

For each client: two members join one group on a 3-partition topic and split it (disjoint, all
partitions covered); they consume part of the topic committing after every record, then close;
a new member of the group resumes exactly after the committed offsets and finishes the topic.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import aiokafka  # type: ignore[import-untyped]
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from odradek.testing import BrokerProcess
from tests.groups.group_helpers import (
    DEFAULT_TIMEOUT,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    committed_offsets,
    create_topic,
    disjoint_cover,
    ends,
    produce,
    wait_until,
)

PARTITIONS = 3
TOTAL = 60
FIRST_PART = 25  # records the first two members consume before closing


def check_resumed(
    produced: dict[tuple[int, int], bytes], committed: dict[int, int], delivered: list[tuple[int, int, bytes]]
) -> None:
    """``delivered`` is exactly the records from the committed offsets on, in offset order."""
    resume = {p: max(committed.get(p, 0), 0) for p in range(PARTITIONS)}
    remaining = {po: v for po, v in produced.items() if po[1] >= resume[po[0]]}
    got = {(p, o): v for p, o, v in delivered}
    assert len(got) == len(delivered), "a record was delivered twice"
    assert got == remaining
    for p in range(PARTITIONS):
        offsets = [o for q, o, _v in delivered if q == p]
        assert offsets == list(range(resume[p], resume[p] + len(offsets)))


# ------------------------------------------------------------------------------------------------
# kafka-python


def kp_consumer(broker: BrokerProcess, group: str, topic: str, name: str) -> KafkaConsumer:
    """A kafka-python consumer that knows ``topic``'s partitions before it subscribes.

    Subscribed at construction, kafka-python asks for the topic's metadata and joins the group at
    the same time; a leader whose JoinGroup answer comes first assigns with no partitions ("No
    partition metadata for topic"), and kafka-python 3.0.12 was seen not to rejoin when the
    metadata came (both members held nothing for 30 s, on cold machines).  Real Kafka's
    ``group.initial.rebalance.delay.ms`` (3 s) hides that race; these tests set it to 0."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        client_id=name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        fetch_max_wait_ms=50,
        request_timeout_ms=10000,
        retry_backoff_ms=20,
        metadata_max_age_ms=5000,
    )
    assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))
    consumer.subscribe([topic])
    return consumer


class KpMember(threading.Thread):
    """A kafka-python group member polling in its own thread (its consumer is used by that thread
    only).  Polls take up to half a second: kafka-python finishes a rebalance inside one poll, and
    much shorter polls have been seen to leave it joined but never heartbeating."""

    def __init__(self, consumer: KafkaConsumer, allowed: Any = lambda _m: True) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer
        self.allowed = allowed
        self.delivered: list[tuple[int, int, bytes]] = []
        self.committed: dict[int, int] = {}
        self.assigned: list[int] = []
        self.steps = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.step(self.allowed(self))
                self.steps += 1
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close(autocommit=False)

    def step(self, allowed: bool) -> None:
        """Poll once; with ``allowed`` false the assigned partitions are paused so that nothing
        is consumed (records of partitions assigned during the poll are put back)."""
        if allowed:
            self.consumer.resume(*self.consumer.paused())
        else:
            self.consumer.pause(*self.consumer.assignment())
        batch = self.consumer.poll(timeout_ms=500 if allowed else 100, max_records=1)
        self.assigned = sorted(tp.partition for tp in self.consumer.assignment())
        if not allowed:
            for tp, records in batch.items():
                self.consumer.seek(tp, records[0].offset)
            return
        for tp, records in batch.items():
            for r in records:
                self.delivered.append((tp.partition, r.offset, r.value))
                try:
                    self.consumer.commit({tp: OffsetAndMetadata(r.offset + 1, "", -1)})
                except Exception:  # e.g. CommitFailedError during a rebalance: delivered again later
                    continue
                self.committed[tp.partition] = r.offset + 1

    def stop(self) -> None:
        self.stopping.set()
        self.join(DEFAULT_TIMEOUT)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error


def test_kafka_python_group_resumes_from_commits(broker: BrokerProcess, name: str) -> None:
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produced = produce(bs, topic, PARTITIONS, TOTAL, "kp")

    # nothing is consumed until both members are in and have split the partitions
    split = threading.Event()
    members: list[KpMember] = []

    def allowed(m: KpMember) -> bool:
        # each member takes about half, so that both consume whichever is faster to fetch
        return (
            split.is_set()
            and sum(len(x.delivered) for x in members) < FIRST_PART
            and len(m.delivered) <= FIRST_PART // 2
        )

    a = KpMember(kp_consumer(broker, group, topic, "kp-a"), allowed)
    b = KpMember(kp_consumer(broker, group, topic, "kp-b"), allowed)
    members += [a, b]
    try:
        wait_until(
            lambda: disjoint_cover([a.assigned, b.assigned], PARTITIONS) and a.assigned and b.assigned,
            what="two kafka-python members splitting the topic",
        )
        split.set()
        wait_until(lambda: len(a.delivered) + len(b.delivered) >= FIRST_PART, what="records consumed")
        # no more consuming: wait until each member began a step after that, then close both
        split.clear()
        steps = (a.steps, b.steps)
        wait_until(lambda: a.steps > steps[0] + 1 and b.steps > steps[1] + 1, what="members idle")
    finally:
        a.stop()
        b.stop()
    assert a.delivered and b.delivered
    assert {p for p, _o, _v in a.delivered}.isdisjoint({p for p, _o, _v in b.delivered})
    committed = committed_offsets(bs, group, topic, PARTITIONS)
    mine = {p: max(a.committed.get(p, 0), b.committed.get(p, 0)) for p in range(PARTITIONS)}
    assert {p: max(o, 0) for p, o in committed.items()} == mine
    assert 0 < sum(mine.values()) < TOTAL

    c = KpMember(kp_consumer(broker, group, topic, "kp-c"))
    try:
        wait_until(lambda: len(c.delivered) >= TOTAL - sum(mine.values()), what="kafka-python resuming")
    finally:
        c.stop()
    check_resumed(produced, committed, c.delivered)
    assert committed_offsets(bs, group, topic, PARTITIONS) == ends(produced)
    # what kafka-python reads back through OffsetFetch
    probe = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
    try:
        assert {p: probe.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)} == ends(produced)
    finally:
        probe.close(autocommit=False)


# ------------------------------------------------------------------------------------------------
# aiokafka


def aio_consumer(broker: BrokerProcess, group: str, topic: str, name: str) -> aiokafka.AIOKafkaConsumer:
    return aiokafka.AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        client_id=name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        fetch_max_wait_ms=50,
        request_timeout_ms=10000,
        retry_backoff_ms=20,
        metadata_max_age_ms=5000,
    )


class AioMember:
    def __init__(self, consumer: aiokafka.AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.delivered: list[tuple[int, int, bytes]] = []
        self.committed: dict[int, int] = {}

    async def step(self, allowed: bool = True) -> None:
        if allowed:
            self.consumer.resume(*self.consumer.paused())
        else:
            self.consumer.pause(*self.consumer.assignment())
        batch = await self.consumer.getmany(timeout_ms=20, max_records=1)
        if not allowed:
            for tp, records in batch.items():
                self.consumer.seek(tp, records[0].offset)
            return
        for tp, records in batch.items():
            for r in records:
                self.delivered.append((tp.partition, r.offset, r.value))
                try:
                    await self.consumer.commit({tp: r.offset + 1})
                except Exception:  # e.g. CommitFailedError during a rebalance: delivered again later
                    continue
                self.committed[tp.partition] = r.offset + 1

    def assigned(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())


async def until(predicate: Any, step: Any, what: str, timeout: float = DEFAULT_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await step()


async def aio_first_members(broker: BrokerProcess, group: str, topic: str) -> dict[int, int]:
    """Two members split the topic and consume FIRST_PART records; returns their commits."""
    a = AioMember(aio_consumer(broker, group, topic, "aio-a"))
    b = AioMember(aio_consumer(broker, group, topic, "aio-b"))
    await a.consumer.start()
    await b.consumer.start()

    split = False

    async def both() -> None:
        # each member takes about half, so that both consume whichever is faster to fetch
        allowed = split and len(a.delivered) + len(b.delivered) < FIRST_PART
        await asyncio.gather(*(m.step(allowed and len(m.delivered) <= FIRST_PART // 2) for m in (a, b)))

    try:
        # nothing is consumed until both members are in and have split the partitions
        await until(
            lambda: disjoint_cover([a.assigned(), b.assigned()], PARTITIONS) and a.assigned() and b.assigned(),
            both,
            "two aiokafka members splitting the topic",
        )
        split = True
        await until(lambda: len(a.delivered) + len(b.delivered) >= FIRST_PART, both, "records consumed")
        assert a.delivered and b.delivered
        assert {p for p, _o, _v in a.delivered}.isdisjoint({p for p, _o, _v in b.delivered})
    finally:
        await a.consumer.stop()
        await b.consumer.stop()
    return {p: max(a.committed.get(p, 0), b.committed.get(p, 0)) for p in range(PARTITIONS)}


async def aio_resume(broker: BrokerProcess, group: str, topic: str, left: int) -> list[tuple[int, int, bytes]]:
    """A new member reads ``left`` records; returns them."""
    c = AioMember(aio_consumer(broker, group, topic, "aio-c"))
    await c.consumer.start()
    try:
        await until(lambda: len(c.delivered) >= left, c.step, "aiokafka resuming")
        for p, offset in c.committed.items():
            assert await c.consumer.committed(aiokafka.TopicPartition(topic, p)) == offset
    finally:
        await c.consumer.stop()
    return c.delivered


def test_aiokafka_group_resumes_from_commits(broker: BrokerProcess, name: str) -> None:
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produced = produce(bs, topic, PARTITIONS, TOTAL, "aio")
    mine = asyncio.run(asyncio.wait_for(aio_first_members(broker, group, topic), 60))
    committed = committed_offsets(bs, group, topic, PARTITIONS)
    assert {p: max(o, 0) for p, o in committed.items()} == mine
    assert 0 < sum(mine.values()) < TOTAL
    delivered = asyncio.run(asyncio.wait_for(aio_resume(broker, group, topic, TOTAL - sum(mine.values())), 60))
    check_resumed(produced, committed, delivered)
    assert committed_offsets(bs, group, topic, PARTITIONS) == ends(produced)
