"""A Spark standalone cluster from the pyspark package: a master and workers, each its own JVM.

Started with pyspark's ``bin/spark-class`` on 127.0.0.1 with ephemeral ports (the master's REST
server off), stopped by PID (SIGTERM, then SIGKILL): a worker's shutdown kills the executors it
launched.  Applications reach it at :attr:`SparkStandalone.url`; their Python workers run the
interpreter the application's ``PYSPARK_PYTHON`` names (this machine is every node).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from odradek.spark import worker_python

_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of a Spark process on this machine: loopback only, workers on this Python."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=worker_python(),
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    env.update(extra)
    return env


class SparkStandalone:
    """``workers`` workers of ``cores`` cores and ``memory`` each, under ``base_dir``."""

    def __init__(self, base_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.base_dir = Path(base_dir)
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.url = ""
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def _log(self, name: str) -> Path:
        return self.base_dir / f"{name}.log"

    def _spawn(self, name: str, args: list[str], **env: str) -> subprocess.Popen[bytes]:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with open(self._log(name), "wb") as out:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=spark_env(**env),
            )

    def _wait_log(self, name: str, pattern: re.Pattern[str] | str, proc: subprocess.Popen[bytes], timeout: float) -> str:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self._log(name).read_text(errors="replace") if self._log(name).exists() else ""
            m = regex.search(text)
            if m:
                return m.group(1) if m.groups() else m.group(0)
            if proc.poll() is not None:
                raise RuntimeError(f"spark {name} exited with {proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"spark {name} not ready within {timeout} s:\n{self.logs(name)[-3000:]}")

    def start(self, timeout: float = 90.0) -> SparkStandalone:
        self.master = self._spawn(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )
        try:
            self.url = self._wait_log("master", _MASTER_URL, self.master, timeout)
            for i in range(self.n_workers):
                work = self.base_dir / f"work-{i}"
                work.mkdir(parents=True, exist_ok=True)
                self.workers.append(
                    self._spawn(
                        f"worker-{i}",
                        [
                            "org.apache.spark.deploy.worker.Worker",
                            "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                            "--cores", str(self.cores), "--memory", self.memory,
                            "--work-dir", str(work),
                            self.url,
                        ],
                    )
                )
            for i, proc in enumerate(self.workers):
                self._wait_log(f"worker-{i}", "Successfully registered with master", proc, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def logs(self, name: str) -> str:
        path = self._log(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def executor_logs(self) -> str:
        """The stderr of every executor the workers ran (their Python workers' errors are here)."""
        parts = []
        for path in sorted(self.base_dir.glob("work-*/app-*/*/stderr")):
            parts.append(f"== {path}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 30.0) -> None:
        for proc in [*self.workers, *([self.master] if self.master else [])]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.workers, *([self.master] if self.master else [])]:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def spark_submit(
    url: str, script: Path, args: list[str], log: Path, conf: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``spark-submit --master url script args...`` in client deploy mode (the driver is this
    machine's child process, stopped by PID), its output to ``log``."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.sql.session.timeZone": "UTC",
        **(conf or {}),
    }
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", url]
    for k, v in settings.items():
        cmd += ["--conf", f"{k}={v}"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [*cmd, str(script), *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=spark_env()
        )
