"""Helpers for tests and benchmarks: run ``odradek serve`` as a real process, talk raw protocol to it.

``BrokerProcess`` starts a broker on 127.0.0.1 on a free port (one it can have again after a
restart), waits for its ready line, and stops it by PID — SIGTERM for a clean shutdown, SIGKILL for a crash::

    with BrokerProcess(tmp_path / "data", overrides={"num.partitions": 3}) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

``WireClient`` is the transport's blocking connection without a handshake, for requests no real
client would send (hostile, malformed or pipelined ones).  ``MockCluster`` is the in-memory
transport: scripted brokers under the real client stack, without sockets.

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

import asyncio
import contextlib
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from odradek._clock import FakeClock
from odradek._scheduler import FakeScheduler, Scheduler
from odradek.coordination.zkserver import restartable_port
from odradek.errors import ErrorCode, OdradekError
from odradek.protocol import (
    NEED_DATA,
    ClientConnection,
    Message,
    RequestReceived,
    ServerConnection,
)
from odradek.protocol.messages import ApiKey, RequestHeader, request_class
from odradek.protocol.messages.api_versions import ApiVersionsResponse
from odradek.protocol.messages.fetch import FetchResponse
from odradek.protocol.messages.find_coordinator import FindCoordinatorResponse
from odradek.protocol.messages.init_producer_id import InitProducerIdResponse
from odradek.protocol.messages.list_offsets import ListOffsetsResponse
from odradek.protocol.messages.metadata import MetadataResponse
from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse
from odradek.records import iter_batch_headers
from odradek.transport import BrokerConnection, add_endpoint, remove_endpoint

if TYPE_CHECKING:
    from odradek.broker.app import Broker

__all__ = [
    "DISCONNECT",
    "NO_ANSWER",
    "BrokerProcess",
    "Delayed",
    "FakeClock",
    "FakeScheduler",
    "Fault",
    "FaultControlError",
    "Faults",
    "Handler",
    "HttpFaultControl",
    "MockBroker",
    "MockCluster",
    "MockPartition",
    "MockTopic",
    "ReceivedRequest",
    "WireClient",
    "freeze",
    "produce_request",
    "running_broker",
    "wait_for",
]

T = TypeVar("T")

_READY = re.compile(r"ready on (?P<endpoints>\S+://\S+?:\d+(?:, \S+://\S+?:\d+)*)")
_ENDPOINT_SPEC = re.compile(r"([^:,\s]+)://([^,\s]*):(\d+)")
_ENDPOINT = re.compile(r"(?P<name>[^:,\s]+)://(?P<host>\S+?):(?P<port>\d+)")
_METRICS_URL = re.compile(r"metrics at (?P<url>http://\S+?/metrics)")
_REGISTRY_URL = re.compile(r"schema registry at (?P<url>https?://[^\s,()]+)")
_FAULT_URL = re.compile(r"fault control at (?P<url>http://[^\s,()]+)")
#: first starts on ports chosen here, each attempt on new ones (see BrokerProcess.start)
_PORT_ATTEMPTS = 5


class BrokerProcess:
    """``odradek serve`` as a child process on 127.0.0.1, for tests and benchmarks: ``start()`` waits for its
    ready line (``endpoints``, ``metrics_url``, ``registry_url`` come from it), ``stop()`` sends SIGTERM,
    ``kill()`` SIGKILL; a restart keeps the ports.  ``overrides`` are broker settings (``{"num.partitions":
    3}``); stderr lines are kept in ``stderr_lines``."""

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
        test_mode: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir)
        #: ``odradek serve --test-mode``: fault scripting, driven through :attr:`faults`
        self.test_mode = test_mode
        #: the fault control endpoint, from the ready line (test mode only)
        self.fault_url: str | None = None
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
        #: the broker's schema registry, from the ready line (None: off)
        self.registry_url: str | None = None
        self.ready_seconds = 0.0
        self.stderr_lines: list[str] = []
        self._stderr_thread: threading.Thread | None = None
        #: listener name -> port chosen for the first start (ports given as 0)
        self._chosen: dict[str, int] = {}

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the broker's PLAINTEXT listener (its first listener without one), for
        ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """``host:port`` of one of the broker's listeners (by name)."""
        host, port = self.endpoints[listener.upper()]
        return f"{host}:{port}"

    @property
    def pid(self) -> int:
        """The broker process's id (it must have been started)."""
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        """The ``python -m odradek serve ...`` command line the next start runs."""
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
        if self.test_mode:
            cmd.append("--test-mode")
        return cmd + self.extra_args

    @property
    def faults(self) -> Faults:
        """Fault scripting of this broker (started with ``test_mode=True``)."""
        if self.fault_url is None:
            raise RuntimeError("this broker has no fault control: start it with BrokerProcess(..., test_mode=True)")
        return Faults(HttpFaultControl(self.fault_url))

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
                registry = _REGISTRY_URL.search(line)
                self.registry_url = registry.group("url") if registry else None
                control = _FAULT_URL.search(line)
                self.fault_url = control.group("url") if control else None
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
        """Whether the process has been started and has not exited."""
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

    def __enter__(self) -> BrokerProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class WireClient(BrokerConnection):
    """One blocking connection speaking raw requests; ``send``/``receive`` pipeline them (answers
    in order).  The transport's blocking connection without its handshake (no ApiVersions, no
    SASL: the test sends what it wants, at the versions it names); ``conn`` is its codec, ``sock``
    its socket, for tests that frame or write bytes themselves."""

    def __init__(self, host: str, port: int, client_id: str = "wire-test", timeout: float = 10.0) -> None:
        super().__init__(host, port, client_id=client_id, timeout=timeout, handshake=False)
        self.in_flight = 0

    @property
    def conn(self) -> ClientConnection:
        """The sans-I/O client codec (``odradek.protocol.ClientConnection``) this connection frames requests
        with."""
        return self.codec

    def send(self, message: Message, version: int | None = None) -> int:
        """Write a request without waiting for its answer, at ``version`` (default: what
        :meth:`version_for` picks); returns its correlation id.  Answers come back in order from
        :meth:`receive`."""
        cid = super().send(message, version)
        self.in_flight += 1
        return cid

    def receive(self, timeout: float | None = None) -> Any:
        """The answer to the oldest request in flight."""
        response = super().receive(timeout)
        self.in_flight -= 1
        return response

    def request(self, message: Message, version: int | None = None, timeout: float | None = None) -> Any:
        """Send one request and wait for its answer (nothing else may be in flight)."""
        assert self.in_flight == 0, f"{self.in_flight} requests still in flight"
        return super().request(message, version, timeout)


# -- the in-memory transport -----------------------------------------------------------------------
#
# MockCluster puts scripted brokers under the real client stack: each broker is an endpoint of the
# transport (odradek.transport.add_endpoint) at an address that exists nowhere else, and every
# connection to it is a pair of in-memory pipes into a protocol.ServerConnection.  The brokers
# answer ApiVersions, Metadata, FindCoordinator, Produce, Fetch, ListOffsets and InitProducerId from
# a small in-memory model (topics, partition leaders, logs of record batches); a test scripts any
# other answer, an error, a delay, silence or a dropped connection per API with MockBroker.respond.


class _Action:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: an answer that never comes: the broker holds the request (and, answering in order, every
#: later one on that connection) until the client gives up
NO_ANSWER: Final = _Action("NO_ANSWER")
#: the broker closes the connection instead of answering
DISCONNECT: Final = _Action("DISCONNECT")


@dataclass(frozen=True, slots=True)
class Delayed:
    """An answer sent ``seconds`` after the request arrived (answers stay in request order)."""

    response: Any
    seconds: float


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """A request as a mock broker received it."""

    api_key: int
    version: int
    message: Any
    client_id: str | None

    @property
    def name(self) -> str:
        """The request's API name (``Fetch``, ``Metadata``, ...)."""
        return str(self.message.NAME)


#: a scripted answer: ``handler(request, version)`` returns a response message, :data:`NO_ANSWER`,
#: :data:`DISCONNECT` or :class:`Delayed`; ``None`` falls through to the model's answer
Handler = Callable[[Any, int], Any]


@dataclass(slots=True)
class MockPartition:
    """A partition of the mock model: its leader and replicas (node ids), leader epoch, and log (record
    batches by base offset, log start and end offsets); change it under the cluster's ``lock``."""

    index: int
    leader: int
    replicas: list[int]
    leader_epoch: int = 0
    #: record batches with their offsets assigned, in offset order: (base offset, bytes)
    batches: list[tuple[int, bytes]] = field(default_factory=list)
    log_start: int = 0
    log_end: int = 0


@dataclass(slots=True)
class MockTopic:
    """A topic of the mock model, as :meth:`MockCluster.create_topic` returns it: name, id and partitions."""

    name: str
    topic_id: uuid.UUID
    partitions: list[MockPartition]


class MockBroker:
    """One broker of a :class:`MockCluster`, at ``host:port``.

    ``respond(RequestClass, answer, times=1)`` scripts the next ``times`` answers to that API
    (``times=None``: every one): ``answer`` is a response message, :data:`NO_ANSWER`,
    :data:`DISCONNECT`, :class:`Delayed`, or a :data:`Handler`.  ``requests`` lists what arrived;
    ``up = False`` refuses new connections, ``refusing = n`` the next ``n`` of them (a broker
    that comes up after a while, without waiting on the clock); :meth:`drop_connections` closes
    the open ones (a restart).  ``connections_made`` and ``connections_refused`` count attempts."""

    def __init__(self, cluster: MockCluster, node_id: int, host: str, port: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.host, self.port = host, port
        self.requests: list[ReceivedRequest] = []
        self.up = True
        self.refusing = 0
        #: api key -> (min, max) versions offered (the codec's by default)
        self.api_versions: dict[int, tuple[int, int]] = {}
        for key in ApiKey:
            try:
                self.api_versions[int(key)] = tuple(request_class(key).VALID_VERSIONS)  # type: ignore[assignment]
            except (KeyError, ValueError):
                continue
        self.connections_made = 0
        self.connections_refused = 0
        self._scripts: dict[int, deque[list[Any]]] = {}
        self._pipes: list[_MockPipe] = []

    @property
    def bootstrap(self) -> str:
        """``host:port`` of this broker, for a client's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    def respond(self, request_cls: type[Message], answer: Any, *, times: int | None = 1) -> None:
        """Script the next ``times`` answers (None: every one) to ``request_cls``'s API: a response message,
        :data:`NO_ANSWER`, :data:`DISCONNECT`, :class:`Delayed` or a :data:`Handler`; scripts queue up in
        order."""
        with self.cluster.lock:
            self._scripts.setdefault(request_cls.API_KEY, deque()).append([answer, times])

    def received(self, request_cls: type[Message]) -> list[Any]:
        """The requests of ``request_cls``'s API received so far."""
        with self.cluster.lock:
            return [r.message for r in self.requests if r.api_key == request_cls.API_KEY]

    def drop_connections(self) -> None:
        """Close every open connection (as a broker that restarts)."""
        with self.cluster.lock:
            pipes, self._pipes = self._pipes, []
        for pipe in pipes:
            pipe.peer_close()

    # -- the transport's Endpoint --------------------------------------------------------------
    def connect(self, protocol: asyncio.BufferedProtocol) -> None:
        """The transport's asyncio endpoint hook: attach a new in-memory connection to ``protocol``;
        ConnectionRefusedError while the broker is down or refusing."""
        pipe = self._new_pipe(_AsyncPipe)
        assert isinstance(pipe, _AsyncPipe)
        pipe.attach(protocol, asyncio.get_running_loop())

    def connect_blocking(self) -> _BlockingPipe:
        """The transport's blocking endpoint hook: a new in-memory connection as a socket-like pipe;
        ConnectionRefusedError while the broker is down or refusing."""
        pipe = self._new_pipe(_BlockingPipe)
        assert isinstance(pipe, _BlockingPipe)
        return pipe

    def _new_pipe(self, kind: type[_MockPipe]) -> _MockPipe:
        with self.cluster.lock:
            if not self.up or self.refusing > 0:
                self.refusing = max(self.refusing - 1, 0)
                self.connections_refused += 1
                raise ConnectionRefusedError(111, f"mock broker {self.node_id} is down")
            pipe = kind(self)
            self._pipes.append(pipe)
            self.connections_made += 1
            return pipe

    def _closed(self, pipe: _MockPipe) -> None:
        with self.cluster.lock:
            if pipe in self._pipes:
                self._pipes.remove(pipe)

    # -- answers -------------------------------------------------------------------------------
    def _answer(self, header: RequestHeader, request: Any) -> Any:
        """The answer to one request (under the cluster's lock)."""
        self.requests.append(ReceivedRequest(header.api_key, header.api_version, request, header.client_id))
        scripts = self._scripts.get(header.api_key)
        while scripts:
            slot = scripts[0]
            answer, times = slot
            if times is not None:
                slot[1] = times - 1
                if slot[1] <= 0:
                    scripts.popleft()
            if callable(answer) and not isinstance(answer, Message):
                answer = answer(request, header.api_version)
                if answer is None:
                    break  # the handler let the model answer
            return answer
        return self.cluster._model_answer(self, header.api_version, request)


class _MockPipe:
    """The broker's side of one in-memory connection: a ServerConnection fed by the client's writes."""

    def __init__(self, broker: MockBroker) -> None:
        self.broker = broker
        self.codec = ServerConnection()
        self.broken = False

    def _receive(self, data: bytes) -> list[tuple[float, bytes | None]]:
        """What the broker sends back for ``data``: ``(delay, bytes)``, ``(delay, None)`` to close."""
        out: list[tuple[float, bytes | None]] = []
        if self.broken:
            return out
        with self.broker.cluster.lock:
            self.codec.receive_data(bytes(data))
            while True:
                ev = self.codec.next_event()
                if ev is NEED_DATA:
                    return out
                if not isinstance(ev, RequestReceived):
                    self.broken = True
                    out.append((0.0, None))
                    return out
                delay = 0.0
                try:
                    answer = self.broker._answer(ev.header, ev.message)
                    if isinstance(answer, Delayed):
                        answer, delay = answer.response, answer.seconds
                    data = self._encode(ev.header, answer)
                except Exception as exc:  # no answer in the model, or one that does not encode
                    self.broker.cluster.errors.append(f"{type(ev.message).__name__}: {exc!r}")
                    answer, data = DISCONNECT, b""
                if answer is DISCONNECT:
                    self.broken = True
                    out.append((delay, None))
                    return out
                if data:
                    out.append((delay, data))

    def _encode(self, header: RequestHeader, answer: Any) -> bytes:
        if answer is DISCONNECT or answer is NO_ANSWER:
            return b""
        if answer is _NO_RESPONSE:
            return self.codec.no_response(header)
        if isinstance(answer, ApiVersionsResponse) and answer.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # KIP-511: a version the broker does not know is answered with a v0 body
            v0 = RequestHeader(
                api_key=header.api_key, api_version=0, correlation_id=header.correlation_id, client_id=header.client_id
            )
            return self.codec.send_response(v0, answer)
        return self.codec.send_response(header, answer)

    def peer_close(self) -> None:
        raise NotImplementedError


class _AsyncPipe(_MockPipe):
    """The client's asyncio transport of an in-memory connection."""

    def __init__(self, broker: MockBroker) -> None:
        super().__init__(broker)
        self.protocol: asyncio.BufferedProtocol | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._outgoing: deque[tuple[float, bytes | None]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def attach(self, protocol: asyncio.BufferedProtocol, loop: asyncio.AbstractEventLoop) -> None:
        self.protocol, self.loop = protocol, loop
        protocol.connection_made(self)  # type: ignore[arg-type]

    # asyncio.Transport, as far as the client uses it
    def write(self, data: bytes) -> None:
        if self._closing:
            return
        assert self.loop is not None
        now = self.loop.time()
        last = self._outgoing[-1][0] if self._outgoing else now
        for delay, chunk in self._receive(data):
            last = max(last, now + delay)
            self._outgoing.append((last, chunk))
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None or not self._outgoing or self.loop is None:
            return
        self._timer = self.loop.call_at(self._outgoing[0][0], self._pump)

    def _pump(self) -> None:
        self._timer = None
        assert self.loop is not None
        while self._outgoing and self._outgoing[0][0] <= self.loop.time():
            _at, chunk = self._outgoing.popleft()
            if self._closing:
                return
            if chunk is None:
                self._lost()
                return
            self._deliver(chunk)
        self._schedule()

    def _deliver(self, chunk: bytes) -> None:
        protocol = self.protocol
        assert protocol is not None
        view = memoryview(chunk)
        while view and not self._closing:
            buf = memoryview(protocol.get_buffer(len(view)))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            view = view[n:]
            protocol.buffer_updated(n)

    def _lost(self) -> None:
        if not self._closing:
            self._closing = True
            self.broker._closed(self)
            if self.protocol is not None:
                self.protocol.connection_lost(None)

    def peer_close(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._lost)

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self.broker._closed(self)
            if self.loop is not None and self.protocol is not None:
                self.loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class _BlockingPipe(_MockPipe):
    """The client's socket of an in-memory blocking connection (a BlockingStream)."""

    def __init__(self, broker: MockBroker) -> None:
        super().__init__(broker)
        self._cond = threading.Condition()
        self._incoming: deque[tuple[float, bytes | None]] = deque()
        self._pending = memoryview(b"")
        self._timeout: float | None = None
        self._closed = False
        self._eof = False

    def settimeout(self, value: float | None) -> None:
        self._timeout = value

    def sendall(self, data: bytes) -> None:
        if self._closed:
            raise OSError(9, "Bad file descriptor")
        if self._eof or self.broken:
            raise BrokenPipeError(32, "Broken pipe")
        now = time.monotonic()
        with self._cond:
            last = self._incoming[-1][0] if self._incoming else now
            for delay, chunk in self._receive(data):
                last = max(last, now + delay)
                self._incoming.append((last, chunk))
            self._cond.notify_all()

    def recv_into(self, buffer: memoryview) -> int:
        if self._closed:
            raise OSError(9, "Bad file descriptor")
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        with self._cond:
            while not self._pending:
                if self._eof:
                    return 0
                now = time.monotonic()
                if self._incoming and self._incoming[0][0] <= now:
                    _at, chunk = self._incoming.popleft()
                    if chunk is None:
                        self._eof = True
                        self.broker._closed(self)
                        return 0
                    self._pending = memoryview(chunk)
                    break
                wake = self._incoming[0][0] if self._incoming else None
                if deadline is not None:
                    if now >= deadline:
                        raise TimeoutError("timed out")
                    wake = deadline if wake is None else min(wake, deadline)
                self._cond.wait(None if wake is None else max(wake - now, 0.0))
            n = min(len(buffer), len(self._pending))
            buffer[:n] = self._pending[:n]
            self._pending = self._pending[n:]
            return n

    def peer_close(self) -> None:
        with self._cond:
            self._incoming.append((time.monotonic(), None))
            self._cond.notify_all()

    def close(self) -> None:
        self._closed = True
        self.broker._closed(self)


#: the model's answer to an ``acks=0`` produce: none
_NO_RESPONSE: Final = _Action("NO_RESPONSE")


class MockCluster:
    """Scripted brokers for client tests without sockets (see the comment above :data:`NO_ANSWER`)::

        with MockCluster(brokers=2) as cluster:
            cluster.create_topic("events", partitions=2)
            cluster.broker(1).respond(FetchRequest, DISCONNECT)
            with SimpleConsumer(bootstrap_servers=cluster.bootstrap) as c:
                ...

    ``coordinators`` maps ``(key_type, key)`` to the node answering FindCoordinator (default:
    the first broker); ``auto_create`` lets Metadata create topics it is asked about."""

    def __init__(self, brokers: int = 1, *, cluster_id: str = "mock-cluster", auto_create: bool = False) -> None:
        self.id = uuid.uuid4().hex[:8]
        self.cluster_id = cluster_id
        self.auto_create = auto_create
        self.lock = threading.RLock()
        self.brokers: dict[int, MockBroker] = {
            n: MockBroker(self, n, f"mock-{self.id}-{n}.invalid", 9092) for n in range(1, brokers + 1)
        }
        self.controller_id = 1
        self.topics: dict[str, MockTopic] = {}
        self.coordinators: dict[tuple[int, str], int] = {}
        #: answers the model could not give (the connection was closed instead)
        self.errors: list[str] = []
        self._next_producer_id = 1000
        self._registered = False

    @property
    def bootstrap(self) -> str:
        """Every broker's ``host:port``, comma-separated, for ``bootstrap.servers``."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def broker(self, node_id: int) -> MockBroker:
        """The broker with id ``node_id`` (1 to ``brokers``); KeyError for another."""
        return self.brokers[node_id]

    def create_topic(self, name: str, partitions: int = 1, *, leaders: list[int] | None = None) -> MockTopic:
        """A topic whose partitions are led round-robin by the brokers (or by ``leaders``)."""
        ids = sorted(self.brokers)
        with self.lock:
            topic = MockTopic(name, uuid.uuid4(), [
                MockPartition(p, leaders[p] if leaders else ids[p % len(ids)], list(ids)) for p in range(partitions)
            ])
            self.topics[name] = topic
            return topic

    def set_leader(self, topic: str, partition: int, node_id: int) -> None:
        """Move a partition's leadership (its leader epoch goes up)."""
        with self.lock:
            p = self.topics[topic].partitions[partition]
            p.leader = node_id
            p.leader_epoch += 1

    def append(self, topic: str, partition: int, batches: bytes) -> int:
        """Append record batches (v2) to a partition's log, as a produce would; their base offset."""
        with self.lock:
            return _append(self.topics[topic].partitions[partition], batches)

    def __enter__(self) -> MockCluster:
        if not self._registered:
            for b in self.brokers.values():
                add_endpoint(b.host, b.port, b)
            self._registered = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close()
        if exc_type is None and self.errors:
            raise AssertionError(f"the mock brokers could not answer: {self.errors}")

    def close(self) -> None:
        """Remove the brokers from the transport and drop their connections (``with`` does it on exit)."""
        if self._registered:
            for b in self.brokers.values():
                remove_endpoint(b.host, b.port)
                b.drop_connections()
            self._registered = False

    # -- the model ------------------------------------------------------------------------------
    def _model_answer(self, broker: MockBroker, version: int, request: Any) -> Any:
        handler = _MODEL.get(type(request).API_KEY)
        if handler is None:
            raise NotImplementedError(f"mock broker {broker.node_id} has no answer to {type(request).__name__}: script one")
        return handler(self, broker, version, request)


def _append(p: MockPartition, batches: bytes) -> int:
    base = p.log_end
    for h in iter_batch_headers(batches, strict=True):
        data = bytearray(batches[h.position : h.end])
        delta = h.last_offset - h.base_offset
        struct.pack_into(">q", data, 0, p.log_end)
        p.batches.append((p.log_end, bytes(data)))
        p.log_end += delta + 1
    return base


def _api_versions(cluster: MockCluster, broker: MockBroker, version: int, request: Any) -> Any:
    R = ApiVersionsResponse
    _lo, hi = broker.api_versions.get(ApiKey.API_VERSIONS, (0, 0))
    keys = [R.ApiVersion(api_key=k, min_version=a, max_version=b) for k, (a, b) in sorted(broker.api_versions.items())]
    if version > hi:
        return R(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys)
    return R(error_code=0, api_keys=keys)


def _metadata(cluster: MockCluster, broker: MockBroker, version: int, request: Any) -> Any:
    R = MetadataResponse
    names = None if request.topics is None else [t.name for t in request.topics]
    if names == [] and version == 0:
        names = None
    topics = []
    for name in sorted(cluster.topics) if names is None else names:
        t = cluster.topics.get(name)
        if t is None and cluster.auto_create and request.allow_auto_topic_creation:
            t = cluster.create_topic(name)
        if t is None:
            topics.append(R.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
            continue
        topics.append(R.MetadataResponseTopic(error_code=0, name=t.name, topic_id=t.topic_id, partitions=[
            R.MetadataResponsePartition(
                error_code=0 if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=p.index,
                leader_id=p.leader, leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas), isr_nodes=list(p.replicas),
            ) for p in t.partitions
        ]))
    return R(
        brokers=[R.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port) for b in cluster.brokers.values()],
        cluster_id=cluster.cluster_id, controller_id=cluster.controller_id, topics=topics,
    )


def _find_coordinator(cluster: MockCluster, broker: MockBroker, version: int, request: Any) -> Any:
    R = FindCoordinatorResponse
    keys = list(request.coordinator_keys) if version >= 4 else [request.key]
    found = []
    for key in keys:
        node = cluster.coordinators.get((request.key_type, key), min(cluster.brokers))
        b = cluster.brokers[node]
        found.append(R.Coordinator(key=key, node_id=b.node_id, host=b.host, port=b.port, error_code=0))
    if version >= 4:
        return R(coordinators=found)
    c = found[0]
    return R(error_code=0, node_id=c.node_id, host=c.host, port=c.port)


def _partition(cluster: MockCluster, broker: MockBroker, topic: str | None, index: int) -> MockPartition | ErrorCode:
    t = cluster.topics.get(topic or "")
    if t is None or not 0 <= index < len(t.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    p = t.partitions[index]
    if p.leader != broker.node_id:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return p


def _produce(cluster: MockCluster, broker: MockBroker, version: int, request: Any) -> Any:
    R = ProduceResponse
    topics = []
    for t in request.topic_data:
        parts = []
        for pd in t.partition_data:
            p = _partition(cluster, broker, t.name, pd.index)
            if isinstance(p, ErrorCode):
                parts.append(R.PartitionProduceResponse(index=pd.index, error_code=p, base_offset=-1))
                continue
            base = _append(p, bytes(pd.records or b""))
            parts.append(R.PartitionProduceResponse(index=pd.index, error_code=0, base_offset=base, log_start_offset=p.log_start))
        topics.append(R.TopicProduceResponse(name=t.name, partition_responses=parts))
    if request.acks == 0:
        return _NO_RESPONSE
    return R(responses=topics)


def _fetch(cluster: MockCluster, broker: MockBroker, version: int, request: Any) -> Any:
    R = FetchResponse
    by_id = {t.topic_id: t.name for t in cluster.topics.values()}
    topics = []
    for ft in request.topics:
        name = ft.topic if version < 13 else by_id.get(ft.topic_id)
        parts = []
        for fp in ft.partitions:
            p = _partition(cluster, broker, name, fp.partition)
            if isinstance(p, ErrorCode):
                code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 and name is None else p
                parts.append(R.PartitionData(partition_index=fp.partition, error_code=code, high_watermark=-1))
                continue
            if not p.log_start <= fp.fetch_offset <= p.log_end:
                parts.append(R.PartitionData(
                    partition_index=fp.partition, error_code=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=p.log_end,
                    log_start_offset=p.log_start,
                ))
                continue
            data = bytearray()
            for base, batch in p.batches:
                last = base + _last_delta(batch)
                if last < fp.fetch_offset:
                    continue
                if data and len(data) + len(batch) > fp.partition_max_bytes:
                    break
                data += batch
            parts.append(R.PartitionData(
                partition_index=fp.partition, error_code=0, high_watermark=p.log_end, last_stable_offset=p.log_end,
                log_start_offset=p.log_start, records=bytes(data),
            ))
        topics.append(R.FetchableTopicResponse(topic=name or "", topic_id=ft.topic_id, partitions=parts))
    return R(error_code=0, responses=topics)


def _last_delta(batch: bytes) -> int:
    return int(struct.unpack_from(">i", batch, 23)[0])


def _list_offsets(cluster: MockCluster, broker: MockBroker, version: int, request: Any) -> Any:
    R = ListOffsetsResponse
    topics = []
    for t in request.topics:
        parts = []
        for lp in t.partitions:
            p = _partition(cluster, broker, t.name, lp.partition_index)
            if isinstance(p, ErrorCode):
                parts.append(R.ListOffsetsPartitionResponse(partition_index=lp.partition_index, error_code=p))
                continue
            offset = p.log_start if lp.timestamp == -2 else p.log_end
            if lp.timestamp >= 0:
                offset = next((b for b, batch in p.batches if _max_timestamp(batch) >= lp.timestamp), -1)
            parts.append(R.ListOffsetsPartitionResponse(
                partition_index=lp.partition_index, error_code=0, old_style_offsets=[offset] if version == 0 else [],
                timestamp=-1, offset=offset, leader_epoch=p.leader_epoch,
            ))
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(topics=topics)


def _max_timestamp(batch: bytes) -> int:
    return int(struct.unpack_from(">q", batch, 35)[0])


def _init_producer_id(cluster: MockCluster, broker: MockBroker, version: int, request: Any) -> Any:
    cluster._next_producer_id += 1
    return InitProducerIdResponse(error_code=0, producer_id=cluster._next_producer_id, producer_epoch=0)


_MODEL: dict[int, Callable[[MockCluster, MockBroker, int, Any], Any]] = {
    ApiKey.API_VERSIONS: _api_versions,
    ApiKey.METADATA: _metadata,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
}


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
    *log_dirs: Path, overrides: Mapping[str, object] | None = None, timers: Scheduler | None = None,
    test_mode: bool = False,
) -> AsyncIterator[Broker]:
    """A broker started in this process, on the running event loop, listening on 127.0.0.1 on an
    ephemeral port (``broker.bound``) with these log dirs and ``overrides`` of its settings, on
    ``timers`` (a :class:`FakeScheduler`: fake time; None: real time); stopped on exit.
    ``test_mode``: with fault scripting (``broker.faults``, a
    :class:`~odradek.broker.faults.FaultInjector`, and its control endpoint)."""
    from odradek.broker.app import Broker
    from odradek.config import BrokerConfig

    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": ",".join(map(str, log_dirs)), **(overrides or {})}
    broker = Broker(BrokerConfig.load(None, [], settings, env={}), timers=timers, test_mode=test_mode)
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
            state = _proc_stat(pid, int(tid))[0]
        except OSError:  # the thread ended
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def _proc_stat(pid: int, tid: int) -> list[str]:
    """The fields of a thread's ``/proc/PID/task/TID/stat`` after the command name (which may hold
    spaces and parentheses): ``[0]`` is the state.  OSError when the thread is gone."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


# -- fault scripting: the handle on a test broker ----------------------------------------------------


class FaultControlError(OdradekError, RuntimeError):
    """The broker refused a fault command (what was wrong is in the message)."""


class HttpFaultControl:
    """Sends fault commands to a test broker's loopback control endpoint (JSON over HTTP)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout

    def __call__(self, command: Mapping[str, Any]) -> dict[str, Any]:
        import json
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            self.url, data=json.dumps(command).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                result: dict[str, Any] = json.loads(answer.read())
                return result
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise FaultControlError(f"{command.get('op')}: {message}") from None


class Fault:
    """One armed fault rule: ``clear()`` it, or use it as a context manager (cleared on exit)."""

    def __init__(self, faults: Faults, rule: Mapping[str, Any]) -> None:
        self._faults = faults
        self.id: int = int(rule["id"])
        self.rule = dict(rule)

    def clear(self) -> None:
        """Clear this fault (requests it holds go on)."""
        self._faults._send({"op": "clear", "id": self.id})

    @property
    def hits(self) -> int:
        """How many requests this rule applied to so far."""
        return sum(1 for i in self._faults.injected if i["rule"] == self.id)

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def __repr__(self) -> str:
        return f"<Fault {self.rule}>"


class Faults:
    """Fault scripting of one test broker (``odradek_broker.faults``): arm faults with a small
    fluent API, see what the broker received, clear.  Each method that arms a rule returns a
    :class:`Fault` (a context manager that clears it)::

        with odradek_broker.faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=3, topic="orders"):
            producer.produce("orders", b"x"); producer.flush(10)
        assert odradek_broker.faults.received("Produce") >= 4

    APIs are Kafka's names (``Produce``, ``Fetch``, ``OffsetCommit``, ``FindCoordinator``...),
    errors Kafka's error names (``NOT_LEADER_OR_FOLLOWER``) or codes.  Faults apply at the
    broker's request-dispatch boundary: an injected error runs no handler, so it writes nothing."""

    def __init__(self, control: Callable[[Mapping[str, Any]], dict[str, Any]]) -> None:
        self._control = control
        #: every command sent, with its answer (the failure report lists the armed ones)
        self.history: list[dict[str, Any]] = []

    def _send(self, command: Mapping[str, Any]) -> dict[str, Any]:
        answer = self._control(command)
        self.history.append({"command": dict(command), "answer": answer})
        return answer

    # -- arming ----------------------------------------------------------------------------------
    def arm(self, *specs: Mapping[str, Any]) -> list[Fault]:
        """Arm rules given as data (``{"kind": "error", "api": "Produce", "error": 6, "times": 2}``;
        kinds: error, delay, hold, drop, offline); all or none."""
        answer = self._send({"op": "arm", "faults": [dict(s) for s in specs]})
        return [Fault(self, rule) for rule in answer["armed"]]

    def _one(self, spec: dict[str, Any]) -> Fault:
        return self.arm({k: v for k, v in spec.items() if v is not None})[0]

    def fail(
        self, api: str | int, error: str | int, *, times: int | None = 1, topic: str | None = None,
        partition: int | None = None, client_id: str | None = None,
    ) -> Fault:
        """The next ``times`` requests of ``api`` (None: all, until cleared), optionally only those
        naming ``topic`` / ``partition`` or from ``client_id``, are answered with ``error``."""
        return self._one({"kind": "error", "api": api, "error": error, "times": times, "topic": topic,
                          "partition": partition, "client_id": client_id})

    def delay(
        self, api: str | int | None, seconds: float, *, times: int | None = None, topic: str | None = None,
        partition: int | None = None, client_id: str | None = None,
    ) -> Fault:
        """Answer requests of ``api`` (None: every API: the whole broker's round trip) ``seconds`` later."""
        return self._one({"kind": "delay", "api": api, "delay_ms": round(seconds * 1000), "times": times,
                          "topic": topic, "partition": partition, "client_id": client_id})

    def pause(self) -> Fault:
        """The broker accepts connections and requests but answers nothing until :meth:`resume`.

        Each connection's requests are handled one at a time, as Kafka does, so a held request
        also holds the requests sent behind it on the same connection (a client's background
        requests, such as librdkafka's telemetry, can be the first one held)."""
        return self._one({"kind": "hold"})

    def resume(self) -> None:
        """Answer again: every held request (paused broker, frozen clients) goes on."""
        self._send({"op": "clear", "kind": "hold"})

    def freeze(self, client_id: str, api: str | int | None = None) -> Fault:
        """Hold every request of ``client_id`` (of ``api`` only, if given) until cleared: its
        connections stay open, its answers never come."""
        return self._one({"kind": "hold", "client_id": client_id, "api": api})

    def drop_next(self, api: str | int | None = None, *, client_id: str | None = None, times: int | None = 1) -> Fault:
        """Close the connection that sends the next ``times`` requests (of ``api``, of ``client_id``)."""
        return self._one({"kind": "drop", "api": api, "client_id": client_id, "times": times})

    def offline(self, topic: str, partition: int) -> Fault:
        """Take a partition offline: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and
        DeleteRecords naming it get KAFKA_STORAGE_ERROR (as for a partition in a failed log dir)."""
        return self._one({"kind": "offline", "topic": topic, "partition": partition})

    # -- actions ---------------------------------------------------------------------------------
    def drop(self, client_id: str | None = None) -> int:
        """Close the open connections of ``client_id`` (every client's: None) now; the count."""
        return int(self._send({"op": "drop", "client_id": client_id})["closed"])

    def fence(self, transactional_id: str) -> None:
        """Fence the producer of ``transactional_id`` as a new instance of it would: its epoch is
        bumped and an open transaction of it aborted; its next request gets Kafka's fencing error."""
        self._send({"op": "fence", "transactional_id": transactional_id})

    def expire_session(self, group_id: str, member_id: str | None = None) -> int:
        """Expire the session of a member of ``group_id`` (every member: None) as when its session
        timeout passes: it is removed and the group rebalances.  The count expired."""
        return int(self._send({"op": "expire", "group_id": group_id, "member_id": member_id})["expired"])

    def clear(self, fault: Fault | int | None = None) -> None:
        """Clear one fault (or its id), or every fault; held requests go on."""
        command: dict[str, Any] = {"op": "clear"}
        if fault is not None:
            command["id"] = fault.id if isinstance(fault, Fault) else int(fault)
        self._send(command)

    def reset(self) -> None:
        """Clear every fault and forget what the broker received and injected (between tests)."""
        self._send({"op": "reset"})

    # -- what the broker saw ---------------------------------------------------------------------
    @property
    def rules(self) -> list[dict[str, Any]]:
        """The faults armed now, as the broker describes them: one dict per rule with its
        ``id``, ``kind`` and ``hits`` (requests it applied to so far), and the ``api``,
        ``error``, ``times``, ``topic``, ``partition``, ``client_id`` and ``delay_ms`` it was
        armed with, where set."""
        return list(self._send({"op": "state"})["rules"])

    @property
    def injected(self) -> list[dict[str, Any]]:
        """Every fault injected so far: rule, kind, API, client id, correlation id, error."""
        return list(self._send({"op": "state"})["injected"])

    def received(self, api: str | int | None = None) -> Any:
        """How many requests of ``api`` the broker received (all APIs: a dict of counts)."""
        per_api: dict[str, int] = self._send({"op": "received"})["per_api"]
        if api is None:
            return per_api
        from odradek.cluster.faults import api_key, api_name

        return per_api.get(api_name(api_key(api)), 0)

    def produced(self, topic: str | None = None, partition: int | None = None) -> list[dict[str, Any]]:
        """The batches Produce requests carried (topic, partition, producer_id, producer_epoch,
        base_sequence, record_count, transactional), in arrival order, retries included."""
        return [
            b for b in self._send({"op": "received"})["batches"]
            if (topic is None or b["topic"] == topic) and (partition is None or b["partition"] == partition)
        ]

    def commits(self, group: str | None = None) -> list[dict[str, Any]]:
        """The offsets committed (OffsetCommit and TxnOffsetCommit): group, topic, partition, offset."""
        return [c for c in self._send({"op": "received"})["commits"] if group is None or c["group"] == group]

    def report(self) -> str:
        """What was armed and injected, for a test's failure report."""
        lines = []
        for entry in self.history:
            if entry["command"].get("op") == "arm":
                lines += [f"armed: {r}" for r in entry["answer"].get("armed", [])]
            elif entry["command"].get("op") not in ("state", "received"):
                lines.append(f"{entry['command']}")
        try:
            state = self._control({"op": "state"})
        except Exception as exc:  # the broker is gone: what the test sent is still worth reporting
            lines.append(f"(the broker's state is unavailable: {exc})")
        else:
            lines += [f"still armed: {r}" for r in state["rules"]]
            lines += [f"injected: {i}" for i in state["injected"][-200:]]
        return "\n".join(lines)
