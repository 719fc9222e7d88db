"""The logs of a new topic's partitions are made together: side by side on worker threads, their
log dir fsynced once, after every new directory in it exists.

Made one after another, each new log waited on five fsyncs (its ``partition.metadata`` and its
leader-epoch checkpoint, file and directory each, then the log dir), and a topic of 10,000
partitions took 40-48 s to create, nearly all of it waiting on the disk.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from tests.broker.inprocess import running_broker

PARTITIONS = 24


class _RecordingFiles:
    """The log manager's file operations, with each fsync of a log dir recorded with the
    partition directories it held at that moment."""

    def __init__(self, real: Any, log_dir: Path) -> None:
        self.real = real
        self.log_dir = log_dir
        self.syncs: list[set[str]] = []

    def sync_dir(self, path: Path) -> None:
        if Path(path) == self.log_dir:
            self.syncs.append({p.name for p in self.log_dir.iterdir() if p.name.startswith("wide-")})
        self.real.sync_dir(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _Overlap:
    """Wraps ``create_unregistered``: the first creation waits (bounded) until another one has
    started, so that logs made one after another show as no overlap at all."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.second = threading.Event()
        self.calls = 0

    def __call__(self, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running > 1:
                self.second.set()
        try:
            if first:
                self.second.wait(10)
            return self.real(topic, partition, *args, **kwargs)
        finally:
            with self.lock:
                self.running -= 1


def test_a_topics_logs_are_made_side_by_side_and_their_log_dir_synced_once(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            [log_dir] = broker.logs.dirs
            files = _RecordingFiles(broker.logs.files, log_dir)
            broker.logs.files = files  # type: ignore[assignment]
            overlap = _Overlap(broker.logs.create_unregistered)
            broker.logs.create_unregistered = overlap  # type: ignore[method-assign]
            await broker.topics.create("wide", PARTITIONS, 1, {})
            for _ in range(500):
                if all(broker.replicas.get("wide", p) is not None for p in range(PARTITIONS)):
                    break
                await asyncio.sleep(0.01)
            assert overlap.calls == PARTITIONS
            assert overlap.most > 1, "the logs were made one after another"
            # one fsync of the log dir for the whole batch (one a log before), once every new
            # partition's directory was there: all of them are durable when the topic is hosted
            assert files.syncs == [{f"wide-{p}" for p in range(PARTITIONS)}]
            for p in range(PARTITIONS):
                part = broker.replicas.get("wide", p)
                assert part is not None and part.is_leader, p
                assert (part.log.directory / "partition.metadata").is_file()
                assert part.log.epochs.entries == [(0, 0)]
                assert broker.logs.get("wide", p) is part.log

    asyncio.run(body())
