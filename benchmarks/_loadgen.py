"""Build and run ``benchmarks/loadgen/odradek_loadgen.c``, the compiled load generator.

The program is built with gcc on first use (and again whenever the source is newer than the
binary, or the library it links changed) into ``benchmarks/.build/`` (ignored by git; override
with ``$ODRADEK_LOADGEN_BUILD_DIR``). It compiles against Debian's ``librdkafka-dev`` headers and
links against the librdkafka bundled in the confluent-kafka wheel (``confluent_kafka.libs/``),
with an rpath, so it runs without ``LD_LIBRARY_PATH``: Debian's librdkafka 2.0.2 cannot parse
Tansu's ApiVersions v3 answer, the wheel's 2.x can. Without that wheel it links ``-lrdkafka``.

    from benchmarks import _loadgen
    r = _loadgen.run_produce("127.0.0.1:9092", "t", 1_000_000, record_size=100, acks="1")
    r["records_per_s"], r["latency_ms"]["produce_to_ack"]["p99"]

Every ``run_*`` returns the program's JSON object (``exit_code`` added); with ``check=True``
(the default) a run that lost or failed records raises :class:`LoadgenError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "loadgen" / "odradek_loadgen.c"
HEADER = Path("/usr/include/librdkafka/rdkafka.h")
INSTALL_HINT = "apt-get install librdkafka-dev gcc (Debian: the librdkafka headers and a C compiler)"

__all__ = [
    "LoadgenError",
    "LoadgenUnavailable",
    "binary",
    "build_dir",
    "run_consume",
    "run_e2e",
    "run_produce",
]


class LoadgenUnavailable(RuntimeError):
    """gcc, the librdkafka headers or the library are missing: the program cannot be built."""


class LoadgenError(RuntimeError):
    """The program ran but did not deliver or read every record (or printed no JSON)."""

    def __init__(self, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result


def build_dir() -> Path:
    return Path(os.environ.get("ODRADEK_LOADGEN_BUILD_DIR") or HERE / ".build")


def wheel_librdkafka() -> Path | None:
    """The librdkafka shared library bundled in the confluent-kafka wheel, if there is one."""
    try:
        import confluent_kafka
    except ImportError:
        return None
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    return found[0] if found else None


def _link_args() -> list[str]:
    lib = wheel_librdkafka()
    if lib is None:
        return ["-lrdkafka"]
    return [f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"]


def binary() -> Path:
    """Path of the built program, building it first if needed."""
    out = build_dir() / "odradek_loadgen"
    stamp = out.with_suffix(".link")
    link = _link_args()
    link_text = " ".join(link)
    fresh = (
        out.exists()
        and out.stat().st_mtime >= SOURCE.stat().st_mtime
        and stamp.exists()
        and stamp.read_text() == link_text
    )
    if fresh:
        return out
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise LoadgenUnavailable(f"no C compiler to build {SOURCE.name}: {INSTALL_HINT}")
    if not HEADER.exists():
        raise LoadgenUnavailable(f"no {HEADER} to build {SOURCE.name}: {INSTALL_HINT}")
    out.parent.mkdir(parents=True, exist_ok=True)
    # build next to the target and rename: concurrent builders never see half a binary
    fd, tmp = tempfile.mkstemp(prefix=".odradek_loadgen-", dir=out.parent)
    os.close(fd)
    cmd = [gcc, "-O2", "-std=gnu11", "-Wall", "-o", tmp, str(SOURCE), *link, "-lpthread", "-lm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise LoadgenUnavailable(
                f"building {SOURCE.name} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}\n"
                f"if headers or the library are missing: {INSTALL_HINT}"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
        stamp.write_text(link_text)
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


def _run(args: Sequence[str], timeout: float, check: bool) -> dict[str, Any]:
    cmd = [str(binary()), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the child it started
        raise LoadgenError(f"{' '.join(cmd)}: no result after {timeout:.0f} s") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise LoadgenError(f"{' '.join(cmd)}: exit {proc.returncode}, no JSON; stderr:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["exit_code"] = proc.returncode
    if check and proc.returncode != 0:
        raise LoadgenError(
            f"{' '.join(cmd)}: exit {proc.returncode}: {lines[-1]}\nstderr:\n{proc.stderr[-3000:]}", result
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
    config: Mapping[str, Any] | None = None,
    timeout: float = 300.0,
    check: bool = True,
) -> dict[str, Any]:
    """Produce ``records`` records (-1 with ``duration``: until that many seconds passed) of
    ``record_size`` bytes with ``clients`` producer instances, round-robin over the first
    ``partitions`` partitions (None: all), paced to ``rate`` records/s in total (-1: unpaced).
    ``config``: librdkafka settings (linger.ms, batch.size, ...)."""
    args = ["produce", "-b", bootstrap, "-t", topic, "-n", str(records), "-s", str(record_size)]
    args += ["-r", str(rate), "-a", str(acks), "-z", compression, "-c", str(clients)]
    args += ["-T", str(max(1.0, timeout - 10))]
    if partitions:
        args += ["-p", str(partitions)]
    if duration:
        args += ["-d", str(duration)]
    if random_payload:
        args.append("-R")
    return _run(args + _settings(config), timeout + (duration or 0), check)


def run_consume(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    partitions: int | None = None,
    clients: int = 1,
    config: Mapping[str, Any] | None = None,
    timeout: float = 300.0,
    check: bool = True,
) -> dict[str, Any]:
    """Read ``records`` records from the beginning of the first ``partitions`` partitions (None:
    all), split over ``clients`` consumer instances (assign(), no commits). ``config``: librdkafka
    consumer settings (fetch.max.bytes, max.partition.fetch.bytes, ...)."""
    args = ["consume", "-b", bootstrap, "-t", topic, "-n", str(records), "-c", str(clients)]
    args += ["-T", str(max(1.0, timeout - 10))]
    if partitions:
        args += ["-p", str(partitions)]
    return _run(args + _settings(config), timeout, check)


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
    args += ["-s", str(record_size), "-a", str(acks), "-T", str(max(1.0, timeout - 10))]
    if partitions:
        args += ["-p", str(partitions)]
    args += _settings(producer_config) + _settings(consumer_config, "-Y")
    return _run(args, timeout + seconds + warmup, check)
