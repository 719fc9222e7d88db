"""A request whose client goes away half-way does not leave the broker's metadata or logs half made.

The broker cancels a request's handler when its connection closes.  A CI run caught the damage it
did: a consumer's FindCoordinator created ``__consumer_offsets``; the metadata change's partition
logs were being made on a worker thread when the handler was cancelled, the change was published
at once, and the broker made the same logs again on the event loop, beside the thread — the log
dir went offline (ENOENT on a file the other creator had moved) with every partition in it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from odradek.broker.app import Broker
from odradek.broker.replication import NewLog
from tests.broker.inprocess import running_broker


class _SlowCreation:
    """Wraps the log manager's ``create_unregistered``: on a worker thread each creation waits for
    ``release``; on the event loop (where no log of a prepared change should be made) it is
    recorded."""

    def __init__(self, broker: Broker) -> None:
        self.loop_thread = threading.current_thread()
        self.started = threading.Event()
        self.release = threading.Event()
        self.on_loop: list[tuple[str, int]] = []
        self.real = broker.logs.create_unregistered
        broker.logs.create_unregistered = self  # type: ignore[method-assign]

    def __call__(self, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is self.loop_thread:
            self.on_loop.append((topic, partition))
        else:
            self.started.set()
            assert self.release.wait(30), "never released"
        return self.real(topic, partition, *args, **kwargs)


def test_a_topic_creation_whose_requester_is_cancelled_completes_once(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            slow = _SlowCreation(broker)
            request = asyncio.get_running_loop().create_task(broker.topics.create("wide", 8, 1, {}))
            assert await asyncio.to_thread(slow.started.wait, 30)
            request.cancel()  # what the connection's close does to its handler
            for _ in range(20):  # the loop goes on; the change must not be published yet
                await asyncio.sleep(0.01)
            assert "wide" not in broker.topics.image.topics
            slow.release.set()
            for _ in range(3000):
                if all(broker.replicas.get("wide", p) is not None for p in range(8)):
                    break
                await asyncio.sleep(0.01)
            assert request.cancelled()
            assert slow.on_loop == [], "logs made twice: on the event loop while the thread made them"
            assert not broker.replicas.log_dirs.any_failed
            for p in range(8):
                part = broker.replicas.get("wide", p)
                assert part is not None and part.is_leader, p
                assert (part.log.directory / "partition.metadata").is_file()
            # and the broker goes on creating topics
            await broker.topics.create("after", 1, 1, {})
            assert "after" in broker.topics.image.topics

    asyncio.run(body())


def test_cancelled_log_creation_registers_what_its_thread_made(tmp_path: Path) -> None:
    """The cluster path: a LeaderAndIsr handler making new logs is cancelled (the controller's
    connection closed).  The logs its thread makes are registered before the cancellation ends
    the handler, so the next LeaderAndIsr finds them instead of making them again."""

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            slow = _SlowCreation(broker)
            config = broker.topics.config_for({})
            new = [NewLog("made", p, config, None, 0) for p in range(3)]
            task = asyncio.get_running_loop().create_task(broker.replication.create_logs(new))
            assert await asyncio.to_thread(slow.started.wait, 30)
            task.cancel()
            await asyncio.sleep(0.05)
            slow.release.set()
            try:
                await asyncio.wait_for(task, 30)
            except asyncio.CancelledError:
                pass
            else:
                raise AssertionError("the cancellation was swallowed")
            for p in range(3):
                lg = broker.logs.get("made", p)
                assert lg is not None and not lg.closed, p

    asyncio.run(body())
