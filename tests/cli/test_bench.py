"""``odradek bench produce|consume|end-to-end`` against a real broker: counts, output shapes, JSON;
with each client (the compiled load generator, the default when it can be built; confluent-kafka;
Odradek's own)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient

from odradek.cli import _loadgen, bench
from odradek.cli.bench import CONSUME_HEADER, ProduceStats, percentile, produce_summary_line
from odradek.testing import BrokerProcess

# kafka-producer-perf-test's final line, number for number
PRODUCE_SUMMARY = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
    r"\d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$"
)
PRODUCE_PROGRESS = re.compile(
    r"^\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency\.$"
)
KAFKA_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUME_ROW = re.compile(
    rf"^{KAFKA_TIME}, {KAFKA_TIME}, [\d.]+, [\d.]+, (\d+), [\d.]+, \d+, \d+, [\d.]+, [\d.]+$"
)


def test_percentiles_and_summary_line() -> None:
    ordered = sorted(float(i) for i in range(1, 1001))
    assert percentile(ordered, 0.5) == 501 and percentile(ordered, 0.999) == 1000 and percentile([], 0.5) == 0
    stats = ProduceStats()
    for i in range(100):
        stats.ack(float(i), 10)
    stats.end = stats.start + 2.0
    s = stats.summary()
    assert s["records_sent"] == 100 and s["bytes"] == 1000 and s["records_per_sec"] == 50
    assert s["max_latency_ms"] == 99 and s["p50_ms"] == 50 and s["p99_ms"] == 99
    assert PRODUCE_SUMMARY.match(produce_summary_line(s))
    assert PRODUCE_PROGRESS.match(stats.window(stats.start + 1.0))


@pytest.fixture(scope="module")
def loadgen() -> Path:
    """The built load generator: scripts/test.sh installs gcc and librdkafka-dev, so a missing one fails."""
    try:
        return _loadgen.binary()
    except _loadgen.LoadgenUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def _end_offsets(broker: BrokerProcess, topic: str, partitions: int) -> list[int]:
    """High watermarks read by confluent-kafka, an oracle independent of the tool."""
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"oracle-{uuid.uuid4().hex[:6]}"})
    try:
        return [c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        c.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("bench") / "data", overrides={"group.initial.rebalance.delay.ms": 0}) as b:
        yield b


def _bench(broker: BrokerProcess, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "bench", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_produce_then_consume_counts(broker: BrokerProcess, loadgen: Path) -> None:
    # no --client: the load generator, since it can be built here
    out = _bench(
        broker, "produce", "--topic", "perf", "--partitions", "3", "--num-records", "200000",
        "--record-size", "100", "--throughput", "-1", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout)
    assert sent["records_sent"] == 200000 and sent["records_failed"] == 0, (sent, out.stderr)
    assert sent["bytes"] == 200000 * 100 and sent["partitions"] == 3, sent
    assert sent["client"].startswith("odradek_loadgen (librdkafka "), sent
    assert sent["records_per_sec"] > 0 and 0 <= sent["p50_ms"] <= sent["p99_ms"] <= sent["max_latency_ms"], sent
    # no note: nothing asked for a Python client (librdkafka's own log lines may appear)
    assert "odradek bench:" not in out.stderr, out.stderr
    ends = _end_offsets(broker, "perf", 3)
    assert sum(ends) == 200000, (ends, out.stderr)
    # librdkafka's partitioner chose the partitions (sticky: a few switches a run, so a partition
    # may get none), not the load generator's round robin, which splits 200,000 evenly
    assert sorted(ends) != [66666, 66667, 66667], ends

    out = _bench(broker, "consume", "--topic", "perf", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["client"].startswith("odradek_loadgen")
    assert got["records_consumed"] == got["records_expected"] == 200000, (got, out.stderr)
    assert round(got["data_consumed_mb"] * 1024 * 1024) == 200000 * 100 == got["bytes"]
    assert got["fetch_time_ms"] >= 0 and got["rebalance_time_ms"] >= 0

    # confluent-kafka reads the same records; its JSON has the same keys
    out = _bench(broker, "consume", "--client", "confluent", "--topic", "perf", "--json")
    assert out.returncode == 0, out.stderr
    py = json.loads(out.stdout)
    assert py["client"].startswith("confluent-kafka") and py["records_consumed"] == 200000
    assert py.keys() == got.keys()


def test_loadgen_client_options_and_shapes(broker: BrokerProcess, loadgen: Path) -> None:
    """--client loadgen honours the options it is given, and prints what the other clients print."""
    out = _bench(
        broker, "produce", "--client", "loadgen", "--topic", "lg", "--partitions", "2", "--num-records", "6000",
        "--record-size", "250", "--throughput", "10000", "--acks", "1", "--compression", "lz4",
        "--producer-props", "linger.ms=2", "batch.size=32768", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout)
    assert sent["client"].startswith("odradek_loadgen")
    assert sent["records_sent"] == 6000 and sent["records_failed"] == 0 and sent["bytes"] == 6000 * 250
    assert (sent["acks"], sent["compression"], sent["throughput_target"]) == ("1", "lz4", 10000)
    assert sent["records_per_sec"] < 12000, sent  # paced: 6,000 records at 10,000/s take >= 0.6 s
    assert sum(_end_offsets(broker, "lg", 2)) == 6000
    out = _bench(
        broker, "produce", "--client", "confluent", "--topic", "lg", "--num-records", "10", "--record-size", "250",
        "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout).keys() == sent.keys()
    assert sum(_end_offsets(broker, "lg", 2)) == 6010

    out = _bench(broker, "consume", "--client", "loadgen", "--topic", "lg", "--num-records", "6010",
                 "--consumer-props", "fetch.max.bytes=1048576", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["records_consumed"] == got["records_expected"] == 6010 and got["bytes"] == 6010 * 250
    assert got["group"] is None  # assign(), no consumer group
    # more than there is: gives up after --timeout seconds without a record, exit 1
    out = _bench(broker, "consume", "--client", "loadgen", "--topic", "lg", "--num-records", "7000",
                 "--timeout", "1", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["records_consumed"] == 6010
    assert "6010 of 7000" in out.stderr

    # text output: Kafka's lines, whichever client
    out = _bench(broker, "produce", "--client", "loadgen", "--topic", "lg", "--num-records", "100",
                 "--record-size", "10")
    assert out.returncode == 0, out.stderr
    assert PRODUCE_SUMMARY.match(out.stdout.strip()) and out.stdout.startswith("100 records sent"), out.stdout
    out = _bench(broker, "consume", "--client", "loadgen", "--topic", "lg", "--num-records", "100")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header == CONSUME_HEADER and CONSUME_ROW.match(row), row

    e2e = {}
    for client in ("loadgen", "confluent"):
        out = _bench(broker, "end-to-end", "--client", client, "--topic", "lg-e2e", "--num-records", "40",
                     "--record-size", "64", "--json")
        assert out.returncode == 0, out.stderr
        e2e[client] = json.loads(out.stdout)
    assert e2e["loadgen"]["client"].startswith("odradek_loadgen") and e2e["loadgen"]["records"] == 40
    assert 0 < e2e["loadgen"]["p50_ms"] <= e2e["loadgen"]["p99_ms"] <= e2e["loadgen"]["max_latency_ms"]
    assert e2e["loadgen"].keys() == e2e["confluent"].keys()
    assert sum(_end_offsets(broker, "lg-e2e", 1)) == 80

    # a bad setting: one line, exit 1
    out = _bench(broker, "produce", "--client", "loadgen", "--topic", "lg", "--num-records", "10",
                 "--record-size", "10", "--producer-props", "linger.ms=soon")
    assert out.returncode == 1 and out.stderr.startswith("odradek bench: load generator: linger.ms=soon")
    assert len(out.stderr.strip().splitlines()) == 1


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


def test_client_choice(loadgen: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    produce = ("produce", "--num-records", "1", "--record-size", "1")
    assert bench._client_kind(_args(*produce)) == "loadgen"
    assert bench._client_kind(_args(*produce, "--client", "odradek")) == "odradek"
    assert capsys.readouterr().err == ""
    # what the load generator cannot do: the default runs confluent-kafka and says so, loadgen refuses
    for argv in (
        ("produce", "--num-records", "1", "--payload-file", "x"),
        ("consume", "--group", "g"),
        ("consume", "--from-latest"),
        ("end-to-end", "--progress"),
    ):
        assert bench._client_kind(_args(*argv)) == "confluent"
        err = capsys.readouterr().err
        assert err.startswith("odradek bench: the load generator cannot honour --") and "confluent-kafka" in err
        with pytest.raises(bench.BenchError, match="--client loadgen cannot honour"):
            bench._client_kind(_args(*argv, "--client", "loadgen"))
    assert bench._client_kind(_args("consume", "--no-progress")) == "loadgen"
    # without gcc or the headers: confluent-kafka, quietly; --client loadgen is an error
    def unavailable() -> Path:
        raise _loadgen.LoadgenUnavailable("no C compiler")

    monkeypatch.setattr(_loadgen, "missing", lambda: "no C compiler")
    monkeypatch.setattr(_loadgen, "binary", unavailable)
    assert bench._client_kind(_args(*produce)) == "confluent"
    assert capsys.readouterr().err == ""
    with pytest.raises(bench.BenchError, match="--client loadgen: no C compiler"):
        bench._client_kind(_args(*produce, "--client", "loadgen"))


def test_build_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ODRADEK_LOADGEN_BUILD_DIR", str(tmp_path / "explicit"))
    assert _loadgen.build_dir() == tmp_path / "explicit"
    monkeypatch.delenv("ODRADEK_LOADGEN_BUILD_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert _loadgen.build_dir() == tmp_path / "cache" / "odradek" / "loadgen"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _loadgen.build_dir() == tmp_path / "home" / ".cache" / "odradek" / "loadgen"
    # the source ships in the package, next to the module that builds it
    assert _loadgen.SOURCE.is_file() and _loadgen.SOURCE.parent.parent == Path(bench.__file__).parent


def test_text_output_in_kafkas_shape(broker: BrokerProcess) -> None:
    # throttled to 10,000 records/s: 1 s, with a progress line every 0.2 s
    out = _bench(
        broker, "produce", "--topic", "text", "--num-records", "10000", "--record-size", "50",
        "--throughput", "10000", "--progress", "--reporting-interval", "0.2", "--acks", "1",
        "--compression", "lz4", "--producer-props", "linger.ms=2", "batch.size=32768",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # progress lines need a Python client: confluent-kafka ran, and a note said so
    assert "the load generator cannot honour --progress: running confluent-kafka instead" in out.stderr
    lines = out.stdout.splitlines()
    assert PRODUCE_SUMMARY.match(lines[-1]), lines[-1]
    assert PRODUCE_SUMMARY.match(lines[-1]).group(1) == "10000"  # type: ignore[union-attr]
    progress = lines[:-1]
    assert len(progress) >= 2 and all(PRODUCE_PROGRESS.match(line) for line in progress), lines
    # the rate was held: 10,000 records took at least ~1 s
    rate = float(lines[-1].split(" records/sec")[0].split(", ")[1])
    assert rate < 12000, lines[-1]

    out = _bench(broker, "consume", "--topic", "text", "--group", "perf-text")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header == CONSUME_HEADER
    m = CONSUME_ROW.match(row)
    assert m is not None and m.group(1) == "10000", row
    # without a terminal there is nothing but the summary
    out = _bench(broker, "produce", "--topic", "text", "--num-records", "10", "--record-size", "10")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 1, out


def test_odradek_client_payload_file_and_end_to_end(broker: BrokerProcess, tmp_path: Path) -> None:
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbravo\ncharlie\n")
    out = _bench(
        broker, "produce", "--client", "odradek", "--topic", "own", "--num-records", "5000",
        "--payload-file", str(payloads), "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout)
    assert sent["records_sent"] == 5000 and sent["client"].startswith("odradek")
    assert 5 * 5000 <= sent["bytes"] <= 7 * 5000

    out = _bench(broker, "consume", "--client", "odradek", "--topic", "own", "--num-records", "5000", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["records_consumed"] == 5000

    for client in ("confluent", "odradek"):
        out = _bench(broker, "end-to-end", "--client", client, "--topic", f"e2e-{client}", "--num-records", "50",
                     "--json")
        assert out.returncode == 0, out.stderr
        e2e = json.loads(out.stdout)
        assert e2e["records"] == 50 and 0 < e2e["p50_ms"] <= e2e["max_latency_ms"]
    out = _bench(broker, "end-to-end", "--topic", "e2e-text", "--num-records", "20")
    assert out.returncode == 0, out.stderr
    assert re.match(r"^Avg latency: [\d.]+ ms\nPercentiles: 50th = [\d.]+, 95th = ", out.stdout), out.stdout


def test_errors_are_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "odradek", "bench", "produce", "--num-records", "10"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1 and out.stderr.strip() == "odradek bench: --record-size or --payload-file is required"


def test_loadgen_consume_readies_the_group_coordinator_before_the_read(
    tmp_path: Path, loadgen: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a fresh broker the load generator's consumer (it has a group.id) would create the group
    metadata topic inside the measured read: the tool makes the coordinator ready first."""
    from odradek.cli.__main__ import main

    with BrokerProcess(tmp_path / "data") as b:
        p = ck.Producer({"bootstrap.servers": b.bootstrap})
        for i in range(1000):
            p.produce("fresh", b"%d" % i)
        assert p.flush(30) == 0
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert "__consumer_offsets" not in admin.list_topics(timeout=30).topics  # nothing made it yet
        seen: list[bool] = []
        real = _loadgen.run_consume

        def run_consume(*args: object, **kwargs: object) -> dict[str, object]:
            # what an independent client sees as the read starts: the topic exists and the
            # coordinator answers (not COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS)
            group = admin.describe_consumer_groups([_loadgen.CONSUMER_GROUP], request_timeout=5)
            try:
                group[_loadgen.CONSUMER_GROUP].result(10)
                answered = True
            except ck.KafkaException:
                answered = False
            seen.append("__consumer_offsets" in admin.list_topics(timeout=30).topics and answered)
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(_loadgen, "run_consume", run_consume)
        code = main(["bench", "consume", "--topic", "fresh", "--json", "--bootstrap-server", b.bootstrap])
        out = capsys.readouterr().out
        assert code == 0
        assert json.loads(out)["records_consumed"] == 1000
        assert seen == [True]
