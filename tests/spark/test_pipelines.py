"""The example pipelines of ``examples/pipelines``, end to end on the shared broker and Spark
session: events from each bundled generator go to the broker, the pipeline's streaming
queries run with ``Trigger.AvailableNow``, and every value they write (topics and Parquet)
is compared with what this file computes on its own from the generated events.

What a streaming query in append mode emits is what the watermark has closed: a window or a
session whose end is at or before ``max(event time) - delay``, the delay each pipeline
declares.  The generators delay events by less than that, so no event is dropped as late and
every closed window must be exact.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import importlib
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.testing import BrokerProcess

pytestmark = pytest.mark.slow

MINUTE = 60_000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pipelines() -> SimpleNamespace:
    from odradek.cli.pipeline import load_examples

    package = load_examples(ROOT / "examples" / "pipelines")
    modules = {name: importlib.import_module(f"{package.__name__}.{name}") for name in package.PIPELINES}
    common = importlib.import_module(f"{package.__name__}._common")
    return SimpleNamespace(**modules, common=common, names=package.PIPELINES)


def _settings(pipelines: SimpleNamespace, broker: BrokerProcess, tmp_path: Path) -> Any:
    prefix = f"p{uuid.uuid4().hex[:8]}-"
    return pipelines.common.Settings(bootstrap=broker.bootstrap, output=tmp_path / "out", prefix=prefix, available_now=True)


def _run(spark: Any, module: Any, settings: Any, timeout: float = 240.0) -> None:
    """Start the pipeline's queries and wait (bounded) until they have caught up and ended."""
    queries = module.start(spark, settings)
    try:
        for q in queries:
            q.awaitTermination(timeout)
    finally:
        still = [q.name for q in queries if q.isActive]
        for q in queries:
            if q.isActive:
                q.stop()
    assert not still, f"queries still running after {timeout} s: {still}"
    for q in queries:
        assert q.exception() is None, q.exception()


class Runner:
    """Runs a pipeline until caught up: in the tests' ``local[2]`` session, or (``master`` set)
    as ``odradek pipeline run --master spark://...`` on the standalone cluster, a driver process
    of its own whose executors are the workers'."""

    def __init__(self, spark: Any, master: str | None) -> None:
        self.spark = spark
        self.master = master

    def __call__(self, module: Any, settings: Any) -> None:
        if self.master is None:
            _run(self.spark, module, settings)
            return
        assert (settings.starting_offsets, settings.max_offsets_per_trigger, settings.available_now) == ("earliest", None, True)
        name = module.__name__.rsplit(".", 1)[1]
        self.cli([name, "--bootstrap-server", settings.bootstrap, "--prefix", settings.prefix, "--output", str(settings.output)])

    def cli(self, args: list[str]) -> None:
        """``odradek pipeline run ARGS --available-now`` (and ``--master``), asserting it succeeds."""
        if self.master is None:
            from odradek.cli.__main__ import main

            assert main(["pipeline", "run", *args, "--available-now", "--timeout", "240"]) == 0
            return
        from .standalone import spark_env

        cmd = [sys.executable, "-m", "odradek", "pipeline", "run", *args, "--available-now", "--timeout", "300"]
        result = subprocess.run(
            [*cmd, "--master", self.master], cwd=ROOT, env=spark_env(), capture_output=True, text=True, timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "micro-batches" in result.stdout, result.stdout


@pytest.fixture(params=["local", "standalone"])
def run_pipeline(request: pytest.FixtureRequest, spark: Any) -> Runner:
    """Each pipeline test runs twice: on ``local[2]`` and on the Spark standalone cluster."""
    if request.param == "local":
        return Runner(spark, None)
    return Runner(spark, request.getfixturevalue("spark_standalone").url)


def _prepare(pipelines: SimpleNamespace, module: Any, settings: Any, events: Iterable[Any]) -> None:
    pipelines.common.ensure_topics(settings.bootstrap, module.topics(settings))
    pipelines.common.publish(settings.bootstrap, settings.topic(module.INPUT), events)


def _ms(text: str) -> int:
    """ISO 8601 (``...Z`` or an offset) as epoch milliseconds."""
    return round(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _minute(ms: int) -> int:
    return ms - ms % MINUTE


def _parquet(spark: Any, path: str, timestamps: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Rows of a Parquet directory, timestamps as epoch milliseconds."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(path)
    ts = set(timestamps)
    return [r.asDict() for r in df.select(*[F.unix_millis(c).alias(c) if c in ts else F.col(c) for c in df.columns]).collect()]


def _records(bootstrap: str, topic: str, timeout: float = 60.0) -> list[tuple[str, dict[str, Any], int, int]]:
    """(key, JSON value, partition, offset) of every record of ``topic``, read with
    confluent-kafka up to each partition's high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[str, dict[str, Any], int, int]] = []
        position = dict.fromkeys(parts, 0)
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p] for p in parts):
            assert time.monotonic() < deadline, f"timed out reading {topic}: at {position}, end {ends}"
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    out.append((m.key().decode(), json.loads(m.value()), m.partition(), m.offset()))
                    position[m.partition()] = m.offset() + 1
    finally:
        c.close()
    return out


def test_generators_are_deterministic_and_use_event_time(pipelines: SimpleNamespace) -> None:
    for name in pipelines.names:
        module = getattr(pipelines, name)
        a = module.generate(200, 5, 1_700_000_000_000)
        assert len(a) == 200
        assert a == module.generate(200, 5, 1_700_000_000_000)
        assert a != module.generate(200, 6, 1_700_000_000_000)
        assert min(e.timestamp for e in a) >= 1_700_000_000_000
        assert len({e.timestamp for e in a}) > 100


def test_pipeline_list_finds_the_examples_from_another_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_EXAMPLES"}
    out = subprocess.run(
        [sys.executable, "-m", "odradek", "pipeline", "list"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()] == ["activity", "logs", "metrics", "articles"]
    missing = subprocess.run(
        [sys.executable, "-m", "odradek", "pipeline", "list", "--examples", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2
    assert "no examples/pipelines directory found" in missing.stderr
    unknown = subprocess.run(
        [sys.executable, "-m", "odradek", "pipeline", "run", "nosuch"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert unknown.returncode == 2
    assert "unknown pipeline 'nosuch'" in unknown.stderr


class _Query:
    """A query that has ended, with ``error`` (None: it caught up)."""

    def __init__(self, name: str, error: Exception | None) -> None:
        self.name, self.error = name, error
        self.isActive = False
        self.recentProgress: list[dict[str, Any]] = []

    def exception(self) -> Exception | None:
        return self.error

    def stop(self) -> None:
        raise AssertionError("an ended query is not stopped")

    def awaitTermination(self, _timeout: float) -> None:
        return None


class _FailingQuery(_Query):
    """A query that runs until awaited and then fails as PySpark reports it: ``awaitTermination``
    raises the failure (a StreamingQueryException), which ``exception()`` then returns."""

    def __init__(self, name: str, error: Exception) -> None:
        super().__init__(name, None)
        self.isActive = True
        self.failure = error

    def awaitTermination(self, _timeout: float) -> None:
        self.isActive, self.error = False, self.failure
        raise self.failure


@pytest.mark.parametrize("raises", [False, True], ids=["ended", "raises-when-awaited"])
@pytest.mark.parametrize(("fails", "restarts", "code", "starts"), [(1, 2, 0, 2), (2, 2, 0, 3), (3, 2, 1, 3), (1, 0, 1, 1)])
def test_a_failed_query_starts_the_pipeline_again_from_its_checkpoints(
    spark: Any, broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    fails: int, restarts: int, code: int, starts: int, raises: bool,
) -> None:
    """Spark restarts no failed query (one whose Python worker did not start within Spark's fixed
    10 s on a loaded machine stays failed): ``odradek pipeline run`` starts the pipeline's queries
    again, up to ``--restarts`` times, and fails only when the last start failed too."""
    from odradek.cli.pipeline import load_examples

    runner = importlib.import_module(f"{load_examples(ROOT / 'examples' / 'pipelines').__name__}.runner")
    started: list[int] = []

    def start(_spark: Any, _settings: Any) -> list[_Query]:
        started.append(len(started))
        failing = len(started) <= fails
        error = RuntimeError("Python worker failed to connect back.")
        if failing and raises:
            return [_Query("ok", None), _FailingQuery("flaky", error)]
        return [_Query("ok", None), _Query("flaky", error if failing else None)]

    module = SimpleNamespace(topics=lambda _s: [], start=start, outputs=lambda _s: ["somewhere"])
    monkeypatch.setattr(runner, "load", lambda _name: module)
    out = io.StringIO()
    got = runner.run("activity", bootstrap=broker.bootstrap, output=tmp_path, available_now=True, timeout=60,
                     restarts=restarts, out=out)
    assert (got, len(started)) == (code, starts), out.getvalue()
    assert out.getvalue().count("restarting the queries from their checkpoints") == starts - 1


# ---------------------------------------------------------------------------------------------
# website activity tracking


def test_activity_page_view_counts_and_sessions(
    spark: Any, broker: BrokerProcess, tmp_path: Path, pipelines: SimpleNamespace, run_pipeline: Runner
) -> None:
    activity = pipelines.activity
    settings = _settings(pipelines, broker, tmp_path)
    events = activity.generate(600, seed=11, start_ms=1_710_000_000_000)
    _prepare(pipelines, activity, settings, events)
    run_pipeline(activity, settings)

    views = [json.loads(e.value) for e in events]
    for v in views:
        v["t"] = _ms(v["ts"])
    watermark = max(v["t"] for v in views) - 2 * MINUTE

    # page views per page per minute, for the minutes the watermark has closed
    per_minute: dict[tuple[int, str], list[str]] = defaultdict(list)
    for v in views:
        per_minute[(_minute(v["t"]), v["page"])].append(v["user_id"])
    counts = {
        (start, page, start + MINUTE): (len(users), len(set(users)))
        for (start, page), users in per_minute.items()
        if start + MINUTE <= watermark
    }
    assert len(counts) > 100 and any(n > 1 for n, _ in counts.values()) and any(u > 1 for _, u in counts.values())

    rows = _parquet(spark, settings.path("activity", "page_view_counts"), ["window_start", "window_end"])
    got = {(r["window_start"], r["page"], r["window_end"]): (r["views"], r["visitors"]) for r in rows}
    assert len(rows) == len(got)
    assert got == counts
    records = _records(broker.bootstrap, settings.topic("page-view-counts"))
    assert len(records) == len(counts)
    got_topic = {}
    for key, value, _, _ in records:
        assert key == value["page"]
        got_topic[(_ms(value["window_start"]), value["page"], _ms(value["window_end"]))] = (value["views"], value["visitors"])
    assert got_topic == counts

    # sessions: a user's views less than 30 minutes apart, closed 30 minutes after the last
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for v in views:
        by_user[v["user_id"]].append(v)
    sessions = set()
    for user, seen in by_user.items():
        seen.sort(key=lambda v: v["t"])
        groups: list[list[dict[str, Any]]] = [[seen[0]]]
        for v in seen[1:]:
            if v["t"] - groups[-1][-1]["t"] < 30 * MINUTE:
                groups[-1].append(v)
            else:
                groups.append([v])
        for g in groups:
            end = g[-1]["t"] + 30 * MINUTE
            if end <= watermark:
                duration = (g[-1]["t"] - g[0]["t"]) / 1000
                sessions.add((user, g[0]["t"], end, len(g), len({v["page"] for v in g}), g[0]["page"], g[-1]["page"], duration))
    assert len(sessions) > 20 and len({s[0] for s in sessions}) > 10 and any(s[3] > 3 for s in sessions)

    rows = _parquet(spark, settings.path("activity", "user_sessions"), ["session_start", "session_end"])
    got_sessions = [
        (
            r["user_id"],
            r["session_start"],
            r["session_end"],
            r["page_views"],
            r["distinct_pages"],
            r["entry_page"],
            r["exit_page"],
            r["duration_seconds"],
        )
        for r in rows
    ]
    assert len(got_sessions) == len(set(got_sessions))
    assert set(got_sessions) == sessions
    records = _records(broker.bootstrap, settings.topic("user-sessions"))
    got_topic_sessions = set()
    for key, v, _, _ in records:
        assert key == v["user_id"]
        got_topic_sessions.add(
            (
                v["user_id"],
                _ms(v["session_start"]),
                _ms(v["session_end"]),
                v["page_views"],
                v["distinct_pages"],
                v["entry_page"],
                v["exit_page"],
                v["duration_seconds"],
            )
        )
    assert len(records) == len(sessions)
    assert got_topic_sessions == sessions


# ---------------------------------------------------------------------------------------------
# log aggregation, through the command line


LEVELS = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}


def _parse_log_line(line: str) -> tuple[int, str] | None:
    """(event time ms, level) of an application or access-log line; None for anything else."""
    head = line.split(" ", 2)
    if len(head) == 3 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", head[0]):
        level = head[1].upper()
        level = "WARN" if level == "WARNING" else level
        return (_ms(head[0]), level) if level in LEVELS else None
    m = re.match(r'\S+ - - \[([^\]]+)\] "[^"]*" (\d{3}) ', line)
    if m:
        t = dt.datetime.strptime(m.group(1), "%d/%b/%Y:%H:%M:%S %z")
        status = int(m.group(2))
        return round(t.timestamp() * 1000), "ERROR" if status >= 500 else "WARN" if status >= 400 else "INFO"
    return None


def test_logs_error_rates_partitioned_by_date_via_the_cli(
    spark: Any, broker: BrokerProcess, tmp_path: Path, pipelines: SimpleNamespace, run_pipeline: Runner
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}-"
    output = tmp_path / "out"
    run_pipeline.cli(
        [
            "logs",
            "--bootstrap-server",
            broker.bootstrap,
            "--prefix",
            prefix,
            "--output",
            str(output),
            "--generate",
            "400",
            "--seed",
            "4",
            "--start",
            "2024-03-09T23:52:00Z",
        ]
    )

    events = pipelines.logs.generate(400, 4, _ms("2024-03-09T23:52:00Z"))
    parsed = []
    for e in events:
        p = _parse_log_line(e.value.decode(errors="replace"))
        if p is not None:
            parsed.append((e.key.decode(), *p))
    assert len(events) - len(parsed) >= 3  # stack traces and a garbled line are dropped
    watermark = max(t for _, t, _ in parsed) - 2 * MINUTE
    lines: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for service, t, level in parsed:
        lines[(service, _minute(t))].append(level in ("ERROR", "FATAL"))
    expected = {
        (service, start, start + MINUTE, dt.datetime.fromtimestamp(start / 1000, dt.UTC).date()): (
            len(errors),
            sum(errors),
            sum(errors) / len(errors),
        )
        for (service, start), errors in lines.items()
        if start + MINUTE <= watermark
    }
    assert len({k[3] for k in expected}) == 2  # the stream crosses midnight
    assert {k[0] for k in expected} == {"checkout", "auth", "search", "inventory", "gateway"}
    assert max(r for _, _, r in expected.values()) >= 0.5 and min(r for _, _, r in expected.values()) == 0

    path = output / "logs" / "error_rates"
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("date=")) == ["date=2024-03-09", "date=2024-03-10"]
    rows = _parquet(spark, str(path), ["window_start", "window_end"])
    got = {(r["service"], r["window_start"], r["window_end"], r["date"]): (r["lines"], r["errors"], r["error_rate"]) for r in rows}
    assert len(rows) == len(got)
    assert got.keys() == expected.keys()
    for k, (n, errors, rate) in expected.items():
        assert got[k][:2] == (n, errors), k
        assert got[k][2] == pytest.approx(rate, rel=1e-12), k


# ---------------------------------------------------------------------------------------------
# metrics


def _nearest_rank(values: list[float], q: float) -> float:
    """The smallest value with at least ``q`` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _metric_aggregates(events: Iterable[Any], watermark: int) -> dict[tuple[str, str, int], dict[str, Any]]:
    series: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for e in events:
        m = json.loads(e.value)
        series[(m["host"], m["metric"], _minute(_ms(m["ts"])))].append(m["value"])
    return {
        k: {
            "count": len(vs),
            "mean": statistics.fmean(vs),
            "p95": _nearest_rank(vs, 0.95),
            "min": min(vs),
            "max": max(vs),
        }
        for k, vs in series.items()
        if k[2] + MINUTE <= watermark
    }


def _max_event_time(events: Iterable[Any]) -> int:
    return max(_ms(json.loads(e.value)["ts"]) for e in events)


def _check_latest(broker: BrokerProcess, topic: str, expected: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    """The last record of each key of the compacted topic is the newest closed window."""
    newest: dict[tuple[str, str], int] = {}
    for host, metric, start in expected:
        newest[(host, metric)] = max(start, newest.get((host, metric), start))
    latest: dict[str, tuple[int, dict[str, Any]]] = {}
    for key, value, _, offset in _records(broker.bootstrap, topic):
        if key not in latest or offset > latest[key][0]:
            latest[key] = (offset, value)
    assert set(latest) == {f"{h}|{m}" for h, m in newest}
    for (host, metric), start in newest.items():
        value = latest[f"{host}|{metric}"][1]
        want = expected[(host, metric, start)]
        assert (value["host"], value["metric"], _ms(value["window_start"]), _ms(value["window_end"])) == (
            host,
            metric,
            start,
            start + MINUTE,
        )
        assert (value["count"], value["p95"], value["min"], value["max"]) == (want["count"], want["p95"], want["min"], want["max"])
        assert value["mean"] == pytest.approx(want["mean"], rel=1e-12)


def test_metrics_aggregates_and_compacted_latest_values_across_a_restart(
    spark: Any, broker: BrokerProcess, tmp_path: Path, pipelines: SimpleNamespace, run_pipeline: Runner
) -> None:
    from odradek.client import Admin, ConfigResource

    metrics = pipelines.metrics
    settings = _settings(pipelines, broker, tmp_path)
    events = metrics.generate(1200, seed=21, start_ms=1_710_000_000_000)
    first, second = events[:600], events[600:]

    _prepare(pipelines, metrics, settings, first)
    run_pipeline(metrics, settings)
    expected_first = _metric_aggregates(first, _max_event_time(first) - 2 * MINUTE)
    assert len(expected_first) >= 18
    _check_latest(broker, settings.topic("metrics-latest"), expected_first)

    # the same query again (same checkpoint) with the rest of the events
    pipelines.common.publish(settings.bootstrap, settings.topic("metrics"), second)
    run_pipeline(metrics, settings)
    expected = _metric_aggregates(events, _max_event_time(events) - 2 * MINUTE)
    assert len(expected) >= 42 and all(a["count"] >= 19 for a in expected.values())
    assert sum(a["p95"] != a["max"] for a in expected.values()) > len(expected) // 2  # p95 is not just the max

    rows = _parquet(spark, settings.path("metrics", "aggregates"), ["window_start", "window_end"])
    got = {(r["host"], r["metric"], r["window_start"]): r for r in rows}
    assert len(rows) == len(got)
    assert got.keys() == expected.keys()
    for k, want in expected.items():
        r = got[k]
        assert r["window_end"] == k[2] + MINUTE
        assert (r["count"], r["p95"], r["min"], r["max"]) == (want["count"], want["p95"], want["min"], want["max"]), k
        assert r["mean"] == pytest.approx(want["mean"], rel=1e-12), k

    _check_latest(broker, settings.topic("metrics-latest"), expected)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        resource = ConfigResource("topic", settings.topic("metrics-latest"))
        configs = admin.describe_configs([resource])
    assert next(iter(configs.values()))["cleanup.policy"].value == "compact"


# ---------------------------------------------------------------------------------------------
# the seeds' stream processing: articles -> normalised -> deduplicated -> articles-clean


def _normalise(item: dict[str, Any]) -> dict[str, Any] | None:
    m = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]+)([^?#]*)", item["url"].strip())
    title = " ".join(html.unescape(re.sub(r"<[^>]*>", " ", item["title"])).split())
    if not m or not title:
        return None
    host = m.group(1).lower().removeprefix("www.")
    url = "https://" + host + m.group(2).rstrip("/")
    body = " ".join(html.unescape(re.sub(r"<[^>]*>", " ", item["body"])).split())
    return {
        "id": hashlib.sha256(url.encode()).hexdigest()[:16],
        "url": url,
        "title": title,
        "body": body,
        "words": len(body.split()),
        "published": item["published"],
    }


def _expected_articles(events: Iterable[Any]) -> tuple[dict[str, dict[str, Any]], dict[str, set[str]]]:
    articles: dict[str, dict[str, Any]] = {}
    feeds: dict[str, set[str]] = defaultdict(set)
    for e in events:
        item = json.loads(e.value)
        a = _normalise(item)
        if a is None:
            continue
        assert articles.setdefault(a["id"], a) == a  # every copy normalises the same
        feeds[a["id"]].add(item["feed"])
    return articles, feeds


def _check_articles(broker: BrokerProcess, topic: str, articles: dict[str, dict[str, Any]], feeds: dict[str, set[str]]) -> None:
    records = _records(broker.bootstrap, topic)
    assert len(records) == len(articles)  # each article once
    got = {}
    for key, value, _, _ in records:
        assert key == value["id"]
        assert value.pop("feed") in feeds[key]
        value["published"] = _ms(value["published"])
        got[key] = value
    want = {k: {**a, "published": _ms(a["published"])} for k, a in articles.items()}
    assert got == want


def test_articles_are_normalised_and_deduplicated_across_a_restart(
    spark: Any, broker: BrokerProcess, tmp_path: Path, pipelines: SimpleNamespace, run_pipeline: Runner
) -> None:
    articles = pipelines.articles
    settings = _settings(pipelines, broker, tmp_path)
    events = articles.generate(400, seed=8, start_ms=1_710_000_000_000)
    first, second = events[:200], events[200:]

    _prepare(pipelines, articles, settings, first)
    run_pipeline(articles, settings)
    expected_first, feeds_first = _expected_articles(first)
    _check_articles(broker, settings.topic("articles-clean"), expected_first, feeds_first)

    pipelines.common.publish(settings.bootstrap, settings.topic("articles"), second)
    run_pipeline(articles, settings)
    expected, feeds = _expected_articles(events)
    # copies in the second half of articles first seen in the first half are dropped too
    assert len(set(expected) - set(expected_first)) < sum(1 for e in second if _normalise(json.loads(e.value)) is not None)
    assert any(a in expected_first for e in second if (a := (_normalise(json.loads(e.value)) or {}).get("id")))
    assert 0.3 * len(events) < len(expected) < 0.8 * len(events)
    assert any(len(f) > 1 for f in feeds.values())
    assert any(("&" in a["title"] or '"' in a["title"] or "<" in a["title"]) for a in expected.values())
    _check_articles(broker, settings.topic("articles-clean"), expected, feeds)
