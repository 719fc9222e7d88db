"""The metric registry on its own: counters become Prometheus families under Kafka's JMX-exporter names."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from odradek.metrics import FETCH_FOLLOWER, BrokerMetrics, Histogram, MetricsCollector, make_registry, render


def _names(key: int) -> str:
    return {0: "Produce", 1: "FetchConsumer", FETCH_FOLLOWER: "FetchFollower"}.get(key, str(key))


def _scrape(m: BrokerMetrics) -> dict[str, list]:
    text, ctype = render(make_registry(MetricsCollector(m, _names, lambda k: {0: "Produce", 1: "Fetch"}[k]), process=False))
    assert ctype.startswith("text/plain")
    return {f.name: f.samples for f in text_string_to_metric_families(text.decode())}


def test_histogram_quantiles_interpolate_within_buckets() -> None:
    h = Histogram((1.0, 2.0, 4.0))
    assert h.quantile(0.5) == 0.0
    for v in (0.5, 1.5, 1.5, 3.0):
        h.observe(v)
    assert h.count == 4
    assert h.counts == [1, 2, 1, 0]
    assert h.sum == 6.5
    assert 1.0 <= h.quantile(0.5) <= 2.0
    assert 2.0 <= h.quantile(0.99) <= 4.0
    h.observe(100.0)  # above the last bound: reported as the last bound
    assert h.quantile(1.0) == 4.0


def test_topic_meters_have_a_broker_wide_sample_and_one_per_topic() -> None:
    m = BrokerMetrics()
    m.topic("a").messages_in += 3
    m.topic("b").messages_in += 4
    m.topic("a").bytes_in += 100
    samples = _scrape(m)
    messages = {s.labels.get("topic"): s.value for s in samples["kafka_server_brokertopicmetrics_messagesin"]}
    assert messages == {None: 7, "a": 3, "b": 4}
    assert all(s.name.endswith("_total") for s in samples["kafka_server_brokertopicmetrics_bytesin"])


def test_request_metrics_by_name_version_and_error() -> None:
    m = BrokerMetrics()
    m.request_done(0, 9, 1.2)
    m.request_done(0, 9, 3.0)
    m.request_done(FETCH_FOLLOWER, 12, 500.0)
    m.response_error(0, 6)
    m.error(0, 10, 2)
    samples = _scrape(m)
    requests = {(s.labels["request"], s.labels["version"]): s.value for s in samples["kafka_network_requestmetrics_requests"]}
    assert requests == {("Produce", "9"): 2, ("FetchFollower", "12"): 1}
    errors = samples["kafka_network_requestmetrics_errors"]
    assert {(s.labels["request"], s.labels["error"]): s.value for s in errors} == {
        ("Produce", "NONE"): 1, ("Produce", "NOT_LEADER_OR_FOLLOWER"): 1, ("Produce", "MESSAGE_TOO_LARGE"): 2,
        ("Fetch", "NONE"): 1,
    }
    total = samples["kafka_network_requestmetrics_totaltimems"]
    counts = {s.labels["request"]: s.value for s in total if s.name.endswith("_count")}
    assert counts == {"Produce": 2, "FetchFollower": 1}
    quantiles = [s for s in total if s.labels.get("request") == "Produce" and "quantile" in s.labels]
    assert {s.labels["quantile"] for s in quantiles} >= {"0.5", "0.99"}
    buckets = [s for s in samples["odradek_request_total_time_seconds"] if s.name.endswith("_bucket")]
    inf = [s.value for s in buckets if s.labels["le"] == "+Inf" and s.labels["request"] == "Produce"]
    assert inf == [2]


def test_process_metrics_are_exported() -> None:
    text = render(make_registry(MetricsCollector(BrokerMetrics(), str, str)))[0].decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds", "python_gc_collections"} <= names


def test_a_snapshot_does_not_move_with_the_counters() -> None:
    m = BrokerMetrics()
    m.topic("a").messages_in += 1
    m.request_done(0, 9, 1.0)
    m.count(m.connections_created, "PLAINTEXT")
    snap = m.snapshot()
    m.topic("a").messages_in += 1
    m.topic("b").bytes_in += 10
    m.request_done(0, 9, 2.0)
    m.request_done(3, 12, 2.0)
    m.count(m.connections_created, "PLAINTEXT")
    m.isr_shrinks += 1
    assert snap.topics["a"].messages_in == 1 and "b" not in snap.topics
    assert snap.requests == {9: 1} and snap.request_time[0].count == 1 and 3 not in snap.request_time
    assert snap.connections_created == {"PLAINTEXT": 1}
    assert snap.isr_shrinks == 0
    assert m.topics["a"].messages_in == 2 and m.request_time[0].count == 2
