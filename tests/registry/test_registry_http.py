"""The registry listener reads outside bytes: malformed, oversized, slow and half-sent requests get
an HTTP error (or the connection closes), nothing is stored, and everyone else is still served."""

from __future__ import annotations

import json
import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.registry.conftest import call, unique


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def exchange(url: str, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection; what came back until the server closed or went quiet."""
    with socket.create_connection(address(url), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except OSError:
            pass
        return out


def status_of(response: bytes) -> int | None:
    if not response.startswith(b"HTTP/1.1 "):
        return None
    return int(response[9:12])


def still_serving(url: str) -> None:
    assert call("GET", f"{url}/schemas/types", timeout=10).status == 200


methods = st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"get", b"G\x00T", b"", b"POST /x"])
targets = st.sampled_from([b"/subjects", b"/subjects/a/versions", b"/config", b"/schemas/ids/1", b"*", b"",
                           b"/subjects/%ff%fe/versions", b"/subjects/" + b"a" * 3000]) | st.binary(max_size=30)
versions = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"http/1.1", b""])
header_lines = st.lists(
    st.sampled_from([b"Host: x", b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: 99999999999",
                     b"Content-Length: 5, 5", b"Transfer-Encoding: chunked", b"Expect: 100-continue", b"Bad header",
                     b" folded", b"Content-Type: application/json", b"Authorization: Basic !!!", b"X: \x00"])
    | st.binary(max_size=40),
    max_size=6,
)
bodies = st.sampled_from([b"", b"{}", b'{"schema": "\\"int\\""}', b"{", b"\xff\xfe"]) | st.binary(max_size=50)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(methods, targets, versions, header_lines, bodies, st.sampled_from([b"\r\n", b"\n", b"\r"]))
def test_malformed_requests_get_an_http_error_and_nothing_is_stored(
    url: str, method: bytes, target: bytes, version: bytes, headers: list[bytes], body: bytes, eol: bytes
) -> None:
    before = call("GET", f"{url}/subjects?deleted=true").json
    head = method + b" " + target + b" " + version + eol + eol.join(headers) + eol + eol
    response = exchange(url, head + body)
    status = status_of(response)
    # an answer is a whole HTTP/1.1 response (or none: the connection closed)
    assert response == b"" or status is not None, response[:200]
    if status is not None:
        assert status < 500 or status == 501, response[:300]
    assert call("GET", f"{url}/subjects?deleted=true").json == before
    still_serving(url)


def test_limits(url: str) -> None:
    huge_head = b"GET /subjects HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * (70 * 1024) + b"\r\n\r\n"
    assert status_of(exchange(url, huge_head)) == 400
    too_big = b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n"
    assert status_of(exchange(url, too_big)) == 413
    chunked = b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert status_of(exchange(url, chunked)) == 501
    two_lengths = b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"
    assert status_of(exchange(url, two_lengths)) == 400
    still_serving(url)


def test_100_continue(url: str) -> None:
    subject = unique()
    body = json.dumps({"schema": '"string"'}).encode()
    with socket.create_connection(address(url), timeout=10) as s:
        s.sendall(f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n".encode())
        interim = s.recv(100)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        rest = b""
        while chunk := s.recv(4096):
            rest += chunk
    assert b"HTTP/1.1 200 OK" in rest


def test_a_slow_client_does_not_hold_up_others(url: str) -> None:
    slow = [socket.create_connection(address(url), timeout=10) for _ in range(5)]
    try:
        for s in slow:
            s.sendall(b"POST /subjects/x/versions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        started = time.monotonic()
        still_serving(url)
        subject = unique()
        assert call("POST", f"{url}/subjects/{subject}/versions", {"schema": '"int"'}).status == 200
        assert time.monotonic() - started < 20
    finally:
        for s in slow:
            s.close()


@pytest.mark.parametrize("request_line", [b"GET / HTTP/1.1\r\n\r\n", b"GET /subjects HTTP/1.0\r\n\r\n"])
def test_a_closed_half_request_is_dropped(url: str, request_line: bytes) -> None:
    assert exchange(url, request_line[:10]) in (b"",) or status_of(exchange(url, request_line[:10])) == 400
    still_serving(url)
