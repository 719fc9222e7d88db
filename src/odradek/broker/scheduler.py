"""The broker's one owner of background log work: the write-path policy and its I/O executor.

Storage offers the mechanisms (``Log.flush``, ``LogManager.cleanup`` / ``clean`` /
``checkpoint``) and says what is thread-safe; this module decides when they run, and runs them
on one I/O executor, never on the event loop:

* time-based flushes (``flush.ms`` per topic, checked every ``log.flush.scheduler.interval.ms``;
  ``flush.messages`` is checked by the produce path right after an append, through the same
  ``Log.flush_messages_due`` rule);
* retention (``log.retention.check.interval.ms``) and compaction (``log.cleaner.backoff.ms``),
  one maintenance job at a time, so retention and compaction of one log never interleave;
* recovery-point and high-watermark checkpoints (``replica.high.watermark.checkpoint.interval.ms``,
  and soon after a DeleteRecords), one writer at a time;
* expiry of idle producer ids (``producer.id.expiration.ms``).

It also owns the worker processes that do a request's per-record work off the loop
(:attr:`offload`: down-conversion, recompression, validation of large produced batches), and
stops them with the rest.

An I/O error in a task goes through the log dirs' failure channel, which takes the dir offline
and logs it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from odradek._clock import Clock
from odradek._timeouts import wait_for
from odradek.broker.logdirs import LogDirFailureChannel, is_io_error
from odradek.broker.offload import OffLoop
from odradek.errors import KafkaError
from odradek.metrics import BrokerMetrics, timed_ms
from odradek.settings import LiveSettings
from odradek.storage import LogManager, StorageError

__all__ = ["LogScheduler"]

log = logging.getLogger(__name__)


class LogScheduler:
    def __init__(
        self,
        settings: LiveSettings,
        logs: LogManager,
        log_dirs: LogDirFailureChannel,
        executor: ThreadPoolExecutor,
        clock: Clock,
    ) -> None:
        self.settings = settings
        self.logs = logs
        self.log_dirs = log_dirs
        self.executor = executor
        self.clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._maintenance = asyncio.Lock()
        self._maintenance_job: asyncio.Future[Any] | None = None
        self._checkpointing = asyncio.Lock()
        self._checkpoint_pending = False
        #: the broker's metric counters (set by the broker; None: off)
        self.metrics: BrokerMetrics | None = None
        #: a request's per-record work (down-conversion, recompression, large validations)
        self.offload = OffLoop()

    def every(self, interval_ms: int, fn: Callable[[], Awaitable[None]], name: str) -> None:
        """Run ``fn`` every ``interval_ms`` until :meth:`stop`; its I/O errors take the dir offline."""

        async def run() -> None:
            while not self._stopping:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except (KafkaError, StorageError, OSError) as exc:
                    if is_io_error(exc):
                        # through the log dirs' failure channel, which logs each failure once
                        self.log_dirs.fail(None, exc, f"running the {name} task", sync=name == "flush")
                    else:
                        log.exception("background task %s failed", name)

        self._tasks.append(asyncio.get_running_loop().create_task(run(), name=name))

    def start(self) -> None:
        settings = self.settings.current
        log_settings = settings.log
        self.every(min(log_settings.retention_check_interval_ms, 2**31), self._retention, "retention")
        self.every(min(log_settings.flush_scheduler_interval_ms, 1000), self._flush_due, "flush")
        self.every(settings.replication.replica_high_watermark_checkpoint_interval_ms, self.checkpoint, "checkpoint")
        if log_settings.cleaner_enable:
            self.every(log_settings.cleaner_backoff_ms, self._clean, "cleaner")
        self.every(settings.transactions.producer_id_expiration_check_interval_ms, self._expire_producers, "producers")

    async def stop(self) -> None:
        """Cancel the timers and wait for a maintenance job still on a thread (a compaction pass
        is shielded from cancellation: the logs must not close under it)."""
        self._stopping = True
        await self.offload.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        job = self._maintenance_job
        if job is not None and not job.done():
            with contextlib.suppress(Exception):
                await wait_for(asyncio.shield(job), 60)

    # -- the policy --------------------------------------------------------------------------------

    async def _retention(self) -> None:
        # segment removal and file deletion on a worker thread (the log swaps its segment list
        # under its lock)
        await self.run_maintenance(self.logs.cleanup)

    async def _clean(self) -> None:
        # a compaction pass reads and rewrites whole segments: on a worker thread
        await self.run_maintenance(self.logs.clean)

    async def _flush_due(self) -> None:
        failures = self.log_dirs
        for lg in self.logs.logs():
            if lg.closed:
                continue
            if lg.flush_time_due(self.clock.monotonic_ms()):
                d = lg.directory.parent
                if failures.offline(d):
                    continue
                try:
                    ms = await asyncio.get_running_loop().run_in_executor(self.executor, timed_ms, lg.flush)
                    if self.metrics is not None:
                        self.metrics.flush_time.observe(ms)
                except (OSError, StorageError) as exc:
                    if not is_io_error(exc):
                        raise
                    # this log's dir goes offline; the other logs are still flushed
                    failures.fail(d, exc, f"flushing {lg.topic}-{lg.partition}", sync=True)

    async def checkpoint(self) -> None:
        async with self._checkpointing:  # one writer of the checkpoint files at a time
            self._checkpoint_pending = False
            await asyncio.get_running_loop().run_in_executor(self.executor, self.logs.checkpoint)

    def checkpoint_soon(self) -> None:
        """Write the checkpoints soon, once for all the requests asking meanwhile (a DeleteRecords
        storm writes them a few times, not once per request)."""
        if self._checkpoint_pending:
            return
        self._checkpoint_pending = True

        async def run() -> None:
            try:
                await self.checkpoint()
            except OSError:
                log.exception("checkpoint failed")

        asyncio.get_running_loop().create_task(run())

    async def _expire_producers(self) -> None:
        expiration = self.settings.current.transactions.producer_id_expiration_ms  # dynamic
        now = self.clock.now_ms()
        for lg in self.logs.logs():
            lg.producers.remove_expired(now, expiration)

    # -- the executor ------------------------------------------------------------------------------

    async def run_io(self, fn: Callable[[], Any]) -> Any:
        """Run file work for a request (DeleteRecords...) on the I/O executor."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def run_maintenance(self, fn: Callable[[], Any]) -> Any:
        """Run retention or compaction on the I/O executor, one job at a time (a request's file
        work, which must not wait for a compaction pass, goes through :meth:`run_io`)."""
        async with self._maintenance:
            job = asyncio.get_running_loop().run_in_executor(self.executor, fn)
            self._maintenance_job = job
            # shielded: a cancelled caller (stop) leaves the job running; stop waits for it
            return await asyncio.shield(job)
