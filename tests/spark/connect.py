"""A Spark Connect server from the pyspark package, for the tests of remote sessions.

Started with pyspark's ``bin/spark-submit`` running its ``SparkConnectServer`` class on
``local[2]``, gRPC bound to 127.0.0.1 on an ephemeral port (read back from the server's log),
no UI; its Python workers run this interpreter, where PySpark's discovery finds ``odradek``.
Stopped by PID (SIGTERM, then SIGKILL).  ``spark-submit`` execs the JVM, so the PID is the
server's own.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from .standalone import spark_env, spark_home

_STARTED = re.compile(r"Spark Connect server started at: ([\d.]+:\d+)")
CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class SparkConnectServer:
    def __init__(self, base_dir: Path, master: str = "local[2]") -> None:
        self.base_dir = Path(base_dir)
        self.master = master
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    @property
    def log(self) -> Path:
        return self.base_dir / "connect-server.log"

    @property
    def url(self) -> str:
        """The ``sc://`` URL a remote session is built from."""
        return f"sc://{self.address}"

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self, timeout: float = 120.0) -> SparkConnectServer:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.pollingDelay": "50ms",
            "spark.local.dir": str(self.base_dir / "local"),
            "spark.sql.warehouse.dir": str(self.base_dir / "warehouse"),
        }
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master, "--class", CLASS]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        cmd.append("spark-internal")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=spark_env(),
                cwd=self.base_dir,
            )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                m = _STARTED.search(self.logs())
                if m:
                    self.address = m.group(1)
                    return self
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the Spark Connect server exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
                time.sleep(0.2)
            raise RuntimeError(f"the Spark Connect server was not up within {timeout} s:\n{self.logs()[-3000:]}")
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 30.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> SparkConnectServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
