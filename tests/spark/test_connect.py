"""``format("odradek")`` through Spark Connect: a remote client reads, writes and streams.

A Spark Connect server (pyspark's ``SparkConnectServer`` on ``local[2]``, 127.0.0.1, an
ephemeral port, stopped by PID) serves thin clients; each test's client is a process of its own
(``jobs/connect_client.py``, ``SparkSession.builder.remote``), as a notebook would be, and uses
the source exactly as a local session does.  What it reads and writes is checked against
confluent-kafka, not against the source itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.testing import BrokerProcess

from .conftest import _java_available
from .spark_helpers import consume_all, create_topic, produce

JOB = Path(__file__).parent / "jobs" / "connect_client.py"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    for module in ("pandas", "pyarrow", "grpc", "grpc_status"):  # the Connect client's dependencies
        pytest.importorskip(module)
    if not _java_available():
        pytest.fail("Java is not installed: the Spark tests need a JDK (17) for pyspark")
    from .connect import SparkConnectServer

    with SparkConnectServer(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server


def remote(server: Any, scenario: str, **args: Any) -> dict[str, Any]:
    """Run one scenario in a remote client process; its ``RESULT`` line as a dict."""
    proc = subprocess.run(
        [sys.executable, str(JOB), server.url, scenario, json.dumps(args)],
        capture_output=True, text=True, timeout=300,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT "):])
            return result
    raise AssertionError(
        f"the Connect client exited with {proc.returncode} and no result:\n{proc.stderr[-4000:]}\n"
        f"server log:\n{server.logs()[-3000:]}"
    )


def test_a_remote_session_reads_every_record_with_the_kafka_source_columns(
    connect_server: Any, broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 2)
    sent = produce(
        broker.bootstrap, topic,
        ({"key": f"k{i % 7}".encode(), "value": f"v{i}".encode(), "partition": i % 2,
          "headers": [("n", str(i).encode())]} for i in range(60)),
    )
    result = remote(connect_server, "read", bootstrap=broker.bootstrap, topic=topic)
    assert "error" not in result, result
    assert result["columns"] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    got = sorted((r["partition"], r["offset"], r["key"], r["value"], tuple(map(tuple, r["headers"])))
                 for r in result["rows"])
    want = sorted((s["partition"], s["offset"], s["key"].decode(), s["value"].decode(),
                   tuple((k, v.decode()) for k, v in s["headers"])) for s in sent)
    assert got == want
    assert {r["topic"] for r in result["rows"]} == {topic}


def test_a_remote_session_writes_through_the_sink(connect_server: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    result = remote(connect_server, "write", bootstrap=broker.bootstrap, topic=topic, count=40)
    assert result == {"written": 40}
    got = consume_all(broker.bootstrap, topic, 40)
    assert sorted(m.value().decode() for m in got) == sorted(f"remote-{i}" for i in range(40))
    for m in got:
        n = int(m.value().decode().removeprefix("remote-"))
        assert m.key() == str(n % 5).encode()
        assert m.headers() == [("origin", b"connect")]


def test_a_remote_streaming_copy_resumes_from_its_checkpoint_exactly_once(
    connect_server: Any, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    source, sink = f"{topic}-in", f"{topic}-out"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)
    args = {"bootstrap": broker.bootstrap, "source": source, "sink": sink,
            "checkpoint": str(tmp_path / "checkpoint"), "exactlyOnce": True, "maxOffsetsPerTrigger": 50}
    produce(broker.bootstrap, source, ({"value": f"a{i}".encode()} for i in range(120)))
    first = remote(connect_server, "stream", **args)
    assert "error" not in first, first
    assert first["rows"] == 120 and first["batches"] >= 3  # maxOffsetsPerTrigger reached the server
    produce(broker.bootstrap, source, ({"value": f"b{i}".encode()} for i in range(60)))
    second = remote(connect_server, "stream", **args)
    assert "error" not in second, second
    assert second["rows"] == 60  # the checkpoint on the server side: only what is new
    got = Counter(m.value().decode() for m in consume_all(broker.bootstrap, sink, 180))
    want = Counter([f"a{i}" for i in range(120)] + [f"b{i}" for i in range(60)])
    assert got == want


def test_a_misspelt_option_is_refused_to_the_remote_user_naming_the_right_one(
    connect_server: Any, broker: BrokerProcess, topic: str
) -> None:
    result = remote(connect_server, "read", bootstrap=broker.bootstrap, topic=topic, option="subscibe")
    assert "error" in result, result
    assert "subscibe" in result["error"] and "subscribe" in result["error"].replace("subscibe", "")
