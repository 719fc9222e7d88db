"""The coordinator runtime on a real replica manager and real logs, with a toy shard: what it loads
and when, what a key's request is told, what a write waits for, what unloading drops, what a
failed log dir does, and timers on a fake clock.  (The group and transaction coordinators built on
it are proved by the broker's integration tests.)"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import pytest

from odradek._clock import FakeClock
from odradek._scheduler import FakeScheduler
from odradek.broker.coordinators.runtime import (
    CoordinatorPorts,
    CoordinatorRecord,
    CoordinatorRuntime,
    CoordinatorTopic,
)
from odradek.broker.logdirs import LogDirFailureChannel
from odradek.broker.replica import Partition, ReplicaManager
from odradek.cluster.metadata import PartitionState
from odradek.errors import ErrorCode, KafkaError
from odradek.records import BatchBuilder
from odradek.storage import LogConfig, LogManager

TOPIC = "__kv"
PARTITIONS = 3
ME = 1


class KV:
    """A toy shard: the latest value of each ``k...`` key (other keys are another coordinator's
    record types), a transaction's records held until its marker, and one deferred answer."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.values: dict[bytes, bytes] = {}
        self.pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.replayed: list[int] = []
        self.loaded_at: int | None = None
        self.unloads = 0
        self.waiter: asyncio.Future[ErrorCode] | None = None

    def replay(self, record: CoordinatorRecord) -> None:
        self.replayed.append(record.offset)
        if record.key is None or not record.key.startswith(b"k"):
            return
        if record.producer_id >= 0:
            self.pending.setdefault(record.producer_id, []).append((record.key, record.value))
        else:
            self._apply(record.key, record.value)

    def _apply(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = value

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        held = self.pending.pop(producer_id, [])
        if commit:
            for key, value in held:
                self._apply(key, value)

    def loaded(self, now_ms: int) -> None:
        self.loaded_at = now_ms

    def unloaded(self) -> None:
        self.unloads += 1
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(ErrorCode.NOT_COORDINATOR)


def _topic(partitions: int) -> SimpleNamespace:
    """A topic of the image as the runtime sees it: its partitions (their count routes keys)."""
    return SimpleNamespace(partitions=dict.fromkeys(range(partitions)))


class Topics:
    """The topic service's face the runtime uses: the image's topics and create_internal."""

    def __init__(self, exists: bool = True) -> None:
        self.image = SimpleNamespace(topics={TOPIC: _topic(PARTITIONS)} if exists else {})
        self.created: list[tuple[str, int, int]] = []
        self.refuse: ErrorCode | None = None

    async def create_internal(self, name: str, partitions: int, replication_factor: int) -> None:
        await asyncio.sleep(0)
        if self.refuse is not None:
            raise KafkaError(self.refuse, "refused")
        self.created.append((name, partitions, replication_factor))
        self.image.topics[name] = _topic(partitions)


class Replication:
    def rehost(self, topic: str, partition: int) -> Partition | None:
        return None

    def replication_factor(self) -> int:
        return 3


def _setup(tmp_path: Path, *, exists: bool = True, hosted_on: Literal["leader", "replicas"] = "leader",
           write_timeout_ms: int = 5000,
           clock: FakeClock | None = None) -> tuple[CoordinatorRuntime[KV], ReplicaManager, Topics, FakeClock]:
    rm = ReplicaManager(ME, LogManager([tmp_path / "a", tmp_path / "b"]), lambda _t: LogConfig.from_dict({}))
    topics = Topics(exists)
    clock = clock or FakeClock()
    ports = CoordinatorPorts(clock, rm, topics, Replication())  # type: ignore[arg-type]
    topic = CoordinatorTopic(TOPIC, PARTITIONS, Replication().replication_factor, write_timeout_ms=write_timeout_ms,
                             hosted_on=hosted_on)
    return CoordinatorRuntime(topic, KV, ports), rm, topics, clock


def _lead(rm: ReplicaManager, partition: int, isr: tuple[int, ...] = (ME,), epoch: int = 0) -> Partition:
    return rm.become_leader(PartitionState(TOPIC, partition, isr, isr, ME, epoch))


def _follow(rm: ReplicaManager, partition: int, epoch: int = 1) -> Partition:
    return rm.make_follower(PartitionState(TOPIC, partition, (ME, 2), (ME, 2), 2, epoch), None)


def _key_in(runtime: CoordinatorRuntime[KV], partition: int) -> str:
    return next(k for k in (f"key-{i}" for i in range(1000)) if runtime.partition_for(k) == partition)


def _write(rm: ReplicaManager, p: Partition, records: list[tuple[bytes, bytes | None]], producer: int = -1) -> None:
    b = BatchBuilder() if producer < 0 else BatchBuilder(producer_id=producer, producer_epoch=0, is_transactional=True)
    for key, value in records:
        b.append(1_000, key, value)
    rm.append(p, bytearray(b.build()), -1)


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


def _code(fn: Callable[[], Any]) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        fn()
    return info.value.code


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 60))


# -- loading --------------------------------------------------------------------------------------


def test_a_led_partition_is_replayed_into_a_new_shard_markers_decide_transactions(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, clock = _setup(tmp_path)
        p = _lead(rm, 1)
        _write(rm, p, [(b"k1", b"one"), (b"k2", b"two"), (b"x-other-type", b"?")])
        _write(rm, p, [(b"k1", None)])  # a tombstone
        _write(rm, p, [(b"k3", b"committed")], producer=7)
        _write(rm, p, [(b"k4", b"aborted")], producer=8)
        rm.append_marker(p, 8, 0, False, 0)
        rm.append_marker(p, 7, 0, True, 0)
        _write(rm, p, [(b"k5", b"open")], producer=9)  # no marker yet
        runtime.start()
        await _until(lambda: 1 in runtime.loaded(), "partition 1 loaded")
        shard = runtime.shard(_key_in(runtime, 1), "key")
        assert shard.partition == 1 and shard.loaded_at == clock.now_ms()
        assert shard.values == {b"k2": b"two", b"k3": b"committed"}
        assert shard.pending == {9: [(b"k5", b"open")]}
        assert shard.replayed == [0, 1, 2, 3, 4, 5, 8]  # markers (6, 7) go to replay_marker
        assert runtime.loaded() == {1} and not runtime.loading
        await runtime.stop()
        assert shard.unloads == 1 and runtime.loaded() == set()
        runtime.on_hosting_changed(None)  # a hosting change while the broker stops loads nothing
        assert not runtime.loading and runtime.loaded() == set()

    run(scenario)


def test_what_a_key_is_told_before_during_and_after_loading(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, topics, _clock = _setup(tmp_path, exists=False)
        k0, k1, k2 = (_key_in(runtime, p) for p in range(3))
        assert _code(lambda: runtime.shard(k0, "key")) is ErrorCode.COORDINATOR_NOT_AVAILABLE  # no topic yet
        topics.image.topics[TOPIC] = _topic(PARTITIONS)
        _lead(rm, 0)
        _follow(rm, 1)
        runtime.refresh()
        assert runtime.loading == {0}
        assert _code(lambda: runtime.shard(k0, "key")) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert _code(lambda: runtime.shard(k1, "key")) is ErrorCode.NOT_COORDINATOR  # another broker leads it
        assert _code(lambda: runtime.shard(k2, "key")) is ErrorCode.NOT_COORDINATOR  # not hosted here at all
        await _until(lambda: not runtime.loading, "the load")
        assert runtime.shard(k0, "key").partition == 0
        await runtime.stop()

    run(scenario)


def test_losing_leadership_unloads_and_answers_waiters_a_new_leadership_reloads(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path)
        p = _lead(rm, 2)
        key = _key_in(runtime, 2)
        runtime.start()
        await _until(lambda: 2 in runtime.loaded(), "loaded")
        shard = runtime.shard(key, "key")
        written = await runtime.append(2, [(b"k1", b"v1"), (b"k2", b"v2")])
        assert (written.partition, written.first_offset, written.last_offset) == (2, 0, 1)
        shard.waiter = asyncio.get_running_loop().create_future()
        _follow(rm, 2)
        runtime.on_hosting_changed(None)
        assert await shard.waiter is ErrorCode.NOT_COORDINATOR and shard.unloads == 1
        assert runtime.shard_at(2) is None
        assert _code(lambda: runtime.shard(key, "key")) is ErrorCode.NOT_COORDINATOR
        with pytest.raises(KafkaError) as info:
            await runtime.append(2, [(b"k3", b"v3")])
        assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
        _lead(rm, 2, epoch=2)
        runtime.on_hosting_changed(None)
        await _until(lambda: 2 in runtime.loaded(), "reloaded")
        again = runtime.shard(key, "key")
        assert again is not shard and again.values == {b"k1": b"v1", b"k2": b"v2"}
        assert p.log.log_end_offset == 2
        await runtime.stop()

    run(scenario)


def test_a_load_that_cannot_decode_is_logged_and_the_partition_not_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Strict(KV):
        def replay(self, record: CoordinatorRecord) -> None:
            if record.key == b"k-bad":
                raise ValueError("cannot decode")
            super().replay(record)

    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path)
        runtime.new_shard = Strict
        p = _lead(rm, 0)
        _write(rm, p, [(b"k-bad", b"?")])
        runtime.start()
        await _until(lambda: not runtime.loading, "the load to end")
        assert runtime.loaded() == set()
        assert _code(lambda: runtime.shard(_key_in(runtime, 0), "key")) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await runtime.stop()

    with caplog.at_level(logging.ERROR, "odradek.broker.coordinators.runtime"):
        run(scenario)
    assert any(f"could not load {TOPIC}-0" in r.getMessage() for r in caplog.records)


# -- writing --------------------------------------------------------------------------------------


def test_a_write_with_acks_all_waits_for_the_isr_and_times_out_without_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path, write_timeout_ms=50)
        p = _lead(rm, 0, isr=(ME, 2))
        with pytest.raises(KafkaError) as info:
            await runtime.append(0, [(b"k1", b"v1")])  # the follower never fetches
        assert info.value.code is ErrorCode.REQUEST_TIMED_OUT
        runtime.topic = CoordinatorTopic(TOPIC, PARTITIONS, lambda: 1, write_timeout_ms=60_000)
        write = asyncio.ensure_future(runtime.append(0, [(b"k2", b"v2")]))
        await asyncio.sleep(0)
        assert not write.done()
        p.follower_leo[2] = p.log.log_end_offset  # the follower has both records now
        p.update_high_watermark()
        written = await write
        assert written.last_offset == 1 and p.high_watermark == 2

    run(scenario)


def test_a_transactional_write_counts_once_its_marker_is_replayed(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path)
        p = _lead(rm, 0)
        await runtime.append(0, [(b"k1", b"in-txn")], producer=(5, 0))
        await runtime.append(0, [(b"k2", b"plain")])
        runtime.start()
        await _until(lambda: 0 in runtime.loaded(), "loaded")
        shard = runtime.shard_at(0)
        assert shard is not None and shard.values == {b"k2": b"plain"} and 5 in shard.pending
        rm.append_marker(p, 5, 0, True, 0)
        _follow(rm, 0)
        runtime.refresh()
        _lead(rm, 0, epoch=2)
        runtime.refresh()
        await _until(lambda: 0 in runtime.loaded(), "reloaded")
        shard = runtime.shard_at(0)
        assert shard is not None and shard.values == {b"k1": b"in-txn", b"k2": b"plain"} and not shard.pending
        await runtime.stop()

    run(scenario)


def test_records_before_a_snapshot_can_be_deleted_and_are_not_replayed(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path)
        p = _lead(rm, 0)
        for i in range(4):
            await runtime.append(0, [(b"k%d" % i, b"v")])
        assert await runtime.delete_records_before(0, 99) == 4  # at most the high watermark
        assert await runtime.delete_records_before(0, 2) == 4  # never back
        await runtime.append(0, [(b"k9", b"v")])
        runtime.start()
        await _until(lambda: 0 in runtime.loaded(), "loaded")
        shard = runtime.shard_at(0)
        assert shard is not None and shard.replayed == [4] and p.log.log_start_offset == 4
        await runtime.stop()

    run(scenario)


# -- storage errors -------------------------------------------------------------------------------


def _fail_dir(rm: ReplicaManager, p: Partition, code: int) -> None:
    rm.log_dirs.fail(p.log_dir, OSError(code, "injected"), "testing")


def test_an_offline_log_dir_unloads_its_partitions_a_full_one_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path)
        p0, p1 = _lead(rm, 0), _lead(rm, 1)
        assert p0.log_dir != p1.log_dir
        runtime.start()
        await _until(lambda: runtime.loaded() == {0, 1}, "both loaded")
        s0, s1 = runtime.shard_at(0), runtime.shard_at(1)
        assert s0 is not None and s1 is not None
        s0.waiter = asyncio.get_running_loop().create_future()
        # a full dir: the write fails, the partition stays (reads go on, writes resume later)
        _fail_dir(rm, p1, errno.ENOSPC)
        monkeypatch.setattr(LogDirFailureChannel, "_has_room", staticmethod(lambda _d, _size: False))
        with pytest.raises(KafkaError) as info:
            await runtime.append(1, [(b"k", b"v")])
        assert info.value.code is ErrorCode.KAFKA_STORAGE_ERROR
        assert runtime.shard_at(1) is s1
        # an offline dir: the first request (or write) finds it and unloads the partition
        _fail_dir(rm, p0, errno.EIO)
        assert _code(lambda: runtime.shard(_key_in(runtime, 0), "key")) is ErrorCode.NOT_COORDINATOR
        assert await s0.waiter is ErrorCode.NOT_COORDINATOR
        assert _code(lambda: runtime.check_storage(0)) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        runtime.refresh()
        assert runtime.loaded() == {1} and not runtime.loading  # not loaded again
        await runtime.stop()

    run(scenario)


def test_a_write_failing_on_an_offline_dir_unloads_the_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path)
        p = _lead(rm, 0)
        runtime.start()
        await _until(lambda: 0 in runtime.loaded(), "loaded")
        shard = runtime.shard_at(0)
        _fail_dir(rm, p, errno.EIO)
        with pytest.raises(KafkaError) as info:
            await runtime.append(0, [(b"k", b"v")])
        assert info.value.code is ErrorCode.KAFKA_STORAGE_ERROR
        assert runtime.shard_at(0) is None and shard is not None and shard.unloads == 1
        await runtime.stop()

    run(scenario)


# -- the topic ------------------------------------------------------------------------------------


def test_the_topic_is_created_once_and_refusals_become_coordinator_not_available(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, _rm, topics, _clock = _setup(tmp_path, exists=False)
        topics.refuse = ErrorCode.INVALID_REPLICATION_FACTOR  # too few live brokers
        with pytest.raises(KafkaError) as info:
            await runtime.ensure_topic()
        assert info.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        topics.refuse = None
        await asyncio.gather(*(runtime.ensure_topic() for _ in range(5)))
        assert topics.created == [(TOPIC, PARTITIONS, 3)]
        await runtime.ensure_topic()
        assert len(topics.created) == 1

    run(scenario)


# -- a view on every replica ----------------------------------------------------------------------


def test_a_view_on_every_replica_follows_the_high_watermark(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime, rm, _topics, _clock = _setup(tmp_path, hosted_on="replicas")
        p = _follow(rm, 0)
        for key in (b"k1", b"k2"):
            b = BatchBuilder()
            b.append(1, key, b"v" + key[1:])
            p.log.append(bytearray(b.build()), leader_epoch=1)  # as the replica fetcher appends
        p.log.advance_high_watermark(1)  # the leader's high watermark: only k1 is committed
        runtime.start()
        await _until(lambda: 0 in runtime.loaded(), "the view loaded on a follower")
        shard = runtime.shard_at(0)
        assert shard is not None and shard.values == {b"k1": b"v1"}
        assert _code(lambda: runtime.shard(_key_in(runtime, 0), "key")) is ErrorCode.NOT_COORDINATOR  # no writes here
        p.log.advance_high_watermark(2)
        assert runtime.catch_up(0) == 1 and shard.values == {b"k1": b"v1", b"k2": b"v2"}
        assert runtime.catch_up(0) == 0
        await runtime.stop()

    run(scenario)


# -- timers ---------------------------------------------------------------------------------------


def test_timers_run_on_the_runtimes_clock(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        runtime, _rm, _topics, clock = _setup(tmp_path)
        periodic: list[int] = []
        fired: list[int] = []
        due: list[int | None] = [None]

        async def every() -> None:
            periodic.append(clock.monotonic_ms())
            if len(periodic) == 1:
                raise RuntimeError("the first run fails")

        async def fire(now: int) -> None:
            fired.append(now)
            due[0] = None

        runtime.every("job", 1000, every)
        runtime.deadline("deadline", lambda: due[0], fire)
        runtime.start()
        start = clock.monotonic_ms()
        await runtime.run_due()
        assert periodic == [] and fired == []
        clock.advance(999)
        await runtime.run_due()
        assert periodic == []
        clock.advance(1)
        await runtime.run_due()
        assert periodic == [start + 1000]  # it failed: logged, and planned again
        clock.advance(1000)
        await runtime.run_due()
        assert periodic == [start + 1000, start + 2000]
        due[0] = clock.now_ms() + 500
        await runtime.run_due()
        assert fired == []
        clock.advance(500)
        runtime.wake()  # the timer's own task notices, without run_due
        await _until(lambda: fired == [clock.now_ms()], "the deadline fired by its task")
        with pytest.raises(RuntimeError):
            runtime.every("late", 10, every)  # timers are set up before start
        await runtime.stop()

    with caplog.at_level(logging.ERROR, "odradek.broker.coordinators.runtime"):
        run(scenario)
    assert any(f"the job timer of {TOPIC} failed" in r.getMessage() for r in caplog.records)


def test_timers_wait_on_the_brokers_scheduler(tmp_path: Path) -> None:
    """On a FakeScheduler the timers' own tasks run them as the test moves the time: periodic
    jobs every interval, a deadline job at its deadline (woken when it is set), nothing early."""

    async def scenario() -> None:
        fake = FakeScheduler()
        rm = ReplicaManager(ME, LogManager([tmp_path / "a"]), lambda _t: LogConfig.from_dict({}))
        ports = CoordinatorPorts(fake.clock, rm, Topics(True), Replication(), timers=fake)  # type: ignore[arg-type]
        topic = CoordinatorTopic(TOPIC, PARTITIONS, Replication().replication_factor)
        runtime = CoordinatorRuntime(topic, KV, ports)
        periodic: list[int] = []
        fired: list[int] = []
        due: list[int | None] = [None]

        async def every() -> None:
            periodic.append(fake.clock.monotonic_ms())

        async def fire(now: int) -> None:
            fired.append(now)
            due[0] = None

        runtime.every("job", 1000, every)
        runtime.deadline("deadline", lambda: due[0], fire)
        runtime.start()
        await fake.advance(999)
        assert periodic == []
        await fake.advance(1)
        assert periodic == [1000]
        await fake.advance(2000)
        assert periodic == [1000, 2000, 3000]
        due[0] = fake.clock.now_ms() + 500
        runtime.wake()
        await fake.advance(499)
        assert fired == []
        await fake.advance(1)
        assert fired == [fake.clock.now_ms()]
        await fake.advance(60_000)  # nothing due: the deadline timer sleeps until woken
        assert len(fired) == 1 and len(periodic) == 63
        await runtime.stop()

    run(scenario)
