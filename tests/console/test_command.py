"""``odradek console`` as a command: its ready line, a port in use, an unreachable cluster, SIGTERM."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.console.conftest import Console


def test_unreachable_cluster_is_an_error_page_not_a_crash() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = Console(f"127.0.0.1:{port}", "--timeout", "2").start()
    try:
        assert c.url.startswith("http://127.0.0.1:")
        status, body = c.get("/")
        assert status == 502 and f"the cluster at 127.0.0.1:{port}" in body
        assert f"cannot connect to 127.0.0.1:{port}" in body
        assert c.get("/static/console.js")[0] == 200  # the console itself still serves
    finally:
        assert c.stop() == 0


def test_port_in_use_and_help() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "odradek", "console", "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    shown = subprocess.run([sys.executable, "-m", "odradek", "console", "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0
    for flag in ("--bootstrap-server", "--port", "--host", "--read-only", "--command-config"):
        assert flag in shown.stdout
