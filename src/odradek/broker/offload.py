"""Per-record work of a request, off the event loop: worker processes with bounds.

Down-converting a large batch for an old fetch, recompressing a produced batch for a topic's
``compression.type``, and validating a large or compressed produced batch (its records, the keys
of a compacted topic) are pure functions of bytes (:mod:`odradek.broker.compat`) that cost
Python work per record: a million-record batch is seconds of it.  On the event loop that froze
every connection; in a thread it holds the GIL, and the loop, which gives the GIL up at every
socket call, waits for it each time (measured: a good client's p99 went from 1.4 ms to 180 ms
while four conversions ran in two threads, and to 17 ms in two worker processes).  So they run
in worker processes (``WORKERS``, started on first use from a fork server, at a lower CPU
priority than the broker); the bytes are copied to the worker and back, which costs far less
than the work.  Where worker processes cannot be started, a thread pool does the work instead
(logged once).

Bounds, so that many such requests cannot exhaust memory: at most ``WORKERS`` jobs run at once,
and the jobs running hold at most ``MAX_BYTES_IN_FLIGHT`` bytes (a job's cost: its input plus
the most it may return).  A job beyond either waits for its turn, in arrival order, as a Kafka
request waits in the request queue for a free request handler thread; the connection that sent
it waits with it (its requests are answered in order), the others go on.  A job larger than the
whole budget runs alone.  What waits holds no more than its request already did.

A worker that dies (killed, out of memory) breaks the pool: the jobs in it get
UNKNOWN_SERVER_ERROR, once retried in a new pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from odradek._timeouts import wait_for
from odradek.errors import ErrorCode, KafkaError
from odradek.storage.errors import InvalidRecordError

__all__ = ["MAX_BYTES_IN_FLIGHT", "WORKERS", "OffLoop"]

log = logging.getLogger(__name__)

#: worker processes, and so jobs running at once
WORKERS = 2
#: bytes held by the jobs running (their inputs and the most they may return)
MAX_BYTES_IN_FLIGHT = 256 * 1024 * 1024
#: the workers' nice increment: the event loop (and everything else) comes first
WORKER_NICE = 5
#: how long stop() waits for jobs still running before it terminates the workers
_STOP_WAIT_S = 5.0
#: modules the fork server imports once, so that each new worker starts with them
_PRELOAD = ["odradek.broker.compat"]


class _Failed:
    """A KafkaError raised by a job in a worker, carried back as data (the storage errors do
    not survive pickling as themselves)."""

    __slots__ = ("code", "message", "record_errors")

    def __init__(self, exc: KafkaError) -> None:
        self.code = int(exc.code)
        self.message = exc.message
        self.record_errors: list[tuple[int, str]] = list(getattr(exc, "record_errors", None) or [])

    def error(self) -> KafkaError:
        if self.code == ErrorCode.INVALID_RECORD:
            return InvalidRecordError(self.message, self.record_errors)
        return KafkaError(self.code, self.message)


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """In the worker: the job, its KafkaError as data."""
    try:
        return fn(*args)
    except KafkaError as exc:
        return _Failed(exc)


def _worker_started() -> None:
    """A worker process begins: below the broker in CPU priority; Ctrl-C is for the broker."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class OffLoop:
    """Runs jobs (pure functions of picklable arguments) in worker processes, bounded.

    ``executor``: run the jobs there instead (a thread pool in tests, whose jobs a test can
    hold); then ``workers`` still bounds how many run at once."""

    def __init__(
        self, workers: int = WORKERS, max_bytes: int = MAX_BYTES_IN_FLIGHT, executor: Executor | None = None
    ) -> None:
        self.workers = max(1, workers)
        self.max_bytes = max_bytes
        self._executor = executor
        self._own = executor is None
        self._stopped = False
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        #: jobs running now, and the bytes they hold
        self.running = 0
        self.bytes_in_flight = 0
        #: jobs started and finished since the start (for tests and metrics)
        self.started = 0
        self.finished = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def run_in(self, executor: Executor) -> None:
        """Run the jobs in ``executor`` from now on (tests: a thread pool, whose jobs a test can
        hold); the caller shuts it down.  The bounds stay."""
        self._drop_pool()
        self._executor = executor
        self._own = False

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (none before the first job, or with a thread pool)."""
        processes = getattr(self._executor, "_processes", None) or {}  # ProcessPoolExecutor's own
        return [p.pid for p in processes.values() if p.pid is not None]

    async def run(self, fn: Callable[..., Any], *args: Any, cost: int) -> Any:
        """``fn(*args)`` in a worker once the bounds allow; its result, or its KafkaError raised
        here.  Cancelling the caller cancels a job still waiting; a running one finishes in its
        worker (its bytes count until then) and its result is dropped."""
        if self._stopped:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker is stopping")
        cost = max(cost, 0)
        await self._acquire(cost)
        try:
            result = await self._submit(fn, args, cost)
        except BrokenProcessPool:
            log.error("a worker process died; retrying %s in a new pool", getattr(fn, "__name__", fn))
            self._drop_pool()
            try:
                await self._acquire(cost)
                result = await self._submit(fn, args, cost)
            except BrokenProcessPool:
                self._drop_pool()
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the worker process died") from None
        if isinstance(result, _Failed):
            raise result.error()
        return result

    async def _submit(self, fn: Callable[..., Any], args: tuple[Any, ...], cost: int) -> Any:
        """Run the job (its share of the bounds, already acquired, is released when it ends)."""
        loop = asyncio.get_running_loop()
        try:
            cf = self._pool().submit(_call, fn, args)
        except BaseException:
            self._release(cost)
            raise
        self.started += 1

        def ended(_f: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing is left to bound
                loop.call_soon_threadsafe(self._ended, cost)

        cf.add_done_callback(ended)
        return await asyncio.wrap_future(cf)

    def _ended(self, cost: int) -> None:
        self.finished += 1
        self._release(cost)

    # -- the bounds ------------------------------------------------------------------------------
    def _fits(self, cost: int) -> bool:
        return self.running == 0 or (self.running < self.workers and self.bytes_in_flight + cost <= self.max_bytes)

    async def _acquire(self, cost: int) -> None:
        if not self._waiting and self._fits(cost):
            self.running += 1
            self.bytes_in_flight += cost
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (cost, fut)
        self._waiting.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as it was cancelled: hand it on
                self._release(cost)
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(entry)
                self._grant()
            raise

    def _release(self, cost: int) -> None:
        self.running -= 1
        self.bytes_in_flight -= cost
        self._grant()

    def _grant(self) -> None:
        """Start the waiting jobs that fit now, in arrival order (the first that does not fit
        holds the ones behind it: a large job is not starved by small ones)."""
        waiting = self._waiting
        while waiting:
            cost, fut = waiting[0]
            if fut.done():
                waiting.popleft()
                continue
            if not self._fits(cost):
                return
            waiting.popleft()
            self.running += 1
            self.bytes_in_flight += cost
            fut.set_result(None)

    # -- the pool --------------------------------------------------------------------------------
    def _pool(self) -> Executor:
        if self._executor is None:
            self._executor = self._start_pool()
        return self._executor

    def _start_pool(self) -> Executor:
        try:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            return ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_worker_started)
        except (OSError, ValueError, ImportError, NotImplementedError) as exc:
            log.warning(
                "cannot start worker processes (%s): down-conversion, recompression and the validation of large "
                "batches run in %d threads instead, where their Python work competes with the event loop",
                exc, self.workers,
            )
            return ThreadPoolExecutor(self.workers, thread_name_prefix="odradek-offload")

    def _drop_pool(self) -> None:
        pool = self._executor
        if pool is not None and self._own:
            self._executor = None
            pool.shutdown(wait=False, cancel_futures=True)

    async def stop(self) -> None:
        """Stop taking jobs; wait a little for those running, then end the workers."""
        self._stopped = True
        for _cost, fut in self._waiting:
            if not fut.done():
                fut.cancel()
        self._waiting.clear()
        pool, self._executor = self._executor, None
        if pool is None or not self._own:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())  # ProcessPoolExecutor's own
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(pool, ProcessPoolExecutor):
            try:
                await wait_for(asyncio.to_thread(pool.shutdown, True), _STOP_WAIT_S)
            except TimeoutError:
                for proc in processes:
                    with contextlib.suppress(Exception):
                        proc.terminate()
