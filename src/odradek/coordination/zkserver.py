"""Run Debian's Apache ZooKeeper (package ``zookeeper``, 3.8.x) as a child process, without systemd.

A Python port of ``start-zookeeper.sh`` for tests, benchmarks and ``odradek cluster up``::

    with ZooKeeperServer(tmp_path / "zk") as zk:          # ephemeral port, standalone mode
        subprocess.run(["odradek", "serve", "--zookeeper", zk.connect, ...])

The instance directory holds ``zoo.cfg``, ``log4j.properties``, ``data/`` (snapshots and the
transaction log), ``logs/`` (``zookeeper.log`` and the JVM's ``stdout.log``) and ``zk.pid``. The
same instance can be stopped and started again: it keeps its port and its data, so persistent
znodes survive a restart. (Sessions survive one too: ZooKeeper reloads them and restarts their
timeouts, so a client that reconnects within its session timeout keeps its ephemeral znodes.)

Only the standard library is used (``subprocess``, ``socket``); nothing here uses asyncio.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from odradek.errors import OdradekError

__all__ = [
    "DEFAULT_JAR",
    "NOT_INSTALLED",
    "ZooKeeperError",
    "ZooKeeperServer",
    "four_letter",
    "process_alive",
    "restartable_port",
    "zookeeper_available",
]

DEFAULT_JAR = "/usr/share/java/zookeeper.jar"
# logging backend for ZooKeeper's slf4j: without these two it falls back to a no-op logger
_LOG_JARS = ("/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")
NOT_INSTALLED = "ZooKeeper is not installed: run `apt-get install -y zookeeper` (Debian package)"
_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# ZooKeeper's Netty connection factory, with the two libnetty-java jars it needs beyond the zookeeper.jar
# manifest's Class-Path. Not the default NIO factory: ZooKeeper 3.8's NIO factory accepts connections before
# its database is loaded, and closing one of those throws a NullPointerException (ZOOKEEPER-5051) that leaves
# the socket open, so a client reconnecting to a restarting server hangs until its handshake times out,
# which for kazoo and the Java client is the session timeout: the session expires although the client came
# back in time. The Netty factory closes those connections cleanly.
_NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
_NETTY_JARS = ("/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar")
# one buffer arena each (a handful of connections): 88 MB resident instead of 105 (NIO: 64)
_NETTY_FLAGS = (
    f"-Dzookeeper.serverCnxnFactory={_NETTY_FACTORY}",
    "-Dio.netty.allocator.numDirectArenas=1",
    "-Dio.netty.allocator.numHeapArenas=1",
)
_BIND_FAILURE_MARKERS = ("Address already in use", "BindException")
_BIND_RETRIES = 3

_LOG4J = """\
log4j.rootLogger=INFO, ROLLINGFILE
log4j.appender.ROLLINGFILE=org.apache.log4j.RollingFileAppender
log4j.appender.ROLLINGFILE.File=${zookeeper.log.dir}/zookeeper.log
log4j.appender.ROLLINGFILE.MaxFileSize=10MB
log4j.appender.ROLLINGFILE.MaxBackupIndex=2
log4j.appender.ROLLINGFILE.layout=org.apache.log4j.PatternLayout
log4j.appender.ROLLINGFILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class ZooKeeperError(OdradekError, RuntimeError):
    """ZooKeeper is not installed, did not start, or did not stop."""


def _jar() -> str:
    return os.environ.get("ZK_JAR", DEFAULT_JAR)


def _java() -> str | None:
    java = os.environ.get("JAVA", "java")
    return java if os.path.isabs(java) and os.access(java, os.X_OK) else shutil.which(java)


def zookeeper_available() -> str | None:
    """None when ZooKeeper can be run here (its jar and java exist), else a message saying how to install it."""
    jar = _jar()
    if not os.path.isfile(jar):
        return f"{NOT_INSTALLED}; {jar} not found"
    if _java() is None:
        return f"{NOT_INSTALLED}; no `java` on PATH"
    return None


def four_letter(host: str, port: int, cmd: str, timeout: float = 3.0) -> str:
    """Send a ZooKeeper four-letter word (``ruok``, ``srvr``, ``mntr``...); the reply, or "" on any failure."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(cmd.encode("ascii"))
            chunks: list[bytes] = []
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    # the state follows the parenthesised command name, which may itself contain spaces or ')'
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def restartable_port(host: str, attempts: int = 50) -> int:
    """A free port for a server that will be started again on it (a test's broker or ZooKeeper).

    Outside the kernel's ephemeral range (``net.ipv4.ip_local_port_range``): a port that bind(0)
    gave out can become the local port of any outgoing connection while its server is down, and
    the restart then fails with EADDRINUSE for as long as that connection lives (seen with
    several test workers at once).  Falls back to bind(0) when the range leaves no room; the
    caller retries on another port if someone binds this one first."""
    low, high = _ephemeral_range()
    spans = [(a, b) for a, b in ((10000, low - 1), (high + 1, 65535)) if b - a >= 1000]
    rng = random.Random()
    for _ in range(attempts if spans else 0):
        a, b = rng.choices(spans, weights=[b - a for a, b in spans])[0]
        port = rng.randint(a, b)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    return _free_port(host)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ZooKeeperServer:
    """One standalone ZooKeeper server, run as ``java ... QuorumPeerMain <data_dir>/zoo.cfg``.

    ``port=0`` picks a free port on the first start (:func:`restartable_port`, and another one if
    ZooKeeper then fails to bind it); later starts reuse that port.
    ``extra_config`` adds or overrides ``zoo.cfg`` settings, e.g. ``{"forceSync": "no"}`` for speed in
    tests that do not need durability, or ``{"tickTime": "500"}`` for shorter minimum session timeouts
    (ZooKeeper bounds a session timeout to 2..20 ticks).

    A server object made for an already-running instance (same ``data_dir``) can ``stop()`` it
    through ``zk.pid``; it signals only the QuorumPeerMain started with this directory's ``zoo.cfg``.
    """

    def __init__(
        self,
        data_dir: str | Path,
        port: int = 0,
        host: str = "127.0.0.1",
        heap: str = "256m",
        extra_config: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self.heap = heap
        self.extra_config = {str(k): str(v) for k, v in (extra_config or {}).items()}
        self._port = port
        self._auto_port = port == 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self.ready_seconds = 0.0
        self.mode = ""

    # -- paths and properties -------------------------------------------------------------------

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "zk.pid"

    @property
    def log_path(self) -> Path:
        """The JVM's stdout and stderr (ZooKeeper's own log is ``logs/zookeeper.log``)."""
        return self.data_dir / "logs" / "stdout.log"

    @property
    def server_log_path(self) -> Path:
        return self.data_dir / "logs" / "zookeeper.log"

    @property
    def port(self) -> int:
        """The client port (0 until the first ``start()`` of an instance made with ``port=0``)."""
        return self._port

    @property
    def connect(self) -> str:
        """The connect string for clients and ``zookeeper.connect``: ``127.0.0.1:PORT``."""
        if self._port == 0:
            raise ZooKeeperError("ZooKeeper has no port yet: start() it first")
        return f"{self.host}:{self._port}"

    @property
    def pid(self) -> int | None:
        """The PID of the running server (from ``zk.pid`` for a server this object did not start)."""
        if self._pid is None:
            self._pid = self._read_pid_file()
        return self._pid

    def __repr__(self) -> str:
        return f"ZooKeeperServer({str(self.data_dir)!r}, port={self._port}, pid={self._pid})"

    # -- configuration ------------------------------------------------------------------------

    def config(self) -> dict[str, str]:
        """The zoo.cfg settings for the current port."""
        cfg = {
            "tickTime": "2000",
            "initLimit": "10",
            "syncLimit": "5",
            "dataDir": str(self.data_dir / "data"),
            "clientPort": str(self._port),
            "clientPortAddress": self.host,
            "maxClientCnxns": "0",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr,conf,isro,envi,cons,wchs",
            "autopurge.snapRetainCount": "3",
            "autopurge.purgeInterval": "1",
        }
        cfg.update(self.extra_config)
        return cfg

    def write_config(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in self.config().items())
        self.config_path.write_text(text)
        (self.data_dir / "log4j.properties").write_text(_LOG4J)

    def command(self) -> list[str]:
        java = _java()
        if java is None or not os.path.isfile(_jar()):
            raise ZooKeeperError(zookeeper_available() or NOT_INSTALLED)
        # the instance dir first, so that our log4j.properties wins over /etc/zookeeper/conf; the
        # zookeeper.jar manifest's Class-Path pulls in netty, jute and slf4j-api
        netty = all(os.path.isfile(jar) for jar in _NETTY_JARS)
        cp = os.pathsep.join([str(self.data_dir), _jar(), *_LOG_JARS, *(_NETTY_JARS if netty else ())])
        logs = self.data_dir / "logs"
        return [
            java,
            "-Xms32m",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            f"-Dzookeeper.log.dir={logs}",
            f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
            "-Dzookeeper.admin.enableServer=false",
            *(_NETTY_FLAGS if netty else ()),
            "-cp",
            cp,
            _MAIN_CLASS,
            str(self.config_path),
        ]

    # -- lifecycle --------------------------------------------------------------------------------

    def four_letter(self, cmd: str, timeout: float = 3.0) -> str:
        """A four-letter word to this server (``ruok`` -> ``imok``, ``srvr``, ``mntr``...); "" on failure."""
        if self._port == 0:
            return ""
        return four_letter(self.host, self._port, cmd, timeout)

    def server_mode(self) -> str:
        """``standalone`` / ``leader`` / ``follower`` from ``srvr``, or "" when not serving."""
        for line in self.four_letter("srvr").splitlines():
            if line.startswith("Mode: "):
                return line[len("Mode: ") :].strip()
        return ""

    def running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None and process_alive(self._proc.pid)
        pid = self.pid
        return pid is not None and self._is_ours(pid) and process_alive(pid)

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Start the server and wait (at most ``timeout`` s) until it answers ``ruok`` and reports a Mode."""
        problem = zookeeper_available()
        if problem is not None:
            raise ZooKeeperError(problem)
        if self.running():
            raise ZooKeeperError(f"ZooKeeper in {self.data_dir} is already running as pid {self.pid}")
        deadline = time.monotonic() + timeout
        attempts = 1 + (_BIND_RETRIES if self._auto_port else 0)
        outcome = "failed"
        for attempt in range(attempts):
            if self._auto_port:
                self._port = restartable_port(self.host)
            if self.four_letter("ruok", timeout=1.0):
                if attempt + 1 < attempts:
                    continue
                raise ZooKeeperError(f"port {self._port} already answers ruok (another ZooKeeper?)")
            outcome = self._start_once(deadline)
            if outcome == "ready":
                self._auto_port = False  # a restart reuses the port
                return self
            if outcome == "bind" and attempt + 1 < attempts and time.monotonic() < deadline:
                continue
            break
        raise ZooKeeperError(self._failure_message(timeout, outcome))

    def _start_once(self, deadline: float) -> str:
        """Run java once: "ready", "bind" (could not bind the port) or "failed"."""
        self.write_config()
        t0 = time.monotonic()
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        server_log_offset = self.server_log_path.stat().st_size if self.server_log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting ZooKeeper on {self.host}:{self._port} at {time.ctime()}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self._pid = self._proc.pid
        self.pid_path.write_text(f"{self._pid}\n")
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._forget()
                recent = self._read_from(self.log_path, log_offset) + self._read_from(
                    self.server_log_path, server_log_offset
                )
                return "bind" if any(m in recent for m in _BIND_FAILURE_MARKERS) else "failed"
            if self.four_letter("ruok", timeout=1.0) == "imok":
                self.mode = self.server_mode()
                if self.mode:
                    self.ready_seconds = time.monotonic() - t0
                    return "ready"
            time.sleep(0.1)
        self.kill()
        return "failed"

    @staticmethod
    def _read_from(path: Path, offset: int) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            return ""

    def _failure_message(self, timeout: float, outcome: str) -> str:
        if outcome == "bind":
            why = f"ZooKeeper could not listen on {self.host}:{self._port}: Address already in use"
        else:
            why = f"ZooKeeper did not start on {self.host}:{self._port} within {timeout:g}s"
        return (
            f"{why} (dir {self.data_dir})\n--- {self.log_path}:\n{_tail(self.log_path)}\n"
            f"--- {self.server_log_path}:\n{_tail(self.server_log_path)}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by PID, then SIGKILL if it is still running after ``timeout`` s; waits until it is gone."""
        self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work (what is fsynced stays: ``forceSync`` defaults to yes)."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def restart(self, timeout: float = 60.0, stop_timeout: float = 10.0) -> ZooKeeperServer:
        """``stop()`` then ``start()``: same port, same data."""
        self.stop(stop_timeout)
        return self.start(timeout)

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(sig)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            self._forget()
            return
        pid = self.pid
        if pid is None or not process_alive(pid):
            self._forget()
            return
        if not self._is_ours(pid):
            raise ZooKeeperError(f"pid {pid} in {self.pid_path} is not this directory's ZooKeeper; not killing it")
        self._signal_pid(pid, sig)
        if not self._wait_gone(pid, timeout):
            self._signal_pid(pid, signal.SIGKILL)
            if not self._wait_gone(pid, 10.0):
                raise ZooKeeperError(f"ZooKeeper pid {pid} did not exit after SIGKILL")
        self._forget()

    @staticmethod
    def _signal_pid(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    @staticmethod
    def _wait_gone(pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while process_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _forget(self) -> None:
        self._proc = None
        self._pid = None
        with contextlib.suppress(FileNotFoundError):
            self.pid_path.unlink()

    def _read_pid_file(self) -> int | None:
        try:
            return int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def _is_ours(self, pid: int) -> bool:
        """Whether ``pid`` is QuorumPeerMain running this directory's zoo.cfg (never signal anything else)."""
        args = _cmdline(pid)
        return _MAIN_CLASS in args and str(self.config_path) in args

    def __enter__(self) -> ZooKeeperServer:
        if not self.running():
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

