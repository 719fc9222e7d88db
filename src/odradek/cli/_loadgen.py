"""Build and run ``odradek_loadgen``, the compiled load generator (``cli/loadgen/odradek_loadgen.c``).

Used by ``odradek bench`` (``--client loadgen``, the default when it can be built) and by the
benchmarks in ``benchmarks/``. The C source ships in the package; the program is built with gcc
on first use into ``$ODRADEK_LOADGEN_BUILD_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/odradek/loadgen/``,
under a name that carries a hash of the source, the header and the link arguments (a changed
source or library builds a new binary; checkouts and installs sharing the cache never run each
other's). It compiles against Debian's ``librdkafka-dev`` headers and links against the
librdkafka bundled in the confluent-kafka wheel (``confluent_kafka.libs/``), with an rpath, so it
runs without ``LD_LIBRARY_PATH``: Debian's librdkafka 2.0.2 cannot parse Tansu's ApiVersions v3
answer, the wheel's 2.x can. Without that wheel it links ``-lrdkafka``.

``allocator="jemalloc"`` runs the program with Debian's ``libjemalloc2`` preloaded, so
librdkafka's allocations use it. Neither allocator is the faster client everywhere: a consumer's
fetch thread allocates every record's op and the reading thread frees it, which glibc's malloc
serialises on its arena lock (4 partitions, librdkafka's default fetch sizes: ~3.2 M records/s,
~5 M with jemalloc); but jemalloc gives the multi-megabyte buffers of large fetch responses back
to the kernel and faults them in again (10 MB per partition: ~5.5 M with glibc, ~3.4 M with
jemalloc). The JSON says which allocator ran (``allocator``).

    from odradek.cli import _loadgen
    r = _loadgen.run_produce("127.0.0.1:9092", "t", 1_000_000, record_size=100, acks="1")
    r["records_per_s"], r["latency_ms"]["produce_to_ack"]["p99"]

Every ``run_*`` returns the program's JSON object (``exit_code`` added); with ``check=True``
(the default) a run that lost or failed records raises :class:`LoadgenError`.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from odradek.errors import OdradekError

SOURCE = Path(__file__).resolve().parent / "loadgen" / "odradek_loadgen.c"
HEADER = Path("/usr/include/librdkafka/rdkafka.h")
INSTALL_HINT = "apt-get install librdkafka-dev gcc (Debian: the librdkafka headers and a C compiler)"
NAME = "odradek_loadgen"
#: the consumers' group.id (librdkafka's assign() needs one; never joined, nothing committed)
CONSUMER_GROUP = "odradek-loadgen"

__all__ = [
    "ALLOCATORS",
    "CONSUMER_GROUP",
    "HEADER",
    "SOURCE",
    "LoadgenError",
    "LoadgenUnavailable",
    "binary",
    "build_dir",
    "missing",
    "ready_consumer_group",
    "run_consume",
    "run_e2e",
    "run_ping",
    "run_produce",
    "wheel_librdkafka",
]


class LoadgenUnavailable(OdradekError, RuntimeError):
    """gcc, the librdkafka headers or the library are missing: the program cannot be built."""


class LoadgenError(OdradekError, RuntimeError):
    """The program ran but did not deliver or read every record (or printed no JSON)."""

    def __init__(self, message: str, result: dict[str, Any] | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.result = result
        self.stderr = stderr


def build_dir() -> Path:
    """Where the load generator is compiled: ``ODRADEK_LOADGEN_BUILD_DIR``, else
    ``$XDG_CACHE_HOME/odradek/loadgen`` (``~/.cache`` without it)."""
    explicit = os.environ.get("ODRADEK_LOADGEN_BUILD_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "odradek" / "loadgen"


def wheel_librdkafka() -> Path | None:
    """The librdkafka shared library bundled in the confluent-kafka wheel, if there is one."""
    try:
        import confluent_kafka
    except ImportError:
        return None
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    return found[0] if found else None


def _compiler() -> str | None:
    return shutil.which("gcc") or shutil.which("cc")


def missing() -> str | None:
    """Why the program cannot be built here (no compiler, no headers), or None: it can."""
    if _compiler() is None:
        return f"no C compiler to build {SOURCE.name}: {INSTALL_HINT}"
    if not HEADER.exists():
        return f"no {HEADER} to build {SOURCE.name}: {INSTALL_HINT}"
    if not SOURCE.exists():
        return f"{SOURCE} is missing from the installed package"
    return None


def _link_args() -> list[str]:
    lib = wheel_librdkafka()
    if lib is None:
        return ["-lrdkafka"]
    return [f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"]


ALLOCATORS = ("libc", "jemalloc")


def _allocator_env(allocator: str) -> dict[str, str] | None:
    """The environment that runs the program with ``allocator`` (None: this one, glibc's malloc)."""
    if allocator == "libc":
        return None
    if allocator != "jemalloc":
        raise ValueError(f"allocator {allocator!r} is not one of {ALLOCATORS}")
    name = ctypes.util.find_library("jemalloc")
    if name is None:
        raise LoadgenUnavailable("no jemalloc for allocator='jemalloc': apt-get install libjemalloc2")
    preload = " ".join(x for x in (os.environ.get("LD_PRELOAD", ""), name) if x)
    return {**os.environ, "LD_PRELOAD": preload}


def binary() -> Path:
    """Path of the built program, building it first if there is none for this source and library."""
    reason = missing()
    if reason is not None:
        raise LoadgenUnavailable(reason)
    link = _link_args()
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(HEADER.read_bytes())
    digest.update(" ".join(link).encode())
    out = build_dir() / f"{NAME}-{digest.hexdigest()[:16]}"
    if out.exists():
        return out
    gcc = _compiler()
    assert gcc is not None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # build next to the target and rename: concurrent builders never see half a binary
        fd, tmp = tempfile.mkstemp(prefix=f".{NAME}-", dir=out.parent)
    except OSError as exc:
        raise LoadgenUnavailable(
            f"cannot build {SOURCE.name} in {out.parent}: {exc.strerror or exc} "
            "(set ODRADEK_LOADGEN_BUILD_DIR to a writable directory)"
        ) from exc
    os.close(fd)
    cmd = [gcc, "-O2", "-std=gnu11", "-Wall", "-o", tmp, str(SOURCE), *link, "-lpthread", "-lm", "-ldl"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise LoadgenUnavailable(
                f"building {SOURCE.name} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}\n"
                f"if headers or the library are missing: {INSTALL_HINT}"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return out


def _settings(config: Mapping[str, Any] | None, flag: str = "-X") -> list[str]:
    args: list[str] = []
    for k, v in (config or {}).items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        args += [flag, f"{k}={v}"]
    return args


def ready_consumer_group(bootstrap: str, timeout: float = 60.0, config: Mapping[str, Any] | None = None) -> None:
    """Describe :data:`CONSUMER_GROUP` until its coordinator answers (Odradek's Admin retries
    while it is created or loads); raises when it does not within ``timeout`` seconds.  The
    consumers' ``group.id`` makes librdkafka look its coordinator up: on a fresh broker that
    creates the group metadata topic, which callers that measure a read do first, outside it.
    ``config``: more Admin settings (security)."""
    from odradek.client import Admin

    with Admin({**(config or {}), "bootstrap.servers": bootstrap}) as admin:
        admin.describe_groups([CONSUMER_GROUP], timeout=timeout)


def _limit(timeout: float | None) -> list[str]:
    """The program's own ``-T``: a little under the wait for it here; 0 (no limit) for None."""
    return ["-T", "0" if timeout is None else str(max(1.0, timeout - 10))]


def _run(args: Sequence[str], timeout: float | None, check: bool, allocator: str = "libc") -> dict[str, Any]:
    cmd = [str(binary()), *args]
    env = _allocator_env(allocator)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the child it started
        raise LoadgenError(f"{' '.join(cmd)}: no result after {timeout:.0f} s") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise LoadgenError(
            f"{' '.join(cmd)}: exit {proc.returncode}, no JSON; stderr:\n{proc.stderr[-3000:]}", None, proc.stderr
        )
    result: dict[str, Any] = json.loads(lines[-1])
    result["exit_code"] = proc.returncode
    if check and proc.returncode != 0:
        raise LoadgenError(
            f"{' '.join(cmd)}: exit {proc.returncode}: {lines[-1]}\nstderr:\n{proc.stderr[-3000:]}", result, proc.stderr
        )
    return result


def run_produce(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    record_size: int = 100,
    rate: float = -1,
    acks: str | int = 1,
    compression: str = "none",
    partitions: int | None = None,
    clients: int = 1,
    duration: float | None = None,
    random_payload: bool = False,
    perf_test_payload: bool = False,
    partitioner: bool = False,
    transaction_records: int = 0,
    config: Mapping[str, Any] | None = None,
    timeout: float | None = 300.0,
    check: bool = True,
    allocator: str = "libc",
) -> dict[str, Any]:
    """Produce ``records`` records (-1 with ``duration``: until that many seconds passed) of
    ``record_size`` bytes with ``clients`` producer instances, round-robin over the first
    ``partitions`` partitions (None: all; ``partitioner``: librdkafka's partitioner picks, as for
    records without a key), paced to ``rate`` records/s in total (-1: unpaced). Values: text-like,
    ``random_payload`` random bytes, ``perf_test_payload`` one value of random upper-case letters
    (kafka-producer-perf-test's). ``transaction_records``: each instance is a transactional
    producer sending transactions of that many records (the window ends at the last commit;
    ``latency_ms["commit"]`` times the commits). ``config``: librdkafka settings (linger.ms, batch.size, ...).
    ``timeout``: seconds for the whole run (None: no limit; librdkafka's message.timeout.ms
    still fails records that are never acknowledged). ``allocator``: see the module docstring."""
    args = ["produce", "-b", bootstrap, "-t", topic, "-n", str(records), "-s", str(record_size)]
    args += ["-r", str(rate), "-a", str(acks), "-z", compression, "-c", str(clients), *_limit(timeout)]
    if partitions:
        args += ["-p", str(partitions)]
    if duration:
        args += ["-d", str(duration)]
    if random_payload:
        args.append("-R")
    if perf_test_payload:
        args.append("-U")
    if partitioner:
        args.append("-P")
    if transaction_records:
        args += ["-x", str(transaction_records)]
    return _run(args + _settings(config), None if timeout is None else timeout + (duration or 0), check, allocator)


def run_consume(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    partitions: int | None = None,
    clients: int = 1,
    idle_timeout: float | None = None,
    config: Mapping[str, Any] | None = None,
    timeout: float | None = 300.0,
    check: bool = True,
    allocator: str = "libc",
) -> dict[str, Any]:
    """Read ``records`` records from the beginning of the first ``partitions`` partitions (None:
    all), split over ``clients`` consumer instances (assign(), no commits); with ``idle_timeout``
    stop early when no record came for that many seconds. ``config``: librdkafka consumer
    settings (fetch.max.bytes, max.partition.fetch.bytes, ...). ``timeout``: seconds for the
    whole run (None: no limit). ``allocator``: see the module docstring."""
    args = ["consume", "-b", bootstrap, "-t", topic, "-n", str(records), "-c", str(clients), *_limit(timeout)]
    if partitions:
        args += ["-p", str(partitions)]
    if idle_timeout:
        args += ["-i", str(idle_timeout)]
    return _run(args + _settings(config), timeout, check, allocator)


def run_e2e(
    bootstrap: str,
    topic: str,
    rate: float,
    seconds: float,
    *,
    warmup: float = 1.0,
    record_size: int = 100,
    acks: str | int = 1,
    partitions: int | None = None,
    producer_config: Mapping[str, Any] | None = None,
    consumer_config: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
    check: bool = True,
) -> dict[str, Any]:
    """A producer paced to ``rate`` records/s for ``warmup`` + ``seconds`` s and a consumer in the
    same process: end-to-end latency (send -> receipt) of the records sent after the warm-up,
    and the producer's send -> acknowledgement latency."""
    args = ["e2e", "-b", bootstrap, "-t", topic, "-r", str(rate), "-d", str(seconds), "-w", str(warmup)]
    args += ["-s", str(record_size), "-a", str(acks), *_limit(timeout)]
    if partitions:
        args += ["-p", str(partitions)]
    args += _settings(producer_config) + _settings(consumer_config, "-Y")
    return _run(args, timeout + seconds + warmup, check)


def run_ping(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    record_size: int = 100,
    acks: str | int = 1,
    compression: str = "none",
    producer_config: Mapping[str, Any] | None = None,
    consumer_config: Mapping[str, Any] | None = None,
    record_timeout: float = 60.0,
    timeout: float | None = None,
    check: bool = True,
) -> dict[str, Any]:
    """Kafka's EndToEndLatency: ``records`` round trips, one record at a time (linger.ms=0 unless
    ``producer_config`` sets it), each timed from produce() to a consumer's receipt (every
    partition assigned at its end offset); ``record_timeout`` seconds for each."""
    args = ["ping", "-b", bootstrap, "-t", topic, "-n", str(records), "-s", str(record_size)]
    args += ["-a", str(acks), "-z", compression, "-T", str(record_timeout)]
    args += _settings(producer_config) + _settings(consumer_config, "-Y")
    return _run(args, timeout, check)
