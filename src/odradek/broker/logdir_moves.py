"""Moving a replica between this broker's log dirs while it serves (AlterReplicaLogDirs, Kafka's
future replica and ReplicaAlterLogDirsThread).

A move copies the partition's log into a *future replica* in the target dir: an empty log in a
staging directory there (:meth:`~odradek.storage.manager.LogManager.create_future`), filled by
reading the current log from its log start offset and appending the batches as a follower does
(offsets, epochs, producer state and transaction indexes as the leader wrote them), on a worker
thread, while the partition goes on taking appends.  Once the copy is within a small distance of
the log end, the rest is copied and the logs are swapped on the event loop, where appends run, so
no append falls between them: the current log is flushed and its directory renamed
``.<id>-delete``, the future one is renamed into place and opened, and the partition points at it.
The old files stay open for ``file.delete.delay.ms`` (reads in flight), then are removed.

The current log may change under the copy: retention or DeleteRecords move its start past what
the copy holds, a follower's truncation cuts its end below it.  Either way the copy starts over
from the current log start.  A partition that stops being hosted (deleted, reassigned away), a
failed target dir or an I/O error ends the move, the future replica dropped and the current log
untouched; a later request may try again.  A broker restarted mid-move drops the unfinished copy
(see the log manager's load).  DescribeLogDirs reports a move in progress as a future replica in
its target dir (``is_future_key``), its offset lag the distance still to copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode
from odradek.records.batch import iter_batch_headers
from odradek.storage import Log

if TYPE_CHECKING:
    from odradek.broker.replica import ReplicaManager

__all__ = ["DirMove", "ReplicaDirMoves"]

log = logging.getLogger(__name__)

#: bytes read from the current log per copy step
COPY_BYTES = 1 << 20
#: the copy is finished on the event loop once it is within this many bytes of the log end
FINAL_BYTES = 256 * 1024
#: how long the old log's files stay open after a swap (Kafka's file.delete.delay.ms default)
OLD_FILES_DELAY_S = 60.0
#: copy steps at most per move (a bound; a move that never catches up is abandoned)
MAX_STEPS = 1_000_000


@dataclass(slots=True)
class DirMove:
    topic: str
    partition: int
    target: Path
    future: Log | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class ReplicaDirMoves:
    """The moves between log dirs of one broker's replicas."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.moves: dict[tuple[str, int], DirMove] = {}
        #: partitions not hosted yet, and the dir each is to be created in
        self.preferred: dict[tuple[str, int], Path] = {}
        self._old: set[asyncio.Task[None]] = set()

    def _dir(self, path: str) -> Path | None:
        wanted = Path(path).resolve()
        for d in self.replicas.logs.dirs:
            if d.resolve() == wanted:
                return d
        return None

    def request(self, topic: str, partition: int, path: str) -> ErrorCode:
        """Move the replica of ``topic``-``partition`` to log dir ``path`` (started, not awaited).
        LOG_DIR_NOT_FOUND for a path that is not one of the broker's log dirs, KAFKA_STORAGE_ERROR
        for an offline dir; a partition not hosted here is created in that dir when it comes."""
        target = self._dir(path)
        if target is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        failures = self.replicas.log_dirs
        if failures.offline(target):
            return ErrorCode.KAFKA_STORAGE_ERROR
        key = (topic, partition)
        p = self.replicas.get(topic, partition)
        if p is None:
            self.preferred[key] = target
            return ErrorCode.NONE
        if failures.offline(p.log_dir):
            return ErrorCode.KAFKA_STORAGE_ERROR
        running = self.moves.get(key)
        if running is not None:
            if running.target == target:
                return ErrorCode.NONE
            self._cancel(running)
        if p.log_dir == target:
            return ErrorCode.NONE
        move = DirMove(topic, partition, target)
        self.moves[key] = move
        move.task = asyncio.get_running_loop().create_task(self._run(move), name=f"move {topic}-{partition}")
        log.info("%s-%d: moving from log dir %s to %s", topic, partition, p.log_dir, target)
        return ErrorCode.NONE

    def future_logs(self) -> list[tuple[Path, Log, int]]:
        """Each move in progress: target dir, future replica, offsets still to copy."""
        out = []
        for m in self.moves.values():
            p = self.replicas.get(m.topic, m.partition)
            if m.future is not None and p is not None:
                out.append((m.target, m.future, max(0, p.log.log_end_offset - m.future.log_end_offset)))
        return out

    def _cancel(self, move: DirMove) -> None:
        if move.task is not None:
            move.task.cancel()
        self.moves.pop(move.key, None)

    async def close(self) -> None:
        for move in list(self.moves.values()):
            self._cancel(move)
            if move.task is not None:
                with contextlib.suppress(BaseException):
                    await move.task
        for t in list(self._old):
            t.cancel()
            with contextlib.suppress(BaseException):
                await t

    # -- the copy ---------------------------------------------------------------------------------
    async def _run(self, move: DirMove) -> None:
        logs = self.replicas.logs
        try:
            p = self.replicas.get(move.topic, move.partition)
            if p is None:
                return
            move.future = await asyncio.to_thread(logs.create_future, p.log, move.target)
            for _ in range(MAX_STEPS):
                p = self.replicas.get(move.topic, move.partition)
                if p is None or self.moves.get(move.key) is not move:
                    log.info("%s-%d: no longer hosted here; the move to %s is dropped", *move.key, move.target)
                    return
                if self.replicas.log_dirs.offline(move.target) or self.replicas.log_dirs.offline(p.log_dir):
                    log.warning("%s-%d: a log dir went offline; the move to %s is dropped", *move.key, move.target)
                    return
                current, future = p.log, move.future
                self._realign(current, future)
                if current.size_bytes - future.size_bytes <= FINAL_BYTES:
                    # the rest, and the swap, on the loop: no append can fall between them
                    while future.log_end_offset < current.log_end_offset:
                        self._copy(current, future, COPY_BYTES)
                    new, old, old_dir = logs.replace_with_future(future)
                    move.future = None
                    p.log = new
                    if p.is_leader:
                        new.start_epoch(p.state.leader_epoch)
                    self.preferred.pop(move.key, None)
                    task = asyncio.get_running_loop().create_task(self._remove_old(old, old_dir))
                    self._old.add(task)
                    task.add_done_callback(self._old.discard)
                    return
                await asyncio.to_thread(self._copy, current, future, COPY_BYTES)
            log.warning("%s-%d: the copy to %s did not catch up; the move is dropped", *move.key, move.target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("%s-%d: the move to log dir %s failed and is dropped: %s", *move.key, move.target, exc)
        finally:
            if self.moves.get(move.key) is move:
                del self.moves[move.key]
            if move.future is not None:
                future, move.future = move.future, None
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(logs.drop_future, future)

    @staticmethod
    def _realign(current: Log, future: Log) -> None:
        """Start the copy over where the current log no longer matches it: its start moved past
        the copy's end, or its end went below it (a follower's truncation)."""
        if future.log_end_offset < current.log_start_offset or future.log_end_offset > current.log_end_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)

    @staticmethod
    def _copy(current: Log, future: Log, max_bytes: int) -> None:
        """Copy the batches after the future replica's end (at most about ``max_bytes``)."""
        offset = future.log_end_offset
        data = current.read(offset, max_bytes, current.log_end_offset).to_bytes()
        if not data:
            return
        first = next(iter_batch_headers(data)).base_offset
        if first < offset:
            # the first batch holds the log start offset (DeleteRecords, retention mid-batch):
            # a follower starts its log at the batch and keeps the log start offset
            if future.log_end_offset != future.log_start_offset:
                raise RuntimeError(f"a batch at {first} below the copy's end {offset}")
            future.truncate_fully_and_start_at(first)
        future.append_as_follower(data)
        if future.log_start_offset < current.log_start_offset <= future.log_end_offset:
            future.maybe_increment_log_start_offset(current.log_start_offset)

    async def _remove_old(self, old: Log, old_dir: Path) -> None:
        try:
            await asyncio.sleep(OLD_FILES_DELAY_S)
        except asyncio.CancelledError:
            old.abandon()  # stopping: the descriptors go now, the directory at the next start
            raise

        def remove() -> None:
            import shutil

            old.abandon()
            shutil.rmtree(old_dir, ignore_errors=True)

        await asyncio.to_thread(remove)
