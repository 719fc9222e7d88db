"""The group coordinator's KIP-848 consumer groups on the runtime, with a real replica manager and
real logs, on a fake clock: a member whose session expires is fenced when the clock says so (not
before), its removal written; an append that fails leaves the shard as its log says (the
partition is loaded again, the failed change gone); a shard loaded from the log has the group
its records describe."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from odradek._clock import FakeClock
from odradek.broker.coordinators.groups import GroupCoordinator
from odradek.broker.coordinators.runtime import CoordinatorPorts
from odradek.broker.replica import ReplicaManager
from odradek.broker.topics import OFFSETS_TOPIC
from odradek.cluster.consumer_group import HeartbeatRequest
from odradek.cluster.metadata import MetadataImage, PartitionState, TopicInfo
from odradek.config import BrokerConfig
from odradek.errors import ErrorCode, KafkaError
from odradek.settings import settings_from
from odradek.storage import LogConfig, LogManager

ME = 1
SESSION_MS = 6000


def _image() -> MetadataImage:
    def topic(name: str, n: int) -> TopicInfo:
        return TopicInfo(name, uuid.uuid5(uuid.NAMESPACE_URL, name),
                         {p: PartitionState(name, p, (ME,), (ME,), ME) for p in range(n)})

    return MetadataImage("c", ME, {}, {OFFSETS_TOPIC: topic(OFFSETS_TOPIC, 1), "t": topic("t", 4)})


class _Replication:
    def rehost(self, topic: str, partition: int) -> None:
        return None

    def offsets_replication_factor(self) -> int:
        return 1


def _coordinator(tmp_path: Path, clock: FakeClock) -> tuple[GroupCoordinator, ReplicaManager]:
    config = BrokerConfig.load(None, [], {
        "log.dirs": str(tmp_path / "logs"), "offsets.topic.num.partitions": 1,
        "group.consumer.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": SESSION_MS,
        "group.consumer.min.heartbeat.interval.ms": 100, "group.consumer.heartbeat.interval.ms": 500,
    }, env={})
    rm = ReplicaManager(ME, LogManager([tmp_path / "logs"]), lambda _t: LogConfig.from_dict({}))
    topics = SimpleNamespace(image=_image())
    ports = CoordinatorPorts(clock, rm, topics, _Replication())  # type: ignore[arg-type]
    gc = GroupCoordinator(settings_from(config).groups, ports)
    rm.become_leader(PartitionState(OFFSETS_TOPIC, 0, (ME,), (ME,), ME, 0))
    return gc, rm


async def _loaded(gc: GroupCoordinator) -> None:
    for _ in range(1000):
        if gc.runtime.shard_at(0) is not None and not gc.runtime.loading:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the partition never loaded")


async def _join(gc: GroupCoordinator, member_id: str) -> Any:
    return await gc.consumer.heartbeat(gc.shard, HeartbeatRequest(
        "g", member_id, 0, rebalance_timeout_ms=10000, subscribed_topic_names=("t",), owned={}), lambda _t: True)


def run(scenario: Any) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_member_is_fenced_when_its_session_expires_on_the_clock(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        gc, rm = _coordinator(tmp_path, clock)
        gc.start()
        try:
            await _loaded(gc)
            a = await _join(gc, "a")
            assert a.error is ErrorCode.NONE and a.member_epoch == 1
            b = await _join(gc, "b")
            assert b.error is ErrorCode.NONE
            end = rm.get(OFFSETS_TOPIC, 0).log.log_end_offset  # type: ignore[union-attr]
            clock.advance(SESSION_MS - 1)
            await gc.runtime.run_due()
            group = gc.shard("g").consumer.group("g")
            assert group is not None and set(group.members) == {"a", "b"}
            # "a" heartbeats meanwhile, "b" does not
            assert (await gc.consumer.heartbeat(gc.shard, HeartbeatRequest("g", "a", a.member_epoch, owned={
                t: frozenset(ps) for t, ps in (a.assignment or {}).items()}), lambda _t: True)).error is ErrorCode.NONE
            clock.advance(2)
            await gc.runtime.run_due()
            assert set(group.members) == {"a"}
            assert rm.get(OFFSETS_TOPIC, 0).log.log_end_offset > end  # type: ignore[union-attr]  # written
        finally:
            await gc.stop()

    run(scenario)


def test_a_failed_append_leaves_the_state_its_log_says(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        gc, rm = _coordinator(tmp_path, clock)
        gc.start()
        try:
            await _loaded(gc)
            assert (await _join(gc, "a")).error is ErrorCode.NONE
            real = rm.append

            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "not enough replicas")

            rm.append = refuse  # type: ignore[method-assign]
            failed = await _join(gc, "b")
            assert failed.error is ErrorCode.COORDINATOR_NOT_AVAILABLE
            rm.append = real  # type: ignore[method-assign]
            await _loaded(gc)  # the partition was loaded again from its log
            group = gc.shard("g").consumer.group("g")
            assert group is not None and set(group.members) == {"a"}  # "b" never joined
            assert (await _join(gc, "b")).error is ErrorCode.NONE
            group = gc.shard("g").consumer.group("g")
            assert group is not None and set(group.members) == {"a", "b"}
            # and a shard loaded from scratch has the same group
            gc.runtime.reload(0, "a test")
            await _loaded(gc)
            again = gc.shard("g").consumer.group("g")
            assert again is not group and again is not None
            assert {m: (x.member_epoch, dict(x.assigned)) for m, x in again.members.items()} == {
                m: (x.member_epoch, dict(x.assigned)) for m, x in group.members.items()}
            assert (again.group_epoch, again.assignment_epoch, again.state) == (
                group.group_epoch, group.assignment_epoch, group.state)
        finally:
            await gc.stop()

    run(scenario)
