"""OffLoop's bounds: at most ``workers`` jobs run at once and the running jobs hold at most
``max_bytes``; the others wait in arrival order (a job larger than the whole budget runs alone);
a job cancelled while it waits never runs, one cancelled while it runs holds its bytes until it
ends.  And through real worker processes: a job's Kafka error comes back as itself (with its
per-record errors), and a worker that dies costs its job an error, not the pool."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from odradek.broker.compat import prepare_append
from odradek.broker.offload import FileSlice, OffLoop
from odradek.errors import ErrorCode, KafkaError
from odradek.records import BatchBuilder
from odradek.storage import InvalidRecordError, LogConfig


class _Gate:
    """Jobs that wait, each on its own event, and say when they started."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.events: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def job(self, name: str) -> str:
        with self.lock:
            self.started.append(name)
            event = self.events.setdefault(name, threading.Event())
        assert event.wait(30), f"job {name} was never released"
        return name

    def release(self, name: str) -> None:
        with self.lock:
            self.events.setdefault(name, threading.Event()).set()


@pytest.fixture
def threads() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(8)
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)


async def _until(condition: object, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def _settled() -> None:
    """Let every callback that is due run (a job that could start, starts)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_jobs_beyond_the_workers_wait_in_order(threads: ThreadPoolExecutor) -> None:
    async def body() -> None:
        off = OffLoop(workers=2, max_bytes=1 << 30)
        off.run_in(threads)
        gate = _Gate()
        tasks = [asyncio.ensure_future(off.run(gate.job, name, cost=10)) for name in "abcd"]
        await _until(lambda: len(gate.started) == 2, "two jobs to start")
        await _settled()
        assert gate.started == ["a", "b"] and off.running == 2 and off.waiting == 2
        gate.release("b")
        await _until(lambda: len(gate.started) == 3, "the third job")
        assert gate.started == ["a", "b", "c"]
        for name in "acd":
            gate.release(name)
        assert await asyncio.gather(*tasks) == list("abcd")
        assert off.running == 0 and off.bytes_in_flight == 0

    asyncio.run(body())


def test_bytes_in_flight_are_bounded_and_a_huge_job_runs_alone(threads: ThreadPoolExecutor) -> None:
    async def body() -> None:
        off = OffLoop(workers=4, max_bytes=100)
        off.run_in(threads)
        gate = _Gate()
        a = asyncio.ensure_future(off.run(gate.job, "a", cost=60))
        b = asyncio.ensure_future(off.run(gate.job, "b", cost=60))  # 120 > 100: waits for a
        huge = asyncio.ensure_future(off.run(gate.job, "huge", cost=1000))  # more than the budget
        small = asyncio.ensure_future(off.run(gate.job, "small", cost=1))  # behind huge: not before it
        await _until(lambda: gate.started == ["a"], "a")
        await _settled()
        assert gate.started == ["a"] and off.bytes_in_flight == 60
        gate.release("a")
        await _until(lambda: gate.started == ["a", "b"], "b")
        await _settled()
        assert gate.started == ["a", "b"]  # huge waits for b to end, small for huge
        gate.release("b")
        await _until(lambda: gate.started == ["a", "b", "huge"], "huge, alone")
        await _settled()
        assert off.running == 1 and off.bytes_in_flight == 1000
        gate.release("huge")
        gate.release("small")
        assert await asyncio.gather(a, b, huge, small) == ["a", "b", "huge", "small"]
        assert off.running == 0 and off.bytes_in_flight == 0

    asyncio.run(body())


def test_cancelled_jobs(threads: ThreadPoolExecutor) -> None:
    async def body() -> None:
        off = OffLoop(workers=1, max_bytes=1 << 30)
        off.run_in(threads)
        gate = _Gate()
        running = asyncio.ensure_future(off.run(gate.job, "running", cost=7))
        waiting = asyncio.ensure_future(off.run(gate.job, "waiting", cost=5))
        after = asyncio.ensure_future(off.run(gate.job, "after", cost=3))
        await _until(lambda: gate.started == ["running"], "the first job")
        waiting.cancel()
        running.cancel()  # its worker goes on: its bytes and its slot stay taken until it ends
        await _settled()
        assert off.running == 1 and off.bytes_in_flight == 7 and gate.started == ["running"]
        gate.release("running")
        await _until(lambda: gate.started == ["running", "after"], "the job behind the cancelled one")
        gate.release("after")
        assert await after == "after"
        assert "waiting" not in gate.started  # cancelled while it waited: never ran
        assert off.running == 0 and off.bytes_in_flight == 0
        for t in (running, waiting):
            with pytest.raises(asyncio.CancelledError):
                await t

    asyncio.run(body())


def _config(**overrides: object) -> LogConfig:
    return LogConfig.from_dict(overrides)


def _die() -> None:
    os._exit(3)


def test_worker_processes_carry_errors_back_and_survive_a_dead_worker() -> None:
    async def body() -> None:
        off = OffLoop(workers=1)
        try:
            b = BatchBuilder()
            for i in range(5):
                b.append(1, None if i in (1, 3) else b"k", b"v")
            with pytest.raises(InvalidRecordError) as refused:
                await off.run(prepare_append, b.build(), _config(**{"cleanup.policy": "compact"}), "t", 0, cost=1)
            assert [i for i, _m in refused.value.record_errors] == [1, 3]
            assert off.worker_pids() and os.getpid() not in off.worker_pids()  # a process of its own

            with pytest.raises(KafkaError) as died:
                await off.run(_die, cost=1)
            assert died.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
            assert await off.run(len, b"still here", cost=1) == 10  # a new pool
        finally:
            await off.stop()

    asyncio.run(body())


def _autogroup_enabled() -> bool:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def test_a_worker_yields_to_every_other_process_not_only_to_its_broker() -> None:
    """A worker runs at WORKER_NICE; where the kernel schedules by session (autogroup), a nice
    counts only inside its session, so the worker also has a session of its own at that nice:
    niced in the broker's session it took a whole session's share against every client on the
    machine (a paced producer's p99 at 5-10x idle during conversions). It still ends with its
    broker."""
    from odradek.broker.offload import WORKER_NICE

    async def body() -> None:
        off = OffLoop(workers=1)
        try:
            assert await off.run(len, b"x", cost=1) == 1
            (pid,) = off.worker_pids()
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            nice, session = int(fields[16]), int(fields[3])
            assert nice == os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICE or nice == 19
            if _autogroup_enabled():
                assert session == pid, "the worker leads a session of its own"
                with open(f"/proc/{pid}/autogroup") as f:
                    group = f.read()
                with open("/proc/self/autogroup") as f:
                    mine = f.read()
                # an empty file: the process is in the kernel's default (root) group, which the
                # file never names (a process that has not started a session since boot, as in CI)
                assert group.split(), "the worker's own session is an autogroup"
                assert group.split()[0] != (mine.split() or ["root"])[0]
                assert group.split()[-1] == str(WORKER_NICE)
            else:
                assert session == os.getsid(0)
        finally:
            await off.stop()
        with pytest.raises(ProcessLookupError):
            for _ in range(200):  # stop() closed its stdin: it ends (and is reaped)
                os.kill(pid, 0)
                await asyncio.sleep(0.05)

    asyncio.run(body())


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_worker_reads_a_file_slice_through_the_brokers_descriptor(tmp_path: Path) -> None:
    """A down-conversion's input is not copied by the broker: the worker reads the region of the
    segment through the broker's own (duplicated) descriptor, even after the file was replaced
    under its name (the cleaner's swap) or unlinked (retention); the duplicate is closed when the
    job ends."""

    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"H" * 100 + bytes(range(256)) * 4096 + b"T" * 100)

    async def body() -> None:
        off = OffLoop(workers=1)
        try:
            with open(seg, "rb") as f:
                piece = FileSlice.of(f.fileno(), 100, 256 * 4096)
            # the broker's own descriptor is gone; the name now holds other bytes
            seg.rename(tmp_path / "old.deleted")
            seg.write_bytes(b"X" * (256 * 4096 + 200))
            (tmp_path / "old.deleted").unlink()
            assert _fd_open(piece.fd)
            expected = hashlib.sha256(bytes(range(256)) * 4096).digest()
            assert await off.run(_digest, piece, cost=1) == expected
            assert piece.fd == -1  # the duplicate was closed with the job
            assert os.getpid() not in off.worker_pids()
        finally:
            await off.stop()

    asyncio.run(body())


def test_a_file_slice_of_a_job_that_never_starts_is_closed(tmp_path: Path, threads: ThreadPoolExecutor) -> None:

    path = tmp_path / "seg.log"
    path.write_bytes(b"0123456789")

    async def body() -> None:
        off = OffLoop(workers=1, max_bytes=1 << 30)
        off.run_in(threads)
        gate = _Gate()
        running = asyncio.ensure_future(off.run(gate.job, "running", cost=1))
        await _until(lambda: gate.started == ["running"], "the first job")
        with open(path, "rb") as f:
            piece = FileSlice.of(f.fileno(), 2, 5)
        dup = piece.fd
        waiting = asyncio.ensure_future(off.run(bytes, piece, cost=1))
        await _settled()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert piece.fd == -1 and not _fd_open(dup)
        gate.release("running")
        assert await running == "running"
        with open(path, "rb") as f:  # in the broker's own process (threads) it reads its descriptor
            assert await off.run(bytes, FileSlice.of(f.fileno(), 2, 5), cost=1) == b"23456"

    asyncio.run(body())


@pytest.mark.parametrize(("cpus", "workers"), [(1, 1), (2, 1), (3, 2), (5, 4), (64, 4)])
def test_the_workers_leave_the_event_loop_a_cpu(monkeypatch: pytest.MonkeyPatch, cpus: int, workers: int) -> None:
    """As many busy workers as CPUs made every woken process wait for one (a paced producer's p99
    at 7-8x idle during conversions on 2 CPUs, 2x with one worker): one fewer, one to four."""
    from odradek.broker import offload

    monkeypatch.setattr(offload.os, "sched_getaffinity", lambda _pid: set(range(cpus)))
    assert offload._default_workers() == workers
