"""The table writers' service (``TableWriters``) on its own: when a writer stops, and what /metrics
reports meanwhile. Its writers here are stand-ins whose step the test holds; the real writer's
steps are covered by the other tests of this directory, through a broker."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.testing import FakeClock, FakeScheduler


class _HeldWriter:
    """A writer whose step waits until the test releases it, then counts a commit."""

    instances: list[_HeldWriter] = []

    def __init__(self, _catalog: Any, _namespace: str, topic: str, partition: int, mode: str, *_rest: Any) -> None:
        self.topic, self.partition, self.mode = topic, partition, mode
        self.name = f"{topic}-{partition}"
        self.catalog: Any = object()  # opened: the service does not open the real one
        self.table = self.dead_table = None
        self.next, self.written, self.dead = 0, 0, 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.commits = 0
        self.steps = 0
        _HeldWriter.instances.append(self)

    def step(self) -> Any:
        self.steps += 1
        self.entered.set()
        assert self.release.wait(30), "the test never released the step"
        self.commits += 1
        self.next = 10
        return SimpleNamespace(written=10, dead=0, more=False)


class _Source:
    topic_id = None

    def bounds(self) -> tuple[int, int, int]:
        return 0, 10, 10


async def _until(check: Any, what: str) -> None:
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _writers(mode: list[str]) -> Any:
    """The service for one partition ``t-0`` led here, its topic's mode ``mode[0]``; on fake time,
    so a writer between steps waits for a commit interval that never passes by itself."""
    from odradek.tables.service import TableWriters

    clock = FakeClock()
    return TableWriters(
        SimpleNamespace(namespace="ns"),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        lambda: [SimpleNamespace(topic="t", index=0, is_leader=True)],
        lambda _p: _Source(),  # type: ignore[arg-type,return-value]
        lambda _t: SimpleNamespace(  # type: ignore[arg-type,return-value]
            odradek_iceberg_mode=mode[0], odradek_iceberg_commit_interval_ms=100, odradek_iceberg_partition_spec="none"
        ),
        lambda: None,
        FakeScheduler(clock),
        clock,
    )


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> type[_HeldWriter]:
    pytest.importorskip("pyiceberg")
    import odradek.tables.writer as writer_module

    _HeldWriter.instances = []
    monkeypatch.setattr(writer_module, "PartitionWriter", _HeldWriter)
    return _HeldWriter


def test_a_writer_turned_off_mid_step_is_reported_until_its_step_has_ended(held: type[_HeldWriter]) -> None:
    """Turning a topic's mode off while its writer's step runs: the step is not interrupted (it
    finishes its commit), and the writer stays in the lag metrics until it has, so "no writer in
    /metrics" means nothing more is committed. A writer waiting between steps stops at once."""
    mode = ["key_value"]

    async def scenario() -> None:
        writers = _writers(mode)
        writers.reconcile()
        first = held.instances[0]
        await _until(first.entered.is_set, "the first step to start")
        task = writers._drivers[("t", 0)].task
        assert task is not None

        mode[0] = "off"
        writers.reconcile()
        await asyncio.sleep(0.05)
        assert ("t", 0) in writers.lag(), "the writer left the metrics while its step could still commit"
        assert not task.done(), "the step was abandoned mid-commit"
        assert first.commits == 0

        first.release.set()
        await _until(lambda: not writers.lag(), "the stopped writer to leave the metrics")
        assert first.commits == 1 and first.steps == 1, "the stopped writer took another step"
        await _until(task.done, "the writer's task to end")

        # on again, caught up: the writer sleeps for its commit interval; off stops it at once
        mode[0] = "key_value"
        writers.reconcile()
        second = held.instances[1]
        second.release.set()
        await _until(lambda: second.commits == 1, "the second writer's step")
        task = writers._drivers[("t", 0)].task
        assert task is not None
        await asyncio.sleep(0.05)
        assert not task.done()
        mode[0] = "off"
        writers.reconcile()
        await _until(task.done, "the sleeping writer to stop")
        assert not writers.lag() and second.steps == 1
        await writers.stop()

    asyncio.run(scenario())


def test_a_new_writer_of_a_partition_starts_after_the_stopped_ones_step(held: type[_HeldWriter]) -> None:
    """A mode change replaces a partition's writer: the new one takes its first step only once the
    old one's step (and its commit) has ended, so two writers never commit for one partition at once."""
    mode = ["key_value"]

    async def scenario() -> None:
        writers = _writers(mode)
        writers.reconcile()
        old = held.instances[0]
        await _until(old.entered.is_set, "the old writer's step to start")
        mode[0] = "value_schema"
        writers.reconcile()
        new = held.instances[1]
        new.release.set()
        await asyncio.sleep(0.1)
        assert new.steps == 0, "the new writer stepped while the old one's step could still commit"
        old.release.set()
        await _until(lambda: new.commits == 1, "the new writer's first step")
        assert old.commits == 1 and old.steps == 1
        await writers.stop()

    asyncio.run(scenario())
