"""The fault control endpoint (issue 44): it exists only in test mode, binds only loopback, is absent
from ``odradek serve --help``, refuses what a web page could send, and parses outside bytes
strictly: malformed bodies get a clear 400, nothing is armed, the broker keeps serving."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.pytest_plugin import OdradekBroker
from odradek.testing import BrokerProcess, FaultControlError


def _post(url: str, body: bytes, *, headers: dict[str, str] | None = None, method: str = "POST") -> tuple[int, Any]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, parts.path, body=body,
                     headers={"Content-Type": "application/json", **(headers or {})})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        conn.close()


def _serving(broker: OdradekBroker) -> bool:
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    return p.list_topics(timeout=10) is not None


def test_serve_help_does_not_show_the_test_mode() -> None:
    out = subprocess.run([sys.executable, "-m", "odradek", "serve", "--help"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert "--port" in out
    assert "test-mode" not in out and "fault control" not in out.lower()


def test_a_broker_started_without_test_mode_has_no_fault_control(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", overrides={"metrics.port": -1}) as broker:
        assert "fault control" not in broker.ready_line
        assert broker.fault_url is None
        with pytest.raises(RuntimeError, match="test_mode=True"):
            broker.faults.rules  # noqa: B018


def test_test_mode_refuses_a_listener_beyond_loopback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--test-mode", "--host", "0.0.0.0", "--port", "0",
         "--data-dir", str(tmp_path / "data"), "--metrics-port", "-1"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0
    assert "test mode (fault scripting) needs loopback listeners" in done.stderr


def test_the_endpoint_is_on_loopback_and_refuses_what_a_web_page_could_send(odradek_broker: OdradekBroker) -> None:
    url = odradek_broker.process.fault_url
    assert url is not None and urlsplit(url).hostname == "127.0.0.1"
    state = json.dumps({"op": "state"}).encode()
    assert _post(url, state)[0] == 200
    # another Host (DNS rebinding), a form's content type, GET, another path
    assert _post(url, state, headers={"Host": "evil.example:80"})[0] == 403
    assert _post(url, state, headers={"Content-Type": "text/plain"})[0] == 415
    assert _post(url, b"", method="GET")[0] == 405
    assert _post(url.replace("/faults", "/other"), state)[0] == 404


def test_a_bad_fault_is_refused_with_what_is_wrong_and_nothing_is_armed(odradek_broker: OdradekBroker) -> None:
    faults = odradek_broker.faults
    with pytest.raises(FaultControlError, match="unknown API 'Produse'"):
        faults.fail("Produse", "NOT_LEADER_OR_FOLLOWER")
    with pytest.raises(FaultControlError, match="unknown Kafka error 'NOT_A_LEADER'"):
        faults.fail("Produce", "NOT_A_LEADER")
    with pytest.raises(FaultControlError, match="times"):
        faults.fail("Produce", 6, times=0)
    # a list is armed all or none
    with pytest.raises(FaultControlError, match="kind"):
        faults.arm({"kind": "error", "api": "Produce", "error": 6}, {"kind": "explode"})
    assert faults.rules == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
_FIELD_VALUES = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12) | st.sampled_from(
    ["Produce", "Fetch", "error", "delay", "hold", "drop", "offline", "NOT_LEADER_OR_FOLLOWER", "NONE", ""]
)
_NEAR_FAULT = st.dictionaries(
    st.sampled_from(["kind", "api", "error", "times", "topic", "partition", "client_id", "delay_ms", "extra"]),
    _FIELD_VALUES, max_size=6,
)
_BODIES = st.one_of(
    st.binary(max_size=200),
    _JSON.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda f: json.dumps({"op": "arm", "faults": f}).encode(), st.lists(_NEAR_FAULT, max_size=3) | _JSON),
    st.builds(lambda op, extra: json.dumps({"op": op, **extra}).encode(),
              st.sampled_from(["clear", "drop", "fence", "expire", "arm", "bogus"]),
              st.dictionaries(st.sampled_from(["id", "kind", "client_id", "transactional_id", "group_id",
                                               "member_id"]), _JSON, max_size=3)),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(body=_BODIES)
def test_malformed_commands_get_a_clear_error_and_arm_nothing(odradek_broker: OdradekBroker, body: bytes) -> None:
    url = odradek_broker.process.fault_url
    assert url is not None
    status, answer = _post(url, body)
    assert status in (200, 400, 409), (status, answer)
    if status != 200:
        assert isinstance(answer["error"], str) and answer["error"]
    state = _post(url, b'{"op": "state"}')[1]
    if status != 200:
        assert state["rules"] == []
    # whatever was armed by a body that happened to be valid is cleared for the next example
    _post(url, b'{"op": "reset"}')


def test_the_broker_keeps_serving_after_malformed_commands(odradek_broker: OdradekBroker) -> None:
    url = odradek_broker.process.fault_url
    assert url is not None
    for body in (b"", b"{", b"[]", b"\xff\xfe", b'{"op": "arm", "faults": [{"kind": "error"}]}', b"9" * 5000,
                 b"[" * 100_000):
        status, answer = _post(url, body)
        assert status == 400 and answer["error"]
    assert _post(url, b"{}", headers={"Content-Length": str(1 << 21)})[0] in (413, 400)
    assert odradek_broker.faults.rules == []
    assert _serving(odradek_broker)
