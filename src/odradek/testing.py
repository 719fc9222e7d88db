"""Helpers for tests and benchmarks: run ``odradek serve`` as a real process, talk raw protocol to it.

``BrokerProcess`` starts a broker on 127.0.0.1 on a free port (one it can have again after a
restart), waits for its ready line, and stops it by PID — SIGTERM for a clean shutdown, SIGKILL for a crash::

    with BrokerProcess(tmp_path / "data", overrides={"num.partitions": 3}) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

``WireClient`` is a minimal blocking client over the sans-I/O ``ClientConnection`` for requests no
real client would send (hostile, malformed or pipelined ones).

``running_broker`` runs a broker in the test's own process and event loop, where the test can look
at its internals; with a :class:`FakeScheduler` its timed rules (session timeouts, expiries, flush
and retention timers, quota windows, delayed operations) wait on fake time, which the test moves
with :meth:`FakeScheduler.advance`::

    async def test_a_silent_member_is_expelled(tmp_path):
        fake = FakeScheduler()
        async with running_broker(tmp_path, timers=fake) as broker:
            ...  # a member joins a group with session.timeout.ms=10000, then stays silent
            await fake.advance(10_000)  # no wait: the session timer runs now
            ...  # the group is empty

:class:`FakeClock` is the clock alone (``advance(ms)`` moves it and runs nothing), for the
storage and cluster code that takes a clock.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from odradek._clock import FakeClock
from odradek._scheduler import FakeScheduler, Scheduler
from odradek.coordination.zkserver import restartable_port
from odradek.protocol import NEED_DATA, ClientConnection, Message, ResponseReceived
from odradek.protocol.messages.produce import ProduceRequest

if TYPE_CHECKING:
    from odradek.broker.app import Broker

__all__ = [
    "BrokerProcess", "FakeClock", "FakeScheduler", "WireClient", "cpu_seconds", "freeze", "proc_cpu_times", "proc_stat",
    "produce_request", "running_broker", "wait_for",
]

T = TypeVar("T")

_READY = re.compile(r"ready on (?P<endpoints>\S+://\S+?:\d+(?:, \S+://\S+?:\d+)*)")
_ENDPOINT_SPEC = re.compile(r"([^:,\s]+)://([^,\s]*):(\d+)")
_ENDPOINT = re.compile(r"(?P<name>[^:,\s]+)://(?P<host>\S+?):(?P<port>\d+)")
_METRICS_URL = re.compile(r"metrics at (?P<url>http://\S+?/metrics)")
#: first starts on ports chosen here, each attempt on new ones (see BrokerProcess.start)
_PORT_ATTEMPTS = 5


class BrokerProcess:
    def __init__(
        self,
        data_dir: str | Path,
        *,
        overrides: Mapping[str, Any] | None = None,
        port: int = 0,
        broker_id: int | None = None,
        log_level: str = "WARNING",
        extra_args: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        fd_limit: int | None = None,
        listeners: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.port = port
        #: ``port`` was 0: chosen at the first start (see :meth:`start`)
        self._auto_port = port == 0
        self.broker_id = broker_id
        self.log_level = log_level
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        #: run the broker with RLIMIT_NOFILE set to this (soft and hard): ``ulimit -n``
        self.fd_limit = fd_limit
        #: ``listeners`` as in server.properties (ports 0 for ephemeral ones); None: one PLAINTEXT
        #: listener on 127.0.0.1:``port``
        self.listeners = listeners
        #: listener name -> (host, port), from the ready line
        self.endpoints: dict[str, tuple[str, int]] = {}
        self.proc: subprocess.Popen[str] | None = None
        self.host = "127.0.0.1"
        self.ready_line = ""
        #: the broker's Prometheus endpoint, from the ready line (None: metrics are off)
        self.metrics_url: str | None = None
        self.ready_seconds = 0.0
        self.stderr_lines: list[str] = []
        self._stderr_thread: threading.Thread | None = None
        #: listener name -> port chosen for the first start (ports given as 0)
        self._chosen: dict[str, int] = {}

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """``host:port`` of one of the broker's listeners (by name)."""
        host, port = self.endpoints[listener.upper()]
        return f"{host}:{port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "odradek", "serve"]
        if self.listeners is None:
            cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        else:
            # a restart: the ports of the first start; a first start: the ports chosen for it
            ports = {name: port for name, (_host, port) in self.endpoints.items()} or self._chosen
            listeners = ",".join(
                f"{name}://{host}:{ports.get(name.upper(), port) if int(port) == 0 else port}"
                for name, host, port in _ENDPOINT_SPEC.findall(self.listeners)
            )
            cmd += ["--override", f"listeners={listeners}"]
        cmd += ["--data-dir", str(self.data_dir), "--log-level", self.log_level]
        if self.broker_id is not None:
            cmd += ["--broker-id", str(self.broker_id)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd + self.extra_args

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        """Start the broker and wait for its ready line.  Ports given as 0 are chosen here on the
        first start (:func:`~odradek.coordination.zkserver.restartable_port`, so that a restart
        can have them again; others if the broker finds one taken) and kept for restarts."""
        if self.endpoints or not self._choose_ports():
            return self._start_once(timeout)
        for _ in range(_PORT_ATTEMPTS - 1):
            try:
                return self._start_once(timeout)
            except RuntimeError as exc:
                if "Address already in use" not in str(exc):
                    raise
            self._choose_ports()
        return self._start_once(timeout)

    def _choose_ports(self) -> bool:
        """Choose a port for every one given as 0; False when none is."""
        if self.listeners is None:
            if not self._auto_port:
                return False
            self.port = restartable_port("127.0.0.1")
            return True
        self._chosen = {
            name.upper(): restartable_port(host or "127.0.0.1")
            for name, host, port in _ENDPOINT_SPEC.findall(self.listeners)
            if int(port) == 0
        }
        return bool(self._chosen)

    def _start_once(self, timeout: float) -> BrokerProcess:
        env = dict(os.environ)
        env.update(self.env)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=self._limit_fds if self.fd_limit is not None else None,
        )
        self.stderr_lines = []
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            m = _READY.search(line)
            if m:
                self.ready_line = line.strip()
                self.ready_seconds = time.monotonic() - t0
                self.endpoints = {
                    e.group("name"): (e.group("host"), int(e.group("port")))
                    for e in _ENDPOINT.finditer(m.group("endpoints"))
                }
                self.host, self.port = self.endpoints.get("PLAINTEXT", next(iter(self.endpoints.values())))
                metrics = _METRICS_URL.search(line)
                self.metrics_url = metrics.group("url") if metrics else None
                return self
        self.kill()
        raise RuntimeError(f"broker did not become ready: {''.join(self.stderr_lines[-30:])}")

    def _limit_fds(self) -> None:
        import resource

        assert self.fd_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (clean shutdown), then SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._join_stderr()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._join_stderr()

    def _join_stderr(self) -> None:
        """Once the process is gone, every line it wrote to stderr is in ``stderr_lines``."""
        if self._stderr_thread is not None and self.proc is not None and self.proc.poll() is not None:
            self._stderr_thread.join(10)

    def wait_for_log(self, *parts: str, timeout: float = 15.0) -> str:
        """The first stderr line containing every one of ``parts``, waiting for it to arrive.

        stderr is drained by a thread, so a line the broker logged before its ready line (on
        stdout) or before answering a request may not be in ``stderr_lines`` yet."""
        def find() -> str | None:
            return next((ln for ln in list(self.stderr_lines) if all(p in ln for p in parts)), None)

        line = wait_for(find, timeout, f"a broker log line with {parts!r}", interval=0.05)
        assert line is not None
        return line

    def rss_kb(self) -> int:
        """Resident set size of the broker process (VmRSS, kB)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def __enter__(self) -> BrokerProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class WireClient:
    """One blocking connection speaking raw requests; ``send``/``receive`` pipeline them (answers in order)."""

    def __init__(self, host: str, port: int, client_id: str = "wire-test", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.conn = ClientConnection(client_id=client_id)
        self.in_flight = 0

    def send(self, message: Message, version: int) -> None:
        _cid, data = self.conn.send_request(message, version)
        self.sock.sendall(data)
        self.in_flight += 1

    def receive(self) -> Any:
        """The answer to the oldest request in flight."""
        while True:
            ev = self.conn.next_event()
            if isinstance(ev, ResponseReceived):
                self.in_flight -= 1
                return ev.response
            if ev is not NEED_DATA:
                raise ConnectionError(f"unexpected event {ev!r}")
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.conn.receive_data(chunk)

    def request(self, message: Message, version: int) -> Any:
        """Send one request and wait for its answer (nothing else may be in flight)."""
        assert self.in_flight == 0, f"{self.in_flight} requests still in flight"
        self.send(message, version)
        return self.receive()

    def close(self) -> None:
        self.sock.close()


def produce_request(
    topic: str,
    records: bytes | Mapping[int, bytes],
    *,
    acks: int = 1,
    timeout_ms: int = 5000,
    transactional_id: str | None = None,
) -> ProduceRequest:
    """A ProduceRequest of already encoded record batches: ``records`` for partition 0, or one
    entry per partition."""
    parts = {0: records} if isinstance(records, (bytes, bytearray)) else records
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=p, records=bytes(data)) for p, data in parts.items()
                ],
            )
        ],
    )


@contextlib.asynccontextmanager
async def running_broker(
    *log_dirs: Path, overrides: Mapping[str, object] | None = None, timers: Scheduler | None = None
) -> AsyncIterator[Broker]:
    """A broker started in this process, on the running event loop, listening on 127.0.0.1 on an
    ephemeral port (``broker.bound``) with these log dirs and ``overrides`` of its settings, on
    ``timers`` (a :class:`FakeScheduler`: fake time; None: real time); stopped on exit."""
    from odradek.broker.app import Broker
    from odradek.config import BrokerConfig

    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": ",".join(map(str, log_dirs)), **(overrides or {})}
    broker = Broker(BrokerConfig.load(None, [], settings, env={}), timers=timers)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.1,
    *,
    error: type[Exception] = AssertionError,
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned), for at most ``timeout`` s.

    Exceptions from the predicate count as "not yet" (a broker or ZooKeeper may be restarting);
    the last one is reported, as ``error``, if the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    failure: BaseException | None = None
    while True:
        try:
            last = predicate()
            failure = None
            if last:
                return last
        except Exception as exc:
            failure = exc
        if time.monotonic() >= deadline:
            detail = f"last error: {failure!r}" if failure is not None else f"last value: {last!r}"
            raise error(f"timed out after {timeout:g}s waiting for {what} ({detail})")
        time.sleep(interval)


def freeze(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and wait until every one of its threads has stopped.

    ``kill`` only queues the signal: the kernel wakes one thread to act on it, and until that
    thread gets a core the others run on (a ZooKeeper answered a request 9 ms after ``kill``
    returned, on two loaded cores).  Raises TimeoutError if the process does
    not stop within ``timeout`` s (it is then left with the signal pending)."""
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: _all_threads_stopped(pid), timeout, f"pid {pid} to stop", interval=0.005, error=TimeoutError)


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in state T (stopped) or t (traced); True when it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    for tid in tids:
        try:
            state = proc_stat(pid, int(tid))[0]
        except OSError:  # the thread ended
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads, those that ended too), 0 if it is
    gone.  Read from the process's CPU-time clock (``clock_getcpuclockid``: nanoseconds) where
    the platform has one; ``/proc/PID/stat`` counts in clock ticks (10 ms), too coarse for the
    tenth of a second a broker spends on a benchmark step."""
    clock = _cpu_clock(pid)
    if clock is not None:
        try:
            return time.clock_gettime(clock)
        except OSError:
            pass  # gone, or not ours to read: /proc says which
    try:
        return sum(proc_cpu_times(pid))
    except OSError:
        return 0.0


def proc_cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process from ``/proc/PID/stat``, in clock ticks (10 ms):
    the split the CPU-time clock of :func:`cpu_seconds` does not give.  OSError when gone."""
    fields = proc_stat(pid)
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def proc_stat(pid: int, tid: int | None = None) -> list[str]:
    """The fields of ``/proc/PID/stat`` (a thread's ``/proc/PID/task/TID/stat`` with ``tid``)
    after the command name, which may hold spaces and parentheses: ``[0]`` is the state, ``[1]``
    the parent's pid, ``[11]`` and ``[12]`` user and system time in clock ticks (proc(5)'s
    fields 3 on).  Raises OSError when the process or thread is gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def _cpu_clock(pid: int) -> int | None:
    """The clock id of ``pid``'s CPU time (POSIX ``clock_getcpuclockid``), None without one."""
    import ctypes

    try:
        getcpuclockid = ctypes.CDLL(None).clock_getcpuclockid  # libc, already in this process
    except (OSError, AttributeError):
        return None
    clock = ctypes.c_int()
    if getcpuclockid(ctypes.c_int(pid), ctypes.byref(clock)) != 0:
        return None
    return clock.value
