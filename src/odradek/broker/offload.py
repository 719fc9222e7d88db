"""Per-record work of a request, off the event loop: worker processes with bounds.

Down-converting a large batch for an old fetch, recompressing a produced batch for a topic's
``compression.type``, and validating a large or compressed produced batch (its records, the keys
of a compacted topic) are pure functions of bytes (:mod:`odradek.broker.compat`) that cost
Python work per record: a million-record batch is seconds of it.  On the event loop that froze
every connection; in a thread it holds the GIL, and the loop, which gives the GIL up at every
socket call, waits for it each time (measured: a good client's p99 went from 1.4 ms to 180 ms
while four conversions ran in two threads, and to 17 ms in two worker processes).  So they run
in worker processes: ``WORKERS`` of them, ``python -m odradek.broker.offload`` started on first
use, at a lower CPU priority than the broker, each doing one job at a time; a job goes to a
worker through its stdin and comes back through its stdout, pickled, read and written by the
event loop itself (no helper thread of the broker's holds the GIL for them).  A worker ends
when its stdin closes: with the broker, however the broker ends.  Where worker processes cannot
be started, a thread pool does the work instead (logged once).

Large bytes (``SPOOL_BYTES`` and more) go to and from a worker through a file, a :class:`Spool`:
the broker writes a job's input there from a thread (a log region is copied by the kernel), and
a worker leaves a large result there, which the broker opens and unlinks at once.  Pickling them
instead would copy them while holding the GIL (tens of milliseconds for a large conversion,
during which the event loop waits); and a fetch answers with the spooled result as a file region,
sent like log data (``sendfile``), never copied into Python objects: the broker's memory holds
none of a large conversion, as Kafka's lazy down-conversion (KIP-283) holds only a chunk.

Bounds, so that many such requests cannot exhaust memory: at most ``WORKERS`` jobs run at once,
and the jobs running hold at most ``MAX_BYTES_IN_FLIGHT`` bytes (a job's cost: its input plus
the most it may return).  A job beyond either waits for its turn, in arrival order, as a Kafka
request waits in the request queue for a free request handler thread; the connection that sent
it waits with it (its requests are answered in order), the others go on.  A job larger than the
whole budget runs alone.  What waits holds no more than its request already did.

A worker that dies (killed, out of memory) costs its job a retry in a new worker, then
UNKNOWN_SERVER_ERROR; the others are not affected.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import signal
import struct
import sys
import tempfile
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from odradek._timeouts import wait_for
from odradek.errors import ErrorCode, KafkaError, OdradekError
from odradek.storage.errors import InvalidRecordError

__all__ = ["LOOP_DECOMPRESSED_BYTES", "MAX_BYTES_IN_FLIGHT", "SPOOL_BYTES", "WORKERS", "FileSlice", "OffLoop", "Spool", "lower_priority"]

log = logging.getLogger(__name__)


def _default_workers() -> int:
    """One worker fewer than the CPUs this process may run on, at least one, at most four.  The
    event loop (and every client on the machine) keeps a CPU: with as many busy workers as CPUs,
    a woken process waited for a worker's time slice or kernel work to end (on 2 cores, two
    workers converting put a paced producer's p99 at 7-8x its idle value, one worker at 2x;
    conversions then run at about half the rate)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 2
    return min(4, max(1, cpus - 1))


#: worker processes, and so jobs running at once
WORKERS = _default_workers()
#: bytes held by the jobs running (their inputs and the most they may return)
MAX_BYTES_IN_FLIGHT = 256 * 1024 * 1024
#: bytes of a job's argument or result from which they travel through a file (a Spool)
SPOOL_BYTES = 256 * 1024
#: bytes a produced batch read on the event loop may decompress to (the produce handler and schema
#: validation): its record count bounds the work of reading its records, not of decompressing
#: them (one record of zeros can inflate ~1000x, to Kafka's 64 MiB bound: tens of milliseconds of
#: the loop).  Past it the batch is read in a worker, with the usual bound (the loop's ~1-2 ms
#: so far are lost)
LOOP_DECOMPRESSED_BYTES = 4 << 20
#: the workers' nice increment: the event loop (and everything else) comes first
WORKER_NICE = 10
#: how long stop() waits for a worker's job before it kills the worker
_STOP_WAIT_S = 5.0
_FRAME = struct.Struct(">I")


class WorkerDied(OdradekError):
    """A worker process ended during a job."""


class Spool:
    """Bytes in a temporary file, on their way to or from a worker process.

    The side that makes one writes the file (:meth:`of`, :meth:`copy`) and passes the Spool on
    (pickled: its path and length).  The broker's own input Spools are read by the worker
    (:meth:`take`) and removed by the broker when the job ends; a worker's result Spool is
    adopted by the broker (:meth:`adopt`: opened and unlinked at once, closed when the Spool is
    garbage).  An adopted Spool is a file region as the server sends log data (``fd``,
    ``position``, ``length``, ``to_bytes``): a fetch answers with it."""

    __slots__ = ("__weakref__", "fd", "length", "path")

    position = 0

    def __init__(self, path: str, length: int) -> None:
        self.path = path
        self.length = length
        self.fd = -1

    def __reduce__(self) -> tuple[type[Spool], tuple[str, int]]:
        return (Spool, (self.path, self.length))

    def __len__(self) -> int:
        return self.length

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview) -> Spool:
        """``data`` written to a new file (the copy is the kernel's: no GIL held)."""
        fd, path = tempfile.mkstemp(prefix="odradek-spool-")
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return cls(path, len(data))

    @classmethod
    def copy(cls, src_fd: int, position: int, length: int) -> Spool:
        """``length`` bytes of the file ``src_fd`` from ``position``, copied by the kernel."""
        fd, path = tempfile.mkstemp(prefix="odradek-spool-")
        try:
            done = 0
            while done < length:
                try:
                    n = os.copy_file_range(src_fd, fd, length - done, position + done)
                except OSError:  # not between these file systems: through user memory
                    n = os.write(fd, os.pread(src_fd, min(length - done, 1 << 20), position + done))
                if n <= 0:
                    raise OSError(f"short read of a log segment ({done} of {length} bytes)")
                done += n
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
        return cls(path, length)

    def take(self) -> bytes:
        """The bytes (the side that made the file removes it)."""
        with open(self.path, "rb") as f:
            return f.read()

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def adopt(self) -> Spool:
        """Open the file and unlink it (it lives while this Spool does)."""
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDONLY)
            weakref.finalize(self, os.close, self.fd)
            self.discard()
        return self

    @property
    def segment(self) -> Spool:
        """What the server reads a region's rest from (for a log region, its segment)."""
        return self

    def read_bytes(self, position: int, length: int) -> bytes:
        data = os.pread(self.fd, length, position)
        if len(data) != length:
            raise OSError(f"short read of a spooled result ({len(data)} of {length} bytes)")
        return data

    def to_bytes(self) -> bytes:
        return self.read_bytes(0, self.length)


class FileSlice:
    """``length`` bytes of a file the broker has open (a log segment), from ``position``, read by
    the worker itself: the broker hands the job a duplicate of its descriptor (closed when the
    job ends) and the worker opens the same open file through ``/proc/<broker>/fd/<fd>`` —
    whatever was renamed or unlinked since (a segment replaced by the cleaner, deleted by
    retention) — checking it is the same inode.  The broker copies nothing: a 21 MB region
    copied into a Spool for each conversion was ~200 MB/s of kernel copying at the broker's
    priority.  In the broker's own process (the thread fallback) the descriptor is read
    directly.  Linux's ``/proc`` only: :meth:`available` says whether to use one."""

    __slots__ = ("dev", "fd", "ino", "length", "pid", "position")

    def __init__(self, pid: int, fd: int, position: int, length: int, dev: int, ino: int) -> None:
        self.pid, self.fd, self.position, self.length, self.dev, self.ino = pid, fd, position, length, dev, ino

    def __reduce__(self) -> tuple[type[FileSlice], tuple[int, int, int, int, int, int]]:
        return (FileSlice, (self.pid, self.fd, self.position, self.length, self.dev, self.ino))

    def __len__(self) -> int:
        return self.length

    @staticmethod
    @functools.cache
    def available() -> bool:
        """Whether this system has ``/proc/<pid>/fd`` (asked once)."""
        return os.path.isdir(f"/proc/{os.getpid()}/fd")

    @classmethod
    def of(cls, src_fd: int, position: int, length: int) -> FileSlice:
        """The region of ``src_fd`` (which the caller may close: the slice holds its own duplicate
        until :meth:`discard`)."""
        fd = os.dup(src_fd)
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(os.getpid(), fd, position, length, st.st_dev, st.st_ino)

    def take(self) -> bytes:
        """The bytes (in a worker: through the broker's descriptor)."""
        own = self.pid != os.getpid()
        fd = os.open(f"/proc/{self.pid}/fd/{self.fd}", os.O_RDONLY) if own else self.fd
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (self.dev, self.ino):
                raise OSError(f"descriptor {self.fd} of process {self.pid} is no longer the file of the job")
            parts = []
            done = 0
            while done < self.length:
                chunk = os.pread(fd, min(self.length - done, 8 << 20), self.position + done)
                if not chunk:
                    raise OSError(f"short read of a log segment ({done} of {self.length} bytes)")
                parts.append(chunk)
                done += len(chunk)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            if own:
                os.close(fd)

    def discard(self) -> None:
        """Close the broker's duplicate (once; in the broker only)."""
        if self.fd >= 0 and self.pid == os.getpid():
            fd, self.fd = self.fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)


def _spooled(value: Any) -> Any:
    """A result with its large bytes in Spools (in a tuple too)."""
    if isinstance(value, (bytes, bytearray)) and len(value) >= SPOOL_BYTES:
        return Spool.of(value)
    if type(value) is tuple:
        return tuple(_spooled(v) for v in value)
    return value


def _adopted(value: Any) -> Any:
    if isinstance(value, Spool):
        value.adopt()
    elif type(value) is tuple:
        for v in value:
            _adopted(v)
    return value


class _Failed:
    """A KafkaError raised by a job in a worker, carried back as data (the storage errors do
    not survive pickling as themselves)."""

    __slots__ = ("code", "message", "record_errors")

    def __init__(self, exc: KafkaError) -> None:
        self.code = int(exc.code)
        self.message = exc.message
        self.record_errors: list[tuple[int, str]] = list(getattr(exc, "record_errors", None) or [])

    def __reduce__(self) -> tuple[Callable[..., _Failed], tuple[int, str, list[tuple[int, str]]]]:
        return (_failed, (self.code, self.message, self.record_errors))

    def error(self) -> KafkaError:
        if self.code == ErrorCode.INVALID_RECORD:
            return InvalidRecordError(self.message, self.record_errors)
        return KafkaError(self.code, self.message)


def _failed(code: int, message: str, record_errors: list[tuple[int, str]]) -> _Failed:
    f = _Failed.__new__(_Failed)
    f.code, f.message, f.record_errors = code, message, record_errors
    return f


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """The job (its spooled arguments taken), its large bytes spooled, its KafkaError as data."""
    try:
        return _spooled(fn(*(a.take() if isinstance(a, (Spool, FileSlice)) else a for a in args)))
    except KafkaError as exc:
        return _Failed(exc)


# -- the worker process ------------------------------------------------------------------------------


def lower_priority() -> None:
    """Let everything else on the machine come first: the worker's nice increment, and, where the
    kernel groups processes by session for scheduling (``/proc/sys/kernel/sched_autogroup_enabled``,
    on by default in most distributions' kernels), a session of its own at that nice.  Under
    autogroup a process's nice counts only against the processes of its own session: a worker
    niced in the broker's session still took its whole share against every other session's
    processes (the clients on the same machine), whose wake-ups then waited for a worker's time
    slice to end (a paced producer's p99 at 5-10x its idle value while conversions ran).  The
    worker still ends with the broker: when its stdin closes."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            grouped = f.read().strip() == "1"
    except OSError:
        grouped = False
    if not grouped:
        return
    try:
        os.setsid()
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(WORKER_NICE))
    except OSError as exc:  # a session leader already, or no permission: the process nice stays
        print(f"odradek offload worker: no autogroup of its own ({exc})", file=sys.stderr)


def _serve() -> None:
    """A worker: jobs from stdin, results to stdout, until stdin closes."""
    import pickle

    lower_priority()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the broker
    jobs = sys.stdin.buffer
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into the results
    while True:
        head = jobs.read(_FRAME.size)
        if len(head) < _FRAME.size:
            return
        fn, args = pickle.loads(jobs.read(_FRAME.unpack(head)[0]))
        try:
            answer = pickle.dumps((True, _call(fn, args)), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a job's bug: the broker logs it as the request's error
            try:
                answer = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
            except Exception:
                answer = pickle.dumps((False, RuntimeError(repr(exc))), pickle.HIGHEST_PROTOCOL)
        results.write(_FRAME.pack(len(answer)) + answer)
        results.flush()


class _Worker:
    """One worker process, seen from the broker."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        import pickle  # here: a broker that starts no worker process does not load it

        job = pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL)
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(_FRAME.pack(len(job)) + job)
            await proc.stdin.drain()
            size = _FRAME.unpack(await proc.stdout.readexactly(_FRAME.size))[0]
            ok, value = pickle.loads(await proc.stdout.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise WorkerDied(f"worker process {proc.pid} ended (exit status {proc.returncode})") from exc
        if not ok:
            raise value
        return value

    async def stop(self) -> None:
        proc = self.proc
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await wait_for(proc.wait(), _STOP_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


class OffLoop:
    """Runs jobs (pure functions of picklable arguments) in worker processes, bounded.

    ``executor``: run the jobs there instead (a thread pool in tests, whose jobs a test can
    hold); ``workers`` still bounds how many run at once."""

    def __init__(
        self, workers: int = WORKERS, max_bytes: int = MAX_BYTES_IN_FLIGHT, executor: Executor | None = None
    ) -> None:
        self.workers = max(1, workers)
        self.max_bytes = max_bytes
        self._executor = executor
        self._own_executor = False
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._jobs: set[asyncio.Task[Any]] = set()
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
        self._executor = executor
        self._own_executor = False

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (none before the first job, or with an executor)."""
        return [w.proc.pid for w in self._all]

    async def run(self, fn: Callable[..., Any], *args: Any, cost: int) -> Any:
        """``fn(*args)`` in a worker once the bounds allow; its result (large bytes in it as
        adopted Spools), or its KafkaError raised here.  Large bytes arguments travel in Spools
        (Spool and FileSlice arguments are read by the worker and removed / closed when the job
        ends, or at once when it never starts).  Cancelling the
        caller cancels a job still waiting; a running one finishes in its worker (its bytes
        count until then) and its result is dropped."""
        try:
            if self._stopped:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker is stopping")
            await self._acquire(max(cost, 0))
        except BaseException:  # never started: its Spool and FileSlice arguments go now
            for a in args:
                if isinstance(a, (Spool, FileSlice)):
                    a.discard()
            raise
        cost = max(cost, 0)
        job = asyncio.ensure_future(self._job(fn, args, cost))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        result = await asyncio.shield(job)
        if isinstance(result, _Failed):
            raise result.error()
        return result

    async def _job(self, fn: Callable[..., Any], args: tuple[Any, ...], cost: int) -> Any:
        """One job, its share of the bounds acquired: run to its end even if its caller is
        cancelled (the worker is busy until then), then released."""
        spools: list[Spool | FileSlice] = []
        self.started += 1
        try:
            sent = await self._arguments(args, spools)
            if self._executor is not None:
                return _adopted(await self._in_executor(self._executor, fn, sent))
            for attempt in (1, 2):
                try:
                    return _adopted(await self._in_worker(fn, sent))
                except WorkerDied as exc:
                    if attempt == 2 or self._stopped:
                        log.error("%s; %s failed", exc, getattr(fn, "__name__", fn))
                        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the worker process died") from None
                    log.error("%s; retrying %s in a new worker", exc, getattr(fn, "__name__", fn))
            raise AssertionError("unreachable")
        finally:
            for spool in spools:
                spool.discard()
            self.finished += 1
            self._release(cost)

    @staticmethod
    async def _arguments(args: tuple[Any, ...], spools: list[Spool | FileSlice]) -> tuple[Any, ...]:
        """The arguments as a worker gets them: large bytes written to Spools from a thread,
        views as bytes (they do not pickle)."""
        out = []
        for a in args:
            if isinstance(a, (bytes, bytearray, memoryview)) and len(a) >= SPOOL_BYTES:
                a = await asyncio.to_thread(Spool.of, a)
            elif isinstance(a, memoryview):
                a = bytes(a)
            if isinstance(a, (Spool, FileSlice)):
                spools.append(a)
            out.append(a)
        return tuple(out)

    @staticmethod
    async def _in_executor(executor: Executor, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        cf: concurrent.futures.Future[Any] = executor.submit(_call, fn, args)
        return await asyncio.wrap_future(cf)

    async def _in_worker(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        worker = self._idle.pop() if self._idle else await self._spawn()
        if worker is None:  # no worker processes here: threads
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="odradek-offload")
            self._own_executor = True
            return await self._in_executor(self._executor, fn, args)
        try:
            result = await worker.call(fn, args)
        except WorkerDied:
            self._all.discard(worker)
            raise
        except BaseException:
            self._idle.append(worker)
            raise
        if self._stopped:
            self._all.discard(worker)
            await worker.stop()
        else:
            self._idle.append(worker)
        return result

    async def _spawn(self) -> _Worker | None:
        if self._stopped:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker is stopping")
        env = dict(os.environ)
        # the same odradek as the broker's (a checkout on sys.path, an editable install...)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "odradek.broker.offload",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
            )
        except OSError as exc:
            log.warning(
                "cannot start worker processes (%s): down-conversion, recompression and the validation of large "
                "batches run in %d threads instead, where their Python work competes with the event loop",
                exc, self.workers,
            )
            return None
        worker = _Worker(proc)
        self._all.add(worker)
        return worker

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

    async def stop(self) -> None:
        """Stop taking jobs; let those running end (a little while), then end the workers."""
        self._stopped = True
        for _cost, fut in self._waiting:
            if not fut.done():
                fut.cancel()
        self._waiting.clear()
        if self._jobs:
            await asyncio.wait(list(self._jobs), timeout=_STOP_WAIT_S)
        workers, self._all, self._idle = list(self._all), set(), []
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
        if self._jobs:  # their workers are gone: they end now
            await asyncio.wait(list(self._jobs), timeout=_STOP_WAIT_S)
        if self._executor is not None and self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)


if __name__ == "__main__":  # a worker: run by the module's own name (pickles name its classes so)
    from odradek.broker import offload

    offload._serve()
