"""``odradek topics`` and ``odradek configs`` against a real broker: output, exit codes, and the
effect of each command as confluent-kafka (librdkafka) sees it."""

from __future__ import annotations

import base64
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from odradek.cli.__main__ import main
from odradek.cli.topics import kafka_uuid
from odradek.client import Admin
from odradek.testing import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("cli") / "data", overrides={"num.partitions": 1})
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, "".join(proc.stderr_lines[-40:])


@pytest.fixture(scope="module")
def ck(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{uuid.uuid4().hex[:6]}"


class Run:
    def __init__(self, broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
        self.broker, self.capsys = broker, capsys

    def __call__(self, tool: str, *args: str) -> tuple[int, str, str]:
        """``odradek TOOL --bootstrap-server B ARGS...`` in this process: (exit code, stdout, stderr)."""
        self.capsys.readouterr()
        code = main([tool, "--bootstrap-server", self.broker.bootstrap, *args])
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def cli(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(broker, capsys)


def _fields(line: str) -> dict[str, str]:
    return dict(f.split(": ", 1) for f in line.strip().split("\t"))


def _ck_configs(ck: AdminClient, kind: str, name: str) -> dict[str, str | None]:
    entries = next(iter(ck.describe_configs([ConfigResource(kind, name)]).values())).result(10)
    return {k: e.value for k, e in entries.items()}


def test_topics_create_list_describe_delete(cli: Run, ck: AdminClient, topic: str) -> None:
    code, out, err = cli("topics", "create", topic, "--partitions", "3", "--replication-factor", "1",
                         "--config", "retention.ms=60000", "--config", "cleanup.policy=compact")
    assert (code, out, err) == (0, f"Created topic {topic}.\n", "")
    td = ck.describe_topics(TopicCollection([topic]))[topic].result(10)
    assert len(td.partitions) == 3
    assert _ck_configs(ck, "topic", topic)["retention.ms"] == "60000"

    code, out, err = cli("topics", "create", topic)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "TOPIC_ALREADY_EXISTS (36)" in err and err.startswith("odradek topics: ")
    assert cli("topics", "create", topic, "--if-not-exists")[:2] == (0, "")

    code, out, _ = cli("topics", "list")
    assert code == 0 and topic in out.split("\n")

    # offsets: 5 records in partition 1, the first 2 deleted (keyed: the topic is compacted)
    p = Producer({"bootstrap.servers": cli.broker.bootstrap})
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for i in range(5):
        p.produce(topic, key=b"k%d" % i, value=b"x", partition=1, on_delivery=on_delivery)
    assert p.flush(10) == 0 and failed == []
    with Admin(bootstrap_servers=cli.broker.bootstrap) as admin:
        admin.delete_records({(topic, 1): 2})

    code, out, err = cli("topics", "describe", topic)
    assert code == 0, err
    lines = out.splitlines()
    head = _fields(lines[0])
    assert head["Topic"] == topic and head["PartitionCount"] == "3" and head["ReplicationFactor"] == "1"
    # Kafka's form (URL-safe base64, as kafka-topics prints it); librdkafka prints standard base64
    assert head["TopicId"] == kafka_uuid(uuid.UUID(bytes=base64.b64decode(str(td.topic_id) + "==")))
    assert sorted(head["Configs"].split(",")) == ["cleanup.policy=compact", "retention.ms=60000"]
    parts = [_fields(line) for line in lines[1:]]
    assert [(r["Partition"], r["Leader"], r["Replicas"], r["Isr"]) for r in parts] == [
        (str(i), "0", "0", "0") for i in range(3)
    ]
    assert [(r["EarliestOffset"], r["LatestOffset"]) for r in parts] == [("0", "0"), ("2", "5"), ("0", "0")]
    assert all(line.startswith("\t") for line in lines[1:])

    # describe without a name: every topic (this one among them)
    code, out, _ = cli("topics", "describe")
    assert code == 0 and f"Topic: {topic}\tTopicId" in out

    assert cli("topics", "delete", topic)[:2] == (0, f"Deleted topic {topic}.\n")
    assert topic not in ck.list_topics(timeout=10).topics
    code, out, err = cli("topics", "delete", topic)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION (3)" in err and err.count("\n") == 1
    assert cli("topics", "delete", topic, "--if-exists")[:2] == (0, "")
    code, _, err = cli("topics", "describe", topic)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and topic in err


def test_topics_alter(cli: Run, ck: AdminClient, topic: str) -> None:
    ck.create_topics([NewTopic(topic, 1, 1, config={"segment.ms": "600000"})])[topic].result(10)
    code, out, err = cli("topics", "alter", "--topic", topic, "--partitions", "4",
                         "--config", "retention.ms=1000", "--delete-config", "segment.ms")
    assert code == 0, err
    assert out == f"Altered topic {topic}: partitions 1 -> 4, retention.ms=1000, segment.ms deleted.\n"
    assert len(ck.describe_topics(TopicCollection([topic]))[topic].result(10).partitions) == 4
    configs = _ck_configs(ck, "topic", topic)
    assert configs["retention.ms"] == "1000" and configs["segment.ms"] == "604800000"

    code, out, err = cli("topics", "alter", topic, "--partitions", "2")
    assert code == 1 and "INVALID_PARTITIONS (37)" in err and err.count("\n") == 1
    code, _, err = cli("topics", "alter", topic, "--config", "retention.ms=soon")
    assert code == 1 and "INVALID_CONFIG (40)" in err
    code, _, err = cli("topics", "alter", topic)
    assert code == 1 and "nothing to alter" in err
    code, _, err = cli("topics", "alter", f"{topic}-missing", "--partitions", "2")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    assert cli("topics", "alter", f"{topic}-missing", "--partitions", "2", "--if-exists")[0] == 0


def test_topics_usage_errors(cli: Run, topic: str) -> None:
    code, _, err = cli("topics", "create")
    assert code == 1 and "topic name is required" in err
    code, _, err = cli("topics", "create", topic, "--config", "retention.ms")
    assert code == 1 and "KEY=VALUE" in err
    code, _, err = cli("topics", "create", topic, "--partitions", "0")
    assert code == 1 and "INVALID_PARTITIONS" in err
    code, _, err = cli("topics", "create", topic, "--replication-factor", "3")
    assert code == 1 and "INVALID_REPLICATION_FACTOR" in err
    code, out, _ = cli("topics", "create", topic, "--partitions", "2", "--validate-only")
    assert code == 0 and out == f"Validated topic {topic}.\n"
    assert topic not in cli("topics", "list")[1].split()


def test_configs_describe_and_alter_topic(cli: Run, ck: AdminClient, topic: str) -> None:
    ck.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "120000"})])[topic].result(10)
    code, out, err = cli("configs", "describe", "--topic", topic)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1:] == [
        "  retention.ms=120000 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=120000, DEFAULT_CONFIG:log.retention.hours=168}"
    ]

    code, out, err = cli("configs", "alter", "--topic", topic, "--set", "max.message.bytes=4096",
                         "--append", "cleanup.policy=compact", "--delete", "retention.ms")
    assert (code, out) == (0, f"Completed updating config for topic {topic}.\n"), err
    configs = _ck_configs(ck, "topic", topic)
    assert configs["max.message.bytes"] == "4096"
    assert configs["cleanup.policy"] == "delete,compact"
    assert configs["retention.ms"] == "604800000"

    code, out, err = cli("configs", "alter", "--topic", topic, "--subtract", "cleanup.policy=delete",
                         "--add-config", "segment.ms=3600000,min.cleanable.dirty.ratio=0.2",
                         "--delete-config", "max.message.bytes")
    assert code == 0, err
    configs = _ck_configs(ck, "topic", topic)
    assert (configs["cleanup.policy"], configs["segment.ms"], configs["min.cleanable.dirty.ratio"]) == (
        "compact", "3600000", "0.2"
    )
    assert configs["max.message.bytes"] == "1048588"
    assert cli("configs", "alter", "--topic", topic, "--add-config", "cleanup.policy=[compact,delete]")[0] == 0
    assert _ck_configs(ck, "topic", topic)["cleanup.policy"] == "compact,delete"

    code, out, _ = cli("configs", "describe", "--topic", topic, "--all")
    assert code == 0 and out.startswith(f"All configs for topic {topic} are:\n")
    assert "  segment.bytes=1073741824 sensitive=false source=DEFAULT_CONFIG" in out
    assert "  segment.ms=3600000 sensitive=false source=DYNAMIC_TOPIC_CONFIG" in out

    for args, expect in [
        (["--set", "no.such.config=1"], "INVALID_CONFIG (40)"),
        (["--set", "retention.ms=abc"], "INVALID_CONFIG (40)"),
        (["--append", "retention.ms=1"], "INVALID_CONFIG (40)"),
        ([], "nothing to alter"),
    ]:
        code, out, err = cli("configs", "alter", "--topic", topic, *args)
        assert code == 1 and expect in err and err.count("\n") == 1, (args, err)
    code, _, err = cli("configs", "describe", "--topic", f"{topic}-missing")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err


def test_configs_broker(cli: Run, ck: AdminClient) -> None:
    code, out, _ = cli("configs", "describe", "--broker", "0")
    assert (code, out) == (0, "Dynamic configs for broker 0 are:\n")
    code, out, err = cli("configs", "alter", "--broker", "0", "--set", "log.retention.bytes=987654321")
    assert (code, out) == (0, "Completed updating config for broker 0.\n"), err
    try:
        code, out, _ = cli("configs", "describe", "--broker", "0")
        assert out.splitlines()[1].startswith(
            "  log.retention.bytes=987654321 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.bytes=987654321"
        )
        assert _ck_configs(ck, "broker", "0")["log.retention.bytes"] == "987654321"
    finally:
        assert cli("configs", "alter", "--broker", "0", "--delete", "log.retention.bytes")[0] == 0
    assert _ck_configs(ck, "broker", "0")["log.retention.bytes"] == "-1"

    code, out, _ = cli("configs", "describe", "--broker", "0", "--all")
    assert code == 0 and "  num.partitions=1 sensitive=false source=STATIC_BROKER_CONFIG" in out
    code, _, err = cli("configs", "alter", "--broker", "0", "--set", "broker.id=3")
    assert code == 1 and "INVALID_REQUEST" in err
    code, _, err = cli("configs", "describe", "--broker", "42", "--timeout", "3")
    assert code == 1 and "BROKER_NOT_AVAILABLE" in err and err.count("\n") == 1
    code, out, _ = cli("configs", "describe", "--broker-defaults")
    assert code == 0 and out.startswith("Default configs for brokers in the cluster are:\n")
    code, _, err = cli("configs", "describe", "--broker", "zero")
    assert code == 1 and "broker id" in err


def test_entry_point_exit_codes_and_options_anywhere(broker: BrokerProcess, topic: str) -> None:
    """The real command: --bootstrap-server before or after the command; failures exit 1."""

    def odradek(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60)

    r = odradek("topics", "create", topic, "--partitions", "2", "--bootstrap-server", broker.bootstrap)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"Created topic {topic}.\n", "")
    r = odradek("topics", "--bootstrap-server", broker.bootstrap, "describe", "--topic", topic)
    assert r.returncode == 0 and "PartitionCount: 2" in r.stdout
    r = odradek("topics", "create", topic, "--bootstrap-server", broker.bootstrap)
    assert r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    r = odradek("configs", "describe", "--topic", topic, "--bootstrap-server", broker.bootstrap)
    assert r.returncode == 0 and r.stdout == f"Dynamic configs for topic {topic} are:\n"

    # nothing listening: one line, exit 1, within the timeout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    r = odradek("topics", "list", "--bootstrap-server", dead, "--timeout", "1")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith(f"odradek topics: cannot reach a broker at {dead} within 1 s (")
    r = odradek("configs", "describe", "--topic", "x", "--bootstrap-server", "no-port")
    assert r.returncode == 1 and "host:port" in r.stderr
    r = odradek("topics", "frobnicate")
    assert r.returncode == 2  # argparse usage error


def test_topic_id_format() -> None:
    u = uuid.UUID("6126dd1f-5943-4cb9-b2cc-0ad40bb2af94")
    assert kafka_uuid(u) == base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()
    assert len(kafka_uuid(u)) == 22 and uuid.UUID(bytes=base64.urlsafe_b64decode(kafka_uuid(u) + "==")) == u
