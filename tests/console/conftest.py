"""Fixtures for the console's tests: a real broker process and ``odradek console`` processes
against it, each on 127.0.0.1 with an ephemeral port, stopped by PID."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
_URL = re.compile(r" at (http://\S+?/)$")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class Console:
    """``odradek console`` as a process; ``get``/``post`` answer ``(status, body, headers)``."""

    def __init__(self, bootstrap: str, *extra: str) -> None:
        self.cmd = [
            sys.executable, "-m", "odradek", "console", "--bootstrap-server", bootstrap,
            "--port", "0", "--sample-interval", "1", "--timeout", "10", *extra,
        ]  # fmt: skip
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.stderr: list[str] = []
        self._opener = urllib.request.build_opener(_NoRedirect)

    def start(self, timeout: float = 30.0) -> Console:
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
        threading.Thread(target=self._drain, daemon=True).start()
        found: list[str] = []

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            found.append(self.proc.stdout.readline())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        m = _URL.search(found[0].strip()) if found else None
        if m is None:
            self.stop()
            raise RuntimeError(f"console did not start: {found} {''.join(self.stderr[-20:])}")
        self.url = m.group(1).rstrip("/")
        return self

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str, dict[str, str]]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with self._opener.open(req, timeout=30) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), dict(exc.headers)

    def get(self, path: str) -> tuple[int, str]:
        status, body, _ = self.request("GET", path)
        return status, body

    def page(self, path: str) -> str:
        status, body = self.get(path)
        assert status == 200, (path, status, body[-2000:])
        return body

    def token(self) -> str:
        m = _CSRF.search(self.page("/topics"))
        assert m is not None, "no CSRF token on the topics page"
        return m.group(1)

    def post(self, path: str, form: dict[str, str], headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
        return self.request("POST", path, form, headers)


def wait_until(check, timeout: float, what: str, interval: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


@contextlib.contextmanager
def started_broker(data_dir: Path, **overrides: object) -> Iterator[BrokerProcess]:
    """A broker process for console tests (quick group start-up), stopped at the end."""
    b = BrokerProcess(
        data_dir, overrides={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1, **overrides}
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


@contextlib.contextmanager
def started_console(bootstrap: str, *extra: str, clean_exit: bool = True) -> Iterator[Console]:
    """``odradek console`` against ``bootstrap``; with ``clean_exit`` its exit status must be 0."""
    c = Console(bootstrap, *extra).start()
    try:
        yield c
    finally:
        code = c.stop()
        if clean_exit:
            assert code == 0, "".join(c.stderr[-30:])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("console-broker") / "data") as b:
        yield b


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[Console]:
    with started_console(broker.bootstrap) as c:
        yield c


@pytest.fixture(scope="module")
def read_only_console(broker: BrokerProcess) -> Iterator[Console]:
    with started_console(broker.bootstrap, "--read-only", clean_exit=False) as c:
        yield c


@pytest.fixture(scope="session")
def output_dir() -> Path:
    """Where the browser tests put their screenshots (CI keeps them as artifacts)."""
    base = os.environ.get("ODRADEK_TEST_OUTPUT")
    out = Path(base) / "console" if base else REPO / "test-output" / "console"
    out.mkdir(parents=True, exist_ok=True)
    return out
