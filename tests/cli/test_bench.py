"""``odradek bench produce|consume|end-to-end`` against a real broker: counts, output shapes, JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("bench") / "data", overrides={"group.initial.rebalance.delay.ms": 0}) as b:
        yield b


def _bench(broker: BrokerProcess, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "bench", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_produce_then_consume_counts(broker: BrokerProcess) -> None:
    out = _bench(
        broker, "produce", "--topic", "perf", "--partitions", "3", "--num-records", "200000",
        "--record-size", "100", "--throughput", "-1", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout)
    assert sent["records_sent"] == 200000 and sent["records_failed"] == 0
    assert sent["bytes"] == 200000 * 100 and sent["partitions"] == 3
    assert sent["client"].startswith("confluent-kafka")
    assert sent["records_per_sec"] > 0 and 0 <= sent["p50_ms"] <= sent["p99_ms"] <= sent["max_latency_ms"]

    out = _bench(broker, "consume", "--topic", "perf", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["records_consumed"] == got["records_expected"] == 200000
    assert round(got["data_consumed_mb"] * 1024 * 1024) == 200000 * 100 == got["bytes"]
    assert got["fetch_time_ms"] >= 0 and got["rebalance_time_ms"] >= 0


def test_text_output_in_kafkas_shape(broker: BrokerProcess) -> None:
    # throttled to 10,000 records/s: 1 s, with a progress line every 0.2 s
    out = _bench(
        broker, "produce", "--topic", "text", "--num-records", "10000", "--record-size", "50",
        "--throughput", "10000", "--progress", "--reporting-interval", "0.2", "--acks", "1",
        "--compression", "lz4", "--producer-props", "linger.ms=2", "batch.size=32768",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
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
