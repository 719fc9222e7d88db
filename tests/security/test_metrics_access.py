"""Who may read ``/metrics``: the Host header check (DNS-rebinding protection) and optional HTTP
Basic authentication, a strict parser of the request head (a hypothesis property test of
malformed heads), and Prometheus-style scrapes that keep working.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from odradek.broker import exporter
from odradek.config import ConfigError
from odradek.testing import BrokerProcess

USER, PASSWORD = "prom", "scrape-secret"
TOPIC = "secret-project-topic"


def _request(host: str | None, auth: str | None = None, version: str = "HTTP/1.1") -> Any:
    headers = {} if host is None else {"host": host}
    if auth is not None:
        headers["authorization"] = auth
    return exporter.HttpRequest("GET", "/metrics", version, headers)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the checks on their own -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:9404", True),
        ("127.0.0.1", True),
        ("localhost:9404", True),
        ("LOCALHOST.:9404", True),
        ("[::1]:9404", True),
        ("grafana.localhost:9404", True),
        ("broker-7:9404", True),  # this machine's name
        ("10.1.2.3:9404", True),  # the address the request came in on
        ("metrics.example.com:443", True),  # configured, any port
        ("evil.example:9404", False),  # a name of a web page's own that resolves here
        ("attacker.127.0.0.1.nip.io:9404", False),
        ("localhost:8080", False),  # another port: not this endpoint
        ("10.9.9.9:9404", False),
        ("", False),
        ("local host", False),
        ("[::1", False),
        ("localhost:99999", False),
    ],
)
def test_host_header_check(host: str, allowed: bool) -> None:
    access = exporter.MetricsAccess(["metrics.example.com"], machine_names=["broker-7"])
    assert access.host_allowed(_request(host), ("0.0.0.0", 9404), "10.1.2.3") is allowed


def test_host_header_missing_or_any() -> None:
    access = exporter.MetricsAccess([], machine_names=[])
    assert not access.host_allowed(_request(None), ("127.0.0.1", 9404), "127.0.0.1")
    assert access.host_allowed(_request(None, version="HTTP/1.0"), ("127.0.0.1", 9404), "127.0.0.1")
    anyone = exporter.MetricsAccess(["*"], machine_names=[])
    assert anyone.host_allowed(_request("evil.example"), ("127.0.0.1", 9404), "127.0.0.1")
    bound = exporter.MetricsAccess([], machine_names=[])
    assert bound.host_allowed(_request("192.0.2.7:9404"), ("192.0.2.7", 9404), None)


def test_basic_auth_check() -> None:
    access = exporter.MetricsAccess([], USER, PASSWORD, machine_names=[])
    assert access.authorized(_request("localhost", _basic(USER, PASSWORD)))
    assert access.authorized(_request("localhost", "basic " + base64.b64encode(b"prom:scrape-secret").decode()))
    for auth in (None, _basic(USER, "wrong"), _basic("other", PASSWORD), "Bearer xyz", "Basic !!!",
                 "Basic " + base64.b64encode(b"promscrape-secret").decode(), "Basic"):
        assert not access.authorized(_request("localhost", auth)), auth
    assert exporter.MetricsAccess([], machine_names=[]).authorized(_request("localhost"))
    with pytest.raises(ConfigError, match="go together"):
        exporter.MetricsAccess([], USER, None)
    with pytest.raises(ConfigError, match=r"allowed\.hosts"):
        exporter.MetricsAccess(["bad host!"])


# -- the parser, and the server's answer to any head --------------------------------------------------

_GOOD = b"GET /metrics HTTP/1.1\r\nHost: localhost:9404\r\nAuthorization: " + _basic(USER, PASSWORD).encode() + b"\r\n\r\n"


def test_the_parser_reads_what_prometheus_sends() -> None:
    head = (b"GET /metrics?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9404\r\nUser-Agent: Prometheus/2.53.0\r\n"
            b"Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
            b"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n")
    r = exporter.parse_request_head(head)
    assert (r.method, r.path, r.version, r.headers["host"]) == ("GET", "/metrics", "HTTP/1.1", "127.0.0.1:9404")
    for bad in (b"GET /metrics\r\n\r\n", b"GET /metrics HTTP/2\r\n\r\n", b"GET  /metrics HTTP/1.1\r\n\r\n",
                b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", b"GET /metrics HTTP/1.1\r\n folded\r\n\r\n",
                b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", b"GET /m\x00 HTTP/1.1\r\n\r\n",
                b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n"):
        with pytest.raises(exporter.BadHttpRequest):
            exporter.parse_request_head(bad)


def _mutations() -> st.SearchStrategy[bytes]:
    """Heads near a good one (bytes replaced, inserted, cut) and heads of random bytes."""
    def mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
        out = bytearray(data)
        for pos, cut, insert in edits:
            pos %= len(out) + 1
            out[pos : pos + cut] = insert
        return bytes(out)

    edit = st.tuples(st.integers(0, 400), st.integers(0, 8), st.binary(max_size=8))
    near = st.builds(mutate, st.just(_GOOD), st.lists(edit, min_size=1, max_size=4))
    return st.one_of(near, st.binary(max_size=300)).map(lambda b: b if b.endswith(b"\r\n\r\n") else b + b"\r\n\r\n")


@given(head=_mutations())
def test_any_head_parses_or_is_a_bad_request(head: bytes) -> None:
    try:
        r = exporter.parse_request_head(head)
    except exporter.BadHttpRequest:
        return
    assert r.method and r.target and r.version in ("HTTP/1.0", "HTTP/1.1")
    assert all(k == k.lower() for k in r.headers)


class _Registry:
    config = None
    scraped = 0

    def snapshot(self) -> None:
        self.scraped += 1

    def render(self) -> tuple[bytes, str]:
        return f'kafka_log_log_size{{topic="{TOPIC}",partition="0"}} 1.0\n'.encode(), "text/plain; version=0.0.4"


@given(head=_mutations())
def test_the_server_answers_any_head_with_a_status_and_serves_only_the_right_one(head: bytes) -> None:
    registry = _Registry()
    server = exporter.MetricsServer(registry, exporter.MetricsAccess([], USER, PASSWORD, machine_names=[]))  # type: ignore[arg-type]
    server.address = ("127.0.0.1", 9404)
    status, _ctype, body, _extra, _head_only = asyncio.run(server._answer(head, "127.0.0.1"))
    assert status.split()[0] in {"200", "400", "401", "403", "404", "405"}
    if TOPIC.encode() in body:  # metrics only for a request that passed both checks
        r = exporter.parse_request_head(head)
        assert server.access.host_allowed(r, server.address, "127.0.0.1") and server.access.authorized(r)


def test_the_server_answers_the_good_head() -> None:
    server = exporter.MetricsServer(_Registry(), exporter.MetricsAccess([], USER, PASSWORD, machine_names=[]))  # type: ignore[arg-type]
    server.address = ("127.0.0.1", 9404)
    status, _c, body, _e, _h = asyncio.run(server._answer(_GOOD, "127.0.0.1"))
    assert status == "200 OK" and TOPIC.encode() in body
    status, _c, body, extra, _h = asyncio.run(server._answer(_GOOD.replace(_basic(USER, PASSWORD).encode(), _basic(USER, "guess").encode()), "127.0.0.1"))
    assert status == "401 Unauthorized" and extra.startswith("WWW-Authenticate: Basic") and TOPIC.encode() not in body


# -- a broker ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("metrics-access") / "data",
        overrides={
            "metrics.http.allowed.hosts": "metrics.example.com",
            "metrics.http.basic.auth.user": USER,
            "metrics.http.basic.auth.password": PASSWORD,
        },
        extra_args=["--metrics-port", "0"],
        log_level="INFO",
    ).start()
    try:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap})
        p.produce(TOPIC, b"x")
        assert p.flush(30) == 0
        yield b
    finally:
        b.stop()


def _raw(broker: BrokerProcess, head: bytes) -> tuple[int, bytes]:
    assert broker.metrics_url is not None
    host, port = broker.metrics_url.split("/")[2].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


def _scrape(broker: BrokerProcess, host: str | None, auth: str | None) -> tuple[int, bytes]:
    assert broker.metrics_url is not None
    port = broker.metrics_url.split("/")[2].rsplit(":", 1)[1]
    lines = ["GET /metrics HTTP/1.1", "User-Agent: Prometheus/2.53.0",
             "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
             "X-Prometheus-Scrape-Timeout-Seconds: 10"]
    if host is not None:
        lines.insert(1, f"Host: {host.replace('{port}', port)}")
    if auth is not None:
        lines.append(f"Authorization: {auth}")
    return _raw(broker, ("\r\n".join(lines) + "\r\n\r\n").encode())


def test_a_prometheus_scrape_with_host_and_basic_credentials_works(broker: BrokerProcess) -> None:
    status, body = _scrape(broker, "127.0.0.1:{port}", _basic(USER, PASSWORD))
    assert status == 200
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert "kafka_server_replicamanager_partitioncount" in names and TOPIC.encode() in body
    assert _scrape(broker, "metrics.example.com:9999", _basic(USER, PASSWORD))[0] == 200
    # urllib and curl, as an operator would
    assert broker.metrics_url is not None
    req = urllib.request.Request(broker.metrics_url, headers={"Authorization": _basic(USER, PASSWORD)})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200 and TOPIC.encode() in resp.read()
    out = subprocess.run(["curl", "-sf", "-u", f"{USER}:{PASSWORD}", broker.metrics_url], capture_output=True,
                         timeout=30, check=True)
    assert TOPIC.encode() in out.stdout


def test_a_foreign_host_or_missing_credentials_get_nothing(broker: BrokerProcess) -> None:
    for host, auth, expected in [
        ("evil.example:{port}", _basic(USER, PASSWORD), 403),
        ("localhost:{port}", None, 401),
        ("localhost:{port}", _basic(USER, "guess"), 401),
        (None, _basic(USER, PASSWORD), 403),
    ]:
        status, body = _scrape(broker, host, auth)
        assert status == expected, (host, auth, status)
        assert TOPIC.encode() not in body
    status, _ = _raw(broker, b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
    assert status == 400
    with pytest.raises(urllib.error.HTTPError) as info:
        assert broker.metrics_url is not None
        urllib.request.urlopen(broker.metrics_url, timeout=10)
    assert info.value.code == 401 and info.value.headers["WWW-Authenticate"].startswith("Basic")
    broker.wait_for_log("metrics: refused a request with Host 'evil.example:")
    # the broker carries on: a good scrape right after
    assert _scrape(broker, "localhost:{port}", _basic(USER, PASSWORD))[0] == 200


def test_without_settings_the_host_is_still_checked(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "d", extra_args=["--metrics-port", "0"]) as b:
        assert _scrape(b, "localhost:{port}", None)[0] == 200
        assert _scrape(b, "evil.example:{port}", None)[0] == 403


def test_half_the_basic_auth_settings_stop_the_start(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d", overrides={"metrics.http.basic.auth.user": USER},
                      extra_args=["--metrics-port", "0"])
    try:
        with pytest.raises(RuntimeError, match="go together"):
            b.start(timeout=20)
    finally:
        b.stop()  # a broker that started after all (the code before the check) is not left behind
